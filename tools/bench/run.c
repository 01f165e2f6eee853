/* The body of one rank process: for every collective and size, check once,
 * warm up, then time. The same on every backend (backend.h says what a
 * backend provides). Rank 0 prints the tables and fills the shared results
 * page that the parent turns into JSON and the exit code. */
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "backend.h"
#include "bench.h"
#include "comm/common.h"

int benchCounts(relayCollective_t coll, uint64_t bytes, size_t esize, int nActive, uint64_t* count,
                uint64_t* sendElems, uint64_t* recvElems) {
  uint64_t A = (uint64_t)nActive;
  switch (coll) {
    case relayCollectiveAllReduce:
      if (bytes % esize) return 0;
      *count = bytes / esize;
      *sendElems = *recvElems = *count;
      return 1;
    case relayCollectiveAllGather:
      if (bytes % esize) return 0;
      *count = bytes / esize;
      *sendElems = *count;
      *recvElems = A * *count;
      return 1;
    case relayCollectiveReduceScatter:
      if (bytes % (esize * A)) return 0;
      *count = bytes / (esize * A);
      *sendElems = A * *count;
      *recvElems = *count;
      return 1;
    case relayCollectiveAllToAll:
      if (bytes % (esize * A)) return 0;
      *count = bytes / (esize * A);
      *sendElems = *recvElems = A * *count;
      return 1;
    case relayCollectiveBroadcast:
    case relayCollectiveReduce:
    case relayCollectiveSend:
      if (bytes % esize) return 0;
      *count = bytes / esize;
      *sendElems = *recvElems = *count;
      return 1;
    case relayCollectiveAllToAllV:
      /* count: the base of benchA2avCount, as all-to-all's block (the even exchange of the same size);
       * the buffers: at most 3 bases per peer (rankShape gives each rank its own row and column). */
      if (bytes % (esize * A)) return 0;
      *count = bytes / (esize * A);
      *sendElems = *recvElems = 3 * A * *count;
      return 1;
    default: return 0;
  }
}

double benchAlgBytes(relayCollective_t coll, uint64_t bytes, int nActive) {
  /* nccl-tests' algbw divides the collective's total data by the time: for
   * all-gather that is the gathered output, A inputs; for scatter and gather
   * the root's buffer, n blocks (ScatterGetBw: count * nranks * typesize). */
  if (coll == relayCollectiveAllToAllV) {
    /* The receive total of the busiest active (the largest column of benchA2avCount), bytes / A being
     * the base's bytes: what the row reports as its size. */
    uint64_t most = 0;
    for (int j = 0; j < nActive; j++) {
      uint64_t col = 0;
      for (int i = 0; i < nActive; i++) col += benchA2avCount(1, i, j);
      most = col > most ? col : most;
    }
    return (double)(bytes / (uint64_t)nActive * most);
  }
  return coll == relayCollectiveAllGather || relayCollRankSet(coll) ? (double)bytes * nActive : (double)bytes;
}

double benchBusFactor(relayCollective_t coll, int nActive) {
  double n = nActive;
  /* nccl-tests: broadcast, reduce and sendrecv move the data once over the busiest link. */
  if (coll == relayCollectiveBroadcast || coll == relayCollectiveReduce || coll == relayCollectiveSend)
    return 1;
  return coll == relayCollectiveAllReduce ? 2.0 * (n - 1) / n : (n - 1) / n;
}

typedef struct {
  double tMin, tMed, spread;
} benchStats;

static int cmpDouble(const void* a, const void* b) {
  double x = *(const double*)a, y = *(const double*)b;
  return (x > y) - (x < y);
}

/* Agreed at the end of each (collective, size): the check's result and the
 * route relaycc took, so rank 0 can print what the first active rank saw. */
typedef struct {
  long long wrong[BENCH_NUM_TARGETS];
  int route, depth;
} benchRecord;

#define TIMES_PER_AGREE 32 /* 32 doubles = the 256-byte limit of one agreement */

