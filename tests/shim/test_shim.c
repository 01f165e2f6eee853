/*
 * The NCCL interposer on CPU: this program is an "NCCL program" linked to
 * the fake libnccl.so.2 (fake_nccl.c) and run with librelaycc_shim.so
 * preloaded (tests/shim/shim.cmake). Ranks are forked processes. The fake
 * records every call that reaches it, so a case tells forwarded calls
 * (recorded, with their arguments) from calls relaycc took (not recorded);
 * both paths compute real results, compared with the serial reference.
 *
 *   symbols    every function a parse of nccl.h finds resolves to the shim,
 *              and the shim exports none of relaycc's names
 *   forward    a comm without state (no GPU: the vote declines): every call
 *              reaches the fake with the caller's arguments
 *   decline    test hook on, one rank fails its state: every rank declines
 *   group      test hook on: inside ncclGroupStart/End forwarded, outside routed
 *   disabled   RELAYCC_SHIM=0 with the hook on: no vote, everything forwarded
 *   colls      RELAYCC_SHIM_COLLS takes the collectives it names only
 *   missing    RELAYCC_SHIM_NCCL names no library: calls fail, none reaches NCCL
 *   loader     relaycc's own resolver: the loaded library, or RELAYCC_NCCL_LIB's error
 *   routed     test hook on: the four collectives over dtypes, ops and sizes
 *              go to relaycc exactly when relayRouteBeatsNative says so, and
 *              every result is the serial one
 *   ncclNNN    the program linked to the fake of NCCL 2.NN's release (its functions only, its version
 *              code): _off RELAYCC_SHIM=0 forwards every call unchanged; _on relaycc takes its wins
 *              (2.18 on) or, with 2.6 (no ncclSend), forwards everything
 *   environ    relaycc's own NCCL inits leave the process environment as they found it
 *   declined   the one-shot and bw regions refused: their calls are forwarded to NCCL, not rerouted
 *   streams    relaycc takes calls on the comm's first stream only
 *   late       a rank 3 s late: right data without a deadline; with the user's, errors through
 *              ncclCommGetAsyncError, and the failed rank keeps routing as its peer does
 *   settings   rank 0's RELAYCC_SHIM_COLLS or RELAYCC_SHIM differs: every rank takes what all take
 *   twins      pnccl* calls and ncclGroupSimulateEnd are tracked as their nccl* names
 *   revoke     ncclCommRevoke ends a relaycc wait on the comm
 *   threads    calls on three comms from three threads, a watchdog polling and aborting (make tsan)
 */
#include <ctype.h>
#include <pthread.h>
#include <stdatomic.h>
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <nccl.h>

#include "colls_common.h"
#include "comm/common.h"
#include "comm/params.h"
#include "fake_nccl.h"
#include "harness.h"
#include "launch.h"
#include "relaycc_nccl.h"
#include "route/route.h"
#include "topo/topo.h"
#include "transport/nccl.h"
#include "transport/nccl/nccl_api.h"

#define TIMEOUT_S 120

#define TH_COMMS 3
typedef struct {
  int nranks;
  ncclUniqueId id;
  ncclUniqueId more[TH_COMMS]; /* the threads case's comms */
} job;

static ncclComm_t initComm(const job* j, int rank) {
  ncclComm_t comm = NULL;
  ncclResult_t r = ncclCommInitRank(&comm, j->nranks, j->id, rank);
  T_CHECK(r == ncclSuccess && comm, "rank %d: ncclCommInitRank -> %d", rank, (int)r);
  return comm;
}

/* Index of the first call named `name` at or after `from`, else -1. */
static int findCall(const char* name, int from) {
  for (int i = from; i < fakeNcclNumCalls(); i++)
    if (strcmp(fakeNcclGetCall(i)->name, name) == 0) return i;
  return -1;
}

static int countCalls(const char* name) {
  int n = 0;
  for (int i = 0; (i = findCall(name, i)) >= 0; i++) n++;
  return n;
}

/* The calls named `name` that wrote recv: the caller's, not the shim's own votes (all-gathers into
 * buffers of its own at a comm's first collective). */
static int countCallsInto(const char* name, const void* recv) {
  int n = 0;
  for (int i = 0; (i = findCall(name, i)) >= 0; i++) n += fakeNcclGetCall(i)->a[1] == (uintptr_t)recv;
  return n;
}

/* The last call reached the fake as `name` with exactly these arguments. */
static void expectLast(const char* name, int n, const uintptr_t* a) {
  int last = fakeNcclNumCalls() - 1;
  T_CHECK(last >= 0, "%s: no call reached the fake", name);
  const fakeNcclCall* c = fakeNcclGetCall(last);
  T_CHECK(strcmp(c->name, name) == 0, "the last call to reach the fake is %s, not %s", c->name, name);
  T_CHECK(c->nargs == n, "%s: %d arguments recorded, %d expected", name, c->nargs, n);
  for (int i = 0; i < n; i++)
    T_CHECK(c->a[i] == a[i], "%s: argument %d reached the fake as %#lx, the caller passed %#lx", name, i,
            (unsigned long)c->a[i], (unsigned long)a[i]);
}
#define EXPECT_LAST(name, ...)                             \
  do {                                                     \
    uintptr_t e_[] = {__VA_ARGS__};                        \
    expectLast(name, (int)(sizeof e_ / sizeof e_[0]), e_); \
  } while (0)

/* ---- symbols --------------------------------------------------------------- */

/* Names of the functions nccl.h declares: `<type> [p]nccl<Name>(` at the
 * start of a declaration, comments removed. */
static int parseHeader(const char* path, char names[][64], int cap) {
  FILE* f = fopen(path, "r");
  T_CHECK(f, "cannot open %s", path);
  static char text[1 << 20];
  size_t len = fread(text, 1, sizeof text - 1, f);
  fclose(f);
  text[len] = 0;
  for (char* p = text; (p = strstr(p, "/*"));) { /* comments become blanks */
    char* e = strstr(p + 2, "*/");
    T_CHECK(e, "unterminated comment in %s", path);
    memset(p, ' ', (size_t)(e + 2 - p));
  }
  for (char* p = text; (p = strstr(p, "//"));) {
    char* e = strchr(p, '\n');
    memset(p, ' ', e ? (size_t)(e - p) : strlen(p));
  }
  int n = 0;
  for (char* line = text; line && *line; line = strchr(line, '\n') ? strchr(line, '\n') + 1 : NULL) {
    char* p = line;
    while (*p == ' ' || *p == '\t') p++;
    const char* types[] = {"ncclResult_t", "const char*", "void"};
    size_t tl = 0;
    for (int t = 0; t < 3 && !tl; t++)
      if (strncmp(p, types[t], strlen(types[t])) == 0) tl = strlen(types[t]);
    if (!tl || !(p[tl] == ' ' || p[tl] == '\t')) continue;
    p += tl;
    while (*p == ' ' || *p == '\t') p++;
    if (strncmp(p, "nccl", 4) != 0 && strncmp(p, "pnccl", 5) != 0) continue;
    char* q = p;
    while (isalnum((unsigned char)*q) || *q == '_') q++;
    char* paren = q;
    while (*paren == ' ') paren++;
    if (*paren != '(') continue;
    T_CHECK(n < cap, "more than %d functions in %s", cap, path);
    snprintf(names[n], 64, "%.*s", (int)(q - p), p);
    n++;
  }
  return n;
}

