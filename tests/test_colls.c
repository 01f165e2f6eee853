/*
 * Multi-process collective tests on the shm transport: every collective x
 * A in {2,4} x nGroups in {1, 8/A} x dtypes x counts {0, 1, 7, 1000, 2^20+3} x
 * in-place/out-of-place x routes, at 8 ranks, against the serial reference.
 * Helpers pass sentinel-filled buffers that must come back untouched; active
 * outputs are poisoned before every call. Check mode is on (every call is
 * agreed), as the library's own tests run.
 *
 * Usage: test_colls <case>   (cases: see main)
 */
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "colls_common.h"
#include "common.h"
#include "core/comm.h"
#include "harness.h"

#define NRANKS 8
#define POISON 0xCD
#define SENTINEL 0x5A

typedef struct {
  relayColl_t coll;
  int full; /* all dtypes/ops instead of the usual three */
} sweepArg;

/* One call on every rank: returns the number of wrong elements on this rank. */
static size_t oneCall(relayComm_t comm, int rank, relayColl_t coll, int A, int G, const int* ranks,
                      const size_t* counts, relayDataType_t dt, relayRedOp_t op, int inPlace, const char* tag) {
  relayLayout_t L = {G, A, ranks};
  int g = -1, me = -1;
  for (int i = 0; i < G * A; i++)
    if (ranks[i] == rank) {
      g = i / A;
      me = i % A;
    }
  size_t es = relayTypeSize(dt);
  size_t c = g >= 0 ? counts[g] : 0;
  size_t sn = tc_send_elems(coll, A, c), rn = tc_recv_elems(coll, A, c);
  size_t bufBytes = (sn > rn ? sn : rn) * es + 64;
  char* sbuf = malloc(bufBytes);
  char* rbuf = malloc(bufBytes);
  char* want = malloc(rn * es + 1);
  T_CHECK(sbuf && rbuf && want, "rank %d: out of memory", rank);
  const void* sendp;
  void* recvp;
  if (g < 0) { /* helper: sentinel buffers the library must not touch */
    memset(sbuf, SENTINEL, bufBytes);
    memset(rbuf, SENTINEL, bufBytes);
    sendp = sbuf;
    recvp = rbuf;
  } else {
    memset(rbuf, POISON, bufBytes);
    memset(sbuf, POISON, bufBytes);
    if (!inPlace) {
      tc_fill_input(coll, dt, op, A, me, c, sbuf);
      sendp = sbuf;
      recvp = rbuf;
    } else if (coll == RELAY_COLL_ALLGATHER) {
      recvp = rbuf;
      sendp = rbuf + (size_t)me * c * es;
      tc_fill_input(coll, dt, op, A, me, c, (void*)sendp);
    } else if (coll == RELAY_COLL_REDUCESCATTER) {
      sendp = sbuf;
      recvp = sbuf + (size_t)me * c * es;
      tc_fill_input(coll, dt, op, A, me, c, sbuf);
    } else { /* allreduce */
      tc_fill_input(coll, dt, op, A, me, c, rbuf);
      sendp = rbuf;
      recvp = rbuf;
    }
    tc_expected(coll, dt, op, A, me, c, want);
  }
  relayResult_t res = tc_run(coll, sendp, recvp, counts, dt, op, &L, comm);
  T_CHECK(res == relaySuccess, "rank %d %s: %s (%s)", rank, tag, relayGetErrorString(res), relayGetLastError(comm));
  size_t bad = 0, first = 0;
  if (g < 0) {
    for (size_t i = 0; i < bufBytes; i++)
      if ((unsigned char)sbuf[i] != SENTINEL || (unsigned char)rbuf[i] != SENTINEL) {
        fprintf(stderr, "FAIL rank %d %s: helper buffer byte %zu was written\n", rank, tag, i);
        bad++;
        break;
      }
  } else {
    bad = tc_compare(dt, recvp, want, rn, &first);
    if (bad)
      fprintf(stderr, "FAIL rank %d %s: %zu of %zu wrong, first at %zu: got %g want %g\n", rank, tag, bad, rn, first,
              tc_as_double(dt, recvp, first), tc_as_double(dt, want, first));
    /* Out of place: the send buffer is read only. In place: nothing past the
     * recv extent changes. */
    if (!inPlace) {
      char* fresh = malloc(sn * es + 1);
      tc_fill_input(coll, dt, op, A, me, c, fresh);
      if (memcmp(fresh, sbuf, sn * es) != 0) {
        fprintf(stderr, "FAIL rank %d %s: send buffer was modified\n", rank, tag);
        bad++;
      }
      free(fresh);
    }
  }
  free(sbuf);
  free(rbuf);
  free(want);
  return bad;
}

