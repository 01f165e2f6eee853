/*
 * The shm transport's waits: futex sleeps and deadlines, peer death, and the
 * failure notices a rank leaves in its slot (failed, rejected, aborted) so
 * that peers waiting on it return at once. Every wait of the transport
 * (rendezvous, group, agree, the one-shot's and bw's words) pauses and judges
 * its peers here, so the deadline and death rules are one piece of code.
 *
 * Waits: poll, spin cfg.spinCount times (the first cfg.spinBusy with a CPU
 * pause hint, the rest yielding the core), then sleep on this rank's
 * doorbell with FUTEX_WAIT (shared, not PRIVATE: the word lives in a shared
 * mapping) in slices of SHM_SLICE_MS, checking between slices the deadline,
 * the abort flag, the failure/reject status of the peers still awaited and
 * whether their processes are still alive.
 */
#include "transport/shm/shm_transport.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <linux/futex.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "comm/common.h"

static long shmFutex(_Atomic uint32_t* addr, int op, uint32_t val, const struct timespec* ts) {
  return syscall(SYS_futex, (uint32_t*)addr, op, val, ts, NULL, 0);
}

/* Ring rank q's doorbell: bump and wake it only if it may sleep. A rank that spins reads its doorbell in
 * every poll, so a bump on every ring (a locked add: the line taken from the spinner and pulled back by its
 * next poll) cost each ring two transfers of that line; now a ring reads a line nobody writes while every
 * rank spins. On the 16-core Xeon (relaycc-bench on shm, 2 alternations with main's build, median us of
 * the slowest rank's call) 8 ranks: all-reduce 4 KiB 18.8-19.2 -> 9.1-10.8, all-to-all 4 KiB 6.6-7.2 ->
 * 3.8-4.5; 4 ranks: all-reduce 4 KiB 7.6-8.0 -> 6.0-6.3, all-to-all 3.3-3.7 -> 3.0-3.1; 2 ranks within
 * noise (docs/perf/2026-12-06-cpu-16core-stagger-ring.md). The fence pairs with shmSleep's after it arms
 * (Dekker): either this load sees waiting != 0, or the sleeper's polls after arming see what the caller
 * stored before the ring. */
void shmWake(shmSlot* s) {
  atomic_thread_fence(memory_order_seq_cst);
  if (!atomic_load_explicit(&s->waiting, memory_order_relaxed)) return;
  atomic_fetch_add_explicit(&s->doorbell, 1, memory_order_seq_cst);
  shmFutex(&s->doorbell, FUTEX_WAKE, INT_MAX, NULL);
}

/* Sleep on the doorbell snapshot db, at most ns, once armed. Unarmed (waiting 0: rings do not bump), it
 * only arms and returns 0: the caller polls once more, its doorbell snapshot and its condition read after
 * the arming, before it sleeps (returns 1) on a call that finds it armed. The sleep disarms, so a rank
 * that spins again is not rung for nothing; so does shmWaiterEnd after an arm that found its word.
 * What makes it right, for any new caller: every FUTEX_WAIT follows an arm and its fence, then a doorbell
 * snapshot and the condition's check in that order, with waiting 1 all along, and only this rank's own
 * thread of this comm writes its waiting word (shmAbort, from any thread, bumps and wakes regardless). */
int shmSleep(shmSlot* me, uint32_t db, uint64_t ns) {
  if (!atomic_load_explicit(&me->waiting, memory_order_relaxed)) {
    atomic_store_explicit(&me->waiting, 1, memory_order_relaxed);
    atomic_thread_fence(memory_order_seq_cst);
    return 0;
  }
  struct timespec ts = {(time_t)(ns / 1000000000ull), (long)(ns % 1000000000ull)};
  if (atomic_load_explicit(&me->doorbell, memory_order_seq_cst) == db)
    shmFutex(&me->doorbell, FUTEX_WAIT, db, &ts);
  atomic_store_explicit(&me->waiting, 0, memory_order_relaxed);
  return 1;
}

void shmNap(int ms) {
  struct timespec ts = {0, (long)ms * 1000000L};
  nanosleep(&ts, NULL);
}

/* Alive unless the process is gone or a zombie (a killed rank whose parent
 * has not reaped it yet still answers kill(pid, 0)). */
