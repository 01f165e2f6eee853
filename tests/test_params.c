/* The settings table: README's table is generated from it; agreed settings
 * that differ on one rank take rank 0's; an invalid one fails every rank. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "comm/comm.h"
#include "comm/common.h"
#include "comm/params.h"
#include "harness.h"
#include "params_md.h"

#define NRANKS 4
#define COUNT 16384 /* 64 KB of float: the all-reduce */

/* PROCESS rows main sets for the agreed case: neither changes what a shm comm does (the shim's
 * collectives, the NCCL library's path), and both are STRING rows. */
static const char* const kProcessSet[][2] = {{"RELAYCC_SHIM_COLLS", "allreduce,allgather"},
                                             {"RELAYCC_NCCL_LIB", "/nonexistent/libnccl-relaycc-test.so.2"}};

/* A valid value other than the default, for every AGREED row. */
static long long otherValue(int i) {
  const relayParamDef* d = &relayParamDefs[i];
  if (i == RELAY_P_SHM_NODES) return 2;         /* must divide NRANKS */
  if (i == RELAY_P_ONESHOT_THREADS) return 128; /* a set: 0, 128, 256, 512 */
  return d->def != d->lo ? d->lo : d->lo + 1;
}

/* Rank 1's environment differs from the others' in every agreed row. */
static int rankAgreed(int rank, int nranks, void* arg) {
  (void)arg;
  if (rank == 1)
    for (int i = 0; i < RELAY_P_COUNT; i++) {
      if (relayParamDefs[i].scope != RELAY_PSCOPE_AGREED) continue;
      char v[32];
      snprintf(v, sizeof v, "%lld", otherValue(i));
      setenv(relayParamDefs[i].name, v, 1);
    }
  /* The debug log (stderr) into a file this rank reads back. */
  FILE* log = tmpfile();
  T_CHECK(log, "tmpfile");
  int saved = dup(2);
  dup2(fileno(log), 2);
  relayConfig_t cfg = RELAY_CONFIG_INITIALIZER;
  cfg.timeoutMs = 8000;
  relayComm_t c = NULL;
  relayResult_t r = relayCommInitShm(&c, nranks, rank, t_job(), &cfg);
  fflush(stderr);
  dup2(saved, 2);
  T_CHECK(r == relaySuccess, "rank %d: init -> %s (%s)", rank, relayGetErrorString(r),
          relayGetLastError(NULL));
  for (int i = 0; i < RELAY_P_COUNT; i++)
    if (relayParamDefs[i].scope == RELAY_PSCOPE_AGREED)
      T_CHECK(relayParamInt(c, (relayParamId)i) == relayParamDefs[i].def,
              "rank %d: %s = %lld, not rank 0's %lld", rank, relayParamDefs[i].name,
              relayParamInt(c, (relayParamId)i), relayParamDefs[i].def);
  /* The call every rank must plan alike (rank 1 alone had the one-shot off). */
  int ranks[NRANKS] = {0, 1, 2, 3};
  relayLayout_t lay = {1, NRANKS, ranks};
  size_t counts[1] = {COUNT};
  float* send = malloc(sizeof(float) * COUNT);
  float* recv = malloc(sizeof(float) * COUNT);
  T_CHECK(send && recv, "oom");
  for (int i = 0; i < COUNT; i++) send[i] = (float)((rank + 1) * 1000 + i % 251);
  memset(recv, 0xEE, sizeof(float) * COUNT);
  T_OK(relayAllReduce(send, recv, counts, relayFloat32, relaySum, &lay, c, NULL));
  for (int i = 0; i < COUNT; i++) {
    float want = (float)(10000 + NRANKS * (i % 251)); /* (1+2+3+4) * 1000 + 4 * (i % 251) */
    T_CHECK(recv[i] == want, "rank %d: element %d = %g, want %g", rank, i, recv[i], want);
  }
  /* The log says which value was agreed, once per row, on rank 1 only. */
  long n = ftell(log);
  char* text = calloc(1, (size_t)n + 1);
  rewind(log);
  T_CHECK(text && fread(text, 1, (size_t)n, log) == (size_t)n, "read the log");
  for (int i = 0; i < RELAY_P_COUNT; i++) {
    if (relayParamDefs[i].scope != RELAY_PSCOPE_AGREED) continue;
    char want[160];
    snprintf(want, sizeof want, "rank %d: %s = ", rank, relayParamDefs[i].name);
    const char* hit = strstr(text, want);
    T_CHECK(rank == 1 ? hit && strstr(hit, "agreed on rank 0's") : !hit, "rank %d: the log on %s: %s", rank,
            relayParamDefs[i].name, text);
    if (rank == 1) T_CHECK(!strstr(hit + 1, want), "rank 1: %s logged twice", relayParamDefs[i].name);
  }
  /* Rank 0 printed the resolved table. */
  if (rank == 0)
    T_CHECK(strstr(text, "param RELAYCC_ONESHOT_MAX_BYTES = 1048576"), "rank 0: no table: %s", text);
  /* PROCESS rows as the process read them (main set them): STRING rows by their text, not "(unset)". */
  if (rank == 0)
    for (int i = 0; i < (int)(sizeof kProcessSet / sizeof kProcessSet[0]); i++) {
      char want[160];
      snprintf(want, sizeof want, "param %s = %s (env, process)\n", kProcessSet[i][0], kProcessSet[i][1]);
      T_CHECK(strstr(text, want), "rank 0: the table lacks \"%s\": %s", want, text);
    }
  free(text);
  fclose(log);
  free(send);
  free(recv);
  T_OK(relayCommDestroy(c));
  return 0;
}

