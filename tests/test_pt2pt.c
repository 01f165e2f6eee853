/* Point-to-point (relaySend, relayRecv, relayGroupStart/End) and the uneven all-to-all (relayAllToAllv)
 * on shm, against a serial reference: element i of the block from rank s to rank d is val(s, d, i), the
 * outputs poisoned before each run; odd and zero counts; errors assert the data as well as the code. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "harness.h"

#define POISON_WORD ((int32_t)0x5eeded5e)

static int32_t val(int s, int d, size_t i) { return (int32_t)(1000000 * (s + 1) + 10000 * d + (int)i); }

/* The count rank s sends to rank d: odd counts, a zero on some pairs (s + d divisible by 5). */
static size_t pairCount(int s, int d) { return (size_t)((s + d) % 5 == 0 ? 0 : 37 * s + 11 * d + 1); }

static relayComm_t commOf(int rank, int nranks, int checkMode, int timeoutMs) {
  relayConfig_t cfg = RELAY_CONFIG_INITIALIZER;
  cfg.timeoutMs = timeoutMs;
  cfg.checkMode = checkMode;
  return t_comm(rank, nranks, &cfg);
}

static void fill(int32_t* b, int s, int d, size_t n) {
  for (size_t i = 0; i < n; i++) b[i] = val(s, d, i);
}
static void poison(int32_t* b, size_t n) {
  for (size_t i = 0; i < n; i++) b[i] = POISON_WORD;
}
static void expectBlock(int rank, const char* what, const int32_t* b, int s, int d, size_t n) {
  for (size_t i = 0; i < n; i++)
    T_CHECK(b[i] == val(s, d, i), "rank %d, %s: element %zu from rank %d = %d, want %d", rank, what, i, s,
            b[i], val(s, d, i));
}
static void expectPoison(int rank, const char* what, const int32_t* b, size_t n) {
  for (size_t i = 0; i < n; i++)
    T_CHECK(b[i] == POISON_WORD, "rank %d, %s: element %zu was written (%d)", rank, what, i, b[i]);
}
static void expectError(int rank, relayComm_t c, relayResult_t got, relayResult_t want, const char* a,
                        const char* b) {
  const char* msg = relayGetLastError(c);
  T_CHECK(got == want, "rank %d: got %s, want %s (%s)", rank, relayGetErrorString(got),
          relayGetErrorString(want), msg);
  T_CHECK(!a || strstr(msg, a), "rank %d: the error does not say \"%s\": %s", rank, a, msg);
  T_CHECK(!b || strstr(msg, b), "rank %d: the error does not say \"%s\": %s", rank, b, msg);
}

/* An all-reduce over every rank, checked: collectives keep their lockstep around point-to-point. */
static void allReduceCheck(int rank, int nranks, relayComm_t c) {
  int ranks[8];
  for (int q = 0; q < nranks; q++) ranks[q] = q;
  relayLayout_t lay = {1, nranks, ranks};
  size_t counts[1] = {33};
  int32_t s[33], r[33];
  for (int i = 0; i < 33; i++) s[i] = rank * 100 + i;
  poison(r, 33);
  T_OK(relayAllReduce(s, r, counts, relayInt32, relaySum, &lay, c, NULL));
  for (int i = 0; i < 33; i++)
    T_CHECK(r[i] == 100 * nranks * (nranks - 1) / 2 + nranks * i, "rank %d: all-reduce element %d = %d", rank,
            i, r[i]);
}

/* Ring: each rank sends to the next and receives from the previous, in one group, both orders. */
static int gCheckMode; /* the check-mode rows' wrappers set it */

