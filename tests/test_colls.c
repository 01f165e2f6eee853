/*
 * Multi-process collective tests on the shm transport: every collective x
 * A in {2,4} x nGroups in {1, 8/A} x dtypes x counts {0, 1, 7, 1000, 2^20+3} x
 * in-place/out-of-place x routes, at 8 ranks, against the serial reference.
 * Helpers pass sentinel-filled buffers that must come back untouched; active
 * outputs are poisoned before every call. Check mode is on (every call is
 * agreed), as the library's own tests run.
 *
 * Usage: test_colls <case>   (cases: kCases at the bottom; --list prints them)
 */
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "colls_common.h"
#include "comm/comm.h"
#include "comm/common.h"
#include "core/core.h"
#include "harness.h"
#include "plan/plan.h"

#define NRANKS 8
#define POISON TC_POISON

typedef struct {
  relayCollective_t coll;
  int full; /* all dtypes/ops instead of the usual three */
} sweepArg;

static const char* kRoutes[] = {"direct", "relay", "auto", "oneshot", "bw"};

static int sweepRank(int rank, int nranks, void* arg) {
  const sweepArg* sa = arg;
  int isRed = relayCollReduces(sa->coll), rooted = relayCollRooted(sa->coll);
  /* Broadcast and reduce also force the one-shot and the bandwidth route (their rooted forms; the layout
   * collectives' have their own cases, test_oneshot.c). */
  int nRoutes = rooted ? 5 : 3;
  relayComm_t comms[5];
  for (int r = 0; r < nRoutes; r++) comms[r] = tc_comm_route(rank, nranks, kRoutes[r], 60000);
  relayDataType_t dtypes3[] = {relayFloat32, relayInt32, relayBfloat16};
  relayDataType_t dtypesAll[] = {relayInt8,   relayUint8,   relayInt32,   relayUint32,  relayInt64,
                                 relayUint64, relayFloat16, relayFloat32, relayFloat64, relayBfloat16};
  relayRedOp_t opsAll[] = {relaySum, relayProd, relayMax, relayMin, relayAvg};
  /* Broadcast and reduce: A = 2..8 (3 fused as 2 groups of 3, 8 independent only), the root moving. */
  const int asLayout[] = {2, 4}, asRooted[] = {2, 3, 4, 8};
  const int* As = rooted ? asRooted : asLayout;
  int nAs = rooted ? 4 : 2;
  const size_t countsList[] = {0, 1, 7, 1000, (1u << 20) + 3};
  size_t wrong = 0;
  int nCalls = 0;
  for (int Ai = 0; Ai < nAs; Ai++) {
    int A = As[Ai];
    for (int Gi = 0; Gi < 2; Gi++) {
      int G = Gi ? NRANKS / A : 1;
      if (Gi && G < 2) continue; /* A = 8: no fused form */
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
              if (inPlace && sa->coll == relayCollectiveAllToAll) continue;
              for (int r = 0; r < nRoutes; r++) {
                if (ci == 4 && r == 2) continue; /* auto == one of the other two */
                char tag[200];
                int root = rooted ? (int)(ci + (size_t)di + (size_t)oi) % A : 0;
                snprintf(tag, sizeof tag, "%s A=%d G=%d root=%d %s %s count=%zu %s route=%s",
                         relayCollName(sa->coll), A, G, root, relayTypeName(dt), relayOpName(op),
                         countsList[ci], inPlace ? "in-place" : "out-of-place", kRoutes[r]);
                wrong += tc_one_call_root(comms[r], rank, sa->coll, A, G, ranks, counts, dt, op, root,
                                          inPlace, tag);
                nCalls++;
                /* A forced relay, one-shot or bw serves broadcast and reduce wherever its builder can (relay:
                 * a helper; one-shot: one group within the default gate; bw: one group, any count, the
                 * 2^20+3 broadcast on its one-copy path where this host's read is cheap enough
                 * (RELAYCC_SHM_CMA_SLOW_NS), else staged): the route taken proves it. */
                if (rooted && (r % 2 || r == 4) && countsList[ci]) {
                  int want = r == 1 ? (A < NRANKS ? relayRouteRelay : relayRouteDirect)
                             : r == 4
                                 ? (G == 1 ? relayRouteBw : relayRouteDirect)
                                 : (G == 1 && counts[0] * relayTypeSize(dt) <= RELAY_ONESHOT_DEFAULT_MAX_BYTES
                                        ? relayRouteOneShot
                                        : relayRouteDirect);
                  int got = -1, depth = 0;
                  relayCommLastRoute(comms[r], &got, &depth);
                  T_CHECK(got == want, "%s: took route %s, want %s", tag, relayRouteName(got),
                          relayRouteName(want));
                }
              }
            }
          }
        }
      }
    }
  }
  for (int r = 0; r < nRoutes; r++) T_OK(relayCommDestroy(comms[r]));
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
  T_CHECK(tc_one_call(comm, rank, relayCollectiveAllReduce, 2, 1, ranks, counts, relayFloat32, relaySum, 0,
                      "after bad input") == 0,
          "comm unusable after a rejected call");
}

/* An all-reduce of 64 floats on the 4-rank layout `ranks` must fail on every
 * rank with relayInvalidArgument and an error that contains `text`. */
