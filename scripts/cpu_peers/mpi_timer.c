/* The MPI side of scripts/cpu_peers_bench.sh: times MPI's all-reduce, all-gather,
 * reduce-scatter, all-to-all and broadcast the way relaycc-bench times relaycc's, so
 * the two columns mean the same thing:
 *   - size = bytes of each rank's input (all-gather's output is nranks x size,
 *     reduce-scatter's is size / nranks, all-to-all's blocks are size / nranks,
 *     broadcast's root 0 sends size bytes to every rank);
 *   - an iteration's time is the max over ranks of one call after a barrier;
 *   - rank r runs on the r-th CPU of the set it inherited (when --bind 1), the rule
 *     relaycc-bench follows under RELAYCC_BENCH_BIND=1 and the torch driver too.
 * Compiled at run time with the MPI wheel's mpicc (nothing of MPI is committed).
 * Prints one JSON line per (collective, size) on rank 0. Float sum only: MPI has no
 * standard bfloat16 type. */
#define _GNU_SOURCE
#include <mpi.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int cmpDouble(const void* a, const void* b) {
  double x = *(const double*)a, y = *(const double*)b;
  return (x > y) - (x < y);
}

/* Pins the calling process to the rank-th CPU (mod count) of its inherited set. */
static void bindToRank(int rank) {
  cpu_set_t set;
  if (sched_getaffinity(0, sizeof set, &set)) return;
  int n = CPU_COUNT(&set), want = rank % (n > 0 ? n : 1), seen = 0;
  for (int c = 0; c < CPU_SETSIZE; c++) {
    if (!CPU_ISSET(c, &set)) continue;
    if (seen++ == want) {
      cpu_set_t one;
      CPU_ZERO(&one);
      CPU_SET(c, &one);
      sched_setaffinity(0, sizeof one, &one);
      return;
    }
  }
}

static long iterCount(long size, long iterBytes, long lo, long hi) {
  long n = iterBytes / (size > 0 ? size : 1);
  return n < lo ? lo : n > hi ? hi : n;
}

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int rank, nranks;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &nranks);
  const char* colls = "allreduce,allgather,reducescatter,alltoall";
  const char* sizes = "4096";
  long iterBytes = 256L << 20, iterMin = 5, iterMax = 200, warmup = 3, rep = 0;
  int bind = 1;
  for (int i = 1; i + 1 < argc; i += 2) {
    if (!strcmp(argv[i], "--colls")) colls = argv[i + 1];
    else if (!strcmp(argv[i], "--sizes")) sizes = argv[i + 1];
    else if (!strcmp(argv[i], "--iter-bytes")) iterBytes = atol(argv[i + 1]);
    else if (!strcmp(argv[i], "--iter-min")) iterMin = atol(argv[i + 1]);
    else if (!strcmp(argv[i], "--iter-max")) iterMax = atol(argv[i + 1]);
    else if (!strcmp(argv[i], "--warmup")) warmup = atol(argv[i + 1]);
    else if (!strcmp(argv[i], "--rep")) rep = atol(argv[i + 1]);
    else if (!strcmp(argv[i], "--bind")) bind = atoi(argv[i + 1]);
    else {
      if (!rank) fprintf(stderr, "mpi_timer: unknown argument %s\n", argv[i]);
      MPI_Abort(MPI_COMM_WORLD, 2);
    }
  }
  if (bind) bindToRank(rank);

  char collBuf[256], sizeBuf[1024];
  snprintf(collBuf, sizeof collBuf, "%s", colls);
  for (char *cs = NULL, *c = strtok_r(collBuf, ",", &cs); c; c = strtok_r(NULL, ",", &cs)) {
    snprintf(sizeBuf, sizeof sizeBuf, "%s", sizes);
    for (char *ss = NULL, *s = strtok_r(sizeBuf, ",", &ss); s; s = strtok_r(NULL, ",", &ss)) {
      long size = atol(s);
      long count = size / (long)sizeof(float);
      long block = count / nranks; /* reduce-scatter's output, all-to-all's block */
      int isAg = !strcmp(c, "allgather"), isAr = !strcmp(c, "allreduce");
      int isRs = !strcmp(c, "reducescatter"), isA2a = !strcmp(c, "alltoall");
      int isBc = !strcmp(c, "broadcast"); /* root 0: its input to every other rank's output */
      if (!(isAg || isAr || isRs || isA2a || isBc) || count <= 0 || ((isRs || isA2a) && count % nranks))
        continue;
      long outCount = isAg ? count * nranks : isRs ? block : count;
      float* in = malloc((size_t)count * sizeof(float));
      float* out = malloc((size_t)outCount * sizeof(float));
      if (!in || !out) MPI_Abort(MPI_COMM_WORLD, 3);
      /* Inputs that encode source and index; touched so first-touch is not timed. */
      for (long k = 0; k < count; k++) in[k] = (float)(rank * 1000 + (k & 1023));
      memset(out, 0, (size_t)outCount * sizeof(float));
      long iters = iterCount(size, iterBytes, iterMin, iterMax);
      double* t = malloc((size_t)iters * sizeof(double));
      double* tMax = malloc((size_t)iters * sizeof(double));
      for (long it = -warmup; it < iters; it++) {
        MPI_Barrier(MPI_COMM_WORLD);
        double t0 = MPI_Wtime();
        if (isAr) MPI_Allreduce(in, out, (int)count, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
        else if (isAg) MPI_Allgather(in, (int)count, MPI_FLOAT, out, (int)count, MPI_FLOAT, MPI_COMM_WORLD);
        else if (isBc) MPI_Bcast(rank ? out : in, (int)count, MPI_FLOAT, 0, MPI_COMM_WORLD);
        else if (isRs) MPI_Reduce_scatter_block(in, out, (int)block, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
        else MPI_Alltoall(in, (int)block, MPI_FLOAT, out, (int)block, MPI_FLOAT, MPI_COMM_WORLD);
        double t1 = MPI_Wtime();
        if (it >= 0) t[it] = (t1 - t0) * 1e6;
      }
      MPI_Reduce(t, tMax, (int)iters, MPI_DOUBLE, MPI_MAX, 0, MPI_COMM_WORLD);
      /* One element of the output checked, so a broken launch cannot pass as fast. */
      double want = isAr ? 0 : -1, got = isBc ? (rank ? out : in)[count - 1] : out[0];
      if (isAr)
        for (int r = 0; r < nranks; r++) want += r * 1000;
      else if (isAg) want = 0;                                /* block 0: rank 0's index 0 */
      else if (isBc) want = (double)((count - 1) & 1023);     /* root 0's last element (outputs were 0) */
      else if (isA2a) want = (double)((rank * block) & 1023); /* rank 0's block `rank` */
      else want = 0 + (double)nranks * (nranks - 1) / 2 * 1000 + nranks * (double)((rank * block) & 1023);
      int bad = got != want;
      int anyBad = 0;
      MPI_Allreduce(&bad, &anyBad, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
      if (!rank) {
        qsort(tMax, (size_t)iters, sizeof(double), cmpDouble);
        printf(
            "{\"peer\": \"openmpi\", \"ranks\": %d, \"coll\": \"%s\", \"dtype\": \"float\", "
            "\"bytes\": %ld, \"rep\": %ld, \"iters\": %ld, \"time_min_us\": %.3f, \"time_med_us\": %.3f, "
            "\"wrong\": %d}\n",
            nranks, c, size, rep, iters, tMax[0], tMax[iters / 2], anyBad);
        fflush(stdout);
      }
      free(t);
      free(tMax);
      free(in);
      free(out);
    }
  }
  MPI_Finalize();
  return 0;
}
