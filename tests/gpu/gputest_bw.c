/*
 * The bandwidth kernel (bw.cu) on one GPU: two processes (forked here) on
 * the SAME device, each with a region laid out as the NCCL transport's
 * (oneshot.h: the one-shot's region with the bw ring), mapped by the other
 * through CUDA IPC (which works within one device), handles exchanged over a
 * shm comm. The kernel is launched directly (relayCudaBw), so no NCCL comm
 * is needed (NCCL refuses two ranks on one GPU) and the lead can run it on a
 * 1-GPU machine, under compute-sanitizer too. Outputs bit for bit against
 * relayHostReduce in active-index order; guard bytes around outputs.
 *
 *  sweep   every collective (all-reduce push and two-shot), fp32 / bf16,
 *          sum / avg / max, in place and not, counts of 1 .. ~300 tiles and
 *          not multiples of one, misaligned buffers, 4 KiB tiles in a ring
 *          of 3 (the ring wraps within a call and across calls); rank 1
 *          late by 20 ms on even cases, rank 0 on odd ones
 *  b2b     200 back-to-back calls without a host wait between them (the
 *          pair epochs advance in device memory), every 10th checked
 *  graph   one call captured, replayed 50 times with new inputs (copied in
 *          inside the graph), the ranks late by turns: a replay must run a
 *          new epoch (hazard G2), every replay checked
 *  deadline rank 1 does not launch: rank 0's kernel gives up after its 1 s
 *          deadline and its error word names rank 1 (RELAY_OS_ERR_FLAG)
 *  abort   rank 1 does not launch: rank 0's host sets the abort word; the
 *          kernel ends within a second with RELAY_OS_ERR_ABORTED
 * gputest_bw guest_late[_env]: the guest rule, rank 1 90 s late (guestLate)
 * sweep, b2b, graph and deadline run three times: staged (relayCudaBw),
 * then on the direct path of registered windows (relayCudaBwDirectRun: send
 * and recv pools are one allocation, IPC-mapped by the peer, the same offsets
 * on both ranks) with the SM kernel, then with the copy-engine mover (ce:
 * gathers; reductions keep sm).
 *
 * gputest_bw movers: times sm against ce (min of 20, cudaEvents) for
 * all-gather and all-to-all from 1 to 64 MiB per rank on the direct path;
 * GPUTEST_BW_DEVICES=2 puts rank r on GPU r (the 2-GPU measurement that
 * decides RELAYCC_BW_MOVER=auto; on one GPU the figures mean nothing).
 * Every wait is a cudaStreamQuery poll with a deadline. Logs: stdout and
 * $OUT/gputest_bw.log.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "comm/comm.h"
#include "comm/common.h"
#include "core/core.h"
#include "core/init.h"
#include "gpu/gpu_util.h"
#include "gpu/reduce_inputs.h"
#include "plan/plan.h"
#include "reduce_host.h"
#include "transport/nccl/oneshot.h"

#define WAIT_S 120.0
#define GUARD 256
#define POISON 0xA5
#define TILE 4096
#define RING 3
#define MAXC 300001 /* fp32 elements: ~293 tiles of 4 KiB */
#define NR 2

typedef struct {
  int rank;
  relayComm_t host; /* shm comm: handle exchange and barriers */
  cudaStream_t s;
  relayOsLayout L;
  char* own;
  char* peer;
  char* hostPage; /* [0] error word, [8] abort word */
  char* hostPageDev;
  char *dSend, *dRecv;
  char *dWin, *peerWin; /* [dSend pool | dRecv pool], and the peer's as mapped here */
  size_t pool;
  unsigned char *hIn, *hOut, *hWant, *hTmp[NR];
} rk_t;

static void sleepMs(int ms) {
  struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
  nanosleep(&ts, NULL);
}

/* 0: staged (relayCudaBw); 1: direct, SM kernel; 2: direct, copy-engine mover. */
static int g_mode;
static const char* const kModeNames[3] = {"staged", "direct sm", "direct ce"};

