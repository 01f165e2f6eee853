/*
 * Registered buffers (windows) and the bandwidth route's direct path on the
 * shm transport (shm/bw.c: process_vm_readv/writev between an entry and an
 * exit barrier), at 8 ranks, route bw forced, 1 KiB tiles and a ring of 3 so
 * that reduces pull many tiles and counts are not multiples of one.
 *
 * Every rank's window is one buffer holding the send at byte offset
 * W_SOFF and the recv after it, both nonzero offsets, the same on every
 * rank (the contract); everything else in the window holds TC_SENTINEL and
 * must come back untouched, the send must come back unchanged (not in
 * place), and the recv is poisoned (TC_POISON) before each call and
 * compared with the serial reference (tc_expected: values encode source,
 * destination block and position). A call asserts that it took the direct
 * path (comm->last.window) or the staged one, as the case expects.
 *
 * Usage: test_window <case>   (cases: kCases at the bottom; --list prints them)
 */
#include <errno.h>
#include <linux/capability.h>
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "colls_common.h"
#include "comm/comm.h"
#include "comm/common.h"
#include "core/core.h"
#include "harness.h"

#define NRANKS 8
#define W_BYTES (1u << 20)
#define W_SOFF 328u /* nonzero, a multiple of 8, not of a tile */

typedef struct {
  relayCollective_t coll;
  relayDataType_t dt;
  relayRedOp_t op;
  int A, inPlace;
  size_t count;
} shape;

/* Active ranks: every (8/A)-th rank from the top, so active index and comm rank differ. */
static int actives(int A, int rank, int* ranks) {
  int me = -1;
  for (int i = 0; i < A; i++) {
    ranks[i] = NRANKS - 1 - i * (NRANKS / A);
    if (ranks[i] == rank) me = i;
  }
  return me;
}

static size_t alignUp(size_t v) { return (v + 7) / 8 * 8; }

/* Where send and recv lie in a buffer of W_BYTES for shape s (the same on every rank). */
static void place(const shape* s, int me, char* buf, char** send, char** recv, size_t delta) {
  size_t es = relayTypeSize(s->dt), c = s->count;
  size_t in = tc_send_elems(s->coll, s->A, c) * es;
  char* sp = buf + W_SOFF;
  char* rp = buf + alignUp(W_SOFF + in + 200) + delta;
  if (s->inPlace && s->coll == relayCollectiveAllGather) sp = rp + (size_t)me * c * es;
  if (s->inPlace && s->coll == relayCollectiveReduceScatter) rp = sp + (size_t)me * c * es;
  if (s->inPlace && s->coll == relayCollectiveAllReduce) rp = sp;
  *send = sp;
  *recv = rp;
}

/* Fills buf and runs one call of s on every rank; returns its result. delta
 * shifts this rank's recv (a broken contract). */
static relayResult_t callPrepared(relayComm_t comm, int rank, const shape* s, char* buf, size_t delta,
                                  char** sendOut, char** recvOut) {
  int ranks[NRANKS];
  int me = actives(s->A, rank, ranks);
  relayLayout_t L = {1, s->A, ranks};
  char *send = NULL, *recv = NULL;
  if (me >= 0) {
    size_t es = relayTypeSize(s->dt);
    memset(buf, TC_SENTINEL, W_BYTES);
    place(s, me, buf, &send, &recv, delta);
    if (!(s->inPlace && s->coll != relayCollectiveAllGather))
      memset(recv, TC_POISON, tc_recv_elems(s->coll, s->A, s->count) * es);
    tc_fill_input(s->coll, s->dt, s->op, s->A, me, s->count, send);
  }
  *sendOut = send;
  *recvOut = recv;
  return tc_run(s->coll, send, recv, &s->count, s->dt, s->op, &L, comm);
}

/* One call that must succeed with the right data, on the direct path of
 * window wantWin (0: the staged path). */
