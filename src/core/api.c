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
 *  - With it off, every call still counts on every rank (comm->callSeq), so
 *    nothing of a rejected call is read by a later one. A buffer error (NULL
 *    buffer, in-place all-to-all) in a call whose shape is valid: the rank
 *    runs its part through scratch (runThroughScratch), so nothing is left
 *    over, and returns its error; peers that receive from it learn it where
 *    the transport marks messages (shm). A shape error: the rank tells the
 *    others (transport reject()), so peers waiting on it in this call fail at
 *    once; whatever they sent it carries this call's number, which its next
 *    call refuses (relayInvalidUsage naming both calls). Anything that goes
 *    wrong after data may have moved leaves the comm failed (sticky), as
 *    NCCL's asynchronous errors do.
 */
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "comm/comm.h"
#include "comm/common.h"
#include "comm/vote.h"
#include "core/core.h"
#include "core/nodes.h"
#include "core/plancache.h"
#include "exec/exec.h"
#include "route/route.h"
#include "route/table.h"
#include "topo/topo.h"

/* ---- abort and queries (init and destroy: init.c) ---------------------- */

void relayCommAbortFlags(struct relayComm* comm) {
  atomic_store(&comm->aborted, 1);
  if (comm->tp) comm->tp->abort(comm);
}

relayResult_t relayCommAbort(relayComm_t comm) {
  if (!comm) return relaySetError(NULL, relayInvalidArgument, "relayCommAbort: comm is NULL");
  relayCommAbortFlags(comm);
  /* A call in flight on another thread sees the flag within one wait slice;
   * wait for it to leave before freeing what it uses (bounded: 10 s). */
  for (int i = 0; i < 10000 && atomic_load(&comm->inCall); i++) {
    struct timespec ts = {0, 1000000};
    nanosleep(&ts, NULL);
  }
  /* A call still in flight owns the comm's error state (its name, number,
   * step): the prefix names that call, the body the abort. */
  if (atomic_load(&comm->inCall))
    return relaySetError(comm, relayInternalError, "relayCommAbort: this call did not leave within 10 s");
  comm->curCallName = "relayCommAbort"; /* no call is in flight: what the teardown reports names the abort */
  return relayCommDestroy(comm);
}

relayResult_t relayCommCount(const relayComm_t comm, int* count) {
  if (!comm || !count)
    return relaySetError(NULL, relayInvalidArgument, "relayCommCount: %s is NULL", comm ? "count" : "comm");
  *count = comm->nranks;
  return relaySuccess;
}

relayResult_t relayCommUserRank(const relayComm_t comm, int* rank) {
  if (!comm || !rank)
    return relaySetError(NULL, relayInvalidArgument, "relayCommUserRank: %s is NULL", comm ? "rank" : "comm");
  *rank = comm->rank;
  return relaySuccess;
}

/* ---- validation -------------------------------------------------------- */

typedef struct {
  relayCollective_t coll;
  const void* send;
  void* recv;
  const size_t* counts;
  relayDataType_t dtype;
  relayRedOp_t op;
  const relayLayout_t* layout; /* rooted collectives: one group, the rank set */
  int root;                    /* rooted collectives only */
  const char* reject;          /* relayCallReject: the binding's reason (NULL: a call to make) */
  /* The direct window this rank's buffers lie in (core/window.c; NULL: the staged path) and the offsets
   * peers use: set by runCall, passed down to the executor and the digest. */
  const struct relayWindow* win;
  size_t winSendOff, winRecvOff;
} callArgs;

static relayResult_t validateRooted(struct relayComm* c, const callArgs* a, int* myGroup, int* myIndex,
                                    int* bufErr);

/* what[0..n) are comm ranks, pairwise distinct; *mine = the index of this
 * rank in them, or -1. O(n): comm->rankSeen remembers, per rank, where this
 * check saw it (entries of older checks carry an older stamp). `dupHint`
 * ends the duplicate's message. */
static relayResult_t checkRanks(struct relayComm* c, const char* what, const int* ranks, int n,
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
      return relaySetError(c, relayInvalidArgument, "%s[%d] = %d is not in [0, %d)", what, i, q, c->nranks);
    uint64_t seen = c->rankSeen[q];
    if ((seen & ~0xffffffffull) == stamp)
      return relaySetError(c, relayInvalidArgument, "%s[%d] and [%d] both name rank %d%s", what,
                           (int)(uint32_t)seen - 1, i, q, dupHint);
    c->rankSeen[q] = stamp | (uint64_t)(i + 1);
    if (q == c->rank) *mine = i;
  }
  return relaySuccess;
}

/* A rejected call is one of two kinds (*bufErr says which): a SHAPE error
 * (collective, layout, counts, dtype, op, root: what the plan is built from)
 * leaves this rank without the call's plan; a BUFFER error (a NULL buffer, the
 * forbidden in-place all-to-all) in a call whose shape is valid does not, so
 * the rank can still run its part through scratch (runCall). */