static uint64_t seedOf(uint64_t call, int src) { return call * 1000003ull + (uint64_t)src * 7919ull + 1; }

typedef struct {
  int coll, twoShot, inPlace, off;
  relayDataType_t dt;
  relayRedOp_t op;
  size_t count;
} case_t;

static int isBlocked(int coll) {
  return coll == relayCollectiveReduceScatter || coll == relayCollectiveAllToAll;
}
static int isGather(int coll) { return coll == relayCollectiveAllGather || coll == relayCollectiveAllToAll; }

/* The launch arguments of one call of rank R (buffers given). */
static void argsOf(rk_t* R, const case_t* k, const void* send, void* recv, uint64_t timeoutNs,
                   relayBwArgs* w) {
  size_t es = relayTypeSize(k->dt), c = k->count;
  memset(w, 0, sizeof *w);
  relayOsArgs* a = &w->os;
  for (int i = 0; i < NR; i++) {
    a->region[i] = i == R->rank ? R->own : R->peer;
    a->rank[i] = i;
  }
  a->dst = recv;
  a->src = send;
  a->count = c;
  a->srcStride = isBlocked(k->coll) ? c : 0;
  a->L = R->L;
  a->nActive = NR;
  a->me = R->rank;
  a->grid = RELAY_BW_BLOCKS;
  a->vec = (((uintptr_t)send | (uintptr_t)recv | (uintptr_t)(a->srcStride * es) |
             (uintptr_t)(isGather(k->coll) ? c * es : 0)) &
            15u) == 0;
  a->gather = isGather(k->coll);
  a->divisor = relayCollReduces((relayCollective_t)k->coll) && k->op == relayAvg ? NR : 0;
  a->elemSize = (int)es;
  a->timeoutNs = timeoutNs;
  a->hostErr = (unsigned long long*)R->hostPageDev;
  a->hostAbort = (const volatile int32_t*)(R->hostPageDev + 8);
  w->tile = TILE / es;
  if (k->twoShot) {
    w->shard = planBwShard(c, NR);
    w->T1 = (w->shard + w->tile - 1) / w->tile;
    w->U = 2 * w->T1;
  } else {
    w->U = (c + w->tile - 1) / w->tile;
  }
}

static void launch(rk_t* R, const case_t* k, const void* send, void* recv, cudaStream_t s,
                   uint64_t timeoutNs) {
  relayBwArgs w;
  argsOf(R, k, send, recv, timeoutNs, &w);
  relayRedOp_t op = isGather(k->coll) ? relaySum : k->op;
  if (!g_mode) {
    G_CUDA(relayCudaBw(&w, k->dt, op, 512, s));
    return;
  }
  w.win[R->rank] = R->dWin;
  w.win[1 - R->rank] = R->peerWin;
  w.winId = 1;
  /* The offsets peers use, as core/window.c sets them (an in-place gather's send differs per rank). */
  int needSend = k->coll == relayCollectiveReduceScatter || k->coll == relayCollectiveAllReduce;
  w.sendOff = needSend ? (uint64_t)((const char*)send - R->dWin) : 0;
  w.recvOff = k->coll != relayCollectiveReduceScatter ? (uint64_t)((char*)recv - R->dWin) : 0;
  if ((w.sendOff | w.recvOff | (uint64_t)(k->count * relayTypeSize(k->dt))) % 16) w.os.vec = 0;
  G_CUDA(relayCudaBwDirectRun(&w, k->dt, op, 512, g_mode == 2, s));
}

static size_t inElems(const case_t* k) { return isBlocked(k->coll) ? NR * k->count : k->count; }
static size_t outElems(const case_t* k) { return isGather(k->coll) ? NR * k->count : k->count; }