static void oneCall(relayComm_t comm, int rank, const shape* s, char* buf, uint32_t wantWin,
                    const char* tag) {
  int ranks[NRANKS];
  int me = actives(s->A, rank, ranks);
  char *send, *recv;
  relayResult_t r = callPrepared(comm, rank, s, buf, 0, &send, &recv);
  T_CHECK(r == relaySuccess, "rank %d %s: %s A=%d count %zu: %s (%s)", rank, tag, relayCollName(s->coll),
          s->A, s->count, relayGetErrorString(r), relayGetLastError(comm));
  int route = -1;
  relayCommLastRoute(comm, &route, NULL);
  T_CHECK(route == relayRouteBw, "rank %d %s: ran %s", rank, tag, relayRouteName(route));
  uint32_t want = me >= 0 ? wantWin : 0;
  T_CHECK(comm->last.window == want, "rank %d %s: %s A=%d: direct path of window %u, want %u", rank, tag,
          relayCollName(s->coll), s->A, comm->last.window, want);
  if (me < 0) return;
  size_t es = relayTypeSize(s->dt), out = tc_recv_elems(s->coll, s->A, s->count),
         in = tc_send_elems(s->coll, s->A, s->count);
  char* want_ = malloc(out * es + 1);
  char* inCopy = malloc(in * es + 1);
  T_CHECK(want_ && inCopy, "oom");
  tc_expected(s->coll, s->dt, s->op, s->A, me, s->count, want_);
  size_t bad = 0, n = tc_compare(s->dt, recv, want_, out, &bad);
  T_CHECK(n == 0, "rank %d (active %d) %s: %s %s %s A=%d count %zu inPlace %d: %zu wrong, first at %zu", rank,
          me, tag, relayCollName(s->coll), relayTypeName(s->dt), relayOpName(s->op), s->A, s->count,
          s->inPlace, n, bad);
  if (!s->inPlace) { /* peers only read my send */
    tc_fill_input(s->coll, s->dt, s->op, s->A, me, s->count, inCopy);
    T_CHECK(memcmp(send, inCopy, in * es) == 0, "rank %d %s: %s: the send buffer changed", rank, tag,
            relayCollName(s->coll));
  }
  /* Nothing outside send and recv was written. */
  for (size_t b = 0; b < W_BYTES; b++) {
    const char* p = buf + b;
    if ((p >= send && p < send + in * es) || (p >= recv && p < recv + out * es)) continue;
    T_CHECK((unsigned char)*p == TC_SENTINEL, "rank %d %s: %s A=%d: byte %zu of the buffer written (0x%02x)",
            rank, tag, relayCollName(s->coll), s->A, b, (unsigned char)*p);
  }
  free(want_);
  free(inCopy);
}

/* This rank's comm (route bw forced, deadline 60 s) and a window-sized buffer. */
static relayComm_t winComm(int rank, int checkMode, char** buf) {
  relayConfig_t cfg = RELAY_CONFIG_INITIALIZER;
  cfg.route = relayRouteBw;
  cfg.checkMode = checkMode;
  cfg.timeoutMs = 60000;
  *buf = malloc(W_BYTES);
  T_CHECK(*buf, "oom");
  return t_comm(rank, NRANKS, &cfg);
}

static void winDone(relayComm_t comm, char* buf) {
  T_OK(relayCommDestroy(comm));
  free(buf);
}

static relayWindow_t reg(relayComm_t comm, char* buf) {
  relayWindow_t w = NULL;
  relayResult_t r = relayCommRegister(comm, buf, W_BYTES, &w);
  T_CHECK(r == relaySuccess && w, "rank %d: register: %s (%s)", comm->rank, relayGetErrorString(r),
          relayGetLastError(comm));
  T_CHECK(w->direct, "rank %d: window %u is staged-only (process_vm_readv refused? RELAYCC_DEBUG=1 says)",
          comm->rank, w->id);
  return w;
}

static void sleepMs(int ms) {
  struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
  nanosleep(&ts, NULL);
}

/* ---- cases ---------------------------------------------------------------- */

static const relayCollective_t kColls[4] = {relayCollectiveAllReduce, relayCollectiveReduceScatter,
                                            relayCollectiveAllGather, relayCollectiveAllToAll};

/* Every collective at A = 2..8, dtypes x ops x in place, counts 1, 37, 4099. */
static int rankSweep(int rank, int nranks, void* arg) {
  (void)nranks;
  (void)arg;
  char* buf;
  relayComm_t comm = winComm(rank, 0, &buf);
  relayWindow_t w = reg(comm, buf);
  relayDataType_t dts[3] = {relayFloat32, relayBfloat16, relayInt32};
  relayRedOp_t ops[3] = {relaySum, relayAvg, relayMax};
  size_t counts[3] = {1, 37, 4099};
  int k = 0;
  for (int A = 2; A <= 8; A++)
    for (int ci = 0; ci < 4; ci++)
      for (int di = 0; di < 3; di++)
        for (int oi = 0; oi < 3; oi++)
          for (int ip = 0; ip < 2; ip++) {
            if (dts[di] == relayInt32 && ops[oi] == relayAvg) continue;
            if (ci >= 2 && oi > 0) continue;
            if (kColls[ci] == relayCollectiveAllToAll && ip) continue;
            shape s = {kColls[ci], dts[di], ops[oi], A, ip, counts[k++ % 3]};
            oneCall(comm, rank, &s, buf, w->id, "sweep");
          }
  T_OK(relayCommDeregister(comm, w));
  winDone(comm, buf);
  return 0;
}

