/* Error prefixes (issue 16): every error of a comm reads "<function> (rank R, call #N, step S): what",
 * built once by relaySetError from the comm's state; a site writes only what happened, so no message
 * says its own rank twice. Errors before a comm exists name the init in their text. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "comm/comm.h"
#include "comm/common.h"
#include "harness.h"

#define NRANKS 4
#define COUNT 1024
#define POISON 0xEE

/* How often the message gives rank R as its own, in any style a site ever
 * wrote: "(rank R" (the prefix; api.c's and the NCCL transport's old
 * "%s (rank %d...") and "rank R:" (shm's old "rank %d: step %d of call
 * #%llu:"). "rank 1 rejected", "name rank 1 (" are about rank 1, not
 * by it, and "rank 12" is not rank 1. */
static int ownRankCount(const char* msg, int rank) {
  char a[32], b[32];
  snprintf(a, sizeof a, "(rank %d", rank);
  snprintf(b, sizeof b, "rank %d:", rank);
  int n = 0;
  for (const char* p = msg; (p = strstr(p, a)); p++) n += p[strlen(a)] == ')' || p[strlen(a)] == ',';
  for (const char* p = msg; (p = strstr(p, b)); p++) n += p == msg || p[-1] == ' ' || p[-1] == '(';
  return n;
}

static int countOf(const char* msg, const char* what) {
  int n = 0;
  for (const char* p = msg; (p = strstr(p, what)); p++) n++;
  return n;
}

/* The message starts with want (the whole prefix) and says this rank once. */
static void expectPrefix(int rank, const char* tag, const char* msg, const char* want) {
  T_CHECK(strncmp(msg, want, strlen(want)) == 0,
          "rank %d, %s: the message is\n  \"%s\"\nwant it to start with\n  \"%s\"", rank, tag, msg, want);
  T_CHECK(ownRankCount(msg, rank) == 1, "rank %d, %s: the message gives this rank %d times: %s", rank, tag,
          ownRankCount(msg, rank), msg);
}

/* The whole message is want: one call number, the rank once (rank < 0: no comm, so no prefix). */
static void expectExact(int rank, const char* tag, const char* msg, const char* want) {
  T_CHECK(strcmp(msg, want) == 0, "rank %d, %s: the message is\n  \"%s\"\nwant\n  \"%s\"", rank, tag, msg,
          want);
  T_CHECK(rank < 0 ? strstr(msg, "(rank") == NULL : ownRankCount(msg, rank) == 1,
          "rank %d, %s: the rank twice (or a rank without a comm): %s", rank, tag, msg);
  T_CHECK(countOf(msg, "call #") <= 1, "rank %d, %s: the call number twice: %s", rank, tag, msg);
}

/* A comm of this test: shm, 20 s deadline (no wait here comes near it), check mode and route as given. */
static relayComm_t errorsComm(int rank, int nranks, int checkMode, int route) {
  relayConfig_t cfg = RELAY_CONFIG_INITIALIZER;
  cfg.timeoutMs = 20000;
  cfg.checkMode = checkMode;
  cfg.route = route;
  return t_comm(rank, nranks, &cfg);
}

/* One all-reduce's arguments over every rank: send[i] = rank * 100000 + i, recv poisoned. */
typedef struct {
  int ranks[NRANKS];
  relayLayout_t lay;
  size_t counts[1];
  float send[COUNT], recv[COUNT];
} callArgs;

static void argsInit(callArgs* a, int rank) {
  for (int q = 0; q < NRANKS; q++) a->ranks[q] = q;
  a->lay = (relayLayout_t){1, NRANKS, a->ranks};
  a->counts[0] = COUNT;
  for (int i = 0; i < COUNT; i++) a->send[i] = (float)(rank * 100000 + i);
  memset(a->recv, POISON, sizeof a->recv);
}

/* A rejected call writes nothing. */
static void expectUntouched(int rank, const char* tag, const callArgs* a) {
  for (size_t i = 0; i < sizeof a->recv; i++)
    T_CHECK(((const unsigned char*)a->recv)[i] == POISON, "rank %d, %s: a rejected call wrote recv byte %zu",
            rank, tag, i);
}