static void expectOut(rk_t* R, const case_t* k, uint64_t call) {
  size_t es = relayTypeSize(k->dt), c = k->count;
  const void* srcs[NR];
  for (int i = 0; i < NR; i++) {
    riFill(R->hTmp[i], inElems(k), k->dt, seedOf(call, i));
    srcs[i] = R->hTmp[i] + (isBlocked(k->coll) ? (size_t)R->rank * c * es : 0);
  }
  if (isGather(k->coll))
    for (int i = 0; i < NR; i++) memcpy(R->hWant + (size_t)i * c * es, srcs[i], c * es);
  else relayHostReduce(R->hWant, srcs, NR, c, k->dt, k->op, k->op == relayAvg ? NR : 0);
}

static void checkErrWord(rk_t* R, const char* what) {
  uint64_t e = *(volatile uint64_t*)R->hostPage;
  G_CHECK(e == 0, "%s: kernel error word %#llx (code %u, peer %u, block %u)", what, (unsigned long long)e,
          relayOsErrCode(e), relayOsErrPeer(e), relayOsErrBlock(e));
}

/* One checked call: buffers placed, input copied, launch, output compared. */
static void runCase(rk_t* R, const case_t* k, uint64_t call, int skewRank) {
  size_t es = relayTypeSize(k->dt), c = k->count, in = inElems(k), out = outElems(k);
  size_t off = (size_t)k->off * es;
  static const char* const names[RELAY_NUM_LAYOUT_COLLS] = {"all-gather", "reduce-scatter", "all-reduce",
                                                            "all-to-all"};
  char what[256];
  snprintf(what, sizeof what, "call %llu %s%s %s %s count=%zu %s off=%d", (unsigned long long)call,
           names[k->coll], k->twoShot ? " two-shot" : "", relayTypeName(k->dt), relayOpName(k->op), c,
           k->inPlace ? "in-place" : "out-of-place", k->off);
  riFill(R->hIn, in, k->dt, seedOf(call, R->rank));
  G_CUDA(cudaMemsetAsync(R->dRecv, POISON, R->pool, R->s));
  char* base = R->dRecv + GUARD + off;
  void *send, *recv;
  size_t span; /* bytes of dRecv from base that the call may write */
  if (k->inPlace && isGather(k->coll)) {
    recv = base;
    send = base + (size_t)R->rank * c * es;
    span = out * es;
  } else if (k->inPlace) {
    send = base;
    recv = base + (isBlocked(k->coll) ? (size_t)R->rank * c * es : 0);
    span = in * es;
  } else {
    send = R->dSend + GUARD + off;
    recv = base;
    span = out * es;
  }
  G_CUDA(cudaMemcpyAsync(send, R->hIn, in * es, cudaMemcpyHostToDevice, R->s));
  gpuWait(R->s, WAIT_S, "setup");
  G_RELAY(R->host, relayCommBarrier(R->host));
  if (R->rank == skewRank) sleepMs(20);
  launch(R, k, send, recv, R->s, 30ull * 1000000000ull);
  gpuWait(R->s, WAIT_S, what);
  checkErrWord(R, what);
  G_CUDA(cudaMemcpy(R->hOut, R->dRecv, 2 * GUARD + off + span, cudaMemcpyDeviceToHost));
  for (size_t b = 0; b < GUARD + off; b++)
    G_CHECK(R->hOut[b] == POISON, "%s: byte -%zu written", what, GUARD + off - b);
  for (size_t b = 0; b < GUARD; b++)
    G_CHECK(R->hOut[GUARD + off + span + b] == POISON, "%s: byte +%zu past the buffer written", what, b);
  expectOut(R, k, call);
  const unsigned char* got = R->hOut + GUARD + off + ((char*)recv - base);
  if (memcmp(got, R->hWant, out * es) != 0) {
    size_t e = 0;
    while (e < out && memcmp(got + e * es, R->hWant + e * es, es) == 0) e++;
    G_CHECK(0, "%s: element %zu of %zu differs from relayHostReduce", what, e, out);
  }
}

