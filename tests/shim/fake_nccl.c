/*
 * A fake libnccl.so.2 for the shim's CPU tests: every function of nccl.h
 * exists (fake_nccl_stubs.c) and records its call; the ones a test or the shim's votes need really work,
 * across the forked processes of one test, in host memory: communicators over one POSIX shm segment named by
 * the unique id, and the four collectives (reductions by relayHostReduce, so forwarded results match the
 * serial reference bit for bit).
 */
#include "fake_nccl.h"

#include <fcntl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include "reduce_host.h"

/* ---- records ------------------------------------------------------------- */

/* Calls come from several threads in the thread test (test_shim's threads case): recorded under a lock. */
static fakeNcclCall gCalls[FAKE_NCCL_MAX_CALLS];
static int gNumCalls;
static pthread_mutex_t gRecLock = PTHREAD_MUTEX_INITIALIZER;

void fakeNcclRecord(const char* name, int n, const uintptr_t* a) {
  pthread_mutex_lock(&gRecLock);
  if (gNumCalls < FAKE_NCCL_MAX_CALLS) {
    fakeNcclCall* c = &gCalls[gNumCalls++];
    snprintf(c->name, sizeof c->name, "%s", name);
    c->nargs = n;
    for (int i = 0; i < n && i < FAKE_NCCL_MAX_ARGS; i++) c->a[i] = a[i];
  }
  pthread_mutex_unlock(&gRecLock);
}
#define REC(name, ...)                                         \
  do {                                                         \
    uintptr_t a_[] = {__VA_ARGS__};                            \
    fakeNcclRecord(name, (int)(sizeof a_ / sizeof a_[0]), a_); \
  } while (0)

int fakeNcclNumCalls(void) {
  pthread_mutex_lock(&gRecLock);
  int n = gNumCalls;
  pthread_mutex_unlock(&gRecLock);
  return n;
}
const fakeNcclCall* fakeNcclGetCall(int i) { return i >= 0 && i < fakeNcclNumCalls() ? &gCalls[i] : NULL; }
void fakeNcclReset(void) { gNumCalls = 0; }

/* ---- communicators ------------------------------------------------------- */

/* One segment per communicator: a barrier and one slot per rank. */
#define FAKE_SLOT_BYTES ((size_t)1 << 20)
#define FAKE_MAX_RANKS 16

typedef struct {
  atomic_uint arrived;
  atomic_uint generation;
} fakeSeg;

struct ncclComm {
  int nranks, rank;
  char name[NCCL_UNIQUE_ID_BYTES + 1];
  fakeSeg* seg;
  size_t segBytes;
  unsigned gen; /* barriers passed */
};

static char* slotOf(ncclComm_t c, int q) { return (char*)c->seg + 64 + (size_t)q * FAKE_SLOT_BYTES; }

/* All ranks of the comm meet; 0 when one does not come within 20 s. */
static int barrier(ncclComm_t c) {
  unsigned gen = atomic_load(&c->seg->generation);
  if (atomic_fetch_add(&c->seg->arrived, 1) + 1 == (unsigned)c->nranks) {
    atomic_store(&c->seg->arrived, 0);
    atomic_fetch_add(&c->seg->generation, 1);
    return 1;
  }
  struct timespec t0, t;
  clock_gettime(CLOCK_MONOTONIC, &t0);
  while (atomic_load(&c->seg->generation) == gen) {
    clock_gettime(CLOCK_MONOTONIC, &t);
    if (t.tv_sec - t0.tv_sec > 20) {
      fprintf(stderr, "fake nccl: rank %d of %s: a peer did not arrive within 20 s\n", c->rank, c->name);
      return 0;
    }
    usleep(50);
  }
  return 1;
}

static unsigned gIdSerial;

ncclResult_t ncclGetUniqueId(ncclUniqueId* id) {
  REC("ncclGetUniqueId", (uintptr_t)id);
  memset(id, 0, sizeof *id);
  snprintf(id->internal, sizeof id->internal, "/fakenccl-%d-%u", (int)getpid(), gIdSerial++);
  return ncclSuccess;
}

