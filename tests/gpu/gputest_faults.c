/*
 * A rank killed on purpose while its GPU work is in flight (8 ranks; run time-sliced, without MPS: a client
 * killed mid-kernel can leave the MPS server undefined, hence the label nomps): its survivors must report a
 * relaycc error naming it within the comm's deadline, never hang, and destroying the comm must return.
 *
 *   helper_killed_relay   A = 2 (ranks 0 and 5), six helpers, the relay route forced at pipeline depth 4,
 *                         all-gather and all-reduce of 2^22 fp32 alternating; helper 3 dies (SIGKILL) 10 ms
 *                         into call 3, while its relay steps are in flight.
 *   active_killed_oneshot A = 8, the one-shot route forced, all-reduce of 4096 fp32; active 5 dies in
 *                         call 20, as soon as every rank has enqueued it.
 *
 * How the kill is injected: every rank notes in a page shared by all ranks (mapped before the fork) the last
 * call it enqueued; the victim enqueues the kill call, waits until every rank has enqueued it too (their
 * kernels are launched and wait on each other), lets it run killDelayMs, and raises SIGKILL from its host
 * thread, having noted when it died and whether its stream was still busy (logged: a kill between two calls
 * would still be a valid death, only a less interesting one). Its peers are then inside that call or the next
 * one, waiting on it.
 *
 * What a survivor does is what a user with a deadline does: each call, then a poll of its stream with
 * relayCommAsyncError (the watchdog's query: a kernel's error word) until the stream is idle; a call still
 * running a deadline + 1 s after the death gets the next call made behind it (on the same buffers), as a
 * host that runs ahead would. The first error, from a call's return, the poll or that next call, is the one
 * judged: relayRemoteError or relayTimeout, within twice the comm's deadline plus a margin of the kill (a
 * survivor may wait a deadline on a peer that itself waited one on the dead rank), its text
 * (relayGetLastError: after an error from the poll, the next call's, which must fail) naming a rank and the
 * call (helper_killed_relay: and the step). A call whose stream finished without an error must have the
 * right data: no success after wrong data. Then relayCommAbort must return within 30 s and the stream must
 * be idle within 30 s of it (the comm's kernels ended). A survivor that sees no error by the kill + the
 * limit + 5 s reports the hang (and what relayCommBarrier, the control plane, says then) and fails; the
 * launcher's deadline (270 s) is the backstop.
 * The parent asserts the exit codes (the victim -SIGKILL, every survivor 0) and that every survivor's error
 * leads to the victim: it names the victim, or a survivor whose error does (rank 0 may learn of a dead
 * helper from the active that waited on it); at least one names it directly.
 * Each survivor's verdict, its error and timings come back through the shared page and are printed.
 * Environment: RELAYCC_GPUTEST_RANKS (8; docs/gpu-harness.md).
 */
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>

#include "comm/comm.h"
#include "comm/common.h"
#include "core/core.h"
#include "gpu/colls_check.h"
#include "gpu/gpu_util.h"
#include "relaycc_nccl.h"

#define NRANKS 8
#define MARGIN_S 10.0 /* beyond twice the deadline: time-sliced ranks, NCCL's socket teardown */
#define SLACK_S 5.0   /* past the limit before a survivor calls it a hang */
#define ABORT_LIMIT_S 30.0

typedef struct {
  const char* name;
  int route, depth;
  int A;
  int actives[NRANKS];
  int victim;
  int killCall;    /* the victim dies in this call (calls before it are verified) */
  int killDelayMs; /* ... this long after every rank enqueued it (its data flowing) */
  size_t count;    /* per active: all-gather send count, all-reduce count */
  int timeoutMs;   /* the comm's deadline once it is up (init runs on 60 s) */
  int colls[2];    /* alternated */
  int nColls;
  int needStep; /* the text must name the step (the relay's errors arise in a plan step) */
} faultCfg;

/* One rank's verdict, written by the rank before it returns. */
typedef struct {
  int done;       /* 1: filled in */
  int res;        /* the first error */
  int via;        /* 0 the call's return, 1 relayCommAsyncError, 2 the next call while one still ran */
  int call;       /* the call it came in */
  double detectS; /* from the victim's death */
  double abortS;  /* relayCommAbort */
  int abortRes;
  char text[640]; /* relayGetLastError */
} rankVerdict;