static void sweep(rk_t* R) {
  const size_t counts[] = {1, 1023, 1025, 9001, 65537, MAXC / 2};
  const relayDataType_t dts[] = {relayFloat32, relayBfloat16};
  const relayRedOp_t ops[] = {relaySum, relayAvg, relayMax};
  uint64_t call = 0;
  for (int coll = 0; coll < RELAY_NUM_LAYOUT_COLLS; coll++)
    for (int ts = 0; ts < (coll == relayCollectiveAllReduce ? 2 : 1); ts++)
      for (int di = 0; di < 2; di++)
        for (int ci = 0; ci < 6; ci++) {
          case_t k = {coll, ts, 0, 0, dts[di], isGather(coll) ? relaySum : ops[ci % 3], counts[ci]};
          k.inPlace = ci % 2 == 1 && coll != relayCollectiveAllToAll;
          k.off = ci == 2 ? 1 : 0;
          runCase(R, &k, call, (int)(call & 1));
          call++;
        }
  if (R->rank == 0) gpuLog("ok: sweep (%s), %llu calls", kModeNames[g_mode], (unsigned long long)call);
}

static void backToBack(rk_t* R) {
  case_t k = {relayCollectiveAllReduce, 0, 0, 0, relayFloat32, relaySum, 5000};
  size_t es = 4, c = k.count;
  /* 200 calls queued without a host wait: each rank's inputs are the same
   * buffer (constant), outputs rotate over 10 buffers checked at the end. */
  riFill(R->hIn, c, k.dt, seedOf(777, R->rank));
  G_CUDA(cudaMemcpy(R->dSend, R->hIn, c * es, cudaMemcpyHostToDevice));
  G_RELAY(R->host, relayCommBarrier(R->host));
  for (int i = 0; i < 200; i++)
    launch(R, &k, R->dSend, R->dRecv + (size_t)(i % 10) * c * es, R->s, 30ull * 1000000000ull);
  gpuWait(R->s, WAIT_S, "b2b");
  checkErrWord(R, "b2b");
  expectOut(R, &k, 777);
  G_CUDA(cudaMemcpy(R->hOut, R->dRecv, 10 * c * es, cudaMemcpyDeviceToHost));
  for (int i = 0; i < 10; i++)
    G_CHECK(memcmp(R->hOut + (size_t)i * c * es, R->hWant, c * es) == 0, "b2b: output %d differs", i);
  if (R->rank == 0) gpuLog("ok: 200 back-to-back calls (%s)", kModeNames[g_mode]);
}

static void graph(rk_t* R) {
  case_t k = {relayCollectiveAllReduce, 0, 0, 0, relayBfloat16, relaySum, 70001};
  size_t es = 2, c = k.count;
  unsigned char* pinned = NULL;
  G_CUDA(cudaHostAlloc((void**)&pinned, c * es, cudaHostAllocDefault));
  cudaStream_t cs;
  G_CUDA(cudaStreamCreateWithFlags(&cs, cudaStreamNonBlocking));
  cudaGraph_t g;
  cudaGraphExec_t ge;
  G_CUDA(cudaStreamBeginCapture(cs, cudaStreamCaptureModeGlobal));
  G_CUDA(cudaMemcpyAsync(R->dSend, pinned, c * es, cudaMemcpyHostToDevice, cs));
  launch(R, &k, R->dSend, R->dRecv, cs, 30ull * 1000000000ull);
  G_CUDA(cudaStreamEndCapture(cs, &g));
  G_CUDA(cudaGraphInstantiate(&ge, g, 0));
  for (int rep = 0; rep < 50; rep++) {
    riFill(pinned, c, k.dt, seedOf(5000 + (uint64_t)rep, R->rank));
    G_RELAY(R->host, relayCommBarrier(R->host));
    if ((R->rank & 1) == (rep & 1)) sleepMs(5);
    G_CUDA(cudaGraphLaunch(ge, cs));
    gpuWait(cs, WAIT_S, "graph replay");
    checkErrWord(R, "graph replay");
    expectOut(R, &k, 5000 + (uint64_t)rep);
    G_CUDA(cudaMemcpy(R->hOut, R->dRecv, c * es, cudaMemcpyDeviceToHost));
    G_CHECK(memcmp(R->hOut, R->hWant, c * es) == 0, "graph replay %d differs", rep);
  }
  G_CUDA(cudaGraphExecDestroy(ge));
  G_CUDA(cudaGraphDestroy(g));
  G_CUDA(cudaStreamDestroy(cs));
  G_CUDA(cudaFreeHost(pinned));
  if (R->rank == 0) gpuLog("ok: 50 graph replays, ranks late by turns (%s)", kModeNames[g_mode]);
}

