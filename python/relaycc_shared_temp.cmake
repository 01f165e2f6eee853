# TEMP until the packaging branch lands: a minimal librelaycc.so for the Python package and its in-tree
# tests. The packaging branch defines the real `relaycc_shared` (SONAME, public API only); on merge drop
# this file and the two `include()`s of it (tests/python.cmake, python/CMakeLists.txt).
# It is the static library's own objects, linked whole, so nothing (nvcc least of all) compiles twice.
if(NOT TARGET relaycc_shared)
  set_target_properties(relaycc PROPERTIES POSITION_INDEPENDENT_CODE ON)
  file(WRITE ${CMAKE_BINARY_DIR}/relaycc_shared_empty.c "/* librelaycc.so: all of librelaycc.a */\n")
  add_library(relaycc_shared SHARED ${CMAKE_BINARY_DIR}/relaycc_shared_empty.c)
  set_target_properties(relaycc_shared PROPERTIES OUTPUT_NAME relaycc SOVERSION 0)
  target_link_libraries(relaycc_shared PRIVATE -Wl,--whole-archive relaycc -Wl,--no-whole-archive)
  target_link_libraries(relaycc_shared PUBLIC m pthread rt dl)
  if(RELAY_HAVE_CUDA)
    target_link_libraries(relaycc_shared PUBLIC ${NCCL_LIBRARY} CUDA::cudart)
  endif()
endif()