static relayResult_t validate(struct relayComm* c, const callArgs* a, int* myGroup, int* myIndex,
                              int* bufErr) {
  *bufErr = 0;
  if (relayCollRankSet(a->coll)) return validateRooted(c, a, myGroup, myIndex, bufErr);
  *myGroup = -1;
  *myIndex = -1;
  if (relayTypeSize(a->dtype) == 0)
    return relaySetError(c, relayInvalidArgument, "datatype %d is not a relayDataType_t", (int)a->dtype);
  if (relayCollReduces(a->coll) && (unsigned)a->op >= relayNumOps)
    return relaySetError(c, relayInvalidArgument, "op %d is not a relayRedOp_t", (int)a->op);
  const relayLayout_t* L = a->layout;
  if (!L) return relaySetError(c, relayInvalidArgument, "layout is NULL");
  if (L->nGroups < 1)
    return relaySetError(c, relayInvalidArgument, "layout.nGroups = %d must be >= 1", L->nGroups);
  if (L->nActive < 2 || L->nActive > PLAN_MAX_SRCS)
    return relaySetError(c, relayInvalidArgument, "layout.nActive = %d must be in [2, %d]", L->nActive,
                         PLAN_MAX_SRCS);
  if ((long long)L->nGroups * L->nActive > c->nranks)
    return relaySetError(c, relayInvalidArgument,
                         "layout has %d groups x %d active = %lld ranks, the comm has %d", L->nGroups,
                         L->nActive, (long long)L->nGroups * L->nActive, c->nranks);
  /* Broadcast, reduce: the root is a position in each group, not a comm rank (relaycc.h). */
  int byPosition = relayCollKind(a->coll) == relayKindRootedPosition;
  if (byPosition && (a->root < 0 || a->root >= L->nActive))
    return relaySetError(c, relayInvalidArgument,
                         "rootIndex = %d is not in [0, %d) (the root's position in each group of the layout)",
                         a->root, L->nActive);
  if (!L->ranks) return relaySetError(c, relayInvalidArgument, "layout.ranks is NULL");
  int mine;
  RELAY_CHECK(checkRanks(c, "layout.ranks", L->ranks, L->nGroups * L->nActive,
                         " (a rank is active in at most one group)", &mine));
  if (mine >= 0) {
    *myGroup = mine / L->nActive;
    *myIndex = mine % L->nActive;
  }
  if (!a->counts) return relaySetError(c, relayInvalidArgument, "counts is NULL");
  size_t es = relayTypeSize(a->dtype);
  for (int g = 0; g < L->nGroups; g++) {
    /* The largest buffer of any collective is A*count elements. */
    if (a->counts[g] > SIZE_MAX / es / (size_t)L->nActive)
      return relaySetError(c, relayInvalidArgument,
                           "counts[%d] = %zu overflows: %d x count x %zu bytes exceeds size_t", g,
                           a->counts[g], L->nActive, es);
  }
  if (*myGroup >= 0 && a->counts[*myGroup] > 0) {
    *bufErr = 1; /* the shape is valid from here on */
    /* Broadcast reads sendbuff on the root only, reduce writes recvbuff on the root only. */
    int isRoot = byPosition && *myIndex == a->root;
    int needSend = !byPosition || relayCollReduces(a->coll) || isRoot;
    int needRecv = !byPosition || !relayCollReduces(a->coll) || isRoot;
    const char* role = isRoot ? "the root" : "active rank";
    if (needSend && !a->send)
      return relaySetError(c, relayInvalidArgument, "sendbuff is NULL (%s, group %d, count %zu)", role,
                           *myGroup, a->counts[*myGroup]);
    if (needRecv && !a->recv)
      return relaySetError(c, relayInvalidArgument, "recvbuff is NULL (%s, group %d, count %zu)", role,
                           *myGroup, a->counts[*myGroup]);
    if (a->coll == relayCollectiveAllToAll && a->send == a->recv)
      return relaySetError(c, relayInvalidArgument,
                           "in-place all-to-all (sendbuff == recvbuff) is not supported");
    *bufErr = 0;
  }
  return relaySuccess;
}

/* ---- check mode -------------------------------------------------------- */

typedef struct {
  int32_t status; /* this rank's local verdict */
  int32_t coll, dtype, op, nGroups, nActive, route, depth, root;
  uint64_t ranksHash, countsHash;
  /* The direct window this rank's buffers lie in (0: none) and the offsets
   * peers would use (relayWindowMatch): alike on every active, or the call
   * would read the wrong bytes. */
  uint32_t win;
  uint64_t winSendOff, winRecvOff;
} callDigest;
_Static_assert(offsetof(callDigest, status) == 0 && sizeof(callDigest) <= RELAY_TP_AGREE_MAX,
               "relayAgreeCall reads a record's status from its first int32");

static relayResult_t agreeOnCall(struct relayComm* c, const callArgs* a, relayResult_t local, int route,
                                 int depth) {
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
    mine.ranksHash = relayHash64(RELAY_HASH_SEED, a->layout->ranks,
                                 (size_t)mine.nGroups * (size_t)mine.nActive * sizeof(int));
    mine.countsHash =
        relayHash64(RELAY_HASH_SEED, a->counts,
                    (size_t)relayCollNumCounts(a->coll, mine.nGroups, mine.nActive) * sizeof(size_t));
    mine.win = a->win ? a->win->id : 0;
    mine.winSendOff = a->winSendOff;
    mine.winRecvOff = a->winRecvOff;
  }
  const void* got;
  RELAY_CHECK(relayAgreeCall(c, local, &mine, sizeof mine, &got));
  const callDigest* all = got; /* the comm's agreement buffer: read before the next round */
  relayResult_t res = relaySuccess;
  for (int q = 1; q < c->nranks && res == relaySuccess; q++) {
    const callDigest* x = &all[0];
    const callDigest* y = &all[q];
    const char* what = x->coll != y->coll               ? "collective"
                       : x->dtype != y->dtype           ? "datatype"
                       : x->op != y->op                 ? "op"
                       : x->nGroups != y->nGroups       ? "layout.nGroups"
                       : x->nActive != y->nActive       ? "layout.nActive"
                       : x->root != y->root             ? "root"
                       : x->ranksHash != y->ranksHash   ? "layout.ranks"
                       : x->countsHash != y->countsHash ? "counts"
                       : x->route != y->route           ? "route (RELAYCC_ROUTE)"
                       : x->depth != y->depth           ? "depth (RELAYCC_DEPTH)"
                                                        : NULL;
    if (what) res = relaySetError(c, relayInvalidUsage, "ranks 0 and %d disagree on the %s", q, what);
  }
  /* Windows: the actives of a one-group call (the bandwidth route's direct
   * path) must agree on the window and the offsets peers use. */
  for (int i = 1;
       res == relaySuccess && c->directWindows && a->layout->nGroups == 1 && i < a->layout->nActive; i++) {
    const callDigest* x = &all[a->layout->ranks[0]];
    const callDigest* y = &all[a->layout->ranks[i]];
    if (x->win != y->win || x->winSendOff != y->winSendOff || x->winRecvOff != y->winRecvOff)
      res = relaySetError(
          c, relayInvalidUsage,
          "active rank %d's buffers lie in window %u at send offset %llu, recv offset %llu; active rank "
          "%d's in window %u at %llu, %llu (window 0: none; a windowed call needs the same window and "
          "offsets on every active rank)",
          a->layout->ranks[i], y->win, (unsigned long long)y->winSendOff, (unsigned long long)y->winRecvOff,
          a->layout->ranks[0], x->win, (unsigned long long)x->winSendOff, (unsigned long long)x->winRecvOff);
  }
  return res;
}

