/*
 * The public API: validate a call, agree on it (check mode), pick a route,
 * look up or build the plan, run it.
 *
 * Failure handling (invariants 4-6):
 *  - Argument errors are found before any data moves and write nothing.
 *  - With check mode on, every call starts with one small agreement round in
 *    which ranks exchange a digest of their call and their local verdict, so
 *    a rank's bad argument or a signature mismatch makes EVERY rank return the
 *    same error and the comm stays usable.
 *  - With it off, a rank that rejects a call tells the others (transport
 *    reject()), so peers waiting on it fail at once instead of at the
 *    deadline; anything that goes wrong after data may have moved leaves the
 *    comm failed (sticky), as NCCL's asynchronous errors do.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "common.h"
#include "core/comm.h"
#include "core/plancache.h"
#include "exec/exec.h"
#include "route/depth.h"
#include "route/route.h"
#include "topo/topo.h"
#include "transport/shm.h"

static const char* kCallNames[RELAY_NUM_COLLS_ALL] = {"relayAllGather", "relayReduceScatter", "relayAllReduce",
                                                      "relayAllToAll",  "relayScatter",       "relayGather"};

/* ---- init / destroy ---------------------------------------------------- */

relayResult_t relayCommInitShm(relayComm_t* out, int nranks, int rank, const char* jobName,
                               const relayConfig_t* config) {
  if (!out) return relaySetError(NULL, relayInvalidArgument, "relayCommInitShm: comm (argument 1) is NULL");
  *out = NULL;
  if (nranks <= 0) nranks = (int)relayEnvLong("RELAYCC_NRANKS", relayEnvLong("WORLD_SIZE", -1));
  if (rank < 0) rank = (int)relayEnvLong("RELAYCC_RANK", relayEnvLong("RANK", -1));
  if (!jobName) jobName = relayEnvStr("RELAYCC_JOB", "relaycc");
  if (nranks < 1)
    return relaySetError(NULL, relayInvalidArgument,
                         "relayCommInitShm: nranks = %d (and RELAYCC_NRANKS / WORLD_SIZE unset) must be >= 1",
                         nranks);
  if (rank < 0 || rank >= nranks)
    return relaySetError(NULL, relayInvalidArgument,
                         "relayCommInitShm: rank = %d (argument 3, or RELAYCC_RANK / RANK) is not in [0, %d)",
                         rank, nranks);
  struct relayComm* c;
  RELAY_CHECK(relayCommAlloc(nranks, rank, config, &c));
  relayResult_t res = relayShmAttach(c, jobName);
  /* Every rank must route with the same model: vote it (as the NCCL init does). */
  if (res == relaySuccess) res = relayCommAgreeTopo(c, relayCommLoadTopo(c, "cpu"));
  if (res != relaySuccess) {
    relaySetError(NULL, res, "%s", c->lastError);
    if (c->tp) c->tp->destroy(c);
    relayTopoFree(c->topo);
    relayCommFree(c);
    return res;
  }
  *out = c;
  return relaySuccess;
}

relayResult_t relayCommLoadTopo(struct relayComm* c, const char* fallback) {
  const char* want = c->cfg.topo[0] ? c->cfg.topo : fallback;
  if (!want || !*want) return relaySuccess;
  if (relayTopoLoad(want, &c->topo) != relaySuccess)
    return relaySetError(c, relayInvalidArgument, "rank %d: RELAYCC_TOPO / config.topo = \"%s\": %s", c->rank,
                         want, relayGetLastError(NULL));
  return relaySuccess;
}

