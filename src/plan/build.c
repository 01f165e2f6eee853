#include "plan/plan.h"
#include "plan/routes.h"

relayResult_t relayPlanBuild(const planKey* key, relayPlan** out) {
  *out = NULL;
  planBuilder* b = planBuilderNew(key);
  if (!b) return relaySystemError;
  relayResult_t res;
  if (relayCollRooted(key->coll)) {
    /* One schedule, root to each member: no helper route for them yet, so
     * any other route answers "not supported" and the caller falls back. */
    res = key->route == relayRouteDirect ? planBuildScatter(b) : relayNotSupported;
  } else {
    switch (key->route) {
      case relayRouteDirect: res = planBuildDirect(b); break;
      case relayRouteRelay: res = planBuildRelay(b); break;
      case relayRouteOneShot: res = planBuildOneShot(b); break;
      case relayRouteBw: res = planBuildBw(b); break;
      default: res = relayNotSupported; break;
    }
  }
  if (res == relaySuccess) {
    *out = planBuilderFinish(b);
    if (!*out) res = relaySystemError;
  }
  planBuilderFree(b);
  return res;
}