/* Rank 1 never launches: rank 0 ends by its deadline (abort = 0) or by the
 * host's abort word; either way its error word says why, naming rank 1. */
static void stuck(rk_t* R, int viaAbort) {
  case_t k = {relayCollectiveAllReduce, 0, 0, 0, relayFloat32, relaySum, 20000};
  const char* what = viaAbort ? "abort" : "deadline";
  if (R->rank == 0) {
    G_CUDA(cudaMemset(R->dSend, 0, 20000 * 4));
    double t0 = gpuNow();
    launch(R, &k, R->dSend, R->dRecv, R->s, viaAbort ? 60ull * 1000000000ull : 1000000000ull);
    if (viaAbort) {
      sleepMs(300);
      *(volatile int32_t*)(R->hostPage + 8) = 1;
    }
    gpuWait(R->s, 30.0, what);
    double dt = gpuNow() - t0;
    uint64_t e = *(volatile uint64_t*)R->hostPage;
    unsigned want = viaAbort ? RELAY_OS_ERR_ABORTED : RELAY_OS_ERR_FLAG;
    G_CHECK(relayOsErrCode(e) == want && relayOsErrPeer(e) == 1 && dt < 5.0,
            "%s: error word %#llx (code %u, peer %u) after %.2f s, want code %u naming rank 1", what,
            (unsigned long long)e, relayOsErrCode(e), relayOsErrPeer(e), dt, want);
    gpuLog("ok: %s (%s): the kernel gave up after %.2f s naming rank 1", what, kModeNames[g_mode], dt);
  }
  G_RELAY(R->host, relayCommBarrier(R->host));
}

/* The guest rule on the GPU (issue 26.2): the kernel waits as long as a guest comm does
 * (relayInitShm's guest, as the interposer's and from_process_group's comms are): no limit unless
 * RELAYCC_TIMEOUT_MS is set. Rank 1 launches its all-reduce GUEST_LATE_S after rank 0 (a checkpoint
 * write before a barrier). Unset: rank 0's kernel waits, both hold the right sum, no error word.
 * Set (the _env row: 1000 ms): rank 0's kernel gives up naming rank 1 (RELAY_OS_ERR_FLAG: the word
 * relayCommAsyncError decodes and the interposer's ncclCommGetAsyncError reports); rank 1's kernel then
 * sees rank 0's failure (RELAY_OS_ERR_REMOTE) or, rank 0's push being in place, completes right. */
