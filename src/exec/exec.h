/* The executor: walks one rank's program of a plan against its transport. One
 * executor for every route: a route is only a plan. */
#ifndef RELAY_EXEC_H_
#define RELAY_EXEC_H_

#include "plan/plan.h"

#ifdef __cplusplus
extern "C" {
#endif

struct relayComm;
struct relayWindow;

/* One call's facts the executor reads, passed by core (never left on the comm): the caller's buffers,
 * the direct window they lie in (core/window.c: relayWindowMatch; NULL: the staged path) with the
 * offsets peers use, and the stream. */
typedef struct {
  const void* send;
  void* recv;
  const struct relayWindow* win;
  size_t sendOff, recvOff;
  relayStream_t stream;
} relayExecCall;

relayResult_t relayExecRun(struct relayComm* comm, const relayPlan* plan, const relayExecCall* call);

#ifdef __cplusplus
}
#endif
#endif
