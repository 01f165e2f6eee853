# Comms spanning nodes through the tools (tests/test_hier.c's table has the rest).
# The issue's check: a group spanning both nodes, all four collectives, #wrong 0
# (relaycc-bench exits non-zero on any wrong element).
add_test(NAME hier_bench COMMAND relaycc-bench --backend shm --ranks 8 --nodes 2 -A 4 --layout 0,1,4,5
         --sizes 4K,100000 -n 2 -w 1 -r 1)
set_tests_properties(hier_bench PROPERTIES TIMEOUT 300 LABELS cpu)
# relaycc-sim prints hierarchical against flat NCCL for a group on 8 nodes.
add_test(NAME hier_sim COMMAND relaycc-sim --topo mi350x --nodes 8 -c allreduce -A 2 --sizes 64K,64M)
set_tests_properties(hier_sim PROPERTIES TIMEOUT 60 LABELS cpu PASS_REGULAR_EXPRESSION "allreduce, 8 nodes x 2 actives")
