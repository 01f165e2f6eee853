/*
 * The one portability header of the GPU code: every CUDA source of relaycc
 * (the kernels, the NCCL transport, the tools and GPU tests) includes this
 * instead of <cuda_runtime.h>, so one spelling compiles for NVIDIA (nvcc)
 * and for AMD (hipcc, -DRELAY_WITH_HIP=ON). There are no forked copies:
 *
 *  - host API: the CUDA names the code uses, renamed to HIP's here and
 *    nowhere else (hipify's table, restricted to what relaycc calls), plus
 *    stand-ins where HIP 5.2 (Debian 12's hipcc, what CI builds with) has
 *    no such call: cudaGraphUpload (a no-op: the first launch uploads),
 *    CUDA 12's cudaGraphInstantiate (hipGraphInstantiateWithFlags);
 *  - device code: system-scope acquire loads and release stores, the
 *    deadline timer, L2 loads, 16-byte volatile lines, and the warp's
 *    vote, broadcast and sync, each one inline function with a CUDA body
 *    (the PTX the kernels always had) and a HIP body;
 *  - RELAY_GPU_WARP, the warp width as a compile-time constant: 32 on
 *    NVIDIA, 64 on AMD's CDNA (gfx90a, gfx940: wave64 only). The LL128
 *    kernel's lines per warp and every thread-count check derive from it.
 *    The host emulations (tests/gpu/emul_*.cu) are built once per width.
 *
 * Included by C and C++ (CUDA / HIP) translation units alike; in C only
 * the host API.
 */
#ifndef RELAY_GPU_PORT_H_
#define RELAY_GPU_PORT_H_

#include <stdint.h>

/* A GPU compiler (either pass of nvcc or hipcc), and its device pass. */
#if defined(__CUDACC__) || defined(__HIPCC__)
#define RELAY_GPU_COMPILER 1
#endif
#if defined(__CUDA_ARCH__) || defined(__HIP_DEVICE_COMPILE__)
#define RELAY_GPU_DEVICE_PASS 1
#endif

#ifndef RELAY_GPU_WARP
#ifdef RELAY_HAVE_HIP
#define RELAY_GPU_WARP 64
#else
#define RELAY_GPU_WARP 32
#endif
#endif

#ifndef RELAY_HAVE_HIP
/* ---- NVIDIA ---------------------------------------------------------------- */
#include <cuda_runtime.h>

#else
/* ---- AMD: HIP ----------------------------------------------------------------- */
#ifndef __HIP_PLATFORM_AMD__
#define __HIP_PLATFORM_AMD__ 1
#endif
#ifdef __cplusplus
#include <hip/hip_runtime.h>
#else
#include <hip/hip_runtime_api.h>
#endif

/* Types and constants. */
#define cudaError_t hipError_t
#define cudaStream_t hipStream_t
#define cudaEvent_t hipEvent_t
#define cudaGraph_t hipGraph_t
#define cudaGraphExec_t hipGraphExec_t
#define cudaIpcMemHandle_t hipIpcMemHandle_t
#define cudaDeviceProp hipDeviceProp_t
#define cudaStreamCaptureMode hipStreamCaptureMode
#define cudaStreamCaptureStatus hipStreamCaptureStatus
#define cudaSuccess hipSuccess
#define cudaErrorInvalidValue hipErrorInvalidValue
#define cudaErrorNotReady hipErrorNotReady
#define cudaErrorMemoryAllocation hipErrorOutOfMemory
#define cudaErrorLaunchTimeout hipErrorLaunchTimeOut
#define cudaErrorNoKernelImageForDevice hipErrorNoBinaryForGpu
#define cudaErrorStreamCaptureUnsupported hipErrorStreamCaptureUnsupported
#define cudaErrorStreamCaptureInvalidated hipErrorStreamCaptureInvalidated
#define cudaErrorStreamCaptureImplicit hipErrorStreamCaptureImplicit
#define cudaMemcpyDefault hipMemcpyDefault
#define cudaMemcpyHostToDevice hipMemcpyHostToDevice
#define cudaMemcpyDeviceToHost hipMemcpyDeviceToHost
#define cudaMemcpyDeviceToDevice hipMemcpyDeviceToDevice
#define cudaStreamNonBlocking hipStreamNonBlocking
#define cudaEventDisableTiming hipEventDisableTiming
#define cudaIpcMemLazyEnablePeerAccess hipIpcMemLazyEnablePeerAccess
#define cudaHostAllocDefault hipHostMallocDefault
/* CUDA's mapped host memory is coherent with a running kernel (the one-shot's abort and error words);
 * HIP's is only when asked (HIP_HOST_COHERENT decides otherwise). */
