/*
 * The NCCL transport's init part: it attaches to a comm core created
 * (src/core/init_nccl.c) and never calls up. The data path is
 * nccl_transport.c.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "comm/comm.h"
#include "comm/common.h"
#include "comm/params.h"
#include "comm/vote.h"
#include "relaycc_nccl.h"
#include "topo/topo.h"
#include "transport/nccl/nccl_reduce.h"
#include "transport/nccl/nccl_transport.h"
#include "transport/nccl/oneshot.h"

/* Connect every pair (and the self pair) once, with a 1-byte exchange, so
 * that NCCL's lazy connection setup, which blocks inside ncclGroupEnd with no
 * deadline, happens at init and not inside the first collective. NCCL sets up
 * all of a peer's p2p channels on its first transfer, so one byte suffices.
 * RELAYCC_NCCL_PRECONNECT=0 skips it (agreed at init: a rank that posts the
 * exchange alone would wait in it). */
static relayResult_t preconnect(struct relayComm* c, relayNcclState* st) {
  char* sendb = st->agreeDev;
  char* recvb = st->agreeDev + RELAY_NCCL_AGREE_MAX;
  ncclResult_t r = relayNccl.ncclGroupStart();
  for (int p = 0; p < c->nranks && r == ncclSuccess; p++) {
    r = relayNccl.ncclSend(sendb, 1, ncclInt8, p, st->nccl, st->agreeStream);
    if (r == ncclSuccess) r = relayNccl.ncclRecv(recvb + p, 1, ncclInt8, p, st->nccl, st->agreeStream);
  }
  ncclResult_t re = relayNccl.ncclGroupEnd();
  if (r == ncclSuccess) r = re;
  if (r == ncclInProgress) {
    RELAY_CHECK(relayNcclWaitReady(c, st->nccl, "init: connecting peers"));
    r = ncclSuccess;
  }
  if (r != ncclSuccess) return relayNcclFail(c, r, "init: connecting peers");
  return relayNcclWaitStream(c, st, st->agreeStream, "init: connecting peers");
}

relayResult_t relayNcclAttach(struct relayComm* c, ncclComm_t nccl, int owns, struct relayComm* ctrl,
                              int device) {
  relayNcclState* st = calloc(1, sizeof *st);
  if (!st) return relaySetError(c, relaySystemError, "out of memory for the NCCL transport");
  st->nccl = nccl;
  st->ownsNccl = owns;
  st->ctrl = ctrl;
  st->device = device;
  atomic_init(&st->aborted, 0);
  c->tp = &relayNcclTransport;
  c->tpState = st;
  int sms = 0;
  cudaError_t e = cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device);
  if (e != cudaSuccess) return relayNcclCudaFail(c, e, "init: cudaDeviceGetAttribute");
  st->reduceBlocks = relayCudaReduceMaxBlocks(sms);
  size_t agreeBytes = RELAY_NCCL_AGREE_MAX * (size_t)(c->nranks + 1);
  e = cudaStreamCreateWithFlags(&st->agreeStream, cudaStreamNonBlocking);
  if (e == cudaSuccess) e = cudaMalloc((void**)&st->agreeDev, agreeBytes);
  if (e == cudaSuccess) e = cudaMallocHost((void**)&st->agreeHost, agreeBytes);
  if (e == cudaSuccess) e = cudaMemsetAsync(st->agreeDev, 0, agreeBytes, st->agreeStream);
  if (e != cudaSuccess) return relayNcclCudaFail(c, e, "init: agreement buffers");

  /* Every rank sees the same comm, with itself at its own rank. The same
   * round agrees the comm hash (rank 0's nonce: the one-shot region's
   * sentinels). The settings are agreed by core after this (init.c). */
  struct initRecord {
    uint32_t magic;
    int32_t rank, nranks, device;
    uint64_t nonce;
  } mine = {0x6e63636cu, c->rank, c->nranks, device, 0};
  uint64_t z = relayNowNs() ^ ((uint64_t)getpid() << 32) ^ (uint64_t)(uintptr_t)st;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull; /* splitmix64's finalizer */
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  mine.nonce = z ^ (z >> 31);
  const void* got;
  RELAY_CHECK(relayAgree(c, &mine, sizeof mine, &got));
  const struct initRecord* all = got;
  relayResult_t r = relaySuccess;
  for (int q = 0; q < c->nranks && r == relaySuccess; q++) {
    if (all[q].magic != mine.magic || all[q].rank != q || all[q].nranks != c->nranks)
      r = relaySetError(c, relayInvalidUsage,
                        "rank %d's record is (rank %d of %d); the ranks do not share one comm", q,
                        all[q].rank, all[q].nranks);
  }
  if (r == relaySuccess) st->commHash = all[0].nonce;
  return r;
}

