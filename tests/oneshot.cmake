# The one-shot route: plans in one process; the shm twin of the GPU protocol at 8 ranks.
foreach(c plan skew backtoback cycles twocomms fault oversize sweep)
  add_test(NAME oneshot_${c} COMMAND test_oneshot ${c})
  set_tests_properties(oneshot_${c} PROPERTIES TIMEOUT 600 LABELS cpu)
endforeach()
