/*
 * Point-to-point and the uneven all-to-all on real GPUs (NCCL transport) against a host reference: one
 * process per rank (forked here; more ranks than GPUs share them, docs/gpu-harness.md), each on
 * relayCommInitNcclShm.
 *
 * Cases: a ring shift and an all-pairs exchange (self included) in relayGroupStart/End, odd and zero
 * counts; point-to-point between all-reduces on one comm; a count and a datatype that differ within a
 * pair (both ends fail naming both ranks: the control plane's check round; the receive buffer untouched,
 * the next transfer of the pair whole); relayAllToAllv over every rank and over all but one (a helper),
 * uneven counts with zeros, and a pair whose counts differ. Inputs encode source, destination and index;
 * outputs are poisoned before each run, with a guard element after each block.
 * Environment: RELAYCC_GPUTEST_RANKS (ranks).
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gpu/gpu_util.h"
#include "relaycc_nccl.h"
#include "tool_env.h"

#define WAIT_S 120.0
#define POISON_WORD ((int32_t)0x5eeded5e)
#define MAX_RANKS 64

static int32_t val(int s, int d, size_t i) { return (int32_t)(1000000 * (s + 1) + 10000 * d + (int)i); }
/* What rank s sends rank d: odd counts, none where s + d is a multiple of 5. */
static size_t pairCount(int s, int d) { return (size_t)((s + d) % 5 == 0 ? 0 : 37 * s + 11 * d + 1); }

typedef struct {
  char job[128];
} opts_t;

typedef struct {
  int rank, nranks;
  relayComm_t comm;
  cudaStream_t s;
} rank_t;

/* A device buffer of n + 1 elements (a guard after the block): filled with val(s, d, .) or poisoned. */
static int32_t* devFilled(size_t n, int s, int d) {
  int32_t* h = malloc((n + 1) * sizeof *h);
  G_CHECK(h != NULL, "oom");
  for (size_t i = 0; i < n; i++) h[i] = s < 0 ? POISON_WORD : val(s, d, i);
  h[n] = POISON_WORD;
  int32_t* dv = NULL;
  G_CUDA(cudaMalloc((void**)&dv, (n + 1) * sizeof *dv));
  G_CUDA(cudaMemcpy(dv, h, (n + 1) * sizeof *h, cudaMemcpyHostToDevice));
  free(h);
  return dv;
}

/* The block (n elements and the guard) holds val(s, d, .), or the poison when s < 0. */
static void expectDev(const rank_t* R, const char* what, const int32_t* dv, size_t n, int s, int d) {
  int32_t* h = malloc((n + 1) * sizeof *h);
  G_CHECK(h != NULL, "oom");
  G_CUDA(cudaMemcpy(h, dv, (n + 1) * sizeof *h, cudaMemcpyDeviceToHost));
  for (size_t i = 0; i <= n; i++) {
    int32_t want = s < 0 || i == n ? POISON_WORD : val(s, d, i);
    G_CHECK(h[i] == want, "rank %d, %s: element %zu of %zu = %d, want %d", R->rank, what, i, n, h[i], want);
  }
  free(h);
}

static void expectError(const rank_t* R, relayResult_t got, relayResult_t want, const char* a,
                        const char* b) {
  const char* msg = relayGetLastError(R->comm);
  G_CHECK(got == want, "rank %d: got %s, want %s (%s)", R->rank, relayGetErrorString(got),
          relayGetErrorString(want), msg);
  G_CHECK(!a || strstr(msg, a), "rank %d: the error does not say \"%s\": %s", R->rank, a, msg);
  G_CHECK(!b || strstr(msg, b), "rank %d: the error does not say \"%s\": %s", R->rank, b, msg);
}

