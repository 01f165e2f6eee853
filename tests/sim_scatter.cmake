# The simulator's multi-node network and P2P channel model on scatter and
# gather (tests/test_sim_scatter.c): CPU only, each case well under a second.
foreach(c topo p2p occupancy rules split roots)
  add_test(NAME sim_scatter_${c} COMMAND test_sim_scatter ${c})
  set_tests_properties(sim_scatter_${c} PROPERTIES TIMEOUT 60 LABELS cpu)
endforeach()
if(TARGET relaycc-sim)
  add_test(NAME sim_scatter_tool COMMAND test_sim_scatter tool $<TARGET_FILE:relaycc-sim>)
  set_tests_properties(sim_scatter_tool PROPERTIES TIMEOUT 60 LABELS cpu)
endif()