int shmPidAlive(int32_t pid) {
  if (pid <= 0) return 0; /* kill(0 or -1, ...) would address groups */
  if (kill(pid, 0) != 0 && errno == ESRCH) return 0;
  char path[64], buf[256];
  snprintf(path, sizeof path, "/proc/%d/stat", (int)pid);
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return 1;
  ssize_t n = read(fd, buf, sizeof buf - 1);
  close(fd);
  if (n <= 0) return 1;
  buf[n] = 0;
  const char* rp = strrchr(buf, ')'); /* the command name may hold spaces */
  if (rp && rp[1] == ' ' && (rp[2] == 'Z' || rp[2] == 'X')) return 0;
  return 1;
}

/* The inode of our PID namespace: pids from another namespace (containers
 * sharing /dev/shm but not PIDs) must not be judged by kill(). 0 when /proc
 * is not there, which then matches any other 0. */
uint64_t shmPidNamespace(void) {
  struct stat sb;
  return stat("/proc/self/ns/pid", &sb) == 0 ? (uint64_t)sb.st_ino : 0;
}

/* Is peer q's process known dead? Unknown pids are never dead: the deadline
 * still bounds the wait. */
int shmPeerDead(const shmState* st, int q) { return st->pids[q] > 0 && !shmPidAlive(st->pids[q]); }

relayResult_t shmDeadPeer(struct relayComm* comm, char* why, size_t whyLen) {
  shmState* st = shmStateOf(comm);
  if (whyLen) why[0] = 0;
  for (int q = 0; st && q < comm->nranks; q++)
    if (q != comm->rank && shmPeerDead(st, q)) {
      snprintf(why, whyLen, "rank %d (pid %d) died", q, (int)st->pids[q]);
      return relayRemoteError;
    }
  return relaySuccess;
}

/* Record this rank's failure in its slot once, so peers waiting on it return
 * at once (with our message) instead of at their deadline. */
static void shmPublishStatus(shmState* st, int me, uint32_t status, const struct relayComm* comm) {
  shmSlot* s = &st->slots[me];
  /* The call it fails in, for the peers' judge: one that finds another shape fails before it ever pauses,
   * and its peers then name the shapes, not only its failure. */
  if (comm)
    atomic_store_explicit(&s->callAt, ((uint64_t)(uint32_t)comm->callSeq << 32) | (uint32_t)comm->callShape,
                          memory_order_release);
  if (atomic_exchange_explicit(&s->failClaim, 1, memory_order_acq_rel) == 0) {
    if (comm) {
      s->failCall = comm->callSeq;
      s->failStep = comm->curStep;
      shmCopyMsg(s->failMsg, sizeof s->failMsg, comm->lastError);
    } else {
      s->failMsg[0] = 0;
    }
    atomic_store_explicit(&s->status, status, memory_order_release);
  }
  int n = (int)st->hdr->nranks;
  for (int q = 0; q < n; q++)
    if (q != me) shmWake(&st->slots[q]);
}

/* Every error of group/agree: the comm is failed (data may have moved). */
relayResult_t shmFail(struct relayComm* comm, relayResult_t res) {
  shmState* st = shmStateOf(comm);
  comm->failed = 1;
  shmPublishStatus(st, comm->rank, SHM_FAILED, comm);
  return res;
}

int shmAborted(struct relayComm* comm, shmState* st) {
  return atomic_load_explicit(&comm->aborted, memory_order_relaxed) ||
         atomic_load_explicit(&st->abortedLocal, memory_order_relaxed);
}

/* What is wrong with peer q, as far as its slot says (no syscall). */
int shmPeerState(struct relayComm* comm, shmState* st, int q) {
  shmSlot* s = &st->slots[q];
  /* Check mode 0: a peer that waits (or waited) in this very call with another shape will never give what
   * this rank waits for (rank 2 in the bandwidth route's setup of an all-reduce while its peers wait for
   * its one-shot push of a reduce-scatter: issue 25.2). Both shapes known: every rank of a valid call has
   * the same one, so this is never a false alarm. Before its status: a peer that failed on finding it
   * failed for this reason, which this rank then names too. */
  uint64_t at = atomic_load_explicit(&s->callAt, memory_order_acquire);
  if ((uint32_t)comm->callShape && (uint32_t)at && (uint32_t)(at >> 32) == (uint32_t)comm->callSeq &&
      (uint32_t)at != (uint32_t)comm->callShape)
    return SHM_PEER_SHAPE;
  uint32_t status = atomic_load_explicit(&s->status, memory_order_acquire);
  if (status == SHM_FAILED) return SHM_PEER_FAILED;
  if (status == SHM_ABORTED) return SHM_PEER_ABORTED;
  if (status == SHM_GONE) return SHM_PEER_GONE;
  /* A point-to-point group has no call number: a peer's rejected call is no answer to it (a rejected
   * transfer is a header of its own: group.c). */
  uint64_t rej = atomic_load_explicit(&s->rejectSeq, memory_order_acquire);
  if (rej != 0 && rej == comm->callSeq && !comm->inPt2pt) return SHM_PEER_REJECTED;
  return SHM_PEER_OK;
}