static void caseSymbols(void) {
  static char names[512][64];
  int n = parseHeader(RELAY_NCCL_HEADER, names, 512);
  /* nccl.h 2.28 declares 41 functions and their pnccl twins; a parse that
   * finds few means the parse broke, not that the shim is complete. */
  T_CHECK(n >= 80, "only %d functions parsed from %s", n, RELAY_NCCL_HEADER);
  Dl_info shim;
  void* ar = dlsym(RTLD_DEFAULT, "ncclAllReduce");
  T_CHECK(ar && dladdr(ar, &shim) && strstr(shim.dli_fname, "relaycc_shim"),
          "ncclAllReduce does not come from librelaycc_shim.so (is it preloaded?)");
  void* h = dlopen(shim.dli_fname, RTLD_NOW | RTLD_NOLOAD);
  T_CHECK(h, "cannot reopen %s", shim.dli_fname);
  for (int i = 0; i < n; i++) {
    void* s = dlsym(h, names[i]);
    Dl_info where;
    T_CHECK(s, "%s (declared in %s) is not defined by the shim", names[i], RELAY_NCCL_HEADER);
    T_CHECK(dladdr(s, &where) && strcmp(where.dli_fname, shim.dli_fname) == 0,
            "%s resolves to %s, not the shim", names[i], where.dli_fname);
    void* g = dlsym(RTLD_DEFAULT, names[i]);
    T_CHECK(g == s, "%s: the process binds to %p, the shim's is %p", names[i], g, s);
  }
  /* relaycc lives inside, hidden: a program's own librelaycc must not bind to it. */
  const char* hidden[] = {"relayCommInitShm", "relayAllReduce",        "relayNccl",      "relayNcclLoad",
                          "relayShimReady",   "relayRouteBeatsNative", "relayHostReduce"};
  for (size_t i = 0; i < sizeof hidden / sizeof hidden[0]; i++)
    T_CHECK(!dlsym(h, hidden[i]), "the shim exports %s", hidden[i]);
  dlclose(h);
  printf("symbols: %d functions of %s resolve to %s\n", n, RELAY_NCCL_HEADER, shim.dli_fname);
}

/* ---- forwarding ----------------------------------------------------------- */

/* The version code of the library the program runs with (the fake of its release, tests/shim/shim.cmake). */
static int libVersion(void) {
  const char* v = getenv("SHIM_TEST_FAKE_CODE");
  return v ? atoi(v) : NCCL_VERSION_CODE;
}

/* Each call through the shim reaches the fake unchanged (comm has no state); only the calls the
 * library's release has (a program built for it calls no other). */
static void forwardAll(ncclComm_t comm, int rank, int nranks) {
  int code = libVersion();
  const uintptr_t S = 0x5150; /* a stream value the fake never dereferences */
  cudaStream_t st = (cudaStream_t)S;
  size_t n = 37;
  float* in = calloc(n * (size_t)nranks, sizeof *in);
  float* out = calloc(n * (size_t)nranks, sizeof *out);
  T_CHECK(in && out, "out of memory");
  for (size_t i = 0; i < n * (size_t)nranks; i++) in[i] = (float)(rank * 1000 + (int)i + 1);
  T_CHECK(ncclAllReduce(in, out, n, ncclFloat32, ncclMax, comm, st) == ncclSuccess, "ncclAllReduce");
  EXPECT_LAST("ncclAllReduce", (uintptr_t)in, (uintptr_t)out, n, ncclFloat32, ncclMax, (uintptr_t)comm, S);
  T_CHECK(out[5] == (float)((nranks - 1) * 1000 + 6), "forwarded all-reduce: out[5] = %g", out[5]);
  T_CHECK(ncclAllGather(in, out, n, ncclInt32, comm, st) == ncclSuccess, "ncclAllGather");
  EXPECT_LAST("ncclAllGather", (uintptr_t)in, (uintptr_t)out, n, ncclInt32, 0, (uintptr_t)comm, S);
  T_CHECK(ncclReduceScatter(in, out, n, ncclFloat32, ncclSum, comm, st) == ncclSuccess, "ncclReduceScatter");
  EXPECT_LAST("ncclReduceScatter", (uintptr_t)in, (uintptr_t)out, n, ncclFloat32, ncclSum, (uintptr_t)comm,
              S);
  if (code >= 22800) {
    T_CHECK(ncclAlltoAll(in, out, n, ncclFloat32, comm, st) == ncclSuccess, "ncclAlltoAll");
    EXPECT_LAST("ncclAlltoAll", (uintptr_t)in, (uintptr_t)out, n, ncclFloat32, 0, (uintptr_t)comm, S);
  }
  if (code >= 2700) {
    T_CHECK(ncclSend(in, 11, ncclInt8, (rank + 1) % nranks, comm, st) == ncclSuccess, "ncclSend");
    EXPECT_LAST("ncclSend", (uintptr_t)in, 11, ncclInt8, (uintptr_t)((rank + 1) % nranks), (uintptr_t)comm,
                S);
    T_CHECK(ncclRecv(out, 13, ncclUint8, 0, comm, st) == ncclSuccess, "ncclRecv");
    EXPECT_LAST("ncclRecv", (uintptr_t)out, 13, ncclUint8, 0, (uintptr_t)comm, S);
  }
  T_CHECK(ncclBroadcast(in, out, 17, ncclFloat64, 1, comm, st) == ncclSuccess, "ncclBroadcast");
  EXPECT_LAST("ncclBroadcast", (uintptr_t)in, (uintptr_t)out, 17, ncclFloat64, 1, (uintptr_t)comm, S);
  int v = 0, cnt = 0;
  T_CHECK(ncclGetVersion(&v) == ncclSuccess && v == code, "ncclGetVersion -> %d, the library's is %d", v,
          code);
  EXPECT_LAST("ncclGetVersion", (uintptr_t)&v);
  T_CHECK(ncclCommCount(comm, &cnt) == ncclSuccess && cnt == nranks, "ncclCommCount -> %d", cnt);
  EXPECT_LAST("ncclCommCount", (uintptr_t)comm, (uintptr_t)&cnt);
  /* Functions the shim does not name at all, profiling twins included. */
#ifdef NCCL_REVOKE_DEFAULT /* ncclCommRevoke: in 2.28.9's nccl.h (CI's), not in 2.28.3's (the H200 \
                              machine's) */
  if (code >= 22809) {
    T_CHECK(ncclCommRevoke(comm, 3) == ncclSuccess, "ncclCommRevoke");
    expectLast("ncclCommRevoke", 0, NULL);
  }
#endif
  T_CHECK(pncclAllReduce(in, out, n, ncclFloat32, ncclSum, comm, st) == ncclSuccess, "pncclAllReduce");
  expectLast("pncclAllReduce", 0, NULL);
  free(in);
  free(out);
}

static int rankForward(int rank, int nranks, void* arg) {
  ncclComm_t comm = initComm(arg, rank);
  forwardAll(comm, rank, nranks);
  T_CHECK(ncclCommDestroy(comm) == ncclSuccess, "ncclCommDestroy");
  EXPECT_LAST("ncclCommDestroy", (uintptr_t)comm);
  return 0;
}

/* ---- the test hook: state over shm ----------------------------------------- */

/* The route relaycc's router picks for a one-group call on nranks with NCCL's collective among the
 * candidates (the shm comm's topology: RELAYCC_TOPO, else the "cpu" preset); relayRouteNative: NCCL's. */
static int chosenRoute(relayCollective_t coll, int nranks, size_t count, relayDataType_t dt,
                       relayRedOp_t op) {
  static struct relayTopo* topo;
  if (!topo) {
    const char* name = getenv("RELAYCC_TOPO");
    T_OK(relayTopoLoad(name && *name ? name : "cpu", &topo));
    /* As a shm comm's model (core/init.c): it prices the one-copy path from RELAYCC_SHM_CMA_BYTES. */
    relayParams p;
    int bad = -1;
    char why[160];
    T_OK(relayParamsResolve(&p, NULL, &bad, why, sizeof why));
    topo->oneCopyBytes = (double)p.v[RELAY_P_SHM_CMA_BYTES];
    topo->oneCopyPairBytes = (double)p.v[RELAY_P_SHM_CMA_PAIR_BYTES];
    topo->oneCopyRootedBytes = (double)p.v[RELAY_P_SHM_CMA_ROOTED_BYTES];
  }
  int ranks[16];
  for (int q = 0; q < nranks; q++) ranks[q] = q;
  planKey key = planKeyInit(coll, nranks, 1, nranks, ranks, &count, dt);
  key.op = relayCollReduces(coll) ? op : relaySum;
  key.root = relayCollRooted(coll) ? nranks - 1 : 0; /* rankRoutedRooted's root */
  key.route = relayRouteDirect;
  key.depth = 1;
  /* The test hook's state is on the shm transport: its capabilities (one-shot and bw), per call. */
  int caps = RELAY_TP_CAP_ONESHOT | RELAY_TP_CAP_BW | RELAY_ROUTE_CAP_PERCALL;
  int route, depth;
  relayRouteChoose(&key, topo, caps | RELAY_TP_CAP_NATIVE, &route, &depth);
  T_CHECK((route != relayRouteNative) == relayRouteBeatsNative(&key, topo, caps),
          "relayRouteChoose and relayRouteBeatsNative disagree");
  return route;
}

