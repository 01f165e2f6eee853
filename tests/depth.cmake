# The pipeline depth model (src/route/depth.c) and the pipelined relay plans:
#   depth_seed      the depth picked on mi350x at every size the seed reports one
#   depth_shapes    each shape's closed form is its plans' critical path
#   depth_model     the topology's figures, the 128-element stop, fused at depth 1
#   depth_router    the router runs the model's depth
if(TARGET test_depth)
  foreach(c seed shapes model router)
    add_test(NAME depth_${c} COMMAND test_depth ${c})
    set_tests_properties(depth_${c} PROPERTIES TIMEOUT 120 LABELS cpu)
  endforeach()
endif()

# The 8-process shm collectives (tests/test_colls.c: every collective, A = 2
# and 4, independent and fused, odd counts up to 2^20+3, in and out of place)
# with the relay forced to depth 8: independent calls run 9-step pipelines
# where the count allows (2^20+3), clamp where it does not (7, 1000), and
# fused calls keep the two-group form.
if(TARGET test_colls)
  foreach(c allgather reducescatter allreduce alltoall)
    add_test(NAME depth_colls_depth8_${c} COMMAND test_colls ${c})
    set_tests_properties(depth_colls_depth8_${c} PROPERTIES ENVIRONMENT RELAYCC_DEPTH=8 TIMEOUT 600 LABELS cpu)
  endforeach()
endif()
