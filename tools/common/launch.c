#include "launch.h"

#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "comm/common.h"

static void killAll(pid_t* pids, int n) {
  for (int i = 0; i < n; i++)
    if (pids[i] > 0) kill(pids[i], SIGKILL);
  for (int i = 0; i < n; i++)
    if (pids[i] > 0) waitpid(pids[i], NULL, 0);
}

static int codeOf(int status) {
  if (WIFEXITED(status)) return WEXITSTATUS(status);
  if (WIFSIGNALED(status)) return -WTERMSIG(status);
  return -1;
}

int relayLaunchRanks(int nranks, relayRankFn fn, void* arg, int timeoutMs, int graceMs,
                     relayLaunchResult* res, int* codes) {
  relayLaunchResult local;
  if (!res) res = &local;
  res->failedRank = -1;
  res->exitCode = 0;
  res->message[0] = 0;
  if (nranks <= 0) {
    snprintf(res->message, sizeof res->message, "nranks %d must be > 0", nranks);
    res->failedRank = 0;
    return 1;
  }
  pid_t* pids = calloc((size_t)nranks, sizeof(pid_t));
  if (!pids) return 1;
  if (codes)
    for (int r = 0; r < nranks; r++) codes[r] = -1000;
  fflush(stdout);
  fflush(stderr);
  for (int r = 0; r < nranks; r++) {
    pid_t pid = fork();
    if (pid < 0) {
      snprintf(res->message, sizeof res->message, "fork of rank %d failed: %s", r, strerror(errno));
      res->failedRank = r;
      killAll(pids, r);
      free(pids);
      return 1;
    }
    if (pid == 0) {
      int rc = fn(r, nranks, arg);
      fflush(stdout);
      fflush(stderr);
      _exit(rc & 0xff);
    }
    pids[r] = pid;
  }
  uint64_t deadline = timeoutMs > 0 ? relayNowNs() + (uint64_t)timeoutMs * 1000000ull : 0;
  int alive = nranks, failed = 0;
  while (alive > 0 && !failed) {
    int status;
    pid_t pid = waitpid(-1, &status, WNOHANG);
    if (pid == 0) {
      if (deadline && relayNowNs() > deadline) {
        res->exitCode = -1000;
        int first = -1;
        for (int r = 0; r < nranks; r++)
          if (pids[r] > 0) {
            first = r;
            break;
          }
        res->failedRank = first;
        snprintf(res->message, sizeof res->message,
                 "timeout after %d ms: rank %d (and %d others) still running", timeoutMs, first, alive - 1);
        failed = 1;
        break;
      }
      struct timespec ts = {0, 2000000};
      nanosleep(&ts, NULL);
      continue;
    }
    if (pid < 0) {
      if (errno == EINTR) continue;
      break;
    }
    int r = -1;
    for (int i = 0; i < nranks; i++)
      if (pids[i] == pid) r = i;
    if (r < 0) continue;
    pids[r] = 0;
    alive--;
    if (codes) codes[r] = codeOf(status);
    if (WIFEXITED(status) && WEXITSTATUS(status) == 0) continue;
    res->failedRank = r;
    if (WIFEXITED(status)) {
      res->exitCode = WEXITSTATUS(status);
      snprintf(res->message, sizeof res->message, "rank %d exited with code %d", r, res->exitCode);
    } else if (WIFSIGNALED(status)) {
      res->exitCode = -WTERMSIG(status);
      snprintf(res->message, sizeof res->message, "rank %d died on signal %d (%s)", r, WTERMSIG(status),
               strsignal(WTERMSIG(status)));
    }
    failed = 1;
  }
  if (failed) {
    /* Give the others a moment to report their own view (a peer error names
     * the rank that died), then make sure nothing outlives the launch. */
    uint64_t grace = relayNowNs() + (uint64_t)(graceMs > 0 ? graceMs : 0) * 1000000ull;
    if (deadline && grace > deadline + 1000000000ull) grace = deadline + 1000000000ull;
    while (alive > 0 && relayNowNs() < grace) {
      int status;
      pid_t pid = waitpid(-1, &status, WNOHANG);
      if (pid > 0) {
        for (int i = 0; i < nranks; i++)
          if (pids[i] == pid) {
            pids[i] = 0;
            if (codes) codes[i] = codeOf(status);
          }
        alive--;
      } else {
        struct timespec ts = {0, 5000000};
        nanosleep(&ts, NULL);
      }
    }
    killAll(pids, nranks);
  }
  free(pids);
  return failed ? 1 : 0;
}

const char* relayLaunchJobName(const char* tag, char* buf, int buflen) {
  static unsigned counter;
  snprintf(buf, (size_t)buflen, "%s-%d-%u-%llx", tag ? tag : "job", (int)getpid(), counter++,
           (unsigned long long)(relayNowNs() & 0xffffff));
  return buf;
}
