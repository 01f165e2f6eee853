# No silent wrong result (issue 15): rejected calls keep every rank in step, one rank's bad call never
# leaves data for a later call, launches that share a job name never meet, each rank names its own bad
# topology. One process per case; each case forks its ranks (4, or launches of 2).
set(RELAY_NOSILENT_CASES all-c0 all-c1 rdzv-vars rdzv-ppid rdzv-dup0 rdzv-dup1 topo-own)
foreach(r direct relay1 relay3 oneshot bw bwwin rooted)
  foreach(k buffer shape)
    list(APPEND RELAY_NOSILENT_CASES one-${r}-${k})
  endforeach()
endforeach()
foreach(c ${RELAY_NOSILENT_CASES})
  add_test(NAME nosilent_${c} COMMAND test_nosilent ${c})
  set_tests_properties(nosilent_${c} PROPERTIES TIMEOUT 120 LABELS cpu)
endforeach()
