/*
 * The one-shot path on real GPUs: one process per GPU (forked here), every
 * rank active (A = 2 on 2 GPUs, A = all GPUs otherwise), comms made with
 * relayCommInitNcclShm and route forced to oneshot. Outputs are compared bit
 * for bit with relayHostReduce over the same inputs in active-index order
 * (random finite values: rounding, fp32 accumulation of bf16 and avg's
 * division all have to match), and relayCommLastRoute must say which route
 * ran, so a silent fallback to direct fails.
 *
 *  sweep     all-reduce and reduce-scatter x sum/avg x fp32/bf16 x in-place
 *            and out-of-place x 4 B .. 1 MiB (odd counts) + misaligned
 *            buffers; guard bytes around outputs; odd ranks sleep 20 ms
 *            before the launch on even cases, even ranks on odd ones (a
 *            stale epoch or staging read then fails deterministically).
 *            Sizes up to 256 KiB take the LL protocol, larger ones the flag
 *            protocol (LL128 from 64 KiB); then the sweep again with
 *            RELAYCC_ONESHOT_LL_BYTES=0 (flags at every size) and with
 *            RELAYCC_ONESHOT_LL128_BYTES=1 (LL128 up to 256 KiB)
 *  b2b       10^4 back-to-back calls, inputs rotating over 16 sets per dtype,
 *            collectives, sizes and protocols varying (LL at 16 and 1.5
 *            KiB, flags at 256 KiB + 4 B on every 7th call, LL128 at 128
 *            KiB + 12 B on every 7th other),
 *            one rank's stream held 3 ms by a host function every 500 calls
 *            (both parities), every 97th output copied back and checked
 *  graph     3 one-shot calls (LL, LL, flags) captured (global mode) with their input copy
 *            and output copies, replayed 1000 times with new inputs, odd or
 *            even ranks 1 ms late by turns, every replay checked
 *  capture0  a fresh comm whose first eligible call is captured: direct on
 *            every rank (no region may be made under capture), correct on
 *            replay; the next uncaptured call makes the region (one-shot);
 *            then 50 calls interleaved with the main comm (two regions)
 *  atinit    RELAYCC_ONESHOT_PREPARE=1: the region exists at init, so the
 *            first call, captured, is already one-shot
 *  fault     RELAYCC_ONESHOT_FAULT_RANK=1: every rank runs direct, correctly
 *  deadline  a 1 s comm deadline and rank 1 3 s late: rank 0's kernel gives
 *            up, its next call says relayTimeout naming rank 1; rank 1's
 *            says relayRemoteError naming rank 0; nothing hangs
 *  rooted    broadcast and reduce (the kernel's rooted form): every dtype
 *            (reduce: sum; fp32 and bf16 every op) x the root at every
 *            position x LL, LL128 and flag sizes (odd counts, 0 too) x in
 *            and out of place, members passing NULL where the API allows;
 *            skewed as the sweep; members' outputs untouched, inputs kept
 *  rootedb2b 3000 back-to-back broadcasts and reduces, root moving, sizes
 *            over the three protocols, the slow reader's stream held 3 ms
 *            every 300 calls, every 37th output checked
 *  rooteddl  the deadline case for a broadcast: its root (rank 0) gives up
 *            waiting for late rank 1 and names it
 *  cycles    100 create/call/destroy cycles of comms wrapping one NCCL comm:
 *            no peer mapping left open, free device memory not down by a
 *            region; 8 rounds of comms owning their NCCL comm beside bare
 *            NCCL comms: no mapping left, memory lost per kind printed
 *
 * Every wait is a cudaStreamQuery poll with a deadline. Logs: stdout and
 * $OUT/gputest_oneshot.log. Each CTest row runs A ranks, all active (A2, A4, A8; fewer where the harness
 * has fewer: RELAYCC_GPUTEST_RANKS, docs/gpu-harness.md).
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "comm/comm.h"
#include "comm/common.h"
#include "core/core.h"
#include "gpu/gpu_util.h"
#include "gpu/reduce_inputs.h"
#include "reduce_host.h"
#include "relaycc_nccl.h"
#include "transport/nccl/oneshot.h"

#define WAIT_S 60.0
#define GUARD 256
#define POISON 0xA5
#define SLOT ((size_t)1 << 20) /* RELAYCC_ONESHOT_MAX_BYTES default: count * elemSize <= 1 MiB */
#define MAXR 8

enum { AR = 0, RS = 1 };
static const char* kColl[2] = {"allreduce", "reducescatter"};

typedef struct {
  char job[128];
} opts_t;

typedef struct {
  int rank, n, A, me;
  int dev; /* this rank's GPU (rank % GPUs) */
  int ranks[MAXR];
  relayLayout_t L;
  cudaStream_t s;
  char *dSend, *dRecv; /* pools: GUARD + A MiB + GUARD + 64 */
  size_t pool;
  unsigned char *hIn, *hOut, *hWant;
  unsigned char* hTmp[MAXR]; /* every active's input, for the expected output */
  size_t hostBytes;
} rk_t;

static void sleepMs(int ms) {
  struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
  nanosleep(&ts, NULL);
}

static uint64_t seedOf(uint64_t call, int src) { return call * 1000003ull + (uint64_t)src * 7919ull + 1; }

/* The output of active `me` for a call whose inputs are seeded by `call`. */
static void expectOut(rk_t* R, unsigned char* out, int coll, relayDataType_t dt, relayRedOp_t op, size_t c,
                      uint64_t call) {
  size_t es = relayTypeSize(dt), in = coll == RS ? (size_t)R->A * c : c;
  const void* srcs[MAXR];
  for (int i = 0; i < R->A; i++) {
    riFill(R->hTmp[i], in, dt, seedOf(call, i));
    srcs[i] = R->hTmp[i] + (coll == RS ? (size_t)R->me * c * es : 0);
  }
  relayHostReduce(out, srcs, R->A, c, dt, op, op == relayAvg ? R->A : 0);
}

static relayResult_t issue(rk_t* R, relayComm_t comm, int coll, const void* send, void* recv, size_t c,
                           relayDataType_t dt, relayRedOp_t op) {
  return coll == AR ? relayAllReduce(send, recv, &c, dt, op, &R->L, comm, R->s)
                    : relayReduceScatter(send, recv, &c, dt, op, &R->L, comm, R->s);
}

static void expectRoute(relayComm_t comm, int want, const char* what) {
  int route = -1;
  relayCommLastRoute(comm, &route, NULL);
  G_CHECK(route == want, "%s: ran route %s, expected %s", what, relayRouteName(route), relayRouteName(want));
}

static void compareOut(const unsigned char* got, const unsigned char* want, size_t c, size_t es,
                       const char* what) {
  if (memcmp(got, want, c * es) == 0) return;
  size_t e = 0;
  while (e < c && memcmp(got + e * es, want + e * es, es) == 0) e++;
  unsigned long long gv = 0, wv = 0;
  memcpy(&gv, got + e * es, es);
  memcpy(&wv, want + e * es, es);
  G_CHECK(0, "%s: element %zu of %zu: got 0x%llx, want 0x%llx (relayHostReduce)", what, e, c, gv, wv);
}

/* ---- sweep ---------------------------------------------------------------- */

