/*
 * Every collective on real GPUs against a host reference: one process per
 * GPU (forked here), each rank on relayCommInitNcclShm.
 *
 * Sweep (the same case list on every rank): routes (direct, auto, relay when
 * there are helpers) x layouts (all ranks active; A = 2 with helpers; fused
 * pairs) x all four collectives x dtypes fp32, bf16, fp16, int32 x ops sum,
 * avg, max x in-place and out-of-place x counts 0, 1, 7, 1000, 2^20+3, plus
 * misaligned buffers, a 256 MiB case per collective, and a wrapped
 * communicator (relayCommInitNccl) with check mode on.
 *
 * Inputs encode source, destination and index: data movement (all-gather,
 * all-to-all) compares bits of a hash of (group, source, destination,
 * index); reductions use small integers from the same hash, so sums and
 * maxima are exact in every dtype and in any order (bf16: |x| <= 16 and 8
 * ranks stay below 256), and avg is checked to within one rounding. Outputs
 * are poisoned before each run and guard bytes around them must survive;
 * out-of-place sends must come back unchanged. Helpers pass NULL.
 *
 * Each CTest row runs some of the routes (a budget each): direct (and the large cases), relay, the
 * pipelined relay at forced depths, one-shot and bandwidth (forced: a call they cannot serve runs direct),
 * auto (and the wrapped comm); small is the sanitizer's sweep; rooted runs broadcast and reduce
 * (colls_check.h) on direct, relay and auto.
 * Environment: RELAYCC_GPUTEST_RANKS (ranks; more than GPUs: rank r on GPU r % GPUs, docs/gpu-harness.md),
 *              RELAYCC_GPUTEST_ROUTES (e.g. "direct,relay": overrides the row's routes).
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "comm/comm.h"
#include "comm/common.h"
#include "core/core.h"
#include "gpu/colls_check.h"
#include "gpu/gpu_util.h"
#include "reduce_host.h"
#include "relaycc_nccl.h"
#include "tool_env.h"

#define GUARD 256 /* bytes poisoned before and after every buffer */
#define POISON 0xA5
#define BIG_COUNT ((1u << 20) + 3)
#define HUGE_BYTES ((size_t)256 << 20)
#define WAIT_S 120.0

static const char* kCollNames[4] = {"allgather", "reducescatter", "allreduce", "alltoall"};
enum { AG = 0, RS = 1, AR = 2, A2A = 3 };

typedef struct {
  int small;          /* the sanitizer's sweep: one layout, a few cases, the direct route */
  int huge;           /* the large cases after the first route's sweep */
  int wrapped;        /* the case of a user's NCCL comm (relayCommInitNccl) */
  const char* routes; /* the row's routes: names of kRoutes, comma separated */
  int sharesGpu;      /* ranks share GPUs: NCCL over loopback sockets, large cases sized for it */
  int rooted;         /* broadcast and reduce (colls_check.h's cases) instead of the four */
  char job[128];
} opts_t;

typedef struct {
  const char* name;
  relayLayout_t l;
  int ranks[64];
} layout_t;

typedef struct {
  relayComm_t comm;
  cudaStream_t s;
  int rank, nranks;
  const char* routeName;
  char *dSend, *dRecv; /* device pools with GUARD bytes each side */
  size_t poolBytes;
  unsigned char *hSend, *hRecv, *hPat; /* host staging */
  size_t hostBytes;
  long cases;
} rank_t;

/* ---- patterns: colls_check.h's (salt 0), shared with gputest_nodes and gputest_faults ---------- */

/* ---- one case ---------------------------------------------------------- */

typedef struct {
  int coll;
  relayDataType_t dt;
  relayRedOp_t op;
  int inPlace;
  int offElems; /* buffers start this many elements past 256-byte alignment */
  size_t count; /* per-group count of group 0; group g gets count + g (when count > 0) */
} case_t;

static int roleOf(const layout_t* L, int rank, int* idx) {
  for (int g = 0; g < L->l.nGroups; g++)
    for (int i = 0; i < L->l.nActive; i++)
      if (L->l.ranks[g * L->l.nActive + i] == rank) {
        *idx = i;
        return g;
      }
  *idx = -1;
  return -1;
}

static int isReduce(int coll) { return coll == RS || coll == AR; }

