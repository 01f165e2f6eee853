/*
 * Scatter and gather (rooted collectives).
 *   plans       every key shape in one process: the plan checker, the
 *               reference executor against the serial result (in place too),
 *               and plan-cache keys that tell root and per-rank counts apart
 *   scatter     8 shm ranks, every root, rank sets with the root in them (first
 *   gather      or not) and without it, permuted, of 1 rank; per-rank counts
 *               with zeros; in place where defined; against a serial reference
 *   badinput    every bad argument is an error on every rank (check mode) and
 *               the comm stays usable
 * Payloads are byte patterns: scatter and gather copy, so bytes must match.
 *
 * Usage: test_scatter <case>
 */
#include <stdint.h>
#include <string.h>

#include "colls_common.h"
#include "comm/common.h"
#include "core/plancache.h"
#include "harness.h"
#include "plan/plan.h"
#include "ref/ref.h"
#include "route/table.h"

#define NRANKS 8
#define POISON 0xCD
#define SENTINEL 0x5A

/* Byte e of block i (the block ranks[i] receives in a scatter, sends in a gather). */
static unsigned char blockByte(int i, size_t e) { return (unsigned char)(i * 37 + (int)(e * 11 % 251) + 1); }

static void fillBlock(unsigned char* p, int i, size_t bytes) {
  for (size_t e = 0; e < bytes; e++) p[e] = blockByte(i, e);
}

static size_t checkBlock(const unsigned char* p, int i, size_t bytes) {
  size_t bad = 0;
  for (size_t e = 0; e < bytes; e++) bad += p[e] != blockByte(i, e);
  return bad;
}

/* ---- plans in one process ----------------------------------------------- */