/* Check mode 0, a rooted call on a transport with RELAY_TP_CAP_SHAPES and no direct windows: the agreement
 * in one 24-byte record where agreeOnCall's digest takes 80 (shm: one line of the agreement slot, not
 * two): the local verdict, the shape digest (comm->callShape: collective, layout, counts, datatype, op,
 * root and the agreed settings, from which route and depth follow) and the caller's send pointer, which
 * the shm one-copy broadcast reads in place of its own entry round (bw.c: ~0.45 us of a 2-rank 4 KiB
 * broadcast's ~3.1 on the 2-vCPU EPYC; the shorter record alone ~0.04,
 * docs/perf/2026-12-06-cpu-bcast-fold-2core.md). A rejection takes the vote (relayAgreeCall) as before.
 * Shapes that differ: every rank sees the same records, so every rank then takes agreeOnCall's round, whose
 * message names what differs. */
typedef struct {
  int32_t status, pad; /* status first: relayAgreeCall's contract */
  uint64_t shape, send;
} shapeRecord;

/* A valid call whose key carries (planKey.carry: this transport, check mode 0, no direct windows) and that
 * the one-shot runs: its bytes, else 0. A function of the key and the route, alike on every rank of one
 * shape; the transport's answer (the region voted ready) is alike too. */
static size_t carriedBytes(const planKey* key, relayResult_t local, int route) {
  return local == relaySuccess && route == relayRouteOneShot && planKeyCarried(key)
             ? key->counts[0] * relayTypeSize(key->dtype)
             : 0;
}

static relayResult_t agreeOnShape(struct relayComm* c, const callArgs* a, const planKey* key,
                                  relayResult_t local, int route, int depth) {
  shapeRecord mine = {(int32_t)local, 0, local == relaySuccess ? c->callShape : 0,
                      (uint64_t)(uintptr_t)a->send};
  /* The root's block rides its record: copied into the slot the round's release publishes (an 8-rank 4 KiB
   * broadcast: one hop, where the agreement and then the bandwidth route's tiles took two and the root
   * pushed to every member; docs/perf/2026-12-06-cpu-carry.md). */
  size_t carry = carriedBytes(key, local, route);
  int carryRoot = carry ? a->layout->ranks[a->root] : -1;
  if (carry && carryRoot == c->rank) {
    void* slot = c->tp->carryStage(c, carry);
    if (slot) memcpy(slot, a->send, carry);
  }
  const void* got;
  RELAY_CHECK(relayAgreeCall(c, local, &mine, sizeof mine, &got));
  const shapeRecord* all = got; /* every status is relaySuccess here: a rejection ended in the vote */
  for (int q = 1; q < c->nranks; q++)
    if (all[q].shape != all[0].shape) {
      unsigned long long s0 = all[0].shape, sq = all[q].shape; /* the next round overwrites the records */
      relayResult_t res = agreeOnCall(c, a, relaySuccess, route, depth);
      return res != relaySuccess
                 ? res
                 : relaySetError(c, relayInvalidUsage,
                                 "ranks 0 and %d disagree on the call's shape (digest 0x%llx, "
                                 "0x%llx): the collective, layout, counts, datatype, op or root",
                                 q, s0, sq);
    }
  if (c->nranks <= RELAY_TP_ONESHOT_MAX) {
    for (int q = 0; q < c->nranks; q++) c->callSends[q] = all[q].send;
    c->callSendsKnown = 1;
  }
  if (carry) c->callCarry = c->tp->carryTake(c, carryRoot, carry);
  return relaySuccess;
}

/* ---- the call ---------------------------------------------------------- */

/* RELAYCC_DEBUG=2 (trace): a plan that enters the cache, how it was built, and how many plans of its route
 * and depth this process has built (relayPlanBuildCount): a steady state builds none. */
static void tracePlan(const struct relayComm* c, const planKey* key, const char* how) {
  if (relayDebugLevel() >= 2)
    fprintf(stderr,
            "relaycc: rank %d: %s plan (%s, depth %d) cached, %s; %lu built at that route and depth\n",
            c->rank, relayCollName(key->coll), relayRouteName(key->route), key->depth, how,
            relayPlanBuildCount(key->route, key->depth));
}

/* The plan of key (its route's row has a builder): the cached one, else
 * built, checked and cached (*owned set when the cache could not take it:
 * the caller frees it). relayNotSupported: the route cannot serve the key,
 * on every rank alike (plans are pure functions of the key). */
static relayResult_t lookupPlan(struct relayComm* c, const planKey* key, const relayPlan** plan,
                                relayPlan** owned) {
  *owned = NULL;
  *plan = relayPlanCacheFind(c->plans, key);
  if (*plan) return relaySuccess;
  relayPlan* p = NULL;
  relayResult_t res = relayPlanBuild(key, &p);
  if (res == relayNotSupported) return res;
  if (res != relaySuccess) {
    c->failed = 1; /* peers may be moving data already */
    return relaySetError(c, res, "building the %s plan failed (%s)", relayRouteName(key->route),
                         relayGetErrorString(res));
  }
  char err[512];
  if (relayPlanCheck(p, err, sizeof err) != 0) {
    relayPlanFree(p);
    c->failed = 1;
    return relaySetError(c, relayInternalError, "the %s plan fails its check: %s", relayRouteName(key->route),
                         err);
  }
  *plan = p;
  if (relayPlanCacheAdd(c->plans, key, p) != 0) *owned = p;
  else tracePlan(c, key, "built for the call");
  return relaySuccess;
}

/* The plans the router built to price key's candidates (relayRouteCandidates), into the plan cache
 * under each list's first candidate, so that the plan a call runs is built once: priced, then cached.
 * One that fails its check or finds its key cached is freed; the call's own lookup then says so. */
static void cachePriced(struct relayComm* c, planKey* key, const relayRouteList lists[2],
                        relayPlan* priced[2]) {
  for (int g = 0; g < 2; g++) {
    if (!priced[g]) continue;
    key->route = lists[g].route[0];
    key->depth = lists[g].depth[0];
    char err[512];
    if (relayPlanCacheFind(c->plans, key) || relayPlanCheck(priced[g], err, sizeof err) != 0 ||
        relayPlanCacheAdd(c->plans, key, priced[g]) != 0)
      relayPlanFree(priced[g]);
    else tracePlan(c, key, "as the router priced it");
    priced[g] = NULL;
  }
  key->route = key->depth = 0; /* callKey's: runRoutes sets each candidate's */
}

