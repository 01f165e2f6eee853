# Shared-memory transport tests: one process per case, each case forks its ranks.
foreach(c rendezvous2 rendezvous3 rendezvous8 two_comms group_big group_big_ring64k group_big8 group_self
          group_many group_many8 agree agree_mismatch mismatch timeout init_timeout init_no_rank0 init_killed nranks_mismatch badargs local
          killed abort reject gone stale small_devshm)
  add_test(NAME shm_${c} COMMAND test_shm ${c})
  # 77: the case cannot run here (small_devshm needs a private mount namespace).
  set_tests_properties(shm_${c} PROPERTIES TIMEOUT 120 LABELS cpu SKIP_RETURN_CODE 77)
endforeach()