static int casePlans(void) {
  unsigned long long st = 11;
  int built = 0;
  for (int it = 0; it < 3000; it++) {
    int n = 1 + (int)(t_rand(&st) % 12);
    int perm[16];
    for (int i = 0; i < n; i++) perm[i] = i;
    for (int i = n - 1; i > 0; i--) {
      int j = (int)(t_rand(&st) % (unsigned long long)(i + 1)), t = perm[i];
      perm[i] = perm[j];
      perm[j] = t;
    }
    int A = 1 + (int)(t_rand(&st) % (unsigned long long)n);
    int root = (int)(t_rand(&st) % (unsigned long long)n);
    size_t counts[16];
    for (int i = 0; i < A; i++) {
      unsigned long long x = t_rand(&st) % 4;
      counts[i] = x == 0 ? 0 : x == 1 ? 1 : (size_t)(t_rand(&st) % 3000);
    }
    relayCollective_t coll = (it & 1) ? relayCollectiveGather : relayCollectiveScatter;
    relayDataType_t dt = (it % 3) == 0 ? relayInt8 : (it % 3) == 1 ? relayFloat32 : relayFloat64;
    size_t es = relayTypeSize(dt), total = 0;
    for (int i = 0; i < A; i++) total += counts[i];
    planKey k = planKeyInit(coll, n, 1, A, perm, counts, dt);
    k.op = relaySum;
    k.route = relayRouteDirect;
    k.depth = 1;
    k.root = root;
    relayPlan* p = NULL;
    T_CHECK(relayPlanBuild(&k, &p) == relaySuccess, "it %d: build failed", it);
    char err[512];
    T_CHECK(relayPlanCheck(p, err, sizeof err) == 0, "it %d %s n=%d A=%d root=%d: %s", it,
            relayCollName(coll), n, A, root, err);
    T_CHECK(p->nSteps == 1 && p->root == root, "it %d: %d steps, root %d", it, p->nSteps, p->root);
    /* Only the root and the set's members name caller buffers. */
    int rootIndex = -1;
    for (int i = 0; i < A; i++)
      if (perm[i] == root) rootIndex = i;
    for (int r = 0; r < n; r++) {
      int member = 0;
      for (int i = 0; i < A; i++) member |= perm[i] == r;
      T_CHECK((p->rank[r].activeGroup >= 0) == (member || r == root), "it %d: rank %d active %d", it, r,
              p->rank[r].activeGroup);
    }
    /* Run it on real data, out of place and (root in the set) in place. */
    for (int inPlace = 0; inPlace < 1 + (rootIndex >= 0); inPlace++) {
      void* send[16] = {0};
      void* recv[16] = {0};
      unsigned char* rootBuf = malloc(total * es + 1);
      unsigned char* rootOther = malloc(total * es + 1);
      unsigned char* member[16] = {0};
      T_CHECK(rootBuf && rootOther, "oom");
      size_t off[17];
      off[0] = 0;
      for (int i = 0; i < A; i++) off[i + 1] = off[i] + counts[i];
      for (int i = 0; i < A; i++) {
        member[i] = malloc(counts[i] * es + 1);
        T_CHECK(member[i], "oom");
      }
      if (coll == relayCollectiveScatter) {
        for (int i = 0; i < A; i++) fillBlock(rootBuf + off[i] * es, i, counts[i] * es);
        send[root] = rootBuf;
        for (int i = 0; i < A; i++) {
          memset(member[i], POISON, counts[i] * es);
          recv[perm[i]] = member[i];
        }
        if (inPlace) recv[root] = rootBuf + off[rootIndex] * es;
      } else {
        memset(rootBuf, POISON, total * es);
        recv[root] = rootBuf;
        for (int i = 0; i < A; i++) {
          fillBlock(member[i], i, counts[i] * es);
          send[perm[i]] = member[i];
        }
        if (inPlace) {
          fillBlock(rootBuf + off[rootIndex] * es, rootIndex, counts[rootIndex] * es);
          send[root] = rootBuf + off[rootIndex] * es;
        }
      }
      T_CHECK(relayRefRun(p, send, recv, err, sizeof err) == 0, "it %d: ref: %s", it, err);
      for (int i = 0; i < A; i++) {
        const unsigned char* got =
            coll == relayCollectiveScatter ? (const unsigned char*)recv[perm[i]] : rootBuf + off[i] * es;
        T_CHECK(checkBlock(got, i, counts[i] * es) == 0,
                "it %d %s n=%d A=%d root=%d in-place=%d: block %d wrong", it, relayCollName(coll), n, A, root,
                inPlace, i);
      }
      if (coll == relayCollectiveScatter) /* the root's send buffer is read only, in place too */
        for (int i = 0; i < A; i++)
          T_CHECK(checkBlock(rootBuf + off[i] * es, i, counts[i] * es) == 0,
                  "it %d: the root's send block %d changed", it, i);
      for (int i = 0; i < A; i++) free(member[i]);
      free(rootBuf);
      free(rootOther);
    }
    relayPlanFree(p);
    built++;
  }
  /* Other routes are "not supported" (the API falls back to direct). */
  int set[3] = {2, 0, 1};
  size_t cs[3] = {4, 0, 9};
  planKey k = planKeyInit(relayCollectiveScatter, 4, 1, 3, set, cs, relayFloat32);
  k.route = relayRouteRelay;
  k.depth = 1;
  k.root = 3;
  relayPlan* p = NULL;
  T_CHECK(relayPlanBuild(&k, &p) == relayNotSupported && !p, "relay route for scatter");
  /* The plan cache tells root and every per-rank count apart. */
  struct relayPlanCache* cache = relayPlanCacheNew();
  k.route = relayRouteDirect;
  T_OK(relayPlanBuild(&k, &p));
  T_CHECK(relayPlanCacheAdd(cache, &k, p) == 0, "cache add");
  T_CHECK(relayPlanCacheFind(cache, &k) == p, "cache miss on the same key");
  planKey k2 = k;
  k2.root = 2;
  T_CHECK(relayPlanCacheFind(cache, &k2) == NULL, "cache hit for another root");
  size_t cs2[3] = {4, 0, 10};
  k2 = k;
  k2.counts = cs2;
  T_CHECK(relayPlanCacheFind(cache, &k2) == NULL, "cache hit for another counts[2]");
  k2 = k;
  k2.coll = relayCollectiveGather;
  T_CHECK(relayPlanCacheFind(cache, &k2) == NULL, "cache hit for gather");
  int set2[3] = {set[1], set[0], set[2]};
  k2 = k;
  k2.ranks = set2;
  T_CHECK(relayPlanCacheFind(cache, &k2) == NULL, "cache hit for the set in another order");
  /* The key is the cache's own copy: changing the caller's arrays after the
   * add must not change what hits. */
  size_t cs3[3];
  memcpy(cs3, cs, sizeof cs3);
  k2 = k;
  k2.counts = cs3;
  T_CHECK(relayPlanCacheFind(cache, &k2) == p, "cache miss on equal counts in another array");
  /* 64 more keys evict the least recently used one (the first). */
  size_t csN[3] = {cs[0], cs[1], 0};
  for (int i = 0; i < 64; i++) {
    csN[2] = 1000 + (size_t)i;
    k2 = k;
    k2.counts = csN;
    relayPlan* pi = NULL;
    T_OK(relayPlanBuild(&k2, &pi));
    T_CHECK(relayPlanCacheAdd(cache, &k2, pi) == 0, "cache add %d", i);
  }
  T_CHECK(relayPlanCacheFind(cache, &k) == NULL, "the least recently used key survived 64 newer ones");
  csN[2] = 1063;
  T_CHECK(relayPlanCacheFind(cache, &k2) != NULL, "the newest key was evicted");
  relayPlanCacheFree(cache);
  /* Names. */
  relayCollective_t c;
  T_CHECK(relayParseCollAll("scatter", &c) == 0 && c == relayCollectiveScatter &&
              relayParseCollAll("Gather", &c) == 0 && c == relayCollectiveGather &&
              !strcmp(relayCollName(relayCollectiveGather), "gather"),
          "names");
  T_CHECK(relayParseColl("scatter", &c) != 0, "relayParseColl takes layout collectives only");
  printf("%d plans checked and run on the reference executor\n", built);
  return 0;
}

