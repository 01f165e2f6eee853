# The settings table: README check, agreement across ranks, an invalid value on one rank.
add_test(NAME params_readme COMMAND test_params readme ${CMAKE_SOURCE_DIR}/README.md)
foreach(c agreed invalid)
  add_test(NAME params_${c} COMMAND test_params ${c})
endforeach()
set_tests_properties(params_readme params_agreed params_invalid PROPERTIES TIMEOUT 300 LABELS cpu)
