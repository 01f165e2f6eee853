# The shim's CPU tests (included from src/shim/CMakeLists.txt): a fake libnccl.so.2 and an "NCCL program"
# linked to it, run with librelaycc_shim.so preloaded. Ranks are forked processes; no GPU is used.
set(RELAY_SHIM_TESTS ${PROJECT_SOURCE_DIR}/tests/shim)
add_library(relaycc_fakenccl SHARED ${RELAY_SHIM_TESTS}/fake_nccl.c ${RELAY_SHIM_TESTS}/fake_nccl_stubs.c
            ${PROJECT_SOURCE_DIR}/src/reduce_host.c)
target_include_directories(relaycc_fakenccl PRIVATE ${PROJECT_SOURCE_DIR}/include ${RELAY_GEN}/include ${PROJECT_SOURCE_DIR}/src
                           ${NCCL_INCLUDE_DIR} ${CUDAToolkit_INCLUDE_DIRS})
target_link_libraries(relaycc_fakenccl PRIVATE rt m)
# Its own folder, named as the real library: the test binary's DT_NEEDED libnccl.so.2 finds it (rpath).
# A stand-in for libnccl exports NCCL's names (the project builds hidden by default).
set_target_properties(relaycc_fakenccl PROPERTIES C_VISIBILITY_PRESET default OUTPUT_NAME nccl SOVERSION 2
                      LIBRARY_OUTPUT_DIRECTORY ${PROJECT_BINARY_DIR}/fakenccl)

add_executable(test_shim ${RELAY_SHIM_TESTS}/test_shim.c ${PROJECT_SOURCE_DIR}/tests/harness.c
               ${PROJECT_SOURCE_DIR}/tests/colls_common.c)
target_include_directories(test_shim PRIVATE ${PROJECT_SOURCE_DIR}/src ${PROJECT_SOURCE_DIR}/tests
                           ${RELAY_SHIM_TESTS})
target_compile_definitions(test_shim PRIVATE RELAY_NCCL_HEADER="${NCCL_INCLUDE_DIR}/nccl.h")
# relaycc_static, not relaycc_internal: the real libnccl must not come in beside the fake.
target_compile_definitions(test_shim PRIVATE RELAY_HAVE_NCCL=1)
target_link_libraries(test_shim PRIVATE relaycc_static relaycc_fakenccl dl)
add_dependencies(test_shim relaycc_shim)

# Its cases (test_shim --list) run with the shim preloaded, each under its row's settings.
relay_test_cases(test_shim ENVIRONMENT "LD_PRELOAD=$<TARGET_FILE:relaycc_shim>"
                 "ASAN_OPTIONS=verify_asan_link_order=0")

# The routing predicate against the router (no shim involved).
add_executable(test_shim_route ${RELAY_SHIM_TESTS}/test_shim_route.c ${PROJECT_SOURCE_DIR}/tests/harness.c)
target_include_directories(test_shim_route PRIVATE ${PROJECT_SOURCE_DIR}/src ${PROJECT_SOURCE_DIR}/tests)
target_link_libraries(test_shim_route PRIVATE relaycc_internal)
relay_test_cases(test_shim_route)
