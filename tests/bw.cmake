# The bandwidth route: its plans in one process, and its shm twin at 8 ranks
# (test_oneshot's cases on the bw route, 1 KiB tiles, ring 3; plus tiles, ring 1, abort, disagreeing settings; the router on h200x2).
foreach(c plan skew backtoback cycles twocomms fault sweep tiles ring1 abort disagree route off)
  add_test(NAME bw_${c} COMMAND test_oneshot bw-${c})
  set_tests_properties(bw_${c} PROPERTIES TIMEOUT 600 LABELS cpu)
endforeach()
