/*
 * Device code the one-shot (oneshot.cu) and bandwidth (bw.cu) kernels share:
 * loads through L2, the vector copy and the ordered fold, and the bounded
 * hand-shake on the region's words (waits that give up at the deadline, on
 * a peer's reported failure or on the host's abort, and the failure record).
 * Included by each kernel file inside its own translation unit (an
 * anonymous namespace: no symbols shared between them).
 */
#ifndef RELAY_NCCL_ONESHOT_DEV_CUH_
#define RELAY_NCCL_ONESHOT_DEV_CUH_

#include <stdint.h>
#include <string.h>

#include "gpu_port.h"

#include "transport/nccl/oneshot.h"
#include "transport/nccl/reduce_rules.cuh"

namespace {

/* The OP of the all-gather / all-to-all kernels: no reduce, contributions
 * side by side (never a relayRedOp_t, so fold<> is never instantiated for it). */
enum { RELAY_OS_GATHER = 1000 };

using namespace relayrd;

typedef unsigned long long u64;

/* Loads of staged data and of the caller's input: through L2 on the device
 * (relayLdL2), plain on the host emulation. */
#ifdef RELAY_GPU_DEVICE_PASS
__device__ __forceinline__ uint4 ldVec(const uint4* p) { return relayLdL2(p); }
template <typename S>
__device__ __forceinline__ S ldElem(const S* p) {
  S v;
  if (sizeof(S) == 1) {
    unsigned char x = relayLdL2((const unsigned char*)p);
    memcpy(&v, &x, 1);
  } else if (sizeof(S) == 2) {
    unsigned short x = relayLdL2((const unsigned short*)p);
    memcpy(&v, &x, 2);
  } else if (sizeof(S) == 4) {
    unsigned int x = relayLdL2((const unsigned int*)p);
    memcpy(&v, &x, 4);
  } else {
    unsigned long long x = relayLdL2((const unsigned long long*)p);
    memcpy(&v, &x, 8);
  }
  return v;
}
#else
inline uint4 ldVec(const uint4* p) { return *p; }
template <typename S>
inline S ldElem(const S* p) {
  return *p;
}
#endif

/* Copy n elements (one block's range for one peer): 4 vectors in flight per
 * thread, then the vector remainder, then the scalar tail (< 16 bytes), or
 * everything element-wise when the pointers are not 16-aligned. */
template <typename S>
RD void osCopy(S* dst, const S* src, uint64_t n, bool vec, int tid, int nthr) {
  uint64_t done = 0;
  if (vec) {
    enum { V = 16 / sizeof(S) };
    const uint64_t nv = n / V, t = (uint64_t)nthr;
    const uint4* s4 = (const uint4*)src;
    uint4* d4 = (uint4*)dst;
    uint64_t v = (uint64_t)tid;
    for (; v + 3 * t < nv; v += 4 * t) {
      uint4 x0 = ldVec(s4 + v), x1 = ldVec(s4 + v + t), x2 = ldVec(s4 + v + 2 * t),
            x3 = ldVec(s4 + v + 3 * t);
      d4[v] = x0;
      d4[v + t] = x1;
      d4[v + 2 * t] = x2;
      d4[v + 3 * t] = x3;
    }
    for (; v < nv; v += t) d4[v] = ldVec(s4 + v);
    done = nv * V;
  }
  for (uint64_t i = done + (uint64_t)tid; i < n; i += (uint64_t)nthr) dst[i] = ldElem(src + i);
}

/* dst[i] = fold over srcs[0..A-1] in that order (/ divisor), n elements. */
template <typename Tr, int OP, int NA>
RD void osFold(typename Tr::S* dst, const typename Tr::S* const* srcs, int A, uint64_t n, int divisor,
               bool vec, int tid, int nthr) {
  typedef typename Tr::S S;
  typedef typename Tr::Acc Acc;
  enum { V = 16 / sizeof(S) };
  uint64_t done = 0;
  if (vec) {
    const uint64_t nv = n / V;
    for (uint64_t v = (uint64_t)tid; v < nv; v += (uint64_t)nthr) {
      Vec16<S> x;
      x.u = ldVec((const uint4*)srcs[0] + v);
      Acc acc[V];
      UNROLL
      for (int j = 0; j < V; j++) acc[j] = Tr::load(x.e[j]);
      UNROLL
      for (int s = 1; s < NA; s++) {
        if (s < A) {
          Vec16<S> y;
          y.u = ldVec((const uint4*)srcs[s] + v);
          UNROLL
          for (int j = 0; j < V; j++) acc[j] = fold<Tr, OP>(acc[j], Tr::load(y.e[j]));
        }
      }
      Vec16<S> out;
      UNROLL
      for (int j = 0; j < V; j++) out.e[j] = Tr::store(acc[j], divisor);
      ((uint4*)dst)[v] = out.u;
    }
    done = nv * V;
  }
  for (uint64_t i = done + (uint64_t)tid; i < n; i += (uint64_t)nthr) {
    Acc acc = Tr::load(ldElem(srcs[0] + i));
    UNROLL
    for (int s = 1; s < NA; s++)
      if (s < A) acc = fold<Tr, OP>(acc, Tr::load(ldElem(srcs[s] + i)));
    dst[i] = Tr::store(acc, divisor);
  }
}

/* Record this rank's first failure: the region's sticky err (later launches
 * exit at once), every peer's rerr[me] (their waits on us end), the mapped
 * host word (the host reports it at the next call, naming the peer). The
 * host emulation (tests/gpu/emul_oneshot.cu: one thread, no atomics needed)
 * records the same words where a wait would have reached its deadline. */
__host__ __device__ void osFail(const relayOsArgs& a, unsigned code, int peerRank, int blk, u64 ep) {
  const u64 w = relayOsErrPack(code, (unsigned)peerRank, (unsigned)blk, ep);
  u64* err = (u64*)(a.region[a.me] + a.L.ctlOff + 8);
#ifdef RELAY_GPU_DEVICE_PASS
  if (atomicCAS(err, 0ull, w) != 0ull) return; /* not the first */
  *(volatile u64*)a.hostErr = w;
  __threadfence_system();
#else
  if (*err != 0) return;
  *err = w;
  if (a.hostErr) *a.hostErr = w;
#endif
  const int myRank = a.rank[a.me];
  for (int i = 0; i < a.nActive; i++)
    if (i != a.me) *(volatile u64*)(a.region[i] + relayOsRerrOff(&a.L, myRank)) = w;
#ifdef RELAY_GPU_DEVICE_PASS
  __threadfence_system();
#endif
}

/* ---- device-only: the hand-shake ---------------------------------------- */

__device__ __forceinline__ u64 ldAcquireSys(const u64* p) { return relayLdAcquireSys(p); }
__device__ __forceinline__ void stReleaseSys(u64* p, u64 v) { relayStReleaseSys(p, v); }
__device__ __forceinline__ u64 ldVolatile(const u64* p) { return *(const volatile u64*)p; }
__device__ __forceinline__ void stVolatile(u64* p, u64 v) { *(volatile u64*)p = v; }
__device__ __forceinline__ u64 globalTimer() { return relayGpuTimerNs(); }
__device__ __forceinline__ u64* wordAt(char* base, uint64_t off) { return (u64*)(base + off); }

/* The give-up checks of a bounded poll (osWait, llSpin), run every 64
 * polls: this rank failed elsewhere (another block), the peer reported a
 * failure, the deadline passed; every 1024: the host aborted (a PCIe read,
 * ~1 us). Returns false when the wait must end (the failure recorded). */
__device__ __forceinline__ bool osKeepWaiting(const relayOsArgs& a, unsigned it, u64 t0, const u64* err,
                                              const u64* rerr, unsigned code, int peerRank, int blk, u64 ep) {
  if (ldVolatile(err) != 0) return false;
  if (ldVolatile(rerr) != 0) {
    osFail(a, RELAY_OS_ERR_REMOTE, peerRank, blk, ep);
    return false;
  }
  if ((it & 1023u) == 0 && *a.hostAbort != 0) {
    osFail(a, RELAY_OS_ERR_ABORTED, peerRank, blk, ep);
    return false;
  }
  if (globalTimer() - t0 > a.timeoutNs) {
    osFail(a, code, peerRank, blk, ep);
    return false;
  }
  return true;
}

/* What a bounded poll on peer active peerIdx checks (osKeepWaiting). */
struct OsWaitCtx {
  const u64* err;
  const u64* rerr;
  u64 t0;
  int peerRank;
};
__device__ __forceinline__ OsWaitCtx osWaitCtx(const relayOsArgs& a, int peerIdx) {
  OsWaitCtx w;
  w.peerRank = a.rank[peerIdx];
  char* mine = a.region[a.me];
  w.err = wordAt(mine, a.L.ctlOff + 8);
  w.rerr = wordAt(mine, relayOsRerrOff(&a.L, w.peerRank));
  w.t0 = globalTimer();
  return w;
}

/* Wait until *word >= want (wrap-safe), bounded by osKeepWaiting. */
__device__ bool osWait(const relayOsArgs& a, const u64* word, u64 want, int peerIdx, unsigned code, int blk,
                       u64 ep) {
  if ((long long)(ldAcquireSys(word) - want) >= 0) return true;
  const OsWaitCtx w = osWaitCtx(a, peerIdx);
  for (unsigned it = 1;; it++) {
    if ((long long)(ldAcquireSys(word) - want) >= 0) return true;
    if ((it & 63u) != 0) continue;
    if (!osKeepWaiting(a, it, w.t0, w.err, w.rerr, code, w.peerRank, blk, ep)) return false;
  }
}

/* A kernel (or host runner) per element type, op and width, as the visit()
 * of reduce_rules.cuh asks: F::get<Tr, OP, NA>() for the pair (NA = 2, at
 * A = 2) or the 8-active instantiation, OP = RELAY_OS_GATHER for a gather. */
/* The one width choice of every one-shot and bw kernel (and their host
 * emulations): pair kernels (NA = 2) at A = 2 unless RELAYCC_ONESHOT_WIDE,
 * else compiled for RELAY_OS_MAX_ACTIVE (oneshot.cu PickKernel says why); a
 * gather's kernels depend on the element type only. F::get<Tr, OP, NA>()
 * returns the kernel (f carries any further choice, the one-shot's protocol). */
/* A kernel's first step (every block): *fail = the comm failed before (exit
 * before touching any peer), sEp[i] = active i's pair epoch at epochsOff
 * (base + comm rank * 8 in my region) + add. Ends with __syncthreads. */
__device__ __forceinline__ void osEnter(const relayOsArgs& a, uint64_t epochsOff, u64 add, u64* sEp,
                                        int* fail) {
  const int tid = threadIdx.x, A = a.nActive, me = a.me;
  char* const mine = a.region[me];
  if (tid == 0) *fail = ldVolatile(wordAt(mine, a.L.ctlOff + 8)) != 0;
  if (tid < RELAY_OS_MAX_ACTIVE)
    sEp[tid] =
        tid < A && tid != me ? ldVolatile(wordAt(mine, epochsOff + (uint64_t)a.rank[tid] * 8)) + add : 0;
  __syncthreads();
}

/* The last block out of a launch (the region's done counter; kernels of one
 * comm are stream-ordered) resets the counter and, when the comm has not
 * failed and adv != 0, stores sEp[i] + adv into every peer's epoch at
 * epochsOff (read by the next launch on this GPU, ordered by the kernel
 * boundary). Every block must reach it, failed or not. Returns true in the
 * last block's thread 0 when it advanced. */
__device__ __forceinline__ bool osLastBlockOut(const relayOsArgs& a, uint64_t epochsOff, const u64* sEp,
                                               u64 adv) {
  if (threadIdx.x != 0) return false;
  char* const mine = a.region[a.me];
  unsigned* done = (unsigned*)(mine + a.L.ctlOff);
  __threadfence();
  if (atomicAdd(done, 1u) != gridDim.x - 1) return false;
  __threadfence();
  *(volatile unsigned*)done = 0;
  if (ldVolatile(wordAt(mine, a.L.ctlOff + 8)) != 0 || !adv) return false;
  for (int i = 0; i < a.nActive; i++)
    if (i != a.me) stVolatile(wordAt(mine, epochsOff + (uint64_t)a.rank[i] * 8), sEp[i] + adv);
  return true;
}

template <typename F>
struct PickWidth {
  typedef typename F::Result Result;
  F f;
  int gather, pair;
  PickWidth() : f(), gather(0), pair(0) {}
  /* From a launch's arguments (NULL: nothing picked). */
  explicit PickWidth(const relayOsArgs* a, F fn = F())
      : f(fn), gather(a ? a->gather : 0), pair(a && a->nActive == 2 && !a->wide) {}
  template <typename Tr, int OP>
  Result apply() {
    if (pair) return gather ? f.template get<Tr, RELAY_OS_GATHER, 2>() : f.template get<Tr, OP, 2>();
    return gather ? f.template get<Tr, RELAY_OS_GATHER, RELAY_OS_MAX_ACTIVE>()
                  : f.template get<Tr, OP, RELAY_OS_MAX_ACTIVE>();
  }
  Result none() { return NULL; }
};

}  // namespace

#endif