typedef struct {
  int coll;
  relayDataType_t dt;
  relayRedOp_t op;
  int inPlace, off; /* off: buffers start this many elements past 256-byte alignment */
  size_t count;
} case_t;

static void runCase(rk_t* R, relayComm_t comm, const case_t* k, int caseNo) {
  size_t es = relayTypeSize(k->dt), c = k->count, in = k->coll == RS ? (size_t)R->A * c : c;
  size_t off = (size_t)k->off * es, sendBytes = in * es, recvBytes = c * es;
  char what[256];
  snprintf(what, sizeof what, "sweep #%d %s %s %s count=%zu %s off=%d", caseNo, kColl[k->coll],
           relayTypeName(k->dt), relayOpName(k->op), c, k->inPlace ? "in-place" : "out-of-place", k->off);
  riFill(R->hIn, in, k->dt, seedOf((uint64_t)caseNo, R->me));
  size_t regionBytes = k->inPlace ? sendBytes : recvBytes;
  char* region = R->dRecv + GUARD + off;
  void *send, *recv;
  G_CUDA(cudaMemsetAsync(R->dRecv, POISON, R->pool, R->s));
  if (k->inPlace) {
    send = region;
    recv = region + (k->coll == RS ? (size_t)R->me * c * es : 0);
  } else {
    send = R->dSend + GUARD + off;
    recv = region;
  }
  G_CUDA(cudaMemcpyAsync(send, R->hIn, sendBytes, cudaMemcpyHostToDevice, R->s));
  gpuWait(R->s, WAIT_S, "sweep setup");
  /* Skew both ways: odd ranks late on even cases, even ranks on odd ones. */
  if ((R->rank & 1) != (caseNo & 1)) sleepMs(20);
  relayResult_t r = issue(R, comm, k->coll, send, recv, c, k->dt, k->op);
  G_CHECK(r == relaySuccess, "%s: %s: %s", what, relayGetErrorString(r), relayGetLastError(comm));
  expectRoute(comm, relayRouteOneShot, what);
  gpuWait(R->s, WAIT_S, what);
  size_t span = 2 * GUARD + off + regionBytes;
  G_CUDA(cudaMemcpyAsync(R->hOut, R->dRecv, span, cudaMemcpyDeviceToHost, R->s));
  gpuWait(R->s, WAIT_S, "copy back");
  for (size_t b = 0; b < GUARD + off; b++)
    G_CHECK(R->hOut[b] == POISON, "%s: byte %zu before the buffer was written", what, GUARD + off - b);
  for (size_t b = 0; b < GUARD; b++)
    G_CHECK(R->hOut[GUARD + off + regionBytes + b] == POISON, "%s: byte %zu past the buffer was written",
            what, b);
  expectOut(R, R->hWant, k->coll, k->dt, k->op, c, (uint64_t)caseNo);
  compareOut(R->hOut + GUARD + off + ((char*)recv - region), R->hWant, c, es, what);
  if (!k->inPlace) {
    G_CUDA(cudaMemcpyAsync(R->hOut, send, sendBytes, cudaMemcpyDeviceToHost, R->s));
    gpuWait(R->s, WAIT_S, "copy back send");
    G_CHECK(memcmp(R->hOut, R->hIn, sendBytes) == 0, "%s: the send buffer was modified", what);
  }
}

static void sweep(rk_t* R, relayComm_t comm) {
  static const size_t kBytes[] = {4, 12, 100, 1020, 4100, 65540, 262148, 1048572};
  static const relayDataType_t kTypes[] = {relayFloat32, relayBfloat16};
  static const relayRedOp_t kOps[] = {relaySum, relayAvg};
  int caseNo = 0;
  double t0 = gpuNow();
  for (int coll = 0; coll < 2; coll++)
    for (int ti = 0; ti < 2; ti++)
      for (int oi = 0; oi < 2; oi++)
        for (int ip = 0; ip < 2; ip++)
          for (int bi = 0; bi < 8; bi++) {
            size_t es = relayTypeSize(kTypes[ti]);
            size_t c = (kBytes[bi] / es) | 1; /* odd counts: vector body and scalar tail */
            if (c * es > SLOT) c -= 2;
            case_t k = {coll, kTypes[ti], kOps[oi], ip, 0, c};
            runCase(R, comm, &k, caseNo++);
          }
  /* Misaligned callers (one element past alignment): no 16-byte accesses. */
  for (int coll = 0; coll < 2; coll++)
    for (int ti = 0; ti < 2; ti++)
      for (int bi = 0; bi < 2; bi++) {
        size_t es = relayTypeSize(kTypes[ti]);
        case_t k = {coll, kTypes[ti], relaySum, 0, 1, ((bi ? 65540 : 1020) / es) | 1};
        runCase(R, comm, &k, caseNo++);
      }
  if (R->rank == 0) gpuLog("ok: sweep, %d cases (skewed both ways), %.2f s", caseNo, gpuNow() - t0);
}

/* ---- back-to-back ------------------------------------------------------- */

static void holdStream(void* arg) {
  (void)arg;
  sleepMs(3); /* a host function on the stream: this rank's GPU timeline falls 3 ms behind */
}

enum { B2B_CALLS = 10000, B2B_SETS = 16, B2B_EVERY = 97 };

typedef struct {
  int coll;
  relayDataType_t dt;
  relayRedOp_t op;
  size_t count;
} b2bShape;

/* Call k's shape: the three protocols, interleaved (LL and LL128 share
 * their lines and epochs, so each must leave them as the other expects). */
static b2bShape b2bShapeOf(int k) {
  b2bShape s;
  if (k % 7 == 3) {
    s.coll = AR, s.dt = relayFloat32, s.op = relaySum, s.count = 65537; /* 256 KiB + 4: flags, 64 blocks */
  } else if (k % 7 == 5) {
    s.coll = AR, s.dt = relayFloat32, s.op = relaySum, s.count = 32771; /* 128 KiB + 12: LL128 */
  } else if (k & 1) {
    s.coll = RS, s.dt = relayBfloat16, s.op = relayAvg, s.count = 777; /* 1.5 KiB per rank: LL */
  } else {
    s.coll = AR, s.dt = relayFloat32, s.op = relaySum, s.count = 4099; /* 16 KiB: LL */
  }
  return s;
}

