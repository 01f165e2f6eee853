# Shared-memory transport tests: one process per case, each case forks its ranks.
foreach(c rendezvous2 rendezvous3 rendezvous8 two_comms group_big group_big_ring64k group_big8 group_self
          group_many group_many8 agree agree_mismatch mismatch timeout init_timeout init_no_rank0 init_killed nranks_mismatch badargs local
          killed abort reject gone stale small_devshm p2p_lazy p2p_mismatch p2p_badenv)
  add_test(NAME shm_${c} COMMAND test_shm ${c})
  # 77: the case cannot run here (small_devshm needs a private mount namespace).
  set_tests_properties(shm_${c} PROPERTIES TIMEOUT 120 LABELS cpu SKIP_RETURN_CODE 77)
endforeach()
# Scatter and gather at 8 shm ranks, every root, with the multi-node part rule
# live: the ranks as 4 nodes x 2 on a pool of 8 channels, so a scatter takes
# 1 part per peer on the node-major base and a gather 2 on the schedule base.
foreach(c scatter gather)
  add_test(NAME shm_p2p_4x2_${c} COMMAND test_scatter ${c})
  set_tests_properties(shm_p2p_4x2_${c} PROPERTIES TIMEOUT 300 LABELS cpu
                       ENVIRONMENT "RELAYCC_SHM_NODES=4;RELAYCC_NCHANNELS=8")
endforeach()
