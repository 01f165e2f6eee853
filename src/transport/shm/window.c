/*
 * Registered windows on the shm transport: the CPU twin of nccl/window.c.
 * A window registered on every rank (relayCommRegister) is reachable with
 * cross-memory attach: process_vm_readv / process_vm_writev copy between
 * this process and a peer's address space in one syscall, the CPU analogue
 * of NVLink loads and stores into an IPC-mapped buffer. Registration
 * exchanges pids (core already exchanged the buffers' addresses), probes a
 * one-byte read of every peer's buffer (the kernel's ptrace-attach check:
 * Yama's ptrace_scope, containers or seccomp can refuse it; a read allowed
 * means a write is too, it is the same check) and votes: any refusal makes
 * the window staged-only on every rank, RELAYCC_DEBUG=1 naming rank, peer
 * and errno. The bandwidth route's direct path (bw.c) moves data through a
 * window with relayShmWinCopy.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/uio.h>
#include <unistd.h>

#include "comm/comm.h"
#include "comm/common.h"
#include "comm/params.h"
#include "comm/vote.h"
#include "plan/plan.h"
#include "transport/shm/shm_transport.h"

static void winFree(relayShmWin* x) {
  if (!x) return;
  free(x->pids);
  free(x->bases);
  free(x->pull);
  free(x);
}

/* In as many syscalls as the kernel takes: it may move less than asked. */
relayResult_t relayShmCmaCopy(struct relayComm* comm, int32_t pid, int p, int write, void* local,
                              uint64_t remote, size_t len, uint64_t base, const char* where) {
  size_t done = 0;
  while (done < len) {
    struct iovec l = {(char*)local + done, len - done}, r = {(void*)(uintptr_t)(remote + done), len - done};
    ssize_t n = write ? process_vm_writev(pid, &l, 1, &r, 1, 0) : process_vm_readv(pid, &l, 1, &r, 1, 0);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0)
      return relaySetError(comm, errno == ESRCH ? relayRemoteError : relaySystemError,
                           "bw direct: %s %zu bytes %s rank %d (pid %d) at %s offset %llu: %s%s",
                           write ? "writing" : "reading", len - done, write ? "into" : "from", p, (int)pid,
                           where, (unsigned long long)(remote + done - base),
                           n == 0 ? "no progress" : strerror(errno), errno == ESRCH ? " (it died)" : "");
    done += (size_t)n;
  }
  return relaySuccess;
}

relayResult_t relayShmWinRegister(struct relayComm* comm, struct relayWindow* w, const uint64_t* bases) {
  int n = comm->nranks, r = comm->rank;
  relayShmWin* x = calloc(1, sizeof *x);
  int32_t pid = (int32_t)getpid();
  if (x) {
    x->pids = calloc((size_t)n, sizeof *x->pids);
    x->bases = calloc((size_t)n, sizeof *x->bases);
    /* The tile a reduce pulls at once: the route's (its key's rounding). */
    planKey k;
    memset(&k, 0, sizeof k);
    k.bwTileBytes = (uint32_t)relayParamInt(comm, RELAY_P_BW_TILE_BYTES);
    x->pullTile = planBwTileBytes(&k);
    int peers = (n < RELAY_TP_ONESHOT_MAX ? n : RELAY_TP_ONESHOT_MAX) - 1;
    x->pull = malloc((size_t)(peers > 0 ? peers : 1) * x->pullTile);
  }
  const void* got;
  relayResult_t res = relayAgree(comm, &pid, sizeof pid, &got);
  if (res != relaySuccess) {
    winFree(x);
    return res;
  }
  int ok = x && x->pids && x->bases && x->pull && bases;
  char why[160] = "";
  if (!ok) {
    snprintf(why, sizeof why, "it is out of memory for the probe");
  } else {
    memcpy(x->pids, got, (size_t)n * sizeof *x->pids);
    memcpy(x->bases, bases, (size_t)n * sizeof *bases);
    for (int q = 0; q < n && ok; q++) {
      if (q == r || !bases[q]) continue;
      char byte;
      struct iovec l = {&byte, 1}, rv = {(void*)(uintptr_t)bases[q], 1};
      if (process_vm_readv(x->pids[q], &l, 1, &rv, 1, 0) != 1) {
        snprintf(why, sizeof why, "it cannot reach rank %d's buffer with process_vm_readv (%s)", q,
                 strerror(errno));
        ok = 0;
      }
    }
  }
  relayVerdict v;
  res = relayVote(comm, ok, why, &v);
  int direct = res == relaySuccess && v.yes;
  if (res == relaySuccess && !v.yes && relayDebugLevel() >= 1)
    fprintf(stderr, "relaycc: rank %d: window %u is staged-only: rank %d voted no: %s\n", r, w->id, v.rank,
            v.why);
  if (res != relaySuccess || !direct) {
    winFree(x);
    x = NULL;
  }
  w->direct = direct;
  w->tp = x;
  return res;
}

void relayShmWinDeregister(struct relayComm* comm, struct relayWindow* w, int collective) {
  (void)comm;
  (void)collective; /* no peer state: every direct call ended at its exit barrier */
  winFree(w->tp);
  w->tp = NULL;
}