static int ringRank(int rank, int nranks, void* arg) {
  (void)arg;
  relayComm_t c = commOf(rank, nranks, gCheckMode, 30000);
  int next = (rank + 1) % nranks, prev = (rank + nranks - 1) % nranks;
  for (int rep = 0; rep < 3; rep++) {
    size_t sn = pairCount(next == rank ? rank : rank, next) + (size_t)rep,
           rn = pairCount(prev, rank) + (size_t)rep;
    int32_t* s = malloc((sn + 1) * sizeof *s);
    int32_t* r = malloc((rn + 1) * sizeof *r);
    fill(s, rank, next, sn);
    poison(r, rn + 1);
    T_OK(relayGroupStart());
    if (rep % 2) {
      T_OK(relayRecv(r, rn, relayInt32, prev, c, NULL));
      T_OK(relaySend(s, sn, relayInt32, next, c, NULL));
    } else {
      T_OK(relaySend(s, sn, relayInt32, next, c, NULL));
      T_OK(relayRecv(r, rn, relayInt32, prev, c, NULL));
    }
    T_OK(relayGroupEnd());
    expectBlock(rank, "ring", r, prev, rank, rn);
    T_CHECK(r[rn] == POISON_WORD, "rank %d: ring wrote past the block", rank);
    free(s);
    free(r);
  }
  allReduceCheck(rank, nranks, c);
  T_OK(relayCommDestroy(c));
  return 0;
}

/* All pairs, self included, two transfers per pair, in one group (nested). */
static int allPairsRank(int rank, int nranks, void* arg) {
  (void)arg;
  relayComm_t c = commOf(rank, nranks, gCheckMode, 30000);
  int32_t *s[8][2], *r[8][2];
  T_OK(relayGroupStart());
  for (int q = 0; q < nranks; q++)
    for (int k = 0; k < 2; k++) {
      size_t sn = pairCount(rank, q) + (size_t)k * 1000, rn = pairCount(q, rank) + (size_t)k * 1000;
      s[q][k] = malloc((sn + 1) * sizeof(int32_t));
      r[q][k] = malloc((rn + 1) * sizeof(int32_t));
      fill(s[q][k], rank, q, sn);
      poison(r[q][k], rn + 1);
      T_OK(relayGroupStart());
      T_OK(relaySend(s[q][k], sn, relayInt32, q, c, NULL));
      T_OK(relayGroupEnd());
      T_OK(relayRecv(r[q][k], rn, relayInt32, q, c, NULL));
    }
  T_OK(relayGroupEnd());
  for (int q = 0; q < nranks; q++)
    for (int k = 0; k < 2; k++) {
      size_t rn = pairCount(q, rank) + (size_t)k * 1000;
      expectBlock(rank, "all pairs", r[q][k], q, rank, rn);
      T_CHECK(r[q][k][rn] == POISON_WORD, "rank %d: wrote past the block from %d", rank, q);
      free(s[q][k]);
      free(r[q][k]);
    }
  allReduceCheck(rank, nranks, c);
  T_OK(relayCommDestroy(c));
  return 0;
}

/* A group spanning two comms, crossed: rank 0 sends on A and receives on B, rank 1 sends on B and
 * receives on A, each listing its send first, with messages 16 times the 1 MiB ring so a send cannot
 * finish before its receive runs. Comm by comm in order of first appearance both ranks would block in
 * their sends until the deadline; relaycc runs both comms in the order of their agreed keys. */
static int crossCommsRank(int rank, int nranks, void* arg) {
  (void)arg;
  relayConfig_t cfg = RELAY_CONFIG_INITIALIZER;
  cfg.timeoutMs = 20000;
  relayComm_t a = t_comm(rank, nranks, &cfg), b = NULL;
  char job[160];
  snprintf(job, sizeof job, "%s-b", t_job());
  T_OK(relayCommInitShm(&b, nranks, rank, job, &cfg));
  size_t n = (size_t)4 << 20; /* 16 MiB of int32 */
  int peer = 1 - rank;
  for (int rep = 0; rep < 2; rep++) {
    int32_t* s = malloc(n * sizeof *s);
    int32_t* r = malloc((n + 1) * sizeof *r);
    T_CHECK(s && r, "rank %d: out of memory", rank);
    fill(s, rank, peer, n);
    poison(r, n + 1);
    relayComm_t sendOn = rank == 0 ? a : b, recvOn = rank == 0 ? b : a;
    T_OK(relayGroupStart());
    T_OK(relaySend(s, n, relayInt32, peer, sendOn, NULL));
    T_OK(relayRecv(r, n, relayInt32, peer, recvOn, NULL));
    T_OK(relayGroupEnd());
    expectBlock(rank, "the crossed group", r, peer, rank, n);
    T_CHECK(r[n] == POISON_WORD, "rank %d: the crossed group wrote past the block", rank);
    free(s);
    free(r);
  }
  allReduceCheck(rank, nranks, a);
  allReduceCheck(rank, nranks, b);
  T_OK(relayCommDestroy(b));
  T_OK(relayCommDestroy(a));
  return 0;
}