/* What the shim decides for that call: relaycc's when its route beats NCCL's collective. */
static int predicts(relayCollective_t coll, int nranks, size_t count, relayDataType_t dt, relayRedOp_t op) {
  return chosenRoute(coll, nranks, count, dt, op) != relayRouteNative;
}

/* The stream the cases' calls pass (a value the fake never dereferences; the shm twin ignores it). */
static cudaStream_t gStream;

static ncclResult_t callNccl(relayCollective_t coll, const void* s, void* r, size_t count, relayDataType_t dt,
                             relayRedOp_t op, ncclComm_t comm) {
  switch (coll) {
    case relayCollectiveAllGather: return ncclAllGather(s, r, count, (ncclDataType_t)dt, comm, gStream);
    case relayCollectiveReduceScatter:
      return ncclReduceScatter(s, r, count, (ncclDataType_t)dt, (ncclRedOp_t)op, comm, gStream);
    case relayCollectiveAllReduce:
      return ncclAllReduce(s, r, count, (ncclDataType_t)dt, (ncclRedOp_t)op, comm, gStream);
    default: return ncclAlltoAll(s, r, count, (ncclDataType_t)dt, comm, gStream);
  }
}

static const char* kNcclNames[] = {"ncclAllGather", "ncclReduceScatter", "ncclAllReduce", "ncclAlltoAll"};

/* One call through the shim, checked against the serial reference; returns
 * 1 when relaycc took it (it never reached the fake). inPlace: recv is send
 * (all-reduce only). */
static int checkedCall(relayCollective_t coll, relayDataType_t dt, relayRedOp_t op, size_t count, int rank,
                       int nranks, ncclComm_t comm, int inPlace) {
  size_t es = relayTypeSize(dt), ns = tc_send_elems(coll, nranks, count),
         nr = tc_recv_elems(coll, nranks, count);
  char* send = malloc(ns * es);
  char* recv = malloc(nr * es);
  char* want = malloc(nr * es);
  T_CHECK(send && recv && want, "out of memory");
  tc_fill_input(coll, dt, op, nranks, rank, count, send);
  memset(recv, 0xA5, nr * es); /* poison */
  tc_expected(coll, dt, op, nranks, rank, count, want);
  int before = countCallsInto(kNcclNames[coll], inPlace ? send : recv);
  ncclResult_t r = callNccl(coll, send, inPlace ? send : recv, count, dt, op, comm);
  T_CHECK(r == ncclSuccess, "%s count %zu dtype %d op %d -> %d", kNcclNames[coll], count, (int)dt, (int)op,
          (int)r);
  size_t bad = 0, nbad = tc_compare(dt, inPlace ? send : recv, want, nr, &bad);
  T_CHECK(nbad == 0, "rank %d: %s count %zu dtype %d op %d%s: %zu of %zu elements wrong, first at %zu", rank,
          kNcclNames[coll], count, (int)dt, (int)op, inPlace ? " (in place)" : "", nbad, nr, bad);
  free(send);
  free(recv);
  free(want);
  return countCallsInto(kNcclNames[coll], inPlace ? send : recv) == before;
}

/* ncclBroadcast, ncclReduce and ncclBcast (root: the last rank) through the shim: relaycc takes a call
 * exactly where its router says relaycc's route beats NCCL's own, a taken call's result is the serial
 * reference's (a reduce writes the root's buffer only), and a call it leaves reaches the fake. */
static int rankRoutedRooted(int rank, int nranks, void* arg) {
  ncclComm_t comm = initComm(arg, rank);
  const size_t counts[] = {5, 1024, 300000};
  const int root = nranks - 1;
  int taken = 0, forwarded = 0;
  for (int k = 0; k < 3; k++)
    for (size_t c = 0; c < sizeof counts / sizeof counts[0]; c++) {
      relayCollective_t coll = k == 1 ? relayCollectiveReduce : relayCollectiveBroadcast;
      const char* name = k == 0 ? "ncclBroadcast" : k == 1 ? "ncclReduce" : "ncclBcast";
      size_t n = counts[c];
      float* send = malloc(n * sizeof *send);
      float* recv = malloc(n * sizeof *recv);
      float* want = malloc(n * sizeof *want);
      T_CHECK(send && recv && want, "out of memory");
      tc_fill_input(coll, relayFloat32, relaySum, nranks, rank, n, send);
      memset(recv, 0xA5, n * sizeof *recv); /* poison */
      if (coll == relayCollectiveReduce && rank != root) memcpy(want, recv, n * sizeof *want);
      else tc_expected_root(coll, relayFloat32, relaySum, nranks, rank, root, n, want);
      if (k == 2) memcpy(recv, send, n * sizeof *recv); /* ncclBcast: one buffer, the root's input */
      int want1 = predicts(coll, nranks, n, relayFloat32, relaySum), before = countCalls(name);
      ncclResult_t r = k == 0   ? ncclBroadcast(send, recv, n, ncclFloat32, root, comm, gStream)
                       : k == 1 ? ncclReduce(send, recv, n, ncclFloat32, ncclSum, root, comm, gStream)
                                : ncclBcast(recv, n, ncclFloat32, root, comm, gStream);
      T_CHECK(r == ncclSuccess, "rank %d: %s count %zu -> %d", rank, name, n, (int)r);
      int got = countCalls(name) == before;
      T_CHECK(got == want1, "rank %d: %s count %zu: %s, the router says %s", rank, name, n,
              got ? "taken" : "forwarded", want1 ? "relaycc wins" : "NCCL's");
      if (got) {
        size_t bad = 0, nbad = tc_compare(relayFloat32, recv, want, n, &bad);
        T_CHECK(nbad == 0, "rank %d: %s count %zu: %zu elements wrong, first at %zu", rank, name, n, nbad,
                bad);
      }
      taken += got;
      forwarded += !got;
      free(send);
      free(recv);
      free(want);
    }
  if (rank == 0)
    printf("routed rooted: %d ranks, %d calls taken by relaycc, %d forwarded\n", nranks, taken, forwarded);
  T_CHECK(ncclCommDestroy(comm) == ncclSuccess, "ncclCommDestroy");
  return 0;
}

static int rankRouted(int rank, int nranks, void* arg) {
  ncclComm_t comm = initComm(arg, rank);
  const relayDataType_t dts[] = {relayFloat32, relayInt32, relayBfloat16, relayFloat16, relayFloat64};
  const relayRedOp_t ops[] = {relaySum, relayMax, relayAvg, relayProd, relayMin};
  const size_t counts[] = {1, 5, 1024, 20000};
  int taken = 0, forwarded = 0;
  for (int coll = 0; coll < RELAY_NUM_LAYOUT_COLLS; coll++)
    for (size_t d = 0; d < sizeof dts / sizeof dts[0]; d++)
      for (size_t c = 0; c < sizeof counts / sizeof counts[0]; c++) {
        relayRedOp_t op = ops[(d + c) % (sizeof ops / sizeof ops[0])];
        /* Products of 3 ranks' patterns overflow the 16-bit floats' range: sum there. */
        if (op == relayProd && (dts[d] == relayFloat16 || dts[d] == relayBfloat16)) op = relaySum;
        int want = predicts((relayCollective_t)coll, nranks, counts[c], dts[d], op);
        int got = checkedCall((relayCollective_t)coll, dts[d], op, counts[c], rank, nranks, comm, 0);
        T_CHECK(got == want, "rank %d: %s count %zu dtype %d op %d: %s, the router says %s", rank,
                kNcclNames[coll], counts[c], (int)dts[d], (int)op, got ? "taken" : "forwarded",
                want ? "relaycc wins" : "NCCL's");
        taken += got;
        forwarded += !got;
      }
  /* In place, as PyTorch calls all-reduce. */
  checkedCall(relayCollectiveAllReduce, relayFloat32, relaySum, 1024, rank, nranks, comm, 1);
  T_CHECK(taken > 0, "rank %d: relaycc took none of %d calls (the routed path is untested)", rank, forwarded);
  if (rank == 0)
    printf("routed: %d ranks, %d calls taken by relaycc, %d forwarded\n", nranks, taken, forwarded);
  T_CHECK(ncclCommDestroy(comm) == ncclSuccess, "ncclCommDestroy");
  return 0;
}