/* Shared by every rank (MAP_SHARED, mapped before the fork). */
typedef struct {
  int64_t killAtNs; /* the victim's CLOCK_MONOTONIC at its death; 0 before */
  int killCall;
  int inFlight;        /* the victim's stream was busy when it died */
  int entered[NRANKS]; /* the last call each rank enqueued */
  rankVerdict v[NRANKS];
} faultShared;

typedef struct {
  const faultCfg* f;
  faultShared* sh;
  char job[128];
} faultArg;

static const char* const kVia[3] = {"the call", "relayCommAsyncError", "the next call"};

static double limitS(const faultCfg* F) { return 2.0 * F->timeoutMs / 1000.0 + MARGIN_S; }

static double killAt(const faultShared* sh) {
  int64_t k = __atomic_load_n(&sh->killAtNs, __ATOMIC_ACQUIRE);
  return k ? (double)k / 1e9 : 0;
}

/* The victim, having enqueued call `call`: waits until every rank enqueued it too, lets the call run
 * killDelayMs, and dies. */
static void die(ccRank* R, const faultCfg* F, faultShared* sh, int call) {
  double t0 = gpuNow();
  int all = 1;
  for (int r = 0; r < R->nranks; r++)
    while (__atomic_load_n(&sh->entered[r], __ATOMIC_ACQUIRE) < call) {
      if (gpuNow() - t0 > 60.0) { /* a peer stuck before it: die anyway, the survivors still must see it */
        all = 0;
        break;
      }
      struct timespec ts = {0, 100000};
      nanosleep(&ts, NULL);
    }
  struct timespec d = {F->killDelayMs / 1000, (long)(F->killDelayMs % 1000) * 1000000L};
  nanosleep(&d, NULL);
  cudaError_t q = cudaStreamQuery(R->s);
  int busy = q == cudaErrorNotReady;
  sh->killCall = call;
  sh->inFlight = busy;
  __atomic_store_n(&sh->killAtNs, (int64_t)(gpuNow() * 1e9), __ATOMIC_RELEASE);
  gpuLog("killing myself (SIGKILL) in call %d, %.3f s after enqueueing it (%s); my stream is %s", call,
         gpuNow() - t0, all ? "every rank had enqueued it" : "not every rank had enqueued it within 60 s",
         busy ? "busy (kernels in flight)" : "idle");
  raise(SIGKILL);
  for (;;) pause(); /* SIGKILL cannot be caught: never here */
}

/* relayCommAbort with a watchdog of its own: if it does not return within ABORT_LIMIT_S, the rank says so
 * and exits (rather than leaving the launcher's deadline to find it). */
static _Atomic int g_abortDone;
static void* abortWatch(void* arg) {
  (void)arg;
  double t0 = gpuNow();
  while (!atomic_load(&g_abortDone)) {
    if (gpuNow() - t0 > ABORT_LIMIT_S) {
      gpuLog("FAIL: HANG: relayCommAbort did not return within %.0f s", ABORT_LIMIT_S);
      _exit(1);
    }
    struct timespec ts = {0, 10000000};
    nanosleep(&ts, NULL);
  }
  return NULL;
}

static relayResult_t abortBounded(relayComm_t comm, double* seconds) {
  atomic_store(&g_abortDone, 0);
  pthread_t th;
  int watched = pthread_create(&th, NULL, abortWatch, NULL) == 0;
  double t0 = gpuNow();
  relayResult_t r = relayCommAbort(comm);
  *seconds = gpuNow() - t0;
  atomic_store(&g_abortDone, 1);
  if (watched) pthread_join(th, NULL);
  return r;
}

/* Wait for the stream like a watchdog: 0 idle (no error), 1 relayCommAsyncError reported (*res, why),
 * 2 no end and no error by the limit, 3 (once: !probed) the stream still busy a deadline + 1 s after the
 * victim's death, time for the caller's next call (a host that runs ahead, as eager PyTorch does, makes
 * it then). A CUDA error fails the rank (the comm's kernels faulted). */