/* Windowed and staged calls interleaved, shapes changing every call, odd
 * ranks late for a while, then even ranks. */
static int rankInterleave(int rank, int nranks, void* arg) {
  (void)nranks;
  (void)arg;
  char* buf;
  relayComm_t comm = winComm(rank, 0, &buf);
  char* staged = malloc(W_BYTES);
  T_CHECK(buf && staged, "oom");
  relayWindow_t w = reg(comm, buf);
  for (int k = 0; k < 240; k++) {
    int A = 2 + k % 7, windowed = (k / 2) % 2 == 0;
    shape s = {kColls[k % 4],
               k % 3 ? relayFloat32 : relayInt32,
               relaySum,
               A,
               k % 5 == 0 && k % 4 != 3,
               (size_t)(1 + (k * 733) % 3001)};
    int late = k < 120 ? (rank & 1) : !(rank & 1);
    if (k % 3 == 0 && late) sleepMs(3);
    oneCall(comm, rank, &s, windowed ? buf : staged, windowed ? w->id : 0, windowed ? "windowed" : "staged");
  }
  T_OK(relayCommDeregister(comm, w));
  winDone(comm, buf);
  free(staged);
  return 0;
}

/* 10^3 register / call / deregister cycles. */
static int rankCycles(int rank, int nranks, void* arg) {
  (void)nranks;
  (void)arg;
  char* buf;
  relayComm_t comm = winComm(rank, 0, &buf);
  for (int k = 0; k < 1000; k++) {
    relayWindow_t w = reg(comm, buf);
    T_CHECK(w->id == (uint32_t)k + 1 && comm->nWindows == 1, "rank %d cycle %d: window %u, %d registered",
            rank, k, w->id, comm->nWindows);
    shape s = {kColls[k % 4], relayFloat32, relaySum, 2 + k % 3, 0, (size_t)(1 + k % 300)};
    oneCall(comm, rank, &s, buf, w->id, "cycle");
    T_OK(relayCommDeregister(comm, w));
    T_CHECK(comm->nWindows == 0 && comm->directWindows == 0, "rank %d cycle %d: %d left", rank, k,
            comm->nWindows);
  }
  /* A window left registered is freed by destroy. */
  reg(comm, buf);
  winDone(comm, buf);
  return 0;
}

/* Every rank fails alike, naming the rank at fault and quoting its own message (ownMsg), not a paraphrase;
 * nothing is registered. */
static void expectRegFail(relayComm_t comm, int rank, int bad, relayResult_t want, void* buff, size_t bytes,
                          relayWindow_t* win, const char* ownMsg, const char* what) {
  relayResult_t r = relayCommRegister(comm, buff, bytes, win);
  const char* e = relayGetLastError(comm);
  char name[32];
  snprintf(name, sizeof name, "rank %d", bad);
  T_CHECK(r == want, "rank %d: %s: %s, want %s (%s)", rank, what, relayGetErrorString(r),
          relayGetErrorString(want), e);
  T_CHECK(strstr(e, "relayCommRegister (rank") && strstr(e, ownMsg) && (rank == bad || strstr(e, name)),
          "rank %d: %s: message '%s'", rank, what, e);
  T_CHECK(comm->nWindows == 0 && (!win || !*win), "rank %d: %s: %d windows registered", rank, what,
          comm->nWindows);
}

