/* What the interposer's two files share (shim.c: state and overrides;
 * shim_fwd.c: the forwarders). Internal to src/shim. */
#ifndef RELAY_SHIM_H_
#define RELAY_SHIM_H_

#include "transport/nccl/nccl_api.h"

/* Load the real NCCL and read the settings, once per process; 1 when
 * relayNccl is usable. */
int relayShimReady(void);
/* What a call returns when the real library lacks its function or could not
 * be loaded (printed once per name). */
ncclResult_t relayShimMissing(const char* name);
const char* relayShimMissingStr(const char* name);

#endif
