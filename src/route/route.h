/* Route choice: which route and pipeline depth serve a call. A pure function
 * of the call signature and the comm's topology, so every rank chooses alike. */
#ifndef RELAY_ROUTE_H_
#define RELAY_ROUTE_H_

#include "plan/plan.h"

#ifdef __cplusplus
extern "C" {
#endif

struct relayTopo; /* src/topo/topo.h; NULL means "no model: direct" */

/* key->route and key->depth are ignored. Writes the chosen route (never Auto)
 * and depth (>= 1). */
void relayRouteChoose(const planKey* key, const struct relayTopo* topo, int* route, int* depth);

#ifdef __cplusplus
}
#endif
#endif
