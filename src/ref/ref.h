/* Reference executor: runs all ranks' programs of a plan in one process on
 * real data. The test oracle for every route: its output must equal the
 * serial reference. */
#ifndef RELAY_REF_H_
#define RELAY_REF_H_

#include <stddef.h>

#include "plan/plan.h"

#ifdef __cplusplus
extern "C" {
#endif

/* sendbufs[r] / recvbufs[r]: rank r's caller buffers (NULL for helpers; they
 * may alias for in-place calls). Scratch is allocated here and poisoned, so a
 * read of a never-written scratch element shows up as a wrong result.
 * Returns 0, or 1 with a message (a matching fault the checker would also
 * report). */
int relayRefRun(const relayPlan* p, void* const* sendbufs, void* const* recvbufs, char* err, size_t errlen);

#ifdef __cplusplus
}
#endif
#endif
