/*
 * Tests of the shared-memory transport, driven through the transport table
 * (comm->tp) so they pin down its contract independently of plans:
 * rendezvous, group semantics (any order, any size, several transfers per
 * peer, self transfers), agreement, and every failure path (size mismatch,
 * missing rank, killed rank, abort, reject, stale segment), each within its
 * deadline.
 *
 * Usage: test_shm <case>   (cases: kCases at the bottom; --list prints them)
 */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdint.h>
#include <string.h>
#include <sched.h>
#include <sys/mman.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "comm/comm.h"
#include "comm/common.h"
#include "core/core.h"
#include "core/init.h"
#include "harness.h"
#include "p2p/p2p.h"
#include "transport/shm.h"

/* ------------------------------------------------------------- helpers */

/* Counters shared by the forked ranks of a case (mapped before the fork). */
static _Atomic int* gShared;

static double tSec(uint64_t t0) { return (double)(relayNowNs() - t0) / 1e9; }

static void tSleepMs(int ms) {
  struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
  while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
  }
}

static relayConfig_t tCfg(int timeoutMs, int ringBytes) {
  relayConfig_t c = RELAY_CONFIG_INITIALIZER;
  c.timeoutMs = timeoutMs;
  if (ringBytes > 0) c.shmRingBytes = ringBytes;
  return c;
}

static relayComm_t tInit(int rank, int nranks, const char* job, const relayConfig_t* cfg) {
  relayComm_t c = NULL;
  relayResult_t r = relayCommInitShm(&c, nranks, rank, job, cfg);
  T_CHECK(r == relaySuccess, "rank %d: init of job %s: %s (%s)", rank, job, relayGetErrorString(r),
          relayGetLastError(NULL));
  return c;
}

/* Every test group runs as one "call" with one step, as the executor would. */
static relayResult_t tGroup(relayComm_t c, const relayXferDesc* s, int ns, const relayXferDesc* r, int nr) {
  /* As core runs a call: in flight, numbered, at step 0 (the error prefix
   * names the call and step from these). */
  atomic_store(&c->inCall, 1);
  c->callSeq++;
  c->curStep = 0;
  relayResult_t res = c->tp->group(c, s, ns, r, nr, P2P_OP_SENDRECV, NULL);
  c->curStep = -1;
  atomic_store(&c->inCall, 0);
  return res;
}

static int tSegmentExists(const char* job) {
  char name[300], path[320];
  relayShmSegmentName(job, 0, name, sizeof name);
  snprintf(path, sizeof path, "/dev/shm%s", name);
  return access(path, F_OK) == 0;
}

/* A byte that depends on source, destination, transfer index and offset, so
 * a misplaced, swapped or shifted byte shows. */
static unsigned char tPat(int src, int dst, int k, size_t off, unsigned iter) {
  uint64_t h =
      ((uint64_t)src << 48) ^ ((uint64_t)dst << 40) ^ ((uint64_t)k << 32) ^ ((uint64_t)iter << 56) ^ off;
  h *= 0x9E3779B97F4A7C15ull;
  return (unsigned char)(h >> 56);
}

/* ---------------------------------------------------------- rendezvous */

static int rankRendezvous(int rank, int nranks, void* arg) {
  (void)arg;
  relayConfig_t cfg = tCfg(20000, 4096);
  relayComm_t c = t_comm(rank, nranks, &cfg);
  int n = -1, r = -1;
  T_OK(relayCommCount(c, &n));
  T_OK(relayCommUserRank(c, &r));
  T_CHECK(n == nranks && r == rank, "rank %d: count %d rank %d", rank, n, r);
  T_CHECK(strcmp(c->tp->name, "shm") == 0, "transport %s", c->tp->name);
  T_OK(c->tp->barrier(c));
  /* Rank 0 unlinked the name once everyone arrived: nothing left behind. */
  T_CHECK(!tSegmentExists(t_job()), "rank %d: /dev/shm/relaycc-%s still exists after init", rank, t_job());
  /* Everyone sees everyone's pid. */
  int pid = (int)getpid(), all[8];
  T_OK(c->tp->agree(c, &pid, all, sizeof pid));
  T_CHECK(all[rank] == pid, "rank %d: own record %d", rank, all[rank]);
  for (int q = 0; q < nranks; q++) T_CHECK(all[q] > 0, "rank %d: pid of rank %d is %d", rank, q, all[q]);
  T_OK(relayCommDestroy(c));
  /* The same job name again, right away (the default name is one name). */
  for (int again = 0; again < 3; again++) {
    c = t_comm(rank, nranks, &cfg);
    T_OK(c->tp->barrier(c));
    T_OK(relayCommDestroy(c));
  }
  return 0;
}

/* Two comms with different job names in one process at once. */
static int rankTwoComms(int rank, int nranks, void* arg) {
  (void)arg;
  char jobA[160], jobB[160];
  snprintf(jobA, sizeof jobA, "%s-a", t_job());
  snprintf(jobB, sizeof jobB, "%s-b", t_job());
  relayConfig_t cfg = tCfg(20000, 4096);
  relayComm_t a = tInit(rank, nranks, jobA, &cfg);
  relayComm_t b = tInit(rank, nranks, jobB, &cfg);
  int next = (rank + 1) % nranks, prev = (rank + nranks - 1) % nranks;
  for (int it = 0; it < 20; it++) {
    unsigned char sa[5000], ra[5000], sb[7000], rb[7000];
    for (size_t i = 0; i < sizeof sa; i++) sa[i] = tPat(rank, next, 0, i, (unsigned)it);
    for (size_t i = 0; i < sizeof sb; i++) sb[i] = tPat(rank, prev, 1, i, (unsigned)it);
    relayXferDesc s1 = {next, sa, sizeof sa}, r1 = {prev, ra, sizeof ra};
    relayXferDesc s2 = {prev, sb, sizeof sb}, r2 = {next, rb, sizeof rb};
    /* Alternate which comm goes first: they must not interfere. */
    if (it & 1) {
      T_OK(tGroup(b, &s2, 1, &r2, 1));
      T_OK(tGroup(a, &s1, 1, &r1, 1));
    } else {
      T_OK(tGroup(a, &s1, 1, &r1, 1));
      T_OK(tGroup(b, &s2, 1, &r2, 1));
    }
    for (size_t i = 0; i < sizeof ra; i++)
      T_CHECK(ra[i] == tPat(prev, rank, 0, i, (unsigned)it), "rank %d it %d: comm a byte %zu", rank, it, i);
    for (size_t i = 0; i < sizeof rb; i++)
      T_CHECK(rb[i] == tPat(next, rank, 1, i, (unsigned)it), "rank %d it %d: comm b byte %zu", rank, it, i);
  }
  T_OK(relayCommDestroy(a));
  T_OK(relayCommDestroy(b));
  return 0;
}

/* ------------------------------------------------------------- groups */

typedef struct {
  int K;           /* transfers per ordered pair (self included) */
  size_t maxBytes; /* per transfer */
  int ring;
  int iters;
} bigArg;

static size_t bigSize(const bigArg* a, int s, int d, int k, int iter) {
  unsigned long long st =
      ((unsigned long long)s << 40) ^ ((unsigned long long)d << 24) ^ ((unsigned)k << 8) ^ (unsigned)iter;
  unsigned long long r = t_rand(&st);
  if (r % 11 == 0) return 0;            /* zero-byte transfers still pair up in order */
  return (size_t)(r % a->maxBytes) | 1; /* odd sizes */
}

/* Every rank sends K transfers to every rank (itself included) in a random
 * interleaving that keeps per-peer order; every byte checked. */
static int rankBig(int rank, int nranks, void* argp) {
  const bigArg* a = argp;
  relayConfig_t cfg = tCfg(20000, a->ring);
  relayComm_t c = t_comm(rank, nranks, &cfg);
  int nx = nranks * a->K;
  relayXferDesc* sends = calloc((size_t)nx, sizeof *sends);
  relayXferDesc* recvs = calloc((size_t)nx, sizeof *recvs);
  int* left = calloc((size_t)nranks, sizeof(int));
  T_CHECK(sends && recvs && left, "oom");
  unsigned long long rng = 1234567ull + (unsigned long long)rank;
  size_t moved = 0;
  uint64_t t0 = relayNowNs();
  for (int it = 0; it < a->iters; it++) {
    for (int pass = 0; pass < 2; pass++) {
      relayXferDesc* x = pass ? recvs : sends;
      for (int p = 0; p < nranks; p++) left[p] = a->K;
      for (int i = 0; i < nx; i++) {
        int p;
        do p = (int)(t_rand(&rng) % (unsigned)nranks);
        while (!left[p]);
        int k = a->K - left[p]--;
        size_t bytes = pass ? bigSize(a, p, rank, k, it) : bigSize(a, rank, p, k, it);
        x[i].peer = p;
        x[i].bytes = bytes;
        x[i].ptr = malloc(bytes ? bytes : 1);
        T_CHECK(x[i].ptr, "oom");
        if (pass == 0) {
          for (size_t o = 0; o < bytes; o++)
            ((unsigned char*)x[i].ptr)[o] = tPat(rank, p, k, o, (unsigned)it);
          moved += bytes;
        } else {
          memset(x[i].ptr, 0xEE, bytes);
        }
      }
    }
    T_OK(tGroup(c, sends, nx, recvs, nx));
    for (int p = 0; p < nranks; p++) left[p] = 0;
    for (int i = 0; i < nx; i++) {
      int p = recvs[i].peer, k = left[p]++;
      const unsigned char* b = recvs[i].ptr;
      for (size_t o = 0; o < recvs[i].bytes; o++)
        T_CHECK(b[o] == tPat(p, rank, k, o, (unsigned)it),
                "rank %d iter %d: transfer %d from rank %d (%zu bytes): byte %zu is %#x, want %#x", rank, it,
                k, p, recvs[i].bytes, o, b[o], tPat(p, rank, k, o, (unsigned)it));
    }
    for (int i = 0; i < nx; i++) {
      free(sends[i].ptr);
      free(recvs[i].ptr);
    }
  }
  if (rank == 0)
    printf("%d ranks, ring %d: %d groups of %d sends each, %.1f MB sent by rank 0 in %.3f s\n", nranks,
           a->ring, a->iters, nx, (double)moved / 1e6, tSec(t0));
  free(sends);
  free(recvs);
  free(left);
  T_OK(relayCommDestroy(c));
  return 0;
}

/* Self transfers alone, and the in-place case (same pointer: nothing moves). */
static int rankSelf(int rank, int nranks, void* arg) {
  (void)arg;
  relayConfig_t cfg = tCfg(20000, 4096);
  relayComm_t c = t_comm(rank, nranks, &cfg);
  unsigned char a[3000], b[3000], z[10];
  for (size_t i = 0; i < sizeof a; i++) a[i] = tPat(rank, rank, 0, i, 0);
  memset(b, 0, sizeof b);
  relayXferDesc s[3] = {{rank, a, 1000}, {rank, a + 1000, 2000}, {rank, z, 0}};
  relayXferDesc r[3] = {{rank, b + 2000, 1000}, {rank, b, 2000}, {rank, NULL, 0}};
  T_OK(tGroup(c, s, 3, r, 3));
  T_CHECK(memcmp(b + 2000, a, 1000) == 0 && memcmp(b, a + 1000, 2000) == 0,
          "rank %d: self transfers misplaced", rank);
  relayXferDesc si = {rank, a, sizeof a}, ri = {rank, a, sizeof a};
  T_OK(tGroup(c, &si, 1, &ri, 1));
  for (size_t i = 0; i < sizeof a; i++)
    T_CHECK(a[i] == tPat(rank, rank, 0, i, 0), "in place changed byte %zu", i);
  /* Self count mismatch is a usage error (and fails the comm). */
  relayXferDesc s2[2] = {{rank, a, 10}, {rank, a, 10}};
  relayResult_t res = tGroup(c, s2, 2, r, 1);
  T_CHECK(res == relayInvalidUsage, "rank %d: 2 self sends, 1 self recv -> %s", rank,
          relayGetErrorString(res));
  T_CHECK(c->failed, "comm not failed");
  res = c->tp->barrier(c);
  T_CHECK(res == relayInvalidUsage, "barrier on a failed comm -> %s", relayGetErrorString(res));
  T_OK(relayCommDestroy(c));
  return 0;
}