static void describe(char* buf, size_t n, const rank_t* R, const layout_t* L, const case_t* c) {
  snprintf(buf, n, "%s %s route=%s %s %s count=%zu %s off=%d", kCollNames[c->coll], L->name, R->routeName,
           relayTypeName(c->dt), isReduce(c->coll) ? relayOpName(c->op) : "-", c->count,
           c->inPlace ? "in-place" : "out-of-place", c->offElems);
}

static void runCase(rank_t* R, const layout_t* L, const case_t* c) {
  const int A = L->l.nActive, G = L->l.nGroups;
  size_t counts[64];
  for (int g = 0; g < G; g++) counts[g] = c->count ? c->count + (size_t)g : 0;
  int idx;
  int g = roleOf(L, R->rank, &idx);
  size_t es = relayTypeSize(c->dt);
  size_t count = g >= 0 ? counts[g] : 0;
  size_t sendElems = 0, recvElems = 0;
  switch (c->coll) {
    case AG: sendElems = count, recvElems = (size_t)A * count; break;
    case RS: sendElems = (size_t)A * count, recvElems = count; break;
    case AR: sendElems = count, recvElems = count; break;
    default: sendElems = (size_t)A * count, recvElems = (size_t)A * count; break;
  }
  char what[256];
  describe(what, sizeof what, R, L, c);

  void *send = NULL, *recv = NULL;
  /* The region each buffer lives in (in place: one region for both). */
  size_t off = (size_t)c->offElems * es;
  size_t sendBytes = sendElems * es, recvBytes = recvElems * es;
  size_t regionBytes = c->inPlace ? (sendBytes > recvBytes ? sendBytes : recvBytes) : recvBytes;
  G_CHECK(2 * GUARD + off + regionBytes <= R->poolBytes && 2 * GUARD + off + sendBytes <= R->poolBytes,
          "%s: pool too small", what);
  if (g >= 0) {
    /* Inputs on the host: the send layout of this rank. */
    unsigned char* pat = R->hPat;
    for (size_t e = 0; e < sendElems; e++) {
      unsigned char* p = pat + e * es;
      switch (c->coll) {
        case AG: ccMovePattern(p, c->dt, g, idx, 0, e, 0); break;
        case A2A: ccMovePattern(p, c->dt, g, idx, (int)(e / count), e % count, 0); break;
        case RS: ccStoreValue(p, c->dt, ccReduceValue(c->dt, g, idx, (int)(e / count), e % count, 0)); break;
        default: ccStoreValue(p, c->dt, ccReduceValue(c->dt, g, idx, 0, e, 0)); break;
      }
    }
    char* region = R->dRecv + GUARD + off;
    G_CUDA(cudaMemsetAsync(R->dRecv, POISON, R->poolBytes, R->s));
    if (c->inPlace) {
      /* AG: my block inside recv; RS: recv is my block inside send; AR: same. */
      recv = region;
      if (c->coll == AG) {
        send = (char*)recv + (size_t)idx * count * es;
      } else if (c->coll == RS) {
        send = region;
        recv = region + (size_t)idx * count * es;
      } else {
        send = region;
      }
      G_CUDA(cudaMemcpyAsync(send, pat, sendBytes, cudaMemcpyHostToDevice, R->s));
    } else {
      recv = region;
      send = R->dSend + GUARD + off;
      G_CUDA(cudaMemsetAsync(R->dSend, POISON, R->poolBytes, R->s));
      G_CUDA(cudaMemcpyAsync(send, pat, sendBytes, cudaMemcpyHostToDevice, R->s));
    }
  }
  relayResult_t r = relaySuccess;
  switch (c->coll) {
    case AG: r = relayAllGather(send, recv, counts, c->dt, &L->l, R->comm, R->s); break;
    case RS: r = relayReduceScatter(send, recv, counts, c->dt, c->op, &L->l, R->comm, R->s); break;
    case AR: r = relayAllReduce(send, recv, counts, c->dt, c->op, &L->l, R->comm, R->s); break;
    default: r = relayAllToAll(send, recv, counts, c->dt, &L->l, R->comm, R->s); break;
  }
  G_CHECK(r == relaySuccess, "%s: %s: %s", what, relayGetErrorString(r), relayGetLastError(R->comm));
  gpuWait(R->s, WAIT_S, what);
  R->cases++;
  if (g < 0) return;

  /* Copy back the whole region with its guards. */
  size_t span = 2 * GUARD + off + regionBytes;
  G_CUDA(cudaMemcpyAsync(R->hRecv, R->dRecv, span, cudaMemcpyDeviceToHost, R->s));
  gpuWait(R->s, WAIT_S, "copy back");
  for (size_t b = 0; b < GUARD + off; b++)
    G_CHECK(R->hRecv[b] == POISON, "%s: byte %zu before the buffer was written", what, GUARD + off - b);
  for (size_t b = 0; b < GUARD; b++)
    G_CHECK(R->hRecv[GUARD + off + regionBytes + b] == POISON, "%s: byte %zu past the buffer was written",
            what, b);
  const unsigned char* got = R->hRecv + GUARD + off + (size_t)((char*)recv - (R->dRecv + GUARD + off));
  unsigned char want[8];
  for (size_t e = 0; e < recvElems; e++) {
    const unsigned char* p = got + e * es;
    int ok;
    switch (c->coll) {
      case AG:
        ccMovePattern(want, c->dt, g, (int)(e / count), 0, e % count, 0);
        ok = !memcmp(p, want, es);
        break;
      case A2A:
        ccMovePattern(want, c->dt, g, (int)(e / count), idx, e % count, 0);
        ok = !memcmp(p, want, es);
        break;
      default: {
        ccReduceRef(want, c->dt, c->op, A, g, c->coll == RS ? idx : 0, e, 0);
        ok = !memcmp(p, want, es);
        if (!ok && c->op == relayAvg && c->dt != relayInt32)
          ok = ccCloseEnough(c->dt, ccLoadValue(p, c->dt), ccLoadValue(want, c->dt));
        break;
      }
    }
    if (!ok) {
      unsigned long long gv = 0, wv = 0;
      memcpy(&gv, p, es);
      memcpy(&wv, want, es);
      G_CHECK(0, "%s: group %d active %d: element %zu of %zu: got 0x%llx, want 0x%llx", what, g, idx, e,
              recvElems, gv, wv);
    }
  }
  /* In place, the rest of the region (RS: the other blocks of send) is the
   * caller's and may hold anything; out of place, send must be intact. */
  if (!c->inPlace && sendBytes) {
    G_CUDA(cudaMemcpyAsync(R->hSend, send, sendBytes, cudaMemcpyDeviceToHost, R->s));
    gpuWait(R->s, WAIT_S, "copy back send");
    G_CHECK(!memcmp(R->hSend, R->hPat, sendBytes), "%s: the send buffer was modified", what);
  }
}

