/*
 * The shm transport's segment: its layout, shm_open/mmap, the rendezvous and
 * init handshake, and the launch identity that names it. Split from the data
 * path because it runs once per comm, before any peer is trusted, and its
 * failure modes (a crashed run's leftover, two launches under one name, a
 * full /dev/shm) are its own.
 *
 * One POSIX shared-memory segment per comm, named "/relaycc-<job>", holds
 *   - a header (magic, parameters, the creator's nonce and pid, go flag),
 *   - one slot per rank (doorbell word for futex waits, pid, check-in,
 *     failure status, rejected call, two agreement buffers),
 *   - per directed pair i->j (i != j): a small control ring (task headers)
 *     and one SPSC data ring per P2P channel, the pair's ringBytes split
 *     between the channels.
 * Its size is a pure function of (nranks, ringBytes, channels), so every rank
 * can check it before trusting a segment it found under the name.
 *
 * Rendezvous: rank 0 unlinks whatever is under the name (a crashed run's
 * leftover), creates the segment O_EXCL, initializes it and publishes READY.
 * Other ranks open the name until it is READY, check in (pid, arrived =
 * nonce), and while waiting for "go" re-check that the name still resolves to
 * the inode they mapped: if rank 0 replaced a stale segment after they
 * attached to it, they re-attach. Rank 0 unlinks the name when all ranks
 * arrived and only then sets go, so a segment reachable by name never says
 * go: a stale one cannot release anyone.
 */
#include "transport/shm/shm_transport.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "comm/common.h"
#include "comm/params.h"

#define SHM_MAGIC_READY 0x52434331u /* "RCC1": header initialized */
/* 2: control ring + a data ring per P2P channel; 3: call marks, shapes and numbers in records; 4: a joiner's
 * failure in the header; 5: the call each rank waits in (callAt) */
#define SHM_VERSION 5u
/* During rendezvous a rank polls the name (re-attach after a stale segment
 * was replaced); 5 ms makes init take a few ms, not a slice, per replacement. */
#define SHM_INIT_POLL_MS 5
/* Smallest ring rank 0 falls back to when /dev/shm is too small: 8 ranks
 * then need 3.5 MiB, and a 64 KiB ring still moves 16 KiB per handoff. */
#define SHM_FALLBACK_RING (64u << 10)
/* How long a joiner tolerates a live but unjoinable segment under the name
 * before it calls it an argument error (see shmConflictPersists). */
#define SHM_CONFLICT_MS 500
/* Publish head/tail at least every quarter ring so the peer starts copying
 * while we still write: with one core each, both memcpys overlap. */
#define SHM_CHUNK_DIV 4
/* Smallest data ring of one channel: rank 0 lowers the channel count until
 * every channel's ring has 1 KiB (a 4 KiB test ring: at most 4 channels). */
#define SHM_MIN_CHAN_RING 1024u

int shmLayoutOf(int n, uint64_t ring, int channels, shmLayout* L) {
  size_t pairs = (size_t)n * (size_t)(n - 1);
  if (channels < 1 || channels > P2P_MAX_CHANNELS) return -1;
  /* Whole lines keep every ring line-aligned. */
  L->chanBytes = ring / (uint64_t)channels / SHM_LINE * SHM_LINE;
  if (L->chanBytes == 0) return -1;
  L->pairBytes = SHM_CTL_RING + L->chanBytes * (uint64_t)channels;
  L->slots = 4096;
  L->ctl = shmAlignUp(L->slots + (size_t)n * sizeof(shmSlot), SHM_LINE);
  L->data = shmAlignUp(L->ctl + pairs * (size_t)(channels + 1) * sizeof(shmRingCtl), 4096);
  if (pairs && L->pairBytes > (SIZE_MAX - L->data) / pairs) return -1;
  L->total = L->data + pairs * (size_t)L->pairBytes;
  return 0;
}

/* Channels rank 0 gives a pair of ringBytes: the wanted count rounded up to a
 * power of two (the layer's pools are), lowered until every channel's ring
 * holds SHM_MIN_CHAN_RING. */
int shmChannelsFor(int wanted, uint64_t ring) {
  int c = 1;
  while (c < wanted && c < P2P_MAX_CHANNELS) c <<= 1;
  while (c > 1 && ring / (uint64_t)c < SHM_MIN_CHAN_RING) c >>= 1;
  return c;
}

