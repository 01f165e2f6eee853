/* Route choice: which route and pipeline depth serve a call. A pure function
 * of the call signature and the comm's topology, so every rank chooses alike. */
#ifndef RELAY_ROUTE_H_
#define RELAY_ROUTE_H_

#include "plan/plan.h"
#include "comm/transport.h" /* RELAY_TP_CAP_* */

#ifdef __cplusplus
extern "C" {
#endif

struct relayTopo; /* src/topo/topo.h; NULL means "no model: direct" */

/* caps, in the functions below: the transport's RELAY_TP_CAP_* bits (core
 * passes its transport's; tools and tests say what they model), plus: */
#define RELAY_ROUTE_CAP_PERCALL                                 \
  (1 << 30) /* the call is not captured into a graph: plans pay \
             * topo->hostStepS per step (ranks capture alike) */

/* The routes a call may take, in the order core tries them (api.c): the
 * first whose transport capability is present and whose prepare succeeds on
 * every rank runs it. The last is always direct (it needs nothing and is
 * never declined). Auto lists the router's winner and then the incumbents
 * it displaced, native (where the transport has it) then direct, so that a
 * declined winner hands the call to what would have run without it. */
#define RELAY_ROUTE_MAX_CANDS 4
typedef struct {
  int n;
  int route[RELAY_ROUTE_MAX_CANDS]; /* relayRoute_t, never Auto */
  int depth[RELAY_ROUTE_MAX_CANDS]; /* >= 1 */
} relayRouteList;

/* A call's candidates both ways in one cached lookup: out[0] for a call made
 * directly (caps' PERCALL bit ignored), out[1] for one captured into a graph.
 * key->route and key->depth are ignored; route and depth are the comm's
 * configured ones (relayRouteAuto asks the model; another route is forced,
 * then direct; depth 0 = the depth model's for a pipelined route, else 1,
 * and > 0 forces the first candidate's). A call of another kind than layout lists the plan rows
 * that serve its kind (comm/coll.h; rooted: direct alone). */
/* plans (NULL: not wanted): the plan of out[g]'s first candidate as the router built it to price it,
 * handed to the caller (who frees it or caches it: built once, cached once), else NULL: on a hit in the
 * router's cache, where the router priced nothing (a forced route, another kind than layout), where the
 * first candidate runs no plan (native) or was priced at another depth than a forced one. plans[1] is
 * NULL too where out[1]'s first candidate is out[0]'s: one plan, one key. */
void relayRouteCandidates(const planKey* key, const struct relayTopo* topo, int caps, int route, int depth,
                          relayRouteList out[2], relayPlan* plans[2]);

/* The router's winner alone. With RELAY_TP_CAP_NATIVE, relayRouteNative is a
 * candidate, priced by the baseline model (the model of that very
 * collective), and the incumbent; a route whose capability caps lacks is
 * not one. Writes the chosen route (never Auto, Native only with
 * CAP_NATIVE) and depth (>= 1). */
void relayRouteChoose(const planKey* key, const struct relayTopo* topo, int caps, int* route, int* depth);
/* Both winners in one lookup, caps' PERCALL bit ignored: [0] as with
 * CAP_PERCALL (a call made directly), [1] as without (captured). */
void relayRouteChoosePair(const planKey* key, const struct relayTopo* topo, int caps, int route[2],
                          int depth[2]);

/* Whether relaycc predicts a win over the transport library's own collective
 * (the NCCL interposer's test, src/shim/): 1 when the route chosen for key
 * with RELAY_TP_CAP_NATIVE added to caps is not native. Pure, like
 * relayRouteChoose: every rank gets the same answer for the same call. */
int relayRouteBeatsNative(const planKey* key, const struct relayTopo* topo, int caps);

/* The margin by which a route must beat the native collective where the
 * topology states no model error of its own (topo->modelErr == 0). */
#define RELAY_ROUTE_UNCALIBRATED_MARGIN 0.10

#ifdef __cplusplus
}
#endif
#endif
