# Regression tests from a review of the per-call path (shm transport).
foreach(c topo-differ oneshot-oom scratch-oom)
  add_test(NAME review_${c} COMMAND test_review ${c})
  set_tests_properties(review_${c} PROPERTIES TIMEOUT 180 LABELS cpu)
endforeach()
