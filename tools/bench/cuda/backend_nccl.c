/*
 * The NCCL backend of relaycc-bench: relaycc's NCCL transport on real GPUs,
 * one process per GPU, measured against NCCL itself in the same run.
 *
 *  - Each rank: relayCommInitNcclShm on GPU <rank>, one non-blocking stream
 *    for everything (relaycc calls, the baseline, copies, timer events),
 *    cudaMalloc buffers, host copies staged through a pinned bounce buffer
 *    so that every copy is a wait this file can bound.
 *  - Baseline: the same collective in NCCL on a communicator of only the A
 *    active ranks of this rank's group (ncclCommSplit of the relay comm's
 *    own NCCL communicator: color = group, key = active index; helpers get
 *    NCCL_SPLIT_NOCOLOR and stay idle), i.e. what a user would otherwise run:
 *    ncclBroadcast/ncclReduce with the root's active index, ncclSend/ncclRecv
 *    on the pair's communicator for the sendrecv copy, one group of
 *    ncclSend/ncclRecv for all-to-all-v.
 *  - Timing: CUDA events on the rank's stream around one call (per call), or
 *    around one replay of a CUDA graph of K captured calls, divided by K
 *    (--graph, the way latency-bound users run). The start event is recorded
 *    before the call is issued, so per-call times include the host cost of
 *    issuing it (relaycc's overhead over raw NCCL shows there).
 *  - Every host wait is bounded. Device waits poll cudaEventQuery /
 *    cudaStreamQuery with the comm's deadline (RELAYCC_TIMEOUT_MS) and fail
 *    the rank with a message naming the step and the GPU. Calls that block
 *    inside CUDA or NCCL where no poll is possible (ncclCommSplit, lazy NCCL
 *    connection setup, cudaFree's implicit device sync, teardown) run under
 *    a watchdog thread that reports the stuck step and ends the process after
 *    the same deadline plus a margin, so a hang becomes a line in the log.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "gpu_port.h"
#include "transport/nccl/nccl_api.h" /* nccl.h; in the HIP build NCCL's declarations for RCCL */

#include "backend.h"
#include "comm/comm.h"
#include "comm/common.h"
#include "core/core.h"
#include "rank_device.h"
#include "relaycc_nccl.h"
#include "tool_env.h"

/* Calls per captured graph under --graph (RELAYCC_BENCH_GRAPH_CALLS): enough
 * that one graph launch and the barrier skew between ranks are small beside
 * K calls, few enough that a 1 GB replay stays well under a second. */
#define GRAPH_CALLS_DEFAULT 10
#define GRAPH_CALLS_MAX 1000
/* Pinned staging for host copies: large enough that PCIe runs at speed,
 * small enough to be cheap per rank. */
#define BOUNCE_BYTES ((size_t)32 << 20)
/* How long the parent waits for the device-count child (cuInit of many
 * GPUs without persistence mode takes seconds, not minutes). */
#define PROBE_TIMEOUT_MS 60000
/* The watchdog fires this long after the comm's own deadline, so that where
 * relaycc bounds a wait itself, its message (naming rank and step) wins. */
#define WATCHDOG_MARGIN_MS 10000

/* NCCL 2.28 declares ncclAlltoAll; before it, users wrote all-to-all as a
 * group of ncclSend/ncclRecv, and so does the baseline. (Defined on the
 * command line, 0 compiles the group path on a newer NCCL too.) */
#ifndef BENCH_NCCL_ALLTOALL
#define BENCH_NCCL_ALLTOALL (NCCL_VERSION_CODE >= NCCL_VERSION(2, 28, 0))
#endif

/* ---- watchdog ---------------------------------------------------------- */

/* seq is odd while a guarded step runs; the thread fires when it sees the
 * same odd value for longer than the limit. Arming costs two atomic
 * increments, cheap enough for the timed path. */
typedef struct {
  pthread_t thread;
  int started;
  atomic_int stop;
  atomic_uint seq;
  _Atomic(const char*) what;
  int rank, device;
  long long limitMs;
} benchWatchdog;

static void* watchdogMain(void* arg) {
  benchWatchdog* w = arg;
  unsigned seen = 0;
  uint64_t since = 0;
  while (!atomic_load(&w->stop)) {
    struct timespec ts = {0, 100 * 1000000};
    nanosleep(&ts, NULL);
    unsigned s = atomic_load(&w->seq);
    if (!(s & 1u)) {
      seen = 0;
      continue;
    }
    uint64_t now = relayNowNs();
    if (s != seen) {
      seen = s;
      since = now;
      continue;
    }
    if (now - since > (uint64_t)w->limitMs * 1000000ull) {
      const char* what = atomic_load(&w->what);
      /* stdio may be locked by the stuck thread: format here, write(2). */
      char msg[512];
      int n =
          snprintf(msg, sizeof msg,
                   "relaycc-bench: rank %d (GPU %d): %s has not returned after %lld ms (RELAYCC_TIMEOUT_MS + "
                   "%d ms): stuck in CUDA or NCCL, most likely waiting for a peer rank that failed or hung; "
                   "ending this rank\n",
                   w->rank, w->device, what ? what : "a step", w->limitMs, WATCHDOG_MARGIN_MS);
      if (n > 0) {
        ssize_t wr = write(STDERR_FILENO, msg, (size_t)n < sizeof msg ? (size_t)n : sizeof msg - 1);
        (void)wr;
      }
      _exit(6);
    }
  }
  return NULL;
}

static void guardOn(benchWatchdog* w, const char* what) {
  atomic_store_explicit(&w->what, what, memory_order_relaxed);
  atomic_fetch_add_explicit(&w->seq, 1u, memory_order_release);
}
static void guardOff(benchWatchdog* w) { atomic_fetch_add_explicit(&w->seq, 1u, memory_order_release); }