/* A call failed in the transport: where the control plane knows a peer died, the error names it first
 * (NCCL's own says "remote process exited" or "Connection closed by remote peer", no rank; seen when a
 * helper was killed during a pipelined relay on 8 ranks, 2026-12-04). Failure path only: a syscall or two
 * per peer. */
static relayResult_t namingDeadPeer(struct relayComm* c, relayResult_t res) {
  char dead[160], was[sizeof c->lastError];
  if (relayCommDeadPeer(c, dead, sizeof dead) == relaySuccess) return res;
  relayErrorQuote(c, c->lastError, was, sizeof was);
  return relaySetError(c, relayRemoteError, "%s (this rank saw: %s)", dead, was);
}

/* Runs the call on the first candidate (route/route.h) that can serve it:
 * its row's capability present on the transport, its plan (if it has one)
 * built, its prepare (if any: the row's) accepted. Every rank
 * walks the same list to the same row: the list and the plans are pure
 * functions of the key, the config and the topology the ranks agreed at
 * init; capabilities are the transport's; and a prepare is collective and
 * voted, so every rank reaches it (helpers too, before any branch on role)
 * and gets the same answer. */
static relayResult_t runRoutes(struct relayComm* c, planKey* key, const relayRouteList* list,
                               const relayRouteCall* call) {
  for (int i = 0; i < list->n; i++) {
    const relayRouteRow* row = relayRouteRowOf(list->route[i]);
    if (!row || (row->caps & ~c->tp->caps) || !relayRouteRowServes(row, key->coll)) continue;
    key->route = list->route[i];
    key->depth = list->depth[i];
    const relayPlan* plan = NULL;
    relayPlan* owned = NULL;
    if (row->build) {
      relayResult_t res = lookupPlan(c, key, &plan, &owned);
      if (res == relayNotSupported) continue; /* a normal answer */
      if (res != relaySuccess) return res;
    }
    void* handle = NULL;
    relayResult_t res = row->prepare ? row->prepare(c, call, &handle) : relaySuccess;
    if (res == relayNotSupported) {
      relayPlanFree(owned);
      /* The interposer's comm: the route that beat NCCL's own collective is refused (IPC in a container,
       * a capture before the region exists), so NCCL runs the call on the user's comm; every rank got
       * the same answer from the voted prepare, and nothing moved. */
      if (c->forwardDeclined) {
        c->callDeclined = 1;
        return relaySetError(c, relayNotSupported,
                             "the %s route declined; the caller forwards the call to NCCL",
                             relayRouteName(key->route));
      }
      continue;
    }
    if (res == relaySuccess) {
      c->last = (struct relayLastCall){
          .route = key->route,
          .depth = plan ? plan->depth : 1,
          .window = (row->flags & RELAY_ROW_WINDOWED) && call->exec.win ? call->exec.win->id : 0,
          .carried = c->callCarry != NULL && key->route == relayRouteOneShot,
      }; /* twoShot: the shm one-shot's two-shot sets it */
      res = plan       ? relayExecRun(c, plan, &call->exec)
            : row->run ? row->run(c, handle, call)
                       : relaySetError(c, relayInternalError, "the %s route has no plan and no run",
                                       relayRouteName(key->route));
    }
    relayPlanFree(owned);
    if (res != relaySuccess) {
      c->failed = 1;
      res = namingDeadPeer(c, res);
    }
    return res;
  }
  /* The list ends in direct, which needs no capability and no prepare: only
   * its builder declining the key gets here. */
  c->failed = 1;
  return relaySetError(c, relayInternalError, "building the %s plan failed (%s)", relayRouteName(key->route),
                       relayGetErrorString(relayNotSupported));
}

static relayResult_t runPlan(struct relayComm* c, const callArgs* a, planKey* key, int myGroup,
                             const relayRouteList* list, relayStream_t stream);
static relayResult_t runThroughScratch(struct relayComm* c, const callArgs* a, planKey* key, int myGroup,
                                       const relayRouteList* list, relayResult_t local, relayStream_t stream);

/* The call's shape as every rank of a valid call has it (comm->callShape):
 * never 0, which marks "outside a call". ~30 ns at 2 x 4 ranks. */
static uint64_t callShapeDigest(const planKey* k) {
  int32_t head[PLAN_KEY_WORDS];
  planKeyHead(k, head); /* route and depth 0: callKey sets neither */
  return planKeyHash(head, k) | 1;
}

/* What the router may use for this key on this comm: the transport's caps, less the one-shot on a comm
 * of several nodes (the one-shot's gate is the key's: relayCommKeySettings). The interposer asks the same
 * question (shim.c), so it routes as core does. */
int relayCommRouteCaps(const struct relayComm* c, const planKey* key) {
  (void)key;
  return relayNodesCaps(c, (int)c->tp->caps); /* across nodes, no one-shot (core/nodes.c) */
}

/* The key of a call whose shape is valid, as every peer builds it: the call's fields, the comm's agreed
 * settings and its node map. The one builder: runCall's and the interposer's question
 * (relayCommRoutesCall) read the same key. */
static void callKey(const struct relayComm* c, const callArgs* a, planKey* key) {
  memset(key, 0, sizeof *key);
  key->coll = a->coll;
  key->nranks = c->nranks;
  key->nGroups = a->layout->nGroups;
  key->nActive = a->layout->nActive;
  key->ranks = a->layout->ranks;
  key->counts = a->counts;
  key->dtype = a->dtype;
  key->op = relayCollReduces(a->coll) ? a->op : relaySum;
  key->root = relayCollRooted(a->coll) ? a->root : 0;
  key->nodeOf = relayNodesKeyMap(c);
  relayCommKeySettings(c, key);
  /* Hashed once for the call's digest, route cache and plan cache (planKey.shapeHash says why). */
  key->shapeHash = planKeyShapeHash(key);
}

int relayCommRoutesCall(struct relayComm* c, relayCollective_t coll, const size_t* counts,
                        relayDataType_t dtype, relayRedOp_t op, const relayLayout_t* layout, int root,
                        relayStream_t stream) {
  callArgs a = {.coll = coll, .counts = counts, .dtype = dtype, .op = op, .layout = layout, .root = root};
  planKey key;
  callKey(c, &a, &key);
  /* relayRouteBeatsNative's question, asked of the candidates so that the plans the router prices go to
   * the plan cache: the call that follows (runCall, a hit in the router's cache where the transport has
   * the native collective) then builds none. Ranks capture alike: a captured call is priced as a graph
   * replay (list 1). */
  relayRouteList lists[2];
  relayPlan* priced[2];
  relayRouteCandidates(&key, c->topo, relayCommRouteCaps(c, &key) | RELAY_TP_CAP_NATIVE, relayRouteAuto,
                       c->cfg.depth, lists, priced);
  cachePriced(c, &key, lists, priced);
  int captured = c->tp->isCapturing && c->tp->isCapturing(c, stream);
  return lists[captured].route[0] != relayRouteNative;
}

