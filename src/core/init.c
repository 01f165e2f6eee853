/*
 * Comm creation: one path for every init call. Rank and environment
 * resolution, this rank's parameters (params.c), the transport's attach, the
 * parameter and topology agreement, and one cleanup on failure.
 */
#include "core/init.h"

#include <sched.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "comm/common.h"
#include "comm/vote.h"
#include "core/core.h"
#include "core/nodes.h"
#include "core/plancache.h"
#include "topo/topo.h"
#include "transport/shm.h"

/* The comm's own memory, after its transport and windows are gone. */
void relayCommFree(struct relayComm* comm) {
  if (!comm) return;
  relayPlanCacheFree(comm->plans);
  free(comm->execBuf);
  free(comm->rankSeen);
  free(comm->pairSeq);
  free(comm->nodeOf);
  free(comm->agreeBuf);
  free(comm);
}

/* The hot path's copy of the table (comm->cfg). */
static void fillConfig(struct relayComm* c) {
  relayResolvedConfig* o = &c->cfg;
  /* A guest imposes no deadline of its own on the user's comm (invariant 11): the default 120 s would
   * end a wait on a rank that is only late (a 3-minute checkpoint write before a barrier) with garbage
   * on the others. What the user set (RELAYCC_TIMEOUT_MS, config.timeoutMs) still holds. */
  int userSet = c->params.src[RELAY_P_TIMEOUT_MS] != RELAY_PSRC_DEFAULT;
  o->timeoutMs = c->guest && !userSet ? 0 : (int)relayParamInt(c, RELAY_P_TIMEOUT_MS);
  o->checkMode = (int)relayParamInt(c, RELAY_P_CHECK);
  o->route = (int)relayParamInt(c, RELAY_P_ROUTE);
  o->depth = (int)relayParamInt(c, RELAY_P_DEPTH);
  o->shmRingBytes = (int)relayParamInt(c, RELAY_P_SHM_RING_BYTES);
  /* Polls before a wait sleeps, RELAYCC_SPIN auto: the numbers and why are the table's (params.h). Busy
   * polls only while every rank can have a core: with ranks outnumbering cores a busy poll keeps the core
   * from the rank it waits for until the scheduler's tick, where a yield hands it over. */
  long cpus = sysconf(_SC_NPROCESSORS_ONLN);
  if (c->rankCpus > 0 && (cpus <= 0 || c->rankCpus < cpus)) cpus = c->rankCpus;
  int ownCore = cpus > 0 && c->nranks <= cpus;
  int yields = (int)relayParamInt(c, RELAY_P_SPIN);
  if (yields < 0) yields = (int)relayParamInt(c, ownCore ? RELAY_P_SPIN_OWN : RELAY_P_SPIN_SHARED);
  o->spinBusy = ownCore ? (int)relayParamInt(c, RELAY_P_SPIN_BUSY) : 0;
  o->spinCount = o->spinBusy + yields;
  o->spinAdapt = !ownCore;
  o->spinNs = (uint64_t)relayParamInt(c, RELAY_P_SPIN_US) * 1000ull;
  snprintf(o->topo, sizeof o->topo, "%s", c->params.text[RELAY_P_TOPO]);
}

