/*
 * Ranks agree on what they share, and a local failure fails every rank together (shm
 * transport, forked ranks).
 *
 *   topo-differ    ranks of one shm comm hold different topology models
 *                  (config.topo): init must agree on one (relayCommAgreeTopo,
 *                  as the NCCL init does), so every rank routes a call alike.
 *   oneshot-oom    one rank cannot allocate its one-shot state: it must vote
 *                  no in both rounds of the collective prepare, and decline
 *                  stickily, so every rank falls back to direct together.
 *   scratch-oom    a helper cannot allocate its relay scratch at the start of
 *                  a call: it must tell its peers (transport fail op), so
 *                  they return relayRemoteError naming it at once, not at the
 *                  20 s deadline.
 *
 * Usage: test_agreement <case>
 */
#include <dlfcn.h>
#include <stdint.h>
#include <string.h>
#include <time.h>

#include "comm/comm.h"
#include "comm/common.h"
#include "core/core.h"
#include "harness.h"
#include "plan/plan.h"

/* ---- topo-differ ---------------------------------------------------------- */

#define TD_RANKS 8

static int topoDifferRank(int rank, int nranks, void* arg) {
  (void)arg;
  relayConfig_t cfg = RELAY_CONFIG_INITIALIZER;
  cfg.timeoutMs = 10000;
  cfg.topo = rank == 0 ? "mi350x"
                       : "cpu"; /* mi350x routes a 4 MiB all-gather at A=2 through the relay, cpu direct */
  relayComm_t comm = t_comm(rank, nranks, &cfg);
  int ranks[2] = {0, 1}, me = rank < 2 ? rank : -1;
  relayLayout_t L = {1, 2, ranks};
  size_t count = (size_t)1 << 20;
  float* send = malloc(count * sizeof(float));
  float* recv = malloc(2 * count * sizeof(float));
  T_CHECK(send && recv, "oom");
  for (size_t i = 0; i < count; i++) send[i] = (float)(me * 1000 + (int)(i % 997));
  relayResult_t r =
      relayAllGather(me >= 0 ? send : NULL, me >= 0 ? recv : NULL, &count, relayFloat32, &L, comm, NULL);
  T_CHECK(r == relaySuccess, "rank %d: all-gather: %s (%s)", rank, relayGetErrorString(r),
          relayGetLastError(comm));
  if (me >= 0)
    for (int j = 0; j < 2; j++)
      for (size_t i = 0; i < count; i++)
        T_CHECK(recv[(size_t)j * count + i] == (float)(j * 1000 + (int)(i % 997)),
                "rank %d: block %d elem %zu", rank, j, i);
  int route = -1, *all = calloc((size_t)nranks, sizeof *all);
  T_CHECK(all, "oom");
  relayCommLastRoute(comm, &route, NULL);
  T_OK(relayCommAgree(comm, &route, all, sizeof route));
  for (int q = 0; q < nranks; q++)
    T_CHECK(all[q] == route, "rank %d ran route %d, rank %d route %d", q, all[q], rank, route);
  free(all);
  free(send);
  free(recv);
  T_OK(relayCommDestroy(comm));
  return 0;
}

/* ---- oneshot-oom ---------------------------------------------------------- */

#define OS_RANKS 8

#if defined(__SANITIZE_ADDRESS__)
#define REVIEW_CAN_FAIL_CALLOC 0
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(memory_sanitizer) || __has_feature(thread_sanitizer)
#define REVIEW_CAN_FAIL_CALLOC 0
#endif
#endif
#ifndef REVIEW_CAN_FAIL_CALLOC
#define REVIEW_CAN_FAIL_CALLOC 1
#endif

#if REVIEW_CAN_FAIL_CALLOC
/* The next calloc(gFailNmemb, sizeof(void*)) fails once: the one-shot
 * state's per-rank pointer array (src/transport/shm/oneshot.c); the plan builder's
 * callocs of nranks elements are of larger structs. */
extern void* __libc_calloc(size_t, size_t);
static volatile size_t gFailNmemb;
void* calloc(size_t n, size_t sz) {
  if (gFailNmemb && n == gFailNmemb && sz == sizeof(void*)) {
    gFailNmemb = 0;
    return NULL;
  }
  return __libc_calloc(n, sz);
}
#endif

static int oneshotOomRank(int rank, int nranks, void* arg) {
  (void)arg;
  relayConfig_t cfg = RELAY_CONFIG_INITIALIZER;
  cfg.route = relayRouteOneShot;
  cfg.timeoutMs = 10000;
  relayComm_t comm = t_comm(rank, nranks, &cfg);
  int ranks[4] = {1, 3, 5, 7}, me = -1;
  for (int i = 0; i < 4; i++)
    if (ranks[i] == rank) me = i;
  relayLayout_t L = {1, 4, ranks};
  size_t count = 1000;
  int32_t send[1000], recv[1000];
  for (int call = 0; call < 3; call++) {
#if REVIEW_CAN_FAIL_CALLOC
    if (call == 0 && rank == 3) gFailNmemb = (size_t)nranks;
#endif
    for (size_t i = 0; i < count; i++) send[i] = (int32_t)(me * 100 + call * 7 + (int)i);
    relayResult_t r = relayAllReduce(me >= 0 ? send : NULL, me >= 0 ? recv : NULL, &count, relayInt32,
                                     relaySum, &L, comm, NULL);
    T_CHECK(r == relaySuccess, "rank %d call %d: %s (%s)", rank, call, relayGetErrorString(r),
            relayGetLastError(comm));
    int route = -1;
    relayCommLastRoute(comm, &route, NULL);
    T_CHECK(route == relayRouteDirect, "rank %d call %d: ran %s, expected the direct fallback", rank, call,
            relayRouteName(route));
    if (me >= 0)
      for (size_t i = 0; i < count; i++)
        T_CHECK(recv[i] == (int32_t)(600 + 4 * (call * 7 + (int)i)), "rank %d call %d elem %zu: %d", rank,
                call, i, (int)recv[i]);
  }
  T_OK(relayCommDestroy(comm));
  return 0;
}

