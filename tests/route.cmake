foreach(c never-slower continuous same-on-all-ranks)
  add_test(NAME route_${c} COMMAND test_route ${c})
  set_tests_properties(route_${c} PROPERTIES TIMEOUT 300 LABELS cpu)
endforeach()