static ncclResult_t initComm(ncclComm_t* out, int nranks, ncclUniqueId id, int rank) {
  if (!out || nranks < 1 || nranks > FAKE_MAX_RANKS || rank < 0 || rank >= nranks) return ncclInvalidArgument;
  ncclComm_t c = calloc(1, sizeof *c);
  if (!c) return ncclSystemError;
  c->nranks = nranks;
  c->rank = rank;
  snprintf(c->name, sizeof c->name, "%s", id.internal);
  c->segBytes = 64 + (size_t)nranks * FAKE_SLOT_BYTES;
  int fd = shm_open(c->name, O_CREAT | O_RDWR, 0600);
  if (fd < 0 || ftruncate(fd, (off_t)c->segBytes) != 0) {
    if (fd >= 0) close(fd);
    free(c);
    return ncclSystemError;
  }
  c->seg = mmap(NULL, c->segBytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  close(fd);
  if (c->seg == MAP_FAILED) {
    free(c);
    return ncclSystemError;
  }
  if (!barrier(c)) return ncclSystemError; /* every rank mapped it: the name can go */
  if (rank == 0) shm_unlink(c->name);
  *out = c;
  return ncclSuccess;
}

ncclResult_t ncclCommInitRank(ncclComm_t* comm, int nranks, ncclUniqueId id, int rank) {
  REC("ncclCommInitRank", (uintptr_t)comm, (uintptr_t)nranks, (uintptr_t)rank);
  return initComm(comm, nranks, id, rank);
}

ncclResult_t ncclCommInitRankConfig(ncclComm_t* comm, int nranks, ncclUniqueId id, int rank,
                                    ncclConfig_t* cfg) {
  REC("ncclCommInitRankConfig", (uintptr_t)comm, (uintptr_t)nranks, (uintptr_t)rank, (uintptr_t)cfg);
  return initComm(comm, nranks, id, rank);
}

static ncclResult_t freeComm(ncclComm_t c) {
  if (!c) return ncclInvalidArgument;
  munmap(c->seg, c->segBytes);
  free(c);
  return ncclSuccess;
}

ncclResult_t ncclCommDestroy(ncclComm_t comm) {
  REC("ncclCommDestroy", (uintptr_t)comm);
  return freeComm(comm);
}

ncclResult_t ncclCommAbort(ncclComm_t comm) {
  REC("ncclCommAbort", (uintptr_t)comm);
  return freeComm(comm);
}

ncclResult_t ncclCommFinalize(ncclComm_t comm) {
  REC("ncclCommFinalize", (uintptr_t)comm);
  return ncclSuccess;
}

ncclResult_t ncclCommCount(const ncclComm_t comm, int* count) {
  REC("ncclCommCount", (uintptr_t)comm, (uintptr_t)count);
  *count = comm->nranks;
  return ncclSuccess;
}

ncclResult_t ncclCommUserRank(const ncclComm_t comm, int* rank) {
  REC("ncclCommUserRank", (uintptr_t)comm, (uintptr_t)rank);
  *rank = comm->rank;
  return ncclSuccess;
}

ncclResult_t ncclCommCuDevice(const ncclComm_t comm, int* device) {
  REC("ncclCommCuDevice", (uintptr_t)comm, (uintptr_t)device);
  *device = comm->rank;
  return ncclSuccess;
}

ncclResult_t ncclCommGetAsyncError(ncclComm_t comm, ncclResult_t* err) {
  REC("ncclCommGetAsyncError", (uintptr_t)comm, (uintptr_t)err);
  *err = ncclSuccess;
  return ncclSuccess;
}

/* The release this copy stands in for (tests/shim/shim.cmake builds one per version). */
#ifndef FAKE_NCCL_VERSION
#define FAKE_NCCL_VERSION NCCL_VERSION_CODE
#endif

ncclResult_t ncclGetVersion(int* version) {
  REC("ncclGetVersion", (uintptr_t)version);
  *version = FAKE_NCCL_VERSION;
  return ncclSuccess;
}

const char* ncclGetErrorString(ncclResult_t r) {
  REC("ncclGetErrorString", (uintptr_t)r);
  return r == ncclSuccess ? "no error" : "fake error";
}

const char* ncclGetLastError(ncclComm_t comm) {
  REC("ncclGetLastError", (uintptr_t)comm);
  return "";
}

/* ---- collectives in host memory ------------------------------------------ */

static size_t typeSize(ncclDataType_t dt) {
  static const size_t sizes[] = {1, 1, 4, 4, 8, 8, 2, 4, 8, 2}; /* int8 .. bfloat16, as relayDataType_t */
  return (unsigned)dt < sizeof sizes / sizeof sizes[0] ? sizes[dt] : 0;
}

/* Reduce element block `off` of every rank's slot into dst. */
static void reduceSlots(ncclComm_t c, void* dst, size_t off, size_t count, ncclDataType_t dt,
                        ncclRedOp_t op) {
  const void* srcs[FAKE_MAX_RANKS];
  for (int q = 0; q < c->nranks; q++) srcs[q] = slotOf(c, q) + off;
  int avg = op == ncclAvg;
  relayHostReduce(dst, srcs, c->nranks, count, (relayDataType_t)dt, avg ? relaySum : (relayRedOp_t)op,
                  avg ? c->nranks : 1);
}

/* send of sendBytes into this rank's slot, then out = f(all slots). */
static ncclResult_t collective(int coll, const void* send, void* recv, size_t count, ncclDataType_t dt,
                               ncclRedOp_t op, ncclComm_t c) {
  size_t es = typeSize(dt), n = (size_t)c->nranks;
  size_t sendElems = coll == 0 ? count : coll == 2 ? count : count * n; /* AG, AR: count; RS, A2A: n blocks */
  if (!es || sendElems * es > FAKE_SLOT_BYTES) return ncclInvalidArgument;
  memcpy(slotOf(c, c->rank), send, sendElems * es);
  if (!barrier(c)) return ncclSystemError;
  switch (coll) {
    case 0: /* all-gather */
      for (int q = 0; q < c->nranks; q++) memcpy((char*)recv + q * count * es, slotOf(c, q), count * es);
      break;
    case 1: reduceSlots(c, recv, (size_t)c->rank * count * es, count, dt, op); break; /* reduce-scatter */
    case 2: reduceSlots(c, recv, 0, count, dt, op); break;                            /* all-reduce */
    default:                                                                          /* all-to-all */
      for (int q = 0; q < c->nranks; q++)
        memcpy((char*)recv + q * count * es, slotOf(c, q) + (size_t)c->rank * count * es, count * es);
  }
  return barrier(c) ? ncclSuccess : ncclSystemError; /* nobody rewrites a slot still being read */
}

ncclResult_t ncclAllGather(const void* send, void* recv, size_t count, ncclDataType_t dt, ncclComm_t comm,
                           cudaStream_t stream) {
  REC("ncclAllGather", (uintptr_t)send, (uintptr_t)recv, count, (uintptr_t)dt, 0, (uintptr_t)comm,
      (uintptr_t)stream);
  return collective(0, send, recv, count, dt, ncclSum, comm);
}

ncclResult_t ncclReduceScatter(const void* send, void* recv, size_t count, ncclDataType_t dt, ncclRedOp_t op,
                               ncclComm_t comm, cudaStream_t stream) {
  REC("ncclReduceScatter", (uintptr_t)send, (uintptr_t)recv, count, (uintptr_t)dt, (uintptr_t)op,
      (uintptr_t)comm, (uintptr_t)stream);
  return collective(1, send, recv, count, dt, op, comm);
}

ncclResult_t ncclAllReduce(const void* send, void* recv, size_t count, ncclDataType_t dt, ncclRedOp_t op,
                           ncclComm_t comm, cudaStream_t stream) {
  REC("ncclAllReduce", (uintptr_t)send, (uintptr_t)recv, count, (uintptr_t)dt, (uintptr_t)op, (uintptr_t)comm,
      (uintptr_t)stream);
  return collective(2, send, recv, count, dt, op, comm);
}

ncclResult_t ncclAlltoAll(const void* send, void* recv, size_t count, ncclDataType_t dt, ncclComm_t comm,
                          cudaStream_t stream) {
  REC("ncclAlltoAll", (uintptr_t)send, (uintptr_t)recv, count, (uintptr_t)dt, 0, (uintptr_t)comm,
      (uintptr_t)stream);
  return collective(3, send, recv, count, dt, ncclSum, comm);
}

/* Recorded with their arguments (the forwarding test compares them); they move nothing. */
ncclResult_t ncclSend(const void* send, size_t count, ncclDataType_t dt, int peer, ncclComm_t comm,
                      cudaStream_t stream) {
  REC("ncclSend", (uintptr_t)send, count, (uintptr_t)dt, (uintptr_t)peer, (uintptr_t)comm, (uintptr_t)stream);
  return ncclSuccess;
}

ncclResult_t ncclRecv(void* recv, size_t count, ncclDataType_t dt, int peer, ncclComm_t comm,
                      cudaStream_t stream) {
  REC("ncclRecv", (uintptr_t)recv, count, (uintptr_t)dt, (uintptr_t)peer, (uintptr_t)comm, (uintptr_t)stream);
  return ncclSuccess;
}

ncclResult_t ncclBroadcast(const void* send, void* recv, size_t count, ncclDataType_t dt, int root,
                           ncclComm_t comm, cudaStream_t stream) {
  REC("ncclBroadcast", (uintptr_t)send, (uintptr_t)recv, count, (uintptr_t)dt, (uintptr_t)root,
      (uintptr_t)comm, (uintptr_t)stream);
  return ncclSuccess;
}

ncclResult_t ncclGroupStart(void) {
  REC("ncclGroupStart", 0);
  return ncclSuccess;
}

ncclResult_t ncclGroupEnd(void) {
  REC("ncclGroupEnd", 0);
  return ncclSuccess;
}

ncclResult_t ncclCommSplit(ncclComm_t comm, int color, int key, ncclComm_t* newcomm, ncclConfig_t* config) {
  REC("ncclCommSplit", (uintptr_t)comm, (uintptr_t)color, (uintptr_t)key, (uintptr_t)newcomm,
      (uintptr_t)config);
  if (newcomm) *newcomm = NULL; /* the fake splits nothing: every rank gets NCCL_SPLIT_NOCOLOR's answer */
  return ncclSuccess;
}