/* A size relaycc is predicted to win at, so that a forwarded call means a decline. */
static size_t winningCountOf(relayCollective_t coll, int nranks) {
  for (size_t count = 1; count <= (1u << 16); count *= 2)
    if (predicts(coll, nranks, count, relayFloat32, relaySum)) return count;
  T_CHECK(0, "the router predicts no %s win on %d ranks up to 64 Ki elements", relayCollName(coll), nranks);
  return 0;
}

static size_t winningCount(int nranks) { return winningCountOf(relayCollectiveAllReduce, nranks); }

static int rankDecline(int rank, int nranks, void* arg) {
  ncclComm_t comm = initComm(arg, rank);
  size_t count = winningCount(nranks);
  T_CHECK(!checkedCall(relayCollectiveAllReduce, relayFloat32, relaySum, count, rank, nranks, comm, 0),
          "rank %d: an all-reduce was taken although rank %s failed its state", rank,
          getenv("RELAYCC_SHIM_TEST_FAIL_RANK"));
  forwardAll(comm, rank, nranks);
  T_CHECK(ncclCommDestroy(comm) == ncclSuccess, "ncclCommDestroy");
  return 0;
}

static int rankGroup(int rank, int nranks, void* arg) {
  ncclComm_t comm = initComm(arg, rank);
  size_t count = winningCount(nranks);
  T_CHECK(ncclGroupStart() == ncclSuccess, "ncclGroupStart");
  int inGroup = checkedCall(relayCollectiveAllReduce, relayFloat32, relaySum, count, rank, nranks, comm, 0);
  T_CHECK(ncclGroupEnd() == ncclSuccess, "ncclGroupEnd");
  T_CHECK(!inGroup, "rank %d: an all-reduce inside a group was taken by relaycc", rank);
  T_CHECK(findCall("ncclGroupStart", 0) >= 0 && findCall("ncclGroupEnd", 0) >= 0,
          "the group was not forwarded");
  /* Nested groups: still inside until the outer end. */
  T_CHECK(ncclGroupStart() == ncclSuccess && ncclGroupStart() == ncclSuccess, "ncclGroupStart");
  T_CHECK(ncclGroupEnd() == ncclSuccess, "ncclGroupEnd");
  inGroup = checkedCall(relayCollectiveAllGather, relayFloat32, relaySum, 3, rank, nranks, comm, 0);
  T_CHECK(ncclGroupEnd() == ncclSuccess, "ncclGroupEnd");
  T_CHECK(!inGroup, "rank %d: an all-gather inside a nested group was taken by relaycc", rank);
  T_CHECK(checkedCall(relayCollectiveAllReduce, relayFloat32, relaySum, count, rank, nranks, comm, 0),
          "rank %d: the same all-reduce outside the group was not taken", rank);
  T_CHECK(ncclCommDestroy(comm) == ncclSuccess, "ncclCommDestroy");
  return 0;
}

static int rankDisabled(int rank, int nranks, void* arg) {
  ncclComm_t comm = initComm(arg, rank);
  /* No vote at init: RELAYCC_SHIM=0 adds no NCCL call of its own. */
  T_CHECK(countCalls("ncclAllGather") == 0, "rank %d: %d all-gathers at init with RELAYCC_SHIM=0", rank,
          countCalls("ncclAllGather"));
  size_t count = winningCount(nranks);
  for (int coll = 0; coll < RELAY_NUM_LAYOUT_COLLS; coll++)
    T_CHECK(!checkedCall((relayCollective_t)coll, relayFloat32, relaySum, count, rank, nranks, comm, 0),
            "rank %d: %s taken with RELAYCC_SHIM=0", rank, kNcclNames[coll]);
  forwardAll(comm, rank, nranks);
  T_CHECK(ncclCommDestroy(comm) == ncclSuccess, "ncclCommDestroy");
  return 0;
}

/* The one-shot and bw regions declined (RELAYCC_ONESHOT_FAULT_RANK, RELAYCC_BW_FAULT_RANK: a rank's
 * IPC refused, as in a container): a call whose chosen route is one of them is NCCL's on the user's comm
 * (issue 26.6), not another relaycc route; calls routed elsewhere are still taken. */
static int rankDeclined(int rank, int nranks, void* arg) {
  ncclComm_t comm = initComm(arg, rank);
  int forwarded = 0, taken = 0;
  for (int coll = 0; coll < RELAY_NUM_LAYOUT_COLLS; coll++)
    for (size_t count = 1; count <= (1u << 15); count *= 8) {
      int route = chosenRoute((relayCollective_t)coll, nranks, count, relayFloat32, relaySum);
      if (route == relayRouteNative) continue;
      int declined = route == relayRouteOneShot || route == relayRouteBw;
      int got = checkedCall((relayCollective_t)coll, relayFloat32, relaySum, count, rank, nranks, comm, 0);
      T_CHECK(got == !declined, "rank %d: %s count %zu (route %s, its region declined): %s", rank,
              kNcclNames[coll], count, relayRouteName(route), got ? "taken by relaycc" : "forwarded");
      forwarded += !got;
      taken += got;
    }
  T_CHECK(forwarded > 0, "rank %d: no call's route was the one-shot or bw (the case tests nothing)", rank);
  if (rank == 0)
    printf("declined: %d calls forwarded after their region declined, %d taken\n", forwarded, taken);
  T_CHECK(ncclCommDestroy(comm) == ncclSuccess, "ncclCommDestroy");
  return 0;
}

/* Calls on the comm's first stream are relaycc's; on another stream NCCL's, which orders a comm's calls
 * across streams (issue 26.7); back on the first stream, relaycc's again. */
static int rankStreams(int rank, int nranks, void* arg) {
  ncclComm_t comm = initComm(arg, rank);
  size_t count = winningCount(nranks);
  cudaStream_t a = (cudaStream_t)0x5a00, b = (cudaStream_t)0x5b00;
  gStream = a;
  T_CHECK(checkedCall(relayCollectiveAllReduce, relayFloat32, relaySum, count, rank, nranks, comm, 0),
          "rank %d: the first all-reduce (stream %p) was not taken", rank, (void*)a);
  gStream = b;
  for (int coll = 0; coll < RELAY_NUM_LAYOUT_COLLS; coll++) {
    size_t n = winningCountOf((relayCollective_t)coll, nranks);
    T_CHECK(!checkedCall((relayCollective_t)coll, relayFloat32, relaySum, n, rank, nranks, comm, 0),
            "rank %d: %s on a second stream was taken by relaycc", rank, kNcclNames[coll]);
    const fakeNcclCall* last = fakeNcclGetCall(fakeNcclNumCalls() - 1);
    T_CHECK(last->a[6] == (uintptr_t)b, "rank %d: %s reached NCCL on stream %#lx, the caller's is %p", rank,
            kNcclNames[coll], (unsigned long)last->a[6], (void*)b);
  }
  gStream = a;
  T_CHECK(checkedCall(relayCollectiveAllReduce, relayFloat32, relaySum, count, rank, nranks, comm, 0),
          "rank %d: an all-reduce back on the first stream was not taken", rank);
  gStream = NULL;
  T_CHECK(ncclCommDestroy(comm) == ncclSuccess, "ncclCommDestroy");
  return 0;
}