/* A valid all-reduce over every rank: send[i] = (rank + 1) * 1000 + i % 251, so the sum is
 * 10000 + 4 * (i % 251) at 4 ranks; recv poisoned first. */
static void validCall(relayComm_t c, int rank, const char* tag) {
  int ranks[NRANKS] = {0, 1, 2, 3};
  relayLayout_t lay = {1, NRANKS, ranks};
  size_t counts[1] = {COUNT};
  float send[COUNT], recv[COUNT];
  for (int i = 0; i < COUNT; i++) send[i] = (float)((rank + 1) * 1000 + i % 251);
  memset(recv, POISON, sizeof recv);
  relayResult_t r = relayAllReduce(send, recv, counts, relayFloat32, relaySum, &lay, c, NULL);
  T_CHECK(r == relaySuccess, "rank %d, %s: %s (%s)", rank, tag, relayGetErrorString(r), relayGetLastError(c));
  for (int i = 0; i < COUNT; i++)
    T_CHECK(recv[i] == (float)(10000 + NRANKS * (i % 251)), "rank %d, %s: element %d = %g, want %g", rank,
            tag, i, recv[i], (double)(10000 + NRANKS * (i % 251)));
}

/* Argument errors on a shm comm (check mode 0, every rank alike): the call's name, the rank, the call
 * number (every call counts, rejected ones too), never a step (none ran); nothing written. */
static int rankCalls(int rank, int nranks, void* arg) {
  (void)arg;
  relayComm_t c = errorsComm(rank, nranks, 0, relayRouteAuto);
  callArgs a;
  argsInit(&a, rank);
  char want[512];

  relayResult_t r = relayAllReduce(a.send, a.recv, NULL, relayFloat32, relaySum, &a.lay, c, NULL);
  T_CHECK(r == relayInvalidArgument, "rank %d: NULL counts -> %s", rank, relayGetErrorString(r));
  snprintf(want, sizeof want, "relayAllReduce (rank %d, call #1): counts is NULL", rank);
  expectExact(rank, "call 1", relayGetLastError(c), want);

  r = relayAllReduce(a.send, a.recv, a.counts, (relayDataType_t)99, relaySum, &a.lay, c, NULL);
  T_CHECK(r == relayInvalidArgument, "rank %d: datatype 99 -> %s", rank, relayGetErrorString(r));
  snprintf(want, sizeof want, "relayAllReduce (rank %d, call #2): datatype 99 is not a relayDataType_t",
           rank);
  expectExact(rank, "call 2", relayGetLastError(c), want);
  expectUntouched(rank, "calls 1 and 2", &a);

  validCall(c, rank, "call 3"); /* the comm is usable after them */

  int set[NRANKS] = {0, 1, 2, 3};
  size_t blocks[NRANKS] = {4, 4, 4, 4};
  r = relayScatter(a.send, a.recv, blocks, relayFloat32, 9, set, NRANKS, c, NULL);
  T_CHECK(r == relayInvalidArgument, "rank %d: root 9 -> %s", rank, relayGetErrorString(r));
  snprintf(want, sizeof want, "relayScatter (rank %d, call #4): root = 9 is not in [0, 4)", rank);
  expectExact(rank, "call 4", relayGetLastError(c), want);

  /* A duplicate names rank 1 in its text: rank 1's message still gives rank 1 as its own once. */
  int dup[NRANKS] = {0, 1, 1, 3};
  relayLayout_t dupLay = {1, NRANKS, dup};
  r = relayAllReduce(a.send, a.recv, a.counts, relayFloat32, relaySum, &dupLay, c, NULL);
  T_CHECK(r == relayInvalidArgument, "rank %d: duplicate rank -> %s", rank, relayGetErrorString(r));
  snprintf(
      want, sizeof want,
      "relayAllReduce (rank %d, call #5): layout.ranks[1] and [2] both name rank 1 (a rank is active in at "
      "most one group)",
      rank);
  expectExact(rank, "call 5", relayGetLastError(c), want);
  expectUntouched(rank, "calls 4 and 5", &a);
  T_OK(relayCommDestroy(c));
  return 0;
}

/* Check mode 1: rank 2 alone passes NULL counts; it names its argument, every other rank names rank 2 and
 * quotes its text, each under its own prefix; the next call (#2) runs. */