typedef struct {
  benchRank r;
  const benchBackend* be;
  const benchOpts* o;
  benchResults* res;
  relayLayout_t layout;
  int group, me; /* -1 on a helper */
  size_t esize;
  double* times;    /* [targets][iters*reps] this rank's */
  double* maxTimes; /* [iters*reps] max over ranks */
  double* all;      /* [nranks * TIMES_PER_AGREE] */
  int checkedOnce;
  int warmedOnce; /* the first row's warm-up ran (warmUp) */
  /* Scatter and gather: the rank set is the layout's ranks, as one group. */
  relayLayout_t set;
  int nSet, member, isRoot; /* member: index in the set, -1 outside */
  size_t* setCounts;        /* [nSet] */
  size_t* a2av;             /* all-to-all-v: sendcounts, sdispls, recvcounts, rdispls, A each */
} rankCtx;

/* This rank's buffer elements for one size: relaycc's count argument and the
 * send and recv elements (0 for a buffer its role does not use). 0 when the
 * size does not divide (the row is skipped). */
static int rankShape(const rankCtx* x, relayCollective_t coll, uint64_t bytes, uint64_t* count,
                     uint64_t* sendElems, uint64_t* recvElems) {
  if (!relayCollRankSet(coll)) {
    if (!benchCounts(coll, bytes, x->esize, x->o->nActive, count, sendElems, recvElems)) return 0;
    if (coll == relayCollectiveSend) {
      /* The pair's first rank only sends, its second only receives. */
      if (x->me != 0) *sendElems = 0;
      if (x->me != 1) *recvElems = 0;
    }
    if (coll == relayCollectiveAllToAllV) {
      /* This active's row and column (a helper has neither). */
      *sendElems = *recvElems = 0;
      for (int j = 0; j < x->o->nActive && x->me >= 0; j++) {
        *sendElems += benchA2avCount(*count, x->me, j);
        *recvElems += benchA2avCount(*count, j, x->me);
      }
    }
    return 1;
  }
  /* size = one member's block, as the per-active-rank input elsewhere. */
  if (bytes % x->esize) return 0;
  *count = bytes / x->esize;
  uint64_t all = (uint64_t)x->nSet * *count, mine = x->member >= 0 ? *count : 0, root = x->isRoot ? all : 0;
  int scatter = relayCollSendsBlocks(coll);
  *sendElems = scatter ? root : mine;
  *recvElems = scatter ? mine : root;
  return 1;
}

/* Takes part in coll: active in a group, or the root or a member of the set. */
static int rankInvolved(const rankCtx* x, relayCollective_t coll) {
  return relayCollRankSet(coll) ? x->isRoot || x->member >= 0 : x->me >= 0;
}

/* One buffer for send and recv: the in-place forms (relaycc.h); a rooted
 * call has one only on a root that is in the set. */
static int rankOneBuffer(const rankCtx* x, relayCollective_t coll) {
  return x->o->inplace && (!relayCollRankSet(coll) || (x->isRoot && x->member >= 0));
}

static int failRank(rankCtx* x, const char* what, relayCollective_t coll, uint64_t bytes) {
  fprintf(stderr, "relaycc-bench: rank %d: %s (%s, %llu bytes, backend %s): %s\n", x->r.rank, what,
          benchCollName(coll), (unsigned long long)bytes, x->be->name, x->r.err[0] ? x->r.err : "failed");
  fflush(stderr);
  return 1;
}

/* The first timed row of a run warms up for at least this long on its slowest rank: the first 16-core
 * cpu-peers run (docs/perf/2026-12-04-cpu-peers-16core.md) read 107 us for the median of its first row, a
 * 4 KiB all-reduce whose minimum was 2.8 us and whose bf16 twin, later in the run, took 3.3 us; an earlier
 * run read 0.43 of Open MPI in the same first cell. -w calls (3) of a few microseconds end long before a
 * process that has just started (and its cores) runs at its steady pace. */
#define BENCH_FIRST_WARMUP_NS (50ull * 1000000ull)

/* Warm-up calls of one target, then wait for them. The first row of the run repeats them until every
 * rank has spent BENCH_FIRST_WARMUP_NS in them (agreed: all ranks make the same calls). */
static int warmUp(rankCtx* x, const benchCall* c, benchTarget t, int first) {
  uint64_t t0 = relayNowNs();
  for (;;) {
    for (int i = 0; i < x->o->warmup; i++)
      if (x->be->run(&x->r, c, t)) return 1;
    if (x->be->sync(&x->r)) return 1;
    if (!first || x->o->warmup == 0) return 0;
    double spent = (double)(relayNowNs() - t0), least = INFINITY;
    if (x->be->agree(&x->r, &spent, x->all, sizeof spent)) return 1;
    for (int q = 0; q < x->r.nranks; q++) least = fmin(least, x->all[q]);
    if (least >= (double)BENCH_FIRST_WARMUP_NS) return 0;
  }
}