/* ---- the sweep --------------------------------------------------------- */

/* Every layout the rank count allows: all active; A = 2 and A = 4 with helpers (actives in any order);
 * fused pairs (n/2 x 2) and fused quads (n/4 x 4), each group's members strided across the comm. */
enum { MAX_LAYOUTS = 5 };
static int nLayouts(int n, layout_t* out) {
  int k = 0;
  layout_t* L = &out[k++];
  L->name = "all-active";
  L->l.nGroups = 1;
  L->l.nActive = n;
  for (int i = 0; i < n; i++) L->ranks[i] = i;
  if (n > 2) {
    L = &out[k++];
    L->name = "A2-helpers";
    L->l.nGroups = 1;
    L->l.nActive = 2;
    L->ranks[0] = n - 1; /* any order */
    L->ranks[1] = 1;
  }
  if (n > 4) {
    L = &out[k++];
    L->name = "A4-helpers";
    L->l.nGroups = 1;
    L->l.nActive = 4;
    for (int i = 0; i < 4; i++) L->ranks[i] = (3 - i) * (n / 4); /* 6, 4, 2, 0 at n = 8 */
  }
  for (int A = 2; A <= 4; A += 2) {
    int G = n / A;
    if (G < 2 || n % A != 0) continue;
    L = &out[k++];
    L->name = A == 2 ? "fused-pairs" : "fused-quads";
    L->l.nGroups = G;
    L->l.nActive = A;
    for (int g = 0; g < G; g++)
      for (int i = 0; i < A; i++) L->ranks[g * A + i] = g + i * G;
  }
  for (int i = 0; i < k; i++) out[i].l.ranks = out[i].ranks;
  return k;
}