relayResult_t relayNcclStart(struct relayComm* c) {
  relayNcclState* st = c->tpState;
  /* Read once here, not per call (an environment read per call was part of the
   * 0.23-0.55 us host overhead measured over raw NCCL). */
  st->nativeOn = relayParamInt(c, RELAY_P_NCCL_NATIVE) != 0; /* native.c: what it takes without splits */
  /* The interposer's comms are the user's: never connect pairs they did not ask for. */
  relayResult_t r =
      relayParamInt(c, RELAY_P_NCCL_PRECONNECT) && !relayNccl.guest ? preconnect(c, st) : relaySuccess;
  if (r == relaySuccess && relayParamInt(c, RELAY_P_ONESHOT_PREPARE)) r = relayNcclOneShotPrepareAtInit(c);
  return r;
}

/* Detected from the comm's GPUs (src/topo/detect.c: 2 x H200 over NV18 is
 * the calibrated h200x2). Each rank's GPU by PCI bus id, in rank order: the
 * model's GPU i is rank i's, whichever devices each process can open. */
relayResult_t relayNcclDetectTopo(struct relayComm* c, struct relayTopo** out) {
  relayNcclState* st = c->tpState;
  *out = NULL;
  enum { BUSID = 32 };
  char mine[BUSID] = "";
  if (cudaDeviceGetPCIBusId(mine, BUSID, st->device) != cudaSuccess) {
    cudaGetLastError();
    mine[0] = 0;
  }
  const void* got;
  RELAY_CHECK(relayAgree(c, mine, BUSID, &got));
  /* A copy: detection outlives the round (its strings are the model's names). */
  char* ids = malloc((size_t)c->nranks * BUSID);
  const char** idp = calloc((size_t)c->nranks, sizeof *idp);
  relayResult_t r = relaySuccess;
  if (!ids || !idp) r = relaySetError(c, relaySystemError, "out of memory for the topology's bus ids");
  if (r == relaySuccess) {
    memcpy(ids, got, (size_t)c->nranks * BUSID);
    int known = 1;
    for (int q = 0; q < c->nranks; q++) {
      ids[(size_t)q * BUSID + BUSID - 1] = 0;
      idp[q] = ids + (size_t)q * BUSID;
      known &= idp[q][0] != 0;
    }
    /* Ranks sharing a GPU (the 8-ranks-on-one-GPU harness): the GPU has no links to itself to measure, so
     * no detected model; RELAYCC_TOPO (a preset such as h200 or mi350x) still gives the router the machine
     * to choose for, and without one the router's no-model rule applies. */
    int shared = 0;
    for (int q = 0; q < c->nranks && known && !shared; q++)
      for (int p = 0; p < q && !shared; p++) shared = strcmp(idp[p], idp[q]) == 0;
    if (shared && relayDebugLevel() >= 1 && c->rank == 0)
      fprintf(stderr, "relaycc: ranks share a GPU: no detected topology (RELAYCC_TOPO names one)\n");
    if (!known || shared || relayTopoDetectGpus(c->nranks, idp, out) != relaySuccess) *out = NULL;
  }
  free(ids);
  free(idp);
  return r;
}