static int watchWait(ccRank* R, const faultCfg* F, const faultShared* sh, double callStart, int probed,
                     relayResult_t* res, char* why, size_t whyLen) {
  for (;;) {
    cudaError_t e = cudaStreamQuery(R->s);
    G_CHECK(e == cudaSuccess || e == cudaErrorNotReady,
            "the stream failed with a CUDA error: %s (%s) (relaycc: %s)", cudaGetErrorName(e),
            cudaGetErrorString(e), relayGetLastError(R->comm));
    /* Read after the stream is idle too: a kernel that gave up ends its stream and leaves its error word. */
    relayResult_t a = relayCommAsyncError(R->comm, why, whyLen);
    if (a != relaySuccess) {
      *res = a;
      return 1;
    }
    if (e == cudaSuccess) return 0;
    double k = killAt(sh);
    double cap = k > 0 ? k + limitS(F) + SLACK_S : callStart + CC_WAIT_S;
    if (gpuNow() > cap) return 2;
    if (!probed && k > 0 && gpuNow() > k + F->timeoutMs / 1000.0 + 1.0) return 3;
    struct timespec ts = {0, 200000};
    nanosleep(&ts, NULL);
  }
}

/* Does text name rank q ("rank q" followed by no digit)? */
static int namesRank(const char* text, int q) {
  char pat[24];
  int n = snprintf(pat, sizeof pat, "rank %d", q);
  for (const char* p = text; (p = strstr(p, pat)) != NULL; p += n)
    if (p[n] < '0' || p[n] > '9') return 1;
  return 0;
}

/* The ranks text names, other than self (its own prefix names self). */
static int namedRanks(const char* text, int self, int n, int* out) {
  int k = 0;
  for (int q = 0; q < n; q++)
    if (q != self && namesRank(text, q)) out[k++] = q;
  return k;
}

static void caseOf(const faultCfg* F, int call, ccCase* c) {
  memset(c, 0, sizeof *c);
  c->coll = F->colls[call % F->nColls];
  c->dt = relayFloat32;
  c->op = relaySum;
  c->count = F->count;
  c->salt = (unsigned)call + 1;
}

static void checkRoute(ccRank* R, const faultCfg* F, const char* what) {
  int route = -1, depth = 0;
  relayCommLastRoute(R->comm, &route, &depth);
  G_CHECK(route == F->route, "%s ran route %s (depth %d), want %s: the fault would not hit that route", what,
          relayRouteName(route), depth, relayRouteName(F->route));
  if (F->depth > 1)
    G_CHECK(depth >= 2, "%s ran the relay at depth %d: not pipelined (forced %d)", what, depth, F->depth);
}

