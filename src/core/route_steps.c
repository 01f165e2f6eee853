/* Core's half of the routes as rows (core/route_steps.h): each route's
 * prepare and, for the native route, its run. */
#include "core/route_steps.h"

#include "comm/comm.h"
#include "comm/params.h"
#include "route/table.h"
#include "transport/transport.h"

/* A forced one-shot above the comm's gate (what one source stages per
 * destination must fit the slot) is declined, on every rank alike. */
static relayResult_t oneShotPrepare(struct relayComm* c, const relayRouteCall* call, void** handle) {
  (void)handle;
  uint64_t gate = (uint64_t)relayParamInt(c, RELAY_P_ONESHOT_MAX_BYTES);
  if (!relayOneShotSlotFits(call->key, gate)) return relayNotSupported;
  return c->tp->oneshotPrepare(c, (size_t)gate, call->stream);
}

/* The region is sized by the key's tile and ring (the comm's agreed
 * values); the transport's prepare votes on them, so ranks decline
 * together. */
static relayResult_t bwPrepare(struct relayComm* c, const relayRouteCall* call, void** handle) {
  (void)handle;
  int ring = planBwRing(call->key);
  if (ring == 0) return relayNotSupported; /* the builder refused it already; every rank alike */
  return c->tp->bwPrepare(c, planBwTileBytes(call->key), ring, call->stream);
}

/* The sub-communicators of the call's groups (cached by the transport). */
static relayResult_t nativePrepare(struct relayComm* c, const relayRouteCall* call, void** handle) {
  const planKey* k = call->key;
  /* The row's kinds: every rank alike, the key says. */
  if (!relayRouteRowServes(relayRouteRowOf(relayRouteNative), k->coll)) return relayNotSupported;
  return c->tp->nativePrepare(c, k->nGroups, k->nActive, k->ranks, call->stream, handle);
}

static relayResult_t nativeRun(struct relayComm* c, void* handle, const relayRouteCall* call) {
  const planKey* k = call->key;
  return c->tp->native(c, handle, k->coll, call->send, call->recv, call->count, k->dtype, k->op,
                       call->stream);
}

static const relayRouteSteps kSteps[relayNumRoutes] = {
    [relayRouteOneShot] = {oneShotPrepare, NULL},
    [relayRouteNative] = {nativePrepare, nativeRun},
    [relayRouteBw] = {bwPrepare, NULL},
};

const relayRouteSteps* relayRouteStepsOf(int route) {
  static const relayRouteSteps none = {NULL, NULL};
  return (unsigned)route < relayNumRoutes ? &kSteps[route] : &none;
}