#define cudaHostAllocMapped (hipHostMallocMapped | hipHostMallocCoherent)
#define cudaHostAllocPortable hipHostMallocPortable
#define cudaStreamCaptureModeGlobal hipStreamCaptureModeGlobal
#define cudaStreamCaptureModeRelaxed hipStreamCaptureModeRelaxed
#define cudaStreamCaptureStatusNone hipStreamCaptureStatusNone
#define cudaDevAttrMultiProcessorCount hipDeviceAttributeMultiprocessorCount
#define cudaDevAttrMemoryClockRate hipDeviceAttributeMemoryClockRate
#define cudaDevAttrGlobalMemoryBusWidth hipDeviceAttributeMemoryBusWidth
#define cudaDevP2PAttrAccessSupported hipDevP2PAttrAccessSupported

/* Calls (same arguments unless a macro says otherwise). */
#define cudaGetErrorString hipGetErrorString
#define cudaGetErrorName hipGetErrorName
#define cudaGetLastError hipGetLastError
#define cudaGetDeviceCount hipGetDeviceCount
#define cudaGetDevice hipGetDevice
#define cudaSetDevice hipSetDevice
#define cudaGetDeviceProperties hipGetDeviceProperties
#define cudaDeviceGetAttribute hipDeviceGetAttribute
#define cudaDeviceGetPCIBusId hipDeviceGetPCIBusId
#define cudaDeviceGetByPCIBusId hipDeviceGetByPCIBusId
#define cudaDeviceGetP2PAttribute hipDeviceGetP2PAttribute
#define cudaDeviceCanAccessPeer hipDeviceCanAccessPeer
#define cudaDeviceSynchronize hipDeviceSynchronize
#define cudaDriverGetVersion hipDriverGetVersion
#define cudaRuntimeGetVersion hipRuntimeGetVersion
#define cudaMemGetInfo hipMemGetInfo
#define cudaMalloc hipMalloc
#define cudaFree hipFree
#define cudaHostAlloc hipHostMalloc
#define cudaMallocHost(ptr, size) hipHostMalloc((ptr), (size), hipHostMallocDefault)
#define cudaFreeHost hipHostFree
#define cudaHostGetDevicePointer hipHostGetDevicePointer
#define cudaMemcpy hipMemcpy
#define cudaMemcpyAsync hipMemcpyAsync
#define cudaMemset hipMemset
#define cudaMemsetAsync hipMemsetAsync
#define cudaIpcGetMemHandle hipIpcGetMemHandle
#define cudaIpcOpenMemHandle hipIpcOpenMemHandle
#define cudaIpcCloseMemHandle hipIpcCloseMemHandle
#define cudaStreamCreateWithFlags hipStreamCreateWithFlags
#define cudaStreamDestroy hipStreamDestroy
#define cudaStreamQuery hipStreamQuery
#define cudaStreamWaitEvent hipStreamWaitEvent
#define cudaStreamBeginCapture hipStreamBeginCapture
#define cudaStreamEndCapture hipStreamEndCapture
#define cudaStreamIsCapturing hipStreamIsCapturing
#define cudaThreadExchangeStreamCaptureMode hipThreadExchangeStreamCaptureMode
#define cudaEventCreate hipEventCreate
#define cudaEventCreateWithFlags hipEventCreateWithFlags
#define cudaEventRecord hipEventRecord
#define cudaEventQuery hipEventQuery
#define cudaEventElapsedTime hipEventElapsedTime
#define cudaEventDestroy hipEventDestroy
/* CUDA 12's three-argument form (flags); HIP 5.2's hipGraphInstantiate is CUDA 11's five. */
#define cudaGraphInstantiate hipGraphInstantiateWithFlags
#define cudaGraphLaunch hipGraphLaunch
#define cudaGraphDestroy hipGraphDestroy
#define cudaGraphExecDestroy hipGraphExecDestroy
#define cudaLaunchHostFunc hipLaunchHostFunc
#define cudaLaunchKernel hipLaunchKernel
/* HIP 5.2 has no hipGraphUpload; a graph's first launch uploads it (CUDA's
 * behaviour without the call too), so the stand-in only checks the stream. */
