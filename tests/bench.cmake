# relaycc-bench: bad arguments fail fast naming the argument; short real runs
# on the shm transport with 8 ranks pass their own data check.
if(TARGET relaycc-bench)
  set(BENCH_SH ${CMAKE_CURRENT_LIST_DIR}/test_bench.sh)
  set(BENCH $<TARGET_FILE:relaycc-bench>)

  # One test per "name|arguments" row of ROWS: bench_<prefix><name> runs relaycc-bench with the common
  # arguments (the lists after ARGS) then the row's, and expects EXPECT (test_bench.sh's "ok", or
  # "fail <seconds> <regex>").
  function(bench_rows prefix rows)
    cmake_parse_arguments(B "" "" "EXPECT;ARGS" ${ARGN})
    foreach(case ${rows})
      string(REPLACE "|" ";" parts "${case}")
      list(GET parts 0 name)
      list(GET parts 1 args)
      separate_arguments(args UNIX_COMMAND "${args}")
      add_test(NAME bench_${prefix}${name} COMMAND ${BENCH_SH} ${B_EXPECT} ${BENCH} ${B_ARGS} ${args})
      set_tests_properties(bench_${prefix}${name} PROPERTIES TIMEOUT 120 LABELS cpu)
    endforeach()
  endfunction()

  # name | regex the message must match | arguments. Each must exit non-zero
  # within 3 s (the tool answers in milliseconds, before forking; the slack
  # is for a loaded 2-core CI machine).
  set(BENCH_BAD_CASES
    "A_gt_ranks|-A 9|--ranks 8 -A 9"
    "AG_gt_ranks|-A 5 x -G 2|--ranks 8 -A 5 -G 2"
    "A1|-A 1|-A 1"
    "G0|-G 0|-G 0"
    "dtype|--dtype 'foo'|--dtype foo"
    "op|--op 'foo'|--op foo"
    "route|--route 'foo'|--route foo"
    "coll|-c 'foo'|-c foo"
    "b_gt_e|-b .* > -e|-b 8M -e 4K"
    "neg_b|-b '-5'|-b -5"
    "neg_size|--sizes '-1'|--sizes 4K,-1"
    "bad_size|--sizes '1x'|--sizes 1x"
    "factor1|-f 1|-f 1"
    "iters0|-n 0|-n 0"
    "iters_junk|-n '5x': not an integer|-n 5x"
    "iters_overflow|-n '99999999999999999999': not an integer|-n 99999999999999999999"
    "reps0|-r 0|-r 0"
    "check2|--check 2|--check 2"
    "unknown_flag|--bogus|--bogus"
    "missing_value|--ranks: missing value|--ranks"
    "stray|'stray'|stray"
    "ranks1|--ranks 1|--ranks 1"
    "layout_dup|rank 0 appears twice|--layout 0,0"
    "layout_range|rank 9 out of range|--layout 0,9"
    "layout_len|--layout has 3 ranks|-A 2 -G 2 --layout 0,1,2"
    "backend|--backend 'cuda'|--backend cuda"
    "graph_shm|--graph|--backend shm --graph"
    "json_dir|--json /nonexistent|--json /nonexistent/dir/out.json"
    "root_range|--root 8: no such rank|--ranks 8 -c scatter --root 8"
    "root_index_range|--root-index 2: must be < A = 2|--ranks 8 -c broadcast --root-index 2"
    "root_index_junk|--root-index 'x'|--root-index x"
    "sendrecv_A3|-c sendrecv with -A 3|--ranks 8 -c sendrecv -A 3"
    "alltoallv_G2|-c alltoallv with -G 2|--ranks 8 -c alltoallv -G 2"
  )
  foreach(case ${BENCH_BAD_CASES})
    string(REPLACE "|" ";" parts "${case}")
    list(GET parts 0 name)
    list(GET parts 1 regex)
    list(GET parts 2 args)
    separate_arguments(args UNIX_COMMAND "${args}")
    add_test(NAME bench_badarg_${name} COMMAND ${BENCH_SH} fail 3 "${regex}" ${BENCH} ${args})
    set_tests_properties(bench_badarg_${name} PROPERTIES TIMEOUT 30 LABELS cpu)
  endforeach()

  # --backend nccl must refuse clearly while this binary cannot run it: no
  # CUDA + NCCL in the build, or no NCCL bench backend in tools/bench/cuda/
  # yet. (Once it exists, whether it runs depends on the machine's GPUs.)
  file(GLOB BENCH_NCCL_SRC ${CMAKE_CURRENT_LIST_DIR}/../tools/bench/cuda/*.c)
  if(NOT RELAY_LINKS_NCCL OR NOT BENCH_NCCL_SRC)
    add_test(NAME bench_badarg_backend_nccl COMMAND ${BENCH_SH} fail 3 "--backend nccl: .*NCCL" ${BENCH}
             --backend nccl)
    set_tests_properties(bench_badarg_backend_nccl PROPERTIES TIMEOUT 30 LABELS cpu)
  else()
    # The backend exists: where no GPU is usable it still refuses fast, naming
    # why. CUDA_VISIBLE_DEVICES= hides every GPU, so this holds on any machine
    # (on a GPU machine the probe asks CUDA in a child, which answers at once).
    add_test(NAME bench_badarg_backend_nccl_no_gpu COMMAND ${BENCH_SH} fail 5 "--backend nccl: .*GPU" ${BENCH}
             --backend nccl)
    set_tests_properties(bench_badarg_backend_nccl_no_gpu PROPERTIES TIMEOUT 30 LABELS cpu
                         ENVIRONMENT "CUDA_VISIBLE_DEVICES=")
    # ... and auto then takes shm (a short run, so it stays cheap).
    add_test(NAME bench_auto_no_gpu_is_shm COMMAND ${BENCH_SH} ok ${BENCH} --backend auto --ranks 4 --sizes 4K -n 1 -w 0
             -r 1 -c allreduce)
    set_tests_properties(bench_auto_no_gpu_is_shm PROPERTIES TIMEOUT 60 LABELS cpu ENVIRONMENT "CUDA_VISIBLE_DEVICES=")

    # On the GPUs (label gpu: `make gputest`): short checked runs of every
    # collective, per call and from captured graphs, out of place and in place
    # (an in-place check fails if a graph replays more than one call), one rank
    # per GPU, or RELAYCC_GPUTEST_RANKS ranks on the GPUs there are (`make
    # gputest RANKS=8`). 77 = skipped with fewer than 2 GPUs and no rank count,
    # like the other GPU tests.
    set(BENCH_GPU_GATE "n=$(ls /dev | grep -c '^nvidia[0-9][0-9]*$'); r=\${RELAYCC_GPUTEST_RANKS:-}; \
[ $n -ge 1 ] || exit 77; [ -n \"$r\" ] || [ $n -ge 2 ] || exit 77; exec \"$@\" \${r:+--ranks $r}")
    set(BENCH_GPU_SHORT --backend nccl --sizes 0,4,1K,12K,100K,1M,5M -n 3 -w 1 -r 2)
    set(BENCH_GPU_CASES
      "percall|"
      "graph|--graph"
      "graph_inplace_bf16_avg|--graph --inplace -d bfloat16 -o avg"
      "percall_inplace_half|--inplace -d half"
      "graph_int32_max|--graph -d int32 -o max"
      "rooted_graph_inplace_root1|-c scatter,gather --graph --inplace --root 1"
      "bcast_reduce_p2p_a2av|-c broadcast,reduce,sendrecv,alltoallv"
      "bcast_reduce_graph_inplace_root1|-c broadcast,reduce --graph --inplace --root-index 1 -d bfloat16"
    )
    foreach(case ${BENCH_GPU_CASES})
      string(REPLACE "|" ";" parts "${case}")
      list(GET parts 0 name)
      list(LENGTH parts nparts)
      set(args "")
      if(nparts GREATER 1)
        list(GET parts 1 args)
      endif()
      separate_arguments(args UNIX_COMMAND "${args}")
      add_test(NAME gpu_bench_${name} COMMAND sh -c "${BENCH_GPU_GATE}" gpu_bench ${BENCH_SH} ok ${BENCH}
                                                 ${BENCH_GPU_SHORT} ${args})
      set_tests_properties(gpu_bench_${name} PROPERTIES LABELS gpu TIMEOUT 600 SKIP_RETURN_CODE 77 RUN_SERIAL TRUE)
    endforeach()
    # More ranks than GPUs: rank r on GPU r % GPUs, each rank its own NCCL_HOSTID; checked data, and the
    # output says its timings are no performance.
    add_test(NAME gpu_bench_ranks_gt_gpus
             COMMAND sh -c "n=$(ls /dev | grep -c '^nvidia[0-9][0-9]*$'); [ $n -ge 1 ] || exit 77; \
exec \"$@\" --ranks $((2 * n))" gpu_bench ${BENCH_SH} ok ${BENCH} --backend nccl --sizes 4,100K -n 1 -w 1 -r 1)
    set_tests_properties(gpu_bench_ranks_gt_gpus PROPERTIES LABELS gpu TIMEOUT 300 SKIP_RETURN_CODE 77
                         ENVIRONMENT "RELAYCC_BENCH_EXPECT=not performance: ranks share one GPU")
  endif()

  # A short real run per collective: 8 ranks, tiny and odd sizes, -n 2.
  set(BENCH_SHORT --backend shm --ranks 8 --sizes 0,4,1K,12K,100K -n 2 -w 1 -r 2)
  foreach(c allreduce allgather reducescatter alltoall)
    add_test(NAME bench_run_${c} COMMAND ${BENCH_SH} ok ${BENCH} ${BENCH_SHORT} -c ${c})
    set_tests_properties(bench_run_${c} PROPERTIES TIMEOUT 120 LABELS cpu)
  endforeach()
  # Fused groups on a permuted layout, 16-bit and 8-bit types, in place.
  set(BENCH_VARIANTS
    "fused_A4G2_half_avg|-A 4 -G 2 --layout 7,0,5,2,1,6,3,4 -d half -o avg"
    "A4_int8_prod|-A 4 -d int8 -o prod"
    "A2G4_bf16_max|-A 2 -G 4 -d bfloat16 -o max"
    "inplace_A4_double_min|-A 4 --inplace -d double -o min"
    "inplace_A2G2_int32|-A 2 -G 2 --inplace -d int32"
  )
  bench_rows(run_ "${BENCH_VARIANTS}" EXPECT ok ARGS ${BENCH_SHORT})

  # Scatter and gather (rooted, the set = the layout's ranks): every root
  # role -- in the set, in place, outside it -- on 8 ranks with sizes 0 to
  # 100K, and the check catches a wrong block on the gathering root.
  set(BENCH_ROOTED
    "scatter_gather_A8|-A 8 -c scatter,gather"
    "rooted_root5_inplace_bf16|-A 8 -c scatter,gather --root 5 --inplace -d bfloat16"
    "rooted_outside_int8|-A 3 --layout 6,1,4 -c scatter,gather --root 2 -d int8"
    "rooted_fused_layout_double|-A 2 -G 3 --layout 7,0,5,2,1,6 -c gather,scatter --root 7 -d double"
  )
  bench_rows(run_ "${BENCH_ROOTED}" EXPECT ok ARGS ${BENCH_SHORT})
  add_test(NAME bench_detects_wrong_gather COMMAND ${BENCH_SH} fail 60 "wrong elements" ${BENCH} ${BENCH_SHORT}
           -A 8 -c gather --root 3 --debug-corrupt 3)
  set_tests_properties(bench_detects_wrong_gather PROPERTIES TIMEOUT 120 LABELS cpu)

  # Broadcast and reduce (a root per group, --root-index), the point-to-point copy (each group a pair)
  # and all-to-all-v (uneven counts) at 2 and 4 ranks: a single group and fused groups on permuted
  # layouts, helpers, in place, forced routes (the relay copy through the helpers), 8- and 16-bit types;
  # each checked against the serial reference. The corrupt rows show the check catches a wrong element
  # of each new call (a broadcast member's copy, a reduce root's result, a non-root's recv written, the
  # receiver's copy, an all-to-all-v block).
  set(BENCH_P2P_SHORT --backend shm --sizes 0,4,1K,12K,100K -n 2 -w 1 -r 2)
  set(BENCH_NEW_CALLS
    "new_calls_r2|--ranks 2 -c broadcast,reduce,sendrecv,alltoallv"
    "new_calls_r2_root1_int8_max|--ranks 2 -c broadcast,reduce,sendrecv,alltoallv --root-index 1 \
-d int8 -o max"
    "bcast_relay_copy_r4|--ranks 4 --layout 1,3 -c broadcast,reduce --route relay"
    "bcast_reduce_r4_fused_half_avg|--ranks 4 -A 2 -G 2 --layout 3,0,1,2 -c broadcast,reduce --root-index 1 \
-d half -o avg"
    "bcast_reduce_r4_A4_inplace|--ranks 4 -A 4 -c broadcast,reduce --inplace --root-index 3 -d int32 -o min"
    "bcast_reduce_r4_A3_relay_bf16|--ranks 4 -A 3 --layout 2,0,3 -c broadcast,reduce --route relay \
--root-index 2 -d bfloat16 -o prod"
    "sendrecv_r4_fused_bf16|--ranks 4 -G 2 --layout 3,0,1,2 -c sendrecv -d bfloat16"
    "alltoallv_r4_A4_double|--ranks 4 -A 4 -c alltoallv -d double"
    "alltoallv_r4_A3_helper_uint8|--ranks 4 -A 3 --layout 3,1,0 -c alltoallv -d uint8 --sizes 0,3,999,12K"
  )
  bench_rows(run_ "${BENCH_NEW_CALLS}" EXPECT ok ARGS ${BENCH_P2P_SHORT})
  set(BENCH_NEW_CORRUPT
    "broadcast_member|--ranks 4 -A 2 -G 2 -c broadcast --debug-corrupt 2"
    "reduce_root|--ranks 2 -c reduce --root-index 1 --debug-corrupt 1"
    "reduce_nonroot_written|--ranks 2 -c reduce --debug-corrupt 1"
    "sendrecv_receiver|--ranks 4 --layout 2,1 -c sendrecv --debug-corrupt 1"
    "alltoallv_block|--ranks 4 -A 3 -c alltoallv --debug-corrupt 2"
  )
  bench_rows(detects_wrong_ "${BENCH_NEW_CORRUPT}" EXPECT fail 60 "wrong elements" ARGS ${BENCH_P2P_SHORT})
  # The sender dies after the check: its receiver (relayRecv, relayAllToAllv) must fail fast, naming it.
  foreach(c sendrecv alltoallv)
    add_test(NAME bench_rank_dies_${c} COMMAND ${BENCH_SH} fail 30 "rank 1: .*rank 0 [(]pid [0-9]+[)] died"
             ${BENCH} --backend shm --ranks 2 --sizes 100K -n 2 -w 1 -r 2 -c ${c} --debug-kill 0)
    set_tests_properties(bench_rank_dies_${c} PROPERTIES TIMEOUT 120 LABELS cpu)
  endforeach()

  # What `make run` does, with the default sweep.
  add_test(NAME bench_default COMMAND ${BENCH_SH} ok ${BENCH} --backend auto)
  set_tests_properties(bench_default PROPERTIES TIMEOUT 300 LABELS cpu)

  add_test(NAME bench_json COMMAND ${BENCH_SH} json ${CMAKE_CURRENT_BINARY_DIR}/bench_test.json ${BENCH}
           ${BENCH_SHORT} -c allreduce,alltoall)
  set_tests_properties(bench_json PROPERTIES TIMEOUT 120 LABELS cpu)

  # The check must catch a wrong element (and fail the run), and a rank that
  # dies must fail the run fast, naming the rank.
  add_test(NAME bench_detects_wrong COMMAND ${BENCH_SH} fail 60 "wrong elements" ${BENCH} ${BENCH_SHORT}
           -c allgather --debug-corrupt 1)
  set_tests_properties(bench_detects_wrong PROPERTIES TIMEOUT 120 LABELS cpu)
  add_test(NAME bench_rank_dies COMMAND ${BENCH_SH} fail 30 "FAILED: rank 3 died" ${BENCH} ${BENCH_SHORT}
           -c allreduce --debug-kill 3)
  set_tests_properties(bench_rank_dies PROPERTIES TIMEOUT 120 LABELS cpu)
endif()