relayResult_t relayCommAgreeTopo(struct relayComm* c, relayResult_t local) {
  struct {
    int32_t status, pad;
    uint64_t hash;
  } mine = {(int32_t)local, 0, local == relaySuccess && c->topo ? relayTopoHash(c->topo) : 0}, *all;
  all = calloc((size_t)c->nranks, sizeof *all);
  if (!all) return relaySetError(c, relaySystemError, "rank %d: out of memory agreeing the topology", c->rank);
  char saved[sizeof c->lastError];
  memcpy(saved, c->lastError, sizeof saved);
  relayResult_t res = c->tp->agree(c, &mine, all, sizeof mine);
  for (int q = 0; q < c->nranks && res == relaySuccess; q++) {
    if (all[q].status == relaySuccess) continue;
    if (q == c->rank) {
      memcpy(c->lastError, saved, sizeof saved); /* its own message names the cause */
      res = local;
    } else {
      res = relaySetError(c, relayRemoteError, "init (rank %d): rank %d could not load its topology (%s)", c->rank, q,
                          relayGetErrorString((relayResult_t)all[q].status));
    }
  }
  int differ = 0;
  for (int q = 0; q < c->nranks && res == relaySuccess; q++) differ |= all[q].hash != mine.hash;
  if (differ) {
    if (relayEnvLong("RELAYCC_DEBUG", 0))
      fprintf(stderr, "relaycc: rank %d: the ranks hold different topologies (RELAYCC_TOPO or detection differ); "
                      "routing without a model\n", c->rank);
    relayTopoFree(c->topo);
    c->topo = NULL;
  }
  if (res == relaySuccess && relayEnvLong("RELAYCC_DEBUG", 0))
    fprintf(stderr, "relaycc: rank %d: route model: %s\n", c->rank, c->topo ? c->topo->name : "none");
  free(all);
  return res;
}

relayResult_t relayCommDestroy(relayComm_t comm) {
  if (!comm) return relaySetError(NULL, relayInvalidArgument, "relayCommDestroy: comm is NULL");
  if (comm->tp) comm->tp->destroy(comm);
  relayTopoFree(comm->topo);
  relayCommFree(comm);
  return relaySuccess;
}

relayResult_t relayCommAbort(relayComm_t comm) {
  if (!comm) return relaySetError(NULL, relayInvalidArgument, "relayCommAbort: comm is NULL");
  atomic_store(&comm->aborted, 1);
  if (comm->tp) comm->tp->abort(comm);
  /* A call in flight on another thread sees the flag within one wait slice;
   * wait for it to leave before freeing what it uses (bounded: 10 s). */
  for (int i = 0; i < 10000 && atomic_load(&comm->inCall); i++) {
    struct timespec ts = {0, 1000000};
    nanosleep(&ts, NULL);
  }
  if (atomic_load(&comm->inCall)) return relaySetError(comm, relayInternalError, "relayCommAbort: a call did not leave within 10 s");
  return relayCommDestroy(comm);
}

relayResult_t relayCommCount(const relayComm_t comm, int* count) {
  if (!comm || !count) return relaySetError(NULL, relayInvalidArgument, "relayCommCount: %s is NULL", comm ? "count" : "comm");
  *count = comm->nranks;
  return relaySuccess;
}

relayResult_t relayCommUserRank(const relayComm_t comm, int* rank) {
  if (!comm || !rank) return relaySetError(NULL, relayInvalidArgument, "relayCommUserRank: %s is NULL", comm ? "rank" : "comm");
  *rank = comm->rank;
  return relaySuccess;
}

/* ---- validation -------------------------------------------------------- */

typedef struct {
  relayColl_t coll;
  const void* send;
  void* recv;
  const size_t* counts;
  relayDataType_t dtype;
  relayRedOp_t op;
  const relayLayout_t* layout; /* rooted collectives: one group, the rank set */
  int root;                    /* rooted collectives only */
} callArgs;

static relayResult_t validateRooted(struct relayComm* c, const callArgs* a, int* myGroup, int* myIndex);

/* what[0..n) are comm ranks, pairwise distinct; *mine = the index of this
 * rank in them, or -1. O(n): comm->rankSeen remembers, per rank, where this
 * check saw it (entries of older checks carry an older stamp). `dupHint`
 * ends the duplicate's message. */
static relayResult_t checkRanks(struct relayComm* c, const char* fn, const char* what, const int* ranks, int n,
                                const char* dupHint, int* mine) {
  *mine = -1;
  if (++c->rankCheck == 0) { /* the stamp wrapped: forget every older check */
    memset(c->rankSeen, 0, (size_t)c->nranks * sizeof *c->rankSeen);
    c->rankCheck = 1;
  }
  const uint64_t stamp = (uint64_t)c->rankCheck << 32;
  for (int i = 0; i < n; i++) {
    int q = ranks[i];
    if (q < 0 || q >= c->nranks)
      return relaySetError(c, relayInvalidArgument, "%s (rank %d): %s[%d] = %d is not in [0, %d)", fn, c->rank, what,
                           i, q, c->nranks);
    uint64_t seen = c->rankSeen[q];
    if ((seen & ~0xffffffffull) == stamp)
      return relaySetError(c, relayInvalidArgument, "%s (rank %d): %s[%d] and [%d] both name rank %d%s", fn, c->rank,
                           what, (int)(uint32_t)seen - 1, i, q, dupHint);
    c->rankSeen[q] = stamp | (uint64_t)(i + 1);
    if (q == c->rank) *mine = i;
  }
  return relaySuccess;
}

