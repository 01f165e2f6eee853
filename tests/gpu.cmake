# GPU tests (label gpu): `make gputest` runs them on a GPU machine; the CPU
# `make test` excludes the label. Each program exits 77 (skipped) when the
# machine has too few GPUs. Built only with CUDA + NCCL (tests/gpu/gputest_*.c);
# their cases are their tables (gputest_* --list), registered with the C tests'.
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
  # push and consume of every item of every block and its direct path's
  # moves between registered windows (emul_bw).
  foreach(e reduce oneshot bw)
    add_executable(emul_${e} tests/gpu/emul_${e}.cu src/reduce_host.c src/comm/common.c src/comm/params.c)
    target_include_directories(emul_${e} PRIVATE include ${RELAY_GEN}/include src tests)
    target_link_libraries(emul_${e} PRIVATE CUDA::cudart m)
    target_compile_options(emul_${e} PRIVATE ${RELAY_CUDA_WARN_FLAGS})
    add_test(NAME cuda_${e}_emulated COMMAND emul_${e})
    set_tests_properties(cuda_${e}_emulated PROPERTIES LABELS cuda TIMEOUT 300)
  endforeach()
endif()