static const char* kRoutes[] = {"direct", "relay", "auto", "oneshot"};

static int sweepRank(int rank, int nranks, void* arg) {
  const sweepArg* sa = arg;
  relayComm_t comms[3];
  for (int r = 0; r < 3; r++) {
    relayConfig_t cfg = RELAY_CONFIG_INITIALIZER;
    cfg.checkMode = 1;
    cfg.timeoutMs = 60000;
    T_CHECK(relayParseRoute(kRoutes[r], &cfg.route) == 0, "route");
    char job[160];
    snprintf(job, sizeof job, "%s-%s", t_job(), kRoutes[r]);
    T_OK(relayCommInitShm(&comms[r], nranks, rank, job, &cfg));
  }
  relayDataType_t dtypes3[] = {relayFloat32, relayInt32, relayBfloat16};
  relayDataType_t dtypesAll[] = {relayInt8, relayUint8, relayInt32, relayUint32, relayInt64,
                                 relayUint64, relayFloat16, relayFloat32, relayFloat64, relayBfloat16};
  relayRedOp_t opsAll[] = {relaySum, relayProd, relayMax, relayMin, relayAvg};
  int isRed = sa->coll == RELAY_COLL_REDUCESCATTER || sa->coll == RELAY_COLL_ALLREDUCE;
  const size_t countsList[] = {0, 1, 7, 1000, (1u << 20) + 3};
  size_t wrong = 0;
  int nCalls = 0;
  for (int Ai = 0; Ai < 2; Ai++) {
    int A = Ai ? 4 : 2;
    for (int Gi = 0; Gi < 2; Gi++) {
      int G = Gi ? NRANKS / A : 1;
      /* A permuted layout: group g's actives are not contiguous ranks. */
      int ranks[NRANKS];
      for (int i = 0; i < G * A; i++) ranks[i] = (i * 3 + (G > 1 ? 1 : 2)) % NRANKS;
      int nd = sa->full ? 10 : 3;
      for (int di = 0; di < nd; di++) {
        relayDataType_t dt = sa->full ? dtypesAll[di] : dtypes3[di];
        int nops = !isRed ? 1 : sa->full ? 5 : 2;
        for (int oi = 0; oi < nops; oi++) {
          relayRedOp_t op = !isRed ? relaySum : sa->full ? opsAll[oi] : (oi ? relayAvg : relaySum);
          for (size_t ci = 0; ci < sizeof countsList / sizeof countsList[0]; ci++) {
            /* The full dtype x op matrix runs at the small counts; the 2^20+3
             * case runs for the three main dtypes. */
            if (sa->full && ci == 4) continue;
            size_t counts[NRANKS];
            for (int g = 0; g < G; g++) counts[g] = countsList[ci] + (size_t)(g % 2) * (ci ? 3 : 0);
            for (int inPlace = 0; inPlace < 2; inPlace++) {
              if (inPlace && sa->coll == RELAY_COLL_ALLTOALL) continue;
              for (int r = 0; r < 3; r++) {
                if (ci == 4 && r == 2) continue; /* auto == one of the other two */
                char tag[200];
                snprintf(tag, sizeof tag, "%s A=%d G=%d %s %s count=%zu %s route=%s", relayCollName(sa->coll), A, G,
                         relayTypeName(dt), relayOpName(op), countsList[ci], inPlace ? "in-place" : "out-of-place",
                         kRoutes[r]);
                wrong += oneCall(comms[r], rank, sa->coll, A, G, ranks, counts, dt, op, inPlace, tag);
                nCalls++;
              }
            }
          }
        }
      }
    }
  }
  for (int r = 0; r < 3; r++) T_OK(relayCommDestroy(comms[r]));
  if (rank == 0) printf("%s: %d calls per rank\n", relayCollName(sa->coll), nCalls);
  return wrong ? 1 : 0;
}

/* ---- bad input: every case leaves the comm usable (check mode) ---------- */

static void expectAll(relayComm_t comm, int rank, relayResult_t got, relayResult_t want, const char* what) {
  T_CHECK(got == want, "rank %d, %s: got %s, want %s (%s)", rank, what, relayGetErrorString(got),
          relayGetErrorString(want), relayGetLastError(comm));
}

static void validCallStillWorks(relayComm_t comm, int rank) {
  int ranks[2] = {0, 1};
  size_t counts[1] = {1000};
  T_CHECK(oneCall(comm, rank, RELAY_COLL_ALLREDUCE, 2, 1, ranks, counts, relayFloat32, relaySum, 0, "after bad input") == 0,
          "comm unusable after a rejected call");
}

/* An all-reduce of 64 floats on the 4-rank layout `ranks` must fail on every
 * rank with relayInvalidArgument and an error that contains `text`. */