static relayResult_t validate(struct relayComm* c, const callArgs* a, int* myGroup, int* myIndex) {
  if (relayCollRooted(a->coll)) return validateRooted(c, a, myGroup, myIndex);
  const char* fn = kCallNames[a->coll];
  int r = c->rank;
  *myGroup = -1;
  *myIndex = -1;
  if (relayTypeSize(a->dtype) == 0)
    return relaySetError(c, relayInvalidArgument, "%s (rank %d): datatype %d is not a relayDataType_t", fn, r,
                         (int)a->dtype);
  if (relayCollReduces(a->coll) &&
      (unsigned)a->op >= relayNumOps)
    return relaySetError(c, relayInvalidArgument, "%s (rank %d): op %d is not a relayRedOp_t", fn, r, (int)a->op);
  const relayLayout_t* L = a->layout;
  if (!L) return relaySetError(c, relayInvalidArgument, "%s (rank %d): layout is NULL", fn, r);
  if (L->nGroups < 1)
    return relaySetError(c, relayInvalidArgument, "%s (rank %d): layout.nGroups = %d must be >= 1", fn, r, L->nGroups);
  if (L->nActive < 2 || L->nActive > PLAN_MAX_SRCS)
    return relaySetError(c, relayInvalidArgument, "%s (rank %d): layout.nActive = %d must be in [2, %d]", fn, r,
                         L->nActive, PLAN_MAX_SRCS);
  if ((long long)L->nGroups * L->nActive > c->nranks)
    return relaySetError(c, relayInvalidArgument,
                         "%s (rank %d): layout has %d groups x %d active = %lld ranks, the comm has %d", fn, r,
                         L->nGroups, L->nActive, (long long)L->nGroups * L->nActive, c->nranks);
  if (!L->ranks) return relaySetError(c, relayInvalidArgument, "%s (rank %d): layout.ranks is NULL", fn, r);
  int mine;
  RELAY_CHECK(checkRanks(c, fn, "layout.ranks", L->ranks, L->nGroups * L->nActive,
                         " (a rank is active in at most one group)", &mine));
  if (mine >= 0) {
    *myGroup = mine / L->nActive;
    *myIndex = mine % L->nActive;
  }
  if (!a->counts) return relaySetError(c, relayInvalidArgument, "%s (rank %d): counts is NULL", fn, r);
  size_t es = relayTypeSize(a->dtype);
  for (int g = 0; g < L->nGroups; g++) {
    /* The largest buffer of any collective is A*count elements. */
    if (a->counts[g] > SIZE_MAX / es / (size_t)L->nActive)
      return relaySetError(c, relayInvalidArgument,
                           "%s (rank %d): counts[%d] = %zu overflows: %d x count x %zu bytes exceeds size_t", fn, r,
                           g, a->counts[g], L->nActive, es);
  }
  if (*myGroup >= 0 && a->counts[*myGroup] > 0) {
    if (!a->send)
      return relaySetError(c, relayInvalidArgument, "%s (rank %d): sendbuff is NULL (active rank, group %d, count %zu)",
                           fn, r, *myGroup, a->counts[*myGroup]);
    if (!a->recv)
      return relaySetError(c, relayInvalidArgument, "%s (rank %d): recvbuff is NULL (active rank, group %d, count %zu)",
                           fn, r, *myGroup, a->counts[*myGroup]);
    if (a->coll == RELAY_COLL_ALLTOALL && a->send == a->recv)
      return relaySetError(c, relayInvalidArgument,
                           "%s (rank %d): in-place all-to-all (sendbuff == recvbuff) is not supported", fn, r);
  }
  return relaySuccess;
}

/* ---- check mode -------------------------------------------------------- */

typedef struct {
  int32_t status; /* this rank's local verdict */
  int32_t coll, dtype, op, nGroups, nActive, route, depth, root;
  uint64_t ranksHash, countsHash;
} callDigest;