/* Matched by order per pair, not by group (NCCL's rule): rank 0 sends three transfers in one group
 * (the first 4 MiB, larger than the ring) while rank 1 receives them in three calls, then the reverse
 * (rank 1 sends in three calls, rank 0 receives in one group). Check mode 0: the pair's check round of
 * check mode 1 needs both ends to group alike (relaycc.h). */
static int splitGroupsRank(int rank, int nranks, void* arg) {
  (void)arg;
  relayComm_t c = commOf(rank, nranks, 0, 20000);
  const size_t n[3] = {(size_t)1 << 20, 7, 4099};
  int32_t* b[3];
  for (int k = 0; k < 3; k++) {
    b[k] = malloc((n[k] + 1) * sizeof(int32_t));
    T_CHECK(b[k] != NULL, "rank %d: out of memory", rank);
  }
  for (int dir = 0; dir < 2; dir++) {
    int sender = dir, me = rank == sender, peer = 1 - rank;
    for (int k = 0; k < 3; k++) {
      if (me) fill(b[k], rank, peer + 10 * k, n[k]);
      else poison(b[k], n[k] + 1);
    }
    /* The sender groups when dir == 0, the receiver when dir == 1. */
    int grouped = me == (dir == 0);
    if (grouped) T_OK(relayGroupStart());
    for (int k = 0; k < 3; k++)
      T_OK(me ? relaySend(b[k], n[k], relayInt32, peer, c, NULL)
              : relayRecv(b[k], n[k], relayInt32, peer, c, NULL));
    if (grouped) T_OK(relayGroupEnd());
    if (!me)
      for (int k = 0; k < 3; k++) {
        expectBlock(rank, "a transfer grouped on one end only", b[k], peer, rank + 10 * k, n[k]);
        T_CHECK(b[k][n[k]] == POISON_WORD, "rank %d: transfer %d wrote past its block", rank, k);
      }
  }
  for (int k = 0; k < 3; k++) free(b[k]);
  allReduceCheck(rank, nranks, c);
  T_OK(relayCommDestroy(c));
  return 0;
}

/* A pair that orders a transfer and a collective differently (rank 0 sends, then all-reduces; rank 1
 * all-reduces, then receives), direct route, check mode 0: rank 1's all-reduce meets rank 0's
 * point-to-point header and must say so (relayInvalidUsage, "sequence of calls"), not report a corrupt
 * stream (the header's index is the pair's sequence number, which review found checked first). */
static int misorderRank(int rank, int nranks, void* arg) {
  (void)arg;
  relayConfig_t cfg = RELAY_CONFIG_INITIALIZER;
  cfg.timeoutMs = 5000;
  cfg.route = relayRouteDirect;
  relayComm_t c = t_comm(rank, nranks, &cfg);
  int32_t s[64], r[64];
  fill(s, rank, 1 - rank, 64);
  poison(r, 64);
  int ranks[2] = {0, 1};
  relayLayout_t lay = {1, 2, ranks};
  size_t counts[1] = {(size_t)1 << 18};
  int32_t* as = calloc(counts[0], sizeof *as);
  int32_t* ar = calloc(counts[0], sizeof *ar);
  T_CHECK(as && ar, "rank %d: out of memory", rank);
  if (rank == 0) {
    relaySend(s, 64, relayInt32, 1, c, NULL);
    relayAllReduce(as, ar, counts, relayInt32, relaySum, &lay, c, NULL);
  } else {
    relayResult_t res = relayAllReduce(as, ar, counts, relayInt32, relaySum, &lay, c, NULL);
    expectError(rank, c, res, relayInvalidUsage, "sequence of calls", NULL);
  }
  free(as);
  free(ar);
  relayCommDestroy(c);
  return 0;
}

