/*
 * The case table itself (tests/harness.h, t_main): what --list prints for CMake, the tables it refuses
 * (so a bad row fails the build that made it), a row's environment and arguments reaching the case, an
 * unknown case naming the known ones. Each t_main under test runs in a child with its output captured.
 *
 * Usage: test_cases <case>   (cases: kCases at the bottom; --list prints them)
 */
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "harness.h"

static int okCase(void) { return 0; }
static int sevenCase(void) { return 7; }

/* Exit 0 only when the row's environment is set as the row says. */
static int envCase(void) {
  const char* a = getenv("T_CASES_A");
  const char* b = getenv("T_CASES_B");
  return a && b && !strcmp(a, "1") && !strcmp(b, "x,y") ? 0 : 3;
}

/* Exit 0 only when the arguments after the name are "p q". */
static int argsCase(int argc, char** argv) {
  return argc == 2 && !strcmp(argv[0], "p") && !strcmp(argv[1], "q") ? 0 : 4;
}

static int rankOk(int rank, int nranks, void* arg) {
  (void)arg;
  return rank < nranks ? 0 : 1;
}

/* t_main(argv) on table in a child; its exit code, and stdout + stderr in out. */
static int runMain(const tCase* table, int n, const char* const* args, char* out, size_t len) {
  FILE* f = tmpfile();
  T_CHECK(f, "tmpfile");
  fflush(stdout);
  fflush(stderr);
  pid_t pid = fork();
  T_CHECK(pid >= 0, "fork");
  if (pid == 0) {
    dup2(fileno(f), 1);
    dup2(fileno(f), 2);
    char* argv[8] = {"test_cases"};
    int argc = 1;
    for (; args[argc - 1] && argc < 7; argc++) argv[argc] = (char*)args[argc - 1];
    int rc = t_main(argc, argv, "tc", table, n);
    fflush(stdout);
    _exit(rc);
  }
  int st = 0;
  T_CHECK(waitpid(pid, &st, 0) == pid, "waitpid");
  size_t got = 0;
  rewind(f);
  got = fread(out, 1, len - 1, f);
  out[got] = 0;
  fclose(f);
  T_CHECK(WIFEXITED(st), "t_main died (status %#x)", st);
  return WEXITSTATUS(st);
}

static const tCase kSample[] = {
    {.name = "plain", .fn = okCase, .timeoutS = 30},
    {.name = "seven", .fn = sevenCase, .timeoutS = 40, .labels = "gpu,slow", .skipCode = 77, .serial = 1},
    {.name = "env", .fn = envCase, .timeoutS = 50, .env = "T_CASES_A=1;T_CASES_B=x,y"},
    {.name = "args", .main = argsCase, .timeoutS = 60, .args = "p q", .ctest = "other_name"},
    {.name = "ranks", .rank = rankOk, .ranks = 3, .deadlineS = 20, .timeoutS = 70, .wrap = "@TOOL@ --flag"},
    {.name = "byhand", .fn = okCase, .manual = 1},
};

/* The exact text CMake parses (cmake/TestCasesList.cmake): a manual row is not in it. */
static int caseList(void) {
  char out[4096];
  const char* args[] = {"--list", NULL};
  int rc = runMain(kSample, T_NCASES(kSample), args, out, sizeof out);
  const char* want =
      "case tc_plain plain\n  timeout 30\n  labels cpu\n"
      "case tc_seven seven\n  timeout 40\n  labels gpu,slow\n  skip 77\n  serial\n"
      "case tc_env env\n  timeout 50\n  labels cpu\n  env T_CASES_A=1\n  env T_CASES_B=x,y\n"
      "case other_name args\n  timeout 60\n  labels cpu\n  args p q\n"
      "case tc_ranks ranks\n  timeout 70\n  labels cpu\n  wrap @TOOL@ --flag\n";
  T_CHECK(rc == 0 && !strcmp(out, want), "--list: rc %d, printed:\n%s\nwant:\n%s", rc, out, want);
  return 0;
}

