# librelaycc.so exports the public API and nothing else: `nm -D --defined-only` against the functions
# declared RELAYCC_API in include/relaycc.h and, when the NCCL transport is built, include/relaycc_nccl.h.
find_program(RELAY_NM NAMES nm)
set(RELAY_API_HEADERS ${CMAKE_SOURCE_DIR}/include/relaycc.h ${CMAKE_SOURCE_DIR}/include/relaycc_nccl.h)
set(RELAY_API_REQUIRED ${CMAKE_SOURCE_DIR}/include/relaycc.h)
if(RELAY_HAVE_CUDA)
  list(APPEND RELAY_API_REQUIRED ${CMAKE_SOURCE_DIR}/include/relaycc_nccl.h)
endif()
add_test(NAME symbols_public_only
         COMMAND ${CMAKE_COMMAND} -DNM=${RELAY_NM} -DLIB=$<TARGET_FILE:relaycc_shared>
                 "-DHEADERS=${RELAY_API_HEADERS}" "-DREQUIRED=${RELAY_API_REQUIRED}"
                 -P ${CMAKE_SOURCE_DIR}/cmake/CheckSymbols.cmake)
set_tests_properties(symbols_public_only PROPERTIES LABELS cpu TIMEOUT 60)
