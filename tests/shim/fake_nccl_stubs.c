/* The fake libnccl.so.2's stubs: every row of src/transport/nccl/nccl_api.h
 * (and its pnccl twin) records its name and succeeds. Weak: fake_nccl.c
 * defines the calls that do something. */
#include "fake_nccl.h"

#include "transport/nccl/nccl_api.h"

/* The stubs take the header's parameters and use none. */
#pragma GCC diagnostic ignored "-Wunused-parameter"

#define REC(name) fakeNcclRecord(name, 0, NULL)

#define FAKE_STUB_(ret, name, params, args)  \
  __attribute__((weak)) ret name params {    \
    REC(#name);                              \
    return ncclSuccess;                      \
  }                                          \
  __attribute__((weak)) ret p##name params { \
    REC("p" #name);                          \
    return ncclSuccess;                      \
  }
RELAY_NCCL_API(FAKE_STUB_)
#undef FAKE_STUB_
#define FAKE_STUB_STR_(ret, name, params, args) \
  __attribute__((weak)) ret name params {       \
    REC(#name);                                 \
    return "fake";                              \
  }                                             \
  __attribute__((weak)) ret p##name params {    \
    REC("p" #name);                             \
    return "fake";                              \
  }
RELAY_NCCL_API_STR(FAKE_STUB_STR_)
#undef FAKE_STUB_STR_
#define FAKE_STUB_VOID_(ret, name, params, args)        \
  __attribute__((weak)) ret name params { REC(#name); } \
  __attribute__((weak)) ret p##name params { REC("p" #name); }
RELAY_NCCL_API_VOID(FAKE_STUB_VOID_)
#undef FAKE_STUB_VOID_
