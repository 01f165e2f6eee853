/* Until the cost model lands (issue 5) every call takes the direct route. */
#include "route/route.h"

void relayRouteChoose(const planKey* key, const struct relayTopo* topo, int* route, int* depth) {
  (void)key;
  (void)topo;
  *route = relayRouteDirect;
  *depth = 1;
}