/* Time iters calls of every target per repetition, the targets taking turns
 * within each repetition (relaycc's iterations, then the baseline's, then
 * relaycc's again...; --sequential: all of one, then the other), so that
 * drift over a row (clocks, a neighbour's load) lands on both sides of the
 * ratio alike; every iteration starts after a barrier so that no rank's
 * clock includes waiting for a late peer's previous iteration. This rank's
 * times: x->times[t * iters*reps + k]. */
static int timeTargets(rankCtx* x, const benchCall* c, int nTargets) {
  const benchOpts* o = x->o;
  benchRank* r = &x->r;
  int total = o->iters * o->reps;
  /* --sequential: the targets one after the other, each all its repetitions. */
  int outer = o->sequential ? nTargets : o->reps, inner = o->sequential ? o->reps : nTargets;
  for (int a = 0; a < outer; a++)
    for (int b = 0; b < inner; b++)
      for (int i = 0; i < o->iters; i++) {
        int t = o->sequential ? a : b, rep = o->sequential ? b : a;
        double* slot = &x->times[t * total + rep * o->iters + i];
        if (x->be->barrier(r) || x->be->timerStart(r) || x->be->run(r, c, (benchTarget)t) ||
            x->be->timerStop(r, slot))
          return 1;
        /* The copy is timed as its receiver sees it: the data is there when its receive returns (a
         * send may return once its data is handed off). */
        if (c->coll == relayCollectiveSend && x->me != 1) *slot = 0;
      }
  return 0;
}

/* One target's statistics: an iteration lasts until its slowest rank
 * finishes (max over ranks, gathered after the timed region); tMin is the
 * minimum over all iterations, spread the largest over the smallest of the
 * repetitions' minima. */
static int targetStats(rankCtx* x, benchTarget t, benchStats* st) {
  const benchOpts* o = x->o;
  benchRank* r = &x->r;
  int total = o->iters * o->reps;
  const double* times = &x->times[(int)t * total];
  for (int k0 = 0; k0 < total; k0 += TIMES_PER_AGREE) {
    double mine[TIMES_PER_AGREE] = {0};
    int n = total - k0 < TIMES_PER_AGREE ? total - k0 : TIMES_PER_AGREE;
    memcpy(mine, &times[k0], (size_t)n * sizeof(double));
    if (x->be->agree(r, mine, x->all, sizeof mine)) return 1;
    for (int j = 0; j < n; j++) {
      double m = 0;
      for (int q = 0; q < r->nranks; q++) m = fmax(m, x->all[q * TIMES_PER_AGREE + j]);
      x->maxTimes[k0 + j] = m;
    }
  }
  double lo = INFINITY, hi = 0;
  for (int rep = 0; rep < o->reps; rep++) {
    double m = INFINITY;
    for (int i = 0; i < o->iters; i++) m = fmin(m, x->maxTimes[rep * o->iters + i]);
    lo = fmin(lo, m);
    hi = fmax(hi, m);
  }
  qsort(x->maxTimes, (size_t)total, sizeof(double), cmpDouble);
  st->tMin = lo;
  st->spread = lo > 0 ? hi / lo : 1.0;
  st->tMed = total % 2 ? x->maxTimes[total / 2] : 0.5 * (x->maxTimes[total / 2 - 1] + x->maxTimes[total / 2]);
  return 0;
}

typedef struct {
  void* send; /* backend buffers (out of place) */
  void* recv;
  void* one;    /* in place: the single buffer */
  void* hostIn; /* host staging when the backend's memory is not host-visible */
  void* hostOut;
  uint64_t sendBytes, recvBytes;
} rankBufs;

/* Fill inputs and sentinels, run once, compare. Returns wrong elements on
 * this rank, or -1 on a backend failure. */