static void backToBack(rk_t* R, relayComm_t comm) {
  const size_t setElems = 65537 > (size_t)R->A * 777 ? 65537 : (size_t)R->A * 777;
  char* dSets[2];
  G_CUDA(cudaMalloc((void**)&dSets[0], B2B_SETS * setElems * 4)); /* fp32 sets */
  G_CUDA(cudaMalloc((void**)&dSets[1], B2B_SETS * setElems * 2)); /* bf16 sets */
  char* dOut;
  G_CUDA(cudaMalloc((void**)&dOut, setElems * 4));
  for (int set = 0; set < B2B_SETS; set++)
    for (int t = 0; t < 2; t++) {
      relayDataType_t dt = t ? relayBfloat16 : relayFloat32;
      size_t es = relayTypeSize(dt);
      riFill(R->hIn, setElems, dt, seedOf(50000 + (uint64_t)set * 2 + (uint64_t)t, R->me));
      G_CUDA(cudaMemcpyAsync(dSets[t] + (size_t)set * setElems * es, R->hIn, setElems * es,
                             cudaMemcpyHostToDevice, R->s));
      gpuWait(R->s, WAIT_S, "b2b setup");
    }
  const int nSamples = B2B_CALLS / B2B_EVERY + 2; /* every 97th call, and the last in a slot of its own */
  unsigned char* hSamples = NULL;
  G_CUDA(cudaMallocHost((void**)&hSamples, (size_t)nSamples * 65537 * 4));
  G_RELAY(comm, relayCommBarrier(comm));
  double t0 = gpuNow();
  for (int k = 0; k < B2B_CALLS; k++) {
    b2bShape sh = b2bShapeOf(k);
    int t = sh.dt == relayBfloat16, set = k % B2B_SETS;
    size_t es = relayTypeSize(sh.dt);
    const char* send = dSets[t] + (size_t)set * setElems * es;
    if (k % 500 == 250 && (R->rank & 1) == ((k / 500) & 1))
      G_CUDA(cudaLaunchHostFunc(R->s, holdStream, NULL));
    relayResult_t r = issue(R, comm, sh.coll, send, dOut, sh.count, sh.dt, sh.op);
    G_CHECK(r == relaySuccess, "b2b call %d: %s: %s", k, relayGetErrorString(r), relayGetLastError(comm));
    expectRoute(comm, relayRouteOneShot, "b2b");
    if (k % B2B_EVERY == 0 || k == B2B_CALLS - 1) {
      int j = k % B2B_EVERY == 0 ? k / B2B_EVERY : nSamples - 1;
      G_CUDA(cudaMemcpyAsync(hSamples + (size_t)j * 65537 * 4, dOut, sh.count * es, cudaMemcpyDeviceToHost,
                             R->s));
    }
  }
  gpuWait(R->s, 4 * WAIT_S, "10^4 back-to-back one-shot calls");
  double dt = gpuNow() - t0;
  int checked = 0;
  for (int k = 0; k < B2B_CALLS; k++) {
    if (!(k % B2B_EVERY == 0 || k == B2B_CALLS - 1)) continue;
    int j = k % B2B_EVERY == 0 ? k / B2B_EVERY : nSamples - 1;
    b2bShape sh = b2bShapeOf(k);
    int t = sh.dt == relayBfloat16, set = k % B2B_SETS;
    /* The expected output: the inputs of set `set` of every active. */
    size_t es = relayTypeSize(sh.dt);
    const void* srcs[MAXR];
    for (int i = 0; i < R->A; i++) {
      riFill(R->hTmp[i], setElems, sh.dt, seedOf(50000 + (uint64_t)set * 2 + (uint64_t)t, i));
      srcs[i] = R->hTmp[i] + (sh.coll == RS ? (size_t)R->me * sh.count * es : 0);
    }
    relayHostReduce(R->hWant, srcs, R->A, sh.count, sh.dt, sh.op, sh.op == relayAvg ? R->A : 0);
    char what[128];
    snprintf(what, sizeof what, "b2b call %d (%s %s count %zu, set %d)", k, kColl[sh.coll],
             relayTypeName(sh.dt), sh.count, set);
    compareOut(hSamples + (size_t)j * 65537 * 4, R->hWant, sh.count, es, what);
    checked++;
  }
  if (R->rank == 0)
    gpuLog(
        "ok: %d back-to-back calls in %.3f s (%.2f us per call, streamed, incl. 20 x 3 ms holds), %d checked",
        B2B_CALLS, dt, dt * 1e6 / B2B_CALLS, checked);
  G_CUDA(cudaFreeHost(hSamples));
  G_CUDA(cudaFree(dSets[0]));
  G_CUDA(cudaFree(dSets[1]));
  G_CUDA(cudaFree(dOut));
}

/* ---- rooted: broadcast and reduce ---------------------------------------- */

/* Active me's expected output of a rooted call seeded by `call` (broadcast: the root's input; reduce: the
 * fold of all A in active-index order, the root's alone). */
static void expectRooted(rk_t* R, unsigned char* out, int bcast, relayDataType_t dt, relayRedOp_t op,
                         size_t c, int root, uint64_t call) {
  const void* srcs[MAXR];
  for (int i = 0; i < R->A; i++) {
    riFill(R->hTmp[i], c, dt, seedOf(call, i));
    srcs[i] = R->hTmp[i];
  }
  if (bcast) memcpy(out, R->hTmp[root], c * relayTypeSize(dt));
  else relayHostReduce(out, srcs, R->A, c, dt, op, op == relayAvg ? R->A : 0);
}

static relayResult_t issueRooted(rk_t* R, relayComm_t comm, int bcast, const void* send, void* recv, size_t c,
                                 relayDataType_t dt, relayRedOp_t op, int root) {
  return bcast ? relayBroadcast(send, recv, &c, dt, root, &R->L, comm, R->s)
               : relayReduce(send, recv, &c, dt, op, root, &R->L, comm, R->s);
}

/* One rooted call checked whole: the output (a reduce's members: untouched, poison), the guards, the input.
 */
static void rootedCase(rk_t* R, relayComm_t comm, int bcast, relayDataType_t dt, relayRedOp_t op, size_t c,
                       int root, int inPlace, int caseNo) {
  const size_t es = relayTypeSize(dt), bytes = c * es;
  const int isRoot = R->me == root, written = bcast || isRoot;
  char what[256];
  snprintf(what, sizeof what, "rooted #%d %s %s %s count=%zu root=%d %s", caseNo,
           bcast ? "broadcast" : "reduce", relayTypeName(dt), bcast ? "-" : relayOpName(op), c, root,
           inPlace ? "in-place" : "out-of-place");
  const uint64_t call = 90000 + (uint64_t)caseNo;
  riFill(R->hIn, c, dt, seedOf(call, R->me));
  G_CUDA(cudaMemsetAsync(R->dRecv, POISON, R->pool, R->s));
  G_CUDA(cudaMemsetAsync(R->dSend, POISON, R->pool, R->s));
  char* buf = R->dRecv + GUARD;
  void* send = inPlace ? buf : R->dSend + GUARD;
  void* recv = buf;
  G_CUDA(cudaMemcpyAsync(send, R->hIn, bytes, cudaMemcpyHostToDevice, R->s));
  gpuWait(R->s, WAIT_S, "rooted setup");
  /* Out of place, a member passes NULL where the API allows it (every other case). */
  if (!inPlace && !isRoot && caseNo % 2) {
    if (bcast) send = NULL;
    else recv = NULL;
  }
  if ((R->rank & 1) != (caseNo & 1)) sleepMs(20);
  relayResult_t r = issueRooted(R, comm, bcast, send, recv, c, dt, op, root);
  G_CHECK(r == relaySuccess, "%s: %s: %s", what, relayGetErrorString(r), relayGetLastError(comm));
  if (c) expectRoute(comm, relayRouteOneShot, what);
  gpuWait(R->s, WAIT_S, what);
  G_CUDA(cudaMemcpyAsync(R->hOut, R->dRecv, 2 * GUARD + bytes, cudaMemcpyDeviceToHost, R->s));
  gpuWait(R->s, WAIT_S, "copy back");
  for (size_t b = 0; b < GUARD; b++) {
    G_CHECK(R->hOut[b] == POISON, "%s: byte %zu before the buffer was written", what, GUARD - b);
    G_CHECK(R->hOut[GUARD + bytes + b] == POISON, "%s: byte %zu past the buffer was written", what, b);
  }
  if (written) {
    expectRooted(R, R->hWant, bcast, dt, op, c, root, call);
    compareOut(R->hOut + GUARD, R->hWant, c, es, what);
  } else if (inPlace) {
    compareOut(R->hOut + GUARD, R->hIn, c, es, what); /* a reduce's member: its buffer is its input, kept */
  } else {
    for (size_t b = 0; b < bytes; b++)
      G_CHECK(R->hOut[GUARD + b] == POISON, "%s: a reduce's member's output was written (byte %zu)", what, b);
  }
  if (!inPlace) {
    G_CUDA(cudaMemcpyAsync(R->hOut, R->dSend + GUARD, bytes, cudaMemcpyDeviceToHost, R->s));
    gpuWait(R->s, WAIT_S, "copy back send");
    G_CHECK(memcmp(R->hOut, R->hIn, bytes) == 0, "%s: the send buffer was modified", what);
  }
}