static int rankBadArgs(int rank, int nranks, void* arg) {
  (void)nranks;
  (void)arg;
  char* buf;
  relayComm_t comm = winComm(rank, 0, &buf);
  char* other = malloc(W_BYTES);
  T_CHECK(buf && other, "oom");
  relayWindow_t w = NULL;
  expectRegFail(comm, rank, 3, relayInvalidArgument, rank == 3 ? NULL : buf, W_BYTES, &w,
                "buff is NULL with bytes = 1048576", "NULL on rank 3");
  expectRegFail(comm, rank, 2, relayInvalidArgument, buf, rank == 2 ? 0 : W_BYTES, &w, "bytes is 0",
                "0 bytes on rank 2");
  expectRegFail(comm, rank, 5, relayInvalidArgument, buf, rank == 5 ? W_BYTES - 8 : W_BYTES, &w,
                "rank 5 registers", "size mismatch on rank 5");
  expectRegFail(comm, rank, 1, relayInvalidArgument, buf, W_BYTES, rank == 1 ? NULL : &w, "win (argument 4)",
                "win NULL on rank 1");
  {
    relayResult_t r = relayCommRegister(comm, NULL, 0, &w);
    T_CHECK(r == relayInvalidArgument && strstr(relayGetLastError(comm), "no rank passed a buffer"),
            "rank %d: no buffers anywhere: %s (%s)", rank, relayGetErrorString(r), relayGetLastError(comm));
  }
  /* The comm is usable: a staged call. */
  shape s = {relayCollectiveAllReduce, relayFloat32, relaySum, 4, 0, 999};
  oneCall(comm, rank, &s, buf, 0, "after bad registrations");
  /* Helpers may pass NULL, 0: the ranks that are not active at A = 4 here. */
  relayWindow_t hw = NULL;
  int act[NRANKS], isActive = actives(4, rank, act) >= 0;
  T_OK(relayCommRegister(comm, isActive ? buf : NULL, isActive ? W_BYTES : 0, &hw));
  oneCall(comm, rank, &s, buf, hw->id, "helpers without buffers");
  T_OK(relayCommDeregister(comm, hw));
  /* Deregister: an unknown handle on rank 6, a foreign one (another comm's) on rank 4, NULL on rank 0,
   * another window of this comm on rank 2: every rank fails, nothing is deregistered, the window still works.
   */
  w = reg(comm, buf);
  relayWindow_t w2 = reg(comm, other);
  char name[160];
  snprintf(name, sizeof name, "%s-b", t_job());
  relayComm_t comm2 = NULL;
  relayConfig_t cfg = RELAY_CONFIG_INITIALIZER;
  T_OK(relayCommInitShm(&comm2, NRANKS, rank, name, &cfg));
  relayWindow_t foreign = NULL;
  T_OK(relayCommRegister(comm2, other, 4096, &foreign));
  struct {
    int bad;
    relayWindow_t h;
    relayResult_t want;
    const char* own;
  } cases[] = {{6, (relayWindow_t)(void*)&name[1], relayInvalidArgument, "not a window of this comm"},
               {4, foreign, relayInvalidArgument, "not a window of this comm"},
               {0, NULL, relayInvalidArgument, "win is NULL"},
               {2, w2, relayInvalidUsage, "rank 2 deregisters"}};
  for (int i = 0; i < 4; i++) {
    relayResult_t r = relayCommDeregister(comm, rank == cases[i].bad ? cases[i].h : w);
    const char* e = relayGetLastError(comm);
    char bad[16];
    snprintf(bad, sizeof bad, "rank %d", cases[i].bad);
    T_CHECK(r == cases[i].want && strstr(e, "relayCommDeregister (rank") && strstr(e, cases[i].own) &&
                (rank == cases[i].bad || strstr(e, bad)),
            "rank %d: deregister case %d: %s (%s)", rank, i, relayGetErrorString(r), e);
    T_CHECK(comm->nWindows == 2, "rank %d: deregister case %d: %d windows left", rank, i, comm->nWindows);
  }
  oneCall(comm, rank, &s, buf, w->id, "after bad deregistrations");
  T_OK(relayCommDeregister(comm, w));
  T_OK(relayCommDeregister(comm, w2));
  T_CHECK(comm->nWindows == 0, "rank %d: %d windows left", rank, comm->nWindows);
  oneCall(comm, rank, &s, buf, 0, "after deregistration");
  T_OK(relayCommDestroy(comm2)); /* with its window still registered */
  winDone(comm, buf);
  free(other);
  return 0;
}

/* Check mode: active 1 of A = 4 (rank 5) puts its recv 8 bytes further:
 * every rank gets relayInvalidUsage naming it, no recv is written, the comm
 * stays usable. */
