/* Route choice: which route and pipeline depth serve a call. A pure function
 * of the call signature and the comm's topology, so every rank chooses alike. */
#ifndef RELAY_ROUTE_H_
#define RELAY_ROUTE_H_

#include "plan/plan.h"

#ifdef __cplusplus
extern "C" {
#endif

struct relayTopo; /* src/topo/topo.h; NULL means "no model: direct" */

/* What the comm's transport can run besides send/recv plans (core passes
 * its transport's; tools and tests say what they model). */
#define RELAY_ROUTE_CAP_NATIVE 1  /* the library's own collectives (ops native/nativePrepare: NCCL) */
#define RELAY_ROUTE_CAP_ONESHOT 2 /* the one-shot push-reduce (ops oneshotPrepare/oneshot) */
#define RELAY_ROUTE_CAP_PERCALL 4 /* the call is not captured into a graph: plans pay
                                   * topo->hostStepS per step (ranks capture alike) */
#define RELAY_ROUTE_CAP_BW 8      /* the bandwidth route's tiled pushes (ops bwPrepare/bw) */

/* key->route and key->depth are ignored. caps: RELAY_ROUTE_CAP_* bits. With
 * CAP_NATIVE, relayRouteNative is a candidate, priced by the baseline model
 * (the model of that very collective), and the incumbent; without
 * CAP_ONESHOT the one-shot is not one. Writes the chosen route (never Auto,
 * Native only with CAP_NATIVE) and depth (>= 1). */
void relayRouteChoose(const planKey* key, const struct relayTopo* topo, int caps, int* route, int* depth);
/* Both answers in one lookup, caps' PERCALL bit ignored: [0] as with
 * CAP_PERCALL (a call made directly), [1] as without (captured). */
void relayRouteChoosePair(const planKey* key, const struct relayTopo* topo, int caps, int route[2], int depth[2]);

/* The margin by which a route must beat the native collective where the
 * topology states no model error of its own (topo->modelErr == 0). */
#define RELAY_ROUTE_UNCALIBRATED_MARGIN 0.10

#ifdef __cplusplus
}
#endif
#endif