/* ------------------------------------------------------------ rendezvous */

static relayResult_t shmMap(struct relayComm* comm, int fd, size_t size, void** out) {
  void* p = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (p == MAP_FAILED)
    return relaySetError(comm, relaySystemError, "mmap of %zu bytes of the shm segment failed: %s", size,
                         strerror(errno));
  *out = p;
  return relaySuccess;
}

static void shmSetPointers(shmState* st, const shmLayout* L) {
  unsigned char* b = (unsigned char*)st->base;
  st->hdr = (shmHeader*)b;
  st->slots = (shmSlot*)(b + L->slots);
  st->ctl = (shmRingCtl*)(b + L->ctl);
  st->data = b + L->data;
}

void shmUnmap(shmState* st) {
  if (st->base) munmap(st->base, st->size);
  st->base = NULL;
  st->hdr = NULL;
  st->slots = NULL;
}

/* "rank 2" or "ranks 2, 5, 7": those not checked in, into buf. */
static void shmMissing(shmState* st, int n, char* buf, size_t len) {
  int cnt = 0;
  for (int r = 0; r < n; r++)
    if (atomic_load_explicit(&st->slots[r].arrived, memory_order_acquire) != st->nonce) cnt++;
  size_t o = (size_t)snprintf(buf, len, "%s", cnt == 1 ? "rank " : "ranks ");
  int listed = 0;
  for (int r = 0; r < n && o + 16 < len; r++) {
    if (atomic_load_explicit(&st->slots[r].arrived, memory_order_acquire) == st->nonce) continue;
    o += (size_t)snprintf(buf + o, len - o, "%s%d", listed++ ? ", " : "", r);
  }
  if (!cnt) snprintf(buf, len, "no rank (all arrived)");
}

static void shmRecordPids(shmState* st, int n) {
  for (int r = 0; r < n; r++) {
    /* arrived (acquire) orders pidNs and pid, written before it. */
    if (atomic_load_explicit(&st->slots[r].arrived, memory_order_acquire) != st->nonce) continue;
    st->pids[r] =
        st->slots[r].pidNs == st->pidNs ? atomic_load_explicit(&st->slots[r].pid, memory_order_relaxed) : 0;
  }
}

/* Rank 0 could not build the segment (no room in /dev/shm, ...): put a
 * one-page marker under the name that says why, so the other ranks fail now
 * with our reason instead of at their deadline, and remove it once they all
 * read it (or at our deadline: nothing is left behind). */