static void rootedSweep(rk_t* R, relayComm_t comm) {
  /* LL (up to 256 KiB; LL128 from 64 KiB) and the flag protocol above; 0: nothing launched. */
  static const size_t kBytes[] = {0, 4, 100, 4100, 65540, 262148, 1048572};
  static const relayDataType_t kTypes[] = {relayFloat32, relayBfloat16};
  int caseNo = 0;
  double t0 = gpuNow();
  for (int bcast = 0; bcast < 2; bcast++)
    for (int root = 0; root < R->A; root++)
      for (int bi = 0; bi < 7; bi++)
        for (int ip = 0; ip < 2; ip++) {
          relayDataType_t dt = kTypes[(root + bi) % 2];
          size_t es = relayTypeSize(dt), c = kBytes[bi] ? (kBytes[bi] / es) | 1 : 0;
          if (c * es > SLOT) c -= 2;
          rootedCase(R, comm, bcast, dt, riOps[(root + bi + ip) % 5], c, root, ip, caseNo++);
        }
  /* Every dtype (reduce: sum; broadcast: the bytes alone), and fp32 / bf16 with every op, root moving. */
  for (int ti = 0; ti < RI_NTYPES; ti++)
    for (int bcast = 0; bcast < 2; bcast++)
      rootedCase(R, comm, bcast, riTypes[ti], relaySum, 1001 + (size_t)ti, (ti + bcast) % R->A, ti % 2,
                 caseNo++);
  for (int ti = 0; ti < 2; ti++)
    for (int oi = 0; oi < 5; oi++)
      rootedCase(R, comm, 0, kTypes[ti], riOps[oi], 20001, (ti + oi) % R->A, 0, caseNo++);
  if (R->rank == 0) gpuLog("ok: rooted sweep, %d cases (skewed both ways), %.2f s", caseNo, gpuNow() - t0);
}

enum { RB2B_CALLS = 3000, RB2B_EVERY = 37 };

/* Call k of the rooted back-to-back run: broadcast or reduce, root, size (the three protocols). */
static void rootedShape(int k, int A, int* bcast, int* root, size_t* count) {
  *bcast = k % 3 != 1;
  *root = (k / 2) % A;
  *count = k % 11 == 4 ? 65537 : k % 11 == 7 ? 32771 : k % 2 ? 777 : 4099; /* flags, LL128, LL, LL */
}

static void rootedBackToBack(rk_t* R, relayComm_t comm) {
  const size_t maxC = 65537;
  char* dIn;
  char* dOut;
  G_CUDA(cudaMalloc((void**)&dIn, B2B_SETS * maxC * 4));
  G_CUDA(cudaMalloc((void**)&dOut, maxC * 4));
  for (int set = 0; set < B2B_SETS; set++) {
    riFill(R->hIn, maxC, relayFloat32, seedOf(70000 + (uint64_t)set, R->me));
    G_CUDA(cudaMemcpyAsync(dIn + (size_t)set * maxC * 4, R->hIn, maxC * 4, cudaMemcpyHostToDevice, R->s));
    gpuWait(R->s, WAIT_S, "rooted b2b setup");
  }
  const int nSamples = RB2B_CALLS / RB2B_EVERY + 1;
  unsigned char* hSamples = NULL;
  G_CUDA(cudaMallocHost((void**)&hSamples, (size_t)nSamples * maxC * 4));
  G_RELAY(comm, relayCommBarrier(comm));
  double t0 = gpuNow();
  for (int k = 0; k < RB2B_CALLS; k++) {
    int bcast, root;
    size_t c;
    rootedShape(k, R->A, &bcast, &root, &c);
    /* The slow reader: a broadcast's member, a reduce's root (rank 1 and then rank 0 by turns). */
    if (k % 300 == 150 && R->rank == (k / 300) % 2) G_CUDA(cudaLaunchHostFunc(R->s, holdStream, NULL));
    relayResult_t r = issueRooted(R, comm, bcast, dIn + (size_t)(k % B2B_SETS) * maxC * 4, dOut, c,
                                  relayFloat32, relaySum, root);
    G_CHECK(r == relaySuccess, "rooted b2b call %d: %s: %s", k, relayGetErrorString(r),
            relayGetLastError(comm));
    expectRoute(comm, relayRouteOneShot, "rooted b2b");
    if (k % RB2B_EVERY == 0 && (bcast || R->me == root))
      G_CUDA(cudaMemcpyAsync(hSamples + (size_t)(k / RB2B_EVERY) * maxC * 4, dOut, c * 4,
                             cudaMemcpyDeviceToHost, R->s));
  }
  gpuWait(R->s, 4 * WAIT_S, "rooted back-to-back calls");
  double dt = gpuNow() - t0;
  int checked = 0;
  for (int k = 0; k < RB2B_CALLS; k += RB2B_EVERY) {
    int bcast, root;
    size_t c;
    rootedShape(k, R->A, &bcast, &root, &c);
    if (!bcast && R->me != root) continue;
    const void* srcs[MAXR];
    for (int i = 0; i < R->A; i++) {
      riFill(R->hTmp[i], maxC, relayFloat32, seedOf(70000 + (uint64_t)(k % B2B_SETS), i));
      srcs[i] = R->hTmp[i];
    }
    if (bcast) memcpy(R->hWant, R->hTmp[root], c * 4);
    else relayHostReduce(R->hWant, srcs, R->A, c, relayFloat32, relaySum, 0);
    char what[128];
    snprintf(what, sizeof what, "rooted b2b call %d (%s root %d count %zu)", k,
             bcast ? "broadcast" : "reduce", root, c);
    compareOut(hSamples + (size_t)(k / RB2B_EVERY) * maxC * 4, R->hWant, c, 4, what);
    checked++;
  }
  if (R->rank == 0)
    gpuLog("ok: %d rooted back-to-back calls in %.3f s (%.2f us per call, incl. 3 ms holds), %d checked here",
           RB2B_CALLS, dt, dt * 1e6 / RB2B_CALLS, checked);
  G_CUDA(cudaFreeHost(hSamples));
  G_CUDA(cudaFree(dIn));
  G_CUDA(cudaFree(dOut));
}