static long long checkOnce(rankCtx* x, const benchCall* c, benchTarget t, rankBufs* b, uint64_t count,
                           uint64_t sendElems, uint64_t recvElems) {
  const benchOpts* o = x->o;
  benchRank* r = &x->r;
  const benchBackend* be = x->be;
  long long wrong = 0;
  benchCheckKey key = {c->coll, o->dtype, o->op,        o->nActive, x->group,
                       x->me,   count,    o->rootIndex, o->inplace};
  uint64_t es = x->esize;
  int blocks = relayCollSendsBlocks(c->coll); /* the size is A blocks of count (the swept size) */
  char tag[160];
  snprintf(tag, sizeof tag, "relaycc-bench: rank %d: %s %s %llu bytes%s", r->rank,
           t == BENCH_TARGET_RELAY ? "relaycc" : be->baselineName, benchCollName(c->coll),
           (unsigned long long)(blocks ? count * es * (uint64_t)o->nActive : count * es),
           o->inplace ? " in place" : "");
  if (x->me >= 0) {
    /* Host images of what the buffers must hold before the call. */
    void* in = be->hostVisible ? (o->inplace ? b->one : b->send) : b->hostIn;
    void* out = be->hostVisible ? (o->inplace ? b->one : b->recv) : b->hostOut;
    if (!o->inplace) {
      benchFillInput(&key, in);
      benchFillSentinel(o->dtype, out, recvElems);
      if (!be->hostVisible &&
          (be->toDevice(r, b->send, in, sendElems * es) || be->toDevice(r, b->recv, out, recvElems * es)))
        return -1;
    } else {
      /* In place: the input sits inside the output buffer (relaycc.h). */
      uint64_t bufElems = sendElems > recvElems ? sendElems : recvElems;
      if (c->coll == relayCollectiveAllGather) {
        benchFillSentinel(o->dtype, in, bufElems);
        benchFillInput(&key, (char*)in + (uint64_t)x->me * count * es);
      } else {
        benchFillInput(&key, in);
      }
      if (!be->hostVisible && be->toDevice(r, b->one, in, bufElems * es)) return -1;
    }
  }
  if (be->barrier(r) || be->run(r, c, t) || be->sync(r)) return -1;
  if (x->me >= 0) {
    void* outImg;
    if (be->hostVisible) {
      outImg = c->recv;
    } else {
      if (be->toHost(r, b->hostOut, c->recv, recvElems * es)) return -1;
      outImg = b->hostOut;
    }
    if (r->rank == o->corruptRank && recvElems > 0) {
      /* Flip a bit of the top byte of the middle element: sign or exponent
       * in floats, a large step in integers, beyond any tolerance. */
      unsigned char* p = (unsigned char*)outImg + (recvElems / 2) * es + es - 1;
      *p ^= 0x40;
    }
    wrong += benchCheckOutput(&key, outImg, tag);
    if (!o->inplace) {
      const void* inImg = b->send;
      if (!be->hostVisible) {
        if (be->toHost(r, b->hostIn, b->send, sendElems * es)) return -1;
        inImg = b->hostIn;
      }
      wrong += benchCheckInputIntact(&key, inImg, tag);
    }
    if (wrong > 5) fprintf(stderr, "%s: %lld wrong elements in all\n", tag, wrong);
  }
  return wrong;
}

/* The check of a rooted call: inputs and sentinels in, one call, then each
 * rank looks at what its role owns -- a scatter member its block, a gather
 * root every block, and the buffers a call only reads, unchanged. */