/* One rank's invalid setting: every rank fails init at once (well under the deadline), that rank naming
 * the variable, the value and what is allowed, the others quoting the same text after its rank. */
typedef struct {
  int rank;        /* the rank whose environment has it */
  const char* var; /* the variable, set to value on that rank */
  const char* value;
  const char* own;  /* the text both that rank's error and the others' hold */
  const char* lead; /* what the others' error says before it */
} badSetting;

static const badSetting kDepth = {2, "RELAYCC_DEPTH", "99",
                                  "RELAYCC_DEPTH=99: expected an integer in [0, 64]", "rank 2 failed init: "};
/* The row's range is [0, 512]; its set is what the kernels have (issue 25.4: 100 was accepted). */
static const badSetting kThreads = {1, "RELAYCC_ONESHOT_THREADS", "100",
                                    "RELAYCC_ONESHOT_THREADS=100: expected one of 0, 128, 256, 512",
                                    "rank 1 failed init: "};
/* A PROCESS row (read before any comm, by the interposer too): not ignored, it fails init. */
static const badSetting kShim = {3, "RELAYCC_SHIM", "maybe",
                                 "RELAYCC_SHIM=maybe: expected 0 or 1 (also true/false, yes/no, on/off)",
                                 "rank 3 failed init: "};
/* A topology that does not load: the others quote the variable and the rank's reason. */
static const badSetting kTopo = {
    2, "RELAYCC_TOPO", "/nonexistent/relaycc.topo",
    "RELAYCC_TOPO / config.topo = \"/nonexistent/relaycc.topo\": ", "rank 2 could not load its topology: "};

static int rankInvalid(int rank, int nranks, void* arg) {
  const badSetting* b = arg;
  if (rank == b->rank) setenv(b->var, b->value, 1);
  relayConfig_t cfg = RELAY_CONFIG_INITIALIZER;
  cfg.timeoutMs = 20000;
  relayComm_t c = NULL;
  uint64_t t0 = relayNowNs();
  relayResult_t r = relayCommInitShm(&c, nranks, rank, t_job(), &cfg);
  const char* e = relayGetLastError(NULL);
  T_CHECK(c == NULL, "rank %d: a comm came back", rank);
  char want[512];
  if (rank == b->rank) snprintf(want, sizeof want, "relayCommInitShm (rank %d): %s", rank, b->own);
  else snprintf(want, sizeof want, "relayCommInitShm (rank %d): %s%s", rank, b->lead, b->own);
  T_CHECK(
      r == (rank == b->rank ? relayInvalidArgument : relayRemoteError) && strncmp(e, want, strlen(want)) == 0,
      "rank %d: %s (%s), want it to start with \"%s\"", rank, relayGetErrorString(r), e, want);
  T_CHECK((relayNowNs() - t0) / 1000000 < 5000, "rank %d: the failure waited %llu ms (deadline 20000)", rank,
          (unsigned long long)((relayNowNs() - t0) / 1000000));
  printf("rank %d: %s\n", rank, e);
  return 0;
}

