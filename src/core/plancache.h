/* Plans cached per call signature, so a steady-state call costs a hash and a
 * compare, not a rebuild (invariant 7: the layer stays thin). */
#ifndef RELAY_PLANCACHE_H_
#define RELAY_PLANCACHE_H_

#include "plan/plan.h"

struct relayPlanCache;

struct relayPlanCache* relayPlanCacheNew(void);
void relayPlanCacheFree(struct relayPlanCache* c);
/* Returns the cached plan of key or NULL. */
const relayPlan* relayPlanCacheFind(struct relayPlanCache* c, const planKey* key);
/* Takes ownership of plan (returns 0), evicting the least recently used entry
 * when full; returns -1 without taking it when out of memory. */
int relayPlanCacheAdd(struct relayPlanCache* c, const planKey* key, relayPlan* plan);

#endif