static long long checkOnceRooted(rankCtx* x, const benchCall* c, benchTarget t, rankBufs* b, uint64_t count) {
  const benchOpts* o = x->o;
  benchRank* r = &x->r;
  const benchBackend* be = x->be;
  int scatter = relayCollSendsBlocks(c->coll), n = x->nSet, m = x->member, root = x->isRoot;
  int one = rankOneBuffer(x, c->coll);
  uint64_t es = x->esize, total = (uint64_t)n * count;
  /* op plays no part; sum keeps the pattern's full range of values. */
  benchCheckKey key = {c->coll, o->dtype, relaySum, n, 0, m, count, 0, 0};
  char tag[160];
  snprintf(tag, sizeof tag, "relaycc-bench: rank %d: %s %s %llu bytes%s (root %d, set index %d)", r->rank,
           t == BENCH_TARGET_RELAY ? "relaycc" : be->baselineName, benchCollName(c->coll),
           (unsigned long long)(count * es), one ? " in place" : "", c->root, m);
  /* Host images: the buffers themselves where they are host memory. */
  void* inImg = be->hostVisible ? (void*)c->send : b->hostIn;
  void* outImg = be->hostVisible ? c->recv : b->hostOut;
  if (scatter) {
    if (root) {
      benchFillBlocks(&key, inImg, 0, n);
      if (!be->hostVisible && be->toDevice(r, (void*)c->send, inImg, total * es)) return -1;
    }
    if (m >= 0 && !one) {
      benchFillSentinel(o->dtype, outImg, count);
      if (!be->hostVisible && be->toDevice(r, c->recv, outImg, count * es)) return -1;
    }
  } else {
    if (m >= 0 && !one) {
      benchFillBlocks(&key, inImg, m, 1);
      if (!be->hostVisible && be->toDevice(r, (void*)c->send, inImg, count * es)) return -1;
    }
    if (root) {
      benchFillSentinel(o->dtype, outImg, total);
      /* In place the root's own block already sits in its output. */
      if (one) benchFillBlocks(&key, (char*)outImg + (uint64_t)m * count * es, m, 1);
      if (!be->hostVisible && be->toDevice(r, c->recv, outImg, total * es)) return -1;
    }
  }
  if (be->barrier(r) || be->run(r, c, t) || be->sync(r)) return -1;
  long long wrong = 0;
  /* What this rank receives: a scatter member its block, a gather root all. */
  uint64_t outElems = scatter ? (m >= 0 ? count : 0) : (root ? total : 0);
  if (outElems) {
    if (!be->hostVisible && be->toHost(r, b->hostOut, c->recv, outElems * es)) return -1;
    if (r->rank == o->corruptRank) {
      unsigned char* p = (unsigned char*)outImg + (outElems / 2) * es + es - 1; /* as checkOnce */
      *p ^= 0x40;
    }
    wrong += scatter ? benchCheckBlocks(&key, outImg, m, 1, tag, "output")
                     : benchCheckBlocks(&key, outImg, 0, n, tag, "output");
  }
  /* What it only sends must stay as it was: the scatter root's buffer (in
   * place too), a gather member's block (out of place). */
  uint64_t inElems = scatter ? (root ? total : 0) : (m >= 0 && !one ? count : 0);
  if (inElems) {
    if (!be->hostVisible && be->toHost(r, b->hostIn, c->send, inElems * es)) return -1;
    wrong += scatter ? benchCheckBlocks(&key, inImg, 0, n, tag, "send buffer (must stay untouched)")
                     : benchCheckBlocks(&key, inImg, m, 1, tag, "send buffer (must stay untouched)");
  }
  if (wrong > 5) fprintf(stderr, "%s: %lld wrong elements in all\n", tag, wrong);
  return wrong;
}