static relayResult_t runCall(struct relayComm* c, const callArgs* args, relayStream_t stream) {
  callArgs call = *args, *a = &call; /* the window fields are this call's (below) */
  relayResult_t latched = c->failed ? relaySuccess : relayCommLatched(c); /* one atomic load when none */
  if (latched != relaySuccess) return latched;
  if (c->failed) {
    char earlier[sizeof c->lastError];
    return relaySetError(c, relayInvalidUsage, "the comm failed in an earlier call; destroy it (%s)",
                         relayErrorQuote(c, c->lastError, earlier, sizeof earlier));
  }
  c->callMark = -1;
  c->callShape = 0;
  c->callSendsKnown = 0;
  c->callCarry = NULL;
  c->callDeclined = 0;
  int myGroup = -1, myIndex = -1, bufErr = 0;
  /* A collective out of range comes only from relayCallReject: a shape error. */
  relayResult_t local =
      relayCollRowOf(a->coll) ? validate(c, a, &myGroup, &myIndex, &bufErr) : relayInvalidArgument;
  if (a->reject) {
    /* A binding's rejection (relayCallReject): what C makes of the shape
     * picks the path, a valid one that of a buffer error; the text is the
     * binding's, which names the argument it rejected. */
    if (local == relaySuccess) bufErr = 1;
    local = relaySetError(c, relayInvalidArgument, "%s", a->reject);
  }

  planKey key;
  memset(&key, 0, sizeof key);
  relayRouteList lists[2];
  int captured = 0;                      /* 1: the stream is being captured and the captured list differs */
  if (local == relaySuccess || bufErr) { /* the shape is valid: the same key as every peer's */
    callKey(c, a, &key);
    c->callShape = callShapeDigest(&key);
    /* The direct path: decided from this rank's own pointers (window.c). */
    a->win = local == relaySuccess && c->directWindows
                 ? relayWindowMatch(c, &key, a->send, a->recv, &a->winSendOff, &a->winRecvOff)
                 : NULL;
    /* Across nodes no one-shot, forced or priced (core/nodes.c says why). */
    relayPlan* priced[2];
    relayRouteCandidates(&key, c->topo, relayCommRouteCaps(c, &key), relayNodesRoute(c, c->cfg.route),
                         c->cfg.depth, lists, priced);
    cachePriced(c, &key, lists, priced);
    /* Ask the stream whether it is capturing only when the answer matters:
     * most keys route alike per call and in a graph, and one cached lookup
     * of both lists costs less than the CUDA query. */
    captured = (lists[1].route[0] != lists[0].route[0] || lists[1].depth[0] != lists[0].depth[0]) &&
               c->tp->isCapturing && c->tp->isCapturing(c, stream);
  } else {
    lists[0].n = 1; /* what check mode's digest carries for a rejected call */
    lists[0].route[0] = c->cfg.route;
    lists[0].depth[0] = c->cfg.depth > 0 ? c->cfg.depth : 1;
  }
  const relayRouteList* list = &lists[captured];
  /* A rooted call moves data one way (the root's blocks out, or in): a rank that only sends, or one idle
   * in its own view but the root in its peers', would return success from a call whose shape its peers
   * read otherwise (a member naming another root waits for a root that never sends). Where the agree is
   * cheap (RELAY_TP_CAP_SHAPES: shm) such a call compares its shape, root included, before it moves
   * anything, so a disagreement fails every rank at once and the comm stays usable (issue 25.3). */
  int agree = c->cfg.checkMode ||
              (relayCollRowOf(a->coll) && relayCollRooted(a->coll) && (c->tp->caps & RELAY_TP_CAP_SHAPES));
  if (agree) {
    /* relayAgreeCall clears the call's shape for its rounds: a peer with another shape is their answer. */
    relayResult_t agreed = c->cfg.checkMode || c->directWindows
                               ? agreeOnCall(c, a, local, list->route[0], list->depth[0])
                               : agreeOnShape(c, a, &key, local, list->route[0], list->depth[0]);
    if (agreed != relaySuccess) return agreed;
  } else if (local != relaySuccess && !bufErr) {
    /* A shape error: no plan, so nothing to take part with. Peers that wait
     * on this rank in this call learn it from the notice; what they already
     * sent it carries this call's number, which its next call refuses. */
    if (c->tp->reject) c->tp->reject(c);
    return local;
  }
  if (local == relaySuccess) {
    relayResult_t res = runPlan(c, a, &key, myGroup, list, stream);
    if (res == relaySuccess && c->callMark >= 0)
      res = relaySetError(c, relayRemoteError,
                          "rank %d passed a bad buffer in this call (its error names it): this rank's "
                          "result is undefined; the call's transfers completed, so the comm stays usable",
                          c->callMark);
    return res;
  }
  return runThroughScratch(c, a, &key, myGroup, list, local, stream);
}

/* The call's data movement once every rank that takes part has its key: the
 * first candidate route that serves it (runRoutes). */
static relayResult_t runPlan(struct relayComm* c, const callArgs* a, planKey* key, int myGroup,
                             const relayRouteList* list, relayStream_t stream) {
  /* Nothing to move anywhere: every group's count is zero. */
  int any = 0;
  for (int g = 0; g < planKeyNumCounts(key); g++) any |= key->counts[g] != 0;
  if (!any) {
    c->last = (struct relayLastCall){.route = list->route[0], .depth = list->depth[0]};
    return relaySuccess;
  }
  int perGroup = relayCollRows[a->coll].counts == RELAY_COUNTS_PER_GROUP;
  relayRouteCall rc = {key,
                       perGroup && myGroup >= 0 ? a->counts[myGroup] : 0,
                       {a->send, a->recv, a->win, a->winSendOff, a->winRecvOff, stream}};
  return runRoutes(c, key, list, &rc);
}

/* Scratch slots of the transport past the plans' own (0..PLAN_MAX_SLOTS-1):
 * the stand-ins for a rank's caller buffers when it passed a bad one. */