static void ringAndAllPairs(rank_t* R) {
  int r = R->rank, n = R->nranks, next = (r + 1) % n, prev = (r + n - 1) % n;
  int32_t *s = devFilled(pairCount(r, next), r, next), *d = devFilled(pairCount(prev, r), -1, 0);
  G_RELAY(R->comm, relayGroupStart());
  G_RELAY(R->comm, relayRecv(d, pairCount(prev, r), relayInt32, prev, R->comm, R->s));
  G_RELAY(R->comm, relaySend(s, pairCount(r, next), relayInt32, next, R->comm, R->s));
  G_RELAY(R->comm, relayGroupEnd());
  gpuWait(R->s, WAIT_S, "the ring");
  expectDev(R, "ring", d, pairCount(prev, r), prev, r);
  G_CUDA(cudaFree(s));
  G_CUDA(cudaFree(d));

  int32_t *sa[MAX_RANKS], *ra[MAX_RANKS];
  G_RELAY(R->comm, relayGroupStart());
  for (int q = 0; q < n; q++) {
    sa[q] = devFilled(pairCount(r, q) + 1000, r, q);
    ra[q] = devFilled(pairCount(q, r) + 1000, -1, 0);
    G_RELAY(R->comm, relaySend(sa[q], pairCount(r, q) + 1000, relayInt32, q, R->comm, R->s));
    G_RELAY(R->comm, relayRecv(ra[q], pairCount(q, r) + 1000, relayInt32, q, R->comm, R->s));
  }
  G_RELAY(R->comm, relayGroupEnd());
  gpuWait(R->s, WAIT_S, "all pairs");
  for (int q = 0; q < n; q++) {
    expectDev(R, "all pairs", ra[q], pairCount(q, r) + 1000, q, r);
    G_CUDA(cudaFree(sa[q]));
    G_CUDA(cudaFree(ra[q]));
  }
}

static void allReduceCheck(rank_t* R) {
  int ranks[MAX_RANKS];
  for (int q = 0; q < R->nranks; q++) ranks[q] = q;
  relayLayout_t lay = {1, R->nranks, ranks};
  size_t counts[1] = {33};
  int32_t h[33];
  for (int i = 0; i < 33; i++) h[i] = R->rank * 100 + i;
  int32_t* dv = NULL;
  G_CUDA(cudaMalloc((void**)&dv, sizeof h));
  G_CUDA(cudaMemcpy(dv, h, sizeof h, cudaMemcpyHostToDevice));
  G_RELAY(R->comm, relayAllReduce(dv, dv, counts, relayInt32, relaySum, &lay, R->comm, R->s));
  gpuWait(R->s, WAIT_S, "all-reduce");
  G_CUDA(cudaMemcpy(h, dv, sizeof h, cudaMemcpyDeviceToHost));
  for (int i = 0; i < 33; i++)
    G_CHECK(h[i] == 100 * R->nranks * (R->nranks - 1) / 2 + R->nranks * i, "rank %d: all-reduce %d = %d",
            R->rank, i, h[i]);
  G_CUDA(cudaFree(dv));
}

