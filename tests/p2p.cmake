# The seed's table through the binary: nodes x 8 GPUs | pool | per-peer -> parts.
if(TARGET relaycc-plan)
  foreach(row "2|32|2|2" "3|64|4|2" "4|32|2|1" "5|64|2|1" "8|64|2|1")
    string(REPLACE "|" ";" f "${row}")
    list(GET f 0 nodes)
    list(GET f 1 pool)
    list(GET f 2 pp)
    list(GET f 3 want)
    add_test(NAME p2p_cli_${nodes}nodes
             COMMAND sh ${CMAKE_CURRENT_LIST_DIR}/test_p2p_cli.sh $<TARGET_FILE:relaycc-plan> ${want}
                     --nodes ${nodes} --local 8 --pool ${pool} --per-peer ${pp})
    set_tests_properties(p2p_cli_${nodes}nodes PROPERTIES TIMEOUT 30 LABELS cpu)
  endforeach()
  add_test(NAME p2p_cli_user COMMAND sh ${CMAKE_CURRENT_LIST_DIR}/test_p2p_cli.sh $<TARGET_FILE:relaycc-plan> 2
                                     --nodes 4 --local 8 --pool 32 --per-peer 2 --user-per-peer 2)
  set_tests_properties(p2p_cli_user PROPERTIES TIMEOUT 30 LABELS cpu)
endif()
