/*
 * NCCL resolved at run time (nccl_api.h says why): one table of function
 * pointers, filled once per process from the library the process uses.
 */
#include "comm/params.h"
#include "transport/nccl/nccl_api.h"

#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>

#include "comm/common.h"
#include "transport/nccl.h"

relayNcclLib relayNccl;

static pthread_mutex_t gLock = PTHREAD_MUTEX_INITIALIZER;
static int gLoaded; /* under gLock */
static const char* gPathArg;
static relayResult_t gResult;
static char gError[sizeof relayNccl.path + 256]; /* the first answer's message, repeated to every caller */

/* Open the library: the explicit path, the copy already loaded, the default. */
static void* openNccl(const char** tried) {
  const char* path = gPathArg && *gPathArg ? gPathArg : relayParamEnvText(RELAY_P_NCCL_LIB);
  if (path) {
    *tried = path;
    return dlopen(path, RTLD_NOW | RTLD_LOCAL);
  }
  /* The copy the process already loaded, in whichever scope (PyTorch's own
   * libnccl.so.2 is loaded RTLD_LOCAL from its wheel; a ROCm torch loads its
   * librccl the same way): binding to another copy would run two NCCLs over
   * one communicator handle. RCCL exports NCCL's names (nccl_abi.h). */
  *tried = RELAY_NCCL_SONAME;
  void* h = dlopen(RELAY_NCCL_SONAME, RTLD_NOW | RTLD_NOLOAD);
  return h ? h : dlopen(RELAY_NCCL_SONAME, RTLD_NOW | RTLD_LOCAL);
}

static void loadOnce(void) {
  const char* tried = NULL;
  void* h = openNccl(&tried);
  if (!h) {
    const char* why = dlerror();
    gResult = relaySystemError;
    snprintf(gError, sizeof gError,
             "relaycc: cannot load " RELAY_NCCL_NAME
             " (%s): %s; set RELAYCC_NCCL_LIB (under the shim: "
             "RELAYCC_SHIM_NCCL) to its path",
             tried, why ? why : "not found");
    return;
  }
  /* Every function of the header and its profiling twin; those an older NCCL
   * lacks stay NULL (the forwarders and relaycc check what they call). */
#define RELAY_NCCL_RESOLVE_(ret, name, params, args) \
  *(void**)&relayNccl.name = dlsym(h, #name);        \
  *(void**)&relayNccl.p##name = dlsym(h, "p" #name);
  RELAY_NCCL_API_ALL(RELAY_NCCL_RESOLVE_)
#undef RELAY_NCCL_RESOLVE_
  Dl_info info;
  const char* where = tried;
  if (relayNccl.ncclGetVersion && dladdr(*(void**)&relayNccl.ncclGetVersion, &info) && info.dli_fname)
    where = info.dli_fname;
  snprintf(relayNccl.path, sizeof relayNccl.path, "%s", where);
  ncclResult_t r = relayNccl.ncclGetVersion ? relayNccl.ncclGetVersion(&relayNccl.version) : ncclSystemError;
  if (r != ncclSuccess) {
    gResult = relaySystemError;
    snprintf(gError, sizeof gError, "relaycc: %s is not an NCCL library: %s", relayNccl.path,
             relayNccl.ncclGetVersion ? "ncclGetVersion failed" : "it has no ncclGetVersion");
    dlclose(h);
    memset(&relayNccl, 0, sizeof relayNccl);
    return;
  }
  relayNccl.handle = h;
  gResult = relaySuccess;
  const char* missing = NULL;
#define RELAY_NCCL_REQUIRE_(name) \
  if (!missing && !relayNccl.name) missing = #name;
  RELAY_NCCL_NEEDED(RELAY_NCCL_REQUIRE_)
#undef RELAY_NCCL_REQUIRE_
  relayNccl.usable = !missing;
  if (missing)
    snprintf(relayNccl.unusable, sizeof relayNccl.unusable,
             "NCCL %d (%s) has no %s, which relaycc's comms need", relayNccl.version, relayNccl.path,
             missing);
}

relayResult_t relayNcclOpen(const char* path) {
  pthread_mutex_lock(&gLock);
  if (!gLoaded) {
    gPathArg = path;
    loadOnce();
    gLoaded = 1;
  }
  pthread_mutex_unlock(&gLock);
  if (gResult != relaySuccess) return relaySetError(NULL, gResult, "%s", gError);
  return relaySuccess;
}

relayResult_t relayNcclLoad(const char* path) {
  RELAY_CHECK(relayNcclOpen(path));
  if (!relayNccl.usable) return relaySetError(NULL, relaySystemError, "relaycc: %s", relayNccl.unusable);
  return relaySuccess;
}

void relayNcclAbortComm(ncclComm_t nccl) {
  if (nccl && relayNccl.ncclCommAbort) relayNccl.ncclCommAbort(nccl);
}