/* Pairs (2k, 2k+1) exchange around all-reduces; rank 0 and 1 then disagree on a count and a datatype. */
static void interleaveAndMismatch(rank_t* R) {
  int r = R->rank, peer = r ^ 1;
  int paired = peer < R->nranks;
  int32_t *s = devFilled(301, r, peer), *d = devFilled(301, -1, 0);
  if (paired)
    G_RELAY(R->comm, (r & 1) ? relayRecv(d, 301, relayInt32, peer, R->comm, R->s)
                             : relaySend(s, 301, relayInt32, peer, R->comm, R->s));
  allReduceCheck(R);
  if (paired)
    G_RELAY(R->comm, (r & 1) ? relaySend(s, 301, relayInt32, peer, R->comm, R->s)
                             : relayRecv(d, 301, relayInt32, peer, R->comm, R->s));
  gpuWait(R->s, WAIT_S, "interleaved transfers");
  if (paired) expectDev(R, "interleaved", d, 301, peer, r);
  G_CUDA(cudaFree(d));
  d = devFilled(301, -1, 0);
  if (r == 0) {
    expectError(R, relaySend(s, 10, relayInt32, 1, R->comm, R->s), relayInvalidUsage,
                "rank 0 sends 10 x int32", "rank 1 receives 11 x int32");
    expectError(R, relaySend(s, 10, relayFloat32, 1, R->comm, R->s), relayInvalidUsage, "10 x float,",
                "10 x int32");
    G_RELAY(R->comm, relaySend(s, 12, relayInt32, 1, R->comm, R->s));
  } else if (r == 1) {
    expectError(R, relayRecv(d, 11, relayInt32, 0, R->comm, R->s), relayInvalidUsage,
                "rank 0 sends 10 x int32", "rank 1 receives 11 x int32");
    expectError(R, relayRecv(d, 10, relayInt32, 0, R->comm, R->s), relayInvalidUsage, "10 x float,",
                "10 x int32");
    gpuWait(R->s, WAIT_S, "the mismatched receives");
    expectDev(R, "after the mismatches", d, 301, -1, 0);
    G_RELAY(R->comm, relayRecv(d, 12, relayInt32, 0, R->comm, R->s));
    gpuWait(R->s, WAIT_S, "the receive after the mismatches");
    expectDev(R, "the pair's next transfer", d, 12, 0, 1);
  }
  gpuWait(R->s, WAIT_S, "the mismatch case");
  allReduceCheck(R);
  G_CUDA(cudaFree(s));
  G_CUDA(cudaFree(d));
}

static size_t a2avCount(int i, int j) { return (size_t)((3 * i + 5 * j + 1) % 7) * (size_t)(i + 1); }

/* Over the ranks but `helper` (-1: none), in reverse order; mismatch: active 1 expects one element more
 * from active 0 than it sends: on NCCL the pair checks its counts on the control plane first, so both
 * fail naming both, the block untouched, the other blocks whole. */
static void allToAllv(rank_t* R, int helper, int mismatch) {
  int ranks[MAX_RANKS], A = 0, me = -1;
  for (int q = R->nranks - 1; q >= 0; q--)
    if (q != helper) {
      if (q == R->rank) me = A;
      ranks[A++] = q;
    }
  relayLayout_t lay = {1, A, ranks};
  if (me < 0) {
    G_RELAY(R->comm, relayAllToAllv(NULL, NULL, NULL, NULL, NULL, NULL, relayInt32, &lay, R->comm, R->s));
    return;
  }
  size_t sc[MAX_RANKS], sd[MAX_RANKS], rc[MAX_RANKS], rd[MAX_RANKS], st = 0, rt = 0;
  for (int j = 0; j < A; j++) {
    sc[j] = a2avCount(me, j);
    rc[j] = a2avCount(j, me) + (mismatch && me == 1 && j == 0);
    sd[j] = st;
    rd[j] = rt;
    st += sc[j] + 1; /* a guard after each block */
    rt += rc[j] + 1;
  }
  int32_t* hs = malloc((st + 1) * sizeof *hs);
  int32_t* hr = malloc((rt + 1) * sizeof *hr);
  G_CHECK(hs && hr, "oom");
  for (size_t i = 0; i <= st; i++) hs[i] = POISON_WORD;
  for (int j = 0; j < A; j++)
    for (size_t i = 0; i < sc[j]; i++) hs[sd[j] + i] = val(R->rank, ranks[j], i);
  int32_t *ds = NULL, *dr = NULL;
  G_CUDA(cudaMalloc((void**)&ds, (st + 1) * sizeof *ds));
  G_CUDA(cudaMalloc((void**)&dr, (rt + 1) * sizeof *dr));
  G_CUDA(cudaMemcpy(ds, hs, (st + 1) * sizeof *hs, cudaMemcpyHostToDevice));
  for (size_t i = 0; i <= rt; i++) hr[i] = POISON_WORD;
  G_CUDA(cudaMemcpy(dr, hr, (rt + 1) * sizeof *hr, cudaMemcpyHostToDevice));
  relayResult_t res = relayAllToAllv(ds, sc, sd, dr, rc, rd, relayInt32, &lay, R->comm, R->s);
  gpuWait(R->s, WAIT_S, "all-to-all-v");
  if (mismatch && me <= 1) {
    char a0[32], a1[32];
    snprintf(a0, sizeof a0, "rank %d sends", ranks[0]);
    snprintf(a1, sizeof a1, "rank %d receives", ranks[1]);
    expectError(R, res, relayInvalidUsage, a0, a1);
  } else {
    G_CHECK(res == relaySuccess, "rank %d: relayAllToAllv -> %s: %s", R->rank, relayGetErrorString(res),
            relayGetLastError(R->comm));
  }
  G_CUDA(cudaMemcpy(hr, dr, (rt + 1) * sizeof *hr, cudaMemcpyDeviceToHost));
  for (int j = 0; j < A; j++) {
    int untouched = mismatch && me == 1 && j == 0;
    for (size_t i = 0; i <= rc[j]; i++) {
      int32_t want = untouched || i == rc[j] ? POISON_WORD : val(ranks[j], R->rank, i);
      G_CHECK(hr[rd[j] + i] == want, "rank %d: all-to-all-v block from rank %d, element %zu = %d, want %d",
              R->rank, ranks[j], i, hr[rd[j] + i], want);
    }
  }
  free(hs);
  free(hr);
  G_CUDA(cudaFree(ds));
  G_CUDA(cudaFree(dr));
}

