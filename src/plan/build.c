#include "plan/plan.h"
#include "plan/routes.h"

relayResult_t relayPlanBuild(const planKey* key, relayPlan** out) {
  *out = NULL;
  planBuilder* b = planBuilderNew(key);
  if (!b) return relaySystemError;
  relayResult_t res;
  switch (key->route) {
    case relayRouteDirect: res = planBuildDirect(b); break;
    case relayRouteRelay: res = planBuildRelay(b); break;
    default: res = relayNotSupported; break;
  }
  if (res == relaySuccess) {
    *out = planBuilderFinish(b);
    if (!*out) res = relaySystemError;
  }
  planBuilderFree(b);
  return res;
}
