# GPU tests (label gpu): `make gputest` runs them on a GPU machine; the CPU
# `make test` excludes the label. Each program exits 77 (skipped) when the
# machine has too few GPUs. Built only with CUDA + NCCL (tests/gpu/gputest_*.c).
if(RELAY_HAVE_CUDA)
  foreach(t gputest_reduce gputest_transport gputest_colls gputest_oneshot)
    if(NOT TARGET ${t})
      message(FATAL_ERROR "tests/gpu.cmake: no target ${t}")
    endif()
  endforeach()

  # No GPU needed (CI runs them): the kernels' own code run thread by thread
  # on the host, bit for bit against relayHostReduce: the reduce kernel
  # (emul_reduce), and the one-shot's push and reduce of every block over
  # regions laid out as on the GPU (emul_oneshot), and the bandwidth kernel's
  # push and consume of every item of every block (emul_bw).
  foreach(e reduce oneshot bw)
    add_executable(emul_${e} tests/gpu/emul_${e}.cu src/reduce_host.c src/common.c src/core/params.c)
    target_include_directories(emul_${e} PRIVATE include ${RELAY_GEN}/include src tests)
    target_link_libraries(emul_${e} PRIVATE CUDA::cudart m)
    target_compile_options(emul_${e} PRIVATE ${RELAY_CUDA_WARN_FLAGS})
    add_test(NAME cuda_${e}_emulated COMMAND emul_${e})
    set_tests_properties(cuda_${e}_emulated PROPERTIES LABELS cuda TIMEOUT 300)
  endforeach()

  # The one-shot path on real GPUs (>= 2, one process each): sweep, skew,
  # 10^4 back-to-back calls, 1000 graph replays, capture before any region,
  # region at init, fault injection, a kernel deadline. Logs to $OUT.
  add_test(NAME gpu_oneshot COMMAND gputest_oneshot)
  set_tests_properties(gpu_oneshot PROPERTIES LABELS gpu TIMEOUT 600 SKIP_RETURN_CODE 77 RUN_SERIAL TRUE)

  # The bandwidth kernel: two processes on ONE GPU (CUDA IPC within a device),
  # sweep, back-to-back, graph replays, deadline, abort (compute-sanitizer-friendly).
  add_test(NAME gpu_bw COMMAND gputest_bw)
  set_tests_properties(gpu_bw PROPERTIES LABELS gpu TIMEOUT 600 SKIP_RETURN_CODE 77 RUN_SERIAL TRUE)

  # The reduce family bit for bit against relayHostReduce (one GPU).
  add_test(NAME gpu_reduce COMMAND gputest_reduce)
  # The transport's ops, lanes, scratch and a captured graph (one GPU).
  add_test(NAME gpu_transport COMMAND gputest_transport)
  # Every collective x layout x route x dtype x op x size (>= 2 GPUs, one
  # process each). The rank launcher inside has its own 560 s deadline.
  add_test(NAME gpu_colls COMMAND gputest_colls)
  set_tests_properties(gpu_reduce gpu_transport PROPERTIES LABELS gpu TIMEOUT 300 SKIP_RETURN_CODE 77)
  set_tests_properties(gpu_colls PROPERTIES LABELS gpu TIMEOUT 600 SKIP_RETURN_CODE 77 RUN_SERIAL TRUE)
  # CUDA-graph capture and 1000 verified replays per collective and route (issue 9).
  add_test(NAME gpu_graph COMMAND gputest_graph)
  set_tests_properties(gpu_graph PROPERTIES LABELS gpu TIMEOUT 600 SKIP_RETURN_CODE 77 RUN_SERIAL TRUE)
  # Host overhead per call of relaycc over raw NCCL (2 GPUs).
  add_test(NAME gpu_overhead COMMAND gputest_overhead)
  set_tests_properties(gpu_overhead PROPERTIES LABELS gpu TIMEOUT 300 SKIP_RETURN_CODE 77 RUN_SERIAL TRUE)
  # One GPU test at a time: the collectives take every GPU.
  set_tests_properties(gpu_reduce gpu_transport PROPERTIES RUN_SERIAL TRUE)

  # compute-sanitizer (memcheck) over the reduce family and a small
  # collectives sweep, when the toolkit's sanitizer is found at configure time.
  find_program(RELAY_COMPUTE_SANITIZER compute-sanitizer
               HINTS ${CUDAToolkit_BIN_DIR} /usr/local/cuda/bin ENV CUDA_HOME PATH_SUFFIXES bin)
  if(RELAY_COMPUTE_SANITIZER)
    add_test(NAME gpu_sanitize_reduce
             COMMAND ${RELAY_COMPUTE_SANITIZER} --error-exitcode 1 --target-processes all
                     $<TARGET_FILE:gputest_reduce> --small)
    # NCCL probes for kernel images of other architectures at init and gets
    # cudaErrorNoKernelImageForDevice, which it handles; memcheck would report
    # each probe as an API error (seen on 2 x H200, NCCL 2.28.3), so API
    # errors are not reported here: memory errors still are.
    add_test(NAME gpu_sanitize_colls
             COMMAND ${RELAY_COMPUTE_SANITIZER} --error-exitcode 1 --target-processes all --report-api-errors no
                     $<TARGET_FILE:gputest_colls> --small)
    set_tests_properties(gpu_sanitize_reduce gpu_sanitize_colls
                         PROPERTIES LABELS gpu TIMEOUT 600 SKIP_RETURN_CODE 77 RUN_SERIAL TRUE)
  else()
    message(STATUS "relaycc: compute-sanitizer not found; no gpu_sanitize_* tests")
  endif()
endif()
