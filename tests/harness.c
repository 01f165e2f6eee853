#include "harness.h"

#include <errno.h>
#include <linux/capability.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

static char t_jobName[128];

const char* t_job(void) { return t_jobName; }

void t_run_ranks(int nranks, relayRankFn fn, void* arg, int timeoutSec) {
  relayLaunchJobName("t", t_jobName, sizeof t_jobName);
  relayLaunchResult res;
  if (relayLaunchRanks(nranks, fn, arg, timeoutSec * 1000, 3000, &res, NULL) != 0) {
    fprintf(stderr, "FAIL: launch of %d ranks: %s\n", nranks, res.message);
    exit(1);
  }
}

int t_launch(int nranks, relayRankFn fn, void* arg, int timeoutSec, int graceMs, int* codes) {
  relayLaunchJobName("t", t_jobName, sizeof t_jobName);
  relayLaunchResult res;
  int rc = relayLaunchRanks(nranks, fn, arg, timeoutSec * 1000, graceMs, &res, codes);
  if (rc) fprintf(stderr, "launch: %s\n", res.message);
  return rc;
}

relayComm_t t_comm(int rank, int nranks, const relayConfig_t* cfg) {
  relayComm_t comm = NULL;
  relayResult_t r = relayCommInitShm(&comm, nranks, rank, t_jobName, cfg);
  T_CHECK(r == relaySuccess, "rank %d: relayCommInitShm: %s (%s)", rank, relayGetErrorString(r),
          relayGetLastError(NULL));
  return comm;
}