/* ---- state ------------------------------------------------------------- */

typedef struct {
  cudaGraph_t graph;
  cudaGraphExec_t exec;
} benchGraph;

typedef struct {
  relayComm_t comm;
  ncclComm_t base; /* the A actives of this rank's group; NULL on a helper */
  int group, me;   /* this rank's group and active index, -1 on a helper */
  int device;
  int sharesGpu; /* ranks share GPUs (rank r on GPU r % GPUs): timings are no performance */
  int timeoutMs;
  cudaStream_t stream;
  cudaEvent_t t0, t1; /* the timer */
  cudaEvent_t copied; /* bounce-buffer copies */
  void* bounce;       /* pinned, BOUNCE_BYTES */
  int timing;         /* between timerStart and timerStop: run() launches the timed graph */
  int graphCalls;     /* K */
  /* Per target: one captured call (the check and the warm-up replay it,
   * and in-place calls are not idempotent, so the check must see exactly
   * one) and K captured calls (timed). */
  benchGraph one[BENCH_NUM_TARGETS], many[BENCH_NUM_TARGETS];
  int stuck; /* a device wait passed its deadline: work may still run; leak rather than free */
  benchWatchdog wd;
} ncclState;

static const char* targetName(benchTarget t) { return t == BENCH_TARGET_RELAY ? "relaycc" : "nccl baseline"; }

static int cudaFailure(benchRank* r, const char* what, cudaError_t e) {
  ncclState* s = r->state;
  /* Clear a non-sticky error so it is not reported again by a later call. */
  (void)cudaGetLastError();
  snprintf(r->err, sizeof r->err, "GPU %d: %s: %s (%s)", s ? s->device : -1, what, cudaGetErrorString(e),
           cudaGetErrorName(e));
  return 1;
}

static int ncclFailure(benchRank* r, const char* what, ncclResult_t res, ncclComm_t comm) {
  ncclState* s = r->state;
  const char* last = ncclGetLastError(comm);
  snprintf(r->err, sizeof r->err, "GPU %d: %s: %s%s%s", s ? s->device : -1, what, ncclGetErrorString(res),
           last && *last ? ": " : "", last && *last ? last : "");
  return 1;
}

static int relayFailure(benchRank* r, const char* what, relayResult_t res, relayComm_t comm) {
  ncclState* s = r->state;
  snprintf(r->err, sizeof r->err, "GPU %d: %s: %s: %s", s ? s->device : -1, what, relayGetErrorString(res),
           relayGetLastError(comm));
  return 1;
}

/* Wait for an event (or, with ev NULL, the rank's stream) without a blocking
 * synchronize: a peer that never arrives fails this rank after the deadline
 * instead of hanging it. */
static int waitDevice(benchRank* r, cudaEvent_t ev, const char* what) {
  ncclState* s = r->state;
  uint64_t deadline = relayNowNs() + (uint64_t)s->timeoutMs * 1000000ull;
  for (unsigned i = 0;; i++) {
    cudaError_t e = ev ? cudaEventQuery(ev) : cudaStreamQuery(s->stream);
    if (e == cudaSuccess) return 0;
    if (e != cudaErrorNotReady) return cudaFailure(r, what, e);
    if ((i & 63u) == 63u) {
      /* The baseline's NCCL reports a dead peer asynchronously; relaycc's
       * own comm does the same inside its calls. */
      ncclResult_t ae = ncclSuccess;
      if (s->base && ncclCommGetAsyncError(s->base, &ae) == ncclSuccess && ae != ncclSuccess &&
          ae != ncclInProgress) {
        s->stuck = 1;
        return ncclFailure(r, what, ae, s->base);
      }
      if (relayNowNs() > deadline) {
        s->stuck = 1;
        snprintf(
            r->err, sizeof r->err,
            "GPU %d: %s did not finish within %d ms (RELAYCC_TIMEOUT_MS): a peer rank is missing or stuck, "
            "or the device hung",
            s->device, what, s->timeoutMs);
        return 1;
      }
    }
    if (i < 2000) {
      sched_yield();
    } else {
      /* A long call (a 1 GB all-gather takes milliseconds): stop spinning. */
      struct timespec ts = {0, 20000};
      nanosleep(&ts, NULL);
    }
  }
}

/* ---- probe (parent, before any fork: no CUDA here) --------------------- */

/* /dev/nvidia0, /dev/nvidia1, ...: one per GPU the driver exposes to us. */
static int countDeviceFiles(void) {
  DIR* d = opendir("/dev");
  if (!d) return 0;
  int n = 0;
  struct dirent* e;
  while ((e = readdir(d))) {
    const char* p = e->d_name;
    if (strncmp(p, "nvidia", 6) || !p[6]) continue;
    p += 6;
    while (*p >= '0' && *p <= '9') p++;
    if (!*p) n++;
  }
  closedir(d);
  return n;
}

typedef struct {
  int count;
  int err; /* cudaError_t */
  char msg[200];
} probeReport;

/* The device count as CUDA will see it in the ranks (CUDA_VISIBLE_DEVICES,
 * MIG, a working driver), asked in a short-lived child: a CUDA context, and
 * even cuInit, must not exist in the parent, which forks the ranks after. */