/* Each row's body runs with its exit code; env and args reach the case; a rank row launches. */
static int caseRun(void) {
  char out[4096];
  struct {
    const char* name;
    int rc;
  } runs[] = {{"plain", 0}, {"seven", 7}, {"env", 0}, {"ranks", 0}, {"byhand", 0}};
  for (size_t i = 0; i < sizeof runs / sizeof runs[0]; i++) {
    const char* args[] = {runs[i].name, NULL};
    int rc = runMain(kSample, T_NCASES(kSample), args, out, sizeof out);
    T_CHECK(rc == runs[i].rc, "case %s: exit %d, want %d; output:\n%s", runs[i].name, rc, runs[i].rc, out);
  }
  const char* args[] = {"args", "p", "q", NULL};
  int rc = runMain(kSample, T_NCASES(kSample), args, out, sizeof out);
  T_CHECK(rc == 0, "case args with p q: exit %d", rc);
  const char* wrong[] = {"args", "p", NULL};
  rc = runMain(kSample, T_NCASES(kSample), wrong, out, sizeof out);
  T_CHECK(rc == 4, "case args with p alone: exit %d, want the case's 4", rc);
  return 0;
}

/* An unknown name (or none) exits 2 naming every case. */
static int caseUnknown(void) {
  char out[4096];
  const char* names[] = {"nosuch", ""};
  for (int i = 0; i < 2; i++) {
    const char* args[] = {names[i], NULL};
    int rc = runMain(kSample, T_NCASES(kSample), i == 0 ? args : args + 1, out, sizeof out);
    T_CHECK(rc == 2, "unknown case '%s': exit %d, want 2", names[i], rc);
    T_CHECK(strstr(out, "unknown case") && strstr(out, " plain seven env args ranks byhand"),
            "unknown case '%s': the message does not name the cases: %s", names[i], out);
  }
  return 0;
}

/* Tables CMake could not register: --list exits 2 naming the row and what is wrong, printing no case. */
static int caseRejects(void) {
  static const struct {
    tCase row[2];
    int n;
    const char* why;
  } bad[] = {
      {{{.name = "a", .timeoutS = 10}}, 1, "0 of fn, run, rank, main"},
      {{{.name = "a", .fn = okCase, .main = argsCase, .timeoutS = 10}}, 1, "2 of fn, run, rank, main"},
      {{{.name = "a", .fn = okCase}}, 1, "case a: no timeout"},
      {{{.name = "a b", .fn = okCase, .timeoutS = 10}}, 1, "not one word"},
      {{{.name = "-a", .fn = okCase, .timeoutS = 10}}, 1, "not one word"},
      {{{.name = "a", .fn = okCase, .timeoutS = 10}, {.name = "a", .fn = okCase, .timeoutS = 10}},
       2,
       "the same name"},
      {{{.name = "a", .fn = okCase, .timeoutS = 10},
        {.name = "b", .fn = okCase, .timeoutS = 10, .ctest = "tc_a"}},
       2,
       "the same name"},
      {{{.name = "a", .rank = rankOk, .ranks = 2, .deadlineS = 20, .timeoutS = 10}}, 1, "deadline 20 s"},
      {{{.name = "a", .rank = rankOk, .ranks = 0, .deadlineS = 5, .timeoutS = 10}}, 1, "with 0 ranks"},
      {{{.name = "a", .fn = okCase, .timeoutS = 10, .env = "NOVALUE"}}, 1, "env entry 'NOVALUE'"},
      {{{.name = "a", .fn = okCase, .timeoutS = 10, .env = "A=1;=2"}}, 1, "env entry '=2'"},
      {{{.name = "a", .fn = okCase, .timeoutS = 10, .args = "x;y"}}, 1, "character CMake reads"},
      {{{.name = "a", .fn = okCase, .timeoutS = 10, .wrap = "\"q\""}}, 1, "character CMake reads"},
      {{{.name = "a", .fn = okCase, .timeoutS = 10, .labels = "cpu gpu"}}, 1, "character CMake reads"},
  };
  char out[4096];
  const char* args[] = {"--list", NULL};
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    int rc = runMain(bad[i].row, bad[i].n, args, out, sizeof out);
    T_CHECK(rc == 2 && strstr(out, "the case table is not valid") && strstr(out, bad[i].why) &&
                !strstr(out, "case tc_"),
            "bad table %zu: exit %d, want 2 and '%s'; printed: %s", i, rc, bad[i].why, out);
  }
  return 0;
}

static const tCase kCases[] = {
    {.name = "list", .fn = caseList, .timeoutS = 30},
    {.name = "run", .fn = caseRun, .timeoutS = 60},
    {.name = "unknown", .fn = caseUnknown, .timeoutS = 30},
    {.name = "rejects", .fn = caseRejects, .timeoutS = 30},
};

int main(int argc, char** argv) { return t_main(argc, argv, "cases", kCases, T_NCASES(kCases)); }