static inline hipError_t relayHipGraphUpload(hipGraphExec_t exec, hipStream_t stream) {
  (void)stream;
  return exec ? hipSuccess : hipErrorInvalidValue;
}
#define cudaGraphUpload relayHipGraphUpload

#endif /* RELAY_HAVE_HIP */

/*
 * Memory for words a kernel polls while a kernel on another GPU writes them
 * (the one-shot's and bw route's regions, opened by peers over IPC): on AMD
 * fine-grained (coherent across xGMI while a kernel runs; coarse-grained
 * memory is coherent only at kernel boundaries), on NVIDIA plain cudaMalloc
 * (NVLink stores are coherent in the owner's L2). Either can be exported
 * with cudaIpcGetMemHandle.
 */
static inline cudaError_t relayGpuMallocShared(void** p, size_t bytes) {
#ifdef RELAY_HAVE_HIP
  return hipExtMallocWithFlags(p, bytes, hipDeviceMallocFinegrained);
#else
  return cudaMalloc(p, bytes);
#endif
}

#if defined(RELAY_GPU_COMPILER) && defined(__cplusplus)
/* ---- device code ------------------------------------------------------------- */
#ifdef RELAY_HAVE_HIP
/* hipcc has no -prec-div switch: IEEE division is clang's default for HIP
 * (reduce_rules.cuh relies on it, as on nvcc's -prec-div=true). */
typedef unsigned int relayU32x4 __attribute__((ext_vector_type(4)));
#endif

/* Acquire load / release store at system scope: a flag written by a peer GPU
 * (or read by one) over NVLink / xGMI, ordering the data around it. */
__device__ __forceinline__ unsigned long long relayLdAcquireSys(const unsigned long long* p) {
#ifdef RELAY_HAVE_HIP
  return __hip_atomic_load(p, __ATOMIC_ACQUIRE, __HIP_MEMORY_SCOPE_SYSTEM);
#else
  unsigned long long v;
  asm volatile("ld.acquire.sys.global.u64 %0, [%1];" : "=l"(v) : "l"(p) : "memory");
  return v;
#endif
}
__device__ __forceinline__ void relayStReleaseSys(unsigned long long* p, unsigned long long v) {
#ifdef RELAY_HAVE_HIP
  __hip_atomic_store(p, v, __ATOMIC_RELEASE, __HIP_MEMORY_SCOPE_SYSTEM);
#else
  asm volatile("st.release.sys.global.u64 [%0], %1;" ::"l"(p), "l"(v) : "memory");
#endif
}

/* Nanoseconds of a clock every block of the device shares (the deadlines of
 * the kernels' waits). NVIDIA: %globaltimer. AMD: s_memrealtime, what newer
 * HIP calls wall_clock64() (HIP 5.2 has no such function), a constant 100 MHz
 * on gfx90a (MI200) and gfx940 (MI300), the targets RELAY_HIP_ARCHITECTURES
 * defaults to (AMD documents it; hipDeviceAttributeWallClockRate, HIP 6,
 * reports 100000 kHz there), so one tick is 10 ns. */
#ifdef RELAY_HAVE_HIP
#define RELAY_GPU_WALL_NS_PER_TICK 10ull
#endif
__device__ __forceinline__ unsigned long long relayGpuTimerNs() {
#ifdef RELAY_HAVE_HIP
  return (unsigned long long)__builtin_amdgcn_s_memrealtime() * RELAY_GPU_WALL_NS_PER_TICK;
#else
  unsigned long long t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
#endif
}

/* A load through L2 (NVIDIA ld.global.cg: peers' NVLink stores land in L2 and
 * L1 is not coherent with them). AMD: a plain load; the data is read after
 * a system-scope acquire of its flag, which invalidates the CU's L1 (and the
 * block barrier that follows it orders the block's other threads), and the
 * fine-grained region is not kept in L2 for remote writers. */
