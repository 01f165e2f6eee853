/* process_vm_readv's cost against memcpy's, min of 2000 reads of a forked child's buffer
 * (docs/perf/2026-12-06-cpu-16core-floors-lines.md; the run's copy also opened a pipe it never used). */
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/uio.h>
#include <unistd.h>
#include <time.h>
#include <sys/wait.h>
static double now() {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return t.tv_sec * 1e9 + t.tv_nsec;
}
int main() {
  static char src[1 << 20], dst[1 << 20];
  memset(src, 1, sizeof src);
  pid_t c = fork();
  if (!c) {
    sleep(5);
    return 0;
  }
  for (size_t len = 8; len <= 262144; len *= 8) {
    double best = 1e18, sum = 0;
    int N = 2000;
    for (int i = 0; i < N; i++) {
      struct iovec l = {dst, len}, r = {src, len};
      double t0 = now();
      process_vm_readv(c, &l, 1, &r, 1, 0);
      double t = now() - t0;
      if (t < best) best = t;
      sum += t;
    }
    double bm = 1e18;
    for (int i = 0; i < N; i++) {
      double t0 = now();
      memcpy(dst, src, len);
      __asm__ volatile("" ::"r"(dst) : "memory");
      double t = now() - t0;
      if (t < bm) bm = t;
    }
    printf("len %7zu: process_vm_readv min %.0f ns mean %.0f ns; memcpy min %.0f ns\n", len, best, sum / N,
           bm);
  }
  kill(c, 9);
  wait(NULL);
}
