# Routes as rows (tests/test_rows.c): the table of routes, the router's
# candidate lists, and core's walk over them on 2 shm ranks (a missing
# capability skips a row, a declined prepare falls to the next).
foreach(c table candidates walk forced)
  add_test(NAME rows_${c} COMMAND test_rows ${c})
  set_tests_properties(rows_${c} PROPERTIES TIMEOUT 300 LABELS cpu)
endforeach()