static int rankCheck(int rank, int nranks, void* arg) {
  (void)arg;
  relayComm_t c = errorsComm(rank, nranks, 1, relayRouteAuto);
  callArgs a;
  argsInit(&a, rank);
  relayResult_t r =
      relayAllReduce(a.send, a.recv, rank == 2 ? NULL : a.counts, relayFloat32, relaySum, &a.lay, c, NULL);
  T_CHECK(r == relayInvalidArgument, "rank %d: -> %s (%s)", rank, relayGetErrorString(r),
          relayGetLastError(c));
  char want[512];
  if (rank == 2) snprintf(want, sizeof want, "relayAllReduce (rank 2, call #1): counts is NULL");
  else
    snprintf(want, sizeof want,
             "relayAllReduce (rank %d, call #1): rank 2 rejected the call (%s): counts is NULL", rank,
             relayGetErrorString(relayInvalidArgument)); /* its own text, quoted */
  expectExact(rank, "check mode", relayGetLastError(c), want);
  expectUntouched(rank, "check mode", &a);
  validCall(c, rank, "call 2");
  T_OK(relayCommDestroy(c));
  return 0;
}

/* An error inside a step: check mode 0, direct route, rank 1 passes another count than its peers (a shape
 * mismatch the shm transport finds in its messages): the prefix names call #2 and the step; the comm is
 * failed after it, and call #3's message quotes call #2's error without its rank. */
static int rankStep(int rank, int nranks, void* arg) {
  (void)arg;
  relayComm_t c = errorsComm(rank, nranks, 0, relayRouteDirect);
  validCall(c, rank, "call 1");
  int ranks[NRANKS] = {0, 1, 2, 3};
  relayLayout_t lay = {1, NRANKS, ranks};
  size_t counts[1] = {rank == 1 ? 2 * COUNT : COUNT};
  float* send = malloc(2 * COUNT * sizeof(float));
  float* recv = malloc(2 * COUNT * sizeof(float));
  T_CHECK(send && recv, "oom");
  for (int i = 0; i < 2 * COUNT; i++) send[i] = (float)(rank * 100000 + i);
  relayResult_t r = relayAllReduce(send, recv, counts, relayFloat32, relaySum, &lay, c, NULL);
  T_CHECK(r != relaySuccess, "rank %d: a call whose counts differ between ranks succeeded", rank);
  char err2[sizeof c->lastError], want[512];
  snprintf(err2, sizeof err2, "%s", relayGetLastError(c));
  printf("rank %d, call 2: %s\n", rank, err2);
  snprintf(want, sizeof want, "relayAllReduce (rank %d, call #2, step 0): ", rank);
  expectPrefix(rank, "call 2", err2, want);
  const char* body2 = err2 + strlen(want);
  T_CHECK(countOf(err2, "call #") == 1, "rank %d, call 2: the call number twice: %s", rank, err2);
  T_CHECK(countOf(err2, "step ") == 1, "rank %d, call 2: the step twice: %s", rank, err2);
  if (c->failed) {
    r = relayAllReduce(send, recv, counts, relayFloat32, relaySum, &lay, c, NULL);
    T_CHECK(r == relayInvalidUsage, "rank %d: a call on a failed comm -> %s", rank, relayGetErrorString(r));
    snprintf(
        want, sizeof want,
        "relayAllReduce (rank %d, call #3): the comm failed in an earlier call; destroy it (relayAllReduce "
        "(call #2, step 0): %s)",
        rank, body2);
    /* The quote keeps call #2's number: one prefix, the rank once. */
    const char* e3 = relayGetLastError(c);
    printf("rank %d, call 3: %s\n", rank, e3);
    T_CHECK(strcmp(e3, want) == 0, "rank %d, call 3: the message is\n  \"%s\"\nwant\n  \"%s\"", rank, e3,
            want);
    T_CHECK(ownRankCount(e3, rank) == 1, "rank %d, call 3: the rank twice: %s", rank, e3);
  } else {
    validCall(c, rank, "call 3"); /* a rank the mismatch left usable runs the next call */
  }
  free(send);
  free(recv);
  relayCommDestroy(c);
  return 0;
}

