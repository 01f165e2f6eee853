/* The executor: walks one rank's program of a plan against its transport. One
 * executor for every route: a route is only a plan. */
#ifndef RELAY_EXEC_H_
#define RELAY_EXEC_H_

#include "plan/plan.h"

#ifdef __cplusplus
extern "C" {
#endif

struct relayComm;

relayResult_t relayExecRun(struct relayComm* comm, const relayPlan* plan, const void* sendbuff,
                           void* recvbuff, relayStream_t stream);

#ifdef __cplusplus
}
#endif
#endif
