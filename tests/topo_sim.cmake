# Topology model and simulator (src/topo, src/sim): CPU only, each case a few
# milliseconds to a second. seedlink and seedtables exit 77 (skipped) until relay plans exist.
foreach(c presets roundtrip errors detect)
  add_test(NAME topo_${c} COMMAND test_topo ${c})
  set_tests_properties(topo_${c} PROPERTIES TIMEOUT 60 LABELS cpu)
endforeach()
foreach(c oneflow share switch sync ops mismatch determinism speed baseline seedlink seedtables)
  add_test(NAME sim_${c} COMMAND test_sim ${c})
  set_tests_properties(sim_${c} PROPERTIES TIMEOUT 120 LABELS cpu SKIP_RETURN_CODE 77)
endforeach()
# relaycc-sim prints full tables on a fresh build: every cell filled.
add_test(NAME sim_tool_tables COMMAND relaycc-sim --topo mi350x -c all -A 2)
add_test(NAME sim_tool_fused COMMAND relaycc-sim --topo h200 -c all -A 4 -G 2 --route relay --depth 1)
set_tests_properties(sim_tool_tables sim_tool_fused PROPERTIES TIMEOUT 60 LABELS cpu FAIL_REGULAR_EXPRESSION "N/A")
# A bad integer option fails naming the option and the range (relayParseInt).
add_test(NAME sim_tool_badarg_A COMMAND sh -c "out=$(\"$@\" 2>&1); rc=$?; echo \"$out\"; test $rc -ne 0 && echo \"$out\" | grep -q -e \"$0\""
         "-A '2x': want an integer in 1..512" $<TARGET_FILE:relaycc-sim> -A 2x)
set_tests_properties(sim_tool_badarg_A PROPERTIES TIMEOUT 30 LABELS cpu)