relayResult_t relayInitBegin(const char* fn, int nranks, int rank, const char** jobName,
                             const relayConfig_t* cfg, struct relayComm** out) {
  *out = NULL;
  relayParams p;
  int bad;
  char why[512];
  relayResult_t pres = relayParamsResolve(&p, cfg, &bad, why, sizeof why);
  /* Not a config: its fields cannot be read, so this rank resolves without them (environment, defaults)
   * and, when it knows its job and rank, joins to tell the others (relayInitFinish fails every rank with
   * it) rather than leave them waiting for it until their deadline. */
  int notConfig = pres != relaySuccess && bad < 0;
  if (notConfig) {
    snprintf(why, sizeof why, "%s", relayGetLastError(NULL));
    int ignored;
    char unused[8];
    relayParamsResolve(&p, NULL, &ignored, unused, sizeof unused);
    bad = RELAY_INIT_BAD_CONFIG;
  }
  /* A binding's rejection of its own config (relayConfig_t.reject; older callers' structs end before it):
   * taken the way an invalid setting is, before any of the config's own. */
  if (!notConfig && cfg && cfg->size >= offsetof(relayConfig_t, reject) + sizeof cfg->reject && cfg->reject) {
    snprintf(why, sizeof why, "%s", cfg->reject);
    bad = RELAY_INIT_BAD_CONFIG;
  }
  /* The identity comes first: without it this rank cannot reach the others. */
  if (nranks <= 0)
    nranks = (int)(p.v[RELAY_P_NRANKS] > 0 ? p.v[RELAY_P_NRANKS] : p.v[RELAY_P_ENV_WORLD_SIZE]);
  if (rank < 0) rank = (int)(p.v[RELAY_P_RANK] >= 0 ? p.v[RELAY_P_RANK] : p.v[RELAY_P_ENV_RANK]);
  int identity = bad == RELAY_P_NRANKS || bad == RELAY_P_RANK || bad == RELAY_P_ENV_RANK ||
                 bad == RELAY_P_ENV_WORLD_SIZE || bad == RELAY_P_JOB;
  /* No identity: this rank cannot reach the others, whose deadline names it as never arrived. */
  if (identity) return relaySetError(NULL, relayInvalidArgument, "%s: %s", fn, why);
  if (jobName && !*jobName) *jobName = p.text[RELAY_P_JOB];
  if (nranks < 1 || rank < 0 || rank >= nranks) {
    if (bad == RELAY_INIT_BAD_CONFIG) return relaySetError(NULL, relayInvalidArgument, "%s: %s", fn, why);
    if (nranks < 1)
      return relaySetError(NULL, relayInvalidArgument,
                           "%s: nranks = %d (and RELAYCC_NRANKS / WORLD_SIZE unset) must be >= 1", fn,
                           nranks);
    return relaySetError(NULL, relayInvalidArgument,
                         "%s: rank = %d (argument, or RELAYCC_RANK / RANK) is not in [0, %d)", fn, rank,
                         nranks);
  }
  long long nodes = p.v[RELAY_P_SHM_NODES];
  if (bad < 0 && (nodes > nranks || nranks % nodes != 0)) {
    bad = RELAY_P_SHM_NODES;
    snprintf(why, sizeof why,
             "RELAYCC_SHM_NODES=%lld must divide nranks %d (the ranks as that many nodes of equal "
             "size, node-major)",
             nodes, nranks);
    p.v[bad] = relayParamDefs[bad].def;
    p.src[bad] = RELAY_PSRC_DEFAULT;
  }
  struct relayComm* c = calloc(1, sizeof *c);
  if (c) {
    c->plans = relayPlanCacheNew();
    c->rankSeen = calloc((size_t)nranks, sizeof *c->rankSeen);
    c->agreeBuf = malloc((size_t)nranks * RELAY_TP_AGREE_MAX);
  }
  if (!c || !c->plans || !c->rankSeen || !c->agreeBuf) {
    relayCommFree(c);
    /* No comm to build the prefix from: the text names the init and the rank. */
    return relaySetError(NULL, relaySystemError, "%s (rank %d): out of memory allocating the comm", fn, rank);
  }
  c->rank = rank;
  c->nranks = nranks;
  c->params = p;
  c->initBadParam = bad;
  c->curStep = -1;
  c->curCallName = fn; /* errors of the init name it (common.h); relayInitEnd clears it */
  if (bad >= 0) relaySetError(c, relayInvalidArgument, "%s", why); /* every rank learns it in agreeParams */
  fillConfig(c);
  c->callMark = -1;
  c->last = (struct relayLastCall){.route = relayRouteDirect, .depth = 1};
  atomic_init(&c->aborted, 0);
  atomic_init(&c->inCall, 0);
  *out = c;
  return relaySuccess;
}

/* Rows of the AGREED scope travel in one record (every transport's agree()
 * carries 256 bytes). */
