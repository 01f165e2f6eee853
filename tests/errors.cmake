# Error prefixes (issue 16): relaySetError's "<function> (rank R, call #N, step S): " on argument errors
# (check mode 0 and 1), a step's error, init errors with and without a comm; relayErrorQuote. The rank
# cases fork 4 shm ranks each.
foreach(c calls check step init init-args quote)
  add_test(NAME errors_${c} COMMAND test_errors ${c})
  set_tests_properties(errors_${c} PROPERTIES TIMEOUT 120 LABELS cpu)
endforeach()