template <typename T>
__device__ __forceinline__ T relayLdL2(const T* p) {
#ifdef RELAY_HAVE_HIP
  return *p;
#else
  return __ldcg(p);
#endif
}

/* One 16-byte volatile store / load of four 32-bit words (LL and LL128
 * lines): one instruction each (st.volatile.global.v4 / global_store_dwordx4),
 * so a line's 8-byte halves land whole, as the protocols require. */
__device__ __forceinline__ void relayStVolatile16(char* p, uint32_t x, uint32_t y, uint32_t z, uint32_t w) {
#ifdef RELAY_HAVE_HIP
  relayU32x4 v = {x, y, z, w};
  *(volatile relayU32x4*)p = v;
#else
  asm volatile("st.volatile.global.v4.u32 [%0], {%1,%2,%3,%4};" ::"l"(p), "r"(x), "r"(y), "r"(z), "r"(w)
               : "memory");
#endif
}
__device__ __forceinline__ void relayLdVolatile16(const char* p, uint32_t* x, uint32_t* y, uint32_t* z,
                                                  uint32_t* w) {
#ifdef RELAY_HAVE_HIP
  relayU32x4 v = *(const volatile relayU32x4*)p;
  *x = v.x;
  *y = v.y;
  *z = v.z;
  *w = v.w;
#else
  asm volatile("ld.volatile.global.v4.u32 {%0,%1,%2,%3}, [%4];"
               : "=r"(*x), "=r"(*y), "=r"(*z), "=r"(*w)
               : "l"(p)
               : "memory");
#endif
}

/* The same 16 bytes as two 64-bit words (LL128: data words and the flag). */
__device__ __forceinline__ void relayStVolatile16x2(char* p, uint64_t lo, uint64_t hi) {
#ifdef RELAY_HAVE_HIP
  relayStVolatile16(p, (uint32_t)lo, (uint32_t)(lo >> 32), (uint32_t)hi, (uint32_t)(hi >> 32));
#else
  asm volatile("st.volatile.global.v2.u64 [%0], {%1,%2};" ::"l"(p), "l"(lo), "l"(hi) : "memory");
#endif
}
__device__ __forceinline__ void relayLdVolatile16x2(const char* p, uint64_t* lo, uint64_t* hi) {
#ifdef RELAY_HAVE_HIP
  uint32_t x, y, z, w;
  relayLdVolatile16(p, &x, &y, &z, &w);
  *lo = (uint64_t)x | ((uint64_t)y << 32);
  *hi = (uint64_t)z | ((uint64_t)w << 32);
#else
  uint64_t a, b;
  asm volatile("ld.volatile.global.v2.u64 {%0,%1}, [%2];" : "=l"(a), "=l"(b) : "l"(p) : "memory");
  *lo = a;
  *hi = b;
#endif
}

/* The warp (AMD: the wavefront) as one: a vote of all RELAY_GPU_WARP lanes,
 * lane 0's value to every lane, and the point where its lanes reconverge.
 * Callers are warp-uniform (every lane of the warp calls). AMD waves run in
 * lockstep, so the sync is a scheduling barrier only. */
__device__ __forceinline__ bool relayWarpAny(bool p) {
#ifdef RELAY_HAVE_HIP
  return __any((int)p) != 0;
#else
  return __any_sync(0xffffffffu, p) != 0;
#endif
}
__device__ __forceinline__ bool relayWarpAll(bool p) {
#ifdef RELAY_HAVE_HIP
  return __all((int)p) != 0;
#else
  return __all_sync(0xffffffffu, p) != 0;
#endif
}
__device__ __forceinline__ int relayWarpBcast0(int v) {
#ifdef RELAY_HAVE_HIP
  return __shfl(v, 0);
#else
  return __shfl_sync(0xffffffffu, v, 0);
#endif
}
__device__ __forceinline__ void relayWarpSync() {
#ifdef RELAY_HAVE_HIP
  __builtin_amdgcn_wave_barrier();
#else
  __syncwarp();
#endif
}

#endif /* RELAY_GPU_COMPILER && __cplusplus */

#endif /* RELAY_GPU_PORT_H_ */
