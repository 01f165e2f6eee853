/* Shared by every layer: datatype facts, error recording, env parsing, clocks. */
#ifndef RELAY_COMMON_H_
#define RELAY_COMMON_H_

#include <stddef.h>
#include <stdint.h>

#include "relaycc.h"

#ifdef __cplusplus
extern "C" {
#endif

struct relayComm;

size_t relayTypeSize(relayDataType_t dt); /* 0 for an unknown type */
const char* relayTypeName(relayDataType_t dt);
const char* relayOpName(relayRedOp_t op);
const char* relayRouteName(int route);
int relayParseType(const char* s, relayDataType_t* out); /* 0 on success */
int relayParseOp(const char* s, relayRedOp_t* out);
int relayParseRoute(const char* s, int* out);
/* Comparison tolerance for floats, relative to the largest |input| summed. */
double relayTypeTolerance(relayDataType_t dt);

/* Record an error on the comm (comm may be NULL) and return result. The text
 * should name the argument, the rank and the step. */
relayResult_t relaySetError(struct relayComm* comm, relayResult_t result, const char* fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* Environment: returns def when the variable is unset or empty. */
long relayEnvLong(const char* name, long def);
const char* relayEnvStr(const char* name, const char* def);

uint64_t relayNowNs(void); /* CLOCK_MONOTONIC */

#define RELAY_CHECK(call)                    \
  do {                                       \
    relayResult_t relay_res_ = (call);       \
    if (relay_res_ != relaySuccess) return relay_res_; \
  } while (0)

#ifdef __cplusplus
}
#endif
#endif