static int rankCheckOffset(int rank, int nranks, void* arg) {
  (void)nranks;
  (void)arg;
  char* buf;
  relayComm_t comm = winComm(rank, 1, &buf);
  relayWindow_t w = reg(comm, buf);
  for (int ci = 0; ci < 4; ci++) {
    shape s = {kColls[ci], relayFloat32, relaySum, 4, 0, 777};
    int ranks[NRANKS];
    int me = actives(4, rank, ranks);
    char *send, *recv;
    /* all-gather and all-to-all compare recv offsets, reduce-scatter the send's: shift what counts. */
    size_t delta = rank == ranks[1] ? 8 : 0;
    /* The recv offset is what peers use, except in a reduce-scatter (they read the send): there it may
     * differ. */
    relayResult_t r = callPrepared(comm, rank, &s, buf, delta, &send, &recv);
    if (kColls[ci] == relayCollectiveReduceScatter) {
      T_CHECK(r == relaySuccess, "rank %d: reduce-scatter with recv offsets that peers never use: %s (%s)",
              rank, relayGetErrorString(r), relayGetLastError(comm));
      continue;
    }
    char name[32];
    snprintf(name, sizeof name, "active rank %d", ranks[1]);
    T_CHECK(r == relayInvalidUsage && strstr(relayGetLastError(comm), name),
            "rank %d: %s with a shifted offset on rank %d: %s (%s)", rank, relayCollName(s.coll), ranks[1],
            relayGetErrorString(r), relayGetLastError(comm));
    if (me >= 0) {
      size_t out = tc_recv_elems(s.coll, 4, s.count) * 4;
      for (size_t b = 0; b < out; b++)
        T_CHECK((unsigned char)recv[b] == TC_POISON, "rank %d: %s rejected, but recv byte %zu written", rank,
                relayCollName(s.coll), b);
    }
    shape ok = s;
    oneCall(comm, rank, &ok, buf, w->id, "after a rejected call");
  }
  winDone(comm, buf);
  return 0;
}

/* Check mode 0, a broken contract: active 1 passes buffers outside the
 * window (the staged path) while the others mean the direct one, then
 * active 2 shifts its recv: every active sees the entries and takes the
 * staged path, so the call is right, on every active. */
static int rankMismatch(int rank, int nranks, void* arg) {
  (void)nranks;
  (void)arg;
  char* buf;
  relayComm_t comm = winComm(rank, 0, &buf);
  char* staged = malloc(W_BYTES);
  T_CHECK(buf && staged, "oom");
  relayWindow_t w = reg(comm, buf);
  int ranks[NRANKS];
  int me = actives(4, rank, ranks);
  for (int ci = 0; ci < 4; ci++) {
    shape s = {kColls[ci], relayFloat32, relaySum, 4, 0, 5000};
    oneCall(comm, rank, &s, me == 1 ? staged : buf, 0, "active 1 outside the window");
    if (kColls[ci] != relayCollectiveReduceScatter) { /* its recv offset is not one peers use */
      char *send, *recv;
      relayResult_t r = callPrepared(comm, rank, &s, buf, me == 2 ? 8 : 0, &send, &recv);
      T_CHECK(r == relaySuccess && comm->last.window == 0,
              "rank %d: %s with active 2's recv shifted: %s, window %u (%s)", rank, relayCollName(s.coll),
              relayGetErrorString(r), comm->last.window, relayGetLastError(comm));
      if (me >= 0) {
        size_t out = tc_recv_elems(s.coll, 4, s.count);
        float* want = malloc(out * sizeof *want);
        T_CHECK(want, "oom");
        tc_expected(s.coll, s.dt, s.op, 4, me, s.count, want);
        size_t bad = 0;
        T_CHECK(tc_compare(s.dt, recv, want, out, &bad) == 0, "rank %d: %s with a shifted recv: wrong at %zu",
                rank, relayCollName(s.coll), bad);
        free(want);
      }
    }
    oneCall(comm, rank, &s, buf, w->id, "after a broken contract");
  }
  winDone(comm, buf);
  free(staged);
  return 0;
}

/* A peer killed while its partner waits in a windowed call: ranks 7 and 3
 * active, rank 3 dies 300 ms after rank 7 entered; rank 7's call ends
 * within 3 s (deadline 60 s), its error naming rank 3. */