static void badLayout(relayComm_t comm, int rank, const float* send, float* recv, const int ranks[4],
                      const char* what, const char* text) {
  relayLayout_t L = {1, 4, ranks};
  size_t counts[1] = {64};
  relayResult_t res = relayAllReduce(send, recv, counts, relayFloat32, relaySum, &L, comm, NULL);
  expectAll(comm, rank, res, relayInvalidArgument, what);
  T_CHECK(strstr(relayGetLastError(comm), text) != NULL, "rank %d, %s: the error does not say \"%s\": %s",
          rank, what, text, relayGetLastError(comm));
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
  relayResult_t res =
      relayAllReduce(rank == 2 ? NULL : active, activeR, counts, relayFloat32, relaySum, &L, comm, NULL);
  expectAll(comm, rank, res, relayInvalidArgument, "NULL sendbuff on rank 2");
  T_CHECK(strstr(relayGetLastError(comm), "rank 2") != NULL, "rank %d: error does not name rank 2: %s", rank,
          relayGetLastError(comm));
  if (rank == 2)
    T_CHECK(strstr(relayGetLastError(comm), "sendbuff") != NULL, "error does not name sendbuff: %s",
            relayGetLastError(comm));
  /* count * A * size overflow */
  size_t huge[1] = {SIZE_MAX / 2};
  res = relayAllGather(active, activeR, huge, relayFloat32, &L, comm, NULL);
  expectAll(comm, rank, res, relayInvalidArgument, "count overflow");
  T_CHECK(strstr(relayGetLastError(comm), "counts[0]") != NULL,
          "rank %d: overflow error does not name counts[0]: %s", rank, relayGetLastError(comm));
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
  badLayout(comm, rank, active, activeR, rep2, "repeated rank (second layout)",
            "layout.ranks[0] and [3] both name rank 3");
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
  relayResult_t res = relayAllReduce(rank < 2 ? s : NULL, rank < 2 ? r : NULL, counts, relayFloat32, relaySum,
                                     &L, comm, NULL);
  double sec = (double)(relayNowNs() - t0) / 1e9;
  T_CHECK(sec < 10.0, "rank %d: mismatched call took %.1f s (deadline 3 s)", rank, sec);
  if (rank < 2) T_CHECK(res != relaySuccess, "rank %d: mismatched counts returned success", rank);
  relayCommDestroy(comm);
  free(s);
  free(r);
  return 0;
}

/* relayBarrier: a rank that arrives 300 ms late holds every other rank that long; a barrier between calls
 * leaves their lockstep alone (a call before and after it still runs); a NULL comm is a clear error. */
static int barrierRank(int rank, int nranks, void* arg) {
  (void)arg;
  relayComm_t comm = tc_comm_route(rank, nranks, "auto", 20000);
  int ranks[NRANKS] = {0, 1, 2, 3, 4, 5, 6, 7};
  size_t counts[1] = {1001};
  T_CHECK(tc_one_call(comm, rank, relayCollectiveAllReduce, NRANKS, 1, ranks, counts, relayFloat32, relaySum,
                      0, "before the barrier") == 0,
          "rank %d: all-reduce before the barrier", rank);
  if (rank == 3) {
    struct timespec ts = {0, 300 * 1000000};
    nanosleep(&ts, NULL);
  }
  uint64_t t0 = relayNowNs();
  T_OK(relayBarrier(comm, NULL));
  double ms = (double)(relayNowNs() - t0) / 1e6;
  if (rank != 3)
    T_CHECK(ms >= 200, "rank %d: left the barrier after %.0f ms, before rank 3 arrived", rank, ms);
  T_OK(relayBarrier(comm, NULL)); /* twice in a row: each its own round */
  T_CHECK(tc_one_call_root(comm, rank, relayCollectiveBroadcast, NRANKS, 1, ranks, counts, relayInt32,
                           relaySum, 5, 0, "after the barrier") == 0,
          "rank %d: broadcast after the barrier", rank);
  relayResult_t res = relayBarrier(NULL, NULL);
  T_CHECK(res == relayInvalidArgument, "relayBarrier(NULL): %s", relayGetErrorString(res));
  T_OK(relayCommDestroy(comm));
  return 0;
}

/* Broadcast and reduce rejected on one rank (or on all): every rank returns the error, in check mode 1 and
 * 0 (shm agrees on a rooted call's shape before anything moves), nothing is written to any output, and
 * the comm stays usable. Layout: 2 groups of 3, {0,1,2} and {4,5,6}; ranks 3 and 7 help. */