/* 1000 small back-to-back groups to every peer, sizes 0..200. */
static int rankMany(int rank, int nranks, void* arg) {
  (void)arg;
  relayConfig_t cfg = tCfg(20000, 4096);
  relayComm_t c = t_comm(rank, nranks, &cfg);
  enum { N = 1000, MAXB = 200 };
  unsigned char sb[8][MAXB], rb[8][MAXB];
  relayXferDesc s[8], r[8];
  uint64_t t0 = relayNowNs();
  for (int it = 0; it < N; it++) {
    int ns = 0;
    for (int p = 0; p < nranks; p++) {
      size_t b = (size_t)((it * 7 + rank * 3 + p * 5) % (MAXB + 1));
      size_t rbytes = (size_t)((it * 7 + p * 3 + rank * 5) % (MAXB + 1));
      for (size_t o = 0; o < b; o++) sb[p][o] = tPat(rank, p, it, o, 1);
      memset(rb[p], 0, sizeof rb[p]);
      /* Reverse order on odd ranks: posting order must not matter. */
      int i = (rank & 1) ? nranks - 1 - ns : ns;
      s[i] = (relayXferDesc){p, sb[p], b};
      r[i] = (relayXferDesc){p, rb[p], rbytes};
      ns++;
    }
    T_OK(tGroup(c, s, nranks, r, nranks));
    for (int p = 0; p < nranks; p++) {
      size_t b = (size_t)((it * 7 + p * 3 + rank * 5) % (MAXB + 1));
      for (size_t o = 0; o < b; o++)
        T_CHECK(rb[p][o] == tPat(p, rank, it, o, 1), "rank %d group %d: from %d byte %zu", rank, it, p, o);
    }
  }
  double dt = tSec(t0);
  if (rank == 0) printf("%d ranks: %d groups in %.3f s (%.1f us per group)\n", nranks, N, dt, dt * 1e6 / N);
  T_OK(relayCommDestroy(c));
  return 0;
}

/* ----------------------------------------------------------- agreement */

static int rankAgree(int rank, int nranks, void* arg) {
  (void)arg;
  relayConfig_t cfg = tCfg(20000, 4096);
  relayComm_t c = t_comm(rank, nranks, &cfg);
  unsigned char mine[256], all[8 * 256];
  for (int round = 0; round < 500; round++) {
    size_t bytes = (size_t)(round * 37) % 257;
    for (size_t i = 0; i < bytes; i++) mine[i] = tPat(rank, 0, round, i, 2);
    memset(all, 0, sizeof all);
    T_OK(c->tp->agree(c, mine, all, bytes));
    for (int q = 0; q < nranks; q++)
      for (size_t i = 0; i < bytes; i++)
        T_CHECK(all[(size_t)q * bytes + i] == tPat(q, 0, round, i, 2),
                "rank %d round %d: record of %d byte %zu", rank, round, q, i);
    if (round % 50 == 0) T_OK(c->tp->barrier(c));
  }
  /* Too large a record is an argument error. */
  relayResult_t res = c->tp->agree(c, mine, all, 257);
  T_CHECK(res == relayInvalidArgument, "agree of 257 bytes -> %s", relayGetErrorString(res));
  T_OK(relayCommDestroy(c));
  return 0;
}

/* Ranks disagree on a record's size: relayInvalidUsage, never a hang. */
static int rankAgreeMismatch(int rank, int nranks, void* arg) {
  (void)arg;
  (void)nranks;
  relayConfig_t cfg = tCfg(30000, 4096);
  relayComm_t c = t_comm(rank, nranks, &cfg);
  unsigned char mine[16] = {0}, all[8 * 16];
  uint64_t t0 = relayNowNs();
  relayResult_t res = c->tp->agree(c, mine, all, rank == 1 ? 8 : 16);
  T_CHECK(res == relayInvalidUsage || res == relayRemoteError, "rank %d: -> %s", rank,
          relayGetErrorString(res));
  T_CHECK(tSec(t0) < 5, "rank %d: took %.1f s", rank, tSec(t0));
  relayCommDestroy(c);
  return 0;
}

/* ----------------------------------------------------- failure: mismatch */

typedef struct {
  size_t sent, expected; /* what rank 1 sends to rank 0 and rank 0 expects */
} mismatchArg;

/* Rank 1 sends rank 0 a different size than rank 0 expects; rank 2 exchanges
 * normally with both. Rank 0 must name rank 1 and both sizes; nobody hangs
 * (the 30 s deadline is far above the 5 s we allow). */
static int rankMismatch(int rank, int nranks, void* argp) {
  const mismatchArg* a = argp;
  (void)nranks;
  relayConfig_t cfg = tCfg(30000, 4096);
  relayComm_t c = t_comm(rank, nranks, &cfg);
  size_t big = a->sent > a->expected ? a->sent : a->expected;
  unsigned char* buf = calloc(1, big);
  unsigned char* rbuf = calloc(1, big);
  unsigned char x2[100], r2[2][100];
  relayXferDesc s[2], r[2];
  int ns = 0, nr = 0;
  if (rank == 0) {
    r[nr++] = (relayXferDesc){1, rbuf, a->expected};
    r[nr++] = (relayXferDesc){2, r2[0], 100};
    s[ns++] = (relayXferDesc){2, x2, 100};
  } else if (rank == 1) {
    s[ns++] = (relayXferDesc){0, buf, a->sent};
    s[ns++] = (relayXferDesc){2, x2, 100};
    r[nr++] = (relayXferDesc){2, r2[0], 100};
  } else {
    s[ns++] = (relayXferDesc){0, x2, 100};
    s[ns++] = (relayXferDesc){1, x2, 100};
    r[nr++] = (relayXferDesc){0, r2[0], 100};
    r[nr++] = (relayXferDesc){1, r2[1], 100};
  }
  memset(x2, rank, sizeof x2);
  memset(rbuf, 0xEE, big);
  uint64_t t0 = relayNowNs();
  relayResult_t res = tGroup(c, s, ns, r, nr);
  const char* msg = relayGetLastError(c);
  if (rank == 0) {
    char want1[64], want2[64];
    snprintf(want1, sizeof want1, "%zu bytes", a->sent);
    snprintf(want2, sizeof want2, "expects %zu", a->expected);
    T_CHECK(res == relayInvalidUsage, "rank 0: -> %s (%s)", relayGetErrorString(res), msg);
    T_CHECK(strstr(msg, "rank 1") && strstr(msg, want1) && strstr(msg, want2) && strstr(msg, "step 0"),
            "rank 0: message does not name rank 1, the step and both sizes: %s", msg);
    for (size_t i = 0; i < big; i++) T_CHECK(rbuf[i] == 0xEE, "rank 0: receive buffer written at %zu", i);
  } else if (res != relaySuccess) {
    /* Rank 1 can finish its send (it fit the ring) or be stuck sending; a
     * stuck sender must learn of rank 0's failure. */
    T_CHECK(res == relayRemoteError, "rank %d: -> %s (%s)", rank, relayGetErrorString(res), msg);
  }
  /* Whoever succeeded meets the failed rank 0 in the next call: fast error. */
  if (res == relaySuccess) {
    res = c->tp->barrier(c);
    T_CHECK(res == relayRemoteError && strstr(relayGetLastError(c), "rank 0 failed"),
            "rank %d: barrier -> %s (%s)", rank, relayGetErrorString(res), relayGetLastError(c));
  }
  T_CHECK(tSec(t0) < 5, "rank %d: mismatch took %.1f s to surface", rank, tSec(t0));
  relayCommDestroy(c);
  free(buf);
  free(rbuf);
  return 0;
}

/* ------------------------------------------------------ failure: timeout */

/* Rank 2 never calls: ranks 0 and 1 time out naming it, within the deadline. */
static int rankTimeout(int rank, int nranks, void* arg) {
  (void)arg;
  relayConfig_t cfg = tCfg(rank == 2 ? 20000 : 1500, 4096); /* deadlines are per rank */
  relayComm_t c = t_comm(rank, nranks, &cfg);
  if (rank == 2) {
    /* Alive and idle until both others timed out (destroying or exiting
     * earlier would turn their timeout into "destroyed" / "died"). */
    uint64_t t0 = relayNowNs();
    while (atomic_load(&gShared[0]) < 2 && tSec(t0) < 30) tSleepMs(10);
    relayCommDestroy(c);
    return 0;
  }
  unsigned char sb[8192], rb[8192];
  memset(sb, 1, sizeof sb);
  relayXferDesc s[2] = {{1 - rank, sb, 100}, {2, sb, 8192}}, r[2] = {{1 - rank, rb, 100}, {2, rb, 8192}};
  uint64_t t0 = relayNowNs();
  relayResult_t res = tGroup(c, s, 2, r, 2);
  double dt = tSec(t0);
  const char* msg = relayGetLastError(c);
  T_CHECK(res == relayTimeout, "rank %d: -> %s (%s)", rank, relayGetErrorString(res), msg);
  T_CHECK(dt >= 1.45 && dt < 4.0, "rank %d: timed out after %.2f s, deadline 1.5 s", rank, dt);
  T_CHECK(strstr(msg, "waiting for rank 2") && strstr(msg, "recv 0 of 8192 bytes") &&
              strstr(msg, "1500 ms") && strstr(msg, "step 0"),
          "rank %d: message: %s", rank, msg);
  printf("%s\n", msg);
  atomic_fetch_add(&gShared[0], 1);
  relayCommDestroy(c);
  return 0;
}

/* The same with every spin setting at its most (a million busy polls, a million yields, 0.3 s of them per
 * wait): the polls end at their time bound, so the deadline still ends the wait on time and names the peer.
 * Each rank sets its own process's variables before its init (each rank is a process of its own). */
static int rankTimeoutSpin(int rank, int nranks, void* arg) {
  setenv("RELAYCC_SPIN", "1000000", 1);
  setenv("RELAYCC_SPIN_BUSY", "1000000", 1);
  setenv("RELAYCC_SPIN_US", "300000", 1);
  return rankTimeout(rank, nranks, arg);
}

/* Busy polls only where every rank has a core (fillConfig), judged from the CPUs the ranks may run on
 * together: arg 0 binds both ranks to one CPU (a launch under `taskset -c 0`: 100000 busy polls there
 * spin each wait's 50 us on the core the peer needs; the online count alone said "a core each"), arg 1
 * each rank to a CPU of its own (busy, as the table's default). 77: fewer than 2 CPUs to bind to. */
static int rankSpinCores(int rank, int nranks, void* arg) {
  int own = *(const int*)arg;
  cpu_set_t set, one;
  T_CHECK(sched_getaffinity(0, sizeof set, &set) == 0, "sched_getaffinity: %s", strerror(errno));
  T_CHECK(CPU_COUNT(&set) >= nranks, "rank %d: %d CPUs to bind to", rank, CPU_COUNT(&set));
  int want = own ? rank : 0, cpu = -1;
  for (int i = 0, k = 0; i < CPU_SETSIZE && cpu < 0; i++)
    if (CPU_ISSET(i, &set) && k++ == want) cpu = i;
  CPU_ZERO(&one);
  CPU_SET(cpu, &one);
  T_CHECK(sched_setaffinity(0, sizeof one, &one) == 0, "sched_setaffinity(%d): %s", cpu, strerror(errno));
  relayConfig_t cfg = tCfg(20000, 0);
  relayComm_t c = tInit(rank, nranks, t_job(), &cfg);
  int busy = (int)relayParamInt(c, RELAY_P_SPIN_BUSY);
  T_CHECK(busy > 0, "rank %d: RELAYCC_SPIN_BUSY is %d here: the case needs busy polls on", rank, busy);
  T_CHECK(c->cfg.spinBusy == (own ? busy : 0) && c->cfg.spinAdapt == !own,
          "rank %d on CPU %d (%s): %d busy polls, adapt %d; want %d, %d", rank, cpu,
          own ? "a CPU each" : "both on one", c->cfg.spinBusy, c->cfg.spinAdapt, own ? busy : 0, !own);
  /* And the comm works so bound: a barrier round. */
  T_OK(relayBarrier(c, NULL));
  relayCommDestroy(c);
  return 0;
}
/* A two-CPU case: 2 ranks of rankFn with arg 0, then arg 1 (77: fewer than 2 CPUs to bind to). */
static int runTwoCpus(relayRankFn rankFn) {
  cpu_set_t set;
  if (sched_getaffinity(0, sizeof set, &set) != 0 || CPU_COUNT(&set) < 2) return 77;
  for (int arg = 0; arg < 2; arg++) t_run_ranks(2, rankFn, &arg, 60);
  return 0;
}
static int runSpinCores(void) { return runTwoCpus(rankSpinCores); }

