# Plans (src/plan, src/ref): CPU only, one process, no transport.
#   plan_sweep        randomized sweep, a new seed each run (printed, with the
#                     replay command on a failure); ~10 s, ~20 s under ASan
#   plan_sweep_fixed  the same on a fixed seed, so a regression is repeatable
#   plan_traffic      critical-path bytes against the seeds' link accounting
#   plan_unsupported  a route that cannot serve a key answers "not supported"
if(TARGET test_plan)
  add_test(NAME plan_sweep COMMAND test_plan sweep 0 4000)
  add_test(NAME plan_sweep_fixed COMMAND test_plan sweep 1 1500)
  add_test(NAME plan_traffic COMMAND test_plan traffic)
  add_test(NAME plan_unsupported COMMAND test_plan unsupported)
  set_tests_properties(plan_sweep plan_sweep_fixed plan_traffic plan_unsupported PROPERTIES TIMEOUT 120 LABELS cpu)
endif()

# relaycc-plan: the last line of --traffic is exactly the critical path (the
# seeds' accounting: 2 active on 8 ranks carry count/4, 4-active all-to-all
# 2/3 of a segment), and bad arguments exit non-zero naming the argument.
if(TARGET relaycc-plan)
  set(PLAN_TOOL $<TARGET_FILE:relaycc-plan>)
  set(PLAN_TRAFFIC_CASES
    "ag_A2|524288|-c allgather -A 2 --ranks 8 --count 1048576 --dtype bf16 --route relay"
    "ar_A2_fused|524288|-c allreduce -A 2 -G 4 --ranks 8 --count 1048576 --dtype bf16 --route relay"
    "a2a_A4|1048576|-c alltoall -A 4 --ranks 8 --count 786432 --dtype bf16 --route relay"
    "rs_A4_layout|1048576|-c reducescatter -A 4 --ranks 8 --count 1048576 --dtype bf16 --route relay --layout 7,2,5,0"
    "ag_A2_direct|2097152|-c allgather -A 2 --ranks 8 --count 1048576 --dtype bf16 --route direct"
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

  set(PLAN_BAD_CASES
    "coll|-c: unknown collective|-c bogus -A 2 --ranks 8 --count 4"
    "A|-A: '1'|-c allgather -A 1 --ranks 8 --count 4"
    "AG|--ranks: 8 ranks cannot hold|-c allgather -A 4 -G 3 --ranks 8 --count 4"
    "count|--count: 'x'|-c allgather -A 2 --ranks 8 --count x"
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