/* where: what the wait was for beyond the call and step the error prefix
 * names ("agreement round 5", "one-shot, waiting for flag epoch 3"); NULL
 * for a group step, which the prefix names in full. */
relayResult_t shmPeerError(struct relayComm* comm, shmState* st, int q, int what, const char* where) {
  shmSlot* s = &st->slots[q];
  const char* sep = where ? ": " : "";
  if (!where) where = "";
  switch (what) {
    case SHM_PEER_FAILED:
      return relaySetError(comm, relayRemoteError, "%s%srank %d failed (its error: %s)", where, sep, q,
                           s->failMsg[0] ? s->failMsg : "none recorded");
    case SHM_PEER_ABORTED:
      return relaySetError(comm, relayRemoteError, "%s%srank %d aborted its comm", where, sep, q);
    case SHM_PEER_GONE:
      return relaySetError(comm, relayRemoteError,
                           "%s%srank %d destroyed its comm while this rank still waits on it", where, sep, q);
    case SHM_PEER_REJECTED:
      return relaySetError(comm, relayRemoteError, "%s%srank %d rejected call #%llu before moving data",
                           where, sep, q, (unsigned long long)comm->callSeq);
    case SHM_PEER_SHAPE:
      return relaySetError(
          comm, relayInvalidUsage,
          "%s%srank %d waits in call #%llu with another shape: ranks disagree on the collective, "
          "layout, counts, datatype, op or root",
          where, sep, q, (unsigned long long)comm->callSeq);
    default:
      return relaySetError(comm, relayRemoteError, "%s%srank %d (pid %d) died", where, sep, q,
                           (int)st->pids[q]);
  }
}

/* A busy poll's pause: tells the core this is a spin (x86 PAUSE, arm64 YIELD: less power, and the sibling
 * hyperthread runs), no syscall. */
static inline void shmCpuRelax(void) {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__)
  __asm__ __volatile__("yield" ::: "memory");
#endif
}

void shmWaiterInit(shmWaiter* w) {
  w->lastProgress = relayNowNs();
  w->lastLiveCheck = w->lastProgress;
  w->spins = 0;
  w->spun = 0;
  w->armed = NULL;
}

/* A wait that armed (shmSleep) and then found what it waited for without sleeping disarms, so rings to this
 * rank stop bumping its doorbell; every success return of a wait loop calls it (an arm left behind costs
 * each ring to this rank a locked add and a FUTEX_WAKE until its next sleep: 1-7% of 4-rank calls returned
 * armed with RELAYCC_SPIN_US=1 before the loops' last returns did, review of 2026-12-06). */
void shmWaiterEnd(shmWaiter* w) {
  if (w->armed) atomic_store_explicit(w->armed, 0, memory_order_relaxed);
  w->armed = NULL;
}

/* The wait got something: its spin starts over. A spin that got it (no sleep yet) lowers the cut. */
void shmWaiterProgress(shmState* st, shmWaiter* w) {
  if (!w->spun && w->spins > 0 && st->spinCut > 0) st->spinCut--;
  shmWaiterEnd(w);
  w->spins = 0;
  w->spun = 0;
  w->lastProgress = relayNowNs();
}

/* Says where this rank runs, for its peers' waits (shmPause), and returns it (1 + the CPU; 0: unknown). Every
 * wait of the transport calls it on entry, waiting or not, and again on its first pause: were it said only
 * where a wait begins, a rank that never waits (it always arrives last: everything is there) would keep the
 * CPU of its last wait, and a peer the scheduler put on its core since would spin RELAYCC_SPIN_US there in
 * every call (test_shm spin_colocated_stale: 97312 busy polls in 39 calls, 2 ranks on one CPU). A store only
 * when the CPU changed: the word shares the doorbell's line, which every peer's ring writes. */