static int countCudaDevices(int* count, char* why, size_t whyLen) {
  int fds[2];
  if (pipe2(fds, O_CLOEXEC)) {
    snprintf(why, whyLen, "pipe for the device-count probe: %s", strerror(errno));
    return 1;
  }
  fflush(stdout);
  fflush(stderr);
  pid_t pid = fork();
  if (pid < 0) {
    snprintf(why, whyLen, "fork of the device-count probe: %s", strerror(errno));
    close(fds[0]);
    close(fds[1]);
    return 1;
  }
  if (pid == 0) {
    close(fds[0]);
    probeReport rep;
    memset(&rep, 0, sizeof rep);
    cudaError_t e = cudaGetDeviceCount(&rep.count);
    rep.err = (int)e;
    if (e != cudaSuccess)
      snprintf(rep.msg, sizeof rep.msg, "%s (%s)", cudaGetErrorString(e), cudaGetErrorName(e));
    ssize_t w = write(fds[1], &rep, sizeof rep); /* < PIPE_BUF: atomic */
    _exit(w == (ssize_t)sizeof rep ? 0 : 1);     /* _exit: no atexit handlers of the parent's libraries */
  }
  close(fds[1]);
  probeReport rep;
  size_t got = 0;
  uint64_t deadline = relayNowNs() + (uint64_t)PROBE_TIMEOUT_MS * 1000000ull;
  int timedOut = 0;
  while (got < sizeof rep) {
    uint64_t now = relayNowNs();
    if (now >= deadline) {
      timedOut = 1;
      break;
    }
    struct pollfd pfd = {fds[0], POLLIN, 0};
    int pr = poll(&pfd, 1, (int)((deadline - now) / 1000000ull) + 1);
    if (pr < 0 && errno == EINTR) continue;
    if (pr <= 0) continue;
    ssize_t n = read(fds[0], (char*)&rep + got, sizeof rep - got);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break; /* the child died or closed without a report */
    got += (size_t)n;
  }
  close(fds[0]);
  if (timedOut) kill(pid, SIGKILL);
  int status = 0;
  while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  if (timedOut) {
    snprintf(why, whyLen,
             "the CUDA driver did not answer cudaGetDeviceCount within %d s (probe child killed)",
             PROBE_TIMEOUT_MS / 1000);
    return 1;
  }
  if (got < sizeof rep) {
    if (WIFSIGNALED(status))
      snprintf(why, whyLen, "the device-count probe (cudaGetDeviceCount in a child) died on signal %d (%s)",
               WTERMSIG(status), strsignal(WTERMSIG(status)));
    else
      snprintf(why, whyLen, "the device-count probe (cudaGetDeviceCount in a child) exited without a report");
    return 1;
  }
  if (rep.err != (int)cudaSuccess) {
    snprintf(why, whyLen, "cudaGetDeviceCount: %s", rep.msg);
    return 1;
  }
  *count = rep.count;
  return 0;
}

static int ncclProbe(int* defaultRanks, char* why, size_t whyLen) {
  const char* cvd = getenv("CUDA_VISIBLE_DEVICES");
  char cvdNote[160] = "";
  if (cvd) snprintf(cvdNote, sizeof cvdNote, "; CUDA_VISIBLE_DEVICES='%.100s'", cvd);
  int files = countDeviceFiles();
  if (files == 0) {
    /* The fast answer on a machine without GPUs (CI): no child, no CUDA. */
    snprintf(
        why, whyLen,
        "no NVIDIA GPU on this machine (no /dev/nvidia<N> device files: no GPU, the driver is not loaded, or "
        "none was passed into this container)");
    return 1;
  }
  int count = 0;
  char sub[320];
  if (countCudaDevices(&count, sub, sizeof sub)) {
    snprintf(why, whyLen, "no usable GPU: %s (%d /dev/nvidia<N> device files%s)", sub, files, cvdNote);
    return 1;
  }
  if (count < 1) {
    snprintf(why, whyLen, "no GPU visible to CUDA (%d /dev/nvidia<N> device files%s)", files, cvdNote);
    return 1;
  }
  *defaultRanks = count;
  return 0;
}

/* ---- init / fini ------------------------------------------------------- */

static int graphCallsFromEnv(void) {
  long k = relayEnvLong("RELAYCC_BENCH_GRAPH_CALLS", GRAPH_CALLS_DEFAULT);
  if (k < 1) k = 1;
  if (k > GRAPH_CALLS_MAX) k = GRAPH_CALLS_MAX;
  return (int)k;
}

/* Streams, events, pinned staging and the watchdog: everything local. */
static int localSetup(benchRank* r) {
  ncclState* s = r->state;
  ncclComm_t parent = NULL;
  relayResult_t rr = relayCommGetNcclComm(s->comm, &parent);
  if (rr != relaySuccess) return relayFailure(r, "relayCommGetNcclComm", rr, s->comm);
  ncclResult_t nr = ncclCommCuDevice(parent, &s->device);
  if (nr != ncclSuccess) return ncclFailure(r, "ncclCommCuDevice", nr, parent);
  cudaError_t e = cudaSetDevice(s->device);
  if (e != cudaSuccess) return cudaFailure(r, "cudaSetDevice", e);
  /* Non-blocking: no implicit ordering with the legacy default stream that
   * another library might use; every ordering here is on this one stream. */
  e = cudaStreamCreateWithFlags(&s->stream, cudaStreamNonBlocking);
  if (e != cudaSuccess) return cudaFailure(r, "cudaStreamCreateWithFlags", e);
  e = cudaEventCreate(&s->t0);
  if (e == cudaSuccess) e = cudaEventCreate(&s->t1);
  if (e == cudaSuccess) e = cudaEventCreateWithFlags(&s->copied, cudaEventDisableTiming);
  if (e != cudaSuccess) return cudaFailure(r, "cudaEventCreate", e);
  e = cudaMallocHost(&s->bounce, BOUNCE_BYTES);
  if (e != cudaSuccess) {
    s->bounce = NULL;
    return cudaFailure(r, "cudaMallocHost of the 32 MiB pinned staging buffer", e);
  }
  s->wd.rank = r->rank;
  s->wd.device = s->device;
  s->wd.limitMs = (long long)s->timeoutMs + WATCHDOG_MARGIN_MS;
  if (pthread_create(&s->wd.thread, NULL, watchdogMain, &s->wd)) {
    snprintf(r->err, sizeof r->err, "GPU %d: pthread_create of the watchdog failed", s->device);
    return 1;
  }
  s->wd.started = 1;
  return 0;
}