/* Binds the calling rank to the k-th CPU it may run on (as the scheduler may place it). */
static int colocBind(int rank, const cpu_set_t* set, int k) {
  cpu_set_t one;
  int cpu = -1;
  for (int i = 0, j = 0; i < CPU_SETSIZE && cpu < 0; i++)
    if (CPU_ISSET(i, set) && j++ == k) cpu = i;
  T_CHECK(cpu >= 0, "rank %d: no CPU %d to bind to", rank, k);
  CPU_ZERO(&one);
  CPU_SET(cpu, &one);
  T_CHECK(sched_setaffinity(0, sizeof one, &one) == 0, "sched_setaffinity(%d): %s", cpu, strerror(errno));
  return cpu;
}

/* A comm of the spin cases: init unbound (every rank's CPUs allow a core each, so busy polls are on), the
 * CPUs this rank may run on in *set for colocBind. */
static relayComm_t colocInit(int rank, int nranks, cpu_set_t* set) {
  T_CHECK(sched_getaffinity(0, sizeof *set, set) == 0, "sched_getaffinity: %s", strerror(errno));
  relayConfig_t cfg = tCfg(20000, 0);
  relayComm_t c = tInit(rank, nranks, t_job(), &cfg);
  T_CHECK(c->cfg.spinBusy > 0, "rank %d: %d busy polls: the case needs a core per rank at init", rank,
          c->cfg.spinBusy);
  return c;
}

/* One 2-rank all-reduce of kColocN floats, checked against the sum the pattern gives. */
enum { kColocN = 1031 };
static void colocCall(relayComm_t c, int rank, int call) {
  static float send[kColocN], recv[kColocN];
  size_t counts[2] = {kColocN, kColocN};
  int ranks[2] = {0, 1};
  relayLayout_t lay = {1, 2, ranks};
  for (int i = 0; i < kColocN; i++) {
    send[i] = (float)(rank * 1000 + (i % 97) + call % 5);
    recv[i] = -1.0f;
  }
  T_OK(relayAllReduce(send, recv, counts, relayFloat32, relaySum, &lay, c, NULL));
  for (int i = 0; i < kColocN; i++) {
    float ref = (float)(1000 + 2 * (i % 97) + 2 * (call % 5));
    T_CHECK(recv[i] == ref, "rank %d, call %d: element %d = %g, want %g", rank, call, i, recv[i], ref);
  }
}

/* Two ranks the scheduler put on one core, though their CPUs allow a core each (busy polls on): a wait
 * that finds its peer on its own CPU sleeps at once instead of spinning RELAYCC_SPIN_US on the core the
 * peer needs (wait.c, shmPause). Each rank binds itself after its init, as the scheduler may place it (init
 * judged a core each from the affinity masks): arg 0 both on one CPU, where no wait may busy-poll; arg 1 a
 * CPU each, where waits spin as before (busy polls, no co-located wait). Left alone, two ranks may run 300
 * calls without one of them ever waiting (in step on two CPUs; on one, the one the other's ring wakes
 * always arriving last: 2 of 211 runs failed so beside other builds, 130 of 500 with a print in each spin),
 * so every third call one rank, in turn, arrives 200 us late: each rank waits in at least 50 calls. Data
 * checked every call. */
static int rankSpinColocated(int rank, int nranks, void* arg) {
  int together = *(const int*)arg == 0;
  cpu_set_t set;
  relayComm_t c = colocInit(rank, nranks, &set);
  int cpu = colocBind(rank, &set, together ? 0 : rank);
  enum { kCalls = 300, kWarm = 2 };
  uint64_t busy0 = 0, co0 = 0, busy = 0, co = 0;
  for (int call = 0; call < kWarm + kCalls; call++) {
    /* Each rank says where it runs in its first call bound (waiting or not): counted from kWarm on. */
    if (call == kWarm) relayShmWaitCounts(c, &busy0, &co0);
    if (call % 3 == 0 && (call / 3) % 2 == rank) {
      struct timespec ts = {0, 200000};
      nanosleep(&ts, NULL);
    }
    colocCall(c, rank, call);
  }
  relayShmWaitCounts(c, &busy, &co);
  busy -= busy0;
  co -= co0;
  printf("rank %d on CPU %d (%s): %llu busy polls, %llu co-located waits in %d calls\n", rank, cpu,
         together ? "both on one" : "a CPU each", (unsigned long long)busy, (unsigned long long)co, kCalls);
  if (together) {
    T_CHECK(busy == 0, "rank %d: %llu busy polls with its peer on its CPU", rank, (unsigned long long)busy);
    T_CHECK(co > 0, "rank %d: no wait found its peer on its CPU in %d calls", rank, kCalls);
  } else {
    T_CHECK(co == 0, "rank %d: %llu waits took a peer on another CPU for a co-located one", rank,
            (unsigned long long)co);
    T_CHECK(busy > 0, "rank %d: no busy poll in %d calls, %d of them waiting for a late peer", rank, kCalls,
            kCalls / 6);
  }
  relayCommDestroy(c);
  return 0;
}
static int runSpinColocated(void) { return runTwoCpus(rankSpinColocated); }

/* A ring bumps a rank's doorbell only while the rank is armed to sleep (wait.c, shmWake/shmSleep), so a wait
 * that armed and then found its word without sleeping must disarm on the way out, or every ring to that rank
 * pays a locked add and a FUTEX_WAKE until it next sleeps (1-7% of 4-rank calls returned armed with
 * RELAYCC_SPIN_US=1 before the agreement and group loops' last returns disarmed: review of 2026-12-06).
 * Waits here do not poll, so they arm often (at least once, asserted); after every call (an all-reduce
 * checked against the serial sum, a barrier, an all-to-all checked by source and index) this rank is not
 * armed. */
static int rankWaitDisarmed(int rank, int nranks, void* arg) {
  (void)arg;
  setenv("RELAYCC_SPIN", "0", 1); /* no polls: a wait that does not find its word at once arms */
  setenv("RELAYCC_SPIN_BUSY", "0", 1);
  relayConfig_t cfg = tCfg(20000, 0);
  relayComm_t c = tInit(rank, nranks, t_job(), &cfg);
  enum { kCalls = 3000, kCount = 96 };
  int ranks[8];
  for (int i = 0; i < nranks; i++) ranks[i] = i;
  relayLayout_t L = {1, nranks, ranks};
  float in[kCount], out[kCount];
  uint64_t arms = 0;
  for (int call = 0; call < kCalls; call++) {
    size_t n = kCount;
    for (int i = 0; i < kCount; i++) in[i] = (float)(rank * 1000 + i + call % 7), out[i] = -1.0f;
    if (call % 3 == 0) {
      T_OK(relayAllReduce(in, out, &n, relayFloat32, relaySum, &L, c, NULL));
      for (int i = 0; i < kCount; i++) {
        float want = 0;
        for (int r = 0; r < nranks; r++) want += (float)(r * 1000 + i + call % 7);
        T_CHECK(out[i] == want, "rank %d call %d: element %d is %g, want %g", rank, call, i, out[i], want);
      }
    } else if (call % 3 == 1) {
      T_OK(relayBarrier(c, NULL));
    } else {
      size_t each = kCount / (size_t)nranks; /* elements to each peer */
      n = each;
      T_OK(relayAllToAll(in, out, &n, relayFloat32, &L, c, NULL));
      for (int s = 0; s < nranks; s++)
        for (size_t i = 0; i < each; i++) {
          float want = (float)(s * 1000 + (int)((size_t)rank * each + i) + call % 7);
          T_CHECK(out[(size_t)s * each + i] == want,
                  "rank %d call %d: from rank %d element %zu is %g, want %g", rank, call, s, i,
                  out[(size_t)s * each + i], want);
        }
    }
    T_CHECK(!relayShmArmed(c, &arms), "rank %d: still armed after call %d (%s), %llu arms so far", rank, call,
            call % 3 == 0   ? "all-reduce"
            : call % 3 == 1 ? "barrier"
                            : "all-to-all",
            (unsigned long long)arms);
  }
  printf("rank %d: %llu arms in %d calls, none left armed\n", rank, (unsigned long long)arms, kCalls);
  T_CHECK(arms > 0, "rank %d: no wait armed in %d calls without polls: nothing was tested", rank, kCalls);
  relayCommDestroy(c);
  return 0;
}

/* A peer that never waits still says where it runs. Rank 1 waits on CPU 1 (rank 0 arrives 20 ms late,
 * until rank 1's counts show a wait), then moves to rank 0's CPU and from then on arrives 2 ms late to
 * every call, so it finds everything there and never waits, while rank 0 waits in every call. Rank 0's
 * waits must find rank 1 on its CPU and sleep at once: no busy poll after the first call on one CPU. When
 * only a wait said where a rank runs, rank 1's slot kept CPU 1 and rank 0 spun RELAYCC_SPIN_US in every
 * call on the core rank 1 needed (2 ranks on one core, one always arriving last: 20-30 calls of it in
 * spin_colocated under load before something broke the pattern). */
static int rankSpinStale(int rank, int nranks, void* arg) {
  (void)arg;
  cpu_set_t set;
  relayComm_t c = colocInit(rank, nranks, &set);
  colocBind(rank, &set, rank);
  int call = 0, waited = 0;
  for (int tries = 0; tries < 50 && !waited; tries++) {
    uint64_t b0, c0, b1, c1;
    relayShmWaitCounts(c, &b0, &c0);
    if (rank == 0) tSleepMs(20);
    colocCall(c, rank, call++);
    relayShmWaitCounts(c, &b1, &c1);
    /* Both ranks learn whether rank 1 waited, so both run the same calls. */
    int32_t mine = rank == 1 && b1 + c1 > b0 + c0, all = 0;
    size_t one[2] = {1, 1};
    int ranks[2] = {0, 1};
    relayLayout_t lay = {1, 2, ranks};
    T_OK(relayAllReduce(&mine, &all, one, relayInt32, relaySum, &lay, c, NULL));
    waited = all > 0;
  }
  T_CHECK(waited, "rank %d: rank 1 never waited on CPU 1 in 50 tries", rank);
  int cpu = colocBind(rank, &set, 0);
  enum { kCalls = 40 };
  uint64_t busy0 = 0, co0 = 0, busy = 0, co = 0;
  for (int k = 0; k < kCalls; k++) {
    /* Rank 1 says where it runs in the first call on CPU 0: counted from the second. */
    if (k == 1) relayShmWaitCounts(c, &busy0, &co0);
    if (rank == 1) tSleepMs(2);
    colocCall(c, rank, call++);
  }
  relayShmWaitCounts(c, &busy, &co);
  busy -= busy0;
  co -= co0;
  printf("rank %d on CPU %d: %llu busy polls, %llu co-located waits in %d calls\n", rank, cpu,
         (unsigned long long)busy, (unsigned long long)co, kCalls - 1);
  if (rank == 0) {
    T_CHECK(busy == 0, "rank 0: %llu busy polls with rank 1 on its CPU (rank 1 never waits)",
            (unsigned long long)busy);
    T_CHECK(co > 0, "rank 0: no wait found rank 1 on its CPU in %d calls", kCalls - 1);
  }
  relayCommDestroy(c);
  return 0;
}
static int runSpinStale(void) {
  cpu_set_t set;
  if (sched_getaffinity(0, sizeof set, &set) != 0 || CPU_COUNT(&set) < 2) return 77;
  t_run_ranks(2, rankSpinStale, NULL, 60);
  return 0;
}