#define GUEST_LATE_S 90
static void guestLate(rk_t* R, const char* job) {
  case_t k = {relayCollectiveAllReduce, 0, 0, 0, relayFloat32, relaySum, 20000};
  size_t es = 4, c = k.count;
  int set = getenv("RELAYCC_TIMEOUT_MS") != NULL;
  /* The barriers stay on R->host (its config's 120 s holds whatever the environment says). */
  char gjob[160];
  snprintf(gjob, sizeof gjob, "%s-guest", job);
  relayComm_t guest = NULL;
  G_RELAY(NULL, relayInitShm(&guest, NR, R->rank, gjob, NULL, 1));
  uint64_t limit = relayWaitLimitNs(guest);
  relayCommDestroy(guest);
  G_CHECK(set ? limit != UINT64_MAX : limit == UINT64_MAX,
          "guest late: the guest host comm's wait limit is %llu ns with RELAYCC_TIMEOUT_MS %s",
          (unsigned long long)limit, set ? getenv("RELAYCC_TIMEOUT_MS") : "unset");
  riFill(R->hIn, c, k.dt, seedOf(4242, R->rank));
  G_CUDA(cudaMemcpy(R->dSend, R->hIn, c * es, cudaMemcpyHostToDevice));
  G_CUDA(cudaMemset(R->dRecv, POISON, c * es));
  G_RELAY(R->host, relayCommBarrier(R->host));
  double t0 = gpuNow();
  if (R->rank == 1) sleepMs(GUEST_LATE_S * 1000);
  launch(R, &k, R->dSend, R->dRecv, R->s, limit);
  gpuWait(R->s, GUEST_LATE_S + 60.0, "guest late");
  double dt = gpuNow() - t0;
  uint64_t e = *(volatile uint64_t*)R->hostPage;
  int right = 0;
  if (e == 0) {
    expectOut(R, &k, 4242);
    G_CUDA(cudaMemcpy(R->hOut, R->dRecv, c * es, cudaMemcpyDeviceToHost));
    right = memcmp(R->hOut, R->hWant, c * es) == 0;
    G_CHECK(right, "guest late: rank %d: no error word but the sum differs from relayHostReduce", R->rank);
  }
  if (!set) {
    checkErrWord(R, "guest late, no deadline");
    G_CHECK(R->rank == 1 || dt >= GUEST_LATE_S - 1,
            "guest late: rank 0 finished after %.1f s, before its peer came", dt);
  } else if (R->rank == 0) {
    G_CHECK(relayOsErrCode(e) == RELAY_OS_ERR_FLAG && relayOsErrPeer(e) == 1 && dt < 30.0,
            "guest late, RELAYCC_TIMEOUT_MS=%s: rank 0's error word %#llx (code %u, peer %u) after %.1f s, "
            "want code "
            "%u naming rank 1",
            getenv("RELAYCC_TIMEOUT_MS"), (unsigned long long)e, relayOsErrCode(e), relayOsErrPeer(e), dt,
            RELAY_OS_ERR_FLAG);
  } else {
    G_CHECK(right || relayOsErrCode(e) == RELAY_OS_ERR_REMOTE,
            "guest late: rank 1's error word %#llx (code %u)", (unsigned long long)e, relayOsErrCode(e));
  }
  gpuLog("ok: guest late (RELAYCC_TIMEOUT_MS %s): rank %d after %.1f s: %s",
         set ? getenv("RELAYCC_TIMEOUT_MS") : "unset", R->rank, dt,
         right ? "the right sum" : "the error word set");
  G_RELAY(R->host, relayCommBarrier(R->host));
}

/* A fresh region pair (zeroed: epochs 0), handles exchanged, peer opened. */
static void regionsUp(rk_t* R) {
  relayOsLayoutInit(&R->L, NR, 256);
  relayOsLayoutAddBw(&R->L, TILE, RING);
  G_CUDA(cudaMalloc((void**)&R->own, R->L.regionBytes));
  G_CUDA(cudaMemset(R->own, 0, R->L.regionBytes));
  memset(R->hostPage, 0, 64);
  cudaIpcMemHandle_t mine, all[NR];
  G_CUDA(cudaIpcGetMemHandle(&mine, R->own));
  G_RELAY(R->host, R->host->tp->agree(R->host, &mine, all, sizeof mine));
  G_CUDA(cudaIpcOpenMemHandle((void**)&R->peer, all[1 - R->rank], cudaIpcMemLazyEnablePeerAccess));
  G_RELAY(R->host, relayCommBarrier(R->host));
}

/* The window: both pools, mapped by the peer (cudaIpcGetMemHandle of the allocation). */
static void windowUp(rk_t* R) {
  cudaIpcMemHandle_t mine, all[NR];
  G_CUDA(cudaIpcGetMemHandle(&mine, R->dWin));
  G_RELAY(R->host, R->host->tp->agree(R->host, &mine, all, sizeof mine));
  G_CUDA(cudaIpcOpenMemHandle((void**)&R->peerWin, all[1 - R->rank], cudaIpcMemLazyEnablePeerAccess));
  G_RELAY(R->host, relayCommBarrier(R->host));
}