static int ncclInit(benchRank* r) {
  /* Before any NCCL init in this process: no NVLink SHARP (multicast)
   * buffers, on the relay comm or on the baseline's split. Unset only:
   * a user who sets it has the last word. */
  setenv("NCCL_NVLS_ENABLE", "0", 0);
  ncclState* s = calloc(1, sizeof *s);
  if (!s) {
    snprintf(r->err, sizeof r->err, "out of memory");
    return 1;
  }
  int ndev = 1;
  if (cudaGetDeviceCount(&ndev) != cudaSuccess || ndev < 1) ndev = 1; /* init below names the CUDA error */
  cudaGetLastError();
  s->device = relayRankDevice(r->rank, r->nranks, ndev, r->job);
  s->sharesGpu = relayRanksShareGpus(r->nranks, ndev);
  s->group = s->me = -1;
  s->graphCalls = graphCallsFromEnv();
  const benchOpts* o = r->opts;
  for (int i = 0; i < o->nGroups * o->nActive; i++)
    if (o->layout[i] == r->rank) s->group = i / o->nActive, s->me = i % o->nActive;
  atomic_init(&s->wd.stop, 0);
  atomic_init(&s->wd.seq, 0u);
  atomic_init(&s->wd.what, NULL);
  r->state = s;

  relayConfig_t cfg = RELAY_CONFIG_INITIALIZER;
  /* Only what was asked on the command line; the rest stays with the
   * RELAYCC_* variables and the library's defaults (as on shm). */
  if (o->route >= 0) cfg.route = o->route;
  if (o->depth >= 0) cfg.depth = o->depth;
  /* GPU <rank % GPUs> of those CUDA shows this process: one GPU per rank, or ranks sharing them. */
  relayResult_t rr = relayCommInitNcclShm(&s->comm, r->nranks, r->rank, r->job, s->device, &cfg);
  if (rr != relaySuccess) {
    s->comm = NULL;
    return relayFailure(r, "relayCommInitNcclShm", rr, NULL);
  }
  s->timeoutMs = s->comm->cfg.timeoutMs;

  /* Local setup, then a vote, so that a rank that failed it does not leave
   * the others blocked in the collective ncclCommSplit below. */
  char localErr[sizeof r->err] = "";
  int32_t ok = localSetup(r) == 0;
  if (!ok) snprintf(localErr, sizeof localErr, "%s", r->err);
  int32_t* oks = calloc((size_t)r->nranks, sizeof *oks);
  if (!oks) {
    snprintf(r->err, sizeof r->err, "out of memory");
    return 1;
  }
  rr = relayCommAgree(s->comm, &ok, oks, sizeof ok);
  if (rr != relaySuccess) {
    free(oks);
    return relayFailure(r, "relayCommAgree (vote on local setup)", rr, s->comm);
  }
  int bad = -1;
  for (int q = 0; q < r->nranks && bad < 0; q++)
    if (!oks[q]) bad = q;
  free(oks);
  if (!ok) {
    snprintf(r->err, sizeof r->err, "%s", localErr);
    return 1;
  }
  if (bad >= 0) {
    snprintf(r->err, sizeof r->err, "GPU %d: rank %d failed its local setup (its own message says why)",
             s->device, bad);
    return 1;
  }

  /* The baseline's communicator: NCCL on exactly the A actives of the group,
   * in active order, as a user without relaycc would build it. Collective
   * over all ranks of the parent; blocking config (inherited), because a
   * non-blocking comm would slow every baseline call down. */
  ncclComm_t parent = NULL;
  rr = relayCommGetNcclComm(s->comm, &parent);
  if (rr != relaySuccess) return relayFailure(r, "relayCommGetNcclComm", rr, s->comm);
  int color = s->group >= 0 ? s->group : NCCL_SPLIT_NOCOLOR;
  int key = s->me >= 0 ? s->me : 0;
  guardOn(&s->wd, "ncclCommSplit (the baseline's communicator)");
  ncclResult_t nr = ncclCommSplit(parent, color, key, &s->base, NULL);
  guardOff(&s->wd);
  if (nr != ncclSuccess) {
    s->base = NULL;
    return ncclFailure(r, "ncclCommSplit (the baseline's communicator of the A actives)", nr, parent);
  }
  if (s->group >= 0) {
    int n = -1, me = -1;
    if (!s->base) {
      snprintf(r->err, sizeof r->err, "GPU %d: ncclCommSplit(color %d) gave no communicator", s->device,
               color);
      return 1;
    }
    nr = ncclCommCount(s->base, &n);
    if (nr == ncclSuccess) nr = ncclCommUserRank(s->base, &me);
    if (nr != ncclSuccess) return ncclFailure(r, "querying the split communicator", nr, s->base);
    if (n != o->nActive || me != s->me) {
      snprintf(r->err, sizeof r->err,
               "GPU %d: the split communicator of group %d has this rank as %d of %d; expected active index "
               "%d of %d",
               s->device, s->group, me, n, s->me, o->nActive);
      return 1;
    }
  }
  return 0;
}

static void destroyGraph(benchGraph* g) {
  if (g->exec) cudaGraphExecDestroy(g->exec);
  if (g->graph) cudaGraphDestroy(g->graph);
  g->exec = NULL;
  g->graph = NULL;
}