/* Rank 2 never inits: the others time out naming it. arg, where set: late0, rank 0 comes this many ms after
 * rank 1, so rank 1's own deadline passes first; it waits for rank 0's verdict rather than leave, which
 * rank 0 read as "rank 1 checked in and died" (ctest -j2 on 2 cores, once; 400 ms here makes it every run).
 */
static int kLate0Ms = 400;
static int rankInitTimeout(int rank, int nranks, void* arg) {
  int late0 = arg ? *(const int*)arg : 0;
  if (rank == 2) return 0;
  if (rank == 0 && late0) {
    struct timespec ts = {0, late0 * 1000000L};
    nanosleep(&ts, NULL);
  }
  relayConfig_t cfg = tCfg(1000, 4096);
  relayComm_t c = NULL;
  uint64_t t0 = relayNowNs();
  relayResult_t res = relayCommInitShm(&c, nranks, rank, t_job(), &cfg);
  double dt = tSec(t0);
  const char* msg = relayGetLastError(NULL);
  T_CHECK(res == relayTimeout && !c, "rank %d: -> %s (%s)", rank, relayGetErrorString(res), msg);
  T_CHECK(dt >= 0.95 && dt < 4.0, "rank %d: init timed out after %.2f s, deadline 1 s", rank, dt);
  T_CHECK(strstr(msg, "rank 2 to arrive"), "rank %d: message does not name rank 2: %s", rank, msg);
  if (rank == 0) {
    printf("rank 0: %s\n", msg);
    T_CHECK(!tSegmentExists(t_job()), "rank 0 left the segment behind after a failed init");
  }
  if (rank == 1 && late0) /* it waited for rank 0's verdict, past its own deadline */
    T_CHECK(dt >= 0.95 + late0 * 1e-3 - 0.1 && strstr(msg, "rank 0 gave up"),
            "rank 1: %.2f s, rank 0 %d ms late: did not wait for its verdict: %s", dt, late0, msg);
  return 0;
}

/* Rank 0 never inits: the others time out saying they wait for rank 0. */
static int rankInitNoRank0(int rank, int nranks, void* arg) {
  (void)arg;
  if (rank == 0) return 0;
  relayConfig_t cfg = tCfg(1000, 4096);
  relayComm_t c = NULL;
  uint64_t t0 = relayNowNs();
  relayResult_t res = relayCommInitShm(&c, nranks, rank, t_job(), &cfg);
  double dt = tSec(t0);
  const char* msg = relayGetLastError(NULL);
  T_CHECK(res == relayTimeout && !c, "rank %d: -> %s (%s)", rank, relayGetErrorString(res), msg);
  T_CHECK(dt >= 0.95 && dt < 4.0, "rank %d: init timed out after %.2f s, deadline 1 s", rank, dt);
  T_CHECK(strstr(msg, "rank 0 never arrived"), "rank %d: message does not name rank 0: %s", rank, msg);
  if (rank == 1) printf("%s\n", msg);
  return 0;
}

/* Rank 1 checks in and is killed while rank 3 never comes: rank 0 reports
 * the death at once and rank 2, waiting with it, learns that init failed. (A
 * rank arriving after rank 0 gave up finds no segment: rank 0 leaves nothing
 * behind, so a latecomer waits for its own deadline.) */
static void* tKillSoon(void* arg);
static int rankInitKilled(int rank, int nranks, void* arg) {
  (void)arg;
  static int killMs = 150;
  pthread_t th;
  if (rank == 1) T_CHECK(pthread_create(&th, NULL, tKillSoon, &killMs) == 0, "pthread_create");
  if (rank == 3) return 0;
  relayConfig_t cfg = tCfg(20000, 4096);
  relayComm_t c = NULL;
  uint64_t t0 = relayNowNs();
  relayResult_t res = relayCommInitShm(&c, nranks, rank, t_job(), &cfg);
  const char* msg = relayGetLastError(NULL);
  T_CHECK(res == relayRemoteError && !c, "rank %d: -> %s (%s)", rank, relayGetErrorString(res), msg);
  T_CHECK(tSec(t0) < 3, "rank %d: took %.2f s", rank, tSec(t0));
  if (rank == 0) T_CHECK(strstr(msg, "rank 1 (pid") && strstr(msg, "died"), "rank 0: %s", msg);
  printf("%s\n", msg);
  return 0;
}

/* Ranks disagree on nranks: an argument error on the rank that sees it, and rank 0 (nranks 2), which never
 * sees rank 1 check in, learns it at once from the segment's header instead of at its 20 s deadline. */
static int rankNranksMismatch(int rank, int nranks, void* arg) {
  (void)arg;
  (void)nranks;
  relayConfig_t cfg = tCfg(20000, 4096);
  relayComm_t c = NULL;
  uint64_t t0 = relayNowNs();
  relayResult_t res = relayCommInitShm(&c, rank == 0 ? 2 : 3, rank, t_job(), &cfg);
  const char* e = relayGetLastError(NULL);
  if (rank == 1)
    T_CHECK(res == relayInvalidArgument && strstr(e, "nranks 2") && strstr(e, "rank 1 has nranks 3"),
            "rank 1: -> %s (%s)", relayGetErrorString(res), e);
  else
    T_CHECK(res == relayRemoteError && strstr(e, "rank 1 failed init: ") && strstr(e, "rank 1 has nranks 3"),
            "rank 0: -> %s (%s)", relayGetErrorString(res), e);
  T_CHECK(tSec(t0) < 3, "rank %d took %.1f s to see the mismatch (deadline 20 s)", rank, tSec(t0));
  printf("rank %d: %s\n", rank, e);
  return 0;
}

/* Rank 0, the segment's creator, is killed during init (rank 3 never comes, so init stays open): the
 * survivors fail at once, not at their 20 s deadline, naming it, and the segment is gone. */
static int rankCreatorKilled(int rank, int nranks, void* arg) {
  (void)arg;
  static int killMs = 300;
  pthread_t th;
  if (rank == 0) T_CHECK(pthread_create(&th, NULL, tKillSoon, &killMs) == 0, "pthread_create");
  if (rank == 3) return 0;
  relayConfig_t cfg = tCfg(20000, 4096);
  relayComm_t c = NULL;
  uint64_t t0 = relayNowNs();
  relayResult_t res = relayCommInitShm(&c, nranks, rank, t_job(), &cfg);
  const char* msg = relayGetLastError(NULL);
  T_CHECK(res == relayRemoteError && !c, "rank %d: -> %s (%s)", rank, relayGetErrorString(res), msg);
  T_CHECK(tSec(t0) < 3, "rank %d: took %.2f s (deadline 20 s)", rank, tSec(t0));
  T_CHECK(strstr(msg, "rank 0 (pid") && strstr(msg, "died during init") && strstr(msg, "rank 3"),
          "rank %d: %s", rank, msg);
  T_CHECK(!tSegmentExists(t_job()), "rank %d: the dead creator's segment is left behind", rank);
  printf("%s\n", msg);
  return 0;
}

static int rankBadArgs(int rank, int nranks, void* arg) {
  (void)arg;
  (void)rank;
  (void)nranks;
  relayConfig_t cfg = tCfg(1000, 4096);
  relayComm_t c = NULL;
  relayResult_t res = relayCommInitShm(&c, 2, 0, "a/b", &cfg);
  T_CHECK(res == relayInvalidArgument && strstr(relayGetLastError(NULL), "job name"), "job a/b -> %s (%s)",
          relayGetErrorString(res), relayGetLastError(NULL));
  res = relayCommInitShm(&c, 2, 0, "", &cfg);
  T_CHECK(res == relayInvalidArgument, "empty job -> %s", relayGetErrorString(res));
  char longName[400];
  memset(longName, 'x', sizeof longName - 1);
  longName[sizeof longName - 1] = 0;
  res = relayCommInitShm(&c, 2, 0, longName, &cfg);
  T_CHECK(res == relayInvalidArgument, "long job -> %s", relayGetErrorString(res));
  res = relayCommInitShm(&c, 2, 2, "x", &cfg);
  T_CHECK(res == relayInvalidArgument, "rank 2 of 2 -> %s", relayGetErrorString(res));
  /* A one-rank comm: self transfers, local ops, scratch. */
  char job[160];
  snprintf(job, sizeof job, "%s-solo", t_job());
  c = tInit(0, 1, job, &cfg);
  relayXferDesc bad = {1, longName, 10};
  res = tGroup(c, &bad, 1, NULL, 0);
  T_CHECK(res == relayInvalidArgument && strstr(relayGetLastError(c), "peer 1"), "peer 1 of 1 -> %s (%s)",
          relayGetErrorString(res), relayGetLastError(c));
  relayCommDestroy(c);
  return 0;
}

/* Local ops on a one-rank comm: scratch grows only and stays aligned. */
static int rankLocal(int rank, int nranks, void* arg) {
  (void)arg;
  relayConfig_t cfg = tCfg(5000, 4096);
  relayComm_t c = t_comm(rank, nranks, &cfg);
  void *p0 = NULL, *p1 = NULL, *p2 = NULL, *q = NULL;
  T_OK(c->tp->scratch(c, 0, 1000, &p0, NULL));
  T_CHECK(((uintptr_t)p0 & 63) == 0, "scratch not 64-byte aligned");
  memset(p0, 7, 1000);
  T_OK(c->tp->scratch(c, 0, 500, &p1, NULL));
  T_CHECK(p1 == p0, "scratch moved on a smaller request");
  T_OK(c->tp->scratch(c, 5, 100, &q, NULL));
  T_CHECK(q && q != p0 && ((uintptr_t)q & 63) == 0, "slot 5");
  T_OK(c->tp->scratch(c, 0, 1 << 20, &p2, NULL));
  T_CHECK(((uintptr_t)p2 & 63) == 0, "grown scratch not aligned");
  memset(p2, 1, 1 << 20); /* the whole size is usable */
  T_OK(c->tp->scratch(c, 0, 1000, &p1, NULL));
  T_CHECK(p1 == p2, "scratch shrank");
  int32_t a[5] = {1, 2, 3, 4, 5}, b[5] = {10, 20, 30, 40, 50}, d[5];
  const void* srcs[2] = {a, b};
  T_OK(c->tp->reduce(c, d, srcs, 2, 5, relayInt32, relaySum, 1, 0, NULL));
  for (int i = 0; i < 5; i++) T_CHECK(d[i] == 11 * (i + 1), "reduce [%d] = %d", i, d[i]);
  T_OK(c->tp->copy(c, d + 1, d, 3 * sizeof(int32_t), 0, NULL)); /* overlapping: memmove */
  T_CHECK(d[1] == 11 && d[2] == 22 && d[3] == 33, "copy");
  T_OK(c->tp->join(c, NULL));
  T_OK(relayCommDestroy(c));
  return 0;
}

/* --------------------------------------------------- failure: killed rank */

static void* tKillSoon(void* arg) {
  tSleepMs(*(int*)arg);
  raise(SIGKILL);
  return NULL;
}

/* All ranks run back-to-back groups with everyone; rank 3 is killed after
 * 100 ms. The survivors must return relayRemoteError (or relayTimeout)
 * naming the failure long before the 20 s deadline. Exit code 0 = saw the
 * expected error, 2 = finished all groups (the kill came too late), 1 = other. */