int shmNoteCpu(struct relayComm* comm, shmState* st) {
  if (comm->cfg.spinBusy <= 0) return 0; /* no busy polls to skip */
  int cpu = sched_getcpu() + 1;          /* ~7 ns (glibc 2.36, 2-core Xeon) */
  if (cpu != st->cpuNoted) {
    st->cpuNoted = cpu;
    atomic_store_explicit(&st->slots[comm->rank].cpu, cpu, memory_order_relaxed);
  }
  return cpu;
}

/* A wait made no progress: busy-poll (cfg.spinBusy polls), yield the core (cfg.spinCount polls in all),
 * then sleep one bounded slice on our doorbell. The spins are bounded, so the deadline and the peers'
 * liveness are judged once they are spent and between every slice after. Returns 1 when the wait's
 * deadline (no progress for timeoutMs) passed. */
int shmPause(struct relayComm* comm, shmState* st, shmWaiter* w, uint32_t db, int peer) {
  /* Busy polls are for a peer running on another core. Where the ranks' CPUs allow a core each
   * (cfg.spinBusy > 0) the scheduler may still put two ranks on one core (other processes busy on the
   * rest: wake-affine placement), and a busy poll then keeps the core from the peer it waits for until
   * RELAYCC_SPIN_US ends it, every wait of every call: 2 unbound ranks with 4 busy processes on the 2-core
   * Xeon took 105 us a 4 KiB all-reduce (spread 1.00) against 1.4 bound. So each wait first says where it
   * runs (shmNoteCpu), and one that finds a peer last seen entering a wait on this same CPU sleeps at once
   * (the futex hands the core over): 5-15 us there (docs/perf/2026-12-05-cpu-coloc-2core.md). A peer seen
   * there that has moved since costs one sleep and wake-up; a wait that spins still ends its spin by time.
   * peer: the one rank the wait is for, whose word alone is read (each word shares a line every ring writes:
   * a miss a peer), or -1 for a wait on several, which reads every rank's. */
  if (!w->spun && w->spins == 0 && comm->cfg.spinBusy > 0) {
    int cpu = shmNoteCpu(comm, st), n = comm->nranks; /* 0: unknown, never a match */
    for (int q = peer >= 0 ? peer : 0; q < (peer >= 0 ? peer + 1 : n) && cpu > 0 && !w->spun; q++)
      if (q != comm->rank && atomic_load_explicit(&st->slots[q].cpu, memory_order_relaxed) == cpu) {
        w->spun = 1;
        st->coLocatedWaits++;
      }
  }
  if (!w->spun) {
    int polls = comm->cfg.spinCount >> st->spinCut;
    if (comm->cfg.spinCount > 2 && polls < 2) polls = 2; /* a probe, so the cut can come down again */
    int i = w->spins, busy = i < comm->cfg.spinBusy;
    /* The clock (a vDSO read, ~20 ns) every 16th busy poll and every yield: a yield can run another rank's
     * whole slice. */
    if (i < polls && !((!busy || (i & 15) == 0) && relayNowNs() - w->lastProgress >= comm->cfg.spinNs)) {
      w->spins++;
      if (busy) {
        shmCpuRelax();
        st->busyPolls++;
      } else {
        sched_yield();
      }
      return 0;
    }
    w->spun = 1; /* spent: judge the deadline and the peers, then sleep */
    if (comm->cfg.spinAdapt && st->spinCut < 16) st->spinCut++;
  }
  uint64_t now = relayNowNs();
  uint64_t limit = relayWaitLimitNs(comm);
  uint64_t waited = now - w->lastProgress;
  if (waited >= limit) return 1;
  /* About to sleep: say which call this rank waits in, for the peers' judge (shmPeerState). A store per
   * slice, none on the fast path. */
  atomic_store_explicit(&st->slots[comm->rank].callAt,
                        ((uint64_t)(uint32_t)comm->callSeq << 32) | (uint32_t)comm->callShape,
                        memory_order_release);
  uint64_t ns = (uint64_t)SHM_SLICE_MS * 1000000ull;
  if (limit - waited < ns) ns = limit - waited;
  shmSlot* me = &st->slots[comm->rank];
  w->armed = shmSleep(me, db, ns) ? NULL : &me->waiting;
  st->arms += w->armed != NULL;
  return 0;
}

