foreach(c allgather reducescatter allreduce alltoall full-allgather full-reducescatter full-allreduce full-alltoall
          badinput mismatch-nocheck killed)
  add_test(NAME colls_${c} COMMAND test_colls ${c})
  set_tests_properties(colls_${c} PROPERTIES TIMEOUT 600 LABELS cpu)
endforeach()