/* The same in check mode 1: the pair's check round before the data (the NCCL path's logic, on shm). */
static int ringCheckRank(int rank, int nranks, void* arg) {
  gCheckMode = 1;
  return ringRank(rank, nranks, arg);
}
static int allPairsCheckRank(int rank, int nranks, void* arg) {
  gCheckMode = 1;
  return allPairsRank(rank, nranks, arg);
}

/* A count or datatype that differs within a pair: the receiver's error names both ranks, its buffer
 * untouched; the pair stays in step and the comm usable. Ranks 2, 3 are not involved. */
static int mismatchRank(int rank, int nranks, void* arg) {
  int checkMode = (int)(intptr_t)arg;
  relayComm_t c = commOf(rank, nranks, checkMode, 20000);
  int32_t s[64], r[64];
  fill(s, rank, rank ^ 1, 64);
  poison(r, 64);
  if (rank == 0 && !checkMode) {
    T_OK(relaySend(s, 10, relayInt32, 1, c, NULL)); /* handed off: the sender does not wait */
    T_OK(relaySend(s, 10, relayFloat32, 1, c, NULL));
    T_OK(relaySend(s, 12, relayInt32, 1, c, NULL));
  } else if (rank == 0) {
    /* Check mode 1: the pair checks first, so the sender fails too, naming both. */
    expectError(rank, c, relaySend(s, 10, relayInt32, 1, c, NULL), relayInvalidUsage,
                "rank 0 sends 10 x int32", "rank 1 receives 11 x int32");
    expectError(rank, c, relaySend(s, 10, relayFloat32, 1, c, NULL), relayInvalidUsage, "10 x float,",
                "10 x int32");
    T_OK(relaySend(s, 12, relayInt32, 1, c, NULL));
  } else if (rank == 1) {
    expectError(rank, c, relayRecv(r, 11, relayInt32, 0, c, NULL), relayInvalidUsage,
                "rank 0 sends 10 x int32", "rank 1 receives 11 x int32");
    expectPoison(rank, "count mismatch", r, 64);
    expectError(rank, c, relayRecv(r, 10, relayInt32, 0, c, NULL), relayInvalidUsage,
                "rank 0 sends 10 x float,", "10 x int32");
    expectPoison(rank, "dtype mismatch", r, 64);
    T_OK(relayRecv(r, 12, relayInt32, 0, c, NULL));
    expectBlock(rank, "after the mismatches", r, 0, 1, 12);
  }
  allReduceCheck(rank, nranks, c);
  T_OK(relayCommDestroy(c));
  return 0;
}

/* Bad arguments: a peer outside the comm is rejected on the caller only; a bad buffer or datatype is
 * told to the peer, whose receive fails naming the rejecting rank, and the pair stays in step; a
 * receive that is rejected drains its sender's data. relayCallReject's transfers too. */