/* ---- 8 shm ranks -------------------------------------------------------- */

typedef struct {
  relayCollective_t coll;
} rankArg;

/* One call on every rank; returns this rank's wrong bytes. Ranks name only
 * the buffers their role uses; the others pass NULL, or (sentinel) a buffer
 * that must come back untouched. */
static size_t oneCall(relayComm_t comm, int rank, relayCollective_t coll, int root, const int* set, int n,
                      const size_t* counts, relayDataType_t dt, int inPlace, int sentinel, const char* tag) {
  size_t es = relayTypeSize(dt), off[NRANKS + 1], total;
  off[0] = 0;
  for (int i = 0; i < n; i++) off[i + 1] = off[i] + counts[i];
  total = off[n];
  int me = -1;
  for (int i = 0; i < n; i++)
    if (set[i] == rank) me = i;
  int isRoot = rank == root, scatter = relayCollSendsBlocks(coll); /* the root sends the blocks */
  size_t mine = me >= 0 ? counts[me] : 0;
  unsigned char* rootBuf = malloc(total * es + 64);
  unsigned char* memberBuf = malloc(mine * es + 64);
  unsigned char* unused = malloc(256);
  T_CHECK(rootBuf && memberBuf && unused, "oom");
  memset(unused, SENTINEL, 256);
  const void* sendp = sentinel ? unused : NULL;
  void* recvp = sentinel ? unused : NULL;
  if (isRoot) {
    if (scatter) {
      for (int i = 0; i < n; i++) fillBlock(rootBuf + off[i] * es, i, counts[i] * es);
      sendp = rootBuf;
    } else {
      memset(rootBuf, POISON, total * es + 64);
      recvp = rootBuf;
    }
  }
  if (me >= 0) {
    if (scatter) {
      memset(memberBuf, POISON, mine * es + 64);
      recvp = inPlace && isRoot ? (void*)(rootBuf + off[me] * es) : memberBuf;
    } else if (inPlace && isRoot) {
      fillBlock(rootBuf + off[me] * es, me, mine * es);
      sendp = rootBuf + off[me] * es;
    } else {
      fillBlock(memberBuf, me, mine * es);
      sendp = memberBuf;
    }
  }
  relayResult_t res = tc_run_rooted(coll, sendp, recvp, counts, dt, root, set, n, comm);
  T_CHECK(res == relaySuccess, "rank %d %s: %s (%s)", rank, tag, relayGetErrorString(res),
          relayGetLastError(comm));
  size_t bad = 0;
  if (scatter) {
    if (me >= 0) {
      const unsigned char* got = recvp;
      bad += checkBlock(got, me, mine * es);
      if (!(inPlace && isRoot))
        for (size_t b = mine * es; b < mine * es + 64; b++)
          bad += memberBuf[b] != POISON; /* nothing past the block */
    }
    if (isRoot) /* read only, in place too */
      for (int i = 0; i < n; i++) bad += checkBlock(rootBuf + off[i] * es, i, counts[i] * es);
  } else {
    if (isRoot) {
      for (int i = 0; i < n; i++) bad += checkBlock(rootBuf + off[i] * es, i, counts[i] * es);
      for (size_t b = total * es; b < total * es + 64; b++) bad += rootBuf[b] != POISON;
    }
    if (me >= 0 && !(inPlace && isRoot)) bad += checkBlock(memberBuf, me, mine * es);
  }
  for (int b = 0; b < 256; b++) bad += unused[b] != SENTINEL;
  if (bad) fprintf(stderr, "FAIL rank %d %s: %zu wrong bytes\n", rank, tag, bad);
  free(rootBuf);
  free(memberBuf);
  free(unused);
  return bad;
}