/* Init: rank 2's RELAYCC_DEPTH is invalid: rank 2 names it, the others name rank 2, each under the init's
 * name and its own rank. */
static int rankInit(int rank, int nranks, void* arg) {
  (void)arg;
  if (rank == 2) setenv("RELAYCC_DEPTH", "99", 1);
  relayConfig_t cfg = RELAY_CONFIG_INITIALIZER;
  cfg.timeoutMs = 20000;
  relayComm_t c = NULL;
  relayResult_t r = relayCommInitShm(&c, nranks, rank, t_job(), &cfg);
  T_CHECK(c == NULL && r != relaySuccess, "rank %d: init -> %s", rank, relayGetErrorString(r));
  const char* e = relayGetLastError(NULL);
  char want[512];
  if (rank == 2) {
    expectPrefix(rank, "init", e, "relayCommInitShm (rank 2): RELAYCC_DEPTH=99: ");
  } else {
    snprintf(want, sizeof want,
             "relayCommInitShm (rank %d): rank 2 failed init: RELAYCC_DEPTH=99: expected an integer in "
             "[0, 64]",
             rank);
    expectExact(rank, "init", e, want);
  }
  return 0;
}

/* One rank's bad init must not leave the others waiting for their deadline (issue 25.5). Each case is a
 * setup of rank 2, every rank inits from the environment (RELAYCC_RANK, RELAYCC_NRANKS), deadline 20 s
 * (1.5 s where rank 2 cannot take part). */
enum { BADINIT_CONFIG, BADINIT_NRANKS, BADINIT_RANK };
static int rankBadInit(int rank, int nranks, void* arg) {
  int what = *(const int*)arg;
  char v[16];
  snprintf(v, sizeof v, "%d", rank);
  setenv("RELAYCC_RANK", v, 1);
  snprintf(v, sizeof v, "%d", nranks);
  setenv("RELAYCC_NRANKS", v, 1);
  relayConfig_t cfg = RELAY_CONFIG_INITIALIZER;
  cfg.timeoutMs = what == BADINIT_RANK ? 1500 : 20000;
  if (rank == 2 && what == BADINIT_CONFIG) cfg.magic = 0; /* not made with RELAY_CONFIG_INITIALIZER */
  if (rank == 2 && what == BADINIT_NRANKS) setenv("RELAYCC_NRANKS", "7", 1);
  if (rank == 2 && what == BADINIT_RANK) setenv("RELAYCC_RANK", "two", 1);
  relayComm_t c = NULL;
  uint64_t t0 = relayNowNs();
  relayResult_t r = relayCommInitShm(&c, 0, -1, t_job(), &cfg);
  double ms = (double)(relayNowNs() - t0) / 1e6;
  const char* e = relayGetLastError(NULL);
  printf("rank %d (%.0f ms): %s\n", rank, ms, e);
  T_CHECK(c == NULL && r != relaySuccess, "rank %d: init -> %s", rank, relayGetErrorString(r));
  char want[512];
  if (what == BADINIT_CONFIG) {
    const char* own = "config is not initialized with RELAY_CONFIG_INITIALIZER (magic 0, size ";
    if (rank == 2) snprintf(want, sizeof want, "relayCommInitShm (rank 2): %s", own);
    else snprintf(want, sizeof want, "relayCommInitShm (rank %d): rank 2 failed init: %s", rank, own);
    expectPrefix(rank, "bad config on rank 2", e, want);
  } else if (what == BADINIT_NRANKS) {
    T_CHECK(strstr(e, "rank 2 has nranks 7") && (rank == 2 || strstr(e, "rank 2 failed init: ")),
            "rank %d: RELAYCC_NRANKS=7 on rank 2: %s", rank, e);
  } else if (rank == 2) {
    const char* own = "relayCommInitShm: RELAYCC_RANK=two: expected an integer in "; /* no rank to name */
    T_CHECK(r == relayInvalidArgument && strncmp(e, own, strlen(own)) == 0, "rank 2: RELAYCC_RANK=two: %s",
            e);
  } else {
    /* Rank 2 cannot take part: the others' deadline names it as the rank that never arrived. */
    T_CHECK(r == relayTimeout && strstr(e, "waiting for rank 2 to arrive"),
            "rank %d: RELAYCC_RANK=two on rank 2: %s", rank, e);
  }
  if (what != BADINIT_RANK) T_CHECK(ms < 5000, "rank %d: failed after %.0f ms (deadline 20000)", rank, ms);
  return 0;
}