static void ncclFini(benchRank* r) {
  ncclState* s = r->state;
  if (!s) return;
  guardOn(&s->wd, "teardown (graphs, the split communicator, relayCommDestroy)");
  /* After a failure the stream may still hold work that waits on a peer:
   * only a drained stream lets graphs and memory go. */
  if (!s->stuck && s->stream && waitDevice(r, NULL, "draining the stream at teardown")) {
    fprintf(stderr, "relaycc-bench: rank %d: %s\n", r->rank, r->err);
    s->stuck = 1;
  }
  if (!s->stuck) {
    for (int t = 0; t < BENCH_NUM_TARGETS; t++) {
      destroyGraph(&s->one[t]);
      destroyGraph(&s->many[t]);
    }
  }
  if (s->base) {
    /* Abort does not wait for the device; destroy does. */
    if (s->stuck) ncclCommAbort(s->base);
    else ncclCommDestroy(s->base);
  }
  if (s->comm) {
    relayResult_t rr = s->stuck ? relayCommAbort(s->comm) : relayCommDestroy(s->comm);
    if (rr != relaySuccess)
      fprintf(stderr, "relaycc-bench: rank %d: %s: %s\n", r->rank,
              s->stuck ? "relayCommAbort" : "relayCommDestroy", relayGetErrorString(rr));
  }
  if (s->t0) cudaEventDestroy(s->t0);
  if (s->t1) cudaEventDestroy(s->t1);
  if (s->copied) cudaEventDestroy(s->copied);
  if (s->stream) cudaStreamDestroy(s->stream);
  if (s->bounce && !s->stuck) cudaFreeHost(s->bounce);
  guardOff(&s->wd);
  if (s->wd.started) {
    atomic_store(&s->wd.stop, 1);
    pthread_join(s->wd.thread, NULL);
  }
  free(s);
  r->state = NULL;
}

static void ncclDescribe(benchRank* r, char* buf, size_t len) {
  ncclState* s = r->state;
  struct cudaDeviceProp p;
  memset(&p, 0, sizeof p);
  if (cudaGetDeviceProperties(&p, s->device) != cudaSuccess) snprintf(p.name, sizeof p.name, "unknown GPU");
  int drv = 0, rt = 0, nv = 0;
  cudaDriverGetVersion(&drv);
  cudaRuntimeGetVersion(&rt);
  ncclGetVersion(&nv);
  const char* nvls = getenv("NCCL_NVLS_ENABLE");
  char timing[96];
  if (r->opts->graph)
    snprintf(timing, sizeof timing, "graph replays of %d calls / %d", s->graphCalls, s->graphCalls);
  else snprintf(timing, sizeof timing, "per call");
  snprintf(buf, len,
           "gpu: %d x %s (sm_%d%d, %d SMs, %.0f GiB), CUDA driver %d.%d runtime %d.%d, NCCL %d.%d.%d, "
           "NVLS_ENABLE=%s, CUDA-event timing %s%s",
           r->nranks, p.name, p.major, p.minor, p.multiProcessorCount, (double)p.totalGlobalMem / (1u << 30),
           drv / 1000, drv % 1000 / 10, rt / 1000, rt % 1000 / 10, nv / 10000, nv % 10000 / 100, nv % 100,
           nvls ? nvls : "unset", timing, s->sharesGpu ? " (" RELAY_SHARED_GPU_NOTE ")" : "");
}

/* ---- memory ------------------------------------------------------------ */

static void* ncclAlloc(benchRank* r, size_t bytes) {
  ncclState* s = r->state;
  void* p = NULL;
  /* Never NULL for 0 bytes: an active rank passes a real buffer even for
   * count 0, and NULL would be an (intended) argument error. */
  guardOn(&s->wd, "cudaMalloc");
  cudaError_t e = cudaMalloc(&p, bytes ? bytes : 256);
  guardOff(&s->wd);
  if (e != cudaSuccess) {
    size_t freeB = 0, totalB = 0;
    (void)cudaGetLastError();
    cudaMemGetInfo(&freeB, &totalB);
    snprintf(r->err, sizeof r->err, "GPU %d: cudaMalloc(%zu bytes): %s (%zu MiB free of %zu MiB)", s->device,
             bytes, cudaGetErrorString(e), freeB >> 20, totalB >> 20);
    return NULL;
  }
  return p;
}

static void ncclRelease(benchRank* r, void* p) {
  ncclState* s = r->state;
  /* cudaFree waits for the whole device: not after a stuck wait. */
  if (!p || s->stuck) return;
  guardOn(&s->wd, "cudaFree");
  cudaFree(p);
  guardOff(&s->wd);
}

/* Host copies in BOUNCE_BYTES pieces through pinned memory, on the rank's
 * stream: truly asynchronous copies, so each piece is a bounded wait (a
 * pageable cudaMemcpy would block inside CUDA with no deadline). */
static int copyImpl(benchRank* r, void* dst, const void* src, size_t bytes, int toDevice) {
  ncclState* s = r->state;
  for (size_t off = 0; off < bytes; off += BOUNCE_BYTES) {
    size_t n = bytes - off < BOUNCE_BYTES ? bytes - off : BOUNCE_BYTES;
    cudaError_t e;
    if (toDevice) {
      memcpy(s->bounce, (const char*)src + off, n);
      e = cudaMemcpyAsync((char*)dst + off, s->bounce, n, cudaMemcpyHostToDevice, s->stream);
    } else {
      e = cudaMemcpyAsync(s->bounce, (const char*)src + off, n, cudaMemcpyDeviceToHost, s->stream);
    }
    if (e == cudaSuccess) e = cudaEventRecord(s->copied, s->stream);
    if (e != cudaSuccess)
      return cudaFailure(r, toDevice ? "cudaMemcpyAsync to the GPU" : "cudaMemcpyAsync to the host", e);
    if (waitDevice(r, s->copied, toDevice ? "a copy to the GPU" : "a copy to the host")) return 1;
    if (!toDevice) memcpy((char*)dst + off, s->bounce, n);
  }
  return 0;
}

