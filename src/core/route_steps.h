/*
 * Core's half of the routes as rows: what a route needs of a comm. The row
 * itself (route/table.h) is pure: builder, capability, pricing gate. A
 * route that must ready the transport before it runs (one-shot and
 * bandwidth regions, the native route's sub-communicators) has a prepare
 * here, and a row without a plan (native) its run, because both reach the
 * comm's transport and only core drives a comm (CONTRIBUTING.md: floors).
 */
#ifndef RELAY_CORE_ROUTE_STEPS_H_
#define RELAY_CORE_ROUTE_STEPS_H_

#include <stddef.h>

#include "plan/plan.h"
#include "relaycc.h"

#ifdef __cplusplus
extern "C" {
#endif

struct relayComm;

/* What a route's prepare and run see of the call. */
typedef struct {
  const planKey* key; /* route and depth: the candidate's */
  const void* send;
  void* recv;
  size_t count; /* this rank's group's count; 0 on a rank active in no group and in rooted calls */
  relayStream_t stream;
} relayRouteCall;

typedef struct {
  /* COLLECTIVE over all comm ranks, on the same call, after the plan (if
   * any) is built: readies the transport. relayNotSupported = declined, on
   * every rank alike (voted, or derived from state all ranks share): core
   * tries the next candidate. Any other error fails the comm. NULL: nothing
   * to prepare. *handle goes to run. */
  relayResult_t (*prepare)(struct relayComm* comm, const relayRouteCall* call, void** handle);
  /* A row without a builder runs the call here (with its handle). */
  relayResult_t (*run)(struct relayComm* comm, void* handle, const relayRouteCall* call);
} relayRouteSteps;

/* The steps of route (a relayRoute_t); never NULL: both members NULL where
 * the route's plan needs nothing readied (direct, relay) and outside the
 * enum. */
const relayRouteSteps* relayRouteStepsOf(int route);

#ifdef __cplusplus
}
#endif
#endif