static relayResult_t agreeOnCall(struct relayComm* c, const callArgs* a, relayResult_t local, int route,
                                 int depth) {
  const char* fn = kCallNames[a->coll];
  callDigest mine;
  memset(&mine, 0, sizeof mine);
  mine.status = (int32_t)local;
  if (local == relaySuccess) {
    mine.coll = (int32_t)a->coll;
    mine.dtype = (int32_t)a->dtype;
    mine.op = relayCollReduces(a->coll) ? (int32_t)a->op : 0;
    mine.nGroups = a->layout->nGroups;
    mine.nActive = a->layout->nActive;
    mine.route = route;
    mine.depth = depth;
    mine.root = relayCollRooted(a->coll) ? a->root : 0;
    mine.ranksHash = relayHash64(RELAY_HASH_SEED, a->layout->ranks, (size_t)mine.nGroups * (size_t)mine.nActive * sizeof(int));
    mine.countsHash =
        relayHash64(RELAY_HASH_SEED, a->counts, (size_t)(relayCollRooted(a->coll) ? mine.nActive : mine.nGroups) * sizeof(size_t));
  }
  callDigest* all = malloc((size_t)c->nranks * sizeof *all);
  if (!all) return relaySetError(c, relaySystemError, "%s (rank %d): out of memory in check mode", fn, c->rank);
  char saved[sizeof c->lastError];
  memcpy(saved, c->lastError, sizeof saved);
  relayResult_t res = c->tp->agree(c, &mine, all, sizeof mine);
  if (res != relaySuccess) {
    free(all);
    c->failed = 1;
    return res;
  }
  /* Own rejection first: its message names the argument. */
  if (local != relaySuccess) {
    memcpy(c->lastError, saved, sizeof saved);
    res = local;
  }
  for (int q = 0; q < c->nranks && res == relaySuccess; q++) {
    if (all[q].status != relaySuccess) {
      res = relaySetError(c, (relayResult_t)all[q].status, "%s (rank %d): rank %d rejected the call (%s)", fn,
                          c->rank, q, relayGetErrorString((relayResult_t)all[q].status));
    }
  }
  for (int q = 1; q < c->nranks && res == relaySuccess; q++) {
    const callDigest* x = &all[0];
    const callDigest* y = &all[q];
    const char* what = x->coll != y->coll                   ? "collective"
                       : x->dtype != y->dtype               ? "datatype"
                       : x->op != y->op                     ? "op"
                       : x->nGroups != y->nGroups           ? "layout.nGroups"
                       : x->nActive != y->nActive           ? "layout.nActive"
                       : x->root != y->root                 ? "root"
                       : x->ranksHash != y->ranksHash       ? "layout.ranks"
                       : x->countsHash != y->countsHash     ? "counts"
                       : x->route != y->route               ? "route (RELAYCC_ROUTE)"
                       : x->depth != y->depth               ? "depth (RELAYCC_DEPTH)"
                                                            : NULL;
    if (what)
      res = relaySetError(c, relayInvalidUsage, "%s (rank %d): ranks 0 and %d disagree on the %s of call #%llu", fn,
                          c->rank, q, what, (unsigned long long)c->callSeq + 1);
  }
  free(all);
  return res;
}

/* ---- the call ---------------------------------------------------------- */

/* The native route on a transport with native collectives (NCCL): NCCL's own
 * fused collective on each group's sub-communicator, one launch where a
 * send/recv plan needs a group plus a reduce (measured 0.67-0.86x of NCCL on
 * 2 x H200 for all-reduce and reduce-scatter). Taken when the route is
 * native: chosen by the router (auto), which prices it against the send/recv
 * routes, or forced (RELAYCC_ROUTE=native); a forced RELAYCC_ROUTE=direct
 * keeps the send/recv plan. Every rank reaches the collective prepare (the
 * decision depends only on the key, the config, the topology the ranks
 * agreed at init and the transport, alike on all ranks). Returns 1 when the
 * call was handled (*res says how). */