/* Before a comm exists there is no prefix: the text names the init (and no rank it does not have). */
static void caseInitArgs(void) {
  relayComm_t c = NULL;
  relayResult_t r = relayCommInitShm(&c, NRANKS, 7, t_job(), NULL);
  T_CHECK(r == relayInvalidArgument && c == NULL, "rank 7 of 4 -> %s", relayGetErrorString(r));
  expectExact(-1, "rank 7", relayGetLastError(NULL),
              "relayCommInitShm: rank = 7 (argument, or RELAYCC_RANK / RANK) is not in [0, 4)");
  /* A bad config on a rank that knows its job and rank: it joins to tell the others, so its error is
   * under its rank (one rank here; rankBadInit has the others). */
  relayConfig_t bad = RELAY_CONFIG_INITIALIZER;
  bad.magic = 0;
  char job[64];
  snprintf(job, sizeof job, "errors-init-args-%d", (int)getpid());
  r = relayCommInitShm(&c, 1, 0, job, &bad);
  T_CHECK(r == relayInvalidArgument && c == NULL, "a bad config -> %s", relayGetErrorString(r));
  const char* e = relayGetLastError(NULL);
  const char* want =
      "relayCommInitShm (rank 0): config is not initialized with RELAY_CONFIG_INITIALIZER (magic 0, size ";
  T_CHECK(strncmp(e, want, strlen(want)) == 0, "a bad config: %s", e);
  r = relayAllReduce(NULL, NULL, NULL, relayFloat32, relaySum, NULL, NULL, NULL);
  expectExact(-1, "no comm", relayGetLastError(NULL), "relayAllReduce: comm is NULL");
  printf("init arguments: ok\n");
}

/* relayErrorQuote: an earlier error of this rank inside a new one keeps its call and step, loses its rank. */
static void caseQuote(void) {
  struct relayComm* c = calloc(1, sizeof *c);
  T_CHECK(c, "oom");
  c->rank = 2;
  c->curCallName = "relayAllReduce";
  static const char* const kCases[][2] = {
      {"relayAllReduce (rank 2, call #3, step 1): x", "relayAllReduce (call #3, step 1): x"},
      {"relayAllGather (rank 2, call #4): y", "relayAllGather (call #4): y"},
      {"relayAllReduce (rank 2): z", "z"}, /* the new prefix says all of it */
      {"relaycc (rank 2): w", "w"},
      {"relayCommInitShm (rank 2): v", "relayCommInitShm: v"},
      {"relayAllReduce (rank 23, call #3): u", "relayAllReduce (rank 23, call #3): u"}, /* another rank */
      {"rank 2 of 4: t", "rank 2 of 4: t"},                                             /* no prefix */
      {"topology 'x' (rank 2): s", "topology 'x' (rank 2): s"},                         /* not at the start */
      {"", ""},
  };
  char buf[256];
  for (size_t i = 0; i < sizeof kCases / sizeof kCases[0]; i++)
    T_CHECK(strcmp(relayErrorQuote(c, kCases[i][0], buf, sizeof buf), kCases[i][1]) == 0,
            "quote \"%s\" -> \"%s\", want \"%s\"", kCases[i][0], buf, kCases[i][1]);
  free(c);
  printf("quote: ok\n");
}

static int runInitArgs(void) {
  caseInitArgs();
  return 0;
}

static int runQuote(void) {
  caseQuote();
  return 0;
}

/* relayCallReject, the binding's rejection (the Python package's path for what it checks itself):
 * rank 1 rejects an all-reduce whose shape it read whole (a tensor of another dtype than the call's),
 * the others make the call. The call counts on rank 1, its text is the binding's reason under rank 1's
 * prefix, nothing is written; check mode 0: rank 1 runs its part through scratch, the peers (all
 * receive from it) return relayRemoteError naming it, their input untouched; check mode 1: every rank
 * returns relayInvalidArgument and the peers quote the reason, nothing moves. Then an invalid shape
 * (counts unread: NULL) in check mode 1: every rank alike again. The next call is right everywhere. */
