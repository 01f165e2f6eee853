# relaycc-plan: the last line of --traffic is exactly the critical path (the
# seeds' accounting: 2 active on 8 ranks carry count/4, 4-active all-to-all
# 2/3 of a segment; pipelined, the closed forms of issue 4), and bad
# arguments exit non-zero naming the argument.
if(TARGET relaycc-plan)
  set(PLAN_TOOL $<TARGET_FILE:relaycc-plan>)
  set(PLAN_TRAFFIC_CASES
    "ag_A2|524288|-c allgather -A 2 --ranks 8 --count 1048576 --dtype bf16 --route relay"
    "ar_A2_fused|524288|-c allreduce -A 2 -G 4 --ranks 8 --count 1048576 --dtype bf16 --route relay"
    "a2a_A4|1048576|-c alltoall -A 4 --ranks 8 --count 786432 --dtype bf16 --route relay"
    "rs_A4_layout|1048576|-c reducescatter -A 4 --ranks 8 --count 1048576 --dtype bf16 --route relay --layout 7,2,5,0"
    "ag_A2_direct|2097152|-c allgather -A 2 --ranks 8 --count 1048576 --dtype bf16 --route direct"
    # pipelined (issue 4), 1 GiB per rank: 2 active (T+1)/(7T+1) of the count,
    # 9/57 at depth 8 (the done-when line); 4-active all-gather (3T+1)/(7T+1);
    # all-to-all (T+1)/(2T+1) of a segment; all-reduce 2(T+1)/(12T);
    # fused calls keep the two-group form at any depth
    "ag_A2_depth8|169541632|-c allgather -A 2 --ranks 8 --count 536870912 --dtype bf16 --route relay --depth 8"
    "rs_A2_depth4|92567552|-c reducescatter -A 2 --ranks 8 --count 268435456 --dtype bf16 --route relay --depth 4"
    "ag_A4_depth4|481333248|-c allgather -A 4 --ranks 8 --count 536870912 --dtype bf16 --route relay --depth 4"
    "a2a_A4_depth8|142114816|-c alltoall -A 4 --ranks 8 --count 134217728 --dtype bf16 --route relay --depth 8"
    "ar_A4_depth8|201327616|-c allreduce -A 4 --ranks 8 --count 536870912 --dtype bf16 --route relay --depth 8"
    "ar_A2_fused_depth8|524288|-c allreduce -A 2 -G 4 --ranks 8 --count 1048576 --dtype bf16 --route relay --depth 8"
  )
  foreach(case ${PLAN_TRAFFIC_CASES})
    string(REPLACE "|" ";" parts "${case}")
    list(GET parts 0 name)
    list(GET parts 1 bytes)
    list(GET parts 2 args)
    separate_arguments(args UNIX_COMMAND "${args}")
    add_test(NAME plan_tool_traffic_${name}
             COMMAND sh -c "\"$@\" --traffic | tail -n 1 | grep -qx -e \"$0\"" "critical-path bytes: ${bytes}"
                     ${PLAN_TOOL} ${args})
    set_tests_properties(plan_tool_traffic_${name} PROPERTIES TIMEOUT 60 LABELS cpu)
  endforeach()

  # Issue 4's done-when: the 2-active all-gather at depth 8 reports 9/57 of the message.
  add_test(NAME plan_tool_done_when_9_57
           COMMAND sh -c "\"$@\" --traffic | grep -q -x -e '# critical path = 0.1579 x count\\*elemsize'"
                   sh ${PLAN_TOOL} -c allgather -A 2 --ranks 8 --count 536870912 --dtype bf16 --route relay --depth 8)
  set_tests_properties(plan_tool_done_when_9_57 PROPERTIES TIMEOUT 60 LABELS cpu)

  set(PLAN_BAD_CASES
    "coll|-c: unknown collective|-c bogus -A 2 --ranks 8 --count 4"
    "A|-A: '1'|-c allgather -A 1 --ranks 8 --count 4"
    "AG|--ranks: 8 ranks cannot hold|-c allgather -A 4 -G 3 --ranks 8 --count 4"
    "count|--count: 'x'|-c allgather -A 2 --ranks 8 --count x"
    "A_junk|-A: '2x' is not an integer|-c allgather -A 2x --ranks 8 --count 4"
    "nocount|--count: the per-group count is required|-c allgather -A 2 --ranks 8"
    "dtype|--dtype: unknown datatype 'foo'|-c allgather -A 2 --ranks 8 --count 4 --dtype foo"
    "op|--op: unknown reduction op 'foo'|-c allreduce -A 2 --ranks 8 --count 4 --op foo"
    "route|--route: unknown route 'foo'|-c allgather -A 2 --ranks 8 --count 4 --route foo"
    "rank|--rank: '9'|-c allgather -A 2 --ranks 8 --count 4 --rank 9"
    "layout|--layout: '0,0'|-c allgather -A 2 --ranks 8 --count 4 --layout 0,0"
    "flag|--bogus|-c allgather -A 2 --ranks 8 --count 4 --bogus"
  )
  foreach(case ${PLAN_BAD_CASES})
    string(REPLACE "|" ";" parts "${case}")
    list(GET parts 0 name)
    list(GET parts 1 regex)
    list(GET parts 2 args)
    separate_arguments(args UNIX_COMMAND "${args}")
    add_test(NAME plan_tool_badarg_${name}
             COMMAND sh -c "out=$(\"$@\" 2>&1); rc=$?; echo \"$out\"; test $rc -ne 0 && echo \"$out\" | grep -q -e \"$0\""
                     "${regex}" ${PLAN_TOOL} ${args})
    set_tests_properties(plan_tool_badarg_${name} PROPERTIES TIMEOUT 30 LABELS cpu)
  endforeach()
endif()