static int badRootedRank(int rank, int nranks, void* arg) {
  int checkMode = *(const int*)arg;
  relayConfig_t cfg = RELAY_CONFIG_INITIALIZER;
  cfg.checkMode = checkMode;
  cfg.timeoutMs = 20000;
  relayComm_t comm = t_comm(rank, nranks, &cfg);
  const int ranks[6] = {0, 1, 2, 4, 5, 6};
  relayLayout_t L = {2, 3, ranks};
  size_t counts[2] = {64, 65};
  int active = rank != 3 && rank != 7;
  float s[65], r[65];
  for (int i = 0; i < 65; i++) s[i] = (float)(rank * 100 + i + 1);
  memset(r, POISON, sizeof r);
  const float* sp = active ? s : NULL;
  float* rp = active ? r : NULL;
  struct {
    const char* what;
    relayResult_t want;
    const char* text; /* in every rank's error */
  } cases[] = {
      {"rootIndex 3 of 3 on every rank", relayInvalidArgument, "rootIndex = 3 is not in [0, 3)"},
      {"rootIndex 7 on rank 4 only", relayInvalidArgument, "rootIndex = 7"},
      {"rootIndex 1 on rank 5, 0 elsewhere", relayInvalidUsage, "root"},
      {"NULL sendbuff on the broadcast root (rank 1)", relayInvalidArgument, "sendbuff is NULL (the root"},
      {"NULL recvbuff on the reduce root (rank 5)", relayInvalidArgument, "recvbuff is NULL (the root"},
      {"relayCallReject on rank 6 (reduce)", relayInvalidArgument, "rank 6 says no"},
  };
  for (int c = 0; c < (int)(sizeof cases / sizeof cases[0]); c++) {
    relayResult_t res;
    switch (c) {
      case 0: res = relayBroadcast(sp, rp, counts, relayFloat32, 3, &L, comm, NULL); break;
      case 1:
        res = relayReduce(sp, rp, counts, relayFloat32, relaySum, rank == 4 ? 7 : 0, &L, comm, NULL);
        break;
      case 2: res = relayBroadcast(sp, rp, counts, relayFloat32, rank == 5 ? 1 : 0, &L, comm, NULL); break;
      case 3: res = relayBroadcast(rank == 1 ? NULL : sp, rp, counts, relayFloat32, 1, &L, comm, NULL); break;
      case 4:
        res = relayReduce(sp, rank == 5 ? NULL : rp, counts, relayFloat32, relayMax, 1, &L, comm, NULL);
        break;
      default:
        res = rank == 6 ? relayCallReject(relayCollectiveReduce, counts, relayFloat32, relaySum, &L, 2,
                                          "rank 6 says no", comm, NULL)
                        : relayReduce(sp, rp, counts, relayFloat32, relaySum, 2, &L, comm, NULL);
        break;
    }
    /* A rank's own argument error names the argument; its peers name the rank and quote it. */
    T_CHECK(res == cases[c].want, "rank %d, check mode %d, %s: got %s, want %s (%s)", rank, checkMode,
            cases[c].what, relayGetErrorString(res), relayGetErrorString(cases[c].want),
            relayGetLastError(comm));
    T_CHECK(strstr(relayGetLastError(comm), cases[c].text) != NULL,
            "rank %d, check mode %d, %s: the error does not say \"%s\": %s", rank, checkMode, cases[c].what,
            cases[c].text, relayGetLastError(comm));
    for (size_t i = 0; i < sizeof r; i++)
      T_CHECK(((unsigned char*)r)[i] == POISON, "rank %d, %s: rejected call wrote recv byte %zu", rank,
              cases[c].what, i);
    for (int i = 0; i < 65; i++)
      T_CHECK(s[i] == (float)(rank * 100 + i + 1), "rank %d, %s: rejected call wrote send %d", rank,
              cases[c].what, i);
  }
  T_CHECK(tc_one_call_root(comm, rank, relayCollectiveReduce, 3, 2, ranks, counts, relayFloat32, relaySum, 2,
                           0, "after the rejections") == 0,
          "rank %d: comm unusable after rejected calls", rank);
  T_OK(relayCommDestroy(comm));
  return 0;
}

/* ---- a rooted call whose shape differs on one rank (check mode 0) --------- */

/* The row's rooted floor (RELAYCC_SHM_CMA_ROOTED_BYTES): a bw broadcast of floats at A actives takes the
 * one copy from ceil(4096 / (4 (A - 1))) elements (1024, 512, 342 at A = 2, 3, 4), so counts around it put
 * one rank on one side of it and its peers on the other. */
#define MIS_FLOOR_BYTES 4096
#define MIS_DEADLINE_MS 20000
#define MIS_BOUND_S 3.0 /* far below the deadline: the promise is "at once", not "by the deadline" */

enum { MIS_COUNT, MIS_DTYPE, MIS_ROOT, MIS_OP };
/* One rank's call differs from its peers' in one field: the counts (the peers' base count and the odd
 * rank's, each mul x fc / div + add, fc the floor count at the call's A), the datatype, the root position
 * (the odd rank names the next one) or the op (reduce only: max where its peers sum). */
typedef struct {
  const char* what;
  int field;
  int baseMul, baseAdd;
  int oddMul, oddDiv, oddAdd;
  relayDataType_t oddDt; /* MIS_DTYPE */
} misRow;
static const misRow kMisRows[] = {
    {"below the floor, one rank at it (its count alone one copy)", MIS_COUNT, 1, -1, 1, 1, 0, 0},
    {"at the floor, one rank one below (its count alone staged)", MIS_COUNT, 1, 0, 1, 1, -1, 0},
    {"above the floor, one rank twice the count", MIS_COUNT, 2, 3, 4, 1, 6, 0},
    {"above the floor, one rank fewer, still above", MIS_COUNT, 2, 3, 1, 1, 1, 0},
    {"below the floor, one rank half the count", MIS_COUNT, 1, -1, 1, 2, 0, 0},
    {"below the floor, one rank far above it", MIS_COUNT, 0, 7, 3, 1, 0, 0},
    {"above the floor, one rank far below it", MIS_COUNT, 3, 0, 0, 1, 7, 0},
    {"one rank passes count 0", MIS_COUNT, 1, 5, 0, 1, 0, 0},
    {"one rank says int32 (the same element size)", MIS_DTYPE, 1, 1, 0, 1, 0, relayInt32},
    {"one rank says bfloat16 (half the bytes)", MIS_DTYPE, 2, 0, 0, 1, 0, relayBfloat16},
    {"one rank names another root, above the floor", MIS_ROOT, 2, 1, 0, 1, 0, 0},
    {"one rank names another root, below the floor", MIS_ROOT, 1, -1, 0, 1, 0, 0},
    {"one rank says max, its peers sum", MIS_OP, 1, 1, 0, 1, 0, 0},
};
static const char* const kMisField[] = {"counts", "datatype", "root", "op"};