static int runColl(rankCtx* x, relayCollective_t coll) {
  const benchOpts* o = x->o;
  const benchBackend* be = x->be;
  benchRank* r = &x->r;
  int printer = r->rank == 0;
  int nTargets = be->baselineName ? 2 : 1;

  if (o->inplace &&
      (coll == relayCollectiveAllToAll || coll == relayCollectiveAllToAllV || coll == relayCollectiveSend)) {
    if (printer) {
      fprintf(stdout, "#\n# %s: %s; skipped\n", benchCollName(coll),
              coll == relayCollectiveSend ? "a copy between two ranks has no in-place form"
                                          : "in place is rejected by relaycc (as in the reference)");
      fflush(stdout);
    }
    return 0;
  }
  /* Buffers for the largest size that divides, reused across sizes. */
  int rooted = relayCollRankSet(coll), involved = rankInvolved(x, coll), oneBuf = rankOneBuffer(x, coll);
  uint64_t maxSend = 0, maxRecv = 0;
  for (int s = 0; s < o->nSizes; s++) {
    uint64_t cnt, se, re;
    if (!rankShape(x, coll, o->sizes[s], &cnt, &se, &re)) continue;
    if (se > maxSend) maxSend = se;
    if (re > maxRecv) maxRecv = re;
  }
  rankBufs b;
  memset(&b, 0, sizeof b);
  uint64_t es = x->esize;
  int allocFail = 0;
  if (involved) {
    uint64_t oneElems = maxSend > maxRecv ? maxSend : maxRecv;
    if (oneBuf) {
      b.one = be->alloc(r, oneElems * es);
      allocFail = !b.one;
    } else {
      b.send = be->alloc(r, maxSend * es);
      b.recv = b.send ? be->alloc(r, maxRecv * es) : NULL;
      allocFail = !b.send || !b.recv;
    }
    if (!allocFail && !be->hostVisible) {
      b.hostIn = malloc(oneElems * es + 64);
      b.hostOut = malloc(oneElems * es + 64);
      if (!b.hostIn || !b.hostOut) {
        snprintf(r->err, sizeof r->err, "host staging of %llu bytes: out of memory",
                 (unsigned long long)(oneElems * es));
        allocFail = 1;
      }
    }
  }
  if (allocFail) {
    char what[96];
    snprintf(what, sizeof what, "allocating %llu + %llu bytes", (unsigned long long)(maxSend * es),
             (unsigned long long)(maxRecv * es));
    return failRank(x, what, coll, 0);
  }
  if (printer) benchPrintTableHead(stdout, o, coll, nTargets > 1 ? be->baselineName : NULL);

  size_t counts[BENCH_MAX_RANKS];
  int rc = 0;
  for (int s = 0; s < o->nSizes && !rc; s++) {
    uint64_t bytes = o->sizes[s], count, sendElems, recvElems;
    if (!rankShape(x, coll, bytes, &count, &sendElems, &recvElems)) {
      if (printer) {
        char why[96];
        if (coll != relayCollectiveReduceScatter && coll != relayCollectiveAllToAll &&
            coll != relayCollectiveAllToAllV)
          snprintf(why, sizeof why, "not a multiple of the element size %zu", x->esize);
        else
          snprintf(why, sizeof why, "not a multiple of A x element size = %llu",
                   (unsigned long long)(x->esize * (uint64_t)o->nActive));
        benchPrintSkip(stdout, coll, bytes, why);
      }
      continue;
    }
    for (int g = 0; g < o->nGroups; g++) counts[g] = (size_t)count;
    benchCall c = {coll, o->dtype, o->op,   &x->layout, counts, x->group, x->me,
                   NULL, NULL,     o->root, NULL,       NULL,   NULL,     NULL};
    if (relayCollKind(coll) == relayKindRootedPosition) c.root = o->rootIndex;
    if (coll == relayCollectiveAllToAllV && x->me >= 0) {
      /* This active's row of the pattern; blocks packed in peer order (displacements: prefix sums). */
      for (int j = 0, A = o->nActive; j < A; j++) {
        x->a2av[j] = benchA2avCount(count, x->me, j);
        x->a2av[2 * A + j] = benchA2avCount(count, j, x->me);
        x->a2av[A + j] = j ? x->a2av[A + j - 1] + x->a2av[j - 1] : 0;
        x->a2av[3 * A + j] = j ? x->a2av[3 * A + j - 1] + x->a2av[2 * A + j - 1] : 0;
      }
      c.sendcounts = x->a2av;
      c.sdispls = x->a2av + o->nActive;
      c.recvcounts = x->a2av + 2 * o->nActive;
      c.rdispls = x->a2av + 3 * o->nActive;
    }
    if (rooted) {
      /* The set as one group, a count per member; each role its buffers. */
      for (int i = 0; i < x->nSet; i++) x->setCounts[i] = (size_t)count;
      c.layout = &x->set;
      c.counts = x->setCounts;
      c.group = involved ? 0 : -1;
      c.activeIndex = x->member;
      int scatter = relayCollSendsBlocks(coll);
      if (oneBuf) {
        /* In place: the member's block inside the root's buffer. */
        char* one = b.one;
        char* mine = one + (uint64_t)x->member * count * es;
        c.send = scatter ? (void*)one : (void*)mine;
        c.recv = scatter ? (void*)mine : (void*)one;
      } else if (involved) {
        c.send = sendElems ? b.send : NULL;
        c.recv = recvElems ? b.recv : NULL;
        /* Count 0: the member still passes its buffer (relaycc.h allows
         * NULL then; a real pointer tests the common case). */
        if (!c.send && (scatter ? x->isRoot : x->member >= 0)) c.send = b.send;
        if (!c.recv && (scatter ? x->member >= 0 : x->isRoot)) c.recv = b.recv;
      }
    } else if (x->me >= 0) {
      if (!o->inplace) {
        c.send = b.send;
        c.recv = b.recv;
      } else {
        char* one = b.one;
        c.send = one;
        c.recv = one;
        if (coll == relayCollectiveAllGather) c.send = one + (uint64_t)x->me * count * es;
        if (coll == relayCollectiveReduceScatter) c.recv = one + (uint64_t)x->me * count * es;
      }
    }
    benchRecord rec;
    memset(&rec, 0, sizeof rec);
    benchStats st[BENCH_NUM_TARGETS];
    memset(st, 0, sizeof st);
    int prepared = 0, firstRow = !x->warmedOnce; /* every target of the run's first row warms up long */
    x->warmedOnce = 1;
    for (int t = 0; t < nTargets && !rc; t++, prepared++) {
      if (be->prepare && be->prepare(r, &c, (benchTarget)t)) {
        rc = failRank(x, "prepare", coll, bytes);
        break;
      }
      if (o->check) {
        long long w = rooted ? checkOnceRooted(x, &c, (benchTarget)t, &b, count)
                             : checkOnce(x, &c, (benchTarget)t, &b, count, sendElems, recvElems);
        if (w < 0) {
          rc = failRank(x, "check run", coll, bytes);
          break;
        }
        rec.wrong[t] = w;
      }
      if (!x->checkedOnce && r->rank == o->killRank) {
        /* Test hook: die the way a crashed rank does, mid-run, while the
         * others are about to wait for it in the timed loop. */
        fprintf(stderr, "relaycc-bench: rank %d: --debug-kill: dying now\n", r->rank);
        fflush(stderr);
        raise(SIGKILL);
      }
      x->checkedOnce = 1;
      if (warmUp(x, &c, (benchTarget)t, firstRow))
        rc = failRank(x, t == BENCH_TARGET_RELAY ? "warm-up" : "baseline warm-up", coll, bytes);
    }
    if (!rc && timeTargets(x, &c, nTargets)) rc = failRank(x, "timed run", coll, bytes);
    for (int t = 0; t < nTargets && !rc; t++)
      if (targetStats(x, (benchTarget)t, &st[t])) rc = failRank(x, "agreement of the times", coll, bytes);
    if (!rc) be->lastRoute(r, &rec.route, &rec.depth);
    /* Point-to-point and all-to-all-v have no plan: always direct (relaycc.h); lastRoute is the last
     * planned call's. */
    if (!relayCollPlanned(coll)) rec.route = relayRouteDirect, rec.depth = 0;
    if (be->unprepare)
      for (int t = 0; t < prepared; t++) be->unprepare(r, &c, (benchTarget)t);
    if (rc) break;
    benchRecord* all = malloc(sizeof(benchRecord) * (size_t)r->nranks);
    if (!all) {
      snprintf(r->err, sizeof r->err, "out of memory");
      rc = failRank(x, "agreement", coll, bytes);
      break;
    }
    if (be->agree(r, &rec, all, sizeof rec)) {
      free(all);
      rc = failRank(x, "agreement", coll, bytes);
      break;
    }
    if (printer) {
      benchRow row;
      memset(&row, 0, sizeof row);
      row.coll = coll;
      row.inplace = o->inplace;
      /* All-to-all-v: the receive total of the busiest active (benchAlgBytes), not the swept size. */
      row.bytes = coll == relayCollectiveAllToAllV ? (uint64_t)benchAlgBytes(coll, bytes, o->nActive) : bytes;
      row.count = count;
      row.route = all[o->layout[0]].route; /* what the first active rank ran */
      row.depth = all[o->layout[0]].depth;
      row.tMin = st[0].tMin;
      row.tMed = st[0].tMed;
      row.spread = st[0].spread;
      /* nccl-tests' n: the active ranks, or for scatter and gather the set. */
      int nBw = rooted ? x->nSet : o->nActive;
      row.algbw = row.tMin > 0 ? benchAlgBytes(coll, bytes, nBw) / row.tMin / 1e3 : 0;
      row.busbw = row.algbw * benchBusFactor(coll, nBw);
      row.wrong = o->check ? 0 : -1;
      row.baseWrong = o->check ? 0 : -1;
      for (int q = 0; q < r->nranks && o->check; q++) {
        row.wrong += all[q].wrong[0];
        row.baseWrong += all[q].wrong[1];
      }
      if (nTargets > 1) {
        row.hasBase = 1;
        row.baseMin = st[1].tMin;
        row.baseMed = st[1].tMed;
        row.baseSpread = st[1].spread;
        row.speedup = row.tMin > 0 ? row.baseMin / row.tMin : 0;
      }
      benchPrintRow(stdout, o, &row);
      if (x->res->nRows < BENCH_MAX_ROWS) x->res->rows[x->res->nRows++] = row;
      if (row.wrong > 0) x->res->totalWrong += row.wrong;
      if (row.hasBase && row.baseWrong > 0) x->res->totalWrong += row.baseWrong;
    }
    free(all);
  }
  if (involved) {
    if (oneBuf) {
      be->release(r, b.one);
    } else {
      be->release(r, b.send);
      be->release(r, b.recv);
    }
    free(b.hostIn);
    free(b.hostOut);
  }
  return rc;
}

