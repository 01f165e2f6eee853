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
  # The one-shot and bw emulations run twice: with NVIDIA's 32-lane warps and with AMD's 64-lane
  # wavefront (RELAY_GPU_WARP, src/gpu_port.h), what the HIP build compiles the same kernels for. The
  # 64-lane programs only run on the host: their device code is PTX only (no ptxas pass).
  list(GET CMAKE_CUDA_ARCHITECTURES 0 RELAY_EMUL_ARCH)
  string(REGEX REPLACE "-.*" "" RELAY_EMUL_ARCH "${RELAY_EMUL_ARCH}")
  if(NOT RELAY_EMUL_ARCH MATCHES "^[0-9]+a?$") # all, native: the build's own archs
    set(RELAY_EMUL_ARCH "")
  endif()
  foreach(v reduce oneshot bw oneshot_w64 bw_w64)
    string(REGEX REPLACE "_w64$" "" e ${v})
    add_executable(emul_${v} tests/gpu/emul_${e}.cu src/reduce_host.c src/comm/common.c src/comm/params.c)
    target_include_directories(emul_${v} PRIVATE include ${RELAY_GEN}/include src tests)
    target_link_libraries(emul_${v} PRIVATE CUDA::cudart m)
    target_compile_options(emul_${v} PRIVATE ${RELAY_CUDA_WARN_FLAGS})
    if(NOT v STREQUAL e)
      target_compile_definitions(emul_${v} PRIVATE RELAY_GPU_WARP=64)
      if(RELAY_EMUL_ARCH)
        set_target_properties(emul_${v} PROPERTIES CUDA_ARCHITECTURES ${RELAY_EMUL_ARCH}-virtual)
      endif()
    endif()
    add_test(NAME cuda_${v}_emulated COMMAND emul_${v})
    set_tests_properties(cuda_${v}_emulated PROPERTIES LABELS cuda TIMEOUT 300)
  endforeach()
endif()
