/*
 * relaycc example: 4 processes on one host, an all-reduce among ranks 0, 2 and 3 while rank 1 helps
 * (it passes NULL buffers and lends its links). Checks every element against the sum it must be.
 * Build against an installed relaycc either way:
 *   cc allreduce_shm.c $(pkg-config --cflags --libs relaycc) -o allreduce_shm
 *   cmake -S examples -B b -DCMAKE_PREFIX_PATH=<prefix> && cmake --build b   (find_package(relaycc))
 */
#define _POSIX_C_SOURCE 200809L
#include <relaycc.h>

#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define NRANKS 4
#define COUNT 65536 /* int32 elements per active rank: 256 KiB */

static const int active[3] = {0, 2, 3};

/* Encodes the source rank and the index, so a block from the wrong rank or place shows. */
static int32_t value(int rank, size_t i) { return (int32_t)(((rank + 1) << 20) | (int32_t)(i & 0xfffff)); }

static int rankMain(int rank, const char* job) {
  relayConfig_t cfg = RELAY_CONFIG_INITIALIZER;
  cfg.timeoutMs = 20000; /* every wait of the comm ends by then */
  relayComm_t comm;
  relayResult_t r = relayCommInitShm(&comm, NRANKS, rank, job, &cfg);
  if (r != relaySuccess) {
    fprintf(stderr, "rank %d: relayCommInitShm: %s\n", rank, relayGetErrorString(r));
    return 1;
  }
  int me = -1;
  for (int i = 0; i < 3; i++)
    if (active[i] == rank) me = i;
  int32_t* send = NULL;
  int32_t* recv = NULL;
  if (me >= 0) {
    send = malloc(COUNT * sizeof *send);
    recv = malloc(COUNT * sizeof *recv);
    if (!send || !recv) return 1;
    for (size_t i = 0; i < COUNT; i++) {
      send[i] = value(rank, i);
      recv[i] = -1; /* poison: an element left unwritten fails the check */
    }
  }
  relayLayout_t layout = {.nGroups = 1, .nActive = 3, .ranks = active};
  size_t counts[1] = {COUNT};
  r = relayAllReduce(send, recv, counts, relayInt32, relaySum, &layout, comm, NULL);
  if (r != relaySuccess) {
    fprintf(stderr, "rank %d: relayAllReduce: %s: %s\n", rank, relayGetErrorString(r),
            relayGetLastError(comm));
    relayCommDestroy(comm);
    return 1;
  }
  long wrong = 0;
  for (size_t i = 0; me >= 0 && i < COUNT; i++) {
    int32_t want = value(0, i) + value(2, i) + value(3, i);
    if (recv[i] != want && wrong++ < 3)
      fprintf(stderr, "rank %d: element %zu is %d, want %d\n", rank, i, (int)recv[i], (int)want);
  }
  free(send);
  free(recv);
  r = relayCommDestroy(comm);
  return wrong != 0 || r != relaySuccess;
}

int main(void) {
  int version = 0;
  if (relayGetVersion(&version) != relaySuccess || version != RELAYCC_VERSION_CODE) {
    fprintf(stderr, "library version %d, header %d (%s)\n", version, RELAYCC_VERSION_CODE,
            RELAYCC_VERSION_STRING);
    return 1;
  }
  char job[64];
  snprintf(job, sizeof job, "relaycc-example-%d", (int)getpid()); /* concurrent runs never meet */
  pid_t pids[NRANKS];
  for (int r = 0; r < NRANKS; r++) {
    pids[r] = fork();
    if (pids[r] < 0) return 1;
    if (pids[r] == 0) _exit(rankMain(r, job));
  }
  /* 30 s: past the comm's own 20 s deadline, so a rank that fails has reported before it is killed. */
  int failed = 0, left = NRANKS;
  time_t deadline = time(NULL) + 30;
  while (left > 0) {
    int st;
    pid_t p = waitpid(-1, &st, WNOHANG);
    if (p > 0) {
      left--;
      for (int r = 0; r < NRANKS; r++)
        if (pids[r] == p) pids[r] = 0; /* reaped: never signal its (reusable) pid */
      if (!WIFEXITED(st) || WEXITSTATUS(st) != 0) failed = 1;
    } else if (p < 0 || time(NULL) > deadline) {
      fprintf(stderr, "ranks still running after 30 s: killing them\n");
      for (int r = 0; r < NRANKS; r++)
        if (pids[r] > 0) kill(pids[r], SIGKILL);
      while (wait(NULL) > 0) {
      }
      return 1;
    } else {
      nanosleep(&(struct timespec){.tv_sec = 0, .tv_nsec = 1000000}, NULL); /* 1 ms between polls */
    }
  }
  printf("relaycc %s: all-reduce of %d int32 over ranks 0,2,3 with helper 1: %s\n", RELAYCC_VERSION_STRING,
         COUNT, failed ? "FAILED" : "OK");
  return failed;
}
