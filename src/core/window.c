/*
 * Registered buffers (windows): relayCommRegister / relayCommDeregister
 * (relaycc.h says the contract), the comm's table of them, and the per-call
 * match that sends a call down the bandwidth route's direct path.
 *
 * Both calls are collective: each rank's verdict is voted (relayVote), its
 * arguments exchanged in one more round, then the transport's winRegister (its
 * own rounds: shm exchanges pids and probes cross-memory attach, NCCL opens
 * IPC handles) decides direct or staged-only, alike on every rank. They count
 * as calls (comm->callSeq, curCallName), so their errors carry the prefix
 * "relayCommRegister (rank R, call #N)" like a collective's.
 *
 * The match is local (no round trip, as NCCL's symmetric windows): a rank
 * whose buffers that peers access lie in a direct window takes the direct
 * path with their offsets; the caller promises every active has them at the
 * same offsets, check mode verifies it (api.c), and the transport's entry
 * barrier carries window and offsets so that a broken promise never reads the
 * wrong bytes (shm/bw.c: every active takes the staged path together).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "comm/comm.h"
#include "comm/common.h"
#include "comm/vote.h"
#include "core/core.h"
#include "plan/plan.h"

/* What each rank votes at registration and deregistration. */
typedef struct {
  int32_t status;       /* this rank's local verdict */
  int32_t has;          /* 1: a buffer (register), a known window (deregister) */
  uint64_t base, bytes; /* register: the buffer; deregister: bytes = window id */
} winVote;

static void winEnter(struct relayComm* c, const char* fn) {
  atomic_store(&c->inCall, 1);
  c->callSeq++; /* counted on every rank, as every call is (api.c) */
  c->curCallName = fn;
  c->curStep = -1;
}

static relayResult_t winLeave(struct relayComm* c, relayResult_t res) {
  c->curCallName = NULL;
  atomic_store(&c->inCall, 0);
  return res;
}

/* The vote, then (every rank said yes) the round of arguments: *allOut =
 * every rank's record, in the comm's agreement buffer (valid until its next
 * round). A rank's rejection fails every rank: its own message first (it
 * names the argument), its peers quote it. */
static relayResult_t winAgree(struct relayComm* c, const winVote* mine, const winVote** allOut) {
  *allOut = NULL;
  char saved[sizeof c->lastError];
  memcpy(saved, c->lastError, sizeof saved);
  relayResult_t local = (relayResult_t)mine->status;
  relayBallot b = {local, 0, saved};
  relayVerdict v;
  RELAY_CHECK(relayVoteBallot(c, &b, &v));
  if (local != relaySuccess) {
    memcpy(c->lastError, saved, sizeof saved);
    return local;
  }
  if (!v.yes)
    return relaySetError(c, v.status, "rank %d rejected it (%s): %s", v.rank, relayGetErrorString(v.status),
                         v.why);
  const void* all;
  RELAY_CHECK(relayAgree(c, mine, sizeof *mine, &all));
  *allOut = all;
  return relaySuccess;
}

static int winIndex(const struct relayComm* c, const struct relayWindow* w) {
  for (int i = 0; i < c->nWindows; i++)
    if (c->windows[i] == w) return i;
  return -1;
}

relayResult_t relayCommRegister(relayComm_t comm, void* buff, size_t bytes, relayWindow_t* win) {
  if (!comm) return relaySetError(NULL, relayInvalidArgument, "relayCommRegister: comm is NULL");
  if (win) *win = NULL;
  struct relayComm* c = comm;
  winEnter(c, "relayCommRegister");
  if (c->failed || atomic_load(&c->aborted))
    return winLeave(c, relaySetError(c, relayInvalidUsage, "the comm %s; destroy it",
                                     c->failed ? "failed in an earlier call" : "was aborted"));
  relayResult_t local = relaySuccess;
  struct relayWindow* w = NULL;
  if (!win) local = relaySetError(c, relayInvalidArgument, "win (argument 4) is NULL");
  else if (!buff && bytes)
    local = relaySetError(c, relayInvalidArgument,
                          "buff is NULL with bytes = %zu (a rank without a buffer passes NULL and 0)", bytes);
  else if (buff && !bytes)
    local = relaySetError(c, relayInvalidArgument,
                          "bytes is 0 with buff %p (a rank without a buffer passes NULL)", buff);
  else if (c->tp->isCapturing && c->tp->isCapturing(c, NULL))
    local = relaySetError(c, relayInvalidUsage, "called while a stream is being captured");
  if (local == relaySuccess && c->nWindows == c->capWindows) {
    int cap = c->capWindows ? 2 * c->capWindows : 4;
    struct relayWindow** t = realloc(c->windows, (size_t)cap * sizeof *t);
    if (t) {
      c->windows = t;
      c->capWindows = cap;
    } else {
      local = relaySetError(c, relaySystemError, "out of memory for the window table");
    }
  }
  if (local == relaySuccess && !(w = calloc(1, sizeof *w)))
    local = relaySetError(c, relaySystemError, "out of memory for a window");
  winVote mine = {(int32_t)local, buff != NULL, (uint64_t)(uintptr_t)buff, (uint64_t)bytes};
  const winVote* all = NULL;
  relayResult_t res = winAgree(c, &mine, &all);
  int first = -1;
  for (int q = 0; res == relaySuccess && q < c->nranks; q++) {
    if (!all[q].has) continue;
    if (first < 0) first = q;
    else if (all[q].bytes != all[first].bytes)
      res = relaySetError(
          c, relayInvalidArgument,
          "rank %d registers %llu bytes, rank %d %llu (every rank that passes a buffer passes the same "
          "bytes)",
          q, (unsigned long long)all[q].bytes, first, (unsigned long long)all[first].bytes);
  }
  if (res == relaySuccess && first < 0)
    res = relaySetError(c, relayInvalidArgument, "no rank passed a buffer (every rank passed NULL and 0)");
  uint64_t* bases = NULL;
  if (res == relaySuccess) {
    w->comm = c;
    w->id = c->windowSeq + 1;
    w->base = buff;
    w->bytes = (size_t)all[first].bytes;
    bases = malloc((size_t)c->nranks * sizeof *bases);
    if (bases)
      for (int q = 0; q < c->nranks; q++) bases[q] = all[q].has ? all[q].base : 0;
    /* bases is copied out of the agreement buffer before the transport's
     * rounds reuse it. A rank without memory for the list still joins them:
     * it passes NULL and the transport votes staged-only. */
    res = c->tp->winRegister ? c->tp->winRegister(c, w, bases) : relaySuccess;
  }
  free(bases);
  if (res != relaySuccess) {
    free(w);
    return winLeave(c, res);
  }
  c->windowSeq++; /* after the transport: every rank agreed, so every rank counts it */
  c->windows[c->nWindows++] = w;
  c->directWindows += w->direct;
  if (relayDebugLevel() >= 1)
    fprintf(stderr, "relaycc: rank %d: window %u of %zu bytes at %p: %s\n", c->rank, w->id, w->bytes, buff,
            w->direct ? "direct" : "staged only");
  *win = w;
  return winLeave(c, relaySuccess);
}