/* A late rank (issue 26.2): rank 1 enters an all-reduce relaycc takes 3 s after rank 0. With no
 * RELAYCC_TIMEOUT_MS every rank gets the right sum and no error. With the user's RELAYCC_TIMEOUT_MS=1000
 * rank 0 gives up: the call and ncclCommGetAsyncError report an error (never ncclSuccess or
 * ncclInProgress), its input is intact; rank 1 gets the right sum or an error that its
 * ncclCommGetAsyncError reports too. Then the user aborts the comm, as a watchdog does. */
static int rankLate(int rank, int nranks, void* arg) {
  ncclComm_t comm = initComm(arg, rank);
  int userDeadline = getenv("RELAYCC_TIMEOUT_MS") != NULL;
  size_t count = winningCount(nranks);
  size_t es = sizeof(float);
  float* send = malloc(count * es);
  float* keep = malloc(count * es);
  float* recv = malloc(count * es);
  float* want = malloc(count * es);
  T_CHECK(send && keep && recv && want, "out of memory");
  tc_fill_input(relayCollectiveAllReduce, relayFloat32, relaySum, nranks, rank, count, send);
  memcpy(keep, send, count * es);
  memset(recv, 0xA5, count * es);
  tc_expected(relayCollectiveAllReduce, relayFloat32, relaySum, nranks, rank, count, want);
  /* The comm's first collective attaches it (its vote has no deadline whatever the setting). */
  checkedCall(relayCollectiveAllReduce, relayFloat32, relaySum, count, rank, nranks, comm, 0);
  if (rank == 1) sleep(3);
  ncclResult_t r = ncclAllReduce(send, recv, count, ncclFloat32, ncclSum, comm, NULL);
  T_CHECK(countCallsInto("ncclAllReduce", recv) == 0, "rank %d: the all-reduce was not relaycc's", rank);
  ncclResult_t ae = ncclSuccess;
  T_CHECK(ncclCommGetAsyncError(comm, &ae) == ncclSuccess, "ncclCommGetAsyncError");
  T_CHECK(memcmp(send, keep, count * es) == 0, "rank %d: the call changed its input", rank);
  size_t bad = 0;
  if (!userDeadline || (rank == 1 && r == ncclSuccess)) {
    T_CHECK(r == ncclSuccess && ae == ncclSuccess, "rank %d: a late peer, no deadline set: -> %d, async %d",
            rank, (int)r, (int)ae);
    T_CHECK(tc_compare(relayFloat32, recv, want, count, &bad) == 0, "rank %d: wrong sum at %zu", rank, bad);
  } else {
    T_CHECK(r != ncclSuccess || rank == 1, "rank 0: its peer 3 s late, RELAYCC_TIMEOUT_MS=%s: ncclSuccess",
            getenv("RELAYCC_TIMEOUT_MS"));
    T_CHECK(ae != ncclSuccess && ae != ncclInProgress, "rank %d: -> %d but ncclCommGetAsyncError says %d",
            rank, (int)r, (int)ae);
  }
  printf("rank %d: late: -> %d, async error %d\n", rank, (int)r, (int)ae);
  if (userDeadline) {
    /* relaycc failed on rank 0: it keeps routing as rank 1 does (issue 26.3), so the next call is
     * relaycc's on both ranks and fails on both (rank 0 at once, rank 1 by its deadline), reported
     * through ncclCommGetAsyncError; forwarded alone, rank 0's call would meet rank 1's relaycc call
     * with NCCL's. */
    if (rank == 0) sleep(4); /* rank 1 ends the late call first */
    memset(recv, 0xA5, count * es);
    r = ncclAllReduce(send, recv, count, ncclFloat32, ncclSum, comm, NULL);
    T_CHECK(countCallsInto("ncclAllReduce", recv) == 0,
            "rank %d: the call after relaycc's failure was "
            "forwarded to NCCL while its peer routes it",
            rank);
    T_CHECK(ncclCommGetAsyncError(comm, &ae) == ncclSuccess, "ncclCommGetAsyncError");
    T_CHECK(r != ncclSuccess && ae != ncclSuccess && ae != ncclInProgress,
            "rank %d: the call after the failure -> %d, async error %d (want errors)", rank, (int)r, (int)ae);
    T_CHECK(memcmp(send, keep, count * es) == 0, "rank %d: the failed call changed its input", rank);
  }
  T_CHECK(ncclCommAbort(comm) == ncclSuccess, "ncclCommAbort");
  free(send);
  free(keep);
  free(recv);
  free(want);
  return 0;
}

/* Per-process settings that differ between ranks (issue 26.3) are in the attach vote: rank 0 takes only
 * all-gathers (RELAYCC_SHIM_COLLS=allgather) or nothing (RELAYCC_SHIM=0), rank 1 everything; every rank
 * takes what all take, the rest is NCCL's on every rank, and every result is right. The settings are
 * set here, before this rank's first NCCL call reads them. */
static int rankSettings(int rank, int nranks, void* arg) {
  const char* mine = getenv("SHIM_TEST_RANK0_SETTING");
  const char* eq = mine ? strchr(mine, '=') : NULL;
  T_CHECK(eq && eq - mine < 63, "SHIM_TEST_RANK0_SETTING=%s is not K=V", mine ? mine : "(unset)");
  char name[64];
  snprintf(name, sizeof name, "%.*s", (int)(eq - mine), mine);
  if (rank == 0) setenv(name, eq + 1, 1);
  ncclComm_t comm = initComm(arg, rank);
  int allgatherOnly = strcmp(name, "RELAYCC_SHIM_COLLS") == 0;
  for (int round = 0; round < 2; round++)
    for (int coll = 0; coll < RELAY_NUM_LAYOUT_COLLS; coll++) {
      size_t count = winningCountOf((relayCollective_t)coll, nranks);
      int want = allgatherOnly && coll == relayCollectiveAllGather;
      int got = checkedCall((relayCollective_t)coll, relayFloat32, relaySum, count, rank, nranks, comm, 0);
      T_CHECK(got == want, "rank %d: %s %s with rank 0's %s", rank, kNcclNames[coll],
              got ? "taken" : "forwarded", mine);
    }
  T_CHECK(ncclCommDestroy(comm) == ncclSuccess, "ncclCommDestroy");
  return 0;
}

/* The profiling twins (issue 26.5): pncclAllReduce is routed as ncclAllReduce, pncclGroupStart/End
 * count as a group, and ncclGroupSimulateEnd closes the group it ends (a call after it is relaycc's
 * again). */
static int rankTwins(int rank, int nranks, void* arg) {
  ncclComm_t comm = initComm(arg, rank);
  size_t count = winningCount(nranks);
  float *send = malloc(count * sizeof(float)), *recv = malloc(count * sizeof(float));
  float* want = malloc(count * sizeof(float));
  T_CHECK(send && recv && want, "out of memory");
  tc_fill_input(relayCollectiveAllReduce, relayFloat32, relaySum, nranks, rank, count, send);
  tc_expected(relayCollectiveAllReduce, relayFloat32, relaySum, nranks, rank, count, want);
  size_t bad = 0;
  for (int inGroup = 0; inGroup < 2; inGroup++) {
    memset(recv, 0xA5, count * sizeof(float));
    if (inGroup) T_CHECK(pncclGroupStart() == ncclSuccess, "pncclGroupStart");
    T_CHECK(pncclAllReduce(send, recv, count, ncclFloat32, ncclSum, comm, NULL) == ncclSuccess,
            "pncclAllReduce");
    if (inGroup) T_CHECK(pncclGroupEnd() == ncclSuccess, "pncclGroupEnd");
    int n = 0;
    for (int i = 0; i < fakeNcclNumCalls(); i++) n += strcmp(fakeNcclGetCall(i)->name, "pncclAllReduce") == 0;
    T_CHECK(n == inGroup, "rank %d: pncclAllReduce %s was %s", rank,
            inGroup ? "in a pncclGroupStart/End" : "alone", n ? "forwarded" : "taken by relaycc");
    if (!inGroup)
      T_CHECK(tc_compare(relayFloat32, recv, want, count, &bad) == 0, "rank %d: wrong sum at %zu", rank, bad);
  }
  ncclSimInfo_t info = NCCL_SIM_INFO_INITIALIZER;
  T_CHECK(ncclGroupStart() == ncclSuccess && ncclGroupSimulateEnd(&info) == ncclSuccess,
          "ncclGroupSimulateEnd");
  T_CHECK(checkedCall(relayCollectiveAllReduce, relayFloat32, relaySum, count, rank, nranks, comm, 0),
          "rank %d: after ncclGroupSimulateEnd an all-reduce is still counted inside a group", rank);
  free(send);
  free(recv);
  free(want);
  T_CHECK(pncclCommDestroy(comm) == ncclSuccess, "pncclCommDestroy");
  return 0;
}