unsigned long long t_rand(unsigned long long* s) {
  unsigned long long z = (*s += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

/* ---------------------------------------------------------------- case table */

/* What --list prints becomes CMake code (cmake/TestCasesList.cmake): a word is one CMake argument, so it
 * holds no white space and nothing CMake or a CMake list would read (quote, backslash, ';', brackets, '$',
 * '#'). */
static int t_wordOk(const char* s, size_t n) {
  if (n == 0) return 0;
  for (size_t i = 0; i < n; i++)
    if (s[i] <= ' ' || s[i] > '~' || strchr("\"\\;[]$#", s[i])) return 0;
  return 1;
}

/* Every space-separated word of s is a word; NULL is an empty list. */
static int t_wordsOk(const char* s) {
  if (!s) return 1;
  for (const char* p = s; *p;) {
    if (*p == ' ') {
      p++;
      continue;
    }
    size_t n = strcspn(p, " ");
    if (!t_wordOk(p, n)) return 0;
    p += n;
  }
  return 1;
}

/* The entries of a row's env ("K=V;K=V"): the next one from e and its length, NULL after the last. */
static const char* t_envNext(const char* e, size_t* len) {
  if (!e) return NULL;
  while (*e == ';') e++;
  *len = strcspn(e, ";");
  return *e ? e : NULL;
}

static void t_ctestName(const char* prefix, const tCase* c, char* buf, size_t len) {
  if (c->ctest) snprintf(buf, len, "%s", c->ctest);
  else snprintf(buf, len, "%s_%s", prefix, c->name);
}

/* A table CMake can register: the first problem, or NULL. Checked on every --list, so a bad row fails the
 * build (the POST_BUILD step runs --list). */
static const char* t_tableError(const char* prefix, const tCase* cases, int n, char* msg, size_t len) {
  for (int i = 0; i < n; i++) {
    const tCase* c = &cases[i];
    const char* nm = c->name ? c->name : "(null)";
    int bodies = !!c->fn + !!c->run + !!c->rank + !!c->main;
    char ct[160];
    t_ctestName(prefix, c, ct, sizeof ct);
    if (!c->name || !t_wordOk(c->name, strlen(c->name)) || c->name[0] == '-')
      snprintf(msg, len, "row %d: name '%s' is not one word", i, nm);
    else if (bodies != 1)
      snprintf(msg, len, "case %s: %d of fn, run, rank, main set; want exactly 1", nm, bodies);
    else if (c->rank && (c->ranks < 1 || c->deadlineS < 1 || c->deadlineS > c->timeoutS))
      snprintf(msg, len,
               "case %s: rank case with %d ranks, deadline %d s, timeout %d s (want ranks >= 1, "
               "1 <= deadline <= timeout)",
               nm, c->ranks, c->deadlineS, c->timeoutS);
    else if (!c->manual && c->timeoutS < 1) snprintf(msg, len, "case %s: no timeout", nm);
    else if (!t_wordOk(ct, strlen(ct)) || !t_wordsOk(c->args) || !t_wordsOk(c->wrap) ||
             (c->labels && !t_wordOk(c->labels, strlen(c->labels))))
      snprintf(msg, len, "case %s: its CTest name, args, wrap or labels hold a character CMake reads", nm);
    else {
      msg[0] = 0;
      size_t k;
      for (const char* e = t_envNext(c->env, &k); e && !msg[0]; e = t_envNext(e + k, &k)) {
        const char* eq = memchr(e, '=', k);
        if (!eq || eq == e || !t_wordOk(e, k))
          snprintf(msg, len, "case %s: env entry '%.*s' is not K=V", nm, (int)k, e);
      }
      for (int j = 0; j < i && !msg[0]; j++) {
        char other[160];
        t_ctestName(prefix, &cases[j], other, sizeof other);
        if (!strcmp(cases[j].name, c->name) || (!c->manual && !cases[j].manual && !strcmp(other, ct)))
          snprintf(msg, len, "cases %d and %d: the same name (%s, CTest %s)", j, i, c->name, ct);
      }
    }
    if (msg[0]) return msg;
  }
  return NULL;
}

static void t_list(const char* prefix, const tCase* cases, int n) {
  for (int i = 0; i < n; i++) {
    const tCase* c = &cases[i];
    if (c->manual) continue;
    char ct[160];
    t_ctestName(prefix, c, ct, sizeof ct);
    printf("case %s %s\n  timeout %d\n  labels %s\n", ct, c->name, c->timeoutS,
           c->labels ? c->labels : "cpu");
    size_t k;
    for (const char* e = t_envNext(c->env, &k); e; e = t_envNext(e + k, &k))
      printf("  env %.*s\n", (int)k, e);
    if (c->skipCode) printf("  skip %d\n", c->skipCode);
    if (c->serial) printf("  serial\n");
    if (c->args) printf("  args %s\n", c->args);
    if (c->wrap) printf("  wrap %s\n", c->wrap);
  }
}

/* Sets the row's environment: the case as CTest runs it, by hand too. */
static void t_setEnv(const char* env) {
  size_t k;
  for (const char* e = t_envNext(env, &k); e; e = t_envNext(e + k, &k)) {
    char kv[512];
    snprintf(kv, sizeof kv, "%.*s", (int)k, e);
    char* eq = strchr(kv, '=');
    T_CHECK(eq && k < sizeof kv, "env entry '%s' is not K=V (or longer than %zu)", kv, sizeof kv - 1);
    *eq = 0;
    setenv(kv, eq + 1, 1);
  }
}

int t_main(int argc, char** argv, const char* prefix, const tCase* cases, int n) {
  const char* prog = argc > 0 ? argv[0] : "test";
  const char* slash = strrchr(prog, '/');
  prog = slash ? slash + 1 : prog;
  const char* name = argc > 1 ? argv[1] : "";
  if (!strcmp(name, "--list")) {
    char msg[256];
    if (t_tableError(prefix, cases, n, msg, sizeof msg)) {
      fprintf(stderr, "%s --list: the case table is not valid: %s\n", prog, msg);
      return 2;
    }
    t_list(prefix, cases, n);
    return fflush(stdout) == 0 ? 0 : 1;
  }
  for (int i = 0; i < n; i++) {
    const tCase* c = &cases[i];
    if (strcmp(c->name, name)) continue;
    t_setEnv(c->env);
    int rc = 0;
    if (c->fn) rc = c->fn();
    else if (c->run) rc = c->run(c->arg);
    else if (c->main) rc = c->main(argc - 2, argv + 2);
    else t_run_ranks(c->ranks, c->rank, c->arg, c->deadlineS);
    if (rc == 0) printf("PASS %s %s\n", prog, name);
    return rc;
  }
  fprintf(stderr, "%s: unknown case '%s'; the cases:", prog, name);
  for (int i = 0; i < n; i++) fprintf(stderr, " %s", cases[i].name);
  fprintf(stderr, " (--list: the table as CTest registers it)\n");
  return 2;
}

/* capset(2) without libcap: drop CAP_SYS_PTRACE, which lets root attach to anything. */
void t_drop_ptrace_cap(void) {
  struct __user_cap_header_struct h = {_LINUX_CAPABILITY_VERSION_3, 0};
  struct __user_cap_data_struct d[2];
  T_CHECK(syscall(SYS_capget, &h, d) == 0, "capget: %s", strerror(errno));
  d[CAP_SYS_PTRACE / 32].effective &= ~(1u << (CAP_SYS_PTRACE % 32));
  d[CAP_SYS_PTRACE / 32].permitted &= ~(1u << (CAP_SYS_PTRACE % 32));
  T_CHECK(syscall(SYS_capset, &h, d) == 0, "capset: %s", strerror(errno));
}