static void badLayout(relayComm_t comm, int rank, const float* send, float* recv, const int ranks[4], const char* what,
                      const char* text) {
  relayLayout_t L = {1, 4, ranks};
  size_t counts[1] = {64};
  relayResult_t res = relayAllReduce(send, recv, counts, relayFloat32, relaySum, &L, comm, NULL);
  expectAll(comm, rank, res, relayInvalidArgument, what);
  T_CHECK(strstr(relayGetLastError(comm), text) != NULL, "rank %d, %s: the error does not say \"%s\": %s", rank, what,
          text, relayGetLastError(comm));
}

static int badInputRank(int rank, int nranks, void* arg) {
  (void)arg;
  relayConfig_t cfg = RELAY_CONFIG_INITIALIZER;
  cfg.checkMode = 1;
  cfg.timeoutMs = 20000;
  relayComm_t comm = t_comm(rank, nranks, &cfg);
  int ranks[4] = {0, 1, 2, 3};
  relayLayout_t L = {1, 4, ranks};
  size_t counts[1] = {64};
  float* s = malloc(4 * 64 * sizeof(float));
  float* r = malloc(4 * 64 * sizeof(float));
  memset(r, POISON, 4 * 64 * sizeof(float));
  for (int i = 0; i < 256; i++) s[i] = (float)(rank + i);
  float* active = rank < 4 ? s : NULL;
  float* activeR = rank < 4 ? r : NULL;

  /* NULL send buffer on active rank 2 only. */
  relayResult_t res = relayAllReduce(rank == 2 ? NULL : active, activeR, counts, relayFloat32, relaySum, &L, comm, NULL);
  expectAll(comm, rank, res, relayInvalidArgument, "NULL sendbuff on rank 2");
  T_CHECK(strstr(relayGetLastError(comm), "rank 2") != NULL, "rank %d: error does not name rank 2: %s", rank,
          relayGetLastError(comm));
  if (rank == 2) T_CHECK(strstr(relayGetLastError(comm), "sendbuff") != NULL, "error does not name sendbuff: %s", relayGetLastError(comm));
  /* count * A * size overflow */
  size_t huge[1] = {SIZE_MAX / 2};
  res = relayAllGather(active, activeR, huge, relayFloat32, &L, comm, NULL);
  expectAll(comm, rank, res, relayInvalidArgument, "count overflow");
  T_CHECK(strstr(relayGetLastError(comm), "counts[0]") != NULL, "rank %d: overflow error does not name counts[0]: %s",
          rank, relayGetLastError(comm));
  /* unknown dtype, unknown op */
  res = relayAllReduce(active, activeR, counts, (relayDataType_t)42, relaySum, &L, comm, NULL);
  expectAll(comm, rank, res, relayInvalidArgument, "unknown dtype");
  res = relayReduceScatter(active, activeR, counts, relayFloat32, (relayRedOp_t)17, &L, comm, NULL);
  expectAll(comm, rank, res, relayInvalidArgument, "unknown op");
  /* Layouts with a repeated rank, and with a rank out of range. The second
   * repeat right after the first: the rank table's entries of the check
   * before must not count as repeats (a fresh stamp per check). */
  const int rep[4] = {0, 1, 1, 3}, rep2[4] = {3, 1, 2, 3}, oor[4] = {0, 1, 2, 8};
  badLayout(comm, rank, active, activeR, rep, "repeated rank", "layout.ranks[1] and [2] both name rank 1");
  badLayout(comm, rank, active, activeR, rep2, "repeated rank (second layout)", "layout.ranks[0] and [3] both name rank 3");
  badLayout(comm, rank, active, activeR, oor, "rank out of range", "layout.ranks[3] = 8 is not in [0, ");
  /* counts that differ between ranks */
  size_t mine[1] = {rank == 5 ? 65 : 64};
  res = relayAllReduce(active, activeR, mine, relayFloat32, relaySum, &L, comm, NULL);
  expectAll(comm, rank, res, relayInvalidUsage, "counts differ between ranks");
  /* in-place all-to-all */
  res = relayAllToAll(active, active, counts, relayFloat32, &L, comm, NULL);
  expectAll(comm, rank, res, relayInvalidArgument, "in-place all-to-all");
  /* nothing was written by any rejected call */
  if (rank < 4)
    for (size_t i = 0; i < 4 * 64 * sizeof(float); i++)
      T_CHECK(((unsigned char*)r)[i] == POISON, "rank %d: rejected call wrote recv byte %zu", rank, i);
  validCallStillWorks(comm, rank);
  free(s);
  free(r);
  T_OK(relayCommDestroy(comm));
  return 0;
}