static int sweepRank(int rank, int nranks, void* arg) {
  const rankArg* ra = arg;
  relayComm_t comms[2];
  for (int m = 0; m < 2; m++) {
    relayConfig_t cfg = RELAY_CONFIG_INITIALIZER;
    cfg.checkMode = m; /* agreed calls, and the fast path */
    cfg.timeoutMs = 60000;
    char job[160];
    snprintf(job, sizeof job, "%s-%d", t_job(), m);
    T_OK(relayCommInitShm(&comms[m], nranks, rank, job, &cfg));
  }
  const relayDataType_t dts[2] = {relayFloat32, relayInt8};
  size_t wrong = 0;
  int calls = 0;
  for (int root = 0; root < NRANKS; root++) {
    /* Rank sets: everyone in order; everyone permuted, root in the middle;
     * a subset without the root; a subset with the root last; the root
     * alone; one rank that is not the root. */
    int sets[6][NRANKS], sizes[6];
    for (int i = 0; i < NRANKS; i++) sets[0][i] = i;
    sizes[0] = NRANKS;
    for (int i = 0; i < NRANKS; i++) sets[1][i] = (root + 4 + 3 * i) % NRANKS;
    sizes[1] = NRANKS;
    sizes[2] = 0;
    for (int i = 0; i < NRANKS; i++) {
      int r = (root + 1 + 2 * i) % NRANKS;
      if (r != root && sizes[2] < 4) sets[2][sizes[2]++] = r;
    }
    sets[3][0] = (root + 5) % NRANKS;
    sets[3][1] = (root + 2) % NRANKS;
    sets[3][2] = root;
    sizes[3] = 3;
    sets[4][0] = root;
    sizes[4] = 1;
    sets[5][0] = (root + 3) % NRANKS;
    sizes[5] = 1;
    for (int si = 0; si < 6; si++) {
      int n = sizes[si], rootIn = 0;
      for (int i = 0; i < n; i++) rootIn |= sets[si][i] == root;
      /* Per-rank counts: mixed with zeros; one large block among zeros
       * (several ring laps); ones; all zero (nothing moves). */
      size_t counts[4][NRANKS];
      for (int i = 0; i < n; i++) {
        counts[0][i] = (size_t)((i * 7 + root + 1) % 5) * 131;
        counts[1][i] = i == (root + si) % n ? (1u << 18) + 3 : 0;
        counts[2][i] = 1;
        counts[3][i] = 0;
      }
      for (int ci = 0; ci < 4; ci++)
        for (int di = 0; di < 2; di++)
          for (int inPlace = 0; inPlace < 1 + rootIn; inPlace++) {
            if (ci == 1 && di == 1) continue; /* the large block once per set */
            int m = (root + si + ci + inPlace) & 1;
            char tag[200];
            snprintf(tag, sizeof tag, "%s root=%d set#%d n=%d counts#%d %s %s check=%d",
                     relayCollName(ra->coll), root, si, n, ci, relayTypeName(dts[di]),
                     inPlace ? "in-place" : "out-of-place", m);
            wrong += oneCall(comms[m], rank, ra->coll, root, sets[si], n, counts[ci], dts[di], inPlace,
                             (calls & 3) == 1, tag);
            calls++;
          }
    }
  }
  for (int m = 0; m < 2; m++) T_OK(relayCommDestroy(comms[m]));
  if (rank == 0) printf("%s: %d calls per rank, every root\n", relayCollName(ra->coll), calls);
  return wrong ? 1 : 0;
}

