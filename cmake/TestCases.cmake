# Test programs declare their cases once, in a table in their source (tests/harness.h, tCase); CMake
# registers one CTest entry per row from what `<program> --list` prints, the pattern of CMake's
# gtest_discover_tests. relay_test_cases(<target> [ENVIRONMENT K=V...]) does it for one program:
#   - a POST_BUILD step runs --list and writes <build>/cases/<target>-cases.cmake (add_test and
#     set_tests_properties lines), so a table CMake cannot read fails the build that made it;
#   - a TEST_INCLUDE_FILES script includes that file when ctest starts, and writes it again first when the
#     program, its parameters or the script are newer (a build dir whose POST_BUILD step did not run, a
#     script edited since): `ctest` in a fresh build dir sees every case.
# ENVIRONMENT is the program's, before each row's own (the shim's preload). A row's @VAR@ (in args and
# wrap) is one of RELAY_CASE_VARS (K=V, set before the first call): a row whose VAR is empty in this
# build (a tool not found) is not registered; an unknown VAR fails the table.
set(RELAY_CASES_SCRIPT ${CMAKE_CURRENT_LIST_DIR}/TestCasesList.cmake)

function(relay_test_cases target)
  cmake_parse_arguments(PARSE_ARGV 1 A "" "" "ENVIRONMENT")
  set(dir ${CMAKE_CURRENT_BINARY_DIR}/cases)
  set(params ${dir}/${target}-params.cmake)
  set(incl ${dir}/${target}-include.cmake)
  # Bracket arguments: paths and values reach the script as written (lists keep their ';').
  string(CONCAT content
         "set(RELAY_CASES_TARGET [==[${target}]==])\n"
         "set(RELAY_CASES_PROG [==[$<TARGET_FILE:${target}>]==])\n"
         "set(RELAY_CASES_OUT [==[${dir}/${target}-cases.cmake]==])\n"
         "set(RELAY_CASES_VARS [==[${RELAY_CASE_VARS}]==])\n"
         "set(RELAY_CASES_ENV [==[${A_ENVIRONMENT}]==])\n"
         "set(RELAY_CASES_CMAKE [==[${CMAKE_COMMAND}]==])\n"
         "set(RELAY_CASES_STAMPS [==[${params};${RELAY_CASES_SCRIPT}]==])\n")
  file(GENERATE OUTPUT ${params} CONTENT "${content}")
  file(WRITE ${incl} "include([==[${params}]==])\ninclude([==[${RELAY_CASES_SCRIPT}]==])\n")
  set_property(DIRECTORY APPEND PROPERTY TEST_INCLUDE_FILES ${incl})
  add_custom_command(TARGET ${target} POST_BUILD
                     COMMAND ${CMAKE_COMMAND} -DRELAY_CASES_PARAMS=${params} -P ${RELAY_CASES_SCRIPT}
                     COMMENT "Registering the cases of ${target} (${target} --list)" VERBATIM)
endfunction()