static int tryNative(struct relayComm* c, const callArgs* a, int myGroup, int route, relayStream_t stream,
                     relayResult_t* res) {
  if (relayCollRooted(a->coll) || !c->tp->nativePrepare || !c->tp->native) return 0;
  if (route != relayRouteNative) return 0;
  void* h = NULL;
  relayResult_t pr = c->tp->nativePrepare(c, a->layout->nGroups, a->layout->nActive, a->layout->ranks, stream, &h);
  if (pr == relayNotSupported) return 0; /* every rank alike: the send/recv plan */
  if (pr != relaySuccess) {
    c->failed = 1;
    *res = pr;
    return 1;
  }
  c->lastRoute = relayRouteNative;
  c->lastDepth = 1;
  size_t count = myGroup >= 0 ? a->counts[myGroup] : 0;
  *res = c->tp->native(c, h, (int)a->coll, a->send, a->recv, count, a->dtype, a->op, stream);
  if (*res != relaySuccess) c->failed = 1;
  return 1;
}

static relayResult_t runCall(struct relayComm* c, const callArgs* a, relayStream_t stream) {
  const char* fn = kCallNames[a->coll];
  if (c->failed)
    return relaySetError(c, relayInvalidUsage, "%s (rank %d): the comm failed in an earlier call; destroy it (%s)",
                         fn, c->rank, c->lastError);
  int myGroup, myIndex;
  relayResult_t local = validate(c, a, &myGroup, &myIndex);

  planKey key;
  memset(&key, 0, sizeof key);
  int route = c->cfg.route, depth = c->cfg.depth > 0 ? c->cfg.depth : 1;
  if (local == relaySuccess) {
    key.coll = a->coll;
    key.nranks = c->nranks;
    key.nGroups = a->layout->nGroups;
    key.nActive = a->layout->nActive;
    key.ranks = a->layout->ranks;
    key.counts = a->counts;
    key.dtype = a->dtype;
    key.op = relayCollReduces(a->coll) ? a->op : relaySum;
    key.root = relayCollRooted(a->coll) ? a->root : 0;
    if (relayCollRooted(a->coll)) {
      /* The only schedule a rooted call has (plan_scatter.c), forced route
       * or not: asking another builder would fail on every call. */
      route = relayRouteDirect;
    } else if (route == relayRouteRelay && c->cfg.depth == 0) {
      /* A forced relay still takes the depth model's depth. */
      depth = relayDepthChoose(&key, c->topo);
    } else if (route == relayRouteAuto) {
      int caps = (c->tp->native && c->tp->nativePrepare ? RELAY_ROUTE_CAP_NATIVE : 0) |
                 (c->tp->oneshotPrepare && c->tp->oneshot ? RELAY_ROUTE_CAP_ONESHOT : 0) |
                 (c->tp->bwPrepare && c->tp->bw ? RELAY_ROUTE_CAP_BW : 0);
      /* Ask the stream whether it is capturing only when the answer matters:
       * most keys route alike per call and in a graph, and one cached lookup
       * of both answers costs less than the CUDA query. */
      int routes[2], depths[2];
      relayRouteChoosePair(&key, c->topo, caps, routes, depths);
      int g = (routes[1] != routes[0] || depths[1] != depths[0]) && c->tp->isCapturing && c->tp->isCapturing(c, stream);
      route = routes[g];
      if (c->cfg.depth == 0) depth = depths[g];
    }
  }
  if (c->cfg.checkMode) {
    relayResult_t agreed = agreeOnCall(c, a, local, route, depth);
    if (agreed != relaySuccess) return agreed;
  } else if (local != relaySuccess) {
    if (c->tp->reject) c->tp->reject(c);
    return local;
  }

  c->callSeq++;
  c->curCallName = fn;
  /* Nothing to move anywhere: every group's count is zero. */
  int any = 0;
  for (int g = 0; g < planKeyNumCounts(&key); g++) any |= key.counts[g] != 0;
  if (!any) {
    c->lastRoute = route;
    c->lastDepth = depth;
    return relaySuccess;
  }

  key.route = route;
  key.depth = depth;
  relayResult_t nres;
  if (tryNative(c, a, myGroup, route, stream, &nres)) return nres;
  if (key.route == relayRouteNative) key.route = relayRouteDirect; /* no native collectives here */
  const relayPlan* plan;
  relayPlan* owned;
lookup:
  plan = relayPlanCacheFind(c->plans, &key);
  owned = NULL;
  if (!plan) {
    relayResult_t res = relayPlanBuild(&key, &owned);
    if (res == relayNotSupported && key.route != relayRouteDirect) {
      /* "Not supported" is a normal answer; every rank gets the same one
       * because plans are pure functions of the key. */
      key.route = relayRouteDirect;
      key.depth = 1;
      goto lookup;
    }
    if (res != relaySuccess) {
      c->failed = 1; /* peers may be moving data already */
      return relaySetError(c, res == relayNotSupported ? relayInternalError : res,
                           "%s (rank %d): building the %s plan failed (%s)", fn, c->rank, relayRouteName(key.route),
                           relayGetErrorString(res));
    }
    if (owned) {
      char err[512];
      if (relayPlanCheck(owned, err, sizeof err) != 0) {
        relayPlanFree(owned);
        c->failed = 1;
        return relaySetError(c, relayInternalError, "%s (rank %d): the %s plan fails its check: %s", fn, c->rank,
                             relayRouteName(key.route), err);
      }
      if (relayPlanCacheAdd(c->plans, &key, owned) == 0) {
        plan = owned;
        owned = NULL;
      } else {
        plan = owned;
      }
    }
  }
  if (plan->route == relayRouteOneShot || plan->route == relayRouteBw) {
    /* Every rank runs this plan (a pure function of the key), helpers too,
     * so every rank reaches the collective prepare here, before any branch
     * on role. A decline is voted (or, under capture, derived from state all
     * ranks share), so all ranks take the direct plan together. */
    relayResult_t pr = plan->route == relayRouteBw
                           ? (c->tp->bwPrepare ? c->tp->bwPrepare(c, relayBwTileBytes(), relayBwRing(), stream)
                                               : relayNotSupported)
                       : c->tp->oneshotPrepare ? c->tp->oneshotPrepare(c, relayOneShotMaxBytes(), stream)
                                               : relayNotSupported;
    if (pr == relayNotSupported) {
      relayPlanFree(owned);
      /* The router's incumbent when it chose (auto) on a transport with
       * native collectives; else the send/recv direct plan. */
      if (c->cfg.route == relayRouteAuto && tryNative(c, a, myGroup, relayRouteNative, stream, &nres)) return nres;
      key.route = relayRouteDirect;
      key.depth = 1;
      goto lookup;
    }
    if (pr != relaySuccess) {
      relayPlanFree(owned);
      c->failed = 1;
      return pr;
    }
  }
  c->lastRoute = plan->route;
  c->lastDepth = plan->depth;
  relayResult_t res = relayExecRun(c, plan, a->send, a->recv, stream);
  relayPlanFree(owned);
  if (res != relaySuccess) c->failed = 1;
  return res;
}