static int ncclToDevice(benchRank* r, void* dst, const void* src, size_t bytes) {
  ncclState* s = r->state;
  guardOn(&s->wd, "a copy to the GPU");
  int rc = copyImpl(r, dst, src, bytes, 1);
  guardOff(&s->wd);
  return rc;
}

static int ncclToHost(benchRank* r, void* dst, const void* src, size_t bytes) {
  ncclState* s = r->state;
  guardOn(&s->wd, "a copy to the host");
  int rc = copyImpl(r, dst, src, bytes, 0);
  guardOff(&s->wd);
  return rc;
}

/* ---- calls ------------------------------------------------------------- */

static const char* ncclCallName(relayCollective_t coll) {
  switch (coll) {
    case relayCollectiveAllReduce: return "ncclAllReduce";
    case relayCollectiveAllGather: return "ncclAllGather";
    case relayCollectiveReduceScatter: return "ncclReduceScatter";
#if BENCH_NCCL_ALLTOALL
    case relayCollectiveAllToAll: return "ncclAlltoAll";
#else
    case relayCollectiveAllToAll: return "ncclSend/ncclRecv group (all-to-all)";
#endif
    case relayCollectiveScatter: return "ncclSend/ncclRecv group (scatter)";
    case relayCollectiveGather: return "ncclSend/ncclRecv group (gather)";
    case relayCollectiveBroadcast: return "ncclBroadcast";
    case relayCollectiveReduce: return "ncclReduce";
    case relayCollectiveSend: return "ncclSend/ncclRecv (the pair's copy)";
    case relayCollectiveAllToAllV: return "ncclSend/ncclRecv group (all-to-all-v)";
    default: return "nccl collective";
  }
}

static int issueRelay(benchRank* r, const benchCall* c) {
  ncclState* s = r->state;
  relayStream_t st = (relayStream_t)s->stream;
  if (!relayCollRowOf(c->coll)) {
    snprintf(r->err, sizeof r->err, "collective %d unknown", (int)c->coll);
    return 1;
  }
  relayResult_t res = benchIssueRelay(s->comm, c, st);
  return res == relaySuccess ? 0 : relayFailure(r, benchRelayCallName(c->coll), res, s->comm);
}

/* A rank with nothing to do in the baseline: outside the A actives, or for
 * scatter and gather neither the root nor in the set. */
static int baselineIdle(const ncclState* s, const benchCall* c) {
  return relayCollRankSet(c->coll) ? c->group < 0 : !s->base || c->group < 0;
}

/* Scatter and gather as NCCL users write them (nccl-tests' scatter and
 * gather): one group of ncclSend/ncclRecv on the comm that holds the root
 * and the set -- here the relay comm's own NCCL communicator, every rank of
 * the node, the others idle -- the root's own block included as a send to
 * itself, except in place, where it is already where it belongs. */
static int issueRootedBaseline(benchRank* r, const benchCall* c) {
  ncclState* s = r->state;
  ncclComm_t world = NULL;
  relayResult_t rr = relayCommGetNcclComm(s->comm, &world);
  if (rr != relaySuccess) return relayFailure(r, "relayCommGetNcclComm", rr, s->comm);
  ncclDataType_t dt = (ncclDataType_t)c->dtype;
  size_t es = relayTypeSize(c->dtype), off = 0;
  int scatter = relayCollSendsBlocks(c->coll), isRoot = r->rank == c->root, n = c->layout->nActive;
  ncclResult_t nr = ncclGroupStart();
  for (int i = 0; i < n && nr == ncclSuccess; i++) {
    int member = c->layout->ranks[i];
    size_t cnt = c->counts[i], at = off;
    off += cnt;
    /* In place the root's block of its own buffer is its member buffer. */
    int inPlaceSelf = 0;
    if (isRoot) {
      char* blk = (char*)(scatter ? (void*)c->send : c->recv) + at * es;
      inPlaceSelf = member == r->rank && (scatter ? (void*)blk == c->recv : (const void*)blk == c->send);
      if (!inPlaceSelf)
        nr = scatter ? ncclSend(blk, cnt, dt, member, world, s->stream)
                     : ncclRecv(blk, cnt, dt, member, world, s->stream);
    }
    if (nr == ncclSuccess && member == r->rank && !inPlaceSelf)
      nr = scatter ? ncclRecv(c->recv, cnt, dt, c->root, world, s->stream)
                   : ncclSend(c->send, cnt, dt, c->root, world, s->stream);
  }
  ncclResult_t ne = ncclGroupEnd();
  if (nr == ncclSuccess) nr = ne;
  return nr == ncclSuccess ? 0 : ncclFailure(r, ncclCallName(c->coll), nr, world);
}

/* An exchange among the group's actives as NCCL users write all-to-all-v (and all-to-all before
 * ncclAlltoAll): one group of ncclSend/ncclRecv on the group's communicator, active j's block at
 * sdispls[j] / rdispls[j] elements. A zero-count pair is left out on both of its ranks alike (both
 * know the count), so no empty transfer is posted. */
static ncclResult_t exchangeBaseline(ncclState* s, const benchCall* c, const size_t* sendcounts,
                                     const size_t* sdispls, const size_t* recvcounts, const size_t* rdispls) {
  ncclDataType_t dt = (ncclDataType_t)c->dtype;
  size_t es = relayTypeSize(c->dtype);
  ncclResult_t nr = ncclGroupStart();
  for (int j = 0; j < c->layout->nActive && nr == ncclSuccess; j++) {
    if (sendcounts[j])
      nr = ncclSend((const char*)c->send + sdispls[j] * es, sendcounts[j], dt, j, s->base, s->stream);
    if (nr == ncclSuccess && recvcounts[j])
      nr = ncclRecv((char*)c->recv + rdispls[j] * es, recvcounts[j], dt, j, s->base, s->stream);
  }
  ncclResult_t ne = ncclGroupEnd();
  return nr == ncclSuccess ? ne : nr;
}

