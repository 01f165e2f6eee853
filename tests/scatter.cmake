# Scatter and gather: plans in one process; 8 shm ranks for the collectives.
foreach(c plans scatter gather badinput)
  add_test(NAME scatter_${c} COMMAND test_scatter ${c})
  set_tests_properties(scatter_${c} PROPERTIES TIMEOUT 300 LABELS cpu)
endforeach()