#ifdef NCCL_REVOKE_DEFAULT
typedef struct {
  ncclComm_t comm;
  int delayMs;
} revokeArg;

static void* revokeSoon(void* p) {
  revokeArg* a = p;
  usleep((useconds_t)a->delayMs * 1000);
  T_CHECK(ncclCommRevoke(a->comm, NCCL_REVOKE_DEFAULT) == ncclSuccess, "ncclCommRevoke");
  return NULL;
}

/* ncclCommRevoke wakes relaycc (issue 26.5): rank 0 waits in a relaycc all-reduce for rank 1, which
 * comes 4 s late, with no deadline; another thread revokes the comm after 0.5 s and the call ends
 * then, with an error that ncclCommGetAsyncError reports. */
static int rankRevoke(int rank, int nranks, void* arg) {
  ncclComm_t comm = initComm(arg, rank);
  size_t count = winningCount(nranks);
  checkedCall(relayCollectiveAllReduce, relayFloat32, relaySum, count, rank, nranks, comm, 0); /* attach */
  float *send = calloc(count, sizeof(float)), *recv = calloc(count, sizeof(float));
  T_CHECK(send && recv, "out of memory");
  if (rank == 0) {
    revokeArg a = {comm, 500};
    pthread_t th;
    T_CHECK(pthread_create(&th, NULL, revokeSoon, &a) == 0, "pthread_create");
    uint64_t t0 = relayNowNs();
    ncclResult_t r = ncclAllReduce(send, recv, count, ncclFloat32, ncclSum, comm, NULL);
    double dt = (double)(relayNowNs() - t0) / 1e9;
    pthread_join(th, NULL);
    ncclResult_t ae = ncclSuccess;
    T_CHECK(ncclCommGetAsyncError(comm, &ae) == ncclSuccess, "ncclCommGetAsyncError");
    T_CHECK(
        r != ncclSuccess && dt < 2.5 && ae != ncclSuccess && ae != ncclInProgress,
        "rank 0: revoked during a relaycc wait: -> %d after %.2f s, async error %d (want an error at ~0.5 s)",
        (int)r, dt, (int)ae);
  } else {
    sleep(4); /* then aborts: rank 0's wait must have ended before, by the revoke */
  }
  free(send);
  free(recv);
  T_CHECK(ncclCommAbort(comm) == ncclSuccess, "ncclCommAbort");
  return 0;
}
#endif

/* Threads (issue 26.4; `make tsan` runs it under ThreadSanitizer): every rank has TH_COMMS comms, a
 * thread per comm attaches it (the votes of all three at once) and runs TH_CALLS all-reduces that
 * relaycc takes, each checked; a watchdog thread polls ncclCommGetAsyncError on every comm, as
 * PyTorch's does, and aborts the last comm while rank 0's thread waits in a call on it that rank 1
 * never makes (no deadline: the abort ends it). The other comms' calls stay right throughout. */
#define TH_CALLS 60
typedef struct {
  ncclComm_t comm;
  int rank, nranks, last;
  size_t
      count; /* a size relaycc takes (computed before the threads: the router's test helper is not theirs) */
  atomic_int calls;   /* calls completed */
  atomic_int waiting; /* rank 0, last comm: the call that waits for the abort has started */
  ncclResult_t lastResult;
} thComm;

static void* thCaller(void* p) {
  thComm* t = p;
  size_t count = t->count;
  float *send = malloc(count * sizeof(float)), *recv = malloc(count * sizeof(float));
  float* want = malloc(count * sizeof(float));
  T_CHECK(send && recv && want, "out of memory");
  tc_fill_input(relayCollectiveAllReduce, relayFloat32, relaySum, t->nranks, t->rank, count, send);
  tc_expected(relayCollectiveAllReduce, relayFloat32, relaySum, t->nranks, t->rank, count, want);
  for (int i = 0; i < TH_CALLS; i++) {
    memset(recv, 0xA5, count * sizeof(float));
    T_CHECK(ncclAllReduce(send, recv, count, ncclFloat32, ncclSum, t->comm, NULL) == ncclSuccess,
            "rank %d: a threaded all-reduce failed", t->rank);
    size_t bad = 0;
    T_CHECK(tc_compare(relayFloat32, recv, want, count, &bad) == 0,
            "rank %d: threaded all-reduce %d wrong at %zu", t->rank, i, bad);
    atomic_fetch_add(&t->calls, 1);
  }
  if (t->last && t->rank == 0) { /* one call more, which rank 1 never makes: it ends by the abort */
    atomic_store(&t->waiting, 1);
    t->lastResult = ncclAllReduce(send, recv, count, ncclFloat32, ncclSum, t->comm, NULL);
  }
  free(send);
  free(recv);
  free(want);
  return NULL;
}

static int rankThreads(int rank, int nranks, void* arg) {
  const job* j = arg;
  thComm t[TH_COMMS];
  pthread_t th[TH_COMMS];
  for (int k = 0; k < TH_COMMS; k++) {
    memset(&t[k], 0, sizeof t[k]);
    T_CHECK(ncclCommInitRank(&t[k].comm, nranks, j->more[k], rank) == ncclSuccess, "ncclCommInitRank %d", k);
    t[k].rank = rank;
    t[k].nranks = nranks;
    t[k].last = k == TH_COMMS - 1;
    t[k].count = winningCount(nranks);
  }
  for (int k = 0; k < TH_COMMS; k++)
    T_CHECK(pthread_create(&th[k], NULL, thCaller, &t[k]) == 0, "pthread_create");
  /* The watchdog: polls every comm; the last one's abort comes once its calls are done (rank 1) or
   * rank 0's extra call has waited 300 ms in relaycc. */
  thComm* l = &t[TH_COMMS - 1];
  int aborted = 0, polls = 0;
  uint64_t t0 = relayNowNs(), since = 0;
  while (!aborted && relayNowNs() - t0 < 60000000000ull) {
    int lastDone = atomic_load(&l->calls) == TH_CALLS;
    for (int k = 0; k < TH_COMMS - 1 + !aborted; k++) {
      ncclResult_t ae = ncclSuccess;
      T_CHECK(ncclCommGetAsyncError(t[k].comm, &ae) == ncclSuccess, "ncclCommGetAsyncError");
      /* Once the last comm's calls are done, the peer may abort it first (both ranks wait 300 ms,
       * either may win: 1 run in about 25 on the H200's 16 cores, 2026-12-02), and then its async
       * error rightly reports the peer's abort (ncclRemoteError). Before that, and on the other
       * comms throughout, it must say nothing. */
      T_CHECK(ae == ncclSuccess || (k == TH_COMMS - 1 && lastDone), "rank %d: comm %d reports async error %d",
              rank, k, (int)ae);
      polls++;
    }
    int ready = rank == 0 ? atomic_load(&l->waiting) : lastDone;
    if (ready && !since) since = relayNowNs();
    if (since && relayNowNs() - since > 300000000ull) {
      T_CHECK(ncclCommAbort(l->comm) == ncclSuccess, "ncclCommAbort");
      aborted = 1;
    }
    usleep(1000);
  }
  T_CHECK(aborted, "rank %d: the last comm's calls did not finish within 60 s", rank);
  for (int k = 0; k < TH_COMMS; k++) pthread_join(th[k], NULL);
  if (rank == 0)
    T_CHECK(l->lastResult != ncclSuccess, "rank 0: the call the abort ended answered ncclSuccess");
  for (int k = 0; k < TH_COMMS - 1; k++) {
    T_CHECK(atomic_load(&t[k].calls) == TH_CALLS, "rank %d: comm %d ran %d calls", rank, k,
            atomic_load(&t[k].calls));
    T_CHECK(ncclCommDestroy(t[k].comm) == ncclSuccess, "ncclCommDestroy");
  }
  printf("rank %d: threads: %d comms x %d calls, %d async-error polls, one abort\n", rank, TH_COMMS, TH_CALLS,
         polls);
  return 0;
}