/* The baseline: plain NCCL on the group's own communicator. Same datatype
 * and op numbering as relaycc (relaycc.h), so the values cast. */
static int issueBaseline(benchRank* r, const benchCall* c) {
  ncclState* s = r->state;
  if (baselineIdle(s, c)) return 0; /* idle: not in the A actives */
  if (relayCollRankSet(c->coll)) return issueRootedBaseline(r, c);
  size_t count = c->counts[c->group];
  ncclDataType_t dt = (ncclDataType_t)c->dtype;
  ncclRedOp_t op = (ncclRedOp_t)c->op;
  ncclResult_t nr;
  switch (c->coll) {
    case relayCollectiveAllReduce:
      nr = ncclAllReduce(c->send, c->recv, count, dt, op, s->base, s->stream);
      break;
    case relayCollectiveAllGather: nr = ncclAllGather(c->send, c->recv, count, dt, s->base, s->stream); break;
    case relayCollectiveReduceScatter:
      nr = ncclReduceScatter(c->send, c->recv, count, dt, op, s->base, s->stream);
      break;
    case relayCollectiveAllToAll: {
#if BENCH_NCCL_ALLTOALL
      nr = ncclAlltoAll(c->send, c->recv, count, dt, s->base, s->stream);
#else
      /* No ncclAlltoAll before 2.28: the group users wrote instead, A even blocks. */
      size_t even[BENCH_MAX_RANKS], displs[BENCH_MAX_RANKS];
      for (int j = 0; j < c->layout->nActive; j++) even[j] = count, displs[j] = (size_t)j * count;
      nr = exchangeBaseline(s, c, even, displs, even, displs);
#endif
      break;
    }
    /* Broadcast and reduce: the root's active index is its rank in the group's communicator. */
    case relayCollectiveBroadcast:
      nr = ncclBroadcast(c->send, c->recv, count, dt, c->root, s->base, s->stream);
      break;
    case relayCollectiveReduce:
      nr = ncclReduce(c->send, c->recv, count, dt, op, c->root, s->base, s->stream);
      break;
    case relayCollectiveSend: /* the pair's communicator: active 0 sends to active 1 (count 0: neither) */
      if (!count) return 0;
      nr = c->activeIndex == 0 ? ncclSend(c->send, count, dt, 1, s->base, s->stream)
                               : ncclRecv(c->recv, count, dt, 0, s->base, s->stream);
      break;
    case relayCollectiveAllToAllV:
      nr = exchangeBaseline(s, c, c->sendcounts, c->sdispls, c->recvcounts, c->rdispls);
      break;
    default: snprintf(r->err, sizeof r->err, "collective %d unknown", (int)c->coll); return 1;
  }
  return nr == ncclSuccess ? 0 : ncclFailure(r, ncclCallName(c->coll), nr, s->base);
}

static int issue(benchRank* r, const benchCall* c, benchTarget t) {
  return t == BENCH_TARGET_RELAY ? issueRelay(r, c) : issueBaseline(r, c);
}

/* Capture k calls into an instantiated graph. Relaxed mode: relaycc may
 * allocate or create streams on the way (outside the graph), which global
 * mode would forbid. */
static int capture(benchRank* r, const benchCall* c, benchTarget t, int k, benchGraph* g) {
  ncclState* s = r->state;
  cudaError_t e = cudaStreamBeginCapture(s->stream, cudaStreamCaptureModeRelaxed);
  if (e != cudaSuccess) return cudaFailure(r, "cudaStreamBeginCapture", e);
  int rc = 0;
  for (int i = 0; i < k && !rc; i++) rc = issue(r, c, t);
  /* Always end the capture, or the stream stays unusable. */
  cudaGraph_t graph = NULL;
  e = cudaStreamEndCapture(s->stream, &graph);
  if (rc) {
    if (graph) cudaGraphDestroy(graph);
    (void)cudaGetLastError();
    char prev[sizeof r->err];
    snprintf(prev, sizeof prev, "%s", r->err);
    snprintf(r->err, sizeof r->err, "while capturing %d %s calls into a CUDA graph: %.640s", k, targetName(t),
             prev);
    return 1;
  }
  if (e != cudaSuccess) {
    char what[160];
    snprintf(
        what, sizeof what,
        "cudaStreamEndCapture after %d %s calls (a call did something a graph cannot hold, e.g. a host sync)",
        k, targetName(t));
    if (graph) cudaGraphDestroy(graph);
    return cudaFailure(r, what, e);
  }
  e = cudaGraphInstantiate(&g->exec, graph, 0);
  if (e != cudaSuccess) {
    cudaGraphDestroy(graph);
    g->exec = NULL;
    return cudaFailure(r, "cudaGraphInstantiate", e);
  }
  g->graph = graph;
  e = cudaGraphUpload(g->exec, s->stream);
  if (e != cudaSuccess) return cudaFailure(r, "cudaGraphUpload", e);
  return 0;
}