static int badArgRank(int rank, int nranks, void* arg) {
  int checkMode = (int)(intptr_t)arg;
  relayComm_t c = commOf(rank, nranks, checkMode, 20000);
  int32_t s[16], r[16];
  fill(s, rank, rank ^ 1, 16);
  poison(r, 16);
  if (rank == 0) {
    expectError(rank, c, relaySend(s, 4, relayInt32, nranks, c, NULL), relayInvalidArgument, "peer = 4",
                NULL);
    expectError(rank, c, relaySend(NULL, 4, relayInt32, 1, c, NULL), relayInvalidArgument, "sendbuff is NULL",
                "relaySend (rank 0)");
    expectError(rank, c, relaySend(s, 4, (relayDataType_t)77, 1, c, NULL), relayInvalidArgument,
                "datatype 77", NULL);
    size_t one = 4;
    expectError(
        rank, c,
        relayCallReject(relayCollectiveSend, &one, relayInt32, relaySum, NULL, 1, "bad tensor", c, NULL),
        relayInvalidArgument, "bad tensor", NULL);
    T_OK(relaySend(s, 5, relayInt32, 1, c, NULL));
    /* Rank 1 rejects its receive: the data is drained (check mode 1: the sender learns it first). */
    if (checkMode)
      expectError(rank, c, relaySend(s, 6, relayInt32, 1, c, NULL), relayRemoteError, "rank 1 rejected",
                  "nothing was sent");
    else T_OK(relaySend(s, 6, relayInt32, 1, c, NULL));
    T_OK(relaySend(s, 7, relayInt32, 1, c, NULL));
  } else if (rank == 1) {
    for (int k = 0; k < 3; k++) {
      expectError(rank, c, relayRecv(r, 4, relayInt32, 0, c, NULL), relayRemoteError, "rank 0 rejected",
                  NULL);
      expectPoison(rank, "after a rejected send", r, 16);
    }
    T_OK(relayRecv(r, 5, relayInt32, 0, c, NULL));
    expectBlock(rank, "after the rejections", r, 0, 1, 5);
    poison(r, 16);
    expectError(rank, c, relayRecv(NULL, 6, relayInt32, 0, c, NULL), relayInvalidArgument, "recvbuff is NULL",
                NULL);
    T_OK(relayRecv(r, 7, relayInt32, 0, c, NULL));
    expectBlock(rank, "after the drained receive", r, 0, 1, 7);
  }
  allReduceCheck(rank, nranks, c);
  T_OK(relayCommDestroy(c));
  return 0;
}

/* Point-to-point between collectives on one comm: pairs (0,1) and (2,3) exchange around all-reduces,
 * each pair in its own order; the all-reduces keep their lockstep. */
static int interleaveRank(int rank, int nranks, void* arg) {
  (void)arg;
  relayComm_t c = commOf(rank, nranks, (int)(intptr_t)arg, 30000);
  int peer = rank ^ 1;
  int32_t s[300], r[300];
  for (int rep = 0; rep < 4; rep++) {
    size_t n = (size_t)(101 + rep * 50);
    fill(s, rank, peer, n);
    poison(r, 300);
    if (rank < 2) {
      if (rank == 0) T_OK(relaySend(s, n, relayInt32, peer, c, NULL));
      else T_OK(relayRecv(r, n, relayInt32, peer, c, NULL));
      allReduceCheck(rank, nranks, c);
      if (rank == 0) T_OK(relayRecv(r, n, relayInt32, peer, c, NULL));
      else T_OK(relaySend(s, n, relayInt32, peer, c, NULL));
    } else {
      allReduceCheck(rank, nranks, c);
      T_OK(relayGroupStart());
      T_OK(relaySend(s, n, relayInt32, peer, c, NULL));
      T_OK(relayRecv(r, n, relayInt32, peer, c, NULL));
      T_OK(relayGroupEnd());
    }
    expectBlock(rank, "interleaved", r, peer, rank, n);
  }
  allReduceCheck(rank, nranks, c);
  T_OK(relayCommDestroy(c));
  return 0;
}

/* Rank 1 dies before it sends: rank 0's receive ends well before its deadline, naming rank 1. */
static int killedRank(int rank, int nranks, void* arg) {
  (void)arg;
  relayComm_t c = commOf(rank, nranks, 0, 60000);
  if (rank == 1) {
    usleep(200000);
    _exit(3);
  }
  int32_t r[100];
  poison(r, 100);
  expectError(rank, c, relayRecv(r, 100, relayInt32, 1, c, NULL), relayRemoteError, "rank 1", "died");
  expectPoison(rank, "a dead sender", r, 100);
  relayCommDestroy(c);
  return 0;
}