static void allocPools(rank_t* R, size_t bytes) {
  R->poolBytes = bytes + 2 * GUARD + 64;
  G_CUDA(cudaMalloc((void**)&R->dSend, R->poolBytes));
  G_CUDA(cudaMalloc((void**)&R->dRecv, R->poolBytes));
  R->hostBytes = R->poolBytes;
  R->hSend = malloc(R->hostBytes);
  R->hRecv = malloc(R->hostBytes);
  R->hPat = malloc(R->hostBytes);
  G_CHECK(R->hSend && R->hRecv && R->hPat, "out of host memory (%zu bytes)", R->hostBytes);
}

static void freePools(rank_t* R) {
  G_CUDA(cudaFree(R->dSend));
  G_CUDA(cudaFree(R->dRecv));
  free(R->hSend);
  free(R->hRecv);
  free(R->hPat);
  R->dSend = R->dRecv = NULL;
}

static void sweep(rank_t* R, const layout_t* layouts, int nL, int small) {
  static const relayDataType_t kTypes[] = {relayFloat32, relayBfloat16, relayFloat16, relayInt32};
  static const relayRedOp_t kOps[] = {relaySum, relayAvg, relayMax};
  const size_t kCounts[] = {0, 1, 7, 1000, BIG_COUNT};
  const size_t kSmallCounts[] = {1, 7, 1000};
  const size_t* counts = small ? kSmallCounts : kCounts;
  int nCounts = small ? 3 : 5;
  int nTypes = small ? 2 : 4, nOps = small ? 2 : 3;
  for (int li = 0; li < nL; li++) {
    const layout_t* L = &layouts[li];
    for (int coll = 0; coll < 4; coll++) {
      long before = R->cases;
      double t0 = gpuNow();
      for (int ti = 0; ti < nTypes; ti++)
        for (int oi = 0; oi < (isReduce(coll) ? nOps : 1); oi++)
          for (int ip = 0; ip < (coll == A2A ? 1 : 2); ip++)
            for (int ci = 0; ci < nCounts; ci++) {
              case_t c = {coll, kTypes[ti], kOps[oi], ip, 0, counts[ci]};
              runCase(R, L, &c);
            }
      /* Misaligned caller buffers (element offset 1: no 16-byte vectors). */
      if (!small)
        for (int ti = 0; ti < 2; ti++)
          for (int ci = 3; ci < 5; ci++) {
            case_t c = {coll, kTypes[ti], relaySum, 0, 1, counts[ci]};
            runCase(R, L, &c);
          }
      if (R->rank == 0)
        gpuLog("ok: %-13s %-11s route=%-6s %4ld cases %.2f s", kCollNames[coll], L->name, R->routeName,
               R->cases - before, gpuNow() - t0);
    }
  }
}

/* The largest buffer of each collective is hugeBytes (256 MiB; 32 MiB where ranks share a GPU and NCCL
 * moves every byte through loopback sockets). */
static void hugeCases(rank_t* R, const layout_t* layouts, int nL, size_t hugeBytes) {
  freePools(R);
  allocPools(R, hugeBytes + 64);
  for (int li = 0; li < nL && li < 2; li++) {
    const layout_t* L = &layouts[li];
    size_t elems = hugeBytes / 4;
    for (int coll = 0; coll < 4; coll++) {
      size_t count = coll == AR ? elems : elems / (size_t)L->l.nActive;
      if (L->l.nGroups > 1) count -= (size_t)L->l.nGroups; /* group g adds g */
      case_t c = {coll, relayFloat32, relaySum, 0, 0, count};
      double t0 = gpuNow();
      runCase(R, L, &c);
      if (R->rank == 0)
        gpuLog("ok: %-13s %-11s route=%-6s %zu MiB %.2f s", kCollNames[coll], L->name, R->routeName,
               hugeBytes >> 20, gpuNow() - t0);
    }
  }
  freePools(R);
  allocPools(R, (size_t)8 * (BIG_COUNT + 64) * 4);
}

/* Broadcast and reduce through colls_check.h: every layout x fp32, bf16 x sum, avg (reduce) x counts 0, 1,
 * 7, 1000, 2^20+3 x in and out of place, the root's position moving with the count. */
