/*
 * NCCL's types as relaycc's GPU code sees them. The CUDA build takes nccl.h.
 * The HIP build runs over RCCL, which exports NCCL's functions under NCCL's
 * names with NCCL's ABI, and no RCCL header is needed or packaged: the few
 * types, enums and constants relaycc uses are declared here, once, with
 * NCCL's values (nccl.h 2.28.9; RCCL's rccl.h has the same ones). The library
 * itself is resolved at run time (nccl_lib.c: RELAY_NCCL_SONAME).
 */
#ifndef RELAY_NCCL_ABI_H_
#define RELAY_NCCL_ABI_H_

#include "gpu_port.h"

#ifndef RELAY_HAVE_HIP
#include <nccl.h>

#define RELAY_NCCL_SONAME "libnccl.so.2"
#define RELAY_NCCL_NAME "NCCL"

#else
#include <limits.h>
#include <stddef.h>

#define RELAY_NCCL_SONAME "librccl.so.1"
#define RELAY_NCCL_NAME "RCCL"

/* The ABI version these declarations are (ncclConfig_t below is 2.14's
 * layout, which every later NCCL and RCCL accepts: they read a config up to
 * the fields its version field says it has). */
#define NCCL_MAJOR 2
#define NCCL_MINOR 14
#define NCCL_PATCH 3
#define NCCL_VERSION(X, Y, Z) (((X) <= 2 && (Y) <= 8) ? (X)*1000 + (Y)*100 + (Z) : (X)*10000 + (Y)*100 + (Z))
#define NCCL_VERSION_CODE NCCL_VERSION(NCCL_MAJOR, NCCL_MINOR, NCCL_PATCH)

typedef struct ncclComm* ncclComm_t;
typedef struct ncclWindow_vidmem* ncclWindow_t;
typedef struct ncclSimInfo_v22200 ncclSimInfo_t; /* only pointed to (ncclGroupSimulateEnd) */

#define NCCL_UNIQUE_ID_BYTES 128
typedef struct {
  char internal[NCCL_UNIQUE_ID_BYTES];
} ncclUniqueId;

typedef enum {
  ncclSuccess = 0,
  ncclUnhandledCudaError = 1,
  ncclSystemError = 2,
  ncclInternalError = 3,
  ncclInvalidArgument = 4,
  ncclInvalidUsage = 5,
  ncclRemoteError = 6,
  ncclInProgress = 7,
  ncclNumResults = 8
} ncclResult_t;

#define NCCL_CONFIG_UNDEF_INT INT_MIN
#define NCCL_CONFIG_UNDEF_PTR NULL
#define NCCL_SPLIT_NOCOLOR -1

typedef struct ncclConfig_v21400 {
  size_t size;
  unsigned int magic;
  unsigned int version;
  int blocking;
  int cgaClusterSize;
  int minCTAs;
  int maxCTAs;
  const char* netName;
} ncclConfig_t;
#define NCCL_CONFIG_INITIALIZER                                                                        \
  {                                                                                                    \
    sizeof(ncclConfig_t), 0xcafebeef, NCCL_VERSION_CODE, NCCL_CONFIG_UNDEF_INT, NCCL_CONFIG_UNDEF_INT, \
        NCCL_CONFIG_UNDEF_INT, NCCL_CONFIG_UNDEF_INT, NCCL_CONFIG_UNDEF_PTR                            \
  }

/* int-sized, as NCCL's (whose ncclMaxRedOp is the largest int). */
typedef enum {
  ncclSum = 0,
  ncclProd = 1,
  ncclMax = 2,
  ncclMin = 3,
  ncclAvg = 4,
  ncclNumOps = 5,
  ncclMaxRedOp = 0x7fffffff
} ncclRedOp_t;

typedef enum {
  ncclInt8 = 0,
  ncclChar = 0,
  ncclUint8 = 1,
  ncclInt32 = 2,
  ncclInt = 2,
  ncclUint32 = 3,
  ncclInt64 = 4,
  ncclUint64 = 5,
  ncclFloat16 = 6,
  ncclHalf = 6,
  ncclFloat32 = 7,
  ncclFloat = 7,
  ncclFloat64 = 8,
  ncclDouble = 8,
  ncclBfloat16 = 9
} ncclDataType_t;

typedef enum { ncclScalarDevice = 0, ncclScalarHostImmediate = 1 } ncclScalarResidence_t;

#endif /* RELAY_HAVE_HIP */
#endif /* RELAY_NCCL_ABI_H_ */