static void shmAnnounceCreateFailure(struct relayComm* comm, shmState* st, relayResult_t res, uint64_t t0) {
  int n = comm->nranks;
  uint64_t limit = relayWaitLimitNs(comm);
  if (n < 2) return;
  int fd = shm_open(st->name, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
  if (fd < 0) return;
  shmHeader* h = MAP_FAILED;
  /* Reserve the page first: writing an unbacked page of a full tmpfs SIGBUSes. */
  if (ftruncate(fd, 4096) == 0 && posix_fallocate(fd, 0, 4096) == 0)
    h = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  close(fd);
  if (h == MAP_FAILED) {
    shm_unlink(st->name);
    return;
  }
  h->version = SHM_VERSION;
  h->nranks = (uint32_t)n;
  h->creatorPid = (int32_t)getpid();
  h->creatorPidNs = st->pidNs;
  shmCopyMsg(h->failMsg, sizeof h->failMsg, comm->lastError);
  atomic_store_explicit(&h->initFailed, (uint32_t)res + 1, memory_order_relaxed);
  atomic_store_explicit(&h->magic, SHM_MAGIC_READY, memory_order_release);
  while (atomic_load_explicit(&h->failSeen, memory_order_acquire) < (uint32_t)(n - 1) &&
         !shmAborted(comm, st) && relayNowNs() - t0 < limit)
    shmNap(SHM_INIT_POLL_MS);
  shm_unlink(st->name);
  munmap(h, 4096);
}

/* A live segment we cannot join (other nranks or ring size, or our rank held
 * by a live pid) is an error only if it stays SHM_CONFLICT_MS: an old run's
 * rank 0 that still lives (hung, being killed) leaves one that our rank 0
 * replaces within milliseconds of starting. */
static int shmConflictPersists(shmState* st) {
  uint64_t now = relayNowNs();
  if (!st->conflictSince) st->conflictSince = now;
  return now - st->conflictSince >= (uint64_t)SHM_CONFLICT_MS * 1000000ull;
}

/* Whether the segment's creator (rank 0) lives: 1 yes, 0 it is gone, -1 unknown (another pid namespace:
 * its pid means nothing here). */
static int shmCreatorAlive(const shmState* st, const shmHeader* h) {
  if (h->creatorPidNs != st->pidNs) return -1;
  return shmPidAlive(h->creatorPid);
}

/* What is under the name: the pid of a live process other than us whose
 * rendezvous is open there (its segment initialized, no go, no failure),
 * -1 for a segment not initialized (yet), 0 for anything else. */
static int32_t shmOpenRendezvousHolder(shmState* st) {
  int fd = shm_open(st->name, O_RDONLY | O_CLOEXEC, 0);
  if (fd < 0) return 0;
  struct stat sb;
  int32_t holder = -1;
  if (fstat(fd, &sb) == 0 && (size_t)sb.st_size >= sizeof(shmHeader)) {
    shmHeader* h = mmap(NULL, sizeof(shmHeader), PROT_READ, MAP_SHARED, fd, 0);
    if (h != MAP_FAILED) {
      if (atomic_load_explicit(&h->magic, memory_order_acquire) != SHM_MAGIC_READY) holder = -1;
      else if (h->version == SHM_VERSION && h->creatorPid != (int32_t)getpid() &&
               shmCreatorAlive(st, h) == 1 && !atomic_load_explicit(&h->go, memory_order_acquire) &&
               !atomic_load_explicit(&h->initFailed, memory_order_acquire))
        holder = h->creatorPid;
      else holder = 0;
      munmap(h, sizeof(shmHeader));
    }
  }
  close(fd);
  return holder;
}

/* A rank that cannot join posted why in the header (shmPostJoinFailure): 1 with the error set. */
static int shmJoinFailure(struct relayComm* comm, shmState* st, shmHeader* h, relayResult_t* res) {
  uint32_t who = atomic_load_explicit(&h->joinFailed, memory_order_acquire);
  if (!who) return 0;
  char why[sizeof h->joinMsg];
  shmCopyMsg(why, sizeof why, h->joinMsg);
  *res = relaySetError(comm, relayRemoteError, "init of job '%s': rank %u failed init: %s", st->job, who - 1,
                       why);
  return 1;
}

/* This rank found the launch's open rendezvous and cannot join it (why: its own text, without prefix):
 * it tells the ranks there, which otherwise wait for it until their deadline. Only in a header of this
 * version (the fields' place), whose creator lives and has not said go. */
static void shmPostJoinFailure(struct relayComm* comm, shmState* st, shmHeader* h, const char* why) {
  if (h->version != SHM_VERSION || shmCreatorAlive(st, h) != 1 ||
      atomic_load_explicit(&h->go, memory_order_acquire))
    return;
  uint32_t none = 0;
  if (!atomic_compare_exchange_strong_explicit(&h->joinClaim, &none, 1, memory_order_acq_rel,
                                               memory_order_acquire))
    return; /* another rank told them first */
  shmCopyMsg(h->joinMsg, sizeof h->joinMsg, why);
  atomic_store_explicit(&h->joinFailed, (uint32_t)comm->rank + 1, memory_order_release);
}

relayResult_t shmCreate(struct relayComm* comm, shmState* st) {
  int n = comm->nranks;
  uint64_t t0 = relayNowNs(), limit = relayWaitLimitNs(comm);
  uint64_t wanted = st->ringBytes;
  shmLayout lay, *L = &lay;
  int fd = -1;
  relayResult_t res = relaySuccess;
retry:
  st->channels = shmChannelsFor(st->wantChannels, st->ringBytes);
  /* relayShmAttach checked the largest ring; a halved one can only fail here if SHM_FALLBACK_RING were
   * below a line per channel. Checking also tells a Release build that *L is set (gcc -O2 warned). */
  if (shmLayoutOf(n, st->ringBytes, st->channels, L) != 0)
    return relaySetError(comm, relayInternalError,
                         "no shm layout for %d ranks, %llu-byte ring, "
                         "%d channels",
                         n, (unsigned long long)st->ringBytes, st->channels);
  for (;;) {
    fd = shm_open(st->name, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
    if (fd >= 0) break;
    if (errno != EEXIST || relayNowNs() - t0 > limit)
      return relaySetError(comm, relaySystemError, "shm_open(%s) failed: %s", st->name, strerror(errno));
    /* The name is this launch's (relayShmSegmentName): a live rank 0 whose
     * rendezvous is still open under it is a second rank 0 of this launch,
     * refused once it stays SHM_CONFLICT_MS (it may be finishing). Anything
     * else is a crashed run's leftover (rank 0 is the only creator): ranks
     * that mapped it keep valid memory and re-attach when they see the name
     * resolve to our inode instead. A segment not initialized yet may be a
     * second rank 0's between its create and its header: it gets the same
     * window, then counts as garbage. */
    int32_t holder = shmOpenRendezvousHolder(st);
    if (holder != 0 && !shmConflictPersists(st)) {
      shmNap(SHM_INIT_POLL_MS);
      continue;
    }
    if (holder > 0)
      return relaySetError(
          comm, relayInvalidUsage,
          "rendezvous of job '%s' (launch: %s): rank 0 is already taken by pid %d, whose "
          "rendezvous is still open (two processes with rank 0, or two jobs that nothing tells "
          "apart: give each its own name)",
          st->job, st->launch, (int)holder);
    shm_unlink(st->name);
  }
  if (ftruncate(fd, (off_t)L->total) != 0) {
    res = relaySetError(comm, relaySystemError, "sizing shm segment %s to %zu bytes failed: %s", st->name,
                        L->total, strerror(errno));
    goto fail;
  }
  /* Reserve the pages now: a tmpfs too small for the rings would otherwise
   * SIGBUS some rank at its first touch instead of failing init cleanly. */
  int fe = posix_fallocate(fd, 0, (off_t)L->total);
  if (fe == ENOSPC || fe == EFBIG) {
    /* Docker's default /dev/shm is 64 MiB and 8 ranks of 1 MiB rings take
     * 56: rather than fail, halve the rings (joiners take the size from the
     * header) down to SHM_FALLBACK_RING. */
    if (st->ringBytes / 2 >= SHM_FALLBACK_RING) {
      close(fd);
      fd = -1;
      shm_unlink(st->name);
      st->ringBytes /= 2;
      goto retry;
    }
    res = relaySetError(
        comm, relaySystemError,
        "shm segment %s needs %zu bytes (%d ranks, ring %llu bytes per pair in %d channels, "
        "after halving from %llu) and /dev/shm has no room: lower RELAYCC_SHM_RING_BYTES, enlarge "
        "/dev/shm or use fewer ranks",
        st->name, L->total, n, (unsigned long long)st->ringBytes, st->channels, (unsigned long long)wanted);
    goto fail;
  }
  if (st->ringBytes != wanted)
    fprintf(stderr,
            "relaycc: rank 0: /dev/shm has no room for %llu-byte rings at %d ranks; using %llu-byte rings "
            "(enlarge /dev/shm or set RELAYCC_SHM_RING_BYTES)\n",
            (unsigned long long)wanted, n, (unsigned long long)st->ringBytes);
  st->chanBytes = L->chanBytes;
  st->pairBytes = L->pairBytes;
  st->chunk = st->chanBytes / SHM_CHUNK_DIV;
  res = shmMap(comm, fd, L->total, &st->base);
  if (res != relaySuccess) goto fail;
  close(fd);
  fd = -1;
  st->size = L->total;
  shmSetPointers(st, L);
  st->nonce = relayRandom64();
  /* The file was created zero-filled: rings, cursors, statuses start at 0. */
  st->hdr->version = SHM_VERSION;
  st->hdr->nranks = (uint32_t)n;
  st->hdr->ringBytes = (uint32_t)st->ringBytes;
  st->hdr->channels = (uint32_t)st->channels;
  st->hdr->totalBytes = L->total;
  st->hdr->nonce = st->nonce;
  st->hdr->creatorPid = (int32_t)getpid();
  st->hdr->creatorPidNs = st->pidNs;
  st->slots[0].pidNs = st->pidNs;
  atomic_store_explicit(&st->slots[0].pid, (int32_t)getpid(), memory_order_relaxed);
  atomic_store_explicit(&st->slots[0].arrived, st->nonce, memory_order_relaxed);
  atomic_store_explicit(&st->hdr->magic, SHM_MAGIC_READY, memory_order_release);

  shmWaiter w;
  shmWaiterInit(&w);
  for (;;) {
    uint32_t db = atomic_load_explicit(&st->slots[0].doorbell, memory_order_acquire);
    int missing = 0, dead = -1;
    int check = shmLiveCheckDue(&w);
    for (int r = 1; r < n; r++) {
      if (atomic_load_explicit(&st->slots[r].arrived, memory_order_acquire) != st->nonce) {
        missing++;
        continue;
      }
      if (check && dead < 0 && st->slots[r].pidNs == st->pidNs &&
          !shmPidAlive(atomic_load_explicit(&st->slots[r].pid, memory_order_relaxed)))
        dead = r;
    }
    if (!missing) break;
    if (shmJoinFailure(comm, st, st->hdr, &res)) goto failMapped;
    if (dead >= 0) {
      res = relaySetError(comm, relayRemoteError, "init of job '%s': rank %d (pid %d) checked in and died",
                          st->job, dead, (int)atomic_load(&st->slots[dead].pid));
      goto failMapped;
    }
    if (shmAborted(comm, st)) {
      res = relaySetError(comm, relayInvalidUsage, "init of job '%s' aborted", st->job);
      goto failMapped;
    }
    if (relayNowNs() - t0 >= limit) {
      char miss[256];
      shmMissing(st, n, miss, sizeof miss);
      res = relaySetError(comm, relayTimeout,
                          "init of job '%s' (%d ranks): timed out after %d ms waiting for %s to arrive",
                          st->job, n, comm->cfg.timeoutMs, miss);
      goto failMapped;
    }
    /* Arrivals ring our doorbell; the slice bounds the liveness check. */
    uint64_t left = limit - (relayNowNs() - t0), ns = (uint64_t)SHM_SLICE_MS * 1000000ull;
    shmSleep(&st->slots[0], db, left < ns ? left : ns);
  }
  /* Everyone mapped it: the name can go, so nothing outlives the job. Only
   * then go: a segment still reachable by name never releases anyone. The
   * loop's sleeps may have left this rank armed (shmWaiterEnd says why not). */
  atomic_store_explicit(&st->slots[0].waiting, 0, memory_order_relaxed);
  shm_unlink(st->name);
  shmRecordPids(st, n);
  atomic_store_explicit(&st->hdr->go, 1, memory_order_release);
  for (int r = 1; r < n; r++) shmWake(&st->slots[r]);
  return relaySuccess;

failMapped:
  /* Tell the ranks already here why, then release them. */
  shmCopyMsg(st->hdr->failMsg, sizeof st->hdr->failMsg, comm->lastError);
  atomic_store_explicit(&st->hdr->initFailed, (uint32_t)res + 1, memory_order_release);
  for (int r = 1; r < n; r++) shmWake(&st->slots[r]);
  if (fd >= 0) close(fd);
  shm_unlink(st->name);
  shmUnmap(st);
  return res;
fail:
  if (fd >= 0) close(fd);
  shm_unlink(st->name);
  shmUnmap(st);
  shmAnnounceCreateFailure(comm, st, res, t0);
  return res;
}

/* Does the name still resolve to the file we mapped? 1 yes, 0 no (another
 * inode), -1 not there now. */
static int shmSameFile(const shmState* st, dev_t dev, ino_t ino) {
  int fd = shm_open(st->name, O_RDONLY | O_CLOEXEC, 0);
  if (fd < 0) return -1;
  struct stat sb;
  int same = fstat(fd, &sb) == 0 && sb.st_dev == dev && sb.st_ino == ino;
  close(fd);
  return same;
}

/* One attempt of a non-zero rank: 1 = joined, 0 = retry (nothing usable under
 * the name yet, or a stale segment), < 0 = error set. */
static int shmTryJoin(struct relayComm* comm, shmState* st, uint64_t t0, relayResult_t* res) {
  int n = comm->nranks, me = comm->rank;
  uint64_t limit = relayWaitLimitNs(comm);
  int fd = shm_open(st->name, O_RDWR | O_CLOEXEC, 0);
  if (fd < 0) {
    st->openErrno = errno;
    return 0;
  }
  struct stat sb;
  if (fstat(fd, &sb) != 0 || (size_t)sb.st_size < sizeof(shmHeader)) {
    close(fd);
    return 0; /* rank 0 between shm_open and ftruncate */
  }
  /* The header first: it says how large the rest is. */
  shmHeader* h = mmap(NULL, sizeof(shmHeader), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (h == MAP_FAILED) {
    close(fd);
    return 0;
  }
  if (atomic_load_explicit(&h->magic, memory_order_acquire) != SHM_MAGIC_READY) {
    munmap(h, sizeof(shmHeader));
    close(fd);
    return 0; /* not initialized yet (or garbage): rank 0 will replace it */
  }
  /* A dead creator means a crashed run's leftover: never join it (even one
   * that says go), wait for our rank 0 to replace it. */
  if (shmCreatorAlive(st, h) == 0) {
    st->deadCreator = h->creatorPid;
    munmap(h, sizeof(shmHeader));
    close(fd);
    return 0;
  }
  /* Rank 0 failed to build the segment (or gave up) and left its reason. */
  uint32_t failed0 = atomic_load_explicit(&h->initFailed, memory_order_acquire);
  if (failed0 && h->nranks == (uint32_t)n) {
    char why[sizeof h->failMsg];
    shmCopyMsg(why, sizeof why, h->failMsg);
    atomic_fetch_add_explicit(&h->failSeen, 1, memory_order_acq_rel);
    munmap(h, sizeof(shmHeader));
    close(fd);
    *res = relaySetError(comm, relayRemoteError, "init of job '%s': rank 0 failed init (%s)", st->job, why);
    return -1;
  }
  /* The ring size and the channels are rank 0's (it may have shrunk the
   * ring to fit /dev/shm, and the channels with it). */
  shmLayout L;
  uint64_t ring = h->ringBytes;
  int channels = (int)h->channels;
  int ringOk = ring >= SHM_MIN_RING && ring <= SHM_MAX_RING && ring % SHM_LINE == 0 && channels >= 1 &&
               channels <= P2P_MAX_CHANNELS && shmChannelsFor(channels, ring) == channels &&
               shmLayoutOf(n, ring, channels, &L) == 0 && (size_t)sb.st_size == L.total;
  if (h->version != SHM_VERSION || h->nranks != (uint32_t)n || !ringOk) {
    int creator = h->creatorPid;
    unsigned hn = h->nranks, hv = h->version;
    if (!shmConflictPersists(st)) {
      munmap(h, sizeof(shmHeader));
      close(fd);
      return 0;
    }
    char why[512];
    snprintf(
        why, sizeof why,
        "job '%s': rank 0 (pid %d) created it for nranks %u (version %u, %lld bytes); rank %d has nranks %d "
        "(version %u): ranks disagree on nranks, or two jobs share the name",
        st->job, creator, hn, hv, (long long)sb.st_size, me, n, SHM_VERSION);
    shmPostJoinFailure(comm, st, h, why);
    munmap(h, sizeof(shmHeader));
    close(fd);
    *res = relaySetError(comm, relayInvalidArgument, "%s", why);
    return -1;
  }
  munmap(h, sizeof(shmHeader));
  void* base = mmap(NULL, L.total, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  close(fd);
  if (base == MAP_FAILED) return 0;
  st->base = base;
  st->size = L.total;
  st->ringBytes = ring;
  st->channels = channels;
  st->chanBytes = L.chanBytes;
  st->pairBytes = L.pairBytes;
  st->chunk = L.chanBytes / SHM_CHUNK_DIV;
  shmSetPointers(st, &L);
  st->nonce = st->hdr->nonce;
  shmSlot* mine = &st->slots[me];
  int32_t holder = atomic_load_explicit(&mine->pid, memory_order_acquire);
  if (holder != 0 && holder != (int32_t)getpid()) {
    if ((mine->pidNs != st->pidNs || shmPidAlive(holder)) && shmConflictPersists(st)) {
      shmUnmap(st);
      *res = relaySetError(comm, relayInvalidUsage,
                           "rendezvous of job '%s' (launch: %s): rank %d is already taken by pid %d (two "
                           "processes with one rank, or two jobs that nothing tells apart: give each its own "
                           "name)",
                           st->job, st->launch, me, (int)holder);
      return -1;
    }
    shmUnmap(st); /* an old run's segment: wait for rank 0 to replace it */
    return 0;
  }
  dev_t dev = sb.st_dev;
  ino_t ino = sb.st_ino;
  /* Claim the slot atomically: of two processes with this rank that come
   * together, exactly one gets it; the other sees it taken on its retry. */
  if (!atomic_compare_exchange_strong_explicit(&mine->pid, &holder, (int32_t)getpid(), memory_order_acq_rel,
                                               memory_order_acquire)) {
    shmUnmap(st);
    return 0;
  }
  mine->pidNs = st->pidNs;
  atomic_store_explicit(&mine->arrived, st->nonce, memory_order_release);
  shmWake(&st->slots[0]);

  for (int poll = 1;; poll++) {
    uint32_t db = atomic_load_explicit(&mine->doorbell, memory_order_acquire);
    if (atomic_load_explicit(&st->hdr->go, memory_order_acquire)) {
      atomic_store_explicit(&mine->waiting, 0, memory_order_relaxed); /* armed by a sleep: shmWaiterEnd */
      shmRecordPids(st, n);
      return 1;
    }
    if (shmJoinFailure(comm, st, st->hdr, res)) {
      shmUnmap(st);
      return -1;
    }
    uint32_t failed = atomic_load_explicit(&st->hdr->initFailed, memory_order_acquire);
    if (failed) {
      char miss[256];
      shmMissing(st, n, miss, sizeof miss);
      relayResult_t r0 = (relayResult_t)(failed - 1);
      char why[sizeof st->hdr->failMsg];
      shmCopyMsg(why, sizeof why, st->hdr->failMsg);
      shmUnmap(st);
      if (r0 == relayTimeout)
        *res = relaySetError(comm, relayTimeout,
                             "init of job '%s' (%d ranks): rank 0 gave up after %d ms waiting for %s to "
                             "arrive",
                             st->job, n, comm->cfg.timeoutMs, miss);
      else
        *res =
            relaySetError(comm, relayRemoteError, "init of job '%s': rank 0 gave up init (%s)", st->job, why);
      return -1;
    }
    if (shmAborted(comm, st)) {
      shmUnmap(st);
      *res = relaySetError(comm, relayInvalidUsage, "init of job '%s' aborted", st->job);
      return -1;
    }
    /* Rank 0 replaced the segment we joined (it was a leftover): re-attach.
     * "Not there" is normal just before go (rank 0 unlinks, then sets go). */
    if (shmSameFile(st, dev, ino) == 0) {
      /* Unless rank 0's verdict came since it was read above: failed, then replaced by a new launch */
      if (atomic_load_explicit(&st->hdr->initFailed, memory_order_acquire)) continue;
      shmUnmap(st);
      return 0;
    }
    /* Its creator died after we checked in (it lived when we joined: a crashed run's leftover is never
     * joined): our rank 0 crashed during init. Fail now rather than at the deadline, and take the name
     * away while it is still this segment (its memory goes with the last unmap), or nobody would. An old
     * run's rank 0 that still lived when we came and dies within the same few ms would be taken for ours:
     * our rank 0 refuses such a holder itself after SHM_CONFLICT_MS. */
    if (poll % (SHM_SLICE_MS / SHM_INIT_POLL_MS) == 0 && shmCreatorAlive(st, st->hdr) == 0) {
      char miss[256];
      shmMissing(st, n, miss, sizeof miss);
      int creator = st->hdr->creatorPid;
      if (shmSameFile(st, dev, ino) == 1) shm_unlink(st->name);
      shmUnmap(st);
      *res = relaySetError(
          comm, relayRemoteError,
          "init of job '%s' (%d ranks): rank 0 (pid %d), which created the segment, died during "
          "init (missing then: %s)",
          st->job, n, creator, miss);
      return -1;
    }
    /* Checked in with a live rank 0: rank 0 judges the launch, and this rank waits for its verdict
     * (initFailed) past its own deadline, up to two: rank 0 created the segment before this rank checked
     * in, within this rank's deadline, and gives up one deadline after it began. A joiner leaving at its own
     * deadline first reads to rank 0 as a rank that died (test_shm init_timeout under load, rank 0
     * started after rank 1: "rank 1 checked in and died" instead of the rank that never came). The bound
     * assumes rank 0's RELAYCC_TIMEOUT_MS is at most twice this rank's (a per-rank setting). */
    uint64_t waited = relayNowNs() - t0, cap = limit > UINT64_MAX / 2 ? limit : 2 * limit;
    int creator = waited >= limit ? shmCreatorAlive(st, st->hdr) : 1;
    if (waited >= cap || (waited >= limit && creator != 1)) {
      char miss[256];
      shmMissing(st, n, miss, sizeof miss);
      /* The time waited: past RELAYCC_TIMEOUT_MS where rank 0 was waited for */
      *res = relaySetError(comm, relayTimeout,
                           "init of job '%s' (%d ranks): timed out after %llu ms (RELAYCC_TIMEOUT_MS %d) "
                           "waiting for %s to arrive%s",
                           st->job, n, (unsigned long long)(waited / 1000000u), comm->cfg.timeoutMs, miss,
                           creator == 0 ? " (the segment's creator, rank 0, is gone)" : "");
      shmUnmap(st);
      return -1;
    }
    shmSleep(mine, db, (uint64_t)SHM_INIT_POLL_MS * 1000000ull);
  }
}

relayResult_t shmJoin(struct relayComm* comm, shmState* st) {
  uint64_t t0 = relayNowNs(), limit = relayWaitLimitNs(comm);
  for (;;) {
    relayResult_t res = relaySuccess;
    int r = shmTryJoin(comm, st, t0, &res);
    if (r > 0) return relaySuccess;
    if (r < 0) return res;
    if (shmAborted(comm, st))
      return relaySetError(comm, relayInvalidUsage, "init of job '%s' aborted", st->job);
    if (relayNowNs() - t0 >= limit) {
      char why[128] = "rank 0 never arrived";
      if (st->openErrno && st->openErrno != ENOENT)
        snprintf(why, sizeof why, "opening it failed: %s", strerror(st->openErrno));
      else if (st->deadCreator)
        snprintf(why, sizeof why, "the one there was made by pid %d, now dead: rank 0 crashed or never came",
                 (int)st->deadCreator);
      return relaySetError(comm, relayTimeout,
                           "init of job '%s' (%d ranks): timed out after %d ms waiting for rank 0 to create "
                           "shm segment %s (%s)",
                           st->job, comm->nranks, comm->cfg.timeoutMs, st->name, why);
    }
    shmNap(SHM_INIT_POLL_MS);
  }
}

/* For the one-shot and bw twins (oneshot.c, bw.c): the comm's agreed nonce. */
uint64_t relayShmCommHash(struct relayComm* comm) { return shmStateOf(comm)->nonce; }

/* A rendezvous is owned by one launch: its name is the job name plus a hash
 * of what the launcher gives all of its ranks alike and no other launch. Two
 * jobs started together under one name (torchrun's default "relaycc", or the
 * same script twice) then never meet. In order: the launcher's variables
 * where any is set (TORCHELASTIC_RUN_ID, MASTER_ADDR, MASTER_PORT: all that
 * are set; torchrun without --standalone has run id "none", so the master
 * port is what tells two of its jobs on one host apart), else the parent
 * process (fork-style launchers: mpirun's orted, srun's slurmstepd, a test's
 * forks). Ranks of one job started by different parents with no launcher
 * variables never meet: such a job needs MASTER_ADDR/MASTER_PORT or a
 * launcher. */
void shmLaunchIdentity(char* out, size_t len) {
  static const relayParamId kVars[] = {RELAY_P_TORCHELASTIC_RUN_ID, RELAY_P_MASTER_ADDR, RELAY_P_MASTER_PORT};
  size_t o = 0;
  out[0] = 0;
  for (size_t i = 0; i < sizeof kVars / sizeof kVars[0]; i++) {
    const char* v = relayParamEnvText(kVars[i]);
    if (v && o < len)
      o += (size_t)snprintf(out + o, len - o, "%s%s=%s", o ? " " : "", relayParamDefs[kVars[i]].name, v);
  }
  if (!o) snprintf(out, len, "parent pid %d", (int)getppid());
}

void relayShmSegmentName(const char* jobName, int unique, char* buf, size_t len) {
  char launch[160];
  shmLaunchIdentity(launch, sizeof launch);
  /* A unique name (relayCommInitShmUnique) is the whole rendezvous: its ranks may be of different
   * launches (a torch store's ranks started apart), so no launch identity enters it. */
  if (unique) snprintf(launch, sizeof launch, "unique name");
  uint64_t h = relayHash64(RELAY_HASH_SEED, launch, strlen(launch));
  snprintf(buf, len, "/relaycc-%s.%016llx", jobName, (unsigned long long)h);
}
