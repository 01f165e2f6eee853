#include "plan/plan.h"
#include "route/table.h"

relayResult_t relayPlanBuild(const planKey* key, relayPlan** out) {
  *out = NULL;
  const relayRouteRow* row = relayRouteRowOf(key->route);
  /* One schedule serves the rooted collectives, root to each member
   * (direct's builder: plan_direct.c): no helper route for them yet, so any
   * other route answers "not supported" and the caller falls back. */
  if (!row || !row->build || (relayCollRooted(key->coll) && key->route != relayRouteDirect))
    return relayNotSupported;
  planBuilder* b = planBuilderNew(key);
  if (!b) return relaySystemError;
  relayResult_t res = row->build(b);
  if (res == relaySuccess) {
    *out = planBuilderFinish(b);
    if (!*out) res = relaySystemError;
  }
  planBuilderFree(b);
  return res;
}