/* sm against ce on the direct path: min over 20 calls of each, per size. */
static void movers(rk_t* R) {
  cudaEvent_t e0, e1;
  G_CUDA(cudaEventCreate(&e0));
  G_CUDA(cudaEventCreate(&e1));
  for (int coll = relayCollectiveAllGather; coll <= relayCollectiveAllToAll;
       coll += relayCollectiveAllToAll) {
    for (size_t mib = 1; mib <= 64; mib *= 4) {
      float best[3] = {1e30f, 1e30f, 1e30f};
      case_t k = {coll, 0, 0, 0, relayBfloat16, relaySum, mib * (1u << 20) / 2 / (isBlocked(coll) ? NR : 1)};
      for (int m = 1; m <= 2; m++) {
        g_mode = m;
        for (int rep = 0; rep < 21; rep++) {
          G_RELAY(R->host, relayCommBarrier(R->host));
          G_CUDA(cudaEventRecord(e0, R->s));
          launch(R, &k, R->dSend + GUARD, R->dRecv + GUARD, R->s, 30ull * 1000000000ull);
          G_CUDA(cudaEventRecord(e1, R->s));
          gpuWait(R->s, WAIT_S, "movers");
          checkErrWord(R, "movers");
          float ms = 0;
          G_CUDA(cudaEventElapsedTime(&ms, e0, e1));
          if (rep > 0 && ms < best[m]) best[m] = ms; /* the first call warms up */
        }
      }
      if (R->rank == 0)
        gpuLog("movers: %s bf16 %zu MiB per rank: sm %.1f us, ce %.1f us (ce/sm %.2f)",
               coll == relayCollectiveAllGather ? "all-gather" : "all-to-all", mib, best[1] * 1e3,
               best[2] * 1e3, best[2] / best[1]);
    }
  }
  G_CUDA(cudaEventDestroy(e0));
  G_CUDA(cudaEventDestroy(e1));
  g_mode = 0;
}

static void regionsDown(rk_t* R) {
  G_RELAY(R->host, relayCommBarrier(R->host)); /* the peer's kernels are done with my region */
  G_CUDA(cudaIpcCloseMemHandle(R->peer));
  G_CUDA(cudaFree(R->own));
}

static int g_movers; /* gputest_bw --movers */
static int g_guest;  /* gputest_bw guest_late: only guestLate runs */

static int rankMain(int rank, int nranks, void* arg) {
  const char* job = arg;
  g_logRank = rank;
  rk_t R;
  memset(&R, 0, sizeof R);
  R.rank = rank;
  relayConfig_t cfg = RELAY_CONFIG_INITIALIZER;
  cfg.timeoutMs = 120000;
  G_RELAY(NULL, relayCommInitShm(&R.host, nranks, rank, job, &cfg));
  const char* devs = getenv("GPUTEST_BW_DEVICES");
  G_CUDA(cudaSetDevice(devs && atoi(devs) >= 2 ? rank : 0)); /* both ranks on one GPU unless told */
  G_CUDA(cudaStreamCreateWithFlags(&R.s, cudaStreamNonBlocking));
  G_CUDA(cudaHostAlloc((void**)&R.hostPage, 64, cudaHostAllocMapped | cudaHostAllocPortable));
  G_CUDA(cudaHostGetDevicePointer((void**)&R.hostPageDev, R.hostPage, 0));
  /* movers: up to 64 MiB per rank in, so an all-gather's out is NR x that (a pool of 64 MiB let the
   * 64 MiB all-gather write past the window: compute-sanitizer found it on the H200). */
  R.pool = 2 * GUARD + (g_movers ? (size_t)NR * (64u << 20) : (size_t)NR * MAXC * 4) + 64;
  G_CUDA(cudaMalloc((void**)&R.dWin, 2 * R.pool));
  R.dSend = R.dWin;
  R.dRecv = R.dWin + R.pool;
  R.hIn = malloc(R.pool);
  R.hOut = malloc(R.pool);
  R.hWant = malloc(R.pool);
  for (int i = 0; i < NR; i++) R.hTmp[i] = malloc(R.pool);
  G_CHECK(R.hIn && R.hOut && R.hWant && R.hTmp[NR - 1], "out of host memory");
  windowUp(&R);
  if (g_movers) {
    regionsUp(&R);
    movers(&R);
    regionsDown(&R);
  }
  if (g_guest) {
    regionsUp(&R);
    guestLate(&R, job);
    regionsDown(&R);
  }
  for (g_mode = 0; g_mode < 3 && !g_movers && !g_guest; g_mode++) {
    regionsUp(&R);
    sweep(&R);
    backToBack(&R);
    graph(&R);
    regionsDown(&R);
    /* The failure cases leave a failed region: fresh ones each (ce's entry is the sm kernel's). */
    if (g_mode == 2) continue;
    regionsUp(&R);
    stuck(&R, 0);
    regionsDown(&R);
    regionsUp(&R);
    stuck(&R, 1);
    regionsDown(&R);
  }
  G_RELAY(R.host, relayCommBarrier(R.host)); /* the peer's kernels are done with my window */
  G_CUDA(cudaIpcCloseMemHandle(R.peerWin));
  G_CUDA(cudaFree(R.dWin));
  G_CUDA(cudaFreeHost(R.hostPage));
  G_CUDA(cudaStreamDestroy(R.s));
  free(R.hIn);
  free(R.hOut);
  free(R.hWant);
  for (int i = 0; i < NR; i++) free(R.hTmp[i]);
  relayCommDestroy(R.host);
  gpuLog("done");
  return 0;
}