/* ---- graphs --------------------------------------------------------------- */

/* The calls of one captured graph: inputs travel in one pinned-host -> device
 * copy at the start of each replay, outputs back in copies at its end. */
typedef struct {
  int nCalls;
  int coll[3];
  relayDataType_t dt[3];
  relayRedOp_t op[3];
  size_t count[3];
  int inPlace[3];
  size_t inOff[3], outOff[3], hostOut[3]; /* bytes */
  size_t inBytes, outBytes, hostOutBytes;
  unsigned char *hIn, *hOut; /* pinned */
  char *dIn, *dOut;
} graphCalls;

static size_t up256(size_t x) { return (x + 255) / 256 * 256; }

static void graphSetup(rk_t* R, graphCalls* g, int full) {
  memset(g, 0, sizeof *g);
  g->nCalls = full ? 3 : 1;
  int colls[3] = {AR, RS, AR};
  relayDataType_t dts[3] = {relayFloat32, relayBfloat16, relayBfloat16};
  relayRedOp_t ops[3] = {relaySum, relaySum, relayAvg};
  size_t counts[3] = {1001, 515, 140001}; /* LL, LL, and 280 KB: the flag protocol */
  int inPlace[3] = {0, 1, 0};
  for (int i = 0; i < g->nCalls; i++) {
    size_t es = relayTypeSize(dts[i]);
    g->coll[i] = colls[i];
    g->dt[i] = dts[i];
    g->op[i] = ops[i];
    g->count[i] = counts[i];
    g->inPlace[i] = inPlace[i];
    g->inOff[i] = g->inBytes;
    g->inBytes += up256((colls[i] == RS ? (size_t)R->A : 1) * counts[i] * es);
    g->outOff[i] = g->outBytes;
    g->outBytes += up256(counts[i] * es);
    g->hostOut[i] = g->hostOutBytes;
    g->hostOutBytes += up256(counts[i] * es);
  }
  G_CUDA(cudaMallocHost((void**)&g->hIn, g->inBytes));
  G_CUDA(cudaMallocHost((void**)&g->hOut, g->hostOutBytes));
  G_CUDA(cudaMalloc((void**)&g->dIn, g->inBytes));
  G_CUDA(cudaMalloc((void**)&g->dOut, g->outBytes));
}

static void graphFree(graphCalls* g) {
  G_CUDA(cudaFreeHost(g->hIn));
  G_CUDA(cudaFreeHost(g->hOut));
  G_CUDA(cudaFree(g->dIn));
  G_CUDA(cudaFree(g->dOut));
}

static void* graphRecv(rk_t* R, graphCalls* g, int i) {
  size_t es = relayTypeSize(g->dt[i]);
  if (!g->inPlace[i]) return g->dOut + g->outOff[i];
  return g->dIn + g->inOff[i] + (g->coll[i] == RS ? (size_t)R->me * g->count[i] * es : 0);
}

/* Enqueue one replay's worth of work (under capture or not). */
static void graphEnqueue(rk_t* R, relayComm_t comm, graphCalls* g, int wantRoute, const char* what) {
  G_CUDA(cudaMemcpyAsync(g->dIn, g->hIn, g->inBytes, cudaMemcpyHostToDevice, R->s));
  for (int i = 0; i < g->nCalls; i++) {
    relayResult_t r =
        issue(R, comm, g->coll[i], g->dIn + g->inOff[i], graphRecv(R, g, i), g->count[i], g->dt[i], g->op[i]);
    G_CHECK(r == relaySuccess, "%s call %d: %s: %s", what, i, relayGetErrorString(r),
            relayGetLastError(comm));
    expectRoute(comm, wantRoute, what);
  }
  for (int i = 0; i < g->nCalls; i++)
    G_CUDA(cudaMemcpyAsync(g->hOut + g->hostOut[i], graphRecv(R, g, i), g->count[i] * relayTypeSize(g->dt[i]),
                           cudaMemcpyDeviceToHost, R->s));
}

static void graphFill(rk_t* R, graphCalls* g, uint64_t rep) {
  for (int i = 0; i < g->nCalls; i++) {
    size_t in = (g->coll[i] == RS ? (size_t)R->A : 1) * g->count[i];
    riFill(g->hIn + g->inOff[i], in, g->dt[i], seedOf(rep * 3 + (uint64_t)i, R->me));
  }
}

static void graphCheck(rk_t* R, graphCalls* g, uint64_t rep, const char* what) {
  for (int i = 0; i < g->nCalls; i++) {
    expectOut(R, R->hWant, g->coll[i], g->dt[i], g->op[i], g->count[i], rep * 3 + (uint64_t)i);
    char w[192];
    snprintf(w, sizeof w, "%s, replay %llu, call %d (%s %s)", what, (unsigned long long)rep, i,
             kColl[g->coll[i]], relayTypeName(g->dt[i]));
    compareOut(g->hOut + g->hostOut[i], R->hWant, g->count[i], relayTypeSize(g->dt[i]), w);
  }
}

/* Capture g's calls on a comm (global mode: any forbidden call inside
 * relaycc invalidates the capture), then replay `reps` times. */
static void graphRun(rk_t* R, relayComm_t comm, graphCalls* g, int wantRoute, int reps, uint64_t repBase,
                     const char* what) {
  cudaGraph_t graph = NULL;
  cudaGraphExec_t exec = NULL;
  G_CUDA(cudaStreamBeginCapture(R->s, cudaStreamCaptureModeGlobal));
  graphEnqueue(R, comm, g, wantRoute, what);
  cudaError_t e = cudaStreamEndCapture(R->s, &graph);
  G_CHECK(e == cudaSuccess, "%s: cudaStreamEndCapture: %s", what, cudaGetErrorString(e));
  G_CUDA(cudaGraphInstantiate(&exec, graph, 0));
  double t0 = gpuNow();
  for (int rep = 0; rep < reps; rep++) {
    graphFill(R, g, repBase + (uint64_t)rep);
    if ((R->rank & 1) == (rep & 1)) sleepMs(1); /* late by turns */
    G_CUDA(cudaGraphLaunch(exec, R->s));
    gpuWait(R->s, WAIT_S, what);
    graphCheck(R, g, repBase + (uint64_t)rep, what);
  }
  if (R->rank == 0)
    gpuLog("ok: %s: %d replays of %d captured call(s), each checked, %.2f s", what, reps, g->nCalls,
           gpuNow() - t0);
  G_CUDA(cudaGraphExecDestroy(exec));
  G_CUDA(cudaGraphDestroy(graph));
}

/* One uncaptured round of g's calls, checked. */
static void plainRun(rk_t* R, relayComm_t comm, graphCalls* g, int wantRoute, uint64_t rep,
                     const char* what) {
  graphFill(R, g, rep);
  if ((R->rank & 1) == (int)(rep & 1)) sleepMs(2);
  graphEnqueue(R, comm, g, wantRoute, what);
  gpuWait(R->s, WAIT_S, what);
  graphCheck(R, g, rep, what);
}

/* ---- comms ---------------------------------------------------------------- */

