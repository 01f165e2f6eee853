/*
 * The NCCL init calls (include/relaycc_nccl.h): core creates the comm
 * (init.c's one path), the NCCL transport attaches (nccl_init.c). Built with
 * the NCCL transport only.
 */
#ifdef RELAY_HAVE_NCCL
#include <stdio.h>
#include <string.h>

#include "comm/common.h"
#include "core/init.h"
#include "gpu_port.h" /* cudaGetDevice */
#include "relaycc_nccl.h"
#include "transport/nccl.h"
#include "transport/shm.h"

/* Attach over nccl, agree, start; one cleanup. owns: the comm destroys nccl
 * (and, before the transport holds it, this aborts it). */
static relayResult_t attachAndFinish(struct relayComm* c, ncclComm_t nccl, int owns, int device,
                                     relayComm_t* out) {
  relayResult_t res = relayNcclAttach(c, nccl, owns, c->ctrl, device);
  if (res == relaySuccess) res = relayInitFinish(c, NULL, relayNcclDetectTopo);
  if (res == relaySuccess) res = relayNcclStart(c);
  /* Attach failed before the transport took ownership of nccl. */
  if (res != relaySuccess && owns && !c->tpState) relayNcclAbortComm(nccl);
  return relayInitEnd(c, res, out);
}

relayResult_t relayCommInitNccl(relayComm_t* out, ncclComm_t nccl, const relayConfig_t* config) {
  if (!out) return relaySetError(NULL, relayInvalidArgument, "relayCommInitNccl: comm (argument 1) is NULL");
  *out = NULL;
  RELAY_CHECK(relayNcclLoad(NULL)); /* the process's NCCL (torch's when loaded): nccl_lib.c */
  if (!nccl) return relaySetError(NULL, relayInvalidArgument, "relayCommInitNccl: nccl (argument 2) is NULL");
  int nranks = 0, rank = -1, dev = -1;
  RELAY_CHECK(relayNcclQuery(nccl, &nranks, &rank, &dev));
  struct relayComm* c;
  RELAY_CHECK(relayInitBegin("relayCommInitNccl", nranks, rank, NULL, config, &c));
  relayInitGuest(c); /* the communicator is the caller's (the interposer's, from_process_group's) */
  return attachAndFinish(c, nccl, 0, dev, out);
}

relayResult_t relayCommInitNcclShm(relayComm_t* out, int nranks, int rank, const char* jobName,
                                   int cudaDevice, const relayConfig_t* config) {
  if (!out)
    return relaySetError(NULL, relayInvalidArgument, "relayCommInitNcclShm: comm (argument 1) is NULL");
  *out = NULL;
  RELAY_CHECK(relayNcclLoad(NULL)); /* the process's NCCL (torch's when loaded): nccl_lib.c */
  const char* job = jobName;
  struct relayComm* c;
  RELAY_CHECK(relayInitBegin("relayCommInitNcclShm", nranks, rank, &job, config, &c));
  /* The control plane: a private shm comm under a name of its own (a job may
   * also run relayCommInitShm under jobName). It only carries agreements, so
   * its rings stay small (64 KiB) unless the user sized them. */
  char ctrlName[256];
  snprintf(ctrlName, sizeof ctrlName, "%s-nccl", job);
  struct relayComm* ctrl;
  relayResult_t res = relayInitBegin("relayCommInitNcclShm", c->nranks, c->rank, NULL, config, &ctrl);
  if (res != relaySuccess) return relayInitFail(c, res);
  c->ctrl = ctrl;
  if (ctrl->params.src[RELAY_P_SHM_RING_BYTES] == RELAY_PSRC_DEFAULT) ctrl->cfg.shmRingBytes = 64 << 10;
  res = relayShmAttach(ctrl, ctrlName, 0);
  if (res != relaySuccess) {
    char why[sizeof ctrl->lastError];
    relaySetError(c, res, "rendezvous: %s", relayErrorQuote(c, ctrl->lastError, why, sizeof why));
    return relayInitFail(c, res);
  }
  /* No setenv("NCCL_NVLS_ENABLE", "0") before NCCL init: setenv changes the user's process
   * environment (every NCCL comm created after it, a from_process_group fallback's group included)
   * and races with threads reading it. relaycc's own comms honour what the process has; NCCL's
   * ncclConfig_t (2.28.9) has no per-comm NVLS switch to use instead (nvlsCTAs sizes it, it does
   * not turn it off), so a user who wants NVLink SHARP off sets NCCL_NVLS_ENABLE=0 themself. */
  ncclComm_t nccl = NULL;
  int dev = -1;
  res = relayNcclCreateOverShm(ctrl, cudaDevice, (int)relayParamInt(c, RELAY_P_LOCAL_RANK), c->initBadParam,
                               c->lastError, &dev, &nccl);
  if (res != relaySuccess) { /* its message is on ctrl, the same rank and init */
    snprintf(c->lastError, sizeof c->lastError, "%s", ctrl->lastError);
    return relayInitFail(c, res);
  }
  return attachAndFinish(c, nccl, 1, dev, out);
}

relayResult_t relayCommInitNcclRank(relayComm_t* out, int nranks, const relayNcclUniqueId* id, int rank,
                                    int cudaDevice, const relayConfig_t* config) {
  if (!out)
    return relaySetError(NULL, relayInvalidArgument, "relayCommInitNcclRank: comm (argument 1) is NULL");
  *out = NULL;
  RELAY_CHECK(relayNcclLoad(NULL)); /* the process's NCCL (torch's when loaded): nccl_lib.c */
  if (!id)
    return relaySetError(NULL, relayInvalidArgument,
                         "relayCommInitNcclRank (rank %d): id (argument 3) is NULL", rank);
  if (nranks < 1 || rank < 0 || rank >= nranks)
    return relaySetError(NULL, relayInvalidArgument,
                         "relayCommInitNcclRank: rank %d (argument 4) is not in [0, %d)", rank, nranks);
  struct relayComm* c;
  RELAY_CHECK(relayInitBegin("relayCommInitNcclRank", nranks, rank, NULL, config, &c));
  /* The process environment as the user has it (relayCommInitNcclShm says why). */
  if (cudaDevice < 0 && relayParamInt(c, RELAY_P_LOCAL_RANK) >= 0)
    cudaDevice = (int)relayParamInt(c, RELAY_P_LOCAL_RANK);
  ncclComm_t nccl = NULL;
  /* An invalid setting still joins NCCL's init (the other ranks wait in it)
   * and fails every rank at the agreement after it. */
  relayResult_t res = relayNcclCreateFromId(nranks, id->internal, rank, cudaDevice, &nccl);
  if (res != relaySuccess) { /* no comm existed for it: the thread's last error (it names the init) */
    snprintf(c->lastError, sizeof c->lastError, "%s", relayGetLastError(NULL));
    return relayInitFail(c, res);
  }
  int dev = cudaDevice;
  if (dev < 0) cudaGetDevice(&dev);
  return attachAndFinish(c, nccl, 1, dev, out);
}
#endif
