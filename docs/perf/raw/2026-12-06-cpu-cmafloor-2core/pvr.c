#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>
#include <sys/wait.h>
static double now(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return t.tv_sec + t.tv_nsec * 1e-9;
}
int main(int argc, char** argv) {
  size_t sizes[] = {64, 4096, 16384, 65536, 262144};
  int reps = argc > 1 ? atoi(argv[1]) : 2000;
  char *src = aligned_alloc(4096, 1 << 20), *dst = aligned_alloc(4096, 1 << 20);
  memset(src, 1, 1 << 20);
  memset(dst, 2, 1 << 20);
  pid_t self = getpid();
  pid_t child = fork();
  if (child == 0) {
    pause();
    _exit(0);
  }
  for (int w = 0; w < 2; w++) {
    pid_t pid = w ? child : self;
    printf("%s\n", w ? "peer (forked child, same addr)" : "self");
    for (unsigned i = 0; i < sizeof sizes / sizeof *sizes; i++) {
      size_t n = sizes[i];
      double best = 1e9, bm = 1e9;
      double tot = 0;
      for (int k = 0; k < reps; k++) {
        struct iovec l = {dst, n}, r = {src, n};
        double t0 = now();
        if (process_vm_readv(pid, &l, 1, &r, 1, 0) != (ssize_t)n) {
          perror("pvr");
          return 1;
        }
        double t = now() - t0;
        if (t < best) best = t;
        tot += t;
      }
      for (int k = 0; k < reps; k++) {
        double t0 = now();
        memcpy(dst, src, n);
        __asm__ volatile("" ::"r"(dst) : "memory");
        double t = now() - t0;
        if (t < bm) bm = t;
      }
      printf("  %7zu B: pvr min %.3f us mean %.3f us, memcpy min %.3f us\n", n, best * 1e6, tot / reps * 1e6,
             bm * 1e6);
    }
  }
  kill(child, 9);
  wait(0);
  return 0;
}