relayResult_t relayCommDeregister(relayComm_t comm, relayWindow_t win) {
  if (!comm) return relaySetError(NULL, relayInvalidArgument, "relayCommDeregister: comm is NULL");
  struct relayComm* c = comm;
  winEnter(c, "relayCommDeregister");
  if (c->failed || atomic_load(&c->aborted))
    return winLeave(c, relaySetError(c, relayInvalidUsage, "the comm %s; destroy it",
                                     c->failed ? "failed in an earlier call" : "was aborted"));
  /* Only pointers from this comm's table are dereferenced: a foreign or
   * freed handle is found by address. */
  int at = win ? winIndex(c, win) : -1;
  relayResult_t local = relaySuccess;
  if (!win) local = relaySetError(c, relayInvalidArgument, "win is NULL");
  else if (at < 0)
    local = relaySetError(c, relayInvalidArgument,
                          "win %p is not a window of this comm (foreign, or deregistered)", (void*)win);
  winVote mine = {(int32_t)local, at >= 0, 0, at >= 0 ? win->id : 0};
  const winVote* all = NULL;
  relayResult_t res = winAgree(c, &mine, &all);
  for (int q = 1; res == relaySuccess && q < c->nranks; q++)
    if (all[q].bytes != all[0].bytes)
      res = relaySetError(c, relayInvalidUsage, "rank %d deregisters window %llu, rank 0 window %llu", q,
                          (unsigned long long)all[q].bytes, (unsigned long long)all[0].bytes);
  if (res != relaySuccess) return winLeave(c, res);
  if (c->tp->winDeregister) c->tp->winDeregister(c, win, 1);
  c->directWindows -= win->direct;
  c->windows[at] = c->windows[--c->nWindows];
  free(win);
  return winLeave(c, relaySuccess);
}

void relayWindowFreeAll(struct relayComm* c) {
  for (int i = 0; i < c->nWindows; i++) {
    if (c->tp && c->tp->winDeregister) c->tp->winDeregister(c, c->windows[i], 0);
    free(c->windows[i]);
  }
  free(c->windows);
  c->windows = NULL;
  c->nWindows = c->capWindows = c->directWindows = 0;
}

/* [p, p + bytes) inside w's buffer on this rank: its offset, else -1. */
static int winHolds(const struct relayWindow* w, const void* p, size_t bytes, size_t* off) {
  uintptr_t b = (uintptr_t)w->base, x = (uintptr_t)p;
  if (!w->base || x < b || x - b > w->bytes || bytes > w->bytes - (x - b)) return 0;
  *off = x - b;
  return 1;
}

const struct relayWindow* relayWindowMatch(const struct relayComm* c, const planKey* key, const void* send,
                                           const void* recv, size_t* sendOff, size_t* recvOff) {
  *sendOff = *recvOff = 0;
  if (!c->directWindows || key->nGroups != 1 || !relayCollIsLayout(key->coll)) return NULL;
  uint64_t se, re;
  planCallerExtents(key, c->rank, &se, &re);
  if (!se || !re) return NULL; /* a helper, or nothing to move */
  size_t es = relayTypeSize(key->dtype);
  /* What peers access (relaycc.h): gathers write my recv, reduce-scatter reads my send, all-reduce both. */
  int needSend = key->coll == relayCollectiveReduceScatter || key->coll == relayCollectiveAllReduce;
  int needRecv = key->coll != relayCollectiveReduceScatter;
  for (int i = 0; i < c->nWindows; i++) {
    const struct relayWindow* w = c->windows[i];
    size_t so = 0, ro = 0;
    if (!w->direct) continue;
    if (needSend && !winHolds(w, send, (size_t)se * es, &so)) continue;
    if (needRecv && !winHolds(w, recv, (size_t)re * es, &ro)) continue;
    *sendOff = so;
    *recvOff = ro;
    return w;
  }
  return NULL;
}