/* RELAYCC_SHIM_COLLS=allgather,a2a: only those two are taken. */
static int rankColls(int rank, int nranks, void* arg) {
  ncclComm_t comm = initComm(arg, rank);
  for (int coll = 0; coll < RELAY_NUM_LAYOUT_COLLS; coll++) {
    int allowed = coll == relayCollectiveAllGather || coll == relayCollectiveAllToAll;
    size_t count = winningCountOf((relayCollective_t)coll, nranks);
    int got = checkedCall((relayCollective_t)coll, relayFloat32, relaySum, count, rank, nranks, comm, 0);
    T_CHECK(got == allowed, "rank %d: %s %s with RELAYCC_SHIM_COLLS=%s", rank, kNcclNames[coll],
            got ? "taken" : "forwarded", getenv("RELAYCC_SHIM_COLLS"));
  }
  T_CHECK(ncclCommDestroy(comm) == ncclSuccess, "ncclCommDestroy");
  return 0;
}

/* RELAYCC_SHIM_NCCL names no library: every call fails with ncclSystemError
 * and nothing reaches the library the program linked. */
static void caseMissing(void) {
  int v = 0;
  T_CHECK(ncclGetVersion(&v) == ncclSystemError, "ncclGetVersion without a library did not fail");
  T_CHECK(ncclAllReduce(NULL, NULL, 1, ncclFloat32, ncclSum, NULL, NULL) == ncclSystemError,
          "ncclAllReduce without a library did not fail");
  T_CHECK(fakeNcclNumCalls() == 0, "%d calls reached the linked library", fakeNcclNumCalls());
  printf("missing: every call answers ncclSystemError\n");
}

/* relaycc's own loader (not the shim's): RELAYCC_NCCL_LIB when set, else the
 * library the process loaded (here the fake). */
static void caseLoader(void) {
  const char* forced = getenv("RELAYCC_NCCL_LIB");
  relayResult_t r = relayNcclLoad(NULL);
  if (forced) {
    T_CHECK(r == relaySystemError, "relayNcclLoad with RELAYCC_NCCL_LIB=%s -> %s", forced,
            relayGetErrorString(r));
    T_CHECK(strstr(relayGetLastError(NULL), forced), "the error does not name %s: %s", forced,
            relayGetLastError(NULL));
    relayComm_t c = NULL;
    T_CHECK(relayCommInitNccl(&c, (ncclComm_t)&c, NULL) == relaySystemError && !c,
            "relayCommInitNccl without NCCL did not fail at init");
    printf("loader: %s\n", relayGetLastError(NULL));
    return;
  }
  T_OK(r);
  T_CHECK(strstr(relayNccl.path, "fakenccl") && relayNccl.version == NCCL_VERSION_CODE,
          "loaded %s version %d, not the fake the program linked", relayNccl.path, relayNccl.version);
  T_CHECK(relayNccl.ncclAllReduce && relayNccl.pncclAllReduce && relayNccl.ncclResetDebugInit,
          "the table misses functions the fake has");
  printf("loader: %s, NCCL %d\n", relayNccl.path, relayNccl.version);
}

/* ---- older NCCL releases ---------------------------------------------------- */

/* RELAYCC_SHIM=0 with the release's library: every call the release has reaches it unchanged. */
static int rankVersionOff(int rank, int nranks, void* arg) {
  ncclComm_t comm = initComm(arg, rank);
  forwardAll(comm, rank, nranks);
  T_CHECK(ncclCommDestroy(comm) == ncclSuccess, "ncclCommDestroy");
  return 0;
}

/* The shim on (test hook): relaycc takes what it wins at when the release has what relaycc needs
 * (ncclSend, from 2.7), and with an older one every call is forwarded, results right either way. */
static int rankVersionOn(int rank, int nranks, void* arg) {
  ncclComm_t comm = initComm(arg, rank);
  int code = libVersion(), usable = code >= 2700;
  for (int coll = 0; coll < RELAY_NUM_LAYOUT_COLLS; coll++) {
    if (coll == relayCollectiveAllToAll && code < 22800) continue; /* the release has no ncclAlltoAll */
    size_t count = winningCountOf((relayCollective_t)coll, nranks);
    int got = checkedCall((relayCollective_t)coll, relayFloat32, relaySum, count, rank, nranks, comm, 0);
    T_CHECK(got == usable, "rank %d: NCCL %d: %s %s", rank, code, kNcclNames[coll],
            got ? "taken by relaycc from a library it cannot use" : "forwarded although relaycc wins");
  }
  T_CHECK(ncclCommDestroy(comm) == ncclSuccess, "ncclCommDestroy");
  return 0;
}

/* ---- the process environment --------------------------------------------------- */

extern char** environ;

/* The environment as text, one "K=V\n" per entry in order (a copy: compared after the inits). */
static char* environText(void) {
  size_t len = 1;
  for (char** e = environ; *e; e++) len += strlen(*e) + 1;
  char* t = malloc(len);
  T_CHECK(t, "out of memory");
  t[0] = 0;
  for (char** e = environ; *e; e++) strcat(strcat(t, *e), "\n");
  return t;
}

/* relaycc's own NCCL inits leave the process environment as they found it, whatever they answer (no
 * GPU here: they fail at the device step, after where the NCCL_NVLS_ENABLE default was exported). */
static void caseEnviron(void) {
  unsetenv("NCCL_NVLS_ENABLE");
  char* before = environText();
  relayNcclUniqueId id;
  T_OK(relayNcclGetUniqueId(&id));
  relayComm_t c = NULL;
  relayResult_t r1 = relayCommInitNcclRank(&c, 1, &id, 0, -1, NULL);
  if (c) relayCommDestroy(c);
  c = NULL;
  char job[128];
  relayResult_t r2 = relayCommInitNcclShm(&c, 1, 0, relayLaunchJobName("shimenv", job, sizeof job), -1, NULL);
  if (c) relayCommDestroy(c);
  char* after = environText();
  T_CHECK(!getenv("NCCL_NVLS_ENABLE"), "an init set NCCL_NVLS_ENABLE=%s", getenv("NCCL_NVLS_ENABLE"));
  T_CHECK(strcmp(before, after) == 0, "the inits changed the process environment:\nbefore:\n%s\nafter:\n%s",
          before, after);
  printf("environ: unchanged after relayCommInitNcclRank (%s) and relayCommInitNcclShm (%s)\n",
         relayGetErrorString(r1), relayGetErrorString(r2));
  free(before);
  free(after);
}

/* A case of the "NCCL program": one process (single), or nranks forked ranks of one rank body; fake:
 * the release whose library it runs with (fakenccl-<fake>, re-executed with it first). */
typedef struct {
  void (*single)(void);
  relayRankFn fn;
  int nranks;
  const char* fake;
  int code;
  const char* name;
} shimCase;

/* Run this case again as a program linked to the release's library: the loader takes libnccl.so.2 from
 * LD_LIBRARY_PATH before the test's run path. */
static void execWithFake(const shimCase* c) {
  char dir[4096], code[16];
  snprintf(dir, sizeof dir, "%s/fakenccl-%s", RELAY_FAKE_NCCL_DIR, c->fake);
  snprintf(code, sizeof code, "%d", c->code);
  setenv("LD_LIBRARY_PATH", dir, 1);
  setenv("SHIM_TEST_FAKE_CODE", code, 1);
  fflush(NULL);
  execl("/proc/self/exe", "test_shim", c->name, (char*)NULL);
  T_CHECK(0, "cannot run %s again with %s", c->name, dir);
}