static int caseKilled(void) {
  int codes[2];
  t_launch(2, killedRank, NULL, 30, 5000, codes);
  T_CHECK(codes[0] == 0, "rank 0 exited with %d", codes[0]);
  T_CHECK(codes[1] == 3, "rank 1 exited with %d (want its own 3)", codes[1]);
  return 0;
}

/* A peer that never comes: the deadline, naming the peer. */
static int timeoutRank(int rank, int nranks, void* arg) {
  (void)arg;
  relayComm_t c = commOf(rank, nranks, 0, 1000);
  if (rank == 0) {
    int32_t r[10];
    poison(r, 10);
    expectError(rank, c, relayRecv(r, 10, relayInt32, 1, c, NULL), relayTimeout, "waiting for rank 1",
                "point-to-point transfer #1");
    expectPoison(rank, "a timed-out receive", r, 10);
  } else {
    sleep(3); /* alive past rank 0's deadline: a timeout, not a departed peer */
  }
  relayCommDestroy(c);
  return 0;
}

/* ---- all-to-all-v -------------------------------------------------------- */

/* Uneven counts: active i sends cnt(i, j) to active j (zeros included). */
static size_t a2avCount(int i, int j) { return (size_t)((3 * i + 5 * j + 1) % 7) * (size_t)(i + 1); }

typedef struct {
  int nActive, checkMode, mismatch;
} a2avArg;

/* The layout: actives in reverse rank order, so active index and comm rank differ; one helper when the
 * comm has more ranks than actives. */
static int a2avRank(int rank, int nranks, void* argp) {
  const a2avArg* a = argp;
  int A = a->nActive;
  relayComm_t c = commOf(rank, nranks, a->checkMode, 30000);
  int ranks[8], me = -1;
  for (int i = 0; i < A; i++) {
    ranks[i] = A - 1 - i;
    if (ranks[i] == rank) me = i;
  }
  relayLayout_t lay = {1, A, ranks};
  size_t sc[8], sd[8], rc[8], rd[8], st = 0, rt = 0;
  for (int j = 0; j < A && me >= 0; j++) {
    sc[j] = a2avCount(me, j);
    rc[j] = a2avCount(j, me);
    sd[j] = st + 3; /* gaps between blocks stay untouched */
    rd[j] = rt + 2;
    st = sd[j] + sc[j];
    rt = rd[j] + rc[j];
  }
  /* The mismatch: active 1 expects one more element from active 0 than it sends. */
  if (a->mismatch && me == 1) rc[0] += 1, rt += 1;
  int32_t* s = me >= 0 ? malloc((st + 1) * sizeof *s) : NULL;
  int32_t* r = me >= 0 ? malloc((rt + 1) * sizeof *r) : NULL;
  for (int rep = 0; rep < 2; rep++) {
    if (me >= 0) {
      poison(s, st + 1);
      poison(r, rt + 1);
      for (int j = 0; j < A; j++) fill(s + sd[j], ranks[me], ranks[j], sc[j]);
    }
    relayResult_t res = me >= 0
                            ? relayAllToAllv(s, sc, sd, r, rc, rd, relayInt32, &lay, c, NULL)
                            : relayAllToAllv(NULL, NULL, NULL, NULL, NULL, NULL, relayInt32, &lay, c, NULL);
    if (a->mismatch && (a->checkMode || me == 1)) {
      char a0[32], a1[32];
      snprintf(a0, sizeof a0, "rank %d", ranks[0]);
      snprintf(a1, sizeof a1, "rank %d", ranks[1]);
      expectError(rank, c, res, relayInvalidUsage, a0, a1);
      if (me >= 0 && a->checkMode) expectPoison(rank, "agreed mismatch", r, rt + 1);
      if (me == 1 && !a->checkMode) {
        expectPoison(rank, "the mismatched block", r + rd[0], rc[0]);
        for (int j = 1; j < A; j++) expectBlock(rank, "the other blocks", r + rd[j], ranks[j], rank, rc[j]);
      }
    } else {
      T_CHECK(res == relaySuccess, "rank %d: relayAllToAllv -> %s (%s)", rank, relayGetErrorString(res),
              relayGetLastError(c));
      if (me >= 0) {
        size_t at = 0;
        for (int j = 0; j < A; j++) {
          expectPoison(rank, "a gap", r + at, rd[j] - at);
          expectBlock(rank, "all-to-all-v", r + rd[j], ranks[j], rank, rc[j]);
          at = rd[j] + rc[j];
        }
        expectPoison(rank, "past the end", r + rt, 1);
        for (int j = 0; j < A; j++) expectBlock(rank, "the input", s + sd[j], ranks[me], ranks[j], sc[j]);
      }
    }
  }
  allReduceCheck(rank, nranks, c);
  free(s);
  free(r);
  T_OK(relayCommDestroy(c));
  return 0;
}

