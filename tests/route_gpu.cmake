# The router with native collectives, the h200x2 calibration against the
# measured logs (docs/perf/raw/2026-11-29-h200x2), detection's mapping and the
# topology agreement at init: CPU only (tests/test_route_gpu.c).
foreach(c calibration choices percall never-slower-than-native detect-map hash agree core)
  add_test(NAME route_gpu_${c} COMMAND test_route_gpu ${c})
  set_tests_properties(route_gpu_${c} PROPERTIES TIMEOUT 300 LABELS cpu)
endforeach()
# On a GPU machine (label gpu): what detection makes of the node; the lead's
# check on 2 x H200 is RELAYCC_EXPECT_TOPO=h200x2 ./build/test_route_gpu detect.
add_test(NAME route_gpu_detect COMMAND test_route_gpu detect)
set_tests_properties(route_gpu_detect PROPERTIES TIMEOUT 60 LABELS gpu SKIP_RETURN_CODE 77)