/* After execWithFake: the program and the shim both have the release's library. */
static void checkFake(const shimCase* c) {
  Dl_info where;
  T_CHECK(dladdr((void*)fakeNcclNumCalls, &where) && strstr(where.dli_fname, c->fake),
          "the program runs with %s, not the fake of NCCL %s", where.dli_fname, c->fake);
  int v = 0;
  T_CHECK(ncclGetVersion(&v) == ncclSuccess && v == c->code, "ncclGetVersion through the shim -> %d, want %d",
          v, c->code);
}

static int runShim(void* arg) {
  const shimCase* c = arg;
  if (c->fake && !getenv("SHIM_TEST_FAKE_CODE")) execWithFake(c);
  if (c->fake) checkFake(c);
  if (c->single) {
    c->single();
    return 0;
  }
  T_CHECK(c->nranks >= 2 && c->nranks <= 8, "nranks %d is not in [2, 8]", c->nranks);
  /* The hook's shm job must be this launch's alone (ctest runs cases side by
   * side); the shim reads it at the first NCCL call, below. */
  char jobName[128];
  if (getenv("RELAYCC_SHIM_TEST_SHM"))
    setenv("RELAYCC_SHIM_TEST_SHM", relayLaunchJobName("shim", jobName, 128), 1);
  job j;
  j.nranks = c->nranks;
  if (c->fn == rankSettings) {
    /* Each rank reads its own settings at its first NCCL call: none through the shim before the fork.
     * The fake's own function (looked up in its library) makes the id. */
    Dl_info fake;
    T_CHECK(dladdr((void*)fakeNcclNumCalls, &fake), "dladdr of the fake");
    void* h = dlopen(fake.dli_fname, RTLD_NOW | RTLD_NOLOAD);
    ncclResult_t (*getId)(ncclUniqueId*) =
        h ? (ncclResult_t(*)(ncclUniqueId*))dlsym(h, "ncclGetUniqueId") : NULL;
    T_CHECK(getId && getId(&j.id) == ncclSuccess, "the fake's ncclGetUniqueId");
  } else {
    T_CHECK(ncclGetUniqueId(&j.id) == ncclSuccess, "ncclGetUniqueId");
  }
  for (int k = 0; c->fn == rankThreads && k < TH_COMMS; k++)
    T_CHECK(ncclGetUniqueId(&j.more[k]) == ncclSuccess, "ncclGetUniqueId");
  t_run_ranks(c->nranks, c->fn, &j, TIMEOUT_S);
  printf("%d ranks ok\n", c->nranks);
  return 0;
}

/* <case>_<ranks>; the CTest entries add the preload (tests/shim/shim.cmake). The same case under other
 * settings takes _env. */
#define SHIM1(nm, f, e) \
  { .name = nm, .run = runShim, .arg = &(shimCase){.single = f, .nranks = 2}, .timeoutS = 300, .env = e }
#define SHIM(nm, f, n, e) \
  { .name = nm, .run = runShim, .arg = &(shimCase){.fn = f, .nranks = n}, .timeoutS = 300, .env = e }
#define SHIMV(nm, f, n, v, vc, e)                                                                            \
  {                                                                                                          \
    .name = nm, .run = runShim, .arg = &(shimCase){.fn = f, .nranks = n, .fake = v, .code = vc, .name = nm}, \
    .timeoutS = 300, .env = e                                                                                \
  }
/* The routed cases' prediction (chosenRoute) prices the one copy from its floors; the transport also times
 * a read at setup and drops the path where it is slow (RELAYCC_SHM_CMA_SLOW_NS), which the model cannot
 * know ahead: the floors alone decide here, as they do in the prediction. */
#define SHM "RELAYCC_SHIM_TEST_SHM=1;RELAYCC_SHM_CMA_SLOW_NS=0"
static const tCase kCases[] = {
    SHIM1("symbols_2", caseSymbols, NULL),
    SHIM1("missing_2", caseMissing, "RELAYCC_SHIM_NCCL=/nonexistent/libnccl.so.2"),
    SHIM1("loader_2", caseLoader, NULL),
    SHIM1("loader_2_env", caseLoader, "RELAYCC_NCCL_LIB=/nonexistent/libnccl.so.2"),
    SHIM("forward_2", rankForward, 2, "CUDA_VISIBLE_DEVICES="),
    SHIM("forward_3", rankForward, 3, "CUDA_VISIBLE_DEVICES="),
    SHIM("decline_3", rankDecline, 3, SHM ";RELAYCC_SHIM_TEST_FAIL_RANK=1"),
    SHIM("decline_2", rankDecline, 2, SHM ";RELAYCC_SHIM_TEST_FAIL_RANK=0"),
    SHIM("group_2", rankGroup, 2, SHM),
    SHIM("disabled_2", rankDisabled, 2, SHM ";RELAYCC_SHIM=0"),
    SHIM("colls_3", rankColls, 3, SHM ";RELAYCC_SHIM_COLLS=allgather,a2a"),
    SHIM("routed_2", rankRouted, 2, SHM),
    SHIM("declined_2", rankDeclined, 2, SHM ";RELAYCC_ONESHOT_FAULT_RANK=1;RELAYCC_BW_FAULT_RANK=0"),
    SHIM("streams_2", rankStreams, 2, SHM),
    SHIM("late_2", rankLate, 2, SHM),
    SHIM("late_2_env", rankLate, 2, SHM ";RELAYCC_TIMEOUT_MS=1000"),
    SHIM("twins_2", rankTwins, 2, SHM),
    SHIM("threads_2", rankThreads, 2, SHM),
#ifdef NCCL_REVOKE_DEFAULT
    SHIM("revoke_2", rankRevoke, 2, SHM),
#endif
    SHIM("settings_2", rankSettings, 2, SHM ";SHIM_TEST_RANK0_SETTING=RELAYCC_SHIM_COLLS=allgather"),
    SHIM("settings_2_off", rankSettings, 2, SHM ";SHIM_TEST_RANK0_SETTING=RELAYCC_SHIM=0"),
    SHIM("routed_3", rankRouted, 3, SHM),
    SHIM("routed_rooted_3", rankRoutedRooted, 3, SHM),
    SHIM("routed_4", rankRouted, 4, SHM ";RELAYCC_DEBUG=2"),
    SHIM1("environ_2", caseEnviron, "CUDA_VISIBLE_DEVICES="),
/* No GPU for the off cases, as for nccl221_forward_2: forwardAll's stream is a made-up value that
 * the fake never dereferences, but the comm's first collective asks CUDA whether that stream is
 * capturing before it attaches, and on a GPU machine (the H200, 2026-12-02) the runtime
 * dereferenced it: signal 11 in all five cases. Hidden GPUs make that query fail, which the shim
 * reads as a capture: the comm stays unattached and every call is forwarded, which is what RELAYCC_SHIM=0
 * asks. */
#define OFF "RELAYCC_SHIM=0;CUDA_VISIBLE_DEVICES="
    SHIMV("nccl228_off_2", rankVersionOff, 2, "2.28", 22809, OFF),
    SHIMV("nccl227_off_2", rankVersionOff, 2, "2.27", 22707, OFF),
    SHIMV("nccl221_off_2", rankVersionOff, 2, "2.21", 22105, OFF),
    SHIMV("nccl218_off_2", rankVersionOff, 2, "2.18", 21805, OFF),
    SHIMV("nccl26_off_2", rankVersionOff, 2, "2.6", 2604, OFF),
    SHIMV("nccl228_on_2", rankVersionOn, 2, "2.28", 22809, SHM),
    SHIMV("nccl227_on_2", rankVersionOn, 2, "2.27", 22707, SHM),
    SHIMV("nccl221_on_3", rankVersionOn, 3, "2.21", 22105, SHM),
    SHIMV("nccl218_on_2", rankVersionOn, 2, "2.18", 21805, SHM),
    SHIMV("nccl26_on_2", rankVersionOn, 2, "2.6", 2604, SHM),
    SHIMV("nccl221_forward_2", rankForward, 2, "2.21", 22105, "CUDA_VISIBLE_DEVICES="),
};

int main(int argc, char** argv) { return t_main(argc, argv, "shim", kCases, T_NCASES(kCases)); }
