# The installed tree works for a user (issue 16): this build installed into a fresh prefix
# (install_tree), then examples/allreduce_shm.c built out of tree against it with pkg-config and with
# find_package(relaycc), and run (4 shm ranks, one helper, data checked). Reuses this build's outputs, so
# it costs an install and two small compiles (about 5 s).
set(RELAY_INSTALL_SH ${CMAKE_CURRENT_LIST_DIR}/test_install.sh)
set(RELAY_TEST_PREFIX ${CMAKE_BINARY_DIR}/test-install)
set(RELAY_INSTALL_ARGS ${RELAY_TEST_PREFIX} ${CMAKE_INSTALL_LIBDIR} ${PROJECT_VERSION})
# The example is user code held to the project's warnings. A sanitized library needs its runtime loaded
# first: the example is then built the same way.
set(RELAY_EXAMPLE_FLAGS -Wall -Wextra)
if(RELAY_WERROR)
  list(APPEND RELAY_EXAMPLE_FLAGS -Werror)
endif()
if(RELAY_SANITIZE)
  list(APPEND RELAY_EXAMPLE_FLAGS -fsanitize=address,undefined -fno-omit-frame-pointer)
endif()
add_test(NAME install_tree COMMAND ${RELAY_INSTALL_SH} install ${CMAKE_BINARY_DIR} ${RELAY_INSTALL_ARGS})
add_test(NAME example_pkgconfig
         COMMAND ${RELAY_INSTALL_SH} pkgconfig ${RELAY_INSTALL_ARGS} ${CMAKE_SOURCE_DIR}/examples/allreduce_shm.c
                 ${CMAKE_BINARY_DIR}/test-example-pkgconfig ${CMAKE_C_COMPILER} ${RELAY_EXAMPLE_FLAGS})
add_test(NAME example_find_package
         COMMAND ${RELAY_INSTALL_SH} cmake ${RELAY_INSTALL_ARGS} ${CMAKE_SOURCE_DIR}/examples
                 ${CMAKE_BINARY_DIR}/test-example-cmake ${CMAKE_COMMAND} ${CMAKE_C_COMPILER} ${RELAY_EXAMPLE_FLAGS})
set_tests_properties(install_tree PROPERTIES LABELS cpu TIMEOUT 120 FIXTURES_SETUP relaycc_installed)
set_tests_properties(example_pkgconfig example_find_package
                     PROPERTIES LABELS cpu TIMEOUT 180 FIXTURES_REQUIRED relaycc_installed)
