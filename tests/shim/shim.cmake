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

# The same fake as older releases export it: each in fakenccl-<version>/libnccl.so.2, with the names that
# release's nccl.h lacks hidden (a version script) and its version code from ncclGetVersion. The test's
# version cases run the program against one of them (LD_LIBRARY_PATH, test_shim.c). Each list holds what
# that release adds over the one before it; 2.6 (no ncclSend) is one relaycc cannot use.
set(RELAY_FAKE_ADDS_2.28 ncclAlltoAll ncclGather ncclScatter ncclCommRevoke)
set(RELAY_FAKE_ADDS_2.27 ncclCommWindowRegister ncclCommWindowDeregister ncclCommShrink
    ncclCommInitRankScalable ncclGroupSimulateEnd ncclResetDebugInit)
set(RELAY_FAKE_ADDS_2.21 ncclMemAlloc ncclMemFree ncclCommRegister ncclCommDeregister)
set(RELAY_FAKE_ADDS_2.18 ncclSend ncclRecv ncclGetLastError ncclCommFinalize ncclCommInitRankConfig
    ncclRedOpCreatePreMulSum ncclRedOpDestroy ncclCommSplit)
set(hidden "")
# Version codes: NCCL_VERSION(2, minor, patch) = 20000 + 100 minor + patch from 2.9 on, 2000 + 100 minor +
# patch before.
set(code_2.28 22809)
set(code_2.27 22707)
set(code_2.21 22105)
set(code_2.18 21805)
set(code_2.6 2604)
foreach(v 2.28 2.27 2.21 2.18 2.6)
  set(map ${PROJECT_BINARY_DIR}/fakenccl-${v}.map)
  set(locals "")
  foreach(n ${hidden})
    string(APPEND locals "    ${n};\n    p${n};\n")
  endforeach()
  file(WRITE ${map} "{\n  global:\n    *;\n  local:\n${locals}    relayDummyLocal_;\n};\n")
  string(REPLACE "." "_" tgt ${v})
  add_library(relaycc_fakenccl_${tgt} SHARED ${RELAY_SHIM_TESTS}/fake_nccl.c
              ${RELAY_SHIM_TESTS}/fake_nccl_stubs.c ${PROJECT_SOURCE_DIR}/src/reduce_host.c)
  target_include_directories(relaycc_fakenccl_${tgt} PRIVATE ${PROJECT_SOURCE_DIR}/include
                             ${RELAY_GEN}/include ${PROJECT_SOURCE_DIR}/src ${NCCL_INCLUDE_DIR}
                             ${CUDAToolkit_INCLUDE_DIRS})
  target_compile_definitions(relaycc_fakenccl_${tgt} PRIVATE FAKE_NCCL_VERSION=${code_${v}})
  target_link_libraries(relaycc_fakenccl_${tgt} PRIVATE rt m)
  target_link_options(relaycc_fakenccl_${tgt} PRIVATE "LINKER:--version-script=${map}")
  set_target_properties(relaycc_fakenccl_${tgt} PROPERTIES C_VISIBILITY_PRESET default OUTPUT_NAME nccl
                        SOVERSION 2 LIBRARY_OUTPUT_DIRECTORY ${PROJECT_BINARY_DIR}/fakenccl-${v}
                        LINK_DEPENDS ${map})
  list(APPEND RELAY_FAKE_VERSIONS relaycc_fakenccl_${tgt})
  list(APPEND hidden ${RELAY_FAKE_ADDS_${v}})
endforeach()

add_executable(test_shim ${RELAY_SHIM_TESTS}/test_shim.c ${PROJECT_SOURCE_DIR}/tests/harness.c
               ${PROJECT_SOURCE_DIR}/tests/colls_common.c)
target_include_directories(test_shim PRIVATE ${PROJECT_SOURCE_DIR}/src ${PROJECT_SOURCE_DIR}/tests
                           ${RELAY_SHIM_TESTS})
target_compile_definitions(test_shim PRIVATE RELAY_NCCL_HEADER="${NCCL_INCLUDE_DIR}/nccl.h"
                           RELAY_FAKE_NCCL_DIR="${PROJECT_BINARY_DIR}")
# relaycc_static, not relaycc_internal: the real libnccl must not come in beside the fake.
target_compile_definitions(test_shim PRIVATE RELAY_HAVE_NCCL=1)
target_link_libraries(test_shim PRIVATE relaycc_toolkit relaycc_static relaycc_fakenccl dl)
add_dependencies(test_shim relaycc_shim ${RELAY_FAKE_VERSIONS})

# Its cases (test_shim --list) run with the shim preloaded, each under its row's settings.
relay_test_cases(test_shim ENVIRONMENT "LD_PRELOAD=$<TARGET_FILE:relaycc_shim>"
                 "ASAN_OPTIONS=verify_asan_link_order=0")

# The routing predicate against the router (no shim involved).
add_executable(test_shim_route ${RELAY_SHIM_TESTS}/test_shim_route.c ${PROJECT_SOURCE_DIR}/tests/harness.c)
target_include_directories(test_shim_route PRIVATE ${PROJECT_SOURCE_DIR}/src ${PROJECT_SOURCE_DIR}/tests)
target_link_libraries(test_shim_route PRIVATE relaycc_internal relaycc_toolkit)
relay_test_cases(test_shim_route)