static int rankMain(int rank, int nranks, void* arg) {
  opts_t* o = arg;
  g_logRank = rank;
  rank_t R = {rank, nranks, NULL, NULL};
  int dev = gpuRankStart(rank, nranks, o->job);
  G_CUDA(cudaStreamCreateWithFlags(&R.s, cudaStreamNonBlocking));
  relayConfig_t cfg = RELAY_CONFIG_INITIALIZER;
  cfg.timeoutMs = 60000;
  G_RELAY(NULL, relayCommInitNcclShm(&R.comm, nranks, rank, o->job, dev, &cfg));
  ringAndAllPairs(&R);
  if (rank == 0) gpuLog("ok: ring and all pairs");
  interleaveAndMismatch(&R);
  if (rank == 0) gpuLog("ok: interleaved with all-reduces, mismatches");
  allToAllv(&R, -1, 0);
  allToAllv(&R, nranks > 2 ? 1 : -1, 0);
  if (nranks > 2) allToAllv(&R, -1, 1);
  if (rank == 0) gpuLog("ok: all-to-all-v");
  allReduceCheck(&R);
  G_RELAY(R.comm, relayCommDestroy(R.comm));
  G_CUDA(cudaStreamDestroy(R.s));
  return 0;
}

static int runPt2pt(void* arg) {
  (void)arg;
  setenv("NCCL_NVLS_ENABLE", "0", 1); /* never NVLink multicast on shared machines */
  gpuLogOpen("gputest_pt2pt");
  int n = gpuTestRanks("gputest_pt2pt", 2, MAX_RANKS);
  if (!n) return GPU_SKIP;
  opts_t o;
  relayLaunchJobName("gp", o.job, sizeof o.job);
  return gpuLaunch(n, rankMain, &o, 560000);
}

static const tCase kCases[] = {
    {.name = "pt2pt",
     .run = runPt2pt,
     .ctest = "gpu_pt2pt",
     .labels = "gpu",
     .timeoutS = 600,
     .skipCode = GPU_SKIP,
     .serial = 1},
};

int main(int argc, char** argv) { return t_main(argc, argv, "gpu", kCases, T_NCASES(kCases)); }