static int rankKilled(int rank, int nranks, void* arg) {
  (void)arg;
  relayConfig_t cfg = tCfg(20000, 4096);
  relayComm_t c = t_comm(rank, nranks, &cfg);
  T_OK(c->tp->barrier(c));
  static int killMs = 100;
  pthread_t th;
  if (rank == 3) T_CHECK(pthread_create(&th, NULL, tKillSoon, &killMs) == 0, "pthread_create");
  enum { B = 20000 };
  unsigned char* sb = malloc(B);
  unsigned char* rb = malloc((size_t)B * nranks);
  memset(sb, rank, B);
  relayXferDesc s[8], r[8];
  for (int p = 0; p < nranks; p++) {
    s[p] = (relayXferDesc){p, sb, B};
    r[p] = (relayXferDesc){p, rb + (size_t)p * B, B};
  }
  uint64_t t0 = relayNowNs();
  for (int it = 0; it < 1000000; it++) {
    uint64_t t1 = relayNowNs();
    relayResult_t res = tGroup(c, s, nranks, r, nranks);
    if (res == relaySuccess) {
      if (tSec(t0) > 10) return 2;
      continue;
    }
    const char* msg = relayGetLastError(c);
    fprintf(stderr, "rank %d, group %d, after %.3f s in it: %s\n", rank, it, tSec(t1), msg);
    T_CHECK(res == relayRemoteError || res == relayTimeout, "rank %d: -> %s", rank, relayGetErrorString(res));
    T_CHECK(tSec(t1) < 3, "rank %d: took %.1f s to notice", rank, tSec(t1));
    T_CHECK(strstr(msg, "rank 3 (pid") || strstr(msg, "failed"), "rank %d: message does not say who: %s",
            rank, msg);
    relayCommDestroy(c);
    return 0;
  }
  return 2;
}

/* The transport's deadPeer op (what core asks the control plane of an NCCL comm when a call fails or a
 * poll runs: transport.h): nothing while every rank lives, then rank 2, gone without a word (no destroy,
 * no abort), named with its pid within a second. */
static int rankDeadPeer(int rank, int nranks, void* arg) {
  (void)arg;
  relayConfig_t cfg = tCfg(20000, 4096);
  relayComm_t c = t_comm(rank, nranks, &cfg);
  T_OK(c->tp->barrier(c));
  char why[160] = "x";
  T_CHECK(c->tp->deadPeer != NULL, "the shm transport has no deadPeer op");
  if (rank != 2) T_CHECK(c->tp->deadPeer(c, why, sizeof why) == relaySuccess && !why[0], "alive: %s", why);
  T_OK(c->tp->barrier(c));
  if (rank == 2) _exit(0); /* as a killed rank: its slot says nothing */
  uint64_t t0 = relayNowNs();
  relayResult_t r = relaySuccess;
  while ((r = c->tp->deadPeer(c, why, sizeof why)) == relaySuccess && tSec(t0) < 5) tSleepMs(5);
  T_CHECK(r == relayRemoteError && strstr(why, "rank 2 (pid "), "rank %d: deadPeer -> %s: %s", rank,
          relayGetErrorString(r), why);
  T_CHECK(tSec(t0) < 1, "rank %d: %.2f s to see rank 2 gone", rank, tSec(t0));
  tSleepMs(1500); /* the other survivor's look must find rank 2, not this rank gone after its abort */
  T_OK(relayCommAbort(c)); /* a peer is gone: no collective teardown (abort frees the comm) */
  return 0;
}

/* ----------------------------------------------------------- abort */

typedef struct {
  relayComm_t comm;
  int delayMs;
  int viaApi;
} abortArg;

static void* tAbortSoon(void* p) {
  abortArg* a = p;
  tSleepMs(a->delayMs);
  if (a->viaApi) relayCommAbort(a->comm);
  else a->comm->tp->abort(a->comm);
  return NULL;
}

/* Rank 1 never calls; a second thread of rank 0 aborts the comm while rank 0
 * is stuck in group(): it returns at once, and rank 1 then sees the abort. */
static int rankAbort(int rank, int nranks, void* argp) {
  int viaApi = *(int*)argp;
  relayConfig_t cfg = tCfg(30000, 4096);
  /* Rank 0 must block in group(): a one-shot's collective prepare would pair
   * its vote with rank 1's barrier instead. */
  cfg.route = relayRouteDirect;
  relayComm_t c = t_comm(rank, nranks, &cfg);
  T_OK(c->tp->barrier(c));
  if (rank == 1) {
    tSleepMs(600);
    uint64_t t0 = relayNowNs();
    relayResult_t res = c->tp->barrier(c);
    T_CHECK(res == relayRemoteError && strstr(relayGetLastError(c), "rank 0") &&
                strstr(relayGetLastError(c), "abort"),
            "rank 1: barrier -> %s (%s)", relayGetErrorString(res), relayGetLastError(c));
    T_CHECK(tSec(t0) < 3, "rank 1 took %.2f s to see the abort", tSec(t0));
    relayCommDestroy(c);
    return 0;
  }
  abortArg a = {c, 200, viaApi};
  pthread_t th;
  T_CHECK(pthread_create(&th, NULL, tAbortSoon, &a) == 0, "pthread_create");
  uint64_t t0 = relayNowNs();
  relayResult_t res;
  if (viaApi) {
    /* Through the API, so the call is "in flight" (inCall) while abort frees
     * the comm only after the call left. */
    int32_t x[4] = {1, 2, 3, 4}, y[4];
    int ranks[2] = {0, 1};
    size_t counts[1] = {4};
    relayLayout_t L = {1, 2, ranks};
    res = relayAllReduce(x, y, counts, relayInt32, relaySum, &L, c, NULL);
  } else {
    unsigned char buf[100];
    relayXferDesc r = {1, buf, sizeof buf};
    atomic_store(&c->inCall, 1);
    res = tGroup(c, NULL, 0, &r, 1);
    atomic_store(&c->inCall, 0);
  }
  double dt = tSec(t0);
  T_CHECK(res != relaySuccess, "rank 0: aborted call returned success");
  T_CHECK(dt < 3.0, "rank 0: abort took %.2f s to unblock the call", dt);
  pthread_join(th, NULL);
  if (!viaApi) relayCommDestroy(c);
  tSleepMs(1000); /* stay alive while rank 1 looks: it must see "aborted", not "died" */
  return 0;
}

/* ---------------------------------------------------------- reject */

/* Rank 2 rejects call #5 before moving data; ranks 0 and 1, in call #5 and
 * waiting on rank 2, return relayRemoteError at once. */
static int rankReject(int rank, int nranks, void* arg) {
  (void)arg;
  relayConfig_t cfg = tCfg(30000, 4096);
  relayComm_t c = t_comm(rank, nranks, &cfg);
  c->callSeq = 4;
  T_OK(c->tp->barrier(c));
  if (rank == 2) {
    c->callSeq = 5; /* core counts the call it rejects */
    c->tp->reject(c);
    tSleepMs(500);
    relayCommDestroy(c);
    return 0;
  }
  unsigned char sb[64] = {0}, rb[2][64];
  relayXferDesc s[2] = {{1 - rank, sb, 64}, {2, sb, 64}}, r[2] = {{1 - rank, rb[0], 64}, {2, rb[1], 64}};
  uint64_t t0 = relayNowNs();
  relayResult_t res = tGroup(c, s, 2, r, 2); /* callSeq becomes 5 */
  T_CHECK(res == relayRemoteError && strstr(relayGetLastError(c), "rank 2 rejected call #5"),
          "rank %d: -> %s (%s)", rank, relayGetErrorString(res), relayGetLastError(c));
  T_CHECK(tSec(t0) < 3, "rank %d took %.2f s to see the rejection", rank, tSec(t0));
  relayCommDestroy(c);
  return 0;
}

/* Rank 1 destroys its comm while rank 0 still waits on it. */
static int rankGone(int rank, int nranks, void* arg) {
  (void)arg;
  relayConfig_t cfg = tCfg(30000, 4096);
  relayComm_t c = t_comm(rank, nranks, &cfg);
  T_OK(c->tp->barrier(c));
  if (rank == 1) {
    tSleepMs(100);
    relayCommDestroy(c);
    tSleepMs(1000);
    return 0;
  }
  unsigned char b[10];
  relayXferDesc r = {1, b, sizeof b};
  uint64_t t0 = relayNowNs();
  relayResult_t res = tGroup(c, NULL, 0, &r, 1);
  T_CHECK(res == relayRemoteError && strstr(relayGetLastError(c), "destroyed"), "rank 0: -> %s (%s)",
          relayGetErrorString(res), relayGetLastError(c));
  T_CHECK(tSec(t0) < 3, "took %.2f s", tSec(t0));
  relayCommDestroy(c);
  return 0;
}

/* -------------------------------------------------------- stale segment */

static char gJob[128];

static int rankStaleInit(int rank, int nranks, void* arg) {
  (void)arg;
  relayConfig_t cfg = tCfg(20000, 4096);
  relayComm_t c = tInit(rank, nranks, gJob, &cfg);
  unsigned char sb[3000], rb[3000];
  int next = (rank + 1) % nranks, prev = (rank + nranks - 1) % nranks;
  for (size_t i = 0; i < sizeof sb; i++) sb[i] = tPat(rank, next, 0, i, 3);
  relayXferDesc s = {next, sb, sizeof sb}, r = {prev, rb, sizeof rb};
  T_OK(tGroup(c, &s, 1, &r, 1));
  for (size_t i = 0; i < sizeof rb; i++) T_CHECK(rb[i] == tPat(prev, rank, 0, i, 3), "byte %zu", i);
  T_OK(c->tp->barrier(c));
  T_CHECK(!tSegmentExists(gJob), "segment left behind");
  relayCommDestroy(c);
  return 0;
}

/* Leave behind what a crashed run leaves: kill ranks 0 and 1 of a 3-rank job
 * while they wait in init for rank 2 (segment READY, slots 0 and 1 checked
 * in by dead pids). */
static void tCrashMidInit(void) {
  pid_t pids[2];
  for (int r = 0; r < 2; r++) {
    pids[r] = fork();
    T_CHECK(pids[r] >= 0, "fork");
    if (pids[r] == 0) {
      relayConfig_t cfg = tCfg(20000, 4096);
      relayComm_t c = NULL;
      relayCommInitShm(&c, 3, r, gJob, &cfg);
      _exit(3);
    }
  }
  uint64_t t0 = relayNowNs();
  while (!tSegmentExists(gJob) && tSec(t0) < 5) tSleepMs(2);
  tSleepMs(150); /* rank 1 checks in */
  /* Both stopped before either dies: a rank that sees the other die during init takes the segment away
   * (rank 0 a dead joiner's, a joiner its dead creator's). */
  for (int r = 0; r < 2; r++) kill(pids[r], SIGSTOP);
  for (int r = 0; r < 2; r++) {
    kill(pids[r], SIGKILL);
    waitpid(pids[r], NULL, 0);
  }
  T_CHECK(tSegmentExists(gJob), "no stale segment was left behind to test with");
}

static int runStale(void) {
  /* The segment name holds the launch identity (relayShmSegmentName): with
   * launcher variables set it is the same for this process, which looks for
   * the segment, and for the ranks it forks. */
  setenv("MASTER_ADDR", "127.0.0.1", 1);
  setenv("MASTER_PORT", "29999", 1);
  /* 1: a crashed run's initialized segment under the name. */
  relayLaunchJobName("stale", gJob, sizeof gJob);
  tCrashMidInit();
  t_run_ranks(3, rankStaleInit, NULL, 60);
  T_CHECK(!tSegmentExists(gJob), "segment left behind");
  /* 2: garbage of the wrong size under the name. */
  relayLaunchJobName("stale", gJob, sizeof gJob);
  char name[300];
  relayShmSegmentName(gJob, 0, name, sizeof name);
  int fd = shm_open(name, O_RDWR | O_CREAT, 0600);
  T_CHECK(fd >= 0, "shm_open: %s", strerror(errno));
  T_CHECK(write(fd, "garbage garbage garbage garbage garbage garbage garbage garbage garbage", 64) == 64,
          "write");
  close(fd);
  t_run_ranks(3, rankStaleInit, NULL, 60);
  /* 3: a crashed run's segment of the right size and a different nranks. */
  relayLaunchJobName("stale", gJob, sizeof gJob);
  tCrashMidInit();
  t_run_ranks(2, rankStaleInit, NULL, 60);
  T_CHECK(!tSegmentExists(gJob), "segment left behind");
  return 0;
}

/* ------------------------------------------------------- small /dev/shm */

/* 8 ranks of 1 MiB rings need 56 MiB; on a 4 MiB /dev/shm rank 0 must fall
 * back to smaller rings (and everything still arrives), and where even the
 * smallest do not fit, init fails cleanly instead of SIGBUS. */