relayResult_t relayNcclQuery(ncclComm_t nccl, int* nranks, int* rank, int* device) {
  int cur = -1;
  ncclResult_t nr = relayNccl.ncclCommCount(nccl, nranks);
  if (nr == ncclSuccess) nr = relayNccl.ncclCommUserRank(nccl, rank);
  if (nr == ncclSuccess) nr = relayNccl.ncclCommCuDevice(nccl, device);
  if (nr != ncclSuccess)
    return relaySetError(NULL, relayNcclResult(nr), "relayCommInitNccl: querying the NCCL communicator: %s",
                         relayNccl.ncclGetErrorString(nr));
  cudaError_t e = cudaGetDevice(&cur);
  if (e != cudaSuccess)
    return relaySetError(NULL, relayCudaResult(e), "relayCommInitNccl (rank %d): cudaGetDevice: %s", *rank,
                         cudaGetErrorString(e));
  if (cur != *device)
    return relaySetError(
        NULL, relayInvalidUsage,
        "relayCommInitNccl (rank %d): the current device is %d but the NCCL communicator's is %d; "
        "call cudaSetDevice(%d) first",
        *rank, cur, *device, *device);
  return relaySuccess;
}

/* What each rank says at the shm rendezvous. */
typedef struct {
  int32_t status; /* relayResult_t of this rank's local setup */
  int32_t device;
  int32_t badParam;    /* this rank's invalid setting (params.h row), -1: none */
  int32_t ncclShares;  /* 1: this process runs NCCL 2.30+ with NCCL_MULTI_RANK_GPU_ENABLE=1 */
  uint64_t host;       /* relayHostIdentity: ranks of one host */
  uint64_t ncclHostId; /* hash of NCCL_HOSTID, 0 when unset */
  char busId[32];
  ncclUniqueId id; /* rank 0's is used */
} shmInitRecord;

/* What NCCL needs to accept two ranks on one GPU, as this process is set: its own NCCL_HOSTID (NCCL >= 2.5
 * then takes the processes for different hosts and talks over its network transport) or 2.30's multi-rank
 * mode. relaycc sets neither (a guest changes no environment); the 8-ranks-on-one-GPU harness does. */
static void sharedGpuFacts(shmInitRecord* mine) {
  const char* hostId = getenv("NCCL_HOSTID");
  const char* multi = getenv("NCCL_MULTI_RANK_GPU_ENABLE");
  mine->host = relayHostIdentity();
  mine->ncclHostId = hostId && *hostId ? relayHash64(RELAY_HASH_SEED, hostId, strlen(hostId)) | 1 : 0;
  mine->ncclShares = relayNccl.version >= 23000 && multi && atoi(multi) == 1;
}

/* Two ranks of one host on one GPU (bus ids equal): allowed where NCCL accepts them (sharedGpuFacts), else
 * the error names both ranks and what would make NCCL accept them. */
static relayResult_t checkSharedGpus(struct relayComm* ctrl, const shmInitRecord* all, int nranks) {
  for (int q = 0; q < nranks; q++)
    for (int p = 0; p < q; p++) {
      const shmInitRecord *a = &all[p], *b = &all[q];
      if (a->host != b->host || strcmp(a->busId, b->busId) != 0) continue;
      if ((a->ncclShares && b->ncclShares) ||
          (a->ncclHostId && b->ncclHostId && a->ncclHostId != b->ncclHostId))
        continue;
      return relaySetError(
          ctrl, relayInvalidArgument,
          "ranks %d and %d both use GPU %s: NCCL %d accepts two ranks on one GPU only when each "
          "process has its own NCCL_HOSTID (NCCL >= 2.5) or NCCL_MULTI_RANK_GPU_ENABLE=1 "
          "(NCCL >= 2.30)",
          p, q, b->busId, relayNccl.version);
    }
  return relaySuccess;
}

