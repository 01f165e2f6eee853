/*
 * Routes as rows: one row per route says everything the library needs to
 * know of it, so that adding a route touches this table and its builder.
 * The router (route.c) prices the rows a call's transport can run and hands
 * core an ordered list of candidates; core (api.c) walks it and runs the
 * first whose capability is present and whose prepare succeeds on every
 * rank; relayPlanBuild (defined in table.c) runs the row's builder;
 * relayRouteName and relayParseRoute read the names.
 */
#ifndef RELAY_ROUTE_TABLE_H_
#define RELAY_ROUTE_TABLE_H_

#include "plan/plan.h"

#ifdef __cplusplus
extern "C" {
#endif

struct relayComm;

/* What a row's prepare and run see of the call. */
typedef struct {
  const planKey* key; /* route and depth: the candidate's */
  const void* send;
  void* recv;
  size_t count; /* this rank's group's count; 0 on a rank active in no group and in rooted calls */
  relayStream_t stream;
} relayRouteCall;

/* Row flags, read by the router. */
enum {
  /* Priced at depth 1 and at the depth model's depth (route/depth.c). */
  RELAY_ROW_PIPELINED = 1,
  /* Without a model of the node, taken where its plan builds (ahead of
   * native and direct): one launch instead of a group plus a reduce. */
  RELAY_ROW_UNMODELLED = 2,
  /* One kernel per call: a call outside a graph pays no per-step host cost
   * (topo->hostStepS), as the native collective does not. */
  RELAY_ROW_ONE_LAUNCH = 4,
};

typedef struct {
  int route;        /* relayRoute_t: the row's index in the table */
  const char* name; /* RELAYCC_ROUTE's spelling (relayRouteName) */
  /* The plan builder; NULL: the route runs no plan but the transport's own
   * collective (native), which the router prices by the baseline model and
   * keeps as the incumbent. */
  relayResult_t (*build)(planBuilder* b);
  unsigned caps; /* RELAY_TP_CAP_* the transport must have (0: any) */
  int flags;     /* RELAY_ROW_* */
  /* The router's gate (NULL: every key): 0 where the route is not priced
   * for this key, though its builder might serve it (a forced route still
   * asks the builder). A pure function of the key and process-wide limits. */
  int (*priced)(const planKey* key, int caps); /* caps: as the router's (RELAY_ROUTE_CAP_GATED) */
  /* COLLECTIVE over all comm ranks, on the same call, after the plan (if
   * any) is built: readies the transport. relayNotSupported = declined, on
   * every rank alike (voted, or derived from state all ranks share): core
   * tries the next candidate. Any other error fails the comm. NULL: nothing
   * to prepare. *handle goes to run. */
  relayResult_t (*prepare)(struct relayComm* comm, const relayRouteCall* call, void** handle);
  /* A row without a builder runs the call here (with its handle). */
  relayResult_t (*run)(struct relayComm* comm, void* handle, const relayRouteCall* call);
} relayRouteRow;

/* The row of route (a relayRoute_t), NULL for auto and out-of-range values. */
const relayRouteRow* relayRouteRowOf(int route);

#ifdef __cplusplus
}
#endif
#endif