#define BINDING_REASON "tensor has dtype torch.float64, the call's dtype is torch.float32"
static int rankBinding(int rank, int nranks, void* arg) {
  int check = *(const int*)arg;
  relayComm_t c = errorsComm(rank, nranks, check, relayRouteAuto);
  callArgs a;
  argsInit(&a, rank);
  float sent[COUNT];
  memcpy(sent, a.send, sizeof sent);
  char want[512];
  relayResult_t r = rank == 1
                        ? relayCallReject(relayCollectiveAllReduce, a.counts, relayFloat32, relaySum, &a.lay,
                                          0, BINDING_REASON, c, NULL)
                        : relayAllReduce(a.send, a.recv, a.counts, relayFloat32, relaySum, &a.lay, c, NULL);
  const char* e = relayGetLastError(c);
  if (rank == 1) {
    T_CHECK(r == relayInvalidArgument, "rank 1: the rejected call -> %s (%s)", relayGetErrorString(r), e);
    expectExact(rank, "the rejected call", e, "relayAllReduce (rank 1, call #1): " BINDING_REASON);
  } else if (check) {
    T_CHECK(r == relayInvalidArgument, "rank %d: a peer of the rejected call -> %s (%s)", rank,
            relayGetErrorString(r), e);
    snprintf(want, sizeof want, "relayAllReduce (rank %d, call #1): rank 1 rejected the call (%s): %s", rank,
             relayGetErrorString(relayInvalidArgument), BINDING_REASON);
    expectExact(rank, "a peer", e, want);
  } else {
    T_CHECK(r == relayRemoteError && strstr(e, "rank 1 passed a bad buffer in this call"),
            "rank %d: a peer of the rejected call -> %s (%s)", rank, relayGetErrorString(r), e);
  }
  if (rank == 1 || check) expectUntouched(rank, "the rejected call", &a);
  T_CHECK(memcmp(sent, a.send, sizeof sent) == 0, "rank %d: the rejected call changed an input", rank);
  validCall(c, rank, "call 2");
  if (check) {
    r = rank == 2 ? relayCallReject(relayCollectiveAllReduce, NULL, relayFloat32, relaySum, &a.lay, 0,
                                    "counts must be a list of 1 counts (one per group)", c, NULL)
                  : relayAllReduce(a.send, a.recv, a.counts, relayFloat32, relaySum, &a.lay, c, NULL);
    T_CHECK(r == relayInvalidArgument, "rank %d: call 3 -> %s (%s)", rank, relayGetErrorString(r),
            relayGetLastError(c));
    if (rank == 2)
      snprintf(want, sizeof want,
               "relayAllReduce (rank 2, call #3): counts must be a list of 1 counts (one per group)");
    else
      snprintf(want, sizeof want,
               "relayAllReduce (rank %d, call #3): rank 2 rejected the call (%s): counts must be a list of 1 "
               "counts "
               "(one per group)",
               rank, relayGetErrorString(relayInvalidArgument));
    expectExact(rank, "call 3", relayGetLastError(c), want);
    validCall(c, rank, "call 4");
    /* A rejection whose counts differ from its peers' (the torch backend's all_to_all_single of another
     * size on one rank): the round compares shapes itself, so every rank fails the call and the comm stays
     * usable (the shm transport's own shape check failed the comm in the round before). */
    size_t other = a.counts[0] + 1;
    r = rank == 3 ? relayCallReject(relayCollectiveAllReduce, &other, relayFloat32, relaySum, &a.lay, 0,
                                    "other counts", c, NULL)
                  : relayAllReduce(a.send, a.recv, a.counts, relayFloat32, relaySum, &a.lay, c, NULL);
    T_CHECK(r == relayInvalidArgument, "rank %d: call 5 -> %s (%s)", rank, relayGetErrorString(r),
            relayGetLastError(c));
    expectUntouched(rank, "call 5", &a);
    validCall(c, rank, "call 6");
  }
  /* relayCallRouted: a question, not a call (nothing counted, the last error kept for a valid shape). */
  char lastBefore[1024];
  snprintf(lastBefore, sizeof lastBefore, "%s", relayGetLastError(c));
  int routed = -1;
  T_OK(relayCallRouted(relayCollectiveAllReduce, a.counts, relayFloat32, relaySum, &a.lay, c, NULL, &routed));
  T_CHECK(routed == 0 || routed == 1, "rank %d: routed = %d", rank, routed);
  expectExact(rank, "relayCallRouted's last error", relayGetLastError(c), lastBefore);
  r = relayCallRouted(relayCollectiveAllReduce, a.counts, relayFloat32, relaySum, NULL, c, NULL, &routed);
  T_CHECK(r == relayInvalidArgument && routed == 0, "rank %d: relayCallRouted, NULL layout -> %s", rank,
          relayGetErrorString(r));
  r = relayCallRouted(relayCollectiveScatter, a.counts, relayFloat32, relaySum, &a.lay, c, NULL, &routed);
  T_CHECK(r == relayInvalidArgument, "rank %d: relayCallRouted, a rooted call -> %s", rank,
          relayGetErrorString(r));
  r = relayCallRouted(relayCollectiveAllReduce, a.counts, relayFloat32, relaySum, &a.lay, NULL, NULL,
                      &routed);
  T_CHECK(r == relayInvalidArgument, "rank %d: relayCallRouted, no comm -> %s", rank, relayGetErrorString(r));
  validCall(c, rank, check ? "call 7" : "call 3");
  r = relayCallReject(relayCollectiveAllReduce, a.counts, relayFloat32, relaySum, &a.lay, 0, "x", NULL, NULL);
  T_CHECK(r == relayInvalidArgument, "rank %d: no comm -> %s", rank, relayGetErrorString(r));
  expectExact(-1, "no comm", relayGetLastError(NULL), "relayAllReduce: comm is NULL");
  T_OK(relayCommDestroy(c));
  /* A forced route is what the call runs: relaycc's (shm has no collective of its own to leave it to). */
  relayComm_t forced = errorsComm(rank, nranks, check, relayRouteDirect);
  routed = -1;
  T_OK(relayCallRouted(relayCollectiveAllReduce, a.counts, relayFloat32, relaySum, &a.lay, forced, NULL,
                       &routed));
  T_CHECK(routed == 1, "rank %d: relayCallRouted on a comm forced to direct: routed = %d", rank, routed);
  T_OK(relayCommDestroy(forced));
  return 0;
}