static relayComm_t makeComm(rk_t* R, const opts_t* o, const char* tag, int timeoutMs) {
  relayConfig_t cfg = RELAY_CONFIG_INITIALIZER;
  cfg.route = relayRouteOneShot;
  cfg.timeoutMs = timeoutMs;
  char job[192];
  snprintf(job, sizeof job, "%s-%s", o->job, tag);
  relayComm_t comm = NULL;
  G_RELAY(NULL, relayCommInitNcclShm(&comm, R->n, R->rank, job, R->dev, &cfg));
  return comm;
}

static void testDeadline(rk_t* R, const opts_t* o) {
  relayComm_t comm = makeComm(R, o, "deadline", 30000);
  graphCalls g;
  graphSetup(R, &g, 0);
  plainRun(R, comm, &g, relayRouteOneShot, 7000, "deadline: first call");
  /* The kernel's deadline is the comm's, read at each launch; a 1 s one
   * from the start would also bound the init rendezvous, which may take
   * longer, so it is set here (an internal field: test only). */
  G_RELAY(comm, relayCommBarrier(comm));
  comm->cfg.timeoutMs = 1000;
  /* Rank 1 arrives 3 s late: the others' kernels give up after 1 s. */
  if (R->rank == 1) sleepMs(3000);
  relayResult_t r = relaySuccess;
  double t0 = gpuNow();
  for (int i = 0; i < 4 && r == relaySuccess; i++) {
    graphFill(R, &g, 7001 + (uint64_t)i);
    size_t c = g.count[0];
    r = relayAllReduce(g.dIn, g.dOut, &c, g.dt[0], g.op[0], &R->L, comm, R->s);
    if (r == relaySuccess)
      gpuWait(R->s, 20.0, "deadline: a call whose peer is late (must end by its deadline)");
  }
  const char* err = relayGetLastError(comm);
  G_CHECK(r != relaySuccess, "deadline: 4 calls succeeded although rank 1 was 3 s late with a 1 s deadline");
  if (R->rank == 0) {
    G_CHECK(r == relayTimeout && strstr(err, "rank 1"),
            "deadline: rank 0 got %s: %s (want relayTimeout naming rank 1)", relayGetErrorString(r), err);
  } else if (R->rank == 1) {
    /* With more ranks, whichever failed peer it saw first is named. */
    G_CHECK(r == relayRemoteError && (R->n > 2 || strstr(err, "rank 0")),
            "deadline: rank 1 got %s: %s (want relayRemoteError naming rank 0)", relayGetErrorString(r), err);
  } else {
    G_CHECK(r == relayTimeout || r == relayRemoteError, "deadline: rank %d got %s: %s", R->rank,
            relayGetErrorString(r), err);
  }
  gpuLog("ok: deadline: %s after %.2f s: %s", relayGetErrorString(r), gpuNow() - t0, err);
  /* No rank frees its region while a late peer may still push into it. */
  G_RELAY(comm, relayCommBarrier(comm));
  graphFree(&g);
  G_RELAY(comm, relayCommDestroy(comm));
}

/* The deadline of a rooted call: rank 1 is 3 s late for a broadcast rooted at rank 0, whose kernel waits for
 * rank 1's token (LL) and gives up at the 1 s deadline, naming it; rank 1 then sees rank 0's failure. */
static void testRootedDeadline(rk_t* R, const opts_t* o) {
  relayComm_t comm = makeComm(R, o, "rooteddl", 30000);
  const size_t c = 1001;
  char* d;
  G_CUDA(cudaMalloc((void**)&d, c * 4));
  riFill(R->hIn, c, relayFloat32, seedOf(7100, R->me));
  G_CUDA(cudaMemcpyAsync(d, R->hIn, c * 4, cudaMemcpyHostToDevice, R->s));
  relayResult_t r = issueRooted(R, comm, 1, d, d, c, relayFloat32, relaySum, 0);
  G_CHECK(r == relaySuccess, "rooted deadline: first call: %s", relayGetErrorString(r));
  expectRoute(comm, relayRouteOneShot, "rooted deadline: first call");
  gpuWait(R->s, WAIT_S, "rooted deadline: first call");
  G_RELAY(comm, relayCommBarrier(comm));
  comm->cfg.timeoutMs = 1000; /* as testDeadline: an internal field, test only */
  if (R->rank == 1) sleepMs(3000);
  double t0 = gpuNow();
  for (int i = 0; i < 4 && r == relaySuccess; i++) {
    r = issueRooted(R, comm, 1, d, d, c, relayFloat32, relaySum, 0);
    if (r == relaySuccess)
      gpuWait(R->s, 20.0, "rooted deadline: a call whose peer is late (must end by its deadline)");
  }
  const char* err = relayGetLastError(comm);
  if (R->rank == 0) {
    G_CHECK(r == relayTimeout && strstr(err, "rank 1"),
            "rooted deadline: the root got %s: %s (want relayTimeout naming rank 1)", relayGetErrorString(r),
            err);
  } else if (R->rank == 1) {
    G_CHECK(r == relayRemoteError && strstr(err, "rank 0"),
            "rooted deadline: rank 1 got %s: %s (want relayRemoteError naming the root, rank 0)",
            relayGetErrorString(r), err);
  } else {
    G_CHECK(r == relayRemoteError && strstr(err, "rank 0"),
            "rooted deadline: rank %d got %s: %s (want relayRemoteError naming the root, rank 0)", R->rank,
            relayGetErrorString(r), err);
  }
  gpuLog("ok: rooted deadline: %s after %.2f s: %s", relayGetErrorString(r), gpuNow() - t0, err);
  G_RELAY(comm, relayCommBarrier(comm));
  G_CUDA(cudaFree(d));
  G_RELAY(comm, relayCommDestroy(comm));
}

/* One owned-communicator cycle kind: bare NCCL (ncclCommInitRank, one
 * all-reduce, destroy), or a relay comm owning its NCCL comm
 * (relayCommInitNcclShm) running one call on `route`. */
/* An NCCL communicator of every rank, its id passed over the shm comm. */
static ncclComm_t bareNcclComm(rk_t* R, relayComm_t shm) {
  ncclUniqueId id, all[MAXR];
  memset(&id, 0, sizeof id);
  if (R->rank == 0) G_CHECK(ncclGetUniqueId(&id) == ncclSuccess, "ncclGetUniqueId");
  G_RELAY(shm, relayCommAgree(shm, &id, all, sizeof id));
  ncclComm_t nc = NULL;
  ncclResult_t nr = ncclCommInitRank(&nc, R->n, all[0], R->rank);
  G_CHECK(nr == ncclSuccess, "ncclCommInitRank: %s", ncclGetErrorString(nr));
  return nc;
}

enum { CYC_BARE, CYC_DIRECT, CYC_ONESHOT };
static const char* kCycName[3] = {"bare NCCL", "relay direct", "relay one-shot"};