/* Counts differ and check mode is off: the mismatch still becomes an error
 * within the deadline on the rank that sees it, and nobody hangs. */
static int mismatchNoCheckRank(int rank, int nranks, void* arg) {
  (void)arg;
  relayConfig_t cfg = RELAY_CONFIG_INITIALIZER;
  cfg.checkMode = 0;
  cfg.timeoutMs = 3000;
  relayComm_t comm = t_comm(rank, nranks, &cfg);
  int ranks[2] = {0, 1};
  relayLayout_t L = {1, 2, ranks};
  size_t counts[1] = {rank == 1 ? 5000 : 4000};
  float* s = calloc(8000, sizeof(float));
  float* r = calloc(8000, sizeof(float));
  uint64_t t0 = relayNowNs();
  relayResult_t res = relayAllReduce(rank < 2 ? s : NULL, rank < 2 ? r : NULL, counts, relayFloat32, relaySum, &L, comm, NULL);
  double sec = (double)(relayNowNs() - t0) / 1e9;
  T_CHECK(sec < 10.0, "rank %d: mismatched call took %.1f s (deadline 3 s)", rank, sec);
  if (rank < 2) T_CHECK(res != relaySuccess, "rank %d: mismatched counts returned success", rank);
  relayCommDestroy(comm);
  free(s);
  free(r);
  return 0;
}

/* Rank 5 (active) dies in the middle of a large call; the others return
 * relayRemoteError or relayTimeout within the deadline. */
static void* killer(void* arg) {
  (void)arg;
  struct timespec ts = {0, 30 * 1000000};
  nanosleep(&ts, NULL);
  raise(SIGKILL);
  return NULL;
}

static int killedRank(int rank, int nranks, void* arg) {
  (void)arg;
  relayConfig_t cfg = RELAY_CONFIG_INITIALIZER;
  cfg.timeoutMs = 8000;
  relayComm_t comm = t_comm(rank, nranks, &cfg);
  int ranks[8] = {0, 1, 2, 3, 4, 5, 6, 7};
  relayLayout_t L = {1, 8, ranks};
  size_t counts[1] = {1u << 20};
  float* s = calloc(8u << 20, sizeof(float));
  float* r = calloc(8u << 20, sizeof(float));
  T_CHECK(s && r, "oom");
  T_OK(relayCommBarrier(comm));
  pthread_t th;
  if (rank == 5) pthread_create(&th, NULL, killer, NULL);
  uint64_t t0 = relayNowNs();
  relayResult_t res = relaySuccess;
  for (int i = 0; i < 1000 && res == relaySuccess; i++)
    res = relayAllToAll(s, r, counts, relayFloat32, &L, comm, NULL);
  double sec = (double)(relayNowNs() - t0) / 1e9;
  T_CHECK(rank != 5, "rank 5 outlived its killer");
  T_CHECK(res == relayRemoteError || res == relayTimeout, "rank %d: got %s after a peer died", rank,
          relayGetErrorString(res));
  T_CHECK(sec < 20.0, "rank %d: took %.1f s to notice", rank, sec);
  printf("rank %d: %s after %.2f s: %s\n", rank, relayGetErrorString(res), sec, relayGetLastError(comm));
  relayCommDestroy(comm);
  return 0;
}

int main(int argc, char** argv) {
  const char* c = argc > 1 ? argv[1] : "";
  sweepArg sa = {RELAY_COLL_ALLGATHER, 0};
  if (relayParseColl(c, &sa.coll) == 0) {
    t_run_ranks(NRANKS, sweepRank, &sa, 540);
  } else if (strncmp(c, "full-", 5) == 0 && relayParseColl(c + 5, &sa.coll) == 0) {
    sa.full = 1;
    t_run_ranks(NRANKS, sweepRank, &sa, 540);
  } else if (!strcmp(c, "badinput")) {
    t_run_ranks(NRANKS, badInputRank, NULL, 120);
  } else if (!strcmp(c, "mismatch-nocheck")) {
    t_run_ranks(NRANKS, mismatchNoCheckRank, NULL, 60);
  } else if (!strcmp(c, "killed")) {
    int codes[NRANKS];
    t_launch(NRANKS, killedRank, NULL, 60, 30000, codes);
    for (int r = 0; r < NRANKS; r++) {
      if (r == 5)
        T_CHECK(codes[r] == -SIGKILL, "rank 5 exit %d, want -SIGKILL", codes[r]);
      else
        T_CHECK(codes[r] == 0, "survivor rank %d exit code %d", r, codes[r]);
    }
  } else {
    fprintf(stderr, "usage: test_colls allgather|reducescatter|allreduce|alltoall|full-<coll>|badinput|mismatch-nocheck|killed\n");
    return 2;
  }
  return 0;
}