/* ---- bad input ---------------------------------------------------------- */

static void expectAll(relayComm_t comm, int rank, relayResult_t got, relayResult_t want, const char* what,
                      const char* needle) {
  T_CHECK(got == want, "rank %d, %s: got %s, want %s (%s)", rank, what, relayGetErrorString(got),
          relayGetErrorString(want), relayGetLastError(comm));
  if (needle)
    T_CHECK(strstr(relayGetLastError(comm), needle) != NULL, "rank %d, %s: error does not name '%s': %s",
            rank, what, needle, relayGetLastError(comm));
}

static int badInputRank(int rank, int nranks, void* arg) {
  (void)arg;
  relayConfig_t cfg = RELAY_CONFIG_INITIALIZER;
  cfg.checkMode = 1;
  cfg.timeoutMs = 20000;
  relayComm_t comm = t_comm(rank, nranks, &cfg);
  int set[4] = {1, 3, 5, 7};
  size_t counts[4] = {16, 0, 16, 16};
  float send[48], recv[16];
  for (int i = 0; i < 48; i++) send[i] = (float)i;
  memset(recv, POISON, sizeof recv);
  int root = 2, me = -1;
  for (int i = 0; i < 4; i++)
    if (set[i] == rank) me = i;
  const void* s = rank == root ? send : NULL;
  void* r = me >= 0 ? recv : NULL;

  relayResult_t res = relayScatter(s, r, counts, relayFloat32, 8, set, 4, comm, NULL);
  expectAll(comm, rank, res, relayInvalidArgument, "root out of range", "root = 8");
  res = relayScatter(s, r, counts, relayFloat32, -1, set, 4, comm, NULL);
  expectAll(comm, rank, res, relayInvalidArgument, "negative root", NULL);
  int dup[4] = {1, 3, 3, 7};
  res = relayScatter(s, r, counts, relayFloat32, root, dup, 4, comm, NULL);
  expectAll(comm, rank, res, relayInvalidArgument, "repeated rank",
            rank == 0 ? "ranks[1] and [2] both name rank 3" : NULL);
  int oor[4] = {1, 3, 9, 7};
  res = relayGather(r, s == NULL ? NULL : (void*)send, counts, relayFloat32, root, oor, 4, comm, NULL);
  expectAll(comm, rank, res, relayInvalidArgument, "rank out of range", rank == 0 ? "ranks[2] = 9" : NULL);
  res = relayScatter(s, r, counts, relayFloat32, root, set, 0, comm, NULL);
  expectAll(comm, rank, res, relayInvalidArgument, "empty set", rank == 0 ? "nRanks = 0" : NULL);
  res = relayScatter(s, r, rank == 4 ? NULL : counts, relayFloat32, root, set, 4, comm, NULL);
  expectAll(comm, rank, res, relayInvalidArgument, "NULL counts on rank 4", "rank 4");
  res = relayScatter(s, r, counts, (relayDataType_t)42, root, set, 4, comm, NULL);
  expectAll(comm, rank, res, relayInvalidArgument, "unknown dtype", NULL);
  /* The root's buffer and a member's buffer missing. */
  res = relayScatter(NULL, r, counts, relayFloat32, root, set, 4, comm, NULL);
  expectAll(comm, rank, res, relayInvalidArgument, "NULL sendbuff on the root",
            rank == root ? "sendbuff is NULL" : "rank 2");
  res = relayScatter(s, rank == 5 ? NULL : r, counts, relayFloat32, root, set, 4, comm, NULL);
  expectAll(comm, rank, res, relayInvalidArgument, "NULL recvbuff on ranks[2]",
            rank == 5 ? "recvbuff is NULL" : "rank 5");
  /* A member with a zero count may pass NULL: that call is valid. */
  res = relayScatter(s, rank == 3 ? NULL : r, counts, relayFloat32, root, set, 4, comm, NULL);
  expectAll(comm, rank, res, relaySuccess, "NULL recvbuff with count 0", NULL);
  memset(recv, POISON, sizeof recv);
  /* Overflowing counts. */
  size_t huge[4] = {SIZE_MAX / 8, SIZE_MAX / 8, 1, 1};
  res = relayScatter(s, r, huge, relayFloat32, root, set, 4, comm, NULL);
  expectAll(comm, rank, res, relayInvalidArgument, "counts overflow", rank == 0 ? "overflows" : NULL);
  /* Ranks that disagree: on the root, on the counts. */
  res = relayScatter(s, r, counts, relayFloat32, rank == 6 ? 1 : root, set, 4, comm, NULL);
  expectAll(comm, rank, res, relayInvalidUsage, "root differs on rank 6", "root");
  size_t other[4] = {16, 0, 16, rank == 7 ? 15 : 16};
  res = relayGather(r, rank == root ? recv : NULL, other, relayFloat32, root, set, 4, comm, NULL);
  expectAll(comm, rank, res, relayInvalidUsage, "counts differ on rank 7", "counts");
  /* Nothing was written by a rejected call; the comm still works. */
  for (size_t b = 0; b < sizeof recv; b++)
    T_CHECK(((unsigned char*)recv)[b] == POISON, "rank %d: a rejected call wrote recv byte %zu", rank, b);
  float want[48];
  memcpy(want, send, sizeof want);
  res = relayScatter(s, r, counts, relayFloat32, root, set, 4, comm, NULL);
  expectAll(comm, rank, res, relaySuccess, "valid scatter after bad input", NULL);
  if (me >= 0 && counts[me])
    for (int i = 0; i < 16; i++) {
      size_t o = 0;
      for (int j = 0; j < me; j++) o += counts[j];
      T_CHECK(recv[i] == want[o + (size_t)i], "rank %d: element %d = %g, want %g", rank, i, recv[i],
              want[o + (size_t)i]);
    }
  T_OK(relayCommDestroy(comm));
  return 0;
}