/* Every rank (helpers too: a rooted call's agreement round is every rank's) makes one call of coll on
 * `ranks` (A actives, root position `root`) on comm; rank oddRank passes the row's other field (count: odd).
 * Every rank's call must fail within MIS_BOUND_S with relayInvalidUsage naming rank 0 and the first rank
 * whose digest differs from rank 0's and the field, and leave every buffer it was given as it was (each
 * rank's buffers hold exactly its own count, so a rank that moved a peer's count would write past them:
 * ASan). Returns the call's seconds. */
static double misCall(relayComm_t comm, int rank, relayCollective_t coll, int A, const int* ranks, int root,
                      int inPlace, const misRow* row, size_t base, size_t odd, int oddRank, const char* tag) {
  int me = rank == oddRank;
  size_t count = me && row->field == MIS_COUNT ? odd : base;
  relayDataType_t dt = relayFloat32;
  if (me && row->field == MIS_DTYPE) dt = row->oddDt;
  relayRedOp_t op = me && row->field == MIS_OP ? relayMax : relaySum;
  int rootArg = me && row->field == MIS_ROOT ? (root + 1) % A : root;
  size_t bytes = count * relayTypeSize(dt);
  unsigned char* s = malloc(bytes ? bytes : 1);
  unsigned char* r = inPlace ? s : malloc(bytes ? bytes : 1);
  unsigned char* s0 = malloc(bytes ? bytes : 1);
  unsigned char* r0 = malloc(bytes ? bytes : 1);
  T_CHECK(s && r && s0 && r0, "rank %d: out of memory", rank);
  int pos = -1;
  for (int i = 0; i < A; i++)
    if (ranks[i] == rank) pos = i;
  /* The pattern of active pos (a helper: of position A), the recv poisoned (in place: the input). */
  tc_fill_input(coll, dt, op, A + 1, pos >= 0 ? pos : A, count, s);
  if (!inPlace) memset(r, TC_POISON, bytes);
  memcpy(s0, s, bytes);
  memcpy(r0, r, bytes);
  relayLayout_t L = {1, A, ranks};
  uint64_t t0 = relayNowNs();
  relayResult_t res = tc_run_root(coll, s, r, &count, dt, op, rootArg, &L, comm);
  double sec = (double)(relayNowNs() - t0) / 1e9;
  const char* e = relayGetLastError(comm);
  T_CHECK(res != relaySuccess, "rank %d, %s: the call succeeded (rank %d's %s differs)", rank, tag, oddRank,
          kMisField[row->field]);
  T_CHECK(sec < MIS_BOUND_S, "rank %d, %s: failed after %.2f s (deadline %.0f s, want < %.1f s): %s", rank,
          tag, sec, MIS_DEADLINE_MS / 1e3, MIS_BOUND_S, e);
  char want[96];
  snprintf(want, sizeof want, "ranks 0 and %d disagree on the %s", oddRank ? oddRank : 1,
           kMisField[row->field]);
  T_CHECK(res == relayInvalidUsage && strstr(e, want),
          "rank %d, %s: %s, want relayInvalidUsage saying \"%s\" (%s)", rank, tag, relayGetErrorString(res),
          want, e);
  T_CHECK(memcmp(s, s0, bytes) == 0, "rank %d, %s: the failed call changed its sendbuff", rank, tag);
  T_CHECK(memcmp(r, r0, bytes) == 0, "rank %d, %s: the failed call wrote its recvbuff", rank, tag);
  if (!inPlace) free(r);
  free(s);
  free(s0);
  free(r0);
  return sec;
}

/* The comm of a mismatch case: route forced (or auto), check mode 0 as the case's environment sets it. */
static relayComm_t misComm(int rank, int nranks, const char* route) {
  relayComm_t comm = tc_comm_route(rank, nranks, route, MIS_DEADLINE_MS);
  T_CHECK(comm->cfg.checkMode == 0, "rank %d: check mode %d, want 0 (RELAYCC_CHECK=0)", rank,
          comm->cfg.checkMode);
  return comm;
}

/* After a misCall: the comm is not failed and the same call with one shape (base count) is right on every
 * active; it took route want (-1: any), and on bw the path its floor says (the one copy for a broadcast of
 * (A - 1) x base floats from MIS_FLOOR_BYTES on). */