static int faultRank(int rank, int nranks, void* arg) {
  faultArg* a = arg;
  const faultCfg* F = a->f;
  faultShared* sh = a->sh;
  rankVerdict* V = &sh->v[rank];
  g_logRank = rank;
  ccRank R;
  memset(&R, 0, sizeof R);
  R.rank = rank;
  R.nranks = nranks;
  R.routeName = relayRouteName(F->route);
  ccLayout L;
  memset(&L, 0, sizeof L);
  L.name = F->A == nranks ? "all-active" : "helpers";
  L.l.nGroups = 1;
  L.l.nActive = F->A;
  for (int i = 0; i < F->A; i++) L.ranks[i] = F->actives[i];
  L.l.ranks = L.ranks;

  int dev = gpuRankStart(rank, nranks, a->job);
  G_CUDA(cudaStreamCreateWithFlags(&R.s, cudaStreamNonBlocking));
  ccAllocPools(&R, (size_t)F->A * (F->count + 64) * 4);
  relayConfig_t cfg = RELAY_CONFIG_INITIALIZER;
  cfg.route = F->route;
  cfg.depth = F->depth;
  cfg.timeoutMs = 60000;
  G_RELAY(NULL, relayCommInitNcclShm(&R.comm, nranks, rank, a->job, dev, &cfg));

  /* Call 0 on the init's deadline (a route's first call may make its region: a collective host wait). */
  ccCase c;
  caseOf(F, 0, &c);
  char what[256];
  ccDescribe(what, sizeof what, &R, &L, &c);
  ccRunCase(&R, &L, &c);
  checkRoute(&R, F, what);
  G_RELAY(R.comm, relayCommBarrier(R.comm));
  /* The short deadline from here (an internal field, test only: a short one from the start would also bound
   * the init rendezvous): the kernels read it at each launch, the control plane's waits at each wait. */
  R.comm->cfg.timeoutMs = F->timeoutMs;
  if (R.comm->ctrl) R.comm->ctrl->cfg.timeoutMs = F->timeoutMs;
  G_RELAY(R.comm, relayCommBarrier(R.comm));
  if (rank == 0)
    gpuLog("%s: deadline %d ms from here; rank %d dies after enqueueing call %d", F->name, F->timeoutMs,
           F->victim, F->killCall);

  relayResult_t res = relaySuccess;
  int via = 0, call = 0;
  double errAt = 0;
  char why[512] = "", text[640] = "";
  for (call = 1;; call++) {
    caseOf(F, call, &c);
    ccDescribe(what, sizeof what, &R, &L, &c);
    ccPart P;
    ccPartOf(&R, &L, &c, &P);
    void *send = NULL, *recv = NULL;
    double t0 = gpuNow();
    relayResult_t r = ccLaunch(&R, &L, &c, &P, &send, &recv);
    __atomic_store_n(&sh->entered[rank], call, __ATOMIC_RELEASE);
    if (rank == F->victim && call == F->killCall) die(&R, F, sh, call);
    if (r != relaySuccess) {
      res = r;
      errAt = gpuNow();
      snprintf(text, sizeof text, "%s", relayGetLastError(R.comm));
      break;
    }
    int w, probed = 0;
    relayResult_t rp = relaySuccess;
    while ((w = watchWait(&R, F, sh, t0, probed, &r, why, sizeof why)) == 3) {
      /* The next call on the same buffers (nothing else onto a stream that may never drain: a copy from
       * pageable memory there may block the host). */
      probed = 1;
      gpuLog("call %d still runs %.1f s after rank %d died: making the next call", call,
             gpuNow() - killAt(sh), F->victim);
      rp = ccCall(&R, &L, &c, send, recv);
      if (rp != relaySuccess) break;
    }
    if (rp != relaySuccess) {
      res = rp;
      via = 2;
      errAt = gpuNow();
      snprintf(text, sizeof text, "%s", relayGetLastError(R.comm));
      break;
    }
    if (w == 1) {
      res = r;
      via = 1;
      errAt = gpuNow();
      /* The comm is failed: its next call must say so, naming the rank (relayGetLastError). The same
       * buffers, nothing new on the stream: a copy from pageable memory onto a stream that never drains may
       * block the host. */
      relayResult_t r2 = ccCall(&R, &L, &c, send, recv);
      G_CHECK(r2 != relaySuccess, "call %d succeeded after relayCommAsyncError reported %s: %s", call + 1,
              relayGetErrorString(res), why);
      snprintf(text, sizeof text, "%s", relayGetLastError(R.comm));
      gpuLog("relayCommAsyncError after call %d: %s: %s; call %d then returned %s", call,
             relayGetErrorString(res), why, call + 1, relayGetErrorString(r2));
      break;
    }
    if (w == 2) {
      double k = killAt(sh);
      gpuLog(
          "HANG: call %d (%s): no error from relaycc %.1f s after rank %d died (limit %.0f s): the "
          "stream is still busy and relayCommAsyncError reports nothing",
          call, what, gpuNow() - k, F->victim, limitS(F));
      relayResult_t b = relayCommBarrier(R.comm);
      gpuLog("probe: relayCommBarrier (the control plane) -> %s: %s", relayGetErrorString(b),
             b == relaySuccess ? "" : relayGetLastError(R.comm));
      snprintf(V->text, sizeof V->text, "HANG in call %d; the control plane's barrier then said: %s: %s",
               call, relayGetErrorString(b), b == relaySuccess ? "" : relayGetLastError(R.comm));
      double sa = 0;
      relayResult_t ra = abortBounded(R.comm, &sa);
      gpuLog("relayCommAbort -> %s after %.2f s", relayGetErrorString(ra), sa);
      G_CHECK(0, "rank %d: no error within %.0f s of rank %d's death (call %d on route %s)", rank, limitS(F),
              F->victim, call, R.routeName);
    }
    /* The stream finished and nothing reported an error: the call's data must be right. */
    R.calls++;
    ccVerify(&R, &L, &c, &P, send, recv, what);
    checkRoute(&R, F, what);
    double k = killAt(sh);
    G_CHECK(k == 0 || gpuNow() < k + limitS(F) + SLACK_S,
            "calls keep succeeding (%d so far) %.0f s after rank %d died", call, gpuNow() - k, F->victim);
  }
  double k = killAt(sh);
  V->res = res;
  V->via = via;
  V->call = call;
  V->detectS = k > 0 ? errAt - k : -1;
  snprintf(V->text, sizeof V->text, "%s", text);
  gpuLog("error after %.2f s (call %d, from %s): %s: %s", V->detectS, call, kVia[via],
         relayGetErrorString(res), text);

  /* Destroying the comm must return, and its kernels must end. */
  V->abortRes = abortBounded(R.comm, &V->abortS);
  R.comm = NULL;
  gpuLog("relayCommAbort -> %s after %.2f s", relayGetErrorString((relayResult_t)V->abortRes), V->abortS);
  double td = gpuNow();
  cudaError_t e;
  while ((e = cudaStreamQuery(R.s)) == cudaErrorNotReady && gpuNow() - td < ABORT_LIMIT_S) {
    struct timespec ts = {0, 1000000};
    nanosleep(&ts, NULL);
  }
  V->done = 1;

  G_CHECK(k > 0, "an error (%s) before rank %d died: %s", relayGetErrorString(res), F->victim, text);
  G_CHECK(res == relayRemoteError || res == relayTimeout, "got %s, want relayRemoteError or relayTimeout: %s",
          relayGetErrorString(res), via == 1 ? why : text);
  G_CHECK(V->detectS <= limitS(F),
          "the error came %.2f s after rank %d died (limit %.0f s: twice the %d ms "
          "deadline + %.0f s)",
          V->detectS, F->victim, limitS(F), F->timeoutMs, MARGIN_S);
  int named[NRANKS];
  G_CHECK(namedRanks(text, rank, nranks, named) > 0, "the error names no other rank: %s", text);
  G_CHECK(strstr(text, "call #") != NULL, "the error names no call: %s", text);
  /* The step only where the call's own wait found the failure: one found by a poll after the call returned
   * (work already on the GPU) is reported by the next call, which ran no step yet. */
  if (F->needStep && via == 0) G_CHECK(strstr(text, "step") != NULL, "the error names no step: %s", text);
  G_CHECK(V->abortS < ABORT_LIMIT_S, "relayCommAbort took %.1f s", V->abortS);
  G_CHECK(e == cudaSuccess,
          "the stream is %s %.0f s after relayCommAbort returned: the comm's kernels did not end",
          e == cudaErrorNotReady ? "still busy" : cudaGetErrorString(e), ABORT_LIMIT_S);
  ccFreePools(&R);
  G_CUDA(cudaStreamDestroy(R.s));
  return 0;
}