/* The rank cases fork 4 shm ranks each. */
#define ERR_RANKS(nm, f) \
  { .name = nm, .rank = f, .ranks = NRANKS, .deadlineS = 120, .timeoutS = 120 }
static const tCase kCases[] = {
    ERR_RANKS("calls", rankCalls),
    ERR_RANKS("check", rankCheck),
    {.name = "binding-c0",
     .rank = rankBinding,
     .arg = &(int){0},
     .ranks = NRANKS,
     .deadlineS = 120,
     .timeoutS = 120},
    {.name = "binding-c1",
     .rank = rankBinding,
     .arg = &(int){1},
     .ranks = NRANKS,
     .deadlineS = 120,
     .timeoutS = 120},
    ERR_RANKS("step", rankStep),
    ERR_RANKS("init", rankInit),
    {.name = "init-bad-config",
     .rank = rankBadInit,
     .arg = &(int){BADINIT_CONFIG},
     .ranks = NRANKS,
     .deadlineS = 60,
     .timeoutS = 120},
    {.name = "init-bad-nranks",
     .rank = rankBadInit,
     .arg = &(int){BADINIT_NRANKS},
     .ranks = NRANKS,
     .deadlineS = 60,
     .timeoutS = 120},
    {.name = "init-bad-rank",
     .rank = rankBadInit,
     .arg = &(int){BADINIT_RANK},
     .ranks = NRANKS,
     .deadlineS = 60,
     .timeoutS = 120},
    {.name = "init-args", .fn = runInitArgs, .timeoutS = 120},
    {.name = "quote", .fn = runQuote, .timeoutS = 120},
};

int main(int argc, char** argv) { return t_main(argc, argv, "errors", kCases, T_NCASES(kCases)); }