/* README's configuration table is the generated one, between its markers. */
static int caseReadme(const char* path) {
  FILE* f = fopen(path, "r");
  T_CHECK(f, "open %s", path);
  fseek(f, 0, SEEK_END);
  long n = ftell(f);
  rewind(f);
  char* text = calloc(1, (size_t)n + 1);
  T_CHECK(text && fread(text, 1, (size_t)n, f) == (size_t)n, "read %s", path);
  fclose(f);
  const char* begin = "<!-- params:begin (generated: test_params markdown) -->\n";
  char* a = strstr(text, begin);
  char* b = a ? strstr(a, "<!-- params:end -->") : NULL;
  T_CHECK(a && b, "%s: no params markers", path);
  a += strlen(begin);
  char* gen = NULL;
  size_t genLen = 0;
  FILE* m = open_memstream(&gen, &genLen);
  relayParamsMarkdown(m);
  fclose(m);
  int same = (size_t)(b - a) == genLen && memcmp(a, gen, genLen) == 0;
  if (!same)
    fprintf(stderr,
            "README's table differs from the parameter table; regenerate it with "
            "`test_params markdown`:\n%s",
            gen);
  T_CHECK(same, "README table is stale");
  free(gen);
  free(text);
  printf("readme: ok\n");
  return 0;
}

static int runMarkdown(void) {
  relayParamsMarkdown(stdout);
  return 0;
}

static int runReadme(int argc, char** argv) {
  if (argc < 1) {
    fprintf(stderr, "usage: test_params readme README.md\n");
    return 2;
  }
  return caseReadme(argv[0]);
}

/* The PROCESS rows set (kProcessSet): the table must show them by their text and source. */
static int runAgreed(void) {
  for (int i = 0; i < (int)(sizeof kProcessSet / sizeof kProcessSet[0]); i++)
    setenv(kProcessSet[i][0], kProcessSet[i][1], 1);
  t_run_ranks(NRANKS, rankAgreed, NULL, 120);
  return 0;
}

/* markdown prints README's configuration table (by hand). agreed logs the agreement: RELAYCC_DEBUG is
 * process scope, set before any relaycc call. */
static const tCase kCases[] = {
    {.name = "markdown", .fn = runMarkdown, .manual = 1},
    {.name = "readme", .main = runReadme, .args = "@SOURCE_DIR@/README.md", .timeoutS = 300},
    {.name = "agreed", .fn = runAgreed, .timeoutS = 300, .env = "RELAYCC_DEBUG=INFO"},
    {.name = "invalid",
     .rank = rankInvalid,
     .arg = (void*)&kDepth,
     .ranks = NRANKS,
     .deadlineS = 120,
     .timeoutS = 300},
    {.name = "invalid-set",
     .rank = rankInvalid,
     .arg = (void*)&kThreads,
     .ranks = NRANKS,
     .deadlineS = 120,
     .timeoutS = 300},
    {.name = "invalid-process",
     .rank = rankInvalid,
     .arg = (void*)&kShim,
     .ranks = NRANKS,
     .deadlineS = 120,
     .timeoutS = 300},
    {.name = "invalid-topo",
     .rank = rankInvalid,
     .arg = (void*)&kTopo,
     .ranks = NRANKS,
     .deadlineS = 120,
     .timeoutS = 300},
};

int main(int argc, char** argv) { return t_main(argc, argv, "params", kCases, T_NCASES(kCases)); }