static int rankSmallShm(int rank, int nranks, void* arg) {
  int expectFail = *(int*)arg;
  relayConfig_t cfg = tCfg(20000, 1 << 20);
  relayComm_t c = NULL;
  uint64_t t0 = relayNowNs();
  relayResult_t res = relayCommInitShm(&c, nranks, rank, t_job(), &cfg);
  if (expectFail) {
    if (rank == 0)
      T_CHECK(res == relaySystemError && strstr(relayGetLastError(NULL), "no room"), "rank 0: -> %s (%s)",
              relayGetErrorString(res), relayGetLastError(NULL));
    else /* the others learn it from rank 0 at once, not at their deadline */
      T_CHECK(res == relayRemoteError && strstr(relayGetLastError(NULL), "no room"), "rank %d: -> %s (%s)",
              rank, relayGetErrorString(res), relayGetLastError(NULL));
    T_CHECK(tSec(t0) < 5, "rank %d: took %.1f s", rank, tSec(t0));
    return 0;
  }
  T_CHECK(res == relaySuccess, "rank %d: -> %s (%s)", rank, relayGetErrorString(res),
          relayGetLastError(NULL));
  enum { B = 300000 };
  unsigned char* sb = malloc(B);
  unsigned char* rb = malloc((size_t)B * nranks);
  int next = (rank + 1) % nranks, prev = (rank + nranks - 1) % nranks;
  for (size_t i = 0; i < B; i++) sb[i] = tPat(rank, next, 0, i, 4);
  relayXferDesc s = {next, sb, B}, r = {prev, rb, B};
  T_OK(tGroup(c, &s, 1, &r, 1));
  for (size_t i = 0; i < B; i++) T_CHECK(rb[i] == tPat(prev, rank, 0, i, 4), "rank %d: byte %zu", rank, i);
  relayCommDestroy(c);
  free(sb);
  free(rb);
  return 0;
}

/* Needs a private mount namespace (root or CAP_SYS_ADMIN): skipped (77)
 * where we cannot make one. */
static int caseSmallShm(void) {
  if (unshare(CLONE_NEWNS) != 0 || mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL) != 0 ||
      mount("tmpfs", "/dev/shm", "tmpfs", 0, "size=4m") != 0) {
    printf("SKIP: no private /dev/shm here (%s)\n", strerror(errno));
    return 77;
  }
  int expectFail = 0;
  t_run_ranks(8, rankSmallShm, &expectFail, 60);
  expectFail = 1;
  t_run_ranks(24, rankSmallShm, &expectFail, 60); /* 552 rings x 64 KiB = 36 MiB */
  T_CHECK(!tSegmentExists(t_job()), "the failure marker was left behind");
  return 0;
}

/* ------------------------------------------------- P2P channels, lazily */

/* 8 ranks as 4 nodes x 2 (RELAYCC_SHM_NODES, set by the case before the
 * fork) on a pool of 8: 2 parts per peer, but a scatter root's 7 peers x 2
 * parts overflow the pool, so a scatter takes 1 part (the seed's rule,
 * pow2Down(8 / 7) = 1). Through the public API on the real transport:
 *   1. a scatter from root 0 connects, on both ends of every 0 -> q, just its
 *      one channel, and leaves both sides unseen (a later full task must
 *      still connect);
 *   2. the same scatter again connects nothing;
 *   3. an all-to-all (2 parts on the schedule base) connects only what each
 *      pair lacks -- where the bases overlap (0 -> 1: scatter channel 0,
 *      all-to-all channels {0, 4}) just the missing channel -- after which
 *      both sides are seen;
 *   4. a gather (2 parts, q -> 0) connects that direction.
 * After each, every rank checks its own table against p2pTaskMask, the
 * count of channels it connected (each exactly once), and the segment's
 * flags of its pairs, written by the other end. */
#define LAZY_N 8
#define LAZY_COUNT 3000 /* ints per block: 12000 bytes, so a 2-part task has 2 non-empty parts */

static uint64_t lazyUnion(const p2pComm* pc, p2pOp op, int s, int r) { return p2pTaskMask(pc, op, s, r); }

/* Every rank: its tables and the segment's flags hold exactly the
 * expected masks; returns the channels connected, both directions. */
static uint64_t lazyCheck(relayComm_t c, const p2pComm* pc, uint64_t (*sendWant)[LAZY_N],
                          uint64_t (*recvWant)[LAZY_N], const char* when) {
  int me = c->rank;
  uint64_t total = 0;
  /* Every end of every pair is done with the call before anyone looks at
   * the segment's flags, and nobody starts the next call while one looks. */
  T_OK(relayCommBarrier(c));
  char a[256], b[256];
  for (int q = 0; q < LAZY_N; q++) {
    if (q == me) continue;
    uint64_t s = relayShmP2pConnMask(c, q, P2P_DIR_SEND), r = relayShmP2pConnMask(c, q, P2P_DIR_RECV);
    T_CHECK(s == sendWant[me][q], "rank %d %s: send channels to %d {%s}, want {%s}", me, when, q,
            p2pMaskString(s, a, sizeof a), p2pMaskString(sendWant[me][q], b, sizeof b));
    T_CHECK(r == recvWant[me][q], "rank %d %s: recv channels from %d {%s}, want {%s}", me, when, q,
            p2pMaskString(r, a, sizeof a), p2pMaskString(recvWant[me][q], b, sizeof b));
    /* The segment's flags: our side and the other end's, of both pairs. */
    T_CHECK(relayShmP2pConnFlags(c, me, q, P2P_DIR_SEND) == s &&
                relayShmP2pConnFlags(c, me, q, P2P_DIR_RECV) == s,
            "rank %d %s: flags of %d -> %d: sender {%s}, receiver {%s}, want {%s}", me, when, me, q,
            p2pMaskString(relayShmP2pConnFlags(c, me, q, P2P_DIR_SEND), a, sizeof a),
            p2pMaskString(relayShmP2pConnFlags(c, me, q, P2P_DIR_RECV), b, sizeof b),
            p2pMaskString(s, a, sizeof a));
    T_CHECK(relayShmP2pConnFlags(c, q, me, P2P_DIR_SEND) == r &&
                relayShmP2pConnFlags(c, q, me, P2P_DIR_RECV) == r,
            "rank %d %s: flags of %d -> %d differ from this rank's table", me, when, q, me);
    total += (uint64_t)__builtin_popcountll(s) + (uint64_t)__builtin_popcountll(r);
  }
  uint64_t counted = relayShmP2pConnected(c, P2P_DIR_SEND) + relayShmP2pConnected(c, P2P_DIR_RECV);
  T_CHECK(counted == total, "rank %d %s: %llu channel connections made for %llu connected channels", me, when,
          (unsigned long long)counted, (unsigned long long)total);
  (void)pc;
  T_OK(relayCommBarrier(c));
  return total;
}

/* NCCL's sendSeen / recvSeen of pair s -> r on this table. */
static int lazySeen(uint64_t mask, const p2pComm* pc, int s, int r) {
  uint64_t full = p2pChannelMask(pc->pool, p2pChannelBase(pc, P2P_OP_SENDRECV, s, r), pc->perPeer);
  return (mask & full) == full;
}

static int rankP2pLazy(int rank, int nranks, void* arg) {
  (void)arg;
  relayConfig_t cfg = tCfg(20000, 1 << 16);
  cfg.route = relayRouteDirect;
  relayComm_t c = t_comm(rank, nranks, &cfg);
  p2pComm pc;
  T_OK(relayShmP2pInfo(c, &pc));
  T_CHECK(pc.nNodes == 4 && pc.localRanks == 2 && pc.pool == 8 && pc.perPeer == 2,
          "rank %d: %d nodes x %d, pool %d, %d per peer", rank, pc.nNodes, pc.localRanks, pc.pool,
          pc.perPeer);
  T_CHECK(p2pTaskParts(&pc, P2P_OP_SCATTER) == 1 && p2pTaskParts(&pc, P2P_OP_ALLTOALL) == 2, "rank %d: parts",
          rank);
  static uint64_t sendWant[LAZY_N][LAZY_N], recvWant[LAZY_N][LAZY_N];
  memset(sendWant, 0, sizeof sendWant);
  memset(recvWant, 0, sizeof recvWant);
  int all[LAZY_N];
  size_t counts[LAZY_N];
  for (int i = 0; i < LAZY_N; i++) all[i] = i, counts[i] = LAZY_COUNT;
  int32_t* big = malloc(sizeof(int32_t) * LAZY_COUNT * LAZY_N);
  int32_t* big2 = malloc(sizeof(int32_t) * LAZY_COUNT * LAZY_N);
  int32_t* blk = malloc(sizeof(int32_t) * LAZY_COUNT);
  T_CHECK(big && big2 && blk, "oom");
  T_CHECK(lazyCheck(c, &pc, sendWant, recvWant, "before any call") == 0, "connected before any call");

  /* 1. Scatter from root 0, twice. */
  for (int q = 1; q < LAZY_N; q++) {
    sendWant[0][q] |= lazyUnion(&pc, P2P_OP_SCATTER, 0, q);
    recvWant[q][0] |= lazyUnion(&pc, P2P_OP_SCATTER, 0, q);
    T_CHECK(__builtin_popcountll(sendWant[0][q]) == 1, "scatter to %d has more than one channel", q);
  }
  for (int again = 0; again < 2; again++) {
    for (int i = 0; i < LAZY_COUNT * LAZY_N; i++) big[i] = i * 7 + again;
    memset(blk, 0xEE, sizeof(int32_t) * LAZY_COUNT);
    T_OK(relayScatter(rank == 0 ? big : NULL, blk, counts, relayInt32, 0, all, LAZY_N, c, NULL));
    for (int i = 0; i < LAZY_COUNT; i++)
      T_CHECK(blk[i] == (rank * LAZY_COUNT + i) * 7 + again, "rank %d: scatter element %d", rank, i);
    uint64_t n1 =
        lazyCheck(c, &pc, sendWant, recvWant, again ? "after the second scatter" : "after a scatter");
    T_CHECK(n1 == (uint64_t)(rank == 0 ? LAZY_N - 1 : 1), "rank %d: %llu channels after the scatter", rank,
            (unsigned long long)n1);
  }
  if (rank == 0)
    for (int q = 1; q < LAZY_N; q++)
      T_CHECK(!lazySeen(relayShmP2pConnMask(c, q, P2P_DIR_SEND), &pc, 0, q),
              "a partial scatter marked 0 -> %d seen", q);
  else
    T_CHECK(!lazySeen(relayShmP2pConnMask(c, 0, P2P_DIR_RECV), &pc, 0, rank),
            "a partial scatter marked 0 -> %d seen", rank);

  /* 3. All-to-all: every pair, 2 parts each, connects what it lacks. */
  uint64_t before = relayShmP2pConnected(c, P2P_DIR_SEND) + relayShmP2pConnected(c, P2P_DIR_RECV), added = 0;
  int overlaps = 0;
  for (int s = 0; s < LAZY_N; s++)
    for (int r = 0; r < LAZY_N; r++) {
      if (s == r) continue;
      uint64_t m = lazyUnion(&pc, P2P_OP_ALLTOALL, s, r);
      if (s == rank) added += (uint64_t)__builtin_popcountll(m & ~sendWant[s][r]);
      if (r == rank) added += (uint64_t)__builtin_popcountll(m & ~recvWant[r][s]);
      if (s == 0 && (m & sendWant[0][r]) && (m & ~sendWant[0][r])) overlaps++;
      sendWant[s][r] |= m;
      recvWant[r][s] |= m;
    }
  /* The bases do overlap somewhere, or step 3 would not test "just the rest". */
  T_CHECK(overlaps > 0, "no pair of root 0 whose all-to-all shares a channel with its scatter");
  size_t seg = LAZY_COUNT / LAZY_N;
  for (int i = 0; i < (int)seg * LAZY_N; i++) big[i] = rank * 100000 + i;
  /* Every pair at once, driven on the transport as the executor drives a
   * group: relayAllToAll on 4 nodes runs hierarchically (plan_hier.c), so
   * only pairs of one node or one rail would meet. */
  relayXferDesc sd[LAZY_N], rd[LAZY_N];
  for (int j = 0; j < LAZY_N; j++) {
    sd[j] = (relayXferDesc){j, big + (size_t)j * seg, seg * sizeof(int32_t)};
    rd[j] = (relayXferDesc){j, big2 + (size_t)j * seg, seg * sizeof(int32_t)};
  }
  c->callSeq++;
  c->curStep = 0;
  T_OK(c->tp->group(c, sd, LAZY_N, rd, LAZY_N, P2P_OP_ALLTOALL, NULL));
  c->curStep = -1;
  for (int j = 0; j < LAZY_N; j++)
    for (size_t e = 0; e < seg; e++)
      T_CHECK(big2[j * seg + e] == j * 100000 + (int)(rank * seg + e),
              "rank %d: all-to-all from %d element %zu", rank, j, e);
  uint64_t after = lazyCheck(c, &pc, sendWant, recvWant, "after the all-to-all");
  T_CHECK(after - before == added, "rank %d: the all-to-all connected %llu channels, want %llu", rank,
          (unsigned long long)(after - before), (unsigned long long)added);
  for (int q = 0; q < LAZY_N; q++) {
    if (q == rank) continue;
    T_CHECK(lazySeen(relayShmP2pConnMask(c, q, P2P_DIR_SEND), &pc, rank, q) &&
                lazySeen(relayShmP2pConnMask(c, q, P2P_DIR_RECV), &pc, q, rank),
            "rank %d: a full task left the pair with %d unseen", rank, q);
  }

  /* 4. Gather to root 3: nothing left to connect (the all-to-all's
   * schedule base is the gather's), data still right. */
  for (int i = 0; i < LAZY_COUNT; i++) blk[i] = rank * 1000 + i;
  memset(big, 0xEE, sizeof(int32_t) * LAZY_COUNT * LAZY_N);
  T_OK(relayGather(blk, rank == 3 ? big : NULL, counts, relayInt32, 3, all, LAZY_N, c, NULL));
  if (rank == 3)
    for (int i = 0; i < LAZY_COUNT * LAZY_N; i++)
      T_CHECK(big[i] == (i / LAZY_COUNT) * 1000 + i % LAZY_COUNT, "gather element %d", i);
  for (int q = 0; q < LAZY_N; q++)
    if (q != 3) {
      sendWant[q][3] |= lazyUnion(&pc, P2P_OP_GATHER, q, 3);
      recvWant[3][q] |= lazyUnion(&pc, P2P_OP_GATHER, q, 3);
    }
  T_CHECK(lazyCheck(c, &pc, sendWant, recvWant, "after the gather") == after,
          "rank %d: the gather connected channels", rank);
  if (rank == 0) {
    char a[128], b[128];
    printf("4 nodes x 2, pool %d, %d parts per peer, scatter %d: 0 -> 1 scatter {%s}, +all-to-all {%s}\n",
           pc.pool, pc.perPeer, p2pTaskParts(&pc, P2P_OP_SCATTER),
           p2pMaskString(lazyUnion(&pc, P2P_OP_SCATTER, 0, 1), a, sizeof a),
           p2pMaskString(lazyUnion(&pc, P2P_OP_ALLTOALL, 0, 1) & ~lazyUnion(&pc, P2P_OP_SCATTER, 0, 1), b,
                         sizeof b));
  }
  free(big);
  free(big2);
  free(blk);
  T_OK(relayCommDestroy(c));
  return 0;
}