enum { SCRATCH_SLOT_SEND = PLAN_MAX_SLOTS, SCRATCH_SLOT_RECV = PLAN_MAX_SLOTS + 1 };

/* A buffer error in a call whose shape is valid (check mode 0): the peers run
 * the call and may already be sending to this rank, so it runs its part too,
 * with internal scratch in place of both caller buffers (it never touches
 * them), and nothing is left over for a later call. callMark tells the peers
 * that receive from it, directly or through a relay, on a transport that
 * marks its messages (shm); NCCL has no channel inside a call: its peers
 * return success with undefined values where this rank's data went (README).
 * Returns this rank's own error, or the run's when that failed the comm. */
static relayResult_t runThroughScratch(struct relayComm* c, const callArgs* a, planKey* key, int myGroup,
                                       const relayRouteList* list, relayResult_t local,
                                       relayStream_t stream) {
  char saved[sizeof c->lastError];
  memcpy(saved, c->lastError, sizeof saved);
  uint64_t sendElems, recvElems;
  planCallerExtents(key, c->rank, &sendElems, &recvElems);
  size_t es = relayTypeSize(a->dtype);
  void *send = NULL, *recv = NULL;
  relayResult_t res = relaySuccess;
  if (sendElems) res = c->tp->scratch(c, SCRATCH_SLOT_SEND, (size_t)sendElems * es, &send, stream);
  if (res == relaySuccess && recvElems)
    res = c->tp->scratch(c, SCRATCH_SLOT_RECV, (size_t)recvElems * es, &recv, stream);
  if (res != relaySuccess) {
    /* Peers wait for this rank's part: end their waits now. */
    c->failed = 1;
    if (c->tp->fail) c->tp->fail(c);
    return res;
  }
  callArgs run = *a;
  run.send = send;
  run.recv = recv;
  c->callMark = c->rank;
  run.win = NULL; /* scratch is in no window: the staged path, whose marks tell the peers */
  res = runPlan(c, &run, key, myGroup, list, stream);
  if (res != relaySuccess) return res;
  memcpy(c->lastError, saved, sizeof saved);
  return local;
}

static relayResult_t call(const callArgs* a, relayComm_t comm, relayStream_t stream) {
  const char* name = relayCollRowOf(a->coll) ? relayCollRowOf(a->coll)->call : "relayCallReject";
  if (!comm) return relaySetError(NULL, relayInvalidArgument, "%s: comm is NULL", name);
  /* Every call counts on every rank, rejected ones too, so that a notice or
   * a message of call k names k on every rank and is never read by call k+1;
   * counted before anything can fail, so that every error of the call (the
   * prefix relaySetError builds from curCallName, callSeq and inCall) names
   * this call's number, not the one before. */
  comm->callSeq++;
  comm->curCallName = name;
  atomic_store(&comm->inCall, 1);
  relayResult_t res = atomic_load(&comm->aborted)
                          ? relaySetError(comm, relayInvalidUsage, "the comm was aborted")
                          : runCall(comm, a, stream);
  comm->curCallName = NULL; /* errors after the call name no call (common.h) */
  comm->callShape = 0;      /* what runs outside calls (a window's rounds) has no shape */
  comm->callSendsKnown = 0;
  comm->callCarry = NULL;
  atomic_store(&comm->inCall, 0);
  return res;
}

relayResult_t relayCommCall(struct relayComm* comm, relayCollective_t coll, const void* send, void* recv,
                            const size_t* counts, relayDataType_t dtype, relayRedOp_t op,
                            const relayLayout_t* layout, int root, relayStream_t stream) {
  callArgs a = {.coll = coll,
                .send = send,
                .recv = recv,
                .counts = counts,
                .dtype = dtype,
                .op = op,
                .layout = layout,
                .root = root};
  return call(&a, comm, stream);
}

relayResult_t relayAllGather(const void* sendbuff, void* recvbuff, const size_t* sendcounts,
                             relayDataType_t datatype, const relayLayout_t* layout, relayComm_t comm,
                             relayStream_t stream) {
  return relayCommCall(comm, relayCollectiveAllGather, sendbuff, recvbuff, sendcounts, datatype, relaySum,
                       layout, 0, stream);
}

relayResult_t relayReduceScatter(const void* sendbuff, void* recvbuff, const size_t* recvcounts,
                                 relayDataType_t datatype, relayRedOp_t op, const relayLayout_t* layout,
                                 relayComm_t comm, relayStream_t stream) {
  return relayCommCall(comm, relayCollectiveReduceScatter, sendbuff, recvbuff, recvcounts, datatype, op,
                       layout, 0, stream);
}

relayResult_t relayAllReduce(const void* sendbuff, void* recvbuff, const size_t* counts,
                             relayDataType_t datatype, relayRedOp_t op, const relayLayout_t* layout,
                             relayComm_t comm, relayStream_t stream) {
  return relayCommCall(comm, relayCollectiveAllReduce, sendbuff, recvbuff, counts, datatype, op, layout, 0,
                       stream);
}

relayResult_t relayAllToAll(const void* sendbuff, void* recvbuff, const size_t* segcounts,
                            relayDataType_t datatype, const relayLayout_t* layout, relayComm_t comm,
                            relayStream_t stream) {
  return relayCommCall(comm, relayCollectiveAllToAll, sendbuff, recvbuff, segcounts, datatype, relaySum,
                       layout, 0, stream);
}

relayResult_t relayBroadcast(const void* sendbuff, void* recvbuff, const size_t* counts,
                             relayDataType_t datatype, int rootIndex, const relayLayout_t* layout,
                             relayComm_t comm, relayStream_t stream) {
  return relayCommCall(comm, relayCollectiveBroadcast, sendbuff, recvbuff, counts, datatype, relaySum, layout,
                       rootIndex, stream);
}

relayResult_t relayReduce(const void* sendbuff, void* recvbuff, const size_t* counts,
                          relayDataType_t datatype, relayRedOp_t op, int rootIndex,
                          const relayLayout_t* layout, relayComm_t comm, relayStream_t stream) {
  return relayCommCall(comm, relayCollectiveReduce, sendbuff, recvbuff, counts, datatype, op, layout,
                       rootIndex, stream);
}

/* A host barrier through the transport's own (shm: one agreement round in shared memory; NCCL: its
 * control plane). Not a collective call: it takes no call number, so it may sit between calls of a
 * lockstep without shifting it, as the tools' relayCommBarrier does. */
