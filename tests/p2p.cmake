# The P2P channel layer: pure functions, each case well under a second.
foreach(c rule topo parts base lazy tool)
  add_test(NAME p2p_${c} COMMAND test_p2p ${c})
  set_tests_properties(p2p_${c} PROPERTIES TIMEOUT 60 LABELS cpu)
endforeach()