#define RELAY_COUNT_AGREED_(id, nm, ty, sc, ...) +(RELAY_PSCOPE_##sc == RELAY_PSCOPE_AGREED)
enum { RELAY_N_AGREED = 0 RELAY_PARAM_TABLE(RELAY_COUNT_AGREED_) };
#undef RELAY_COUNT_AGREED_
typedef struct {
  int32_t bad; /* this rank's invalid row, -1: none */
  int32_t pad;
  int64_t v[RELAY_N_AGREED];
} paramRecord;
_Static_assert(sizeof(paramRecord) <= 256, "the agreed parameters must fit one agree()");

static relayResult_t agreeParams(struct relayComm* c) {
  paramRecord mine;
  memset(&mine, 0, sizeof mine);
  mine.bad = c->initBadParam;
  for (int i = 0, k = 0; i < RELAY_P_COUNT; i++)
    if (relayParamDefs[i].scope == RELAY_PSCOPE_AGREED) mine.v[k++] = c->params.v[i];
  char saved[sizeof c->lastError];
  memcpy(saved, c->lastError, sizeof saved);
  const void* got;
  RELAY_CHECK(relayAgree(c, &mine, sizeof mine, &got));
  const paramRecord* all = got;
  relayResult_t res = relaySuccess;
  int bad = 0;
  for (int q = 0; q < c->nranks && !bad; q++) bad = all[q].bad >= 0;
  if (bad) { /* every rank saw it: the others quote the first one's message (variable, value, allowed) */
    relayResult_t local = c->initBadParam >= 0 ? relayInvalidArgument : relaySuccess;
    relayBallot b = {local, 0, saved};
    relayVerdict v;
    res = relayVoteBallot(c, &b, &v);
    if (res == relaySuccess && local != relaySuccess) {
      memcpy(c->lastError, saved, sizeof saved); /* its own first: names the variable and its value */
      res = local;
    } else if (res == relaySuccess) {
      res = relaySetError(c, relayRemoteError, "rank %d failed init: %s", v.rank, v.why);
    }
  }
  for (int i = 0, k = 0; i < RELAY_P_COUNT && res == relaySuccess; i++) {
    if (relayParamDefs[i].scope != RELAY_PSCOPE_AGREED) continue;
    long long agreed = all[0].v[k++];
    if (agreed == c->params.v[i]) continue;
    if (relayDebugLevel() >= 1) {
      char b1[32], b2[32];
      const char* own = relayParamText(&c->params, (relayParamId)i, b1, sizeof b1);
      c->params.v[i] = agreed;
      fprintf(stderr, "relaycc: rank %d: %s = %s here; agreed on rank 0's %s\n", c->rank,
              relayParamDefs[i].name, own, relayParamText(&c->params, (relayParamId)i, b2, sizeof b2));
    }
    c->params.v[i] = agreed;
    c->params.src[i] = RELAY_PSRC_AGREED;
  }
  if (res == relaySuccess) fillConfig(c);
  return res;
}

typedef struct {
  int32_t status, pad;
  uint64_t hash;
  /* The CPUs this rank may run on (sched_getaffinity, the first 1024; all where it fails). Their union says
   * whether every rank has a core: the online count does not (2 ranks launched under `taskset -c 0` on the
   * 2-core EPYC, 2026-12-05: 100000 busy polls took 4 KiB all-reduce 31 -> 66 us, 64 KiB 101 -> 164, each
   * wait spinning its 50 us on the core its peer needs), nor does one rank's own mask (ranks bound to a
   * core each). */
  uint64_t cpus[16];
} topoRecord;
_Static_assert(sizeof(topoRecord) <= RELAY_TP_AGREE_MAX, "a topology record must fit one agree()");

static void affinityWords(uint64_t* words, int n) {
  cpu_set_t set;
  CPU_ZERO(&set);
  int ok = sched_getaffinity(0, sizeof set, &set) == 0;
  for (int w = 0; w < n; w++) {
    words[w] = ok ? 0 : ~0ull;
    for (int b = 0; b < 64 && ok; b++)
      if (CPU_ISSET(w * 64 + b, &set)) words[w] |= 1ull << b;
  }
}

