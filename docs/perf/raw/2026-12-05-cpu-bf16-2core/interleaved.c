/* Interleaved: the software and vector 16-bit paths of relayHostReduce alternating in one process, many short
 * trials, best and median (less noisy on a loaded host than separate runs). Build: see
 * docs/perf/2026-12-05-cpu-fp16-2core.md, bf16 section. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include "reduce_host.h"
static double now(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return t.tv_sec + t.tv_nsec * 1e-9;
}
static int cmpd(const void* a, const void* b) {
  double x = *(const double*)a, y = *(const double*)b;
  return x < y ? -1 : x > y;
}
int main(int argc, char** argv) {
  int trials = argc > 1 ? atoi(argv[1]) : 30;
  relayDataType_t dts[2] = {relayBfloat16, relayFloat16};
  size_t sizes[2] = {64u << 10, 8u << 20};
  int nsrcs[2] = {2, 8};
  for (int di = 0; di < 2; di++)
    for (int si = 0; si < 2; si++)
      for (int ni = 0; ni < 2; ni++) {
        size_t bytes = sizes[si], n = bytes / 2;
        int nsrc = nsrcs[ni];
        void* src[8];
        for (int k = 0; k < nsrc; k++) {
          src[k] = malloc(bytes);
          for (size_t i = 0; i < n; i++)
            ((unsigned short*)src[k])[i] =
                di == 0 ? relayFloatToBf16((float)((i + k) & 7)) : relayFloatToHalf((float)((i + k) & 7));
        }
        void* dst = malloc(bytes);
        memset(dst, 0, bytes);
        double g[2][200];
        for (int t = 0; t < trials; t++)
          for (int p = 0; p < 2; p++) {
            relayHostHalfPathSet(p);
            double t0 = now(), t1;
            long calls = 0;
            do {
              relayHostReduce(dst, (const void* const*)src, nsrc, n, dts[di], relaySum, 0);
              calls++;
            } while ((t1 = now()) - t0 < 0.005);
            g[p][t] = (double)calls * (nsrc + 1) * bytes / (t1 - t0) / 1e9;
          }
        for (int p = 0; p < 2; p++) qsort(g[p], trials, sizeof(double), cmpd);
        printf(
            "%-5s %d src x %5zu KiB: software best %6.1f median %6.1f | vector best %6.1f median %6.1f "
            "GB/s\n",
            di == 0 ? "bf16" : "fp16", nsrc, bytes >> 10, g[0][trials - 1], g[0][trials / 2],
            g[1][trials - 1], g[1][trials / 2]);
        for (int k = 0; k < nsrc; k++) free(src[k]);
        free(dst);
      }
  relayHostHalfPathSet(-1);
  return 0;
}
