# Registered buffers (windows) and the bandwidth route's direct path on the shm transport (test_window.c).
foreach(c sweep interleave cycles badargs checkoffset mismatch kill stagedonly)
  add_test(NAME window_${c} COMMAND test_window ${c})
  set_tests_properties(window_${c} PROPERTIES TIMEOUT 600 LABELS cpu)
endforeach()
