/*
 * The interposer's forwarders: every function of nccl.h (and its pnccl twin)
 * calls the real library's through the table, unchanged. They are weak:
 * shim.c defines the calls it takes over (init, destroy, groups, the four
 * collectives, async errors), and the linker keeps those.
 */
#include "shim/shim.h"

#define SHIM_FWD_(ret, name, params, args)                                           \
  __attribute__((weak)) ret name params {                                            \
    if (!relayShimReady() || !relayNccl.name) return relayShimMissing(#name);        \
    return relayNccl.name args;                                                      \
  }                                                                                  \
  __attribute__((weak)) ret p##name params {                                         \
    if (!relayShimReady() || !relayNccl.p##name) return relayShimMissing("p" #name); \
    return relayNccl.p##name args;                                                   \
  }
RELAY_NCCL_API(SHIM_FWD_)
#undef SHIM_FWD_

#define SHIM_FWD_STR_(ret, name, params, args)                                          \
  __attribute__((weak)) ret name params {                                               \
    if (!relayShimReady() || !relayNccl.name) return relayShimMissingStr(#name);        \
    return relayNccl.name args;                                                         \
  }                                                                                     \
  __attribute__((weak)) ret p##name params {                                            \
    if (!relayShimReady() || !relayNccl.p##name) return relayShimMissingStr("p" #name); \
    return relayNccl.p##name args;                                                      \
  }
RELAY_NCCL_API_STR(SHIM_FWD_STR_)
#undef SHIM_FWD_STR_

#define SHIM_FWD_VOID_(ret, name, params, args)                        \
  __attribute__((weak)) ret name params {                              \
    if (relayShimReady() && relayNccl.name) relayNccl.name args;       \
  }                                                                    \
  __attribute__((weak)) ret p##name params {                           \
    if (relayShimReady() && relayNccl.p##name) relayNccl.p##name args; \
  }
RELAY_NCCL_API_VOID(SHIM_FWD_VOID_)
#undef SHIM_FWD_VOID_