/* Ranks that split a transfer onto different channels fail it at once with
 * both channel sets named, before any byte lands, instead of waiting on a
 * ring the other end never writes. The part rules' settings are agreed at
 * init (an environment that differs takes rank 0's: test_params), so the
 * disagreement is made after init, in rank 3's table, before its first
 * group reads it: RELAYCC_NCHANNELS_PER_NET_PEER=2 (a user-set per-peer
 * count is kept by the scatter rule), so it expects root 0's scatter in 2
 * parts where root 0 sends 1. Node ids cannot differ that way: (arg 1) rank
 * 3's table says RELAYCC_SHM_NODES=1, but the layer takes the node map
 * agreed at init (src/core/nodes.c), so every rank holds the same map and
 * the scatter arrives whole. */
static int rankP2pMismatch(int rank, int nranks, void* arg) {
  int variant = *(int*)arg;
  relayConfig_t cfg = tCfg(30000, 1 << 16);
  cfg.route = relayRouteDirect;
  relayComm_t c = t_comm(rank, nranks, &cfg);
  if (rank == 3)
    c->params.v[variant == 0 ? RELAY_P_NCHANNELS_PER_NET_PEER : RELAY_P_SHM_NODES] = variant == 0 ? 2 : 1;
  p2pComm pc;
  T_OK(relayShmP2pInfo(c, &pc));
  int all[LAZY_N];
  size_t counts[LAZY_N];
  for (int i = 0; i < LAZY_N; i++) all[i] = i, counts[i] = LAZY_COUNT;
  int32_t* big = malloc(sizeof(int32_t) * LAZY_COUNT * LAZY_N);
  int32_t* blk = malloc(sizeof(int32_t) * LAZY_COUNT);
  T_CHECK(big && blk, "oom");
  for (int i = 0; i < LAZY_COUNT * LAZY_N; i++) big[i] = i;
  memset(blk, 0xEE, sizeof(int32_t) * LAZY_COUNT);
  uint64_t t0 = relayNowNs();
  relayResult_t res = relayScatter(rank == 0 ? big : NULL, blk, counts, relayInt32, 0, all, LAZY_N, c, NULL);
  const char* msg = relayGetLastError(c);
  if (variant == 1) {
    T_CHECK(res == relaySuccess, "rank %d: one rank's own node count -> %s (%s)", rank,
            relayGetErrorString(res), msg);
    for (int i = 0; i < LAZY_COUNT; i++)
      T_CHECK(blk[i] == rank * LAZY_COUNT + i, "rank %d: element %d = %d", rank, i, blk[i]);
    /* RELAYCC_SHM_NODES=4 (caseP2pEnv), agreed: 4 nodes of 2 on every rank, rank 3 with rank 2. */
    T_CHECK(c->nNodes == 4 && c->nodeOf[3] == 1 && c->nodeOf[2] == 1 && c->nodeOf[4] == 2,
            "rank %d: node map %d nodes, rank 3 on %d", rank, c->nNodes, c->nodeOf[3]);
    free(big);
    free(blk);
    relayCommDestroy(c);
    return 0;
  }
  if (rank == 3) {
    T_CHECK(res == relayInvalidUsage, "rank 3: -> %s (%s)", relayGetErrorString(res), msg);
    T_CHECK(strstr(msg, "rank 0") && strstr(msg, "disagree") && strstr(msg, "only the receiver has") &&
                strstr(msg, "step 0"),
            "rank 3: the message does not name the peer, the step and the channels: %s", msg);
    for (int i = 0; i < LAZY_COUNT; i++)
      T_CHECK(blk[i] == (int32_t)0xEEEEEEEE, "rank 3: element %d written", i);
    printf("rank 3: %s\n", msg);
  } else if (res != relaySuccess) {
    /* Root 0 may be stuck sending to rank 3 (rings of 64 KiB / 8 channels
     * hold 8 KiB of its 12000 bytes): it must learn of the failure, and the
     * ranks still waiting on root 0 then learn of its. */
    T_CHECK(res == relayRemoteError, "rank %d: -> %s (%s)", rank, relayGetErrorString(res), msg);
  }
  if (res == relaySuccess) {
    res = c->tp->barrier(c);
    T_CHECK(res == relayRemoteError && strstr(relayGetLastError(c), "failed"), "rank %d: barrier -> %s (%s)",
            rank, relayGetErrorString(res), relayGetLastError(c));
  }
  T_CHECK(tSec(t0) < 5, "rank %d: the mismatch took %.1f s to surface", rank, tSec(t0));
  free(big);
  free(blk);
  relayCommDestroy(c);
  return 0;
}

/* Node ids are agreed at init (src/core/nodes.c), after the rendezvous, so
 * a bad one fails every rank: its own rank with the variable named, the
 * others naming that rank. arg 0: all ranks set RELAYCC_SHM_NODES=3 (does
 * not divide 4); arg 1: rank 1 alone sets RELAYCC_NODE_ID=node1. */
static int rankNodeBadEnv(int rank, int nranks, void* arg) {
  int variant = *(int*)arg;
  const char* var = variant == 0 ? "RELAYCC_SHM_NODES" : "RELAYCC_NODE_ID";
  if (variant == 0) setenv(var, "3", 1);
  else if (rank == 1) setenv(var, "node1", 1);
  relayConfig_t cfg = tCfg(30000, 4096);
  relayComm_t c = NULL;
  relayResult_t res = relayCommInitShm(&c, nranks, rank, t_job(), &cfg);
  const char* msg = relayGetLastError(NULL);
  if (variant == 0 || rank == 1)
    T_CHECK(res == relayInvalidArgument && strstr(msg, var), "rank %d: %s -> %s (%s)", rank, var,
            relayGetErrorString(res), msg);
  else
    T_CHECK(res == relayRemoteError && strstr(msg, "rank 1"), "rank %d: %s on rank 1 -> %s (%s)", rank, var,
            relayGetErrorString(res), msg);
  T_CHECK(c == NULL, "rank %d: a comm came back from a failed init", rank);
  unsetenv(var);
  return 0;
}

static void caseP2pEnv(void) {
  setenv("RELAYCC_SHM_NODES", "4", 1);
  setenv("RELAYCC_NCHANNELS", "8", 1);
  unsetenv("RELAYCC_NCHANNELS_PER_NET_PEER");
}

/* Bad settings are argument errors at init, naming the variable (on every
 * rank: the init exchange fails them all together, so all 4 ranks run). */
static int rankP2pBadEnv(int rank, int nranks, void* arg) {
  (void)arg;
  relayConfig_t cfg = tCfg(1000, 4096);
  const char* bad[][2] = {
      {"RELAYCC_NCHANNELS", "65"}, {"RELAYCC_NCHANNELS", "0"}, {"RELAYCC_NCHANNELS_PER_NET_PEER", "-1"}};
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    setenv(bad[i][0], bad[i][1], 1);
    relayComm_t c = NULL;
    relayResult_t res = relayCommInitShm(&c, 4, rank, t_job(), &cfg);
    T_CHECK(res == relayInvalidArgument && strstr(relayGetLastError(NULL), bad[i][0]), "%s=%s -> %s (%s)",
            bad[i][0], bad[i][1], relayGetErrorString(res), relayGetLastError(NULL));
    unsetenv(bad[i][0]);
  }
  (void)nranks;
  if (rank != 0) return 0;
  /* Channels follow the ring: 4 KiB rings hold at most 4 channels of 1 KiB. */
  setenv("RELAYCC_NCHANNELS", "64", 1);
  char job[160];
  snprintf(job, sizeof job, "%s-solo", t_job());
  relayComm_t c = tInit(0, 1, job, &cfg);
  p2pComm pc;
  T_OK(relayShmP2pInfo(c, &pc));
  T_CHECK(pc.pool == 4, "4 KiB ring, 64 channels asked: pool %d", pc.pool);
  relayCommDestroy(c);
  unsetenv("RELAYCC_NCHANNELS");
  return 0;
}

/* --------------------------------------------------------------- main */

static int runMismatch(void) {
  mismatchArg small = {4096, 8192}; /* sender fits the ring: it finishes */
  t_run_ranks(3, rankMismatch, &small, 60);
  mismatchArg big = {100001, 50000}; /* sender is stuck on the full ring */
  t_run_ranks(3, rankMismatch, &big, 60);
  mismatchArg zero = {0, 16}; /* an empty send still carries its size */
  t_run_ranks(3, rankMismatch, &zero, 60);
  return 0;
}