relayResult_t relayBarrier(relayComm_t comm, relayStream_t stream) {
  (void)stream; /* host-side: see relaycc.h */
  if (!comm || !comm->tp)
    return relaySetError(NULL, relayInvalidArgument, "relayBarrier: %s is NULL",
                         comm ? "the transport" : "comm");
  const char* outer = comm->curCallName;
  comm->curCallName = "relayBarrier"; /* its errors' prefix */
  relayResult_t res;
  char earlier[sizeof comm->lastError];
  if (atomic_load(&comm->aborted)) res = relaySetError(comm, relayInvalidUsage, "the comm was aborted");
  else if (comm->failed)
    res = relaySetError(comm, relayInvalidUsage, "the comm failed in an earlier call; destroy it (%s)",
                        relayErrorQuote(comm, comm->lastError, earlier, sizeof earlier));
  else res = comm->tp->barrier(comm);
  comm->curCallName = outer;
  return res;
}

/* ---- rooted collectives: scatter, gather -------------------------------- */

/* The rank set is ranks[0..nRanks), any size >= 1, root in it or not;
 * counts[i] is ranks[i]'s block; the root's buffer holds the blocks back to
 * back in set order. A rank names only the buffers its role uses. */
static relayResult_t validateRooted(struct relayComm* c, const callArgs* a, int* myGroup, int* myIndex,
                                    int* bufErr) {
  int r = c->rank, scatter = relayCollSendsBlocks(a->coll); /* the root's send holds the blocks */
  const relayLayout_t* L = a->layout;
  *myGroup = -1;
  *myIndex = -1;
  if (relayTypeSize(a->dtype) == 0)
    return relaySetError(c, relayInvalidArgument, "datatype %d is not a relayDataType_t", (int)a->dtype);
  if (a->root < 0 || a->root >= c->nranks)
    return relaySetError(c, relayInvalidArgument, "root = %d is not in [0, %d)", a->root, c->nranks);
  if (L->nActive < 1 || L->nActive > c->nranks)
    return relaySetError(c, relayInvalidArgument, "nRanks = %d must be in [1, %d]", L->nActive, c->nranks);
  if (!L->ranks) return relaySetError(c, relayInvalidArgument, "ranks is NULL");
  RELAY_CHECK(checkRanks(c, "ranks", L->ranks, L->nActive, "", myIndex));
  if (!a->counts) return relaySetError(c, relayInvalidArgument, "counts is NULL");
  size_t es = relayTypeSize(a->dtype), total = 0;
  for (int i = 0; i < L->nActive; i++) {
    /* The root's buffer holds every block: its bytes must fit a size_t. */
    if (a->counts[i] > SIZE_MAX / es - total)
      return relaySetError(c, relayInvalidArgument,
                           "counts[%d] = %zu overflows: the root's %zu-byte elements exceed size_t", i,
                           a->counts[i], es);
    total += a->counts[i];
  }
  if (*myIndex >= 0 || r == a->root) *myGroup = 0;
  *bufErr = 1; /* the shape is valid from here on */
  const char* rootBuf = scatter ? "sendbuff" : "recvbuff";
  const char* memberBuf = scatter ? "recvbuff" : "sendbuff";
  if (r == a->root && total > 0 && !(scatter ? a->send : (const void*)a->recv))
    return relaySetError(c, relayInvalidArgument, "%s is NULL (the root, %zu elements)", rootBuf, total);
  if (*myIndex >= 0 && a->counts[*myIndex] > 0 && !(scatter ? (const void*)a->recv : a->send))
    return relaySetError(c, relayInvalidArgument, "%s is NULL (ranks[%d], count %zu)", memberBuf, *myIndex,
                         a->counts[*myIndex]);
  *bufErr = 0;
  return relaySuccess;
}

relayResult_t relayScatter(const void* sendbuff, void* recvbuff, const size_t* counts,
                           relayDataType_t datatype, int root, const int* ranks, int nRanks, relayComm_t comm,
                           relayStream_t stream) {
  relayLayout_t set = {1, nRanks, ranks};
  return relayCommCall(comm, relayCollectiveScatter, sendbuff, recvbuff, counts, datatype, relaySum, &set,
                       root, stream);
}

relayResult_t relayGather(const void* sendbuff, void* recvbuff, const size_t* counts,
                          relayDataType_t datatype, int root, const int* ranks, int nRanks, relayComm_t comm,
                          relayStream_t stream) {
  relayLayout_t set = {1, nRanks, ranks};
  return relayCommCall(comm, relayCollectiveGather, sendbuff, recvbuff, counts, datatype, relaySum, &set,
                       root, stream);
}

/* ---- bindings: a rejected call, the enums by name ----------------------- */

/* A question, not a call: nothing is counted and no error is left behind for a valid shape. */
relayResult_t relayCallRouted(relayCollective_t coll, const size_t* counts, relayDataType_t datatype,
                              relayRedOp_t op, const relayLayout_t* layout, relayComm_t comm,
                              relayStream_t stream, int* routed) {
  if (!comm || !routed)
    return relaySetError(NULL, relayInvalidArgument, "relayCallRouted: %s is NULL", comm ? "routed" : "comm");
  *routed = 0;
  const relayCollRow* row = relayCollRowOf(coll);
  /* The layout calls only: a rooted or point-to-point call has arguments this question does not take. */
  if (!row || !relayCollIsLayout(coll))
    return relaySetError(comm, relayInvalidArgument, "relayCallRouted: collective %d is not a layout call",
                         (int)coll);
  /* The shape check every call makes first (validate: no buffer is read, none is given) */
  callArgs a = {.coll = coll, .counts = counts, .dtype = datatype, .op = op, .layout = layout};
  int myGroup, myIndex, bufErr;
  char saved[sizeof comm->lastError]; /* a valid shape leaves the comm's last error as it was */
  memcpy(saved, comm->lastError, sizeof saved);
  const char* outer = comm->curCallName;
  comm->curCallName = "relayCallRouted";
  relayResult_t res = validate(comm, &a, &myGroup, &myIndex, &bufErr);
  comm->curCallName = outer;
  if (res != relaySuccess && !bufErr) return res;
  memcpy(comm->lastError, saved, sizeof saved);
  /* A forced route (RELAYCC_ROUTE) is what the call would run: relaycc's, unless it forces the transport's
   * own collective where there is one; auto: the router's prediction. */
  int forced = relayNodesRoute(comm, comm->cfg.route);
  if (forced != relayRouteAuto)
    *routed = forced != relayRouteNative || !(comm->tp->caps & RELAY_TP_CAP_NATIVE);
  else *routed = relayCommRoutesCall(comm, coll, counts, datatype, op, layout, 0, stream) != 0;
  return relaySuccess;
}