int benchRankMain(int rank, int nranks, void* argp) {
  benchRunArg* a = argp;
  rankCtx x;
  memset(&x, 0, sizeof x);
  x.be = a->backend;
  x.o = a->opts;
  x.res = a->results;
  x.r.rank = rank;
  x.r.nranks = nranks;
  x.r.job = a->job;
  x.r.opts = a->opts;
  x.layout.nGroups = x.o->nGroups;
  x.layout.nActive = x.o->nActive;
  x.layout.ranks = x.o->layout;
  x.group = x.me = -1;
  for (int i = 0; i < x.o->nGroups * x.o->nActive; i++)
    if (x.o->layout[i] == rank) x.group = i / x.o->nActive, x.me = i % x.o->nActive;
  /* Scatter and gather: every layout rank is in the set, in layout order. */
  x.nSet = x.o->nGroups * x.o->nActive;
  x.set.nGroups = 1;
  x.set.nActive = x.nSet;
  x.set.ranks = x.o->layout;
  x.member = x.me >= 0 ? x.group * x.o->nActive + x.me : -1;
  x.isRoot = rank == x.o->root;
  x.esize = relayTypeSize(x.o->dtype);
  if (x.esize == 0) {
    fprintf(stderr, "relaycc-bench: rank %d: datatype %d has no size\n", rank, (int)x.o->dtype);
    return 3;
  }
  int total = x.o->iters * x.o->reps;
  x.times = calloc((size_t)total * BENCH_NUM_TARGETS, sizeof(double));
  x.maxTimes = calloc((size_t)total, sizeof(double));
  x.all = calloc((size_t)nranks * TIMES_PER_AGREE, sizeof(double));
  x.setCounts = calloc((size_t)x.nSet, sizeof(size_t));
  x.a2av = calloc(4 * (size_t)x.o->nActive, sizeof(size_t));
  if (!x.times || !x.maxTimes || !x.all || !x.setCounts || !x.a2av) {
    fprintf(stderr, "relaycc-bench: rank %d: out of memory for %d timings\n", rank, total);
    return 3;
  }
  if (x.o->nodes) {
    char id[16];
    snprintf(id, sizeof id, "%d", rank / (nranks / x.o->nodes));
    setenv("RELAYCC_NODE_ID", id, 1);
  }
  if (x.be->init(&x.r)) {
    fprintf(stderr, "relaycc-bench: rank %d: init of backend %s: %s\n", rank, x.be->name, x.r.err);
    return 4;
  }
  if (rank == 0) {
    x.be->describe(&x.r, x.res->device, sizeof x.res->device);
    snprintf(x.res->backend, sizeof x.res->backend, "%s", x.be->name);
    snprintf(x.res->baseline, sizeof x.res->baseline, "%s", x.be->baselineName ? x.be->baselineName : "");
    benchPrintHeader(stdout, x.o, x.res);
  }
  int rc = 0;
  for (int i = 0; i < x.o->nColls && !rc; i++) rc = runColl(&x, x.o->colls[i]);
  if (!rc && x.be->barrier(&x.r)) {
    fprintf(stderr, "relaycc-bench: rank %d: final barrier: %s\n", rank, x.r.err);
    rc = 1;
  }
  if (!rc && rank == 0) x.res->finished = 1;
  x.be->fini(&x.r);
  free(x.times);
  free(x.maxTimes);
  free(x.all);
  free(x.setCounts);
  free(x.a2av);
  return rc ? 5 : 0;
}