relayResult_t relayCommAgreeTopo(struct relayComm* c, relayResult_t local) {
  topoRecord mine;
  memset(&mine, 0, sizeof mine);
  mine.status = (int32_t)local;
  mine.hash = local == relaySuccess && c->topo ? relayTopoHash(c->topo) : 0;
  affinityWords(mine.cpus, 16);
  char saved[sizeof c->lastError];
  memcpy(saved, c->lastError, sizeof saved);
  const void* got;
  RELAY_CHECK(relayAgree(c, &mine, sizeof mine, &got));
  const topoRecord* all = got; /* read only while res is relaySuccess: the vote below reuses the buffer */
  int cpus = 0;
  for (int w = 0; w < 16; w++) {
    uint64_t any = 0;
    for (int q = 0; q < c->nranks; q++) any |= all[q].cpus[w];
    cpus += __builtin_popcountll(any);
  }
  c->rankCpus = cpus;
  fillConfig(c); /* the busy polls from the agreed count */
  relayResult_t res = relaySuccess;
  int failed = 0;
  for (int q = 0; q < c->nranks && !failed; q++) failed = all[q].status != relaySuccess;
  if (failed) { /* the others quote the first one's message: the variable and its reason */
    relayBallot b = {local, 0, saved};
    relayVerdict v;
    res = relayVoteBallot(c, &b, &v);
    /* Its own failure first, so that ranks given one bad setting each name
     * their own value, not "rank 0 could not load". */
    if (res == relaySuccess && local != relaySuccess) {
      memcpy(c->lastError, saved, sizeof saved);
      res = local;
    } else if (res == relaySuccess) {
      res = relaySetError(c, relayRemoteError, "rank %d could not load its topology: %s", v.rank, v.why);
    }
  }
  int differ = 0;
  for (int q = 0; q < c->nranks && res == relaySuccess; q++) differ |= all[q].hash != mine.hash;
  if (differ) {
    if (relayDebugLevel() >= 1)
      fprintf(stderr,
              "relaycc: rank %d: the ranks hold different topologies (RELAYCC_TOPO or detection differ); "
              "routing without a model\n",
              c->rank);
    relayTopoFree(c->topo);
    c->topo = NULL;
  }
  if (res == relaySuccess && relayDebugLevel() >= 1)
    fprintf(stderr, "relaycc: rank %d: route model: %s\n", c->rank, c->topo ? c->topo->name : "none");
  return res;
}

/* The topology for route choice: RELAYCC_TOPO / config.topo when set, else
 * what the transport detects, else fallback (a preset name, or NULL for none).
 * Every rank takes part in detection and agreement whatever it found, so a
 * rank with RELAYCC_TOPO set never waits alone. */
static relayResult_t loadTopo(struct relayComm* c, const char* fallback, relayTopoDetectFn detect) {
  relayResult_t local = relaySuccess;
  if (c->cfg.topo[0] && relayTopoLoad(c->cfg.topo, &c->topo) != relaySuccess)
    local = relaySetError(c, relayInvalidArgument, "RELAYCC_TOPO / config.topo = \"%s\": %s", c->cfg.topo,
                          relayGetLastError(NULL));
  if (detect) {
    struct relayTopo* found = NULL;
    relayResult_t r = detect(c, &found);
    if (r != relaySuccess) return r;
    if (local == relaySuccess && !c->topo) c->topo = found;
    else relayTopoFree(found);
  }
  if (local == relaySuccess && !c->topo && fallback && *fallback &&
      relayTopoLoad(fallback, &c->topo) != relaySuccess)
    local = relaySetError(c, relayInternalError, "preset \"%s\": %s", fallback, relayGetLastError(NULL));
  return relayCommAgreeTopo(c, local);
}