/* The call through runCall like any other, with no buffer and the binding's
 * reason: validate judges the shape, runCall takes the path of a C caller's
 * bad argument (README "After a rejected call"). */
relayResult_t relayCallReject(relayCollective_t coll, const size_t* counts, relayDataType_t datatype,
                              relayRedOp_t op, const relayLayout_t* layout, int root, const char* reason,
                              relayComm_t comm, relayStream_t stream) {
  relayCollective_t cl = coll;
  /* Point-to-point and per-peer calls run without a plan (core/pt2pt.c). */
  if (cl == relayCollectiveSend || cl == relayCollectiveRecv)
    return relayPt2ptReject(cl == relayCollectiveSend, counts ? counts[0] : 0, datatype, root, reason, comm,
                            stream);
  if (cl == relayCollectiveAllToAllV) return relayAllToAllvReject(datatype, layout, reason, comm, stream);
  /* A rooted call's rank set: a layout of one group; none, or another
   * number of groups, is a set of no ranks (validateRooted: a shape error). */
  relayLayout_t set = {1, layout && layout->nGroups == 1 ? layout->nActive : 0,
                       layout ? layout->ranks : NULL};
  if (relayCollRankSet(cl)) layout = &set;
  callArgs a = {.coll = cl,
                .counts = counts,
                .dtype = datatype,
                .op = op,
                .layout = layout,
                .root = root,
                .reject = reason ? reason : "rejected by the binding"};
  return call(&a, comm, stream);
}

#define RELAY_ENUM_NAME_(id) [id] = #id
static const char* const kResultNames[relayNumResults] = {
#define RELAY_RESULT_NAME_(name, value, msg) [value] = #name,
    RELAY_RESULT_TABLE(RELAY_RESULT_NAME_)
#undef RELAY_RESULT_NAME_
};
static const char* const kTypeNames[relayNumTypes] = {
    RELAY_ENUM_NAME_(relayInt8),    RELAY_ENUM_NAME_(relayUint8),   RELAY_ENUM_NAME_(relayInt32),
    RELAY_ENUM_NAME_(relayUint32),  RELAY_ENUM_NAME_(relayInt64),   RELAY_ENUM_NAME_(relayUint64),
    RELAY_ENUM_NAME_(relayFloat16), RELAY_ENUM_NAME_(relayFloat32), RELAY_ENUM_NAME_(relayFloat64),
    RELAY_ENUM_NAME_(relayBfloat16)};
static const char* const kOpNames[relayNumOps] = {RELAY_ENUM_NAME_(relaySum), RELAY_ENUM_NAME_(relayProd),
                                                  RELAY_ENUM_NAME_(relayMax), RELAY_ENUM_NAME_(relayMin),
                                                  RELAY_ENUM_NAME_(relayAvg)};
#define RELAY_ROUTE_ENUM_NAME_(id, value, name) RELAY_ENUM_NAME_(id),
static const char* const kRouteNames[relayNumRoutes] = {RELAY_ROUTE_TABLE(RELAY_ROUTE_ENUM_NAME_)};
#undef RELAY_ROUTE_ENUM_NAME_
static const char* const kEnumNames[relayNumEnums] = {
    RELAY_ENUM_NAME_(relayEnumEnum),          RELAY_ENUM_NAME_(relayEnumResult),
    RELAY_ENUM_NAME_(relayEnumDataType),      RELAY_ENUM_NAME_(relayEnumRedOp),
    RELAY_ENUM_NAME_(relayEnumRoute),         RELAY_ENUM_NAME_(relayEnumCollective),
    RELAY_ENUM_NAME_(relayEnumCollectiveKind)};
#define RELAY_COLL_ENUM_NAME_(id, ...) RELAY_ENUM_NAME_(id),
static const char* const kCollectiveNames[relayNumCollectives] = {RELAY_COLL_TABLE(RELAY_COLL_ENUM_NAME_)};
#undef RELAY_COLL_ENUM_NAME_
static const char* const kKindNames[relayNumCollectiveKinds] = {
    RELAY_ENUM_NAME_(relayKindLayout), RELAY_ENUM_NAME_(relayKindRootedRank),
    RELAY_ENUM_NAME_(relayKindRootedPosition), RELAY_ENUM_NAME_(relayKindPointToPoint),
    RELAY_ENUM_NAME_(relayKindPerPeer)};
#undef RELAY_ENUM_NAME_

/* Each table is indexed by the enum's own identifiers, so a name cannot sit
 * at another value; a value the table misses reads NULL, which the Python
 * package's check against relaycc.h finds. */
const char* relayGetEnumName(relayEnum_t which, int value) {
  static const struct {
    const char* const* names;
    int n;
  } kEnums[relayNumEnums] = {[relayEnumEnum] = {kEnumNames, relayNumEnums},
                             [relayEnumResult] = {kResultNames, relayNumResults},
                             [relayEnumDataType] = {kTypeNames, relayNumTypes},
                             [relayEnumRedOp] = {kOpNames, relayNumOps},
                             [relayEnumRoute] = {kRouteNames, relayNumRoutes},
                             [relayEnumCollective] = {kCollectiveNames, relayNumCollectives},
                             [relayEnumCollectiveKind] = {kKindNames, relayNumCollectiveKinds}};
  if ((unsigned)which >= relayNumEnums || value < 0 || value >= kEnums[which].n) return NULL;
  return kEnums[which].names[value];
}

relayResult_t relayGetCollectiveInfo(relayCollective_t coll, relayCollectiveInfo_t* info) {
  const relayCollRow* row = relayCollRowOf(coll);
  if (!row || !info)
    return relaySetError(NULL, relayInvalidArgument, "relayGetCollectiveInfo: %s",
                         info ? "coll is not a relayCollective_t" : "info is NULL");
  *info = (relayCollectiveInfo_t){row->name,       row->call,       row->kind,     row->reduces,
                                  row->sendBlocks, row->recvBlocks, row->ncclName, row->torchcommsName};
  return relaySuccess;
}
