/*
 * The GPU reduce family's own code, run on the host: nccl_reduce.cu built
 * with its host runner, every thread of a launch executed one after another.
 * Checks, on a machine without a GPU (CI), that the kernel's arithmetic
 * (folds, 16-bit conversions, integer wrap, divisor) and its indexing
 * (16-byte vectors, scalar tail, grid stride, aliasing) produce exactly the
 * bits of relayHostReduce for every dtype x op x k x alignment. The GPU run of
 * the same comparison is gputest_reduce.
 */
#define RELAY_REDUCE_HOST_EMULATION 1
#include "transport/nccl/nccl_reduce.cu"

#include <stdio.h>
#include <stdlib.h>

#include "comm/common.h"
#include "gpu/reduce_inputs.h"
#include "reduce_host.h"

enum { MAXK = 8, GUARD = 64 };

int main() {
  const size_t counts[] = {0, 1, 7, 8, 15, 16, 17, 33, 255, 1000, 4099};
  const int nCounts = (int)(sizeof counts / sizeof counts[0]);
  const size_t maxCount = 4099;
  const size_t stride = (maxCount * 8 + 2 * GUARD + 255) / 256 * 256;
  /* 256-aligned pool: a slice start is 16-aligned, +elemSize is not. */
  char* pool = NULL;
  if (posix_memalign((void**)&pool, 256, stride * (MAXK + 1)) != 0) return 1;
  char* want = (char*)malloc(maxCount * 8);
  const char* modes[] = {"aligned", "dst+1", "src+1", "dst=src0"};
  long cases = 0;
  for (int ti = 0; ti < RI_NTYPES; ti++)
    for (int oi = 0; oi < 5; oi++)
      for (int ki = 0; ki < 4; ki++)
        for (int ci = 0; ci < nCounts; ci++)
          for (int m = 0; m < 4; m++) {
            relayDataType_t dt = riTypes[ti];
            relayRedOp_t op = riOps[oi];
            int k = riKs[ki];
            size_t n = counts[ci], es = relayTypeSize(dt);
            int divisor = op == relayAvg ? (k > 1 ? k : 2) : (op == relaySum && (ci & 1) ? 3 : 0);
            memset(pool, 0xCD, stride * (MAXK + 1));
            const void* srcs[MAXK];
            for (int s = 0; s < k; s++) {
              char* p = pool + (size_t)s * stride + GUARD + (m == 2 && s == k - 1 ? es : 0);
              riFill(p, n, dt, (uint64_t)(s + 1) * 7919u + n * 31u + (uint64_t)dt * 131u + (uint64_t)op);
              srcs[s] = p;
            }
            relayHostReduce(want, srcs, k, n, dt, op, divisor);
            char* dst = m == 3 ? (char*)srcs[0] : pool + (size_t)MAXK * stride + GUARD + (m == 1 ? es : 0);
            /* Grids of 1, 3 and 2 blocks' worth of threads: every stride
             * pattern the cap can produce for these sizes. */
            for (int g = 0; g < 3; g++) {
              if (g > 0) { /* dst was overwritten (aliased: an input too): redo the inputs */
                for (int s = 0; s < k; s++)
                  riFill((void*)srcs[s], n, dt,
                         (uint64_t)(s + 1) * 7919u + n * 31u + (uint64_t)dt * 131u + (uint64_t)op);
              }
              int maxBlocks = g == 0 ? 1 : g == 1 ? 3 : 2;
              Impl impl;
              ReduceArgs a;
              size_t blocks = 0;
              cudaError_t e = prepare(dst, srcs, k, n, dt, op, divisor, maxBlocks, &impl, &a, &blocks);
              if (e != cudaSuccess || !impl.host) {
                printf("FAIL prepare %s %s k=%d n=%zu\n", relayTypeName(dt), relayOpName(op), k, n);
                return 1;
              }
              /* A small stride (7 threads) too, so the tail and the vector
               * loop each see several iterations per thread. */
              size_t threads = g == 2 ? 7 : blocks * RELAY_REDUCE_THREADS;
              impl.host(a, threads);
              if (memcmp(dst, want, n * es) != 0) {
                size_t i = 0;
                while (i < n && memcmp(dst + i * es, want + i * es, es) == 0) i++;
                unsigned long long gv = 0, wv = 0;
                memcpy(&gv, dst + i * es, es);
                memcpy(&wv, want + i * es, es);
                printf(
                    "FAIL %s %s k=%d n=%zu %s divisor=%d threads=%zu: element %zu: kernel code 0x%llx, host "
                    "0x%llx\n",
                    relayTypeName(dt), relayOpName(op), k, n, modes[m], divisor, threads, i, gv, wv);
                return 1;
              }
              for (int b = 0; b < GUARD; b++)
                if ((unsigned char)dst[-1 - b] != 0xCD || (unsigned char)dst[n * es + (size_t)b] != 0xCD) {
                  printf("FAIL %s %s k=%d n=%zu %s: wrote outside dst\n", relayTypeName(dt), relayOpName(op),
                         k, n, modes[m]);
                  return 1;
                }
              cases++;
            }
          }
  printf("PASS: %ld emulated launches bit-identical to relayHostReduce\n", cases);
  free(pool);
  free(want);
  return 0;
}
