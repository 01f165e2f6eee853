#include "core/comm.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common.h"
#include "core/plancache.h"

/* Deadline of every wait. Generous because a first call may build plans and
 * allocate, and 8 ranks on 2 CI cores can be descheduled for seconds; tests
 * that expect a timeout set their own short one. */
#define RELAY_DEFAULT_TIMEOUT_MS 120000
/* 1 MiB per directed pair: 56 pairs at 8 ranks is 56 MiB of /dev/shm, and a
 * ring that large lets one copy move a typical step's chunk without waiting
 * for the receiver. */
#define RELAY_DEFAULT_SHM_RING_BYTES (1 << 20)
/* Polls (each a sched_yield) before a wait sleeps on its futex. -1 = auto:
 * 200 when every rank can have a core of its own, else 0. Spinning only pays
 * while the peer runs on another core: with 8 ranks on 2 cores a spinning
 * rank keeps the CPU from the rank it waits for until the scheduler tick, and
 * a 64 KB relay all-reduce took 4.1 ms at 200 spins against 0.21 ms at 0
 * (relaycc-bench --ranks 8 -A 2 --route relay, shm, 2 cores). */
#define RELAY_DEFAULT_SPIN (-1)
#define RELAY_AUTO_SPIN 200

static int pickInt(int field, const char* env, int def) {
  if (field != RELAY_CONFIG_UNDEF_INT) return field;
  return (int)relayEnvLong(env, def);
}

relayResult_t relayResolveConfig(const relayConfig_t* cfg, relayResolvedConfig* out) {
  relayConfig_t dflt = RELAY_CONFIG_INITIALIZER;
  if (!cfg) cfg = &dflt;
  if (cfg->magic != RELAY_CONFIG_MAGIC || cfg->size < offsetof(relayConfig_t, topo))
    return relaySetError(NULL, relayInvalidArgument,
                         "config: not initialized with RELAY_CONFIG_INITIALIZER (magic %#x, size %zu)",
                         cfg->magic, cfg->size);
  memset(out, 0, sizeof *out);
  out->timeoutMs = pickInt(cfg->timeoutMs, "RELAYCC_TIMEOUT_MS", RELAY_DEFAULT_TIMEOUT_MS);
  out->checkMode = pickInt(cfg->checkMode, "RELAYCC_CHECK", 0);
  out->depth = pickInt(cfg->depth, "RELAYCC_DEPTH", 0);
  out->shmRingBytes = pickInt(cfg->shmRingBytes, "RELAYCC_SHM_RING_BYTES", RELAY_DEFAULT_SHM_RING_BYTES);
  out->spinCount = pickInt(cfg->spinCount, "RELAYCC_SPIN", RELAY_DEFAULT_SPIN);
  if (cfg->route != RELAY_CONFIG_UNDEF_INT) {
    out->route = cfg->route;
  } else {
    const char* r = relayEnvStr("RELAYCC_ROUTE", "auto");
    if (relayParseRoute(r, &out->route) != 0)
      return relaySetError(NULL, relayInvalidArgument,
                           "RELAYCC_ROUTE=%s: expected auto, direct, relay, oneshot, native or bw", r);
  }
  const char* topo = cfg->topo ? cfg->topo : relayEnvStr("RELAYCC_TOPO", "");
  snprintf(out->topo, sizeof out->topo, "%s", topo);
  if (out->timeoutMs <= 0)
    return relaySetError(NULL, relayInvalidArgument, "config.timeoutMs (RELAYCC_TIMEOUT_MS) = %d must be > 0",
                         out->timeoutMs);
  if ((unsigned)out->route >= relayNumRoutes)
    return relaySetError(NULL, relayInvalidArgument, "config.route = %d is not a relayRoute_t", out->route);
  if (out->depth < 0 || out->depth > 64)
    return relaySetError(NULL, relayInvalidArgument, "config.depth (RELAYCC_DEPTH) = %d must be in [0, 64]",
                         out->depth);
  if (out->shmRingBytes < 4096)
    return relaySetError(NULL, relayInvalidArgument,
                         "config.shmRingBytes (RELAYCC_SHM_RING_BYTES) = %d must be >= 4096", out->shmRingBytes);
  if (out->spinCount < -1) out->spinCount = 0;
  return relaySuccess;
}

relayResult_t relayCommAlloc(int nranks, int rank, const relayConfig_t* cfg, struct relayComm** out) {
  *out = NULL;
  struct relayComm* c = calloc(1, sizeof *c);
  if (!c) return relaySetError(NULL, relaySystemError, "rank %d: out of memory allocating the comm", rank);
  relayResult_t res = relayResolveConfig(cfg, &c->cfg);
  if (res != relaySuccess) {
    free(c);
    return res;
  }
  c->rank = rank;
  c->nranks = nranks;
  if (c->cfg.spinCount < 0) {
    long cpus = sysconf(_SC_NPROCESSORS_ONLN);
    c->cfg.spinCount = (cpus > 0 && nranks <= cpus) ? RELAY_AUTO_SPIN : 0;
  }
  c->curStep = -1;
  c->lastRoute = relayRouteDirect;
  c->lastDepth = 1;
  atomic_init(&c->aborted, 0);
  atomic_init(&c->inCall, 0);
  c->plans = relayPlanCacheNew();
  c->rankSeen = calloc((size_t)(nranks > 0 ? nranks : 1), sizeof *c->rankSeen);
  if (!c->plans || !c->rankSeen) {
    relayPlanCacheFree(c->plans);
    free(c->rankSeen);
    free(c);
    return relaySetError(NULL, relaySystemError, "rank %d: out of memory allocating the plan cache and the rank table", rank);
  }
  *out = c;
  return relaySuccess;
}

void relayCommFree(struct relayComm* comm) {
  if (!comm) return;
  relayPlanCacheFree(comm->plans);
  free(comm->execBuf);
  free(comm->rankSeen);
  free(comm);
}

relayResult_t relayCommBarrier(struct relayComm* comm) {
  if (!comm || !comm->tp) return relaySetError(comm, relayInvalidArgument, "barrier: comm is NULL");
  return comm->tp->barrier(comm);
}

relayResult_t relayCommAgree(struct relayComm* comm, const void* mine, void* all, size_t bytes) {
  if (!comm || !comm->tp) return relaySetError(comm, relayInvalidArgument, "agree: comm is NULL");
  return comm->tp->agree(comm, mine, all, bytes);
}

void relayCommLastRoute(struct relayComm* comm, int* route, int* depth) {
  if (route) *route = comm ? comm->lastRoute : relayRouteDirect;
  if (depth) *depth = comm ? comm->lastDepth : 1;
}