#define SWEEP(nm, c) \
  { .name = nm, .rank = sweepRank, .arg = &(rankArg){c}, .ranks = NRANKS, .deadlineS = 300, .timeoutS = 300 }
/* The multi-node part rule live: the ranks as 4 nodes x 2 on a pool of 8 channels, so a scatter takes 1
 * part per peer on the node-major base and a gather 2 on the schedule base (every root). */
#define SWEEP_4X2(nm, c, test)                                                                               \
  {                                                                                                          \
    .name = nm, .rank = sweepRank, .arg = &(rankArg){c}, .ranks = NRANKS, .deadlineS = 300, .timeoutS = 300, \
    .env = "RELAYCC_SHM_NODES=4;RELAYCC_NCHANNELS=8", .ctest = test                                          \
  }

static const tCase kCases[] = {
    {.name = "plans", .fn = casePlans, .timeoutS = 300},
    SWEEP("scatter", relayCollectiveScatter),
    SWEEP("gather", relayCollectiveGather),
    {.name = "badinput", .rank = badInputRank, .ranks = NRANKS, .deadlineS = 120, .timeoutS = 300},
    SWEEP_4X2("scatter-4x2", relayCollectiveScatter, "shm_p2p_4x2_scatter"),
    SWEEP_4X2("gather-4x2", relayCollectiveGather, "shm_p2p_4x2_gather"),
};

int main(int argc, char** argv) { return t_main(argc, argv, "scatter", kCases, T_NCASES(kCases)); }