/* Check mode 1, rank 0 rejects its all-to-all-v (sendcounts NULL) on the identity layout while the
 * others call later with the layout reversed: the agreement's second round (the rejection's reason) must
 * not meet the transport's shape judge with the call's shape still set (it failed the comm before the
 * fix): every rank fails the call naming rank 0, and the comm stays usable. */
static int a2avRejectOtherLayoutRank(int rank, int nranks, void* arg) {
  (void)arg;
  relayComm_t c = commOf(rank, nranks, 1, 20000);
  int ranks[8];
  for (int q = 0; q < nranks; q++) ranks[q] = rank == 0 ? q : nranks - 1 - q;
  relayLayout_t lay = {1, nranks, ranks};
  size_t cnt[8], dsp[8];
  int32_t s[8 * 4], r[8 * 4];
  for (int j = 0; j < nranks; j++) {
    cnt[j] = 4;
    dsp[j] = (size_t)j * 4;
    fill(s + j * 4, rank, j, 4);
  }
  poison(r, 8 * 4);
  if (rank != 0) usleep(100000); /* rank 0's rejection is in the round first */
  relayResult_t res = relayAllToAllv(s, rank == 0 ? NULL : cnt, dsp, r, cnt, dsp, relayInt32, &lay, c, NULL);
  if (rank == 0) expectError(rank, c, res, relayInvalidArgument, "sendcounts", NULL);
  else expectError(rank, c, res, relayInvalidArgument, "rank 0 rejected", "sendcounts");
  expectPoison(rank, "a rejected all-to-all-v", r, (size_t)nranks * 4);
  allReduceCheck(rank, nranks, c);
  T_OK(relayCommDestroy(c));
  return 0;
}

/* A binding's rejection of an all-to-all-v on rank 1 (relayCallReject): check mode 0, the ranks that
 * receive from it fail naming it, its own blocks are drained, the others' calls succeed; check mode 1,
 * every rank fails and nothing moves. The comm stays usable. */
static int a2avRejectRank(int rank, int nranks, void* arg) {
  int checkMode = (int)(intptr_t)arg;
  relayComm_t c = commOf(rank, nranks, checkMode, 20000);
  int ranks[8];
  for (int q = 0; q < nranks; q++) ranks[q] = q;
  relayLayout_t lay = {1, nranks, ranks};
  size_t sc[8], sd[8], rc[8], rd[8];
  int32_t s[8 * 5], r[8 * 5];
  for (int j = 0; j < nranks; j++) {
    sc[j] = rc[j] = 5;
    sd[j] = rd[j] = (size_t)j * 5;
    fill(s + j * 5, rank, j, 5);
  }
  poison(r, 8 * 5);
  relayResult_t res = rank == 1 ? relayCallReject(relayCollectiveAllToAllV, NULL, relayInt32, relaySum, &lay,
                                                  0, "bad tensor", c, NULL)
                                : relayAllToAllv(s, sc, sd, r, rc, rd, relayInt32, &lay, c, NULL);
  if (rank == 1) {
    expectError(rank, c, res, relayInvalidArgument, "bad tensor", NULL);
  } else if (checkMode) {
    expectError(rank, c, res, relayInvalidArgument, "rank 1 rejected", "bad tensor");
    expectPoison(rank, "an agreed rejection", r, (size_t)nranks * 5);
  } else {
    expectError(rank, c, res, relayRemoteError, "rank 1 rejected", NULL);
    expectPoison(rank, "the rejecting rank's block", r + 5, 5);
    for (int j = 0; j < nranks; j++)
      if (j != 1) expectBlock(rank, "the other blocks", r + j * 5, j, rank, 5);
  }
  allReduceCheck(rank, nranks, c);
  T_OK(relayCommDestroy(c));
  return 0;
}