static void ownedCycle(rk_t* R, const opts_t* o, relayComm_t shm, graphCalls* g, int kind, int cyc) {
  if (kind == CYC_BARE) {
    ncclComm_t nc = bareNcclComm(R, shm);
    G_CHECK(ncclAllReduce(R->dSend, R->dRecv, 1024, ncclFloat, ncclSum, nc, R->s) == ncclSuccess,
            "ncclAllReduce");
    gpuWait(R->s, WAIT_S, "cycles: bare NCCL all-reduce");
    G_RELAY(shm, relayCommBarrier(shm));
    G_CHECK(ncclCommDestroy(nc) == ncclSuccess, "ncclCommDestroy");
    return;
  }
  int route = kind == CYC_DIRECT ? relayRouteDirect : relayRouteOneShot;
  relayConfig_t cfg = RELAY_CONFIG_INITIALIZER;
  cfg.route = route;
  cfg.timeoutMs = 30000;
  char job[192];
  snprintf(job, sizeof job, "%s-own%d-%d", o->job, kind, cyc);
  relayComm_t comm = NULL;
  G_RELAY(NULL, relayCommInitNcclShm(&comm, R->n, R->rank, job, R->dev, &cfg));
  plainRun(R, comm, g, route, 9000 + (uint64_t)cyc, "cycles (owned)");
  G_RELAY(comm, relayCommBarrier(comm));
  G_RELAY(comm, relayCommDestroy(comm));
  G_CHECK(relayNcclOneShotOpenMappings() == 0,
          "cycles: %d peer mappings still open after destroy (%s, cycle %d)", relayNcclOneShotOpenMappings(),
          kCycName[kind], cyc);
}

/* The issue's 100 create/destroy cycles, measured where only relaycc
 * allocates: relay comms wrapping one NCCL communicator that lives
 * throughout (NCCL's own buffers then stay put), each making its region on
 * the first one-shot call. After every destroy no peer mapping may remain
 * open, and over 99 cycles free device memory may not fall by one region
 * (2 parity sets x n slots of 1 MiB: 4 MiB at n = 2); a leaked region a
 * cycle would lose ~400 MiB.
 * Then 8 rounds of comms that own their NCCL communicator (the way
 * relayCommInitNcclShm users run) with the one-shot, beside bare NCCL
 * communicators and owned relay comms on the direct route: every call
 * checked, no mapping left after any destroy, and the free memory each
 * kind lost printed (NCCL's share is noise, see below). */
static void testCycles(rk_t* R, const opts_t* o) {
  graphCalls g;
  graphSetup(R, &g, 0);
  char job[192];
  snprintf(job, sizeof job, "%s-cycles", o->job);
  relayComm_t shm = NULL;
  G_RELAY(NULL, relayCommInitShm(&shm, R->n, R->rank, job, NULL));
  ncclComm_t nc = bareNcclComm(R, shm);
  size_t region = (size_t)2 * (size_t)R->n * SLOT;
  size_t free1 = 0, freeN = 0, total = 0;
  double t0 = gpuNow();
  const int kWrapped = 100;
  for (int cyc = 0; cyc < kWrapped; cyc++) {
    relayConfig_t cfg = RELAY_CONFIG_INITIALIZER;
    cfg.route = relayRouteOneShot;
    cfg.timeoutMs = 30000;
    relayComm_t comm = NULL;
    G_RELAY(NULL, relayCommInitNccl(&comm, nc, &cfg));
    plainRun(R, comm, &g, relayRouteOneShot, 8000 + (uint64_t)cyc, "cycles (wrapped)");
    G_CHECK(relayNcclOneShotOpenMappings() == R->n - 1,
            "cycles: %d peer mappings open with one comm (want %d)", relayNcclOneShotOpenMappings(),
            R->n - 1);
    G_RELAY(comm, relayCommBarrier(comm));
    G_RELAY(comm, relayCommDestroy(comm));
    G_CHECK(relayNcclOneShotOpenMappings() == 0,
            "cycles: %d peer mappings still open after destroy (cycle %d)", relayNcclOneShotOpenMappings(),
            cyc);
    if (cyc == 1 || cyc == kWrapped - 1) {
      /* cudaMemGetInfo reads the whole device: where ranks share it, every rank must be at the same point
       * (its comm destroyed) when any reads, and none may allocate again before all have read. Cycle 1, not
       * 0: NCCL's lazy allocations of the first calls are done by then. (Read at cycle 0 without the
       * barriers, 8 ranks on one H200 saw the others' regions and buffers come and go: a false leak.) */
      G_RELAY(shm, relayCommBarrier(shm));
      G_CUDA(cudaMemGetInfo(cyc == 1 ? &free1 : &freeN, &total));
      G_RELAY(shm, relayCommBarrier(shm));
    }
  }
  /* One region of slack per rank on this GPU: a region leaked every cycle would be 98 of them. */
  region *= (size_t)((R->n + g_gpuCount - 1) / (g_gpuCount > 0 ? g_gpuCount : 1));
  G_CHECK(freeN + region >= free1,
          "cycles: free device memory fell from %zu to %zu bytes over %d wrapped create/destroy cycles",
          free1, freeN, kWrapped - 2);
  if (R->rank == 0)
    gpuLog("ok: %d wrapped create/call/destroy cycles in %.1f s: 0 mappings left, free memory %zu -> %zu MiB",
           kWrapped, gpuNow() - t0, free1 >> 20, freeN >> 20);
  G_RELAY(shm, relayCommBarrier(shm));
  G_CHECK(ncclCommDestroy(nc) == ncclSuccess, "ncclCommDestroy");

  /* Owned communicators, interleaved by kind so drift in the driver's own
   * accounting hits all three alike; memory read after the first round
   * (lazy one-time allocations) and after the last. */
  const int kRounds = 8;
  size_t freeAt[3][2];
  for (int round = 0; round < kRounds; round++)
    for (int kind = 0; kind < 3; kind++) {
      ownedCycle(R, o, shm, &g, kind, round);
      G_CUDA(cudaDeviceSynchronize());
      if (round == 0 || round == kRounds - 1) G_CUDA(cudaMemGetInfo(&freeAt[kind][round ? 1 : 0], &total));
    }
  size_t loss[3];
  for (int kind = 0; kind < 3; kind++)
    loss[kind] = freeAt[kind][0] > freeAt[kind][1] ? freeAt[kind][0] - freeAt[kind][1] : 0;
  gpuLog(
      "cycles: owned comms over %d rounds lost: bare NCCL %zu KiB, relay direct %zu KiB, relay one-shot %zu "
      "KiB",
      kRounds - 1, loss[CYC_BARE] >> 10, loss[CYC_DIRECT] >> 10, loss[CYC_ONESHOT] >> 10);
  /* Logged, not asserted: NCCL's own memory over these cycles is noise that
   * lands on any kind (2026-11-30 on 2 x H200, two runs: rank 0 lost 392
   * MiB on one-shot comms and 0 elsewhere; then rank 1 384 MiB on direct
   * AND one-shot comms while rank 0 lost 288 MiB on bare NCCL comms and 0
   * on relaycc's). relaycc's own release is asserted above, where NCCL's
   * comm lives throughout: the mapping count after every destroy and free
   * memory over 100 cycles. */
  G_RELAY(shm, relayCommDestroy(shm));
  graphFree(&g);
}

/* The sweep on a fresh comm made with var=value set. */
static void sweepWithEnv(rk_t* R, const opts_t* o, const char* var, const char* value, const char* tag) {
  setenv(var, value, 1);
  relayComm_t comm = makeComm(R, o, tag, 30000);
  sweep(R, comm);
  unsetenv(var);
  G_RELAY(comm, relayCommBarrier(comm));
  G_RELAY(comm, relayCommDestroy(comm));
}