static void misAfter(relayComm_t comm, int rank, relayCollective_t coll, int A, const int* ranks, size_t base,
                     int root, int inPlace, int want, const char* tag) {
  T_CHECK(!comm->failed, "rank %d, %s: the comm is failed after a rejected shape", rank, tag);
  char after[300];
  snprintf(after, sizeof after, "after %s", tag);
  T_CHECK(tc_one_call_root(comm, rank, coll, A, 1, ranks, &base, relayFloat32, relaySum, root, inPlace,
                           after) == 0,
          "rank %d, %s: wrong", rank, after);
  int got = -1, depth = 0;
  relayCommLastRoute(comm, &got, &depth);
  T_CHECK(want < 0 || got == want, "rank %d, %s: took route %s", rank, after, relayRouteName(got));
  int active = 0;
  for (int i = 0; i < A; i++) active |= ranks[i] == rank;
  if (got == relayRouteBw && active) {
    int one = coll == relayCollectiveBroadcast && base * 4 * (size_t)(A - 1) >= MIS_FLOOR_BYTES;
    T_CHECK((comm->last.window == UINT32_MAX) == one, "rank %d, %s: %s path, want %s", rank, after,
            comm->last.window == UINT32_MAX ? "one-copy" : "staged", one ? "one-copy" : "staged");
  }
}

/* For broadcast and reduce on every shm route that serves them (forced), at A = 2, 3, 4 with the root
 * moving, in and out of place: one rank's call differs (kMisRows; the odd rank is in turn the root, a
 * member, a helper and rank 0) in check mode 0, where shm agrees on a rooted call's shape first (api.c):
 * every rank fails at once, nothing written, and the comm stays usable: the next call, with one shape,
 * runs on the forced route against the serial reference (bw: the one copy where its floor says). */
static int mismatchRootedRank(int rank, int nranks, void* arg) {
  (void)arg;
  static const char* const routes[] = {"direct", "relay", "oneshot", "bw"};
  static const int routeIds[] = {relayRouteDirect, relayRouteRelay, relayRouteOneShot, relayRouteBw};
  for (int ri = 0; ri < 4; ri++) {
    relayComm_t comm = misComm(rank, nranks, routes[ri]);
    double slowest = 0;
    int nFailed = 0;
    for (int ci = 0; ci < 2; ci++) {
      relayCollective_t coll = ci ? relayCollectiveReduce : relayCollectiveBroadcast;
      for (int A = 2; A <= 4; A++) {
        /* Permuted actives (2, 5, 0, 3): rank 0 a helper at A = 2, a member above; rank 7 always a helper. */
        int ranks[4];
        for (int i = 0; i < A; i++) ranks[i] = (i * 3 + 2) % NRANKS;
        size_t fc = (MIS_FLOOR_BYTES + 4 * (size_t)(A - 1) - 1) / (4 * (size_t)(A - 1));
        for (int v = 0; v < (int)(sizeof kMisRows / sizeof kMisRows[0]); v++) {
          const misRow* row = &kMisRows[v];
          if (row->field == MIS_OP && coll != relayCollectiveReduce) continue;
          int root = (v + A) % A, inPlace = (v / 2) % 2;
          int who = (v + A) % 4;
          int oddRank = who == 0 ? ranks[root] : who == 1 ? ranks[(root + 1) % A] : who == 2 ? 7 : 0;
          size_t base = (size_t)((long)row->baseMul * (long)fc + row->baseAdd);
          size_t odd = (size_t)((long)row->oddMul * (long)fc / row->oddDiv + row->oddAdd);
          char tag[256];
          snprintf(tag, sizeof tag, "route %s, %s A=%d root=%d%s: %s, base count %zu, rank %d's %zu",
                   routes[ri], relayCollName(coll), A, root, inPlace ? " in place" : "", row->what, base,
                   oddRank, odd);
          double sec = misCall(comm, rank, coll, A, ranks, root, inPlace, row, base, odd, oddRank, tag);
          if (sec > slowest) slowest = sec;
          nFailed++;
          /* Usable: the same call with one shape, on the forced route (every route here serves one group
           * of up to 4 of 8 ranks at these counts), on bw the path its floor says, which puts each row's
           * base count on the side of the floor the row names. */
          misAfter(comm, rank, coll, A, ranks, base, root, inPlace, routeIds[ri], tag);
        }
      }
    }
    printf("rooted mismatch, route %s: rank %d: %d calls failed, slowest after %.2f ms\n", routes[ri], rank,
           nFailed, slowest * 1e3);
    T_OK(relayCommDestroy(comm));
  }
  return 0;
}

/* 2 ranks, check mode 0, a broadcast at the pair floor (the one copy whose entry is the call's agreement),
 * the root at position root of ranks: one rank rejects it (bad 0: the root's sendbuff NULL; 1: the
 * member's recvbuff NULL; 2: relayCallReject on the member). Every rank fails within MIS_BOUND_S with the
 * rejection's error, nothing written, and the next call is right. */
