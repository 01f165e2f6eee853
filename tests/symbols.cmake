# librelaycc.so exports the public API and nothing else: `nm -D --defined-only` against the functions
# declared RELAYCC_API in include/relaycc.h and, when the NCCL transport is built, include/relaycc_nccl.h.
find_program(RELAY_NM NAMES nm)
set(RELAY_API_HEADERS ${CMAKE_SOURCE_DIR}/include/relaycc.h ${CMAKE_SOURCE_DIR}/include/relaycc_nccl.h)
set(RELAY_API_REQUIRED ${CMAKE_SOURCE_DIR}/include/relaycc.h)
if(RELAY_HAVE_GPU)
  list(APPEND RELAY_API_REQUIRED ${CMAKE_SOURCE_DIR}/include/relaycc_nccl.h)
endif()
add_test(NAME symbols_public_only
         COMMAND ${CMAKE_COMMAND} -DNM=${RELAY_NM} -DLIB=$<TARGET_FILE:relaycc_shared>
                 "-DHEADERS=${RELAY_API_HEADERS}" "-DREQUIRED=${RELAY_API_REQUIRED}"
                 -P ${CMAKE_SOURCE_DIR}/cmake/CheckSymbols.cmake)
set_tests_properties(symbols_public_only PROPERTIES LABELS cpu TIMEOUT 60)

# The library holds no tool or test code: nothing tools/common/*.h declares (the fork launcher,
# relaycc-plan --scatter-parts, the seed's tables, the settings' markdown, the tools' environment knobs;
# functions and extern tables) is defined in librelaycc.a or librelaycc.so; relaycc_toolkit has it all.
file(GLOB RELAY_TOOLKIT_HEADERS ${CMAKE_SOURCE_DIR}/tools/common/*.h)
add_test(NAME symbols_no_tool_code
         COMMAND ${CMAKE_COMMAND} -DNM=${RELAY_NM}
                 "-DLIBS=$<TARGET_FILE:relaycc_static>;$<TARGET_FILE:relaycc_shared>"
                 -DTOOLKIT=$<TARGET_FILE:relaycc_toolkit> "-DHEADERS=${RELAY_TOOLKIT_HEADERS}"
                 -P ${CMAKE_SOURCE_DIR}/cmake/CheckToolOnly.cmake)
set_tests_properties(symbols_no_tool_code PROPERTIES LABELS cpu TIMEOUT 60)
