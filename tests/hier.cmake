# Comms spanning nodes: plans on 2 and 4 nodes (pure), and the shm transport
# with one host split into 2 (8 ranks) and 4 nodes (16 ranks).
add_test(NAME hier_plans COMMAND test_hier plans)
set_tests_properties(hier_plans PROPERTIES TIMEOUT 600 LABELS cpu)
foreach(c shm8 shm16)
  add_test(NAME hier_${c} COMMAND test_hier ${c})
  set_tests_properties(hier_${c} PROPERTIES TIMEOUT 900 LABELS cpu)
endforeach()
