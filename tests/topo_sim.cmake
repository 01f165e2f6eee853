# relaycc-sim prints full tables on a fresh build: every cell filled.
add_test(NAME sim_tool_tables COMMAND relaycc-sim --topo mi350x -c all -A 2)
add_test(NAME sim_tool_fused COMMAND relaycc-sim --topo h200 -c all -A 4 -G 2 --route relay --depth 1)
set_tests_properties(sim_tool_tables sim_tool_fused PROPERTIES TIMEOUT 60 LABELS cpu FAIL_REGULAR_EXPRESSION "N/A")
# A bad integer option fails naming the option and the range (relayParseInt).
add_test(NAME sim_tool_badarg_A COMMAND sh -c "out=$(\"$@\" 2>&1); rc=$?; echo \"$out\"; test $rc -ne 0 && echo \"$out\" | grep -q -e \"$0\""
         "-A '2x': want an integer in 1..512" $<TARGET_FILE:relaycc-sim> -A 2x)
set_tests_properties(sim_tool_badarg_A PROPERTIES TIMEOUT 30 LABELS cpu)
