# TEMP until the packaging branch lands: a minimal librelaycc.so for the Python package and its in-tree
# tests. The packaging branch defines the real `relaycc_shared` (SONAME, public API only); on merge drop
# this file and the two `include()`s of it (tests/python.cmake, python/CMakeLists.txt).
if(NOT TARGET relaycc_shared)
  add_library(relaycc_shared SHARED ${RELAY_SRC})
  set_target_properties(relaycc_shared PROPERTIES OUTPUT_NAME relaycc SOVERSION 0
                        CUDA_SEPARABLE_COMPILATION OFF)
  target_include_directories(relaycc_shared PUBLIC ${CMAKE_SOURCE_DIR}/include PRIVATE ${CMAKE_SOURCE_DIR}/src)
  target_link_libraries(relaycc_shared PUBLIC m pthread rt dl)
  if(RELAY_HAVE_CUDA)
    target_compile_definitions(relaycc_shared PUBLIC RELAY_HAVE_NCCL=1)
    target_include_directories(relaycc_shared PUBLIC ${NCCL_INCLUDE_DIR})
    target_link_libraries(relaycc_shared PUBLIC ${NCCL_LIBRARY} CUDA::cudart)
  endif()
endif()
