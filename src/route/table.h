/*
 * Routes as rows: one row per route says all there is to know of it (its
 * builder, the transport capability it needs, the collectives' kinds it
 * serves, how it is priced, the prepare that readies the transport and the
 * run of a row without a plan), so that adding a route touches this table
 * and its builder. The router (route.c) prices the rows a call's transport
 * can run, a pure function of the key, and hands core an ordered list of
 * candidates; core (api.c) walks it and runs the first whose capability is
 * present and whose prepare succeeds on every rank. A route's name is the
 * shared floor's (comm/common.h: relayRouteNames).
 */
#ifndef RELAY_ROUTE_TABLE_H_
#define RELAY_ROUTE_TABLE_H_

#include "exec/exec.h"
#include "plan/plan.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Row flags, read by the router (and one by core). */
enum {
  /* Priced at depth 1 and at the depth model's depth (route/depth.c). */
  RELAY_ROW_PIPELINED = 1,
  /* Without a model of the node, taken where its plan builds (ahead of
   * native and direct): one launch instead of a group plus a reduce. */
  RELAY_ROW_UNMODELLED = 2,
  /* One kernel per call: a call outside a graph pays no per-step host cost
   * (topo->hostStepS), as the native collective does not. */
  RELAY_ROW_ONE_LAUNCH = 4,
  /* Read by core: the route's plan reads and writes the caller's buffers in peers' memory where they lie
   * in a registered window (relayExecCall.win: the one-copy path), which the call reports
   * (comm->last.window). */
  RELAY_ROW_WINDOWED = 8,
};

struct relayComm;

/* What a route's prepare and run see of the call. */
typedef struct {
  const planKey* key; /* route and depth: the candidate's */
  size_t count;       /* this rank's group's count; 0 on a rank active in no group and in rooted calls */
  relayExecCall exec; /* the buffers, their window, the stream */
} relayRouteCall;

typedef struct {
  int route; /* relayRoute_t: the row's index in the table */
  /* The plan builder; NULL: the route runs no plan but the transport's own
   * collective (native: core's run), which the router prices by the
   * baseline model and keeps as the incumbent. */
  relayResult_t (*build)(planBuilder* b);
  unsigned caps;  /* RELAY_TP_CAP_* the transport must have (0: any) */
  unsigned kinds; /* RELAY_ROW_KIND(relayCollectiveKind_t) of the collectives it serves */
  int flags;      /* RELAY_ROW_* */
  /* The router's gate (NULL: every key): 0 where the route is not priced
   * for this key, though its builder might serve it (a forced route still
   * asks the builder). A pure function of the key and process-wide limits. */
  int (*priced)(const planKey* key, int caps); /* caps: the transport's (one pricing serves both ways) */
  /* COLLECTIVE over all comm ranks, on the same call, after the plan (if
   * any) is built: readies the transport. relayNotSupported = declined, on
   * every rank alike (voted, or derived from state all ranks share): core
   * tries the next candidate. Any other error fails the comm. NULL: nothing
   * to prepare. *handle goes to run. */
  relayResult_t (*prepare)(struct relayComm* comm, const relayRouteCall* call, void** handle);
  /* A row without a builder runs the call here (with its handle). */
  relayResult_t (*run)(struct relayComm* comm, void* handle, const relayRouteCall* call);
} relayRouteRow;

#define RELAY_ROW_KIND(kind) (1u << (kind))
/* 1 when row serves collective coll's kind (comm/coll.h: the collective's row says its kind). */
static inline int relayRouteRowServes(const relayRouteRow* row, relayCollective_t coll) {
  return row && (row->kinds & RELAY_ROW_KIND(relayCollKind(coll))) != 0;
}

/* The row of route (a relayRoute_t), NULL for auto and out-of-range values. */
const relayRouteRow* relayRouteRowOf(int route);

/* Build the plan of key with its route's row's builder. Returns
 * relaySuccess, relayNotSupported (the route runs no plan, or cannot serve
 * this key: a normal answer, the caller takes the next candidate) or
 * relaySystemError. A layout collective on a comm of several nodes is the
 * hierarchical plan whose node legs are this row's. Here, above the plan
 * layer, because the table picks the builder: a plan knows no route table. */
relayResult_t relayPlanBuild(const planKey* key, relayPlan** out);

/* How many plans relayPlanBuild has built in this process for route at depth (the node legs of a
 * hierarchical plan not counted; depths above 63 count as 63): core's trace line when a plan enters its
 * cache (RELAYCC_DEBUG=2) prints it, and it proves a plan is built once per key (the router prices it,
 * core caches that one; test_rows built_once). */
unsigned long relayPlanBuildCount(int route, int depth);

#ifdef __cplusplus
}
#endif
#endif