relayResult_t relayInitFinish(struct relayComm* c, const char* topoFallback, relayTopoDetectFn detect) {
  relayResult_t res = agreeParams(c);
  if (res == relaySuccess) res = loadTopo(c, topoFallback, detect);
  /* Once, for every transport: the node map needs the agreed topology (it
   * turns the one-node model into one of the comm's nodes). */
  if (res == relaySuccess) res = relayCommDiscoverNodes(c);
  int level = relayDebugLevel();
  if (res == relaySuccess && (level >= 2 || (level >= 1 && c->rank == 0))) {
    char prefix[64];
    snprintf(prefix, sizeof prefix, "relaycc: rank %d: param ", c->rank);
    relayParamsPrint(&c->params, prefix, stderr);
  }
  return res;
}

relayResult_t relayInitEnd(struct relayComm* c, relayResult_t res, relayComm_t* out) {
  if (res != relaySuccess) return relayInitFail(c, res);
  /* From here on the comm's errors name the call they happen in, not the init. */
  c->curCallName = NULL;
  if (c->ctrl) c->ctrl->curCallName = NULL;
  *out = c;
  return relaySuccess;
}

void relayCommRelease(struct relayComm* c) {
  if (!c) return;
  relayWindowFreeAll(c); /* before the transport state their handles live in */
  if (c->tp) c->tp->destroy(c);
  relayCommRelease(c->ctrl);
  relayTopoFree(c->topo);
  relayCommFree(c);
}

relayResult_t relayInitFail(struct relayComm* c, relayResult_t res) {
  if (c) relaySetError(NULL, res, "%s", c->lastError);
  relayCommRelease(c);
  return res;
}

void relayInitGuest(struct relayComm* c) {
  c->guest = 1;
  fillConfig(c);
}

static relayResult_t initShm(const char* fn, relayComm_t* out, int nranks, int rank, const char* jobName,
                             const relayConfig_t* config, int guest, int unique) {
  if (!out) return relaySetError(NULL, relayInvalidArgument, "%s: comm (argument 1) is NULL", fn);
  *out = NULL;
  /* A unique name never comes from the environment: RELAYCC_JOB is one launch's name, not a token. */
  if (unique && !jobName)
    return relaySetError(NULL, relayInvalidArgument, "%s: uniqueName (argument 4) is NULL", fn);
  const char* job = jobName;
  struct relayComm* c;
  RELAY_CHECK(relayInitBegin(fn, nranks, rank, &job, config, &c));
  if (guest) relayInitGuest(c);
  relayResult_t res = relayShmAttach(c, job, unique);
  if (res == relaySuccess) res = relayInitFinish(c, "cpu", NULL);
  /* The router prices the shm transport's one-copy path (topo.h oneCopyBytes; bw.c unsets it where the
   * ranks cannot reach each other's memory). */
  if (res == relaySuccess && c->topo) {
    c->topo->oneCopyBytes = (double)relayParamInt(c, RELAY_P_SHM_CMA_BYTES);
    c->topo->oneCopyPairBytes = (double)relayParamInt(c, RELAY_P_SHM_CMA_PAIR_BYTES);
    c->topo->oneCopyRootedBytes = (double)relayParamInt(c, RELAY_P_SHM_CMA_ROOTED_BYTES);
  }
  return relayInitEnd(c, res, out);
}

relayResult_t relayInitShm(relayComm_t* out, int nranks, int rank, const char* jobName,
                           const relayConfig_t* config, int guest) {
  return initShm("relayCommInitShm", out, nranks, rank, jobName, config, guest, 0);
}

relayResult_t relayCommInitShm(relayComm_t* out, int nranks, int rank, const char* jobName,
                               const relayConfig_t* config) {
  return initShm("relayCommInitShm", out, nranks, rank, jobName, config, 0, 0);
}

relayResult_t relayCommInitShmUnique(relayComm_t* out, int nranks, int rank, const char* uniqueName,
                                     const relayConfig_t* config) {
  return initShm("relayCommInitShmUnique", out, nranks, rank, uniqueName, config, 0, 1);
}

relayResult_t relayCommDestroy(relayComm_t comm) {
  if (!comm) return relaySetError(NULL, relayInvalidArgument, "relayCommDestroy: comm is NULL");
  /* The teardown's reports name it (or the abort that called it). */
  if (!comm->curCallName) comm->curCallName = "relayCommDestroy";
  relayCommRelease(comm);
  return relaySuccess;
}