static int prepareImpl(benchRank* r, const benchCall* c, benchTarget t) {
  ncclState* s = r->state;
  destroyGraph(&s->one[t]);
  destroyGraph(&s->many[t]);
  if (!r->opts->graph) return 0;
  if (t == BENCH_TARGET_BASELINE && baselineIdle(s, c)) return 0; /* idle: nothing to capture */
  /* One call outside capture first: scratch, side streams, NCCL's lazy
   * connections and anything relaycc creates collectively come into being
   * here, never inside the graph (hazards G1 and G3 of issue 9). */
  if (issue(r, c, t)) return 1;
  if (waitDevice(r, NULL, "the uncaptured call before capture")) return 1;
  if (capture(r, c, t, 1, &s->one[t])) return 1;
  if (capture(r, c, t, s->graphCalls, &s->many[t])) return 1;
  /* Replay the timed graph once: its first launch pays one-time costs that
   * must not land in the warm-up-free first timed iteration. The buffers'
   * contents do not matter yet (the check refills them). */
  cudaError_t e = cudaGraphLaunch(s->many[t].exec, s->stream);
  if (e != cudaSuccess) return cudaFailure(r, "cudaGraphLaunch (first replay)", e);
  return waitDevice(r, NULL, "the first replay of the captured graph");
}

static int ncclPrepare(benchRank* r, const benchCall* c, benchTarget t) {
  ncclState* s = r->state;
  guardOn(&s->wd,
          t == BENCH_TARGET_RELAY ? "preparing relaycc's graphs" : "preparing the nccl baseline's graphs");
  int rc = prepareImpl(r, c, t);
  guardOff(&s->wd);
  return rc;
}

static void ncclUnprepare(benchRank* r, const benchCall* c, benchTarget t) {
  (void)c;
  ncclState* s = r->state;
  if (s->stuck) return;
  /* The timed loop ended in timerStop's wait: nothing replays any more. */
  destroyGraph(&s->one[t]);
  destroyGraph(&s->many[t]);
}

static int runImpl(benchRank* r, const benchCall* c, benchTarget t) {
  ncclState* s = r->state;
  if (!r->opts->graph) return issue(r, c, t);
  if (t == BENCH_TARGET_BASELINE && baselineIdle(s, c)) return 0;
  /* Timed: the K-call graph. Otherwise (the check, warm-up): one call, so
   * that an in-place check sees exactly one application. */
  benchGraph* g = s->timing ? &s->many[t] : &s->one[t];
  if (!g->exec) {
    snprintf(r->err, sizeof r->err, "GPU %d: --graph: no captured %s graph (prepare did not run)", s->device,
             targetName(t));
    return 1;
  }
  cudaError_t e = cudaGraphLaunch(g->exec, s->stream);
  return e == cudaSuccess ? 0 : cudaFailure(r, "cudaGraphLaunch", e);
}

static int ncclRun(benchRank* r, const benchCall* c, benchTarget t) {
  ncclState* s = r->state;
  guardOn(&s->wd, t == BENCH_TARGET_RELAY ? benchRelayCallName(c->coll) : ncclCallName(c->coll));
  int rc = runImpl(r, c, t);
  guardOff(&s->wd);
  return rc;
}

static int ncclSync(benchRank* r) {
  ncclState* s = r->state;
  guardOn(&s->wd, "waiting for the stream");
  int rc = waitDevice(r, NULL, "the calls issued so far");
  guardOff(&s->wd);
  return rc;
}

/* ---- timer ------------------------------------------------------------- */

static int ncclTimerStart(benchRank* r) {
  ncclState* s = r->state;
  cudaError_t e = cudaEventRecord(s->t0, s->stream);
  if (e != cudaSuccess) return cudaFailure(r, "cudaEventRecord (timer start)", e);
  s->timing = 1;
  return 0;
}

static int ncclTimerStop(benchRank* r, double* us) {
  ncclState* s = r->state;
  s->timing = 0;
  guardOn(&s->wd, "waiting for a timed call");
  cudaError_t e = cudaEventRecord(s->t1, s->stream);
  int rc = e == cudaSuccess ? waitDevice(r, s->t1, "a timed call")
                            : cudaFailure(r, "cudaEventRecord (timer stop)", e);
  guardOff(&s->wd);
  if (rc) return 1;
  float ms = 0;
  e = cudaEventElapsedTime(&ms, s->t0, s->t1);
  if (e != cudaSuccess) return cudaFailure(r, "cudaEventElapsedTime", e);
  *us = (double)ms * 1e3 / (r->opts->graph ? s->graphCalls : 1);
  return 0;
}

/* ---- host-side agreement (relaycc's shm control plane) ------------------ */

static int ncclBarrier(benchRank* r) {
  ncclState* s = r->state;
  relayResult_t rr = relayCommBarrier(s->comm);
  return rr == relaySuccess ? 0 : relayFailure(r, "relayCommBarrier", rr, s->comm);
}

static int ncclAgree(benchRank* r, const void* mine, void* all, size_t bytes) {
  ncclState* s = r->state;
  relayResult_t rr = relayCommAgree(s->comm, mine, all, bytes);
  return rr == relaySuccess ? 0 : relayFailure(r, "relayCommAgree", rr, s->comm);
}

static void ncclLastRoute(benchRank* r, int* route, int* depth) {
  ncclState* s = r->state;
  relayCommLastRoute(s->comm, route, depth);
}

const benchBackend benchBackendNccl = {
    .name = "nccl",
    .baselineName = "nccl",
    .hostVisible = 0,
    .hasGraph = 1,
    .oneRankPer = "GPU",
    .probe = ncclProbe,
    .init = ncclInit,
    .fini = ncclFini,
    .describe = ncclDescribe,
    .alloc = ncclAlloc,
    .release = ncclRelease,
    .toDevice = ncclToDevice,
    .toHost = ncclToHost,
    .prepare = ncclPrepare,
    .unprepare = ncclUnprepare,
    .run = ncclRun,
    .sync = ncclSync,
    .timerStart = ncclTimerStart,
    .timerStop = ncclTimerStop,
    .barrier = ncclBarrier,
    .agree = ncclAgree,
    .lastRoute = ncclLastRoute,
};