static void pairReject(relayComm_t comm, int rank, const int* ranks, int root, int bad, const char* route) {
  static const char* const texts[] = {"sendbuff is NULL (the root", "recvbuff is NULL", "the member says no"};
  size_t count = MIS_FLOOR_BYTES / 4;
  float s[MIS_FLOOR_BYTES / 4], r[MIS_FLOOR_BYTES / 4];
  for (size_t i = 0; i < count; i++) s[i] = (float)(rank * 10000 + (int)i + 1);
  memset(r, TC_POISON, sizeof r);
  int isRoot = ranks[root] == rank;
  relayLayout_t L = {1, 2, ranks};
  uint64_t t0 = relayNowNs();
  relayResult_t res = bad == 2 && !isRoot
                          ? relayCallReject(relayCollectiveBroadcast, &count, relayFloat32, relaySum, &L,
                                            root, "the member says no", comm, NULL)
                          : relayBroadcast(bad == 0 && isRoot ? NULL : s, bad == 1 && !isRoot ? NULL : r,
                                           &count, relayFloat32, root, &L, comm, NULL);
  double sec = (double)(relayNowNs() - t0) / 1e9;
  const char* e = relayGetLastError(comm);
  T_CHECK(res == relayInvalidArgument && strstr(e, texts[bad]),
          "rank %d, route %s, root %d, rejection %d: %s, want relayInvalidArgument saying \"%s\" (%s)", rank,
          route, root, bad, relayGetErrorString(res), texts[bad], e);
  T_CHECK(sec < MIS_BOUND_S, "rank %d, route %s, root %d, rejection %d: failed after %.2f s", rank, route,
          root, bad, sec);
  for (size_t i = 0; i < count; i++) {
    T_CHECK(s[i] == (float)(rank * 10000 + (int)i + 1), "rank %d, rejection %d: send %zu written", rank, bad,
            i);
    T_CHECK(((unsigned char*)r)[i * 4] == TC_POISON, "rank %d, rejection %d: recv %zu written", rank, bad, i);
  }
  char tag[160];
  snprintf(tag, sizeof tag, "route %s, root %d, rejection %d", route, root, bad);
  misAfter(comm, rank, relayCollectiveBroadcast, 2, ranks, count, root, 0, -1, tag);
}

/* A comm of 2 ranks, both active, in check mode 0: the one-copy broadcast's entry is the call's agreement
 * (api.c agreeOnShape carries the root's send; bw.c bwEntryAgreed skips the entry round), so only that
 * agreement stands between a disagreement and a read of the wrong bytes. Broadcast and reduce, on the
 * router's route and on bw forced, the actives in both orders, the root at either position, the odd call
 * (kMisRows: counts across the 4 KiB pair floor, datatype, the root in both directions, op) on either rank:
 * every rank fails at once naming the field, nothing written, and the next call with one shape is right
 * (on bw, the one copy from the floor on); then one rank's rejection of such a broadcast (pairReject). */