static int rankMain(int rank, int nranks, void* arg) {
  opts_t* o = arg;
  g_logRank = rank;
  rk_t R;
  memset(&R, 0, sizeof R);
  R.rank = rank;
  R.n = nranks;
  R.A = nranks;
  R.me = rank;
  for (int i = 0; i < R.A; i++) R.ranks[i] = i;
  R.L.nGroups = 1;
  R.L.nActive = R.A;
  R.L.ranks = R.ranks;
  R.dev = gpuRankStart(rank, nranks, o->job);
  G_CUDA(cudaStreamCreateWithFlags(&R.s, cudaStreamNonBlocking));
  R.pool = 2 * GUARD + (size_t)R.A * SLOT + 64;
  G_CUDA(cudaMalloc((void**)&R.dSend, R.pool));
  G_CUDA(cudaMalloc((void**)&R.dRecv, R.pool));
  R.hostBytes = R.pool;
  R.hIn = malloc(R.hostBytes);
  R.hOut = malloc(R.hostBytes);
  R.hWant = malloc(R.hostBytes);
  for (int i = 0; i < R.A; i++) R.hTmp[i] = malloc(R.hostBytes);
  G_CHECK(R.hIn && R.hOut && R.hWant && R.hTmp[R.A - 1], "out of host memory");

  double t0 = gpuNow();
  relayComm_t comm = makeComm(&R, o, "main", 30000);
  if (rank == 0) gpuLog("init: %.2f s", gpuNow() - t0);
  sweep(&R, comm);
  backToBack(&R, comm);
  rootedSweep(&R, comm);
  rootedBackToBack(&R, comm);

  /* The flag protocol at every size, then LL128 at every size the LL
   * protocol serves (odd counts, 4 B up): thresholds are read at the
   * region's creation (the comm's first one-shot call). */
  sweepWithEnv(&R, o, "RELAYCC_ONESHOT_LL_BYTES", "0", "flags");
  sweepWithEnv(&R, o, "RELAYCC_ONESHOT_LL128_BYTES", "1", "ll128");

  graphCalls g;
  graphSetup(&R, &g, 1);
  plainRun(&R, comm, &g, relayRouteOneShot, 1, "graph: uncaptured round");
  graphRun(&R, comm, &g, relayRouteOneShot, 1000, 10, "graph");

  /* A fresh comm whose first eligible call is captured: no region may be
   * made there, so every rank runs direct; uncaptured, the region comes. */
  relayComm_t fresh = makeComm(&R, o, "capture0", 30000);
  graphCalls g1;
  graphSetup(&R, &g1, 0);
  graphRun(&R, fresh, &g1, relayRouteDirect, 20, 2000, "first call under capture, nothing prepared: direct");
  plainRun(&R, fresh, &g1, relayRouteOneShot, 2100, "capture0: then uncaptured");
  /* Two comms alive at once, calls interleaved: regions and epochs per comm. */
  for (int k = 0; k < 50; k++) {
    plainRun(&R, k % 2 ? fresh : comm, k % 2 ? &g1 : &g, relayRouteOneShot, 2200 + (uint64_t)k, "two comms");
  }
  if (rank == 0) gpuLog("ok: two comms alive, 50 interleaved rounds");
  G_RELAY(fresh, relayCommBarrier(fresh));
  G_RELAY(fresh, relayCommDestroy(fresh));
  graphFree(&g);
  G_RELAY(comm, relayCommBarrier(comm));
  G_RELAY(comm, relayCommDestroy(comm));

  /* Region at init: the first call, captured, is one-shot. */
  setenv("RELAYCC_ONESHOT_PREPARE", "1", 1);
  relayComm_t atInit = makeComm(&R, o, "atinit", 30000);
  unsetenv("RELAYCC_ONESHOT_PREPARE");
  graphRun(&R, atInit, &g1, relayRouteOneShot, 20, 3000, "RELAYCC_ONESHOT_PREPARE=1: first call captured");
  G_RELAY(atInit, relayCommBarrier(atInit));
  G_RELAY(atInit, relayCommDestroy(atInit));

  /* Fault injection: rank 1 fails to open; every rank runs direct. */
  setenv("RELAYCC_ONESHOT_FAULT_RANK", "1", 1);
  relayComm_t faulty = makeComm(&R, o, "fault", 30000);
  for (int k = 0; k < 3; k++)
    plainRun(&R, faulty, &g1, relayRouteDirect, 4000 + (uint64_t)k, "fault on rank 1");
  unsetenv("RELAYCC_ONESHOT_FAULT_RANK");
  if (rank == 0) gpuLog("ok: RELAYCC_ONESHOT_FAULT_RANK=1: every rank direct, correct");
  G_RELAY(faulty, relayCommBarrier(faulty));
  G_RELAY(faulty, relayCommDestroy(faulty));
  graphFree(&g1);

  testCycles(&R, o);
  testDeadline(&R, o);
  testRootedDeadline(&R, o);

  G_CUDA(cudaFree(R.dSend));
  G_CUDA(cudaFree(R.dRecv));
  G_CUDA(cudaStreamDestroy(R.s));
  free(R.hIn);
  free(R.hOut);
  free(R.hWant);
  for (int i = 0; i < R.A; i++) free(R.hTmp[i]);
  gpuLog("done");
  return 0;
}

/* arg: the row's rank count (every rank active). */
static int runOneShot(void* arg) {
  /* Never NVLink SHARP / multicast: on shared machines it can take the
   * node's GPUs out of service. Set before any rank starts NCCL. */
  setenv("NCCL_NVLS_ENABLE", "0", 1);
  int A = *(const int*)arg;
  char logName[64];
  snprintf(logName, sizeof logName, "gputest_oneshot-A%d", A);
  gpuLogOpen(logName);
  int n = gpuTestRanks("gputest_oneshot", A, A);
  if (!n) return GPU_SKIP;
  gpuLog("gputest_oneshot: A = %d, every rank active", n);
  opts_t o;
  memset(&o, 0, sizeof o);
  relayLaunchJobName("go", o.job, sizeof o.job);
  return gpuLaunch(n, rankMain, &o, 560000);
}

/* Sweep, skew, 10^4 back-to-back calls, 1000 graph replays, capture before any region, region at init,
 * fault injection, a kernel deadline, broadcast and reduce (sweep, back to back, deadline), at A = 2, 4 and 8
 * (one process per rank; a row whose A exceeds the ranks there are skips). Logs to $OUT. */
static const tCase kCases[] = {
    {.name = "A2",
     .run = runOneShot,
     .arg = &(int){2},
     .ctest = "gpu_oneshot_A2",
     .labels = "gpu",
     .timeoutS = 600,
     .skipCode = GPU_SKIP,
     .serial = 1},
    {.name = "A4",
     .run = runOneShot,
     .arg = &(int){4},
     .ctest = "gpu_oneshot_A4",
     .labels = "gpu",
     .timeoutS = 600,
     .skipCode = GPU_SKIP,
     .serial = 1},
    {.name = "A8",
     .run = runOneShot,
     .arg = &(int){8},
     .ctest = "gpu_oneshot_A8",
     .labels = "gpu",
     .timeoutS = 600,
     .skipCode = GPU_SKIP,
     .serial = 1},
};

int main(int argc, char** argv) { return t_main(argc, argv, "gpu", kCases, T_NCASES(kCases)); }