_Static_assert(sizeof(shmInitRecord) <= RELAY_NCCL_AGREE_MAX, "init record must fit one agree()");

/* Pick and set the device; 0 or a result with why filled. */
static relayResult_t setDevice(int rank, int* cudaDevice, int localRank, char* busId, size_t busLen,
                               char* why, size_t whyLen) {
  int ndev = 0;
  cudaError_t e = cudaGetDeviceCount(&ndev);
  if (e == cudaSuccess && *cudaDevice < 0)
    *cudaDevice = localRank >= 0 ? localRank : (ndev > 0 ? rank % ndev : 0);
  if (e == cudaSuccess && (*cudaDevice < 0 || *cudaDevice >= ndev)) {
    snprintf(why, whyLen, "cudaDevice %d is not in [0, %d)", *cudaDevice, ndev);
    return relayInvalidArgument;
  }
  if (e == cudaSuccess) e = cudaSetDevice(*cudaDevice);
  if (e == cudaSuccess && busId) e = cudaDeviceGetPCIBusId(busId, (int)busLen, *cudaDevice);
  if (e != cudaSuccess) {
    snprintf(why, whyLen, "CUDA device %d: %s", *cudaDevice, cudaGetErrorString(e));
    return relayCudaResult(e);
  }
  return relaySuccess;
}

relayResult_t relayNcclCreateOverShm(struct relayComm* ctrl, int cudaDevice, int localRank, int badParam,
                                     const char* badWhy, int* device, ncclComm_t* out) {
  int rank = ctrl->rank, nranks = ctrl->nranks;
  *out = NULL;
  /* Local setup; its verdict travels with the rendezvous record so that all
   * ranks fail together (invariant 4) instead of some entering NCCL init. */
  shmInitRecord mine;
  memset(&mine, 0, sizeof mine);
  char why[256] = "";
  mine.badParam = badParam;
  if (badParam >= 0) {
    mine.status = relayInvalidArgument;
    relayErrorQuote(ctrl, badWhy, why, sizeof why); /* badWhy: the comm's message, ctrl's rank and init */
  } else {
    mine.status = setDevice(rank, &cudaDevice, localRank, mine.busId, sizeof mine.busId, why, sizeof why);
  }
  mine.device = cudaDevice;
  sharedGpuFacts(&mine);
  if (rank == 0 && mine.status == relaySuccess) {
    ncclResult_t nr = relayNccl.ncclGetUniqueId(&mine.id);
    if (nr != ncclSuccess) {
      mine.status = relayNcclResult(nr);
      snprintf(why, sizeof why, "ncclGetUniqueId: %s", relayNccl.ncclGetErrorString(nr));
    }
  }
  const void* got;
  relayResult_t res = relayAgree(ctrl, &mine, sizeof mine, &got);
  const shmInitRecord* all = got;
  if (res != relaySuccess) {
    char what[sizeof ctrl->lastError];
    relaySetError(ctrl, res, "rendezvous: %s", relayErrorQuote(ctrl, ctrl->lastError, what, sizeof what));
    goto done;
  }
  int first = -1;
  for (int q = 0; q < nranks && first < 0; q++)
    if (all[q].status != relaySuccess) first = q;
  if (first >= 0) { /* every rank saw it: a vote gives the others that rank's own reason to quote */
    int badParam = all[first].badParam; /* `all` lives until the next round */
    relayBallot b = {(relayResult_t)mine.status, 0, why};
    relayVerdict v;
    res = relayVoteBallot(ctrl, &b, &v);
    if (res != relaySuccess) goto done;
    if (mine.status != relaySuccess) /* its own first: it names the cause */
      res = relaySetError(ctrl, (relayResult_t)mine.status, "%s", why);
    else if (badParam >= 0)
      res = relaySetError(ctrl, relayRemoteError, "rank %d failed init: %s", v.rank, v.why);
    else
      res = relaySetError(ctrl, relayRemoteError, "rank %d failed its setup (%s): %s", v.rank,
                          relayGetErrorString(v.status), v.why);
    goto done;
  }
  res = checkSharedGpus(ctrl, all, nranks);
  if (res != relaySuccess) goto done;
  /* Blocking comm: a nonblocking one runs every ncclGroupEnd on a new thread
   * (NCCL 2.28 group.cc), tens of microseconds per step. */
  ncclResult_t nr = relayNccl.ncclCommInitRank(out, nranks, all[0].id, rank);
  relayVerdict v;
  res = relayVote(ctrl, nr == ncclSuccess, relayNccl.ncclGetErrorString(nr), &v);
  if (res != relaySuccess) {
    char what[sizeof ctrl->lastError];
    relaySetError(ctrl, res, "vote on ncclCommInitRank: %s",
                  relayErrorQuote(ctrl, ctrl->lastError, what, sizeof what));
  } else if (nr != ncclSuccess) { /* its own first: it names the cause */
    res = relaySetError(ctrl, relayNcclResult(nr), "ncclCommInitRank: %s", relayNccl.ncclGetErrorString(nr));
  } else if (!v.yes) {
    res = relaySetError(ctrl, relayRemoteError, "ncclCommInitRank failed on rank %d (%s)", v.rank, v.why);
  }
done:
  if (res != relaySuccess && *out) {
    relayNccl.ncclCommAbort(*out);
    *out = NULL;
  }
  *device = cudaDevice;
  return res;
}