static relayResult_t call(const callArgs* a, relayComm_t comm, relayStream_t stream) {
  if (!comm) return relaySetError(NULL, relayInvalidArgument, "%s: comm is NULL", kCallNames[a->coll]);
  atomic_store(&comm->inCall, 1);
  relayResult_t res = atomic_load(&comm->aborted)
                          ? relaySetError(comm, relayInvalidUsage, "%s (rank %d): the comm was aborted",
                                          kCallNames[a->coll], comm->rank)
                          : runCall(comm, a, stream);
  atomic_store(&comm->inCall, 0);
  return res;
}

relayResult_t relayAllGather(const void* sendbuff, void* recvbuff, const size_t* sendcounts,
                             relayDataType_t datatype, const relayLayout_t* layout, relayComm_t comm,
                             relayStream_t stream) {
  callArgs a = {RELAY_COLL_ALLGATHER, sendbuff, recvbuff, sendcounts, datatype, relaySum, layout, 0};
  return call(&a, comm, stream);
}

relayResult_t relayReduceScatter(const void* sendbuff, void* recvbuff, const size_t* recvcounts,
                                 relayDataType_t datatype, relayRedOp_t op, const relayLayout_t* layout,
                                 relayComm_t comm, relayStream_t stream) {
  callArgs a = {RELAY_COLL_REDUCESCATTER, sendbuff, recvbuff, recvcounts, datatype, op, layout, 0};
  return call(&a, comm, stream);
}

relayResult_t relayAllReduce(const void* sendbuff, void* recvbuff, const size_t* counts, relayDataType_t datatype,
                             relayRedOp_t op, const relayLayout_t* layout, relayComm_t comm, relayStream_t stream) {
  callArgs a = {RELAY_COLL_ALLREDUCE, sendbuff, recvbuff, counts, datatype, op, layout, 0};
  return call(&a, comm, stream);
}