static void rootedSweep(rank_t* R, const layout_t* layouts, int nL) {
  ccRank C = {R->comm,  R->s,         R->rank,  R->nranks, R->routeName, R->dSend,
              R->dRecv, R->poolBytes, R->hSend, R->hRecv,  R->hPat,      0};
  static const relayDataType_t kTypes[] = {relayFloat32, relayBfloat16};
  static const relayRedOp_t kOps[] = {relaySum, relayAvg};
  const size_t counts[] = {0, 1, 7, 1000, BIG_COUNT};
  /* The relay forced where helpers exist must be what runs (a builder that declined would fall back to
   * direct on every rank alike and pass the data checks: the 2026-12-05 run showed forced relays running
   * direct where no helper exists, which is right, and nothing said which ones did). */
  int relayForced = !strncmp(R->routeName, "relay", 5);
  for (int li = 0; li < nL; li++) {
    ccLayout L;
    L.name = layouts[li].name;
    L.l = layouts[li].l;
    memcpy(L.ranks, layouts[li].ranks, sizeof L.ranks);
    L.l.ranks = L.ranks;
    int helpers = R->nranks > L.l.nGroups * L.l.nActive;
    int taken[relayNumRoutes] = {0};
    for (int coll = CC_BCAST; coll <= CC_REDUCE; coll++)
      for (int ti = 0; ti < 2; ti++)
        for (int oi = 0; oi < (coll == CC_REDUCE ? 2 : 1); oi++)
          for (int ci = 0; ci < (int)(sizeof counts / sizeof counts[0]); ci++)
            for (int inPlace = 0; inPlace < 2; inPlace++) {
              ccCase c = {coll, kTypes[ti], kOps[oi], inPlace, 0, counts[ci], (ci + li) % L.l.nActive, 0};
              ccRunCase(&C, &L, &c);
              int route = -1, depth = 0;
              relayCommLastRoute(R->comm, &route, &depth);
              if (route >= 0 && route < relayNumRoutes) taken[route]++;
              G_CHECK(!(relayForced && helpers && counts[ci] >= 1000) || route == relayRouteRelay,
                      "%s %s count %zu: relay forced with helpers, route %s ran",
                      coll == CC_BCAST ? "broadcast" : "reduce", L.name, counts[ci],
                      route >= 0 ? relayRouteName(route) : "none");
            }
    char tally[256];
    int at = 0;
    for (int r = 0; r < relayNumRoutes; r++)
      if (taken[r])
        at += snprintf(tally + at, sizeof tally - (size_t)at, " %s %d", relayRouteName(r), taken[r]);
    if (R->rank == 0)
      gpuLog("ok: broadcast, reduce %-11s route=%s (routes taken:%s)", L.name, R->routeName,
             at ? tally : " none");
  }
  R->cases += C.calls;
}

static int routeWanted(const char* rowRoutes, const char* name, int n) {
  const char* env = getenv("RELAYCC_GPUTEST_ROUTES");
  const char* list = env && *env ? env : rowRoutes;
  size_t len = strlen(name);
  int listed = 0;
  for (const char* p = list; p && (p = strstr(p, name)) != NULL; p += len)
    if ((p == list || p[-1] == ',') && (p[len] == ',' || p[len] == 0)) listed = 1;
  if (!strncmp(name, "relay", 5) && n <= 2) return 0; /* without helpers relay is direct */
  return listed;
}