relayResult_t relayNcclCreateFromId(int nranks, const void* id, int rank, int cudaDevice, ncclComm_t* out) {
  *out = NULL;
  char why[256] = "";
  relayResult_t res = setDevice(rank, &cudaDevice, -1, NULL, 0, why, sizeof why);
  if (res != relaySuccess) return relaySetError(NULL, res, "relayCommInitNcclRank (rank %d): %s", rank, why);
  ncclUniqueId uid;
  memcpy(&uid, id, sizeof uid);
  /* Blocking, as relayCommInitNcclShm's (see there); NCCL < 2.14 has no config and is always blocking. */
  ncclConfig_t cfg = NCCL_CONFIG_INITIALIZER;
  cfg.blocking = 1;
  int withConfig = relayNccl.ncclCommInitRankConfig != NULL;
  ncclResult_t nr = withConfig ? relayNccl.ncclCommInitRankConfig(out, nranks, uid, rank, &cfg)
                               : relayNccl.ncclCommInitRank(out, nranks, uid, rank);
  if (nr != ncclSuccess) {
    *out = NULL;
    return relaySetError(NULL, relayNcclResult(nr), "relayCommInitNcclRank (rank %d): %s: %s", rank,
                         withConfig ? "ncclCommInitRankConfig" : "ncclCommInitRank",
                         relayNccl.ncclGetErrorString(nr));
  }
  return relaySuccess;
}

_Static_assert(sizeof(ncclUniqueId) <= RELAY_NCCL_UNIQUE_ID_BYTES, "relayNcclUniqueId holds an ncclUniqueId");

relayResult_t relayNcclGetUniqueId(relayNcclUniqueId* id) {
  if (!id) return relaySetError(NULL, relayInvalidArgument, "relayNcclGetUniqueId: id (argument 1) is NULL");
  RELAY_CHECK(relayNcclLoad(NULL));
  ncclUniqueId uid;
  ncclResult_t nr = relayNccl.ncclGetUniqueId(&uid);
  if (nr != ncclSuccess)
    return relaySetError(NULL, relayNcclResult(nr), "relayNcclGetUniqueId: ncclGetUniqueId: %s",
                         relayNccl.ncclGetErrorString(nr));
  memset(id, 0, sizeof *id);
  memcpy(id->internal, &uid, sizeof uid);
  return relaySuccess;
}
