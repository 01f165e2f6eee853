#include <stdio.h>
#include "comm/common.h"
#include "comm/params.h"
#include "transport/shm.h"
int main(void) {
  relayParams p;
  int bad;
  char why[160];
  relayParamsResolve(&p, NULL, &bad, why, sizeof why);
  for (int k = 0; k < 5; k++) {
    double f, g, s;
    uint64_t t0 = relayNowNs();
    int ok = relayShmCmaCosts(&p, &f, &g, &s);
    uint64_t t1 = relayNowNs();
    printf("ok %d: fixed %.3f us, page %.3f us, pass %.3f us -> floor %.0f; took %.1f us\n", ok, f * 1e6,
           g * 1e6, s * 1e6, relayShmCmaPairFloor(f, g, s), (t1 - t0) / 1e3);
  }
  return 0;
}