static int runBw(void) {
  gpuLogOpen("gputest_bw");
  int ndev = gpuProbeCount();
  if (ndev < 1) {
    gpuLog("SKIP: no GPU visible");
    return GPU_SKIP;
  }
  gpuLog("gputest_bw: 2 processes on GPU 0, tiles of %d B, ring %d, %d blocks", TILE, RING, RELAY_BW_BLOCKS);
  char job[128];
  relayLaunchJobName("gbw", job, sizeof job);
  double t0 = gpuNow();
  relayLaunchResult res;
  int codes[NR];
  if (relayLaunchRanks(NR, rankMain, job, 560000, 5000, &res, codes) != 0) {
    gpuLog("FAIL: %s", res.message);
    return 1;
  }
  gpuLog("PASS: in %.1f s", gpuNow() - t0);
  return 0;
}

static int runMovers(void) {
  g_movers = 1;
  return runBw();
}

/* Two processes on ONE GPU (CUDA IPC within a device): sweep, back-to-back, graph replays, deadline, abort,
 * staged and on windows (direct sm, direct ce) (compute-sanitizer-friendly). movers: by hand, on 2 GPUs
 * (GPUTEST_BW_DEVICES=2), the sm / ce timing that decides RELAYCC_BW_MOVER=auto. */
static int runGuest(void) {
  g_guest = 1;
  return runBw();
}

static const tCase kCases[] = {
    {.name = "all",
     .fn = runBw,
     .ctest = "gpu_bw",
     .labels = "gpu",
     .timeoutS = 600,
     .skipCode = GPU_SKIP,
     .serial = 1},
    /* ~95 s each: rank 1 is 90 s late. */
    {.name = "guest_late",
     .fn = runGuest,
     .ctest = "gpu_bw_guest_late",
     .labels = "gpu",
     .timeoutS = 300,
     .skipCode = GPU_SKIP,
     .serial = 1},
    {.name = "guest_late_env",
     .fn = runGuest,
     .ctest = "gpu_bw_guest_late_env",
     .labels = "gpu",
     .timeoutS = 300,
     .skipCode = GPU_SKIP,
     .serial = 1,
     .env = "RELAYCC_TIMEOUT_MS=1000"},
    {.name = "movers", .fn = runMovers, .labels = "gpu", .timeoutS = 600, .skipCode = GPU_SKIP, .manual = 1},
};

int main(int argc, char** argv) { return t_main(argc, argv, "gpu", kCases, T_NCASES(kCases)); }