static int rankKill(int rank, int nranks, void* arg) {
  (void)nranks;
  (void)arg;
  char* buf;
  relayComm_t comm = winComm(rank, 0, &buf);
  relayWindow_t w = reg(comm, buf);
  shape s = {relayCollectiveAllGather, relayInt32, relaySum, 2, 0, 20000};
  oneCall(comm, rank, &s, buf, w->id, "before the kill"); /* the region exists */
  if (rank == 3) {
    sleepMs(300);
    raise(SIGKILL);
  }
  char *send, *recv;
  uint64_t t0 = relayNowNs();
  relayResult_t r = callPrepared(comm, rank, &s, buf, 0, &send, &recv);
  double dt = (double)(relayNowNs() - t0) / 1e9;
  if (rank == 7)
    T_CHECK(r == relayRemoteError && strstr(relayGetLastError(comm), "rank 3") && dt < 3.0,
            "rank 7: windowed call with a killed peer -> %s after %.2f s (%s)", relayGetErrorString(r), dt,
            relayGetLastError(comm));
  relayCommDestroy(comm); /* rank 7's comm is failed: no T_OK */
  free(buf);
  return 0;
}

/* Rank 1 refuses cross-memory attach (not dumpable, peers without
 * CAP_SYS_PTRACE): the window is staged-only on every rank, and calls on it
 * are right, on the staged path. */
static int rankStagedOnly(int rank, int nranks, void* arg) {
  (void)nranks;
  (void)arg;
  t_drop_ptrace_cap();
  if (rank == 1) T_CHECK(prctl(PR_SET_DUMPABLE, 0) == 0, "prctl: %s", strerror(errno));
  char* buf;
  relayComm_t comm = winComm(rank, 0, &buf);
  relayWindow_t w = NULL;
  T_OK(relayCommRegister(comm, buf, W_BYTES, &w));
  T_CHECK(!w->direct && comm->directWindows == 0, "rank %d: window direct %d with rank 1 refusing attach",
          rank, w->direct);
  for (int ci = 0; ci < 4; ci++) {
    shape s = {kColls[ci], relayFloat32, relaySum, 8, 0, 1234};
    oneCall(comm, rank, &s, buf, 0, "staged-only window");
  }
  T_OK(relayCommDeregister(comm, w));
  winDone(comm, buf);
  return 0;
}

/* Rank 3 dies on purpose: the others must exit 0. */
static int runKill(void) {
  int codes[NRANKS];
  t_launch(NRANKS, rankKill, NULL, 200, 10000, codes);
  for (int r = 0; r < NRANKS; r++)
    T_CHECK(r == 3 ? codes[r] == -SIGKILL : codes[r] == 0, "rank %d exited %d", r, codes[r]);
  return 0;
}

/* 1 KiB tiles, 3 slots: reduces pull many tiles, counts are not multiples of one, the staged ring wraps. */
/* The one-copy path for buffers in no window off (RELAYCC_SHM_CMA_BYTES=0): "staged" here is the staging
 * ring, what a window's direct path replaces; test_oneshot's bwcma cases cover the one-copy path. */
#define W_ENV "RELAYCC_BW_TILE_BYTES=1024;RELAYCC_BW_RING=3;RELAYCC_SHM_CMA_BYTES=0"
#define WIN(nm, fnc, sec) \
  { .name = nm, .rank = fnc, .ranks = NRANKS, .deadlineS = sec, .timeoutS = 600, .env = W_ENV }

static const tCase kCases[] = {
    WIN("sweep", rankSweep, 400),
    WIN("interleave", rankInterleave, 400),
    WIN("cycles", rankCycles, 500),
    WIN("badargs", rankBadArgs, 200),
    WIN("checkoffset", rankCheckOffset, 200),
    WIN("mismatch", rankMismatch, 200),
    /* The same with the one-copy path on (whatever a read costs on this host: RELAYCC_SHM_CMA_SLOW_NS=0):
     * active 1, outside the window, posts its own addresses where the others post the window, so every
     * active still meets the mismatch and takes the staging ring. */
    {.name = "mismatch-cma",
     .rank = rankMismatch,
     .ranks = NRANKS,
     .deadlineS = 200,
     .timeoutS = 600,
     .env =
         "RELAYCC_BW_TILE_BYTES=1024;RELAYCC_BW_RING=3;RELAYCC_SHM_CMA_BYTES=64;RELAYCC_SHM_CMA_SLOW_NS=0"},
    {.name = "kill", .fn = runKill, .timeoutS = 600, .env = W_ENV},
    WIN("stagedonly", rankStagedOnly, 200),
};

int main(int argc, char** argv) { return t_main(argc, argv, "window", kCases, T_NCASES(kCases)); }