relayResult_t relayAllToAll(const void* sendbuff, void* recvbuff, const size_t* segcounts,
                            relayDataType_t datatype, const relayLayout_t* layout, relayComm_t comm,
                            relayStream_t stream) {
  callArgs a = {RELAY_COLL_ALLTOALL, sendbuff, recvbuff, segcounts, datatype, relaySum, layout, 0};
  return call(&a, comm, stream);
}

/* ---- rooted collectives: scatter, gather -------------------------------- */

/* The rank set is ranks[0..nRanks), any size >= 1, root in it or not;
 * counts[i] is ranks[i]'s block; the root's buffer holds the blocks back to
 * back in set order. A rank names only the buffers its role uses. */
static relayResult_t validateRooted(struct relayComm* c, const callArgs* a, int* myGroup, int* myIndex) {
  const char* fn = kCallNames[a->coll];
  int r = c->rank, scatter = a->coll == RELAY_COLL_SCATTER;
  const relayLayout_t* L = a->layout;
  *myGroup = -1;
  *myIndex = -1;
  if (relayTypeSize(a->dtype) == 0)
    return relaySetError(c, relayInvalidArgument, "%s (rank %d): datatype %d is not a relayDataType_t", fn, r,
                         (int)a->dtype);
  if (a->root < 0 || a->root >= c->nranks)
    return relaySetError(c, relayInvalidArgument, "%s (rank %d): root = %d is not in [0, %d)", fn, r, a->root,
                         c->nranks);
  if (L->nActive < 1 || L->nActive > c->nranks)
    return relaySetError(c, relayInvalidArgument, "%s (rank %d): nRanks = %d must be in [1, %d]", fn, r, L->nActive,
                         c->nranks);
  if (!L->ranks) return relaySetError(c, relayInvalidArgument, "%s (rank %d): ranks is NULL", fn, r);
  RELAY_CHECK(checkRanks(c, fn, "ranks", L->ranks, L->nActive, "", myIndex));
  if (!a->counts) return relaySetError(c, relayInvalidArgument, "%s (rank %d): counts is NULL", fn, r);
  size_t es = relayTypeSize(a->dtype), total = 0;
  for (int i = 0; i < L->nActive; i++) {
    /* The root's buffer holds every block: its bytes must fit a size_t. */
    if (a->counts[i] > SIZE_MAX / es - total)
      return relaySetError(c, relayInvalidArgument,
                           "%s (rank %d): counts[%d] = %zu overflows: the root's %zu-byte elements exceed size_t", fn,
                           r, i, a->counts[i], es);
    total += a->counts[i];
  }
  const char* rootBuf = scatter ? "sendbuff" : "recvbuff";
  const char* memberBuf = scatter ? "recvbuff" : "sendbuff";
  if (r == a->root && total > 0 && !(scatter ? a->send : (const void*)a->recv))
    return relaySetError(c, relayInvalidArgument, "%s (rank %d): %s is NULL (the root, %zu elements)", fn, r, rootBuf,
                         total);
  if (*myIndex >= 0 && a->counts[*myIndex] > 0 && !(scatter ? (const void*)a->recv : a->send))
    return relaySetError(c, relayInvalidArgument, "%s (rank %d): %s is NULL (ranks[%d], count %zu)", fn, r, memberBuf,
                         *myIndex, a->counts[*myIndex]);
  if (*myIndex >= 0 || r == a->root) *myGroup = 0;
  return relaySuccess;
}

relayResult_t relayScatter(const void* sendbuff, void* recvbuff, const size_t* counts, relayDataType_t datatype,
                           int root, const int* ranks, int nRanks, relayComm_t comm, relayStream_t stream) {
  relayLayout_t set = {1, nRanks, ranks};
  callArgs a = {RELAY_COLL_SCATTER, sendbuff, recvbuff, counts, datatype, relaySum, &set, root};
  return call(&a, comm, stream);
}

relayResult_t relayGather(const void* sendbuff, void* recvbuff, const size_t* counts, relayDataType_t datatype,
                          int root, const int* ranks, int nRanks, relayComm_t comm, relayStream_t stream) {
  relayLayout_t set = {1, nRanks, ranks};
  callArgs a = {RELAY_COLL_GATHER, sendbuff, recvbuff, counts, datatype, relaySum, &set, root};
  return call(&a, comm, stream);
}