/* Time for the (syscall-costing) liveness check of the peers we wait on? */
int shmLiveCheckDue(shmWaiter* w) {
  uint64_t now = relayNowNs();
  if (now - w->lastLiveCheck < (uint64_t)SHM_SLICE_MS * 1000000ull) return 0;
  w->lastLiveCheck = now;
  return 1;
}

/* ------------------------------------- failure notices: reject, fail, abort */

void shmReject(struct relayComm* comm) {
  shmState* st = shmStateOf(comm);
  if (!st || !st->slots) return;
  /* The call it rejects is comm->callSeq (core counts rejected calls too):
   * a peer in that call honours it, one in a later call does not. */
  atomic_store_explicit(&st->slots[comm->rank].rejectSeq, comm->callSeq, memory_order_release);
  for (int q = 0; q < comm->nranks; q++)
    if (q != comm->rank) shmWake(&st->slots[q]);
}

void shmFailOp(struct relayComm* comm) {
  if (shmStateOf(comm) && shmStateOf(comm)->slots) (void)shmFail(comm, relaySuccess);
}

/* Only atomics and futex syscalls: callable from another thread or a signal
 * handler while this rank sleeps in a wait. */
void shmAbort(struct relayComm* comm) {
  shmState* st = shmStateOf(comm);
  if (!st || !st->slots) return;
  atomic_store_explicit(&st->abortedLocal, 1, memory_order_seq_cst);
  shmSlot* s = &st->slots[comm->rank];
  if (atomic_exchange_explicit(&s->failClaim, 1, memory_order_acq_rel) == 0)
    atomic_store_explicit(&s->status, SHM_ABORTED, memory_order_release);
  for (int q = 0; q < comm->nranks; q++) {
    atomic_fetch_add_explicit(&st->slots[q].doorbell, 1, memory_order_seq_cst);
    shmFutex(&st->slots[q].doorbell, FUTEX_WAKE, INT_MAX, NULL);
  }
}

/* The wait's "where" for its error (the call and step are the error prefix's), formatted only on the way out:
 * an snprintf a wait that did not find its word there at once was ~4% of a 2-rank 4 KiB all-to-all's samples
 * in the call; without it the call's median went 0.54 -> 0.50 us (min 0.36-0.39 -> 0.37-0.39, about +0.01;
 * 10 alternations, 2-vCPU EPYC, docs/perf/2026-12-06-cpu-oneshot-overhead-2core.md). */
static const char* waitWhere(char* buf, size_t len, const char* proto, const char* what, uint32_t want) {
  snprintf(buf, len, "%s, waiting for %s epoch %u", proto, what, want);
  return buf;
}

relayResult_t relayShmWaitWord(struct relayComm* comm, _Atomic uint32_t* word, uint32_t want, int q,
                               const char* proto, const char* what) {
  char where[128];
  shmState* st = shmStateOf(comm);
  shmSlot* me = &st->slots[comm->rank];
  shmWaiter w;
  shmWaiterInit(&w);
  for (;;) {
    uint32_t db = atomic_load_explicit(&me->doorbell, memory_order_acquire);
    if ((int32_t)(atomic_load_explicit(word, memory_order_acquire) - want) >= 0) {
      shmWaiterProgress(st, &w);
      return relaySuccess;
    }
    if (shmAborted(comm, st))
      return relaySetError(comm, relayInvalidUsage, "%s: the comm was aborted",
                           waitWhere(where, sizeof where, proto, what, want));
    int state = shmPeerState(comm, st, q);
    if (state == SHM_PEER_OK && w.spun && shmLiveCheckDue(&w) && shmPeerDead(st, q)) state = SHM_PEER_DEAD;
    if (state != SHM_PEER_OK) {
      /* What it stored before it failed or died counts. */
      if ((int32_t)(atomic_load_explicit(word, memory_order_acquire) - want) >= 0) {
        shmWaiterEnd(&w);
        return relaySuccess;
      }
      return shmPeerError(comm, st, q, state, waitWhere(where, sizeof where, proto, what, want));
    }
    if (shmPause(comm, st, &w, db, q)) return relayTimeout;
  }
}

void relayShmRing(struct relayComm* comm, int q) { shmWake(&shmStateOf(comm)->slots[q]); }