static int rankMain(int rank, int nranks, void* arg) {
  opts_t* o = arg;
  g_logRank = rank;
  rank_t R;
  memset(&R, 0, sizeof R);
  R.rank = rank;
  R.nranks = nranks;
  layout_t layouts[MAX_LAYOUTS];
  int nL = nLayouts(nranks, layouts);
  if (o->small) nL = 1;
  int dev = gpuRankStart(rank, nranks, o->job);
  G_CUDA(cudaStreamCreateWithFlags(&R.s, cudaStreamNonBlocking));
  allocPools(&R, (size_t)8 * (BIG_COUNT + 64) * 4);

  /* relay-dN: the pipelined relay at a forced depth (N chunks in flight per share). */
  static const struct {
    const char* name;
    int route;
    int check;
    int depth;
  } kRoutes[] = {{"direct", relayRouteDirect, 0, 0},   {"relay", relayRouteRelay, 1, 0},
                 {"relay-d2", relayRouteRelay, 0, 2},  {"relay-d8", relayRouteRelay, 0, 8},
                 {"oneshot", relayRouteOneShot, 0, 0}, {"bw", relayRouteBw, 0, 0},
                 {"auto", relayRouteAuto, 0, 0}};
  int first = 1;
  for (int ri = 0; ri < (int)(sizeof kRoutes / sizeof kRoutes[0]); ri++) {
    if (!routeWanted(o->routes, kRoutes[ri].name, nranks)) continue;
    relayConfig_t cfg = RELAY_CONFIG_INITIALIZER;
    cfg.route = kRoutes[ri].route;
    cfg.checkMode = kRoutes[ri].check; /* one comm runs every call through agree() */
    cfg.depth = kRoutes[ri].depth;
    cfg.timeoutMs = 60000;
    char job[192];
    snprintf(job, sizeof job, "%s-%s", o->job, kRoutes[ri].name);
    double t0 = gpuNow();
    G_RELAY(NULL, relayCommInitNcclShm(&R.comm, nranks, rank, job, dev, &cfg));
    if (rank == 0) gpuLog("init route=%s: %.2f s", kRoutes[ri].name, gpuNow() - t0);
    R.routeName = kRoutes[ri].name;
    if (o->rooted) rootedSweep(&R, layouts, nL);
    else sweep(&R, layouts, nL, o->small);
    if (o->huge && first && !o->rooted)
      hugeCases(&R, layouts, nL, o->sharesGpu ? HUGE_BYTES / 8 : HUGE_BYTES);
    first = 0;
    G_RELAY(R.comm, relayCommBarrier(R.comm));
    G_RELAY(R.comm, relayCommDestroy(R.comm));
    R.comm = NULL;
  }

  if (o->wrapped) {
    /* A communicator the user made: the ncclUniqueId travels over a CPU
     * comm, then relayCommInitNccl wraps it (check mode on: every call
     * agrees through an ncclAllGather on the wrapped comm). */
    char job[192];
    snprintf(job, sizeof job, "%s-wrap", o->job);
    relayComm_t shm = NULL;
    G_RELAY(NULL, relayCommInitShm(&shm, nranks, rank, job, NULL));
    ncclUniqueId id;
    memset(&id, 0, sizeof id);
    if (rank == 0) G_CHECK(ncclGetUniqueId(&id) == ncclSuccess, "ncclGetUniqueId");
    ncclUniqueId* all = malloc((size_t)nranks * sizeof id);
    G_CHECK(all != NULL, "oom");
    G_RELAY(shm, relayCommAgree(shm, &id, all, sizeof id));
    ncclComm_t nc = NULL;
    ncclResult_t nr = ncclCommInitRank(&nc, nranks, all[0], rank);
    G_CHECK(nr == ncclSuccess, "ncclCommInitRank: %s", ncclGetErrorString(nr));
    free(all);
    relayConfig_t cfg = RELAY_CONFIG_INITIALIZER;
    cfg.checkMode = 1;
    cfg.timeoutMs = 60000;
    G_RELAY(NULL, relayCommInitNccl(&R.comm, nc, &cfg));
    ncclComm_t back = NULL;
    G_RELAY(R.comm, relayCommGetNcclComm(R.comm, &back));
    G_CHECK(back == nc, "relayCommGetNcclComm returned another comm");
    R.routeName = "wrapped";
    for (int coll = 0; coll < 4; coll++)
      for (int ci = 0; ci < 3; ci++) {
        size_t cnts[3] = {1, 1000, BIG_COUNT};
        case_t c = {coll, relayFloat32, relaySum, 0, 0, cnts[ci]};
        runCase(&R, &layouts[0], &c);
        if (nL > 1) runCase(&R, &layouts[1], &c);
      }
    G_RELAY(R.comm, relayCommBarrier(R.comm));
    G_RELAY(R.comm, relayCommDestroy(R.comm));
    /* The user still owns the NCCL comm: it must still work. */
    G_CHECK(ncclAllReduce(R.dSend, R.dRecv, 16, ncclFloat, ncclSum, nc, R.s) == ncclSuccess,
            "the wrapped NCCL comm must outlive the relay comm");
    gpuWait(R.s, WAIT_S, "allreduce on the user's comm");
    G_CHECK(ncclCommDestroy(nc) == ncclSuccess, "ncclCommDestroy");
    G_RELAY(shm, relayCommDestroy(shm));
    if (rank == 0) gpuLog("ok: wrapped communicator (relayCommInitNccl), check mode on");
  }
  freePools(&R);
  G_CUDA(cudaStreamDestroy(R.s));
  gpuLog("done: %ld calls", R.cases);
  return 0;
}