static int runKilled(void) {
  int codes[4];
  uint64_t t0 = relayNowNs();
  int rc = t_launch(4, rankKilled, NULL, 60, 15000, codes);
  printf("exit codes: %d %d %d %d after %.2f s\n", codes[0], codes[1], codes[2], codes[3], tSec(t0));
  T_CHECK(rc != 0, "the launch should report rank 3's death");
  T_CHECK(codes[3] == -SIGKILL, "rank 3 exit %d, want -SIGKILL", codes[3]);
  for (int r = 0; r < 3; r++)
    T_CHECK(codes[r] == 0, "survivor rank %d exited %d (0 = saw the error in time, 2 = never saw it)", r,
            codes[r]);
  return 0;
}

static int runInitKilled(void) {
  int codes[4];
  int rc = t_launch(4, rankInitKilled, NULL, 60, 10000, codes);
  T_CHECK(rc != 0 && codes[1] == -SIGKILL, "rank 1 exit %d, want -SIGKILL", codes[1]);
  T_CHECK(codes[0] == 0 && codes[2] == 0 && codes[3] == 0, "survivors exited %d, %d, %d", codes[0], codes[2],
          codes[3]);
  T_CHECK(!tSegmentExists(t_job()), "segment left behind");
  return 0;
}

static int runCreatorKilled(void) {
  int codes[4];
  int rc = t_launch(4, rankCreatorKilled, NULL, 60, 10000, codes);
  T_CHECK(rc != 0 && codes[0] == -SIGKILL, "rank 0 exit %d, want -SIGKILL", codes[0]);
  T_CHECK(codes[1] == 0 && codes[2] == 0 && codes[3] == 0, "survivors exited %d, %d, %d", codes[1], codes[2],
          codes[3]);
  return 0;
}

static int runAbort(void) {
  int viaApi = 0;
  t_run_ranks(2, rankAbort, &viaApi, 60);
  viaApi = 1;
  t_run_ranks(2, rankAbort, &viaApi, 60);
  return 0;
}

static int runP2pLazy(void) {
  caseP2pEnv();
  t_run_ranks(LAZY_N, rankP2pLazy, NULL, 60);
  return 0;
}

static int runP2pMismatch(void) {
  for (int v = 0; v < 2; v++) {
    caseP2pEnv();
    t_run_ranks(LAZY_N, rankP2pMismatch, &v, 60);
  }
  return 0;
}

static int runP2pBadEnv(void) {
  t_run_ranks(4, rankP2pBadEnv, NULL, 60);
  unsetenv("RELAYCC_SHM_NODES");
  for (int v = 0; v < 2; v++) t_run_ranks(4, rankNodeBadEnv, &v, 60);
  return 0;
}

/* One launch of one rank body, launch deadline 60 s (100 s for the big groups); CTest's 120 s over it. */
/* A guest comm (relayInitShm's guest: the interposer's twin of a user's comm) has no deadline of its own
 * (issue 26.2): unset, its waits never give up (a late rank is only late); what the user set holds (config
 * or RELAYCC_TIMEOUT_MS); a comm of relaycc's own keeps the 120 s default. Then the late rank: rank 1 comes
 * 2 s after rank 0 into a group and both get the right bytes; and a guest wait ends on the user's abort. */
static int rankGuest(int rank, int nranks, void* arg) {
  (void)arg;
  char job[160];
  snprintf(job, sizeof job, "%s-guest", t_job());
  relayComm_t g = NULL, own = NULL, set = NULL;
  T_OK(relayInitShm(&g, nranks, rank, job, NULL, 1));
  T_CHECK(g->guest && g->cfg.timeoutMs == 0 && relayWaitLimitNs(g) == UINT64_MAX,
          "rank %d: a guest comm with no RELAYCC_TIMEOUT_MS has deadline %d ms (want none)", rank,
          g->cfg.timeoutMs);
  relayConfig_t cfg = RELAY_CONFIG_INITIALIZER;
  cfg.timeoutMs = 700;
  snprintf(job, sizeof job, "%s-guestset", t_job());
  T_OK(relayInitShm(&set, nranks, rank, job, &cfg, 1));
  T_CHECK(set->cfg.timeoutMs == 700, "rank %d: the user's 700 ms became %d ms on a guest", rank,
          set->cfg.timeoutMs);
  snprintf(job, sizeof job, "%s-own", t_job());
  T_OK(relayInitShm(&own, nranks, rank, job, NULL, 0));
  T_CHECK(!own->guest && own->cfg.timeoutMs == 120000, "rank %d: relaycc's own comm has %d ms", rank,
          own->cfg.timeoutMs);
  T_OK(relayCommDestroy(set));
  T_OK(relayCommDestroy(own));
  /* The late rank. */
  unsigned char sb[256], rb[256];
  for (int i = 0; i < 256; i++) sb[i] = (unsigned char)(rank * 100 + i);
  memset(rb, 0xEE, sizeof rb);
  if (rank == 1) tSleepMs(2000);
  relayXferDesc sd = {1 - rank, sb, sizeof sb}, rd = {1 - rank, rb, sizeof rb};
  T_OK(tGroup(g, &sd, 1, &rd, 1));
  for (int i = 0; i < 256; i++)
    T_CHECK(rb[i] == (unsigned char)((1 - rank) * 100 + i), "rank %d: byte %d from the late peer is %d", rank,
            i, rb[i]);
  /* The user's abort: rank 1 never comes; another thread of rank 0 aborts after 1 s. */
  if (rank == 0) {
    abortArg a = {g, 1000, 0};
    pthread_t th;
    T_CHECK(pthread_create(&th, NULL, tAbortSoon, &a) == 0, "pthread_create");
    uint64_t t0 = relayNowNs();
    relayResult_t res = tGroup(g, &sd, 1, &rd, 1);
    pthread_join(th, NULL);
    T_CHECK(res != relaySuccess && res != relayTimeout && tSec(t0) < 10,
            "rank 0: a guest wait on a missing peer -> %s after %.1f s (want the abort's error at ~1 s)",
            relayGetErrorString(res), tSec(t0));
    atomic_store(&gShared[1], 1);
  } else {
    uint64_t t0 = relayNowNs();
    while (!atomic_load(&gShared[1]) && tSec(t0) < 30) tSleepMs(10);
  }
  relayCommDestroy(g);
  return 0;
}

/* relayCommInitShmUnique: the name alone is the rendezvous. Each rank runs as if under a launch of its
 * own (a different MASTER_PORT, as ranks of a torch store started apart would), so relayCommInitShm's
 * launch identity would keep them apart; the unique name meets, moves data and leaves nothing behind. A
 * NULL name is an argument error, never RELAYCC_JOB's. */
static int rankUnique(int rank, int nranks, void* arg) {
  (void)arg;
  char port[16];
  snprintf(port, sizeof port, "%d", 31000 + rank);
  setenv("MASTER_PORT", port, 1);
  relayComm_t c = NULL;
  relayConfig_t cfg = tCfg(20000, 1 << 16);
  relayResult_t res = relayCommInitShmUnique(&c, nranks, rank, NULL, &cfg);
  T_CHECK(res == relayInvalidArgument && c == NULL && strstr(relayGetLastError(NULL), "uniqueName"),
          "rank %d: a NULL unique name -> %s (%s)", rank, relayGetErrorString(res), relayGetLastError(NULL));
  char job[160];
  snprintf(job, sizeof job, "%s-unique", t_job());
  T_OK(relayCommInitShmUnique(&c, nranks, rank, job, &cfg));
  float v[5], want[5];
  for (int i = 0; i < 5; i++) {
    v[i] = (float)(rank * 10 + i + 1);
    want[i] = 0;
    for (int r = 0; r < nranks; r++) want[i] += (float)(r * 10 + i + 1);
  }
  int ranks[8];
  for (int r = 0; r < nranks; r++) ranks[r] = r;
  relayLayout_t L = {1, nranks, ranks};
  size_t n = 5;
  T_OK(relayAllReduce(v, v, &n, relayFloat32, relaySum, &L, c, NULL));
  for (int i = 0; i < 5; i++)
    T_CHECK(v[i] == want[i], "rank %d: element %d is %g, want %g", rank, i, v[i], want[i]);
  T_OK(relayCommDestroy(c));
  char name[300];
  relayShmSegmentName(job, 1, name, sizeof name);
  int fd = shm_open(name, O_RDONLY, 0);
  T_CHECK(fd < 0, "rank %d: segment %s left behind", rank, name);
  return 0;
}

#define SHM_RANKS(nm, n, fn) \
  { .name = nm, .rank = fn, .ranks = n, .deadlineS = 60, .timeoutS = 120, .skipCode = 77 }
#define SHM_CASE(nm, f) \
  { .name = nm, .fn = f, .timeoutS = 120, .skipCode = 77 }
/* K transfers per peer of up to maxBytes through a ring of ring bytes, iters rounds. */
#define SHM_BIG(nm, n, K, maxBytes, ring, iters)                                                           \
  {                                                                                                        \
    .name = nm, .rank = rankBig, .arg = &(bigArg){K, maxBytes, ring, iters}, .ranks = n, .deadlineS = 100, \
    .timeoutS = 120, .skipCode = 77                                                                        \
  }

/* 77: the case cannot run here (small_devshm needs a private mount namespace). */
static const tCase kCases[] = {
    SHM_RANKS("rendezvous2", 2, rankRendezvous),
    SHM_RANKS("rendezvous3", 3, rankRendezvous),
    SHM_RANKS("rendezvous8", 8, rankRendezvous),
    SHM_RANKS("two_comms", 4, rankTwoComms),
    SHM_BIG("group_big", 5, 3, 300000, 4096, 3),
    SHM_BIG("group_big_ring64k", 4, 4, 1000000, 65536, 2),
    SHM_BIG("group_big8", 8, 2, 100000, 4096, 2),
    SHM_RANKS("group_self", 2, rankSelf),
    {.name = "group_many", .rank = rankMany, .ranks = 4, .deadlineS = 100, .timeoutS = 120, .skipCode = 77},
    {.name = "group_many8", .rank = rankMany, .ranks = 8, .deadlineS = 100, .timeoutS = 120, .skipCode = 77},
    SHM_RANKS("agree", 5, rankAgree),
    SHM_RANKS("agree_mismatch", 3, rankAgreeMismatch),
    SHM_CASE("mismatch", runMismatch),
    SHM_RANKS("timeout", 3, rankTimeout),
    SHM_RANKS("timeout_spin", 3, rankTimeoutSpin),
    SHM_CASE("spin_cores", runSpinCores),
    SHM_CASE("spin_colocated", runSpinColocated),
    SHM_CASE("spin_colocated_stale", runSpinStale),
    SHM_RANKS("wait_disarmed", 4, rankWaitDisarmed),
    SHM_RANKS("init_timeout", 3, rankInitTimeout),
    {.name = "init_timeout_late0",
     .rank = rankInitTimeout,
     .arg = &kLate0Ms,
     .ranks = 3,
     .deadlineS = 60,
     .timeoutS = 120,
     .skipCode = 77},
    SHM_RANKS("guest", 2, rankGuest),
    SHM_RANKS("unique_name", 3, rankUnique),
    SHM_RANKS("init_no_rank0", 3, rankInitNoRank0),
    SHM_CASE("init_killed", runInitKilled),
    SHM_CASE("init_creator_killed", runCreatorKilled),
    SHM_RANKS("nranks_mismatch", 2, rankNranksMismatch),
    SHM_RANKS("badargs", 1, rankBadArgs),
    SHM_RANKS("local", 1, rankLocal),
    SHM_CASE("killed", runKilled),
    SHM_RANKS("dead_peer", 3, rankDeadPeer),
    SHM_CASE("abort", runAbort),
    SHM_RANKS("reject", 3, rankReject),
    SHM_RANKS("gone", 2, rankGone),
    SHM_CASE("stale", runStale),
    SHM_CASE("small_devshm", caseSmallShm),
    SHM_CASE("p2p_lazy", runP2pLazy),
    SHM_CASE("p2p_mismatch", runP2pMismatch),
    SHM_CASE("p2p_badenv", runP2pBadEnv),
};

int main(int argc, char** argv) {
  gShared = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  T_CHECK(gShared != MAP_FAILED, "mmap: %s", strerror(errno));
  return t_main(argc, argv, "shm", kCases, T_NCASES(kCases));
}