/* ---- scratch-oom ---------------------------------------------------------- */

#if REVIEW_CAN_FAIL_CALLOC
/* posix_memalign of at least gFailAlignBytes fails once: the shm transport's
 * scratch (the segment and rings are mapped, not allocated this way). */
static volatile size_t gFailAlignBytes;
int posix_memalign(void** p, size_t align, size_t sz) {
  static int (*real)(void**, size_t, size_t);
  if (!real) real = (int (*)(void**, size_t, size_t))dlsym(RTLD_NEXT, "posix_memalign");
  if (gFailAlignBytes && sz >= gFailAlignBytes) {
    gFailAlignBytes = 0;
    return 12; /* ENOMEM */
  }
  return real(p, align, sz);
}
#endif

#define SO_RANKS 8
#define SO_FAILER 3

static int scratchOomRank(int rank, int nranks, void* arg) {
  (void)arg;
  relayConfig_t cfg = RELAY_CONFIG_INITIALIZER;
  cfg.route = relayRouteRelay; /* helpers stage relayed halves in scratch */
  cfg.timeoutMs = 20000;
  relayComm_t comm = t_comm(rank, nranks, &cfg);
  int ranks[2] = {0, 4}, me = rank == 0 ? 0 : rank == 4 ? 1 : -1;
  relayLayout_t L = {1, 2, ranks};
  size_t count = (size_t)1 << 18;
  float* send = malloc(count * sizeof(float));
  float* recv = malloc(count * sizeof(float));
  T_CHECK(send && recv, "oom");
  for (size_t i = 0; i < count; i++) send[i] = (float)(me * 1000 + (int)(i % 997));
#if REVIEW_CAN_FAIL_CALLOC
  if (rank == SO_FAILER) gFailAlignBytes = 4096;
#endif
  uint64_t t0 = relayNowNs();
  relayResult_t r = relayAllReduce(me >= 0 ? send : NULL, me >= 0 ? recv : NULL, &count, relayFloat32,
                                   relaySum, &L, comm, NULL);
  double s = (double)(relayNowNs() - t0) * 1e-9;
  const char* err = relayGetLastError(comm);
  int route = -1;
  relayCommLastRoute(comm, &route, NULL);
  T_CHECK(s < 5.0, "rank %d: the call took %.1f s (%s: %s): a peer waited for the deadline", rank, s,
          relayGetErrorString(r), err);
  if (rank == SO_FAILER) {
    T_CHECK(r == relaySystemError && strstr(err, "scratch"), "rank %d (the failer): %s: %s", rank,
            relayGetErrorString(r), err);
  } else {
    T_CHECK(r == relaySuccess || (r == relayRemoteError && strstr(err, "rank 3")),
            "rank %d: %s: %s (want success or relayRemoteError naming rank 3)", rank, relayGetErrorString(r),
            err);
  }
  /* The actives need the half that went through rank 3. */
  if (me >= 0)
    T_CHECK(r == relayRemoteError, "rank %d (active): %s after rank 3 failed (%s)", rank,
            relayGetErrorString(r), err);
  free(send);
  free(recv);
  /* The failer stays (its destroy would also end its peers' waits): only
   * its fail message can have ended them within 5 s. */
  if (rank == SO_FAILER) {
    struct timespec ts = {7, 0};
    nanosleep(&ts, NULL);
  }
  relayCommDestroy(comm);
  return 0;
}

/* Each case: its rank body, and whether it needs an allocator this process can make fail (not under a
 * sanitizer, which owns malloc). */
typedef struct {
  int nranks;
  relayRankFn rankFn;
  int failsAlloc;
} reviewCase;

static int runReview(void* arg) {
  const reviewCase* c = arg;
  if (c->failsAlloc && !REVIEW_CAN_FAIL_CALLOC) {
    fprintf(stderr, "SKIP: calloc / posix_memalign cannot be interposed under a sanitizer\n");
    return 0;
  }
  t_run_ranks(c->nranks, c->rankFn, NULL, 120);
  return 0;
}

static const tCase kCases[] = {
    {.name = "topo-differ",
     .run = runReview,
     .arg = &(reviewCase){TD_RANKS, topoDifferRank, 0},
     .timeoutS = 180},
    {.name = "oneshot-oom",
     .run = runReview,
     .arg = &(reviewCase){OS_RANKS, oneshotOomRank, 1},
     .timeoutS = 180},
    {.name = "scratch-oom",
     .run = runReview,
     .arg = &(reviewCase){SO_RANKS, scratchOomRank, 1},
     .timeoutS = 180},
};

int main(int argc, char** argv) { return t_main(argc, argv, "agreement", kCases, T_NCASES(kCases)); }