/* arg: the row's opts_t (routes, small, huge, wrapped). */
static int runColls(void* arg) {
  /* Never NVLink SHARP / multicast: on shared machines it can take the
   * node's GPUs out of service. Set before any rank starts NCCL. */
  setenv("NCCL_NVLS_ENABLE", "0", 1);
  opts_t o = *(const opts_t*)arg;
  char logName[64];
  snprintf(logName, sizeof logName, "gputest_colls-%s", o.small ? "small" : o.rooted ? "rooted" : o.routes);
  gpuLogOpen(logName);
  int n = gpuTestRanks("gputest_colls", 2, 64);
  if (!n) return GPU_SKIP;
  o.sharesGpu = relayRanksShareGpus(n, g_gpuCount);
  gpuLog("gputest_colls: routes %s%s", o.routes, o.small ? " (small)" : "");
  relayLaunchJobName("gc", o.job, sizeof o.job);
  return gpuLaunch(n, rankMain, &o, 560000);
}

/* Every collective x layout x route x dtype x op x size (one process per rank; the launcher's own deadline
 * is 560 s, each row a budget of its own). small runs under compute-sanitizer's memcheck where the toolkit
 * has it: NCCL probes for kernel images of other architectures at init and gets
 * cudaErrorNoKernelImageForDevice, which it handles; memcheck would report each probe as an API error (seen
 * on 2 x H200, NCCL 2.28.3), so API errors are not reported there: memory errors still are. */
static const opts_t kDirect = {.routes = "direct", .huge = 1};
static const opts_t kRelay = {.routes = "relay"};
static const opts_t kRelayDepths = {.routes = "relay-d2,relay-d8"};
static const opts_t kOneShotBw = {.routes = "oneshot,bw"};
static const opts_t kAuto = {.routes = "auto", .wrapped = 1};
static const opts_t kSmall = {.routes = "direct", .small = 1};
/* relay: the relay copy and relay reduce (A = 2 reduce-at-helper, A > 2 reduce-scatter then gather); relay-d8
 * their pipelines; oneshot: the kernel's rooted form (RELAY_TP_CAP_ONESHOT_ROOTED) up to the one-shot gate
 * (one group), the rest (fused layouts, 2^20+3) declined to direct on every rank alike. */
static const opts_t kRooted = {.routes = "direct,relay,relay-d8,oneshot,auto", .rooted = 1};
static const tCase kCases[] = {
    {.name = "direct",
     .run = runColls,
     .arg = (void*)&kDirect,
     .ctest = "gpu_colls_direct",
     .labels = "gpu",
     .timeoutS = 600,
     .skipCode = GPU_SKIP,
     .serial = 1},
    {.name = "relay",
     .run = runColls,
     .arg = (void*)&kRelay,
     .ctest = "gpu_colls_relay",
     .labels = "gpu",
     .timeoutS = 600,
     .skipCode = GPU_SKIP,
     .serial = 1},
    {.name = "relay_depths",
     .run = runColls,
     .arg = (void*)&kRelayDepths,
     .ctest = "gpu_colls_relay_depths",
     .labels = "gpu",
     .timeoutS = 600,
     .skipCode = GPU_SKIP,
     .serial = 1},
    {.name = "oneshot_bw",
     .run = runColls,
     .arg = (void*)&kOneShotBw,
     .ctest = "gpu_colls_oneshot_bw",
     .labels = "gpu",
     .timeoutS = 600,
     .skipCode = GPU_SKIP,
     .serial = 1},
    {.name = "auto",
     .run = runColls,
     .arg = (void*)&kAuto,
     .ctest = "gpu_colls_auto",
     .labels = "gpu",
     .timeoutS = 600,
     .skipCode = GPU_SKIP,
     .serial = 1},
    {.name = "rooted",
     .run = runColls,
     .arg = (void*)&kRooted,
     .ctest = "gpu_colls_rooted",
     .labels = "gpu",
     .timeoutS = 600,
     .skipCode = GPU_SKIP,
     .serial = 1},
    {.name = "small",
     .run = runColls,
     .arg = (void*)&kSmall,
     .ctest = "gpu_sanitize_colls",
     .labels = "gpu",
     .timeoutS = 600,
     .skipCode = GPU_SKIP,
     .serial = 1,
     .wrap = "@COMPUTE_SANITIZER@ --error-exitcode 1 --target-processes all --report-api-errors no"},
};

int main(int argc, char** argv) { return t_main(argc, argv, "gpu", kCases, T_NCASES(kCases)); }