static int mismatchPairRank(int rank, int nranks, void* arg) {
  (void)arg;
  static const char* const routes[] = {"auto", "bw"};
  for (int ri = 0; ri < 2; ri++) {
    relayComm_t comm = misComm(rank, nranks, routes[ri]);
    double slowest = 0;
    int nFailed = 0;
    const size_t fc = MIS_FLOOR_BYTES / 4; /* floats at the pair floor */
    for (int ci = 0; ci < 2; ci++) {
      relayCollective_t coll = ci ? relayCollectiveReduce : relayCollectiveBroadcast;
      for (int v = 0; v < (int)(sizeof kMisRows / sizeof kMisRows[0]); v++) {
        const misRow* row = &kMisRows[v];
        if (row->field == MIS_OP && coll != relayCollectiveReduce) continue;
        int ranks[2] = {v % 2, 1 - v % 2};
        size_t base = (size_t)((long)row->baseMul * (long)fc + row->baseAdd);
        size_t odd = (size_t)((long)row->oddMul * (long)fc / row->oddDiv + row->oddAdd);
        for (int root = 0; root < 2; root++)
          for (int oddRank = 0; oddRank < 2; oddRank++) {
            int inPlace = (v + root + oddRank) % 2;
            char tag[256];
            snprintf(tag, sizeof tag,
                     "route %s, %s on ranks %d,%d root=%d%s: %s, base count %zu, rank %d's %zu", routes[ri],
                     relayCollName(coll), ranks[0], ranks[1], root, inPlace ? " in place" : "", row->what,
                     base, oddRank, odd);
            double sec = misCall(comm, rank, coll, 2, ranks, root, inPlace, row, base, odd, oddRank, tag);
            if (sec > slowest) slowest = sec;
            nFailed++;
            misAfter(comm, rank, coll, 2, ranks, base, root, inPlace, ri ? relayRouteBw : -1, tag);
          }
      }
    }
    for (int root = 0; root < 2; root++)
      for (int bad = 0; bad < 3; bad++)
        pairReject(comm, rank, (const int[2]){bad % 2, 1 - bad % 2}, root, bad, routes[ri]);
    printf("pair mismatch, route %s: rank %d: %d calls failed, slowest after %.2f ms\n", routes[ri], rank,
           nFailed, slowest * 1e3);
    T_OK(relayCommDestroy(comm));
  }
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

/* A killed-rank case: the collective, and for broadcast and reduce on a route of their own a group of 4
 * with rank 5 in it and helpers beside it (A 0: the whole comm, 2^20 floats, the comm's route). */
typedef struct {
  relayCollective_t coll;
  int A;
  size_t count;
  relayRoute_t route;
} killedArg;

static int killedRank(int rank, int nranks, void* arg) {
  const killedArg* ka = arg;
  relayCollective_t coll = ka ? ka->coll : relayCollectiveAllToAll;
  relayConfig_t cfg = RELAY_CONFIG_INITIALIZER;
  cfg.timeoutMs = 8000;
  if (ka && ka->A) cfg.route = ka->route;
  relayComm_t comm = t_comm(rank, nranks, &cfg);
  int ranks[8] = {0, 1, 2, 3, 4, 5, 6, 7}, four[4] = {2, 5, 0, 7};
  relayLayout_t L = {1, 8, ranks};
  size_t counts[1] = {1u << 20};
  if (ka && ka->A) {
    L = (relayLayout_t){1, ka->A, four};
    counts[0] = ka->count;
  }
  float* s = calloc(8u << 20, sizeof(float));
  float* r = calloc(8u << 20, sizeof(float));
  T_CHECK(s && r, "oom");
  /* One call before the killer starts: the route's setup (the one-shot's region: tens of ms for 8 ranks) is
   * done, so the rank dies inside the route's data path, not in its setup's vote. */
  if (ka && ka->A) T_OK(tc_run_root(coll, s, r, counts, relayFloat32, relaySum, 2, &L, comm));
  T_OK(relayCommBarrier(comm));
  pthread_t th;
  if (rank == 5) pthread_create(&th, NULL, killer, NULL);
  uint64_t t0 = relayNowNs();
  relayResult_t res = relaySuccess;
  /* 1000 calls of 4 MiB, or small calls until the kill (30 ms in) shows, within 15 s */
  int ran = -1, depth = 0, done = 0; /* the route of the last call that succeeded */
  for (int i = 0; (ka && ka->A ? relayNowNs() - t0 < 15000000000ull : i < 1000) && res == relaySuccess; i++) {
    res = coll == relayCollectiveAllToAll
              ? relayAllToAll(s, r, counts, relayFloat32, &L, comm, NULL)
              : tc_run_root(coll, s, r, counts, relayFloat32, relaySum, 2, &L, comm);
    if (res == relaySuccess) relayCommLastRoute(comm, &ran, &depth), done++;
  }
  double sec = (double)(relayNowNs() - t0) / 1e9;
  T_CHECK(rank != 5, "rank 5 outlived its killer");
  T_CHECK(res == relayRemoteError || res == relayTimeout, "rank %d: got %s after a peer died", rank,
          relayGetErrorString(res));
  /* the route under test ran before the kill (a call done: the region's setup may outlast the 30 ms) */
  if (ka && ka->A && done)
    T_CHECK(ran == (int)ka->route, "rank %d: %d calls on route %s, want %s", rank, done, relayRouteName(ran),
            relayRouteName(ka->route));
  T_CHECK(sec < 20.0, "rank %d: took %.1f s to notice", rank, sec);
  printf("rank %d: %s after %.2f s and %d calls on route %s: %s\n", rank, relayGetErrorString(res), sec, done,
         relayRouteName(ran), relayGetLastError(comm));
  relayCommDestroy(comm);
  return 0;
}

static int runKilledColl(const killedArg* ka) {
  int codes[NRANKS];
  t_launch(NRANKS, killedRank, (void*)ka, 60, 30000, codes);
  for (int r = 0; r < NRANKS; r++) {
    if (r == 5) T_CHECK(codes[r] == -SIGKILL, "rank 5 exit %d, want -SIGKILL", codes[r]);
    else T_CHECK(codes[r] == 0, "survivor rank %d exit code %d", r, codes[r]);
  }
  return 0;
}

static int runKilled(void) { return runKilledColl(NULL); }
/* Rank 5 dies while rank 2 broadcasts to it (and reduces from it) in 8-rank calls. */
static int runKilledBroadcast(void) {
  static const killedArg a = {relayCollectiveBroadcast, 0, 0, relayRouteAuto};
  return runKilledColl(&a);
}
static int runKilledReduce(void) {
  static const killedArg a = {relayCollectiveReduce, 0, 0, relayRouteAuto};
  return runKilledColl(&a);
}
/* Rank 5 dies inside the relay (A = 4: reduce-scatter then gather) and the rooted one-shot. */
static int runKilledReduceRelay(void) {
  static const killedArg a = {relayCollectiveReduce, 4, 1u << 18, relayRouteRelay};
  return runKilledColl(&a);
}
static int runKilledReduceOneShot(void) {
  static const killedArg a = {relayCollectiveReduce, 4, 1024, relayRouteOneShot};
  return runKilledColl(&a);
}
static int runKilledBroadcastOneShot(void) {
  static const killedArg a = {relayCollectiveBroadcast, 4, 1024, relayRouteOneShot};
  return runKilledColl(&a);
}

/* Every collective, A = 2 and 4, independent and fused, odd counts up to 2^20+3, in and out of place;
 * full: every dtype and op. */
#define SWEEP(nm, c, full)                                                                         \
  {                                                                                                \
    .name = nm, .rank = sweepRank, .arg = &(sweepArg){c, full}, .ranks = NRANKS, .deadlineS = 540, \
    .timeoutS = 600                                                                                \
  }
/* The relay forced to depth 8: independent calls run 9-step pipelines where the count allows (2^20+3),
 * clamp where it does not (7, 1000), and fused calls keep the two-group form. */
#define SWEEP_DEPTH8(nm, c, test)                                                               \
  {                                                                                             \
    .name = nm, .rank = sweepRank, .arg = &(sweepArg){c, 0}, .ranks = NRANKS, .deadlineS = 540, \
    .timeoutS = 600, .env = "RELAYCC_DEPTH=8", .ctest = test                                    \
  }

/* Broadcast and reduce in check mode 0 (shm still agrees on a rooted call's shape: the data path is the
 * same as check mode 1's, the agreement is not). */
#define SWEEP_CHECK0(nm, c, test)                                                               \
  {                                                                                             \
    .name = nm, .rank = sweepRank, .arg = &(sweepArg){c, 0}, .ranks = NRANKS, .deadlineS = 540, \
    .timeoutS = 600, .env = "RELAYCC_CHECK=0", .ctest = test                                    \
  }

static const tCase kCases[] = {
    SWEEP("allgather", relayCollectiveAllGather, 0),
    SWEEP("reducescatter", relayCollectiveReduceScatter, 0),
    SWEEP("allreduce", relayCollectiveAllReduce, 0),
    SWEEP("alltoall", relayCollectiveAllToAll, 0),
    SWEEP("full-allgather", relayCollectiveAllGather, 1),
    SWEEP("full-reducescatter", relayCollectiveReduceScatter, 1),
    SWEEP("full-allreduce", relayCollectiveAllReduce, 1),
    SWEEP("full-alltoall", relayCollectiveAllToAll, 1),
    SWEEP("broadcast", relayCollectiveBroadcast, 0),
    SWEEP("reduce", relayCollectiveReduce, 0),
    SWEEP("full-broadcast", relayCollectiveBroadcast, 1),
    SWEEP("full-reduce", relayCollectiveReduce, 1),
    SWEEP_CHECK0("check0-broadcast", relayCollectiveBroadcast, "colls_check0_broadcast"),
    SWEEP_CHECK0("check0-reduce", relayCollectiveReduce, "colls_check0_reduce"),
    {.name = "badinput", .rank = badInputRank, .ranks = NRANKS, .deadlineS = 120, .timeoutS = 600},
    {.name = "mismatch-nocheck",
     .rank = mismatchNoCheckRank,
     .ranks = NRANKS,
     .deadlineS = 60,
     .timeoutS = 600},
    {.name = "killed", .fn = runKilled, .timeoutS = 600},
    {.name = "killed-broadcast", .fn = runKilledBroadcast, .timeoutS = 600},
    {.name = "killed-reduce", .fn = runKilledReduce, .timeoutS = 600},
    {.name = "killed-reduce-relay", .fn = runKilledReduceRelay, .timeoutS = 600},
    {.name = "killed-reduce-oneshot", .fn = runKilledReduceOneShot, .timeoutS = 600},
    {.name = "killed-broadcast-oneshot", .fn = runKilledBroadcastOneShot, .timeoutS = 600},
    {.name = "badinput-rooted",
     .rank = badRootedRank,
     .arg = &(int){1},
     .ranks = NRANKS,
     .deadlineS = 120,
     .timeoutS = 300},
    {.name = "badinput-rooted-check0",
     .rank = badRootedRank,
     .arg = &(int){0},
     .ranks = NRANKS,
     .deadlineS = 120,
     .timeoutS = 300},
    /* Check mode 0, the rooted floor at 4 KiB (MIS_FLOOR_BYTES): the bw broadcast's one copy within reach
     * (its floor alone decides, whatever a read costs on this host: RELAYCC_SHM_CMA_SLOW_NS=0). */
    {.name = "mismatch-rooted-check0",
     .rank = mismatchRootedRank,
     .ranks = NRANKS,
     .deadlineS = 120,
     .timeoutS = 300,
     .env = "RELAYCC_CHECK=0;RELAYCC_SHM_CMA_ROOTED_BYTES=4096;RELAYCC_SHM_CMA_SLOW_NS=0"},
    /* 2 ranks, check mode 0: the one-copy broadcast whose entry is the call's agreement (bwEntryAgreed). */
    {.name = "mismatch-pair-check0",
     .rank = mismatchPairRank,
     .ranks = 2,
     .deadlineS = 120,
     .timeoutS = 300,
     .env = "RELAYCC_CHECK=0;RELAYCC_SHM_CMA_SLOW_NS=0"},
    {.name = "barrier", .rank = barrierRank, .ranks = NRANKS, .deadlineS = 60, .timeoutS = 120},
    SWEEP_DEPTH8("depth8-allgather", relayCollectiveAllGather, "depth_colls_depth8_allgather"),
    SWEEP_DEPTH8("depth8-reducescatter", relayCollectiveReduceScatter, "depth_colls_depth8_reducescatter"),
    SWEEP_DEPTH8("depth8-allreduce", relayCollectiveAllReduce, "depth_colls_depth8_allreduce"),
    SWEEP_DEPTH8("depth8-alltoall", relayCollectiveAllToAll, "depth_colls_depth8_alltoall"),
    /* A = 2 broadcast and reduce pipeline (the relay copy and its mirror); A > 2 keeps two and three steps.
     */
    SWEEP_DEPTH8("depth8-broadcast", relayCollectiveBroadcast, "depth_colls_depth8_broadcast"),
    SWEEP_DEPTH8("depth8-reduce", relayCollectiveReduce, "depth_colls_depth8_reduce"),
};

int main(int argc, char** argv) { return t_main(argc, argv, "colls", kCases, T_NCASES(kCases)); }