static int runFault(void* arg) {
  /* Never NVLink SHARP / multicast: on shared machines it can take the node's GPUs out of service. Set
   * before any rank starts NCCL. */
  setenv("NCCL_NVLS_ENABLE", "0", 1);
  const faultCfg* F = arg;
  char logName[96];
  snprintf(logName, sizeof logName, "gputest_faults-%s", F->name);
  gpuLogOpen(logName);
  int n = gpuTestRanks("gputest_faults", NRANKS, NRANKS);
  if (!n) return GPU_SKIP;
  if (getenv("CUDA_MPS_PIPE_DIRECTORY"))
    gpuLog(
        "note: CUDA_MPS_PIPE_DIRECTORY is set: a rank killed mid-kernel can leave an MPS server undefined "
        "(scripts/gputest.sh runs this test with the daemon stopped)");
  faultArg fa;
  memset(&fa, 0, sizeof fa);
  fa.f = F;
  fa.sh = mmap(NULL, sizeof(faultShared), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  G_CHECK(fa.sh != MAP_FAILED, "mmap of the shared page");
  memset(fa.sh, 0, sizeof *fa.sh);
  relayLaunchJobName("gf", fa.job, sizeof fa.job);
  gpuLog(
      "gputest_faults %s: A = %d, route %s depth %d, rank %d dies after enqueueing call %d, "
      "deadline %d ms",
      F->name, F->A, relayRouteName(F->route), F->depth, F->victim, F->killCall, F->timeoutMs);
  double t0 = gpuNow();
  relayLaunchResult res;
  int codes[NRANKS];
  /* Grace after the victim's death (the launch's first failure): the survivors' limit, the abort and the
   * stream's end fit in it. */
  relayLaunchRanks(n, faultRank, &fa, 270000, 200000, &res, codes);
  faultShared* sh = fa.sh;
  int bad = 0;
  for (int r = 0; r < n; r++) {
    const rankVerdict* V = &sh->v[r];
    if (r == F->victim) {
      gpuLog("rank %d: exit %d (the victim; died at call %d, its stream %s)", r, codes[r], sh->killCall,
             sh->inFlight ? "busy" : "idle");
      if (codes[r] != -SIGKILL) {
        gpuLog("FAIL: rank %d exit %d, want -SIGKILL (%d)", r, codes[r], -SIGKILL);
        bad = 1;
      }
      continue;
    }
    gpuLog("rank %d: exit %d; %s after %.2f s (call %d, from %s); abort %s in %.2f s: %s", r, codes[r],
           V->done ? relayGetErrorString((relayResult_t)V->res) : "no verdict", V->detectS, V->call,
           kVia[V->via], relayGetErrorString((relayResult_t)V->abortRes), V->abortS, V->text);
    if (codes[r] != 0) {
      gpuLog("FAIL: survivor rank %d exit %d (its log says why; -1000: killed by the launcher's deadline)", r,
             codes[r]);
      bad = 1;
    }
  }
  /* Every survivor's error leads to the victim: it names it, or names a survivor whose error does. */
  int leads[NRANKS] = {0}, direct = 0;
  for (int r = 0; r < n; r++)
    if (r != F->victim && sh->v[r].done && namesRank(sh->v[r].text, F->victim)) leads[r] = 1, direct++;
  for (int round = 0; round < n; round++)
    for (int r = 0; r < n; r++) {
      if (r == F->victim || leads[r] || !sh->v[r].done) continue;
      int named[NRANKS];
      int k = namedRanks(sh->v[r].text, r, n, named);
      for (int i = 0; i < k; i++)
        if (named[i] != F->victim && leads[named[i]]) leads[r] = 1;
    }
  for (int r = 0; r < n; r++)
    if (r != F->victim && !leads[r]) {
      gpuLog("FAIL: rank %d's error does not lead to rank %d: %s", r, F->victim,
             sh->v[r].text[0] ? sh->v[r].text : "(no verdict)");
      bad = 1;
    }
  if (!direct) {
    gpuLog("FAIL: no survivor's error names rank %d", F->victim);
    bad = 1;
  }
  munmap(fa.sh, sizeof(faultShared));
  if (bad) return 1;
  gpuLog("PASS: %s: %d survivors named rank %d's death (%d directly) in %.1f s", F->name, n - 1, F->victim,
         direct, gpuNow() - t0);
  return 0;
}

static const faultCfg kHelperRelay = {.name = "helper_killed_relay",
                                      .route = relayRouteRelay,
                                      .depth = 4,
                                      .A = 2,
                                      .actives = {0, 5},
                                      .victim = 3,
                                      .killCall = 3,
                                      .killDelayMs = 10,
                                      .count = (size_t)1 << 22,
                                      .timeoutMs = 4000,
                                      .colls = {CC_AG, CC_AR},
                                      .nColls = 2,
                                      .needStep = 1};
static const faultCfg kActiveOneShot = {.name = "active_killed_oneshot",
                                        .route = relayRouteOneShot,
                                        .depth = 0,
                                        .A = 8,
                                        .actives = {0, 1, 2, 3, 4, 5, 6, 7},
                                        .victim = 5,
                                        .killCall = 20,
                                        .count = 4096,
                                        .timeoutMs = 4000,
                                        .colls = {CC_AR},
                                        .nColls = 1};
static const tCase kCases[] = {
    {.name = "helper_killed_relay",
     .run = runFault,
     .arg = (void*)&kHelperRelay,
     .ctest = "gpu_faults_helper_killed_relay",
     .labels = "gpu,nomps",
     .timeoutS = 300,
     .skipCode = GPU_SKIP,
     .serial = 1},
    {.name = "active_killed_oneshot",
     .run = runFault,
     .arg = (void*)&kActiveOneShot,
     .ctest = "gpu_faults_active_killed_oneshot",
     .labels = "gpu,nomps",
     .timeoutS = 300,
     .skipCode = GPU_SKIP,
     .serial = 1},
};

int main(int argc, char** argv) { return t_main(argc, argv, "gpu", kCases, T_NCASES(kCases)); }
