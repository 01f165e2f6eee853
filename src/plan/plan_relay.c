/* Relay routes: not built yet (issue 3). Answering "not supported" makes every
 * call fall back to the direct route. */
#include "plan/routes.h"

relayResult_t planBuildRelay(planBuilder* b) {
  (void)b;
  return relayNotSupported;
}