#define P2P(nm, fn, n) \
  { .name = nm, .rank = fn, .ranks = n, .deadlineS = 120, .timeoutS = 180 }
#define A2AV(nm, n, A, cm, mm)                                                                \
  {                                                                                           \
    .name = nm, .rank = a2avRank, .arg = &(a2avArg){A, cm, mm}, .ranks = n, .deadlineS = 120, \
    .timeoutS = 180                                                                           \
  }

static const tCase kCases[] = {
    P2P("ring-2", ringRank, 2),
    P2P("ring-3", ringRank, 3),
    P2P("ring-5", ringRank, 5),
    P2P("ring-8", ringRank, 8),
    P2P("allpairs-2", allPairsRank, 2),
    P2P("allpairs-4", allPairsRank, 4),
    P2P("allpairs-7", allPairsRank, 7),
    P2P("allpairs-8", allPairsRank, 8),
    {.name = "mismatch",
     .rank = mismatchRank,
     .arg = (void*)0,
     .ranks = 4,
     .deadlineS = 120,
     .timeoutS = 180},
    {.name = "mismatch-check",
     .rank = mismatchRank,
     .arg = (void*)1,
     .ranks = 4,
     .deadlineS = 120,
     .timeoutS = 180},
    {.name = "badarg", .rank = badArgRank, .arg = (void*)0, .ranks = 4, .deadlineS = 120, .timeoutS = 180},
    {.name = "badarg-check",
     .rank = badArgRank,
     .arg = (void*)1,
     .ranks = 4,
     .deadlineS = 120,
     .timeoutS = 180},
    P2P("ring-3-check", ringCheckRank, 3),
    P2P("cross-comms", crossCommsRank, 2),
    P2P("split-groups", splitGroupsRank, 2),
    P2P("misorder", misorderRank, 2),
    P2P("allpairs-6-check", allPairsCheckRank, 6),
    {.name = "interleave",
     .rank = interleaveRank,
     .arg = (void*)0,
     .ranks = 4,
     .deadlineS = 120,
     .timeoutS = 180},
    {.name = "interleave-check",
     .rank = interleaveRank,
     .arg = (void*)1,
     .ranks = 4,
     .deadlineS = 120,
     .timeoutS = 180},
    {.name = "killed", .fn = caseKilled, .timeoutS = 60},
    P2P("timeout", timeoutRank, 2),
    A2AV("a2av-2", 2, 2, 0, 0),
    A2AV("a2av-3-helper", 4, 3, 0, 0),
    A2AV("a2av-5", 5, 5, 0, 0),
    A2AV("a2av-7-helper", 8, 7, 0, 0),
    A2AV("a2av-8", 8, 8, 1, 0),
    A2AV("a2av-4-check", 5, 4, 1, 0),
    A2AV("a2av-mismatch-check0", 5, 4, 0, 1),
    A2AV("a2av-mismatch-check1", 5, 4, 1, 1),
    {.name = "a2av-reject",
     .rank = a2avRejectRank,
     .arg = (void*)0,
     .ranks = 4,
     .deadlineS = 120,
     .timeoutS = 180},
    P2P("a2av-reject-other-layout", a2avRejectOtherLayoutRank, 3),
    {.name = "a2av-reject-check",
     .rank = a2avRejectRank,
     .arg = (void*)1,
     .ranks = 4,
     .deadlineS = 120,
     .timeoutS = 180},
};

int main(int argc, char** argv) { return t_main(argc, argv, "pt2pt", kCases, T_NCASES(kCases)); }
