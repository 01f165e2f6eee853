/*
 * The P2P channel layer: the scatter part rule (seed 003's table and its
 * edges), pool and parts per peer from a topology, part bounds, channel
 * bases agreed by both ends, lazy partial-then-full connection on both sides,
 * and relaycc-plan --scatter-parts. Pure functions: every case runs in
 * milliseconds.
 *
 * Usage: test_p2p <case>   (cases: kCases at the bottom; --list prints them)
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "harness.h"
#include "p2p/p2p.h"
#include "p2p_tool.h"

static int popcount64(uint64_t m) {
  int n = 0;
  for (; m; m &= m - 1) n++;
  return n;
}

static p2pComm commOf(int nodes, int local, int pool, int perPeer, int user) {
  p2pComm c;
  char err[256];
  relayResult_t res = p2pCommSet(nodes, local, pool, perPeer, user, &c, err, sizeof err);
  T_CHECK(res == relaySuccess, "p2pCommSet(%d, %d, %d, %d, %d): %s", nodes, local, pool, perPeer, user, err);
  return c;
}

/* ---- the part rule ------------------------------------------------------ */

typedef struct {
  const char* why;
  int nodes, local, pool, perPeer, user;
  int before; /* the first version of the fix (#13468): 1 part whenever the flows overflow; -1: n/a */
  int want;   /* scatter parts now */
} ruleRow;

/* The first version's rule, for the seed's "before" column. */
static int firstVersionParts(int nRanks, int nNodes, int pool, int perPeer) {
  if (nNodes <= 1) return perPeer;
  return (long long)(nRanks - 1) * perPeer > pool ? 1 : perPeer;
}

static const ruleRow kRules[] = {
    /* The seed's table: nodes x 8 GPUs, p2pnChannels, perPeer -> before, now. */
    {"seed: 2 nodes", 2, 8, 32, 2, 0, 2, 2},
    {"seed: 3 nodes (46 flows on 64 channels)", 3, 8, 64, 4, 0, 1, 2},
    {"seed: 4 nodes", 4, 8, 32, 2, 0, 1, 1},
    {"seed: 5 nodes", 5, 8, 64, 2, 0, 1, 1},
    {"seed: 8 nodes", 8, 8, 64, 2, 0, 1, 1},
    /* 16 nodes: 127 peers on a pool of 64 or 32: the floor. */
    {"16 nodes, pool 64: floor", 16, 8, 64, 2, 0, 1, 1},
    {"16 nodes, pool 32: floor", 16, 8, 32, 2, 0, 1, 1},
    /* Pool equality: 16 peers x 2 parts fill 32 channels exactly; 17 do not. */
    {"16 peers x 2 = 32: fits", 17, 1, 32, 2, 0, 2, 2},
    {"17 peers x 2 = 34 > 32", 18, 1, 32, 2, 0, 1, 1},
    {"16 peers x 4 = 64: fits", 17, 1, 64, 4, 0, 4, 4},
    {"16 peers, pool 32, per-peer 4: 2 fit", 17, 1, 32, 4, 0, 1, 2},
    {"32 peers x 2 = 64: fits", 33, 1, 64, 2, 0, 2, 2},
    {"33 peers on 64: one part", 2, 17, 64, 2, 0, 1, 1},
    /* Power-of-two rounding: the quotient is rounded down, never up. */
    {"64 / 15 = 4", 2, 8, 64, 8, 0, 1, 4},
    {"64 / 7 = 9 -> 8", 2, 4, 64, 16, 0, 1, 8},
    {"32 / 3 = 10 -> 8", 2, 2, 32, 16, 0, 1, 8},
    {"64 / 23 = 2.8 -> 2", 3, 8, 64, 8, 0, 1, 2},
    {"64 / 11 = 5 -> 4", 3, 4, 64, 8, 0, 1, 4},
    {"64 / 21 = 3 -> 2", 11, 2, 64, 4, 0, 1, 2},
    /* The cap: never more than the per-peer count. */
    {"64 / 15 = 4, per-peer 2", 2, 8, 64, 2, 0, 2, 2},
    {"64 / 1, per-peer 8", 2, 1, 64, 8, 0, 8, 8},
    {"pool 1", 4, 8, 1, 1, 0, 1, 1},
    /* The one-part floor. */
    {"32 / 63 = 0 -> 1", 8, 8, 32, 2, 0, 1, 1},
    {"2 / 7 = 0 -> 1", 2, 4, 2, 2, 0, 1, 1},
    /* One node: scatter keeps the per-peer count, fit or not. */
    {"1 node of 8", 1, 8, 32, 4, 0, 4, 4},
    {"1 node of 64, oversubscribed", 1, 64, 16, 4, 0, 4, 4},
    {"1 node of 1", 1, 1, 8, 2, 0, 2, 2},
    /* A user-set RELAYCC_NCHANNELS_PER_NET_PEER is kept (as a power of two <= pool). */
    {"user 2 on 4 nodes: kept", 4, 8, 32, 2, 2, -1, 2},
    {"user 4 on 8 nodes: kept", 8, 8, 64, 2, 4, -1, 4},
    {"user 3 -> 4", 4, 8, 32, 2, 3, -1, 4},
    {"user 1", 3, 8, 64, 4, 1, -1, 1},
    {"user 128 -> pool", 4, 8, 32, 2, 128, -1, 32},
    {"user on one node: no net peers, per-peer", 1, 8, 32, 4, 2, -1, 4},
};

static int caseRule(void) {
  int n = (int)(sizeof kRules / sizeof kRules[0]);
  for (int i = 0; i < n; i++) {
    const ruleRow* r = &kRules[i];
    p2pComm c = commOf(r->nodes, r->local, r->pool, r->perPeer, r->user);
    int got = p2pTaskParts(&c, P2P_OP_SCATTER);
    T_CHECK(got == r->want, "%s: %d x %d, pool %d, per-peer %d, user %d: scatter parts %d, want %d", r->why,
            r->nodes, r->local, r->pool, r->perPeer, r->user, got, r->want);
    /* The rule alone agrees with the comm-level call. */
    T_CHECK(p2pScatterParts(c.nRanks, c.nNodes, c.pool, c.perPeer, c.perPeerUserSet) == got,
            "%s: rule vs comm", r->why);
    if (r->before >= 0) {
      int b = firstVersionParts(c.nRanks, c.nNodes, c.pool, c.perPeer);
      T_CHECK(b == r->before, "%s: first-version parts %d, table says %d", r->why, b, r->before);
    }
    /* Invariants: a power of two in [1, per-peer]; when the rule applies the
     * flows fit the pool, unless even one part per peer does not. */
    T_CHECK(got >= 1 && (got & (got - 1)) == 0 && got <= c.perPeer, "%s: %d is not a power of two in [1, %d]",
            r->why, got, c.perPeer);
    if (c.nNodes > 1 && !c.perPeerUserSet) {
      int peers = c.nRanks - 1;
      T_CHECK((long long)peers * got <= c.pool || got == 1, "%s: %d x %d flows overflow %d", r->why, peers,
              got, c.pool);
      T_CHECK(got == c.perPeer || (long long)peers * got * 2 > c.pool, "%s: %d parts, but %d would fit",
              r->why, got, got * 2);
    }
    /* Every other operation keeps the per-peer count. */
    for (int op = 0; op < P2P_NUM_OPS; op++) {
      if (op == P2P_OP_SCATTER) continue;
      T_CHECK(p2pTaskParts(&c, (p2pOp)op) == c.perPeer, "%s: %s takes %d parts, want per-peer %d", r->why,
              p2pOpName((p2pOp)op), p2pTaskParts(&c, (p2pOp)op), c.perPeer);
    }
    printf("%-44s %2d x %2d  pool %2d  per-peer %2d  user %3d -> parts %d\n", r->why, r->nodes, r->local,
           r->pool, r->perPeer, r->user, got);
  }
  /* Exhaustive sweep of the rule's contract against a brute-force search. */
  for (int nodes = 1; nodes <= 20; nodes++)
    for (int local = 1; local <= 9; local++)
      for (int pool = 1; pool <= P2P_MAX_CHANNELS; pool *= 2)
        for (int pp = 1; pp <= pool; pp *= 2) {
          p2pComm c = commOf(nodes, local, pool, pp, 0);
          int got = p2pTaskParts(&c, P2P_OP_SCATTER), want = pp;
          if (nodes > 1 && c.nRanks > 1) {
            want = 1;
            for (int k = 1; k <= pp; k *= 2)
              if ((long long)k * (c.nRanks - 1) <= pool) want = k;
          }
          T_CHECK(got == want, "%d x %d pool %d per-peer %d: %d, brute force %d", nodes, local, pool, pp, got,
                  want);
        }
  return 0;
}

/* ---- pool and per-peer from a topology ---------------------------------- */

typedef struct {
  const char* why;
  p2pTopoDesc t;
  int pool, perPeer, userSet, sched;
} topoRow;

static int caseTopo(void) {
  static const int links3[9] = {0, 3, 3, 3, 0, 1, 3, 1, 0}; /* the 1-link pair decides */
  const topoRow rows[] = {
      {"MI300X node: 1 XGMI link per pair",
       {.nNodes = 1, .localRanks = 8, .defaultLinks = 1, .nChannels = 32},
       32,
       2,
       0,
       2},
      {"NVSwitch node: 18 links, 36 wanted, pool 32",
       {.nNodes = 1, .localRanks = 8, .defaultLinks = 18, .nChannels = 32},
       32,
       32,
       0,
       2},
      {"PCIe / shm: 2 per peer",
       {.nNodes = 1, .localRanks = 8, .defaultLinks = 0, .nChannels = 16},
       16,
       2,
       0,
       2},
      {"3 links: 6 wanted -> 8",
       {.nNodes = 1, .localRanks = 4, .defaultLinks = 3, .nChannels = 32},
       32,
       8,
       0,
       2},
      {"minimum over pairs",
       {.nNodes = 1, .localRanks = 3, .localLinks = links3, .nChannels = 32},
       32,
       2,
       0,
       1},
      {"pool 24 -> 32", {.nNodes = 1, .localRanks = 8, .defaultLinks = 8, .nChannels = 24}, 32, 16, 0, 2},
      {"pool capped at 48 -> 32",
       {.nNodes = 1, .localRanks = 8, .defaultLinks = 8, .nChannels = 64, .poolCap = 48},
       32,
       16,
       0,
       2},
      {"max p2p channels 16",
       {.nNodes = 1, .localRanks = 8, .defaultLinks = 8, .nChannels = 64, .maxP2pChannels = 16},
       16,
       16,
       0,
       2},
      {"min p2p channels 8",
       {.nNodes = 1, .localRanks = 8, .defaultLinks = 1, .nChannels = 2, .minP2pChannels = 8},
       8,
       2,
       0,
       2},
      {"per-peer capped by the pool",
       {.nNodes = 1, .localRanks = 8, .defaultLinks = 18, .nChannels = 4},
       4,
       4,
       0,
       2},
      /* Several nodes: the network peer wants 2, halved while k * nRanks > 4 * pool. */
      {"4 x 8, pool 32: 64 <= 128, 2",
       {.nNodes = 4, .localRanks = 8, .defaultLinks = 4, .nChannels = 32},
       32,
       2,
       0,
       2},
      {"16 x 8, pool 32: 256 > 128, 1",
       {.nNodes = 16, .localRanks = 8, .defaultLinks = 4, .nChannels = 32},
       32,
       1,
       0,
       2},
      {"16 x 8, pool 64: 256 <= 256, 2",
       {.nNodes = 16, .localRanks = 8, .defaultLinks = 4, .nChannels = 64},
       64,
       2,
       0,
       2},
      {"halving sees the unrounded pool (24)",
       {.nNodes = 8, .localRanks = 8, .defaultLinks = 4, .nChannels = 24},
       32,
       1,
       0,
       2},
      {"4 NICs by bandwidth beat the halving",
       {.nNodes = 16, .localRanks = 8, .defaultLinks = 4, .nChannels = 32, .netsByBw = 4},
       32,
       4,
       0,
       2},
      {"NICs, but local pairs want 2",
       {.nNodes = 16, .localRanks = 8, .defaultLinks = 1, .nChannels = 32, .netsByBw = 4},
       32,
       2,
       0,
       2},
      {"user-set 4 per net peer",
       {.nNodes = 16, .localRanks = 8, .defaultLinks = 4, .nChannels = 32, .userPerNetPeer = 4},
       32,
       4,
       1,
       2},
      {"user-set 3 -> 4",
       {.nNodes = 2, .localRanks = 8, .defaultLinks = 4, .nChannels = 32, .userPerNetPeer = 3},
       32,
       4,
       1,
       2},
      {"user-set on one node: nothing to set",
       {.nNodes = 1, .localRanks = 8, .defaultLinks = 4, .nChannels = 32, .userPerNetPeer = 1},
       32,
       8,
       0,
       2},
      {"sched group: gcd(2, 6) = 2",
       {.nNodes = 2, .localRanks = 6, .defaultLinks = 1, .nChannels = 32},
       32,
       2,
       0,
       2},
      {"sched group: gcd(2, 3) = 1",
       {.nNodes = 2, .localRanks = 3, .defaultLinks = 1, .nChannels = 32},
       32,
       2,
       0,
       1},
      {"sched group 8 (NCCL)",
       {.nNodes = 2, .localRanks = 8, .defaultLinks = 1, .nChannels = 32, .schedGroupSize = 8},
       32,
       2,
       0,
       8},
  };
  for (size_t i = 0; i < sizeof rows / sizeof rows[0]; i++) {
    const topoRow* r = &rows[i];
    p2pComm c;
    char err[256];
    T_CHECK(p2pCommFromTopo(&r->t, &c, err, sizeof err) == relaySuccess, "%s: %s", r->why, err);
    T_CHECK(c.pool == r->pool && c.perPeer == r->perPeer && c.perPeerUserSet == r->userSet &&
                c.schedGroupSize == r->sched,
            "%s: pool %d per-peer %d user-set %d sched %d, want %d %d %d %d", r->why, c.pool, c.perPeer,
            c.perPeerUserSet, c.schedGroupSize, r->pool, r->perPeer, r->userSet, r->sched);
    T_CHECK(c.nRanks == r->t.nNodes * r->t.localRanks, "%s: nRanks", r->why);
    printf("%-42s pool %2d per-peer %2d%s\n", r->why, c.pool, c.perPeer,
           c.perPeerUserSet ? " (user-set)" : "");
  }
  /* The user-set count flows through to scatter: kept, where the rule would cut it. */
  p2pTopoDesc u = {.nNodes = 16, .localRanks = 8, .defaultLinks = 4, .nChannels = 32, .userPerNetPeer = 4};
  p2pComm cu;
  char err[256];
  T_OK(p2pCommFromTopo(&u, &cu, err, sizeof err));
  T_CHECK(p2pTaskParts(&cu, P2P_OP_SCATTER) == 4, "user-set scatter parts %d, want 4",
          p2pTaskParts(&cu, P2P_OP_SCATTER));
  u.userPerNetPeer = 0;
  u.netsByBw = 4;
  T_OK(p2pCommFromTopo(&u, &cu, err, sizeof err));
  T_CHECK(cu.perPeer == 4 && p2pTaskParts(&cu, P2P_OP_SCATTER) == 1,
          "computed 4 per peer: scatter parts %d, want 1", p2pTaskParts(&cu, P2P_OP_SCATTER));
  /* Bad descriptions are errors that name the field. */
  const struct {
    p2pTopoDesc t;
    const char* field;
  } bads[] = {
      {{.nNodes = 0, .localRanks = 8, .nChannels = 32}, "nNodes"},
      {{.nNodes = 1, .localRanks = 0, .nChannels = 32}, "localRanks"},
      {{.nNodes = 1, .localRanks = 8, .nChannels = 0}, "nChannels"},
      {{.nNodes = 1, .localRanks = 8, .nChannels = 32, .poolCap = 128}, "poolCap"},
      {{.nNodes = 1, .localRanks = 8, .nChannels = 32, .defaultLinks = -1}, "defaultLinks"},
      {{.nNodes = 4096, .localRanks = 4096, .nChannels = 32}, "exceeds"},
  };
  for (size_t i = 0; i < sizeof bads / sizeof bads[0]; i++) {
    err[0] = 0;
    T_CHECK(p2pCommFromTopo(&bads[i].t, &cu, err, sizeof err) == relayInvalidArgument, "bad %s accepted",
            bads[i].field);
    T_CHECK(strstr(err, bads[i].field) != NULL, "error '%s' does not name %s", err, bads[i].field);
  }
  T_CHECK(p2pCommSet(2, 8, 48, 2, 0, &cu, err, sizeof err) == relayInvalidArgument && strstr(err, "pool"),
          "pool 48 accepted: %s", err);
  T_CHECK(p2pCommSet(2, 8, 32, 3, 0, &cu, err, sizeof err) == relayInvalidArgument && strstr(err, "per-peer"),
          "per-peer 3 accepted: %s", err);
  T_CHECK(p2pCommSet(2, 8, 32, 64, 0, &cu, err, sizeof err) == relayInvalidArgument,
          "per-peer > pool accepted");
  return 0;
}

/* ---- part bounds --------------------------------------------------------- */

static int caseParts(void) {
  size_t off, len;
  /* 10000 bytes in 4 parts: 2500 rounds up to one 4 KiB page per part. */
  const size_t want[4][2] = {{0, 4096}, {4096, 4096}, {8192, 1808}, {10000, 0}};
  for (int p = 0; p < 4; p++) {
    p2pPartBounds(10000, 4, 0, p, &off, &len);
    T_CHECK(off == want[p][0] && len == want[p][1], "10000/4 part %d: [%zu +%zu], want [%zu +%zu]", p, off,
            len, want[p][0], want[p][1]);
  }
  p2pPartBounds(1u << 20, 4, 0, 3, &off, &len);
  T_CHECK(off == 3u << 18 && len == 1u << 18, "1 MiB / 4 part 3: [%zu +%zu]", off, len);
  p2pPartBounds(0, 2, 0, 1, &off, &len);
  T_CHECK(off == 0 && len == 0, "empty task: [%zu +%zu]", off, len);
  p2pPartBounds(100, 1, 0, 0, &off, &len);
  T_CHECK(off == 0 && len == 100, "one part: [%zu +%zu]", off, len);
  /* Sweep: parts tile [0, bytes) in order, boundaries aligned, no part longer
   * than its share rounded up to the alignment. */
  unsigned long long st = 7;
  for (int it = 0; it < 20000; it++) {
    size_t bytes = (size_t)(t_rand(&st) % (it % 3 ? 100000 : 64 << 20));
    int n = 1 << (int)(t_rand(&st) % 7);
    size_t align = (it & 1) ? 0 : (size_t)1 << (t_rand(&st) % 13);
    size_t a = align ? align : P2P_PART_ALIGN, at = 0;
    for (int p = 0; p < n; p++) {
      p2pPartBounds(bytes, n, align, p, &off, &len);
      T_CHECK(off == at, "bytes %zu n %d align %zu part %d: starts at %zu, want %zu", bytes, n, align, p, off,
              at);
      T_CHECK(off % a == 0 || len == 0, "bytes %zu n %d part %d: boundary %zu not aligned to %zu", bytes, n,
              p, off, a);
      size_t share = (bytes + (size_t)n - 1) / (size_t)n;
      T_CHECK(len <= share + a - 1, "bytes %zu n %d part %d: %zu bytes exceed the share %zu", bytes, n, p,
              len, share);
      at = off + len;
    }
    T_CHECK(at == bytes, "bytes %zu n %d: parts end at %zu", bytes, n, at);
  }
  /* A task split: one channel per part, distinct, parts tile the task. */
  p2pComm c = commOf(3, 8, 64, 4, 0);
  p2pPart parts[P2P_MAX_CHANNELS];
  int n = p2pTaskSplit(&c, P2P_OP_SENDRECV, 1, 17, 1000000, 0, parts);
  T_CHECK(n == 4, "sendrecv split into %d parts, want 4", n);
  uint64_t seen = 0;
  size_t at = 0;
  for (int p = 0; p < n; p++) {
    T_CHECK(!(seen & (1ull << parts[p].channel)), "channel %d used twice", parts[p].channel);
    seen |= 1ull << parts[p].channel;
    T_CHECK(parts[p].off == at, "part %d at %zu, want %zu", p, parts[p].off, at);
    at += parts[p].len;
  }
  T_CHECK(at == 1000000 && seen == p2pTaskMask(&c, P2P_OP_SENDRECV, 1, 17), "split vs mask");
  T_CHECK(p2pTaskSplit(&c, P2P_OP_SCATTER, 1, 17, 1000000, 0, parts) == 2, "scatter split: want 2 parts");
  return 0;
}

/* ---- channel bases: both ends, every pair ------------------------------- */

/* A literal transcription of ncclP2pSchedule for one rank: the peer it sends
 * to and receives from in each round. Each end of a pair runs it alone. */
static void scheduleOf(const p2pComm* c, int rank, int* sendTo, int* recvFrom) {
  int gs = c->schedGroupSize, nGroups = c->nRanks / gs, n2 = 1;
  while (n2 < nGroups) n2 <<= 1;
  int group = rank / gs, local = rank % gs, round = 0;
  unsigned groupRound = 0, groupDelta = 0;
  do {
    if ((int)groupDelta < nGroups) {
      int sg = (group + (int)groupDelta) % nGroups, rg = (group - (int)groupDelta + nGroups) % nGroups;
      for (int d = 0; d < gs; d++) {
        sendTo[round] = sg * gs + (local + d) % gs;
        recvFrom[round] = rg * gs + (local - d + gs) % gs;
        round++;
      }
    }
    groupRound++;
    groupDelta = (groupDelta + groupRound) & (unsigned)(n2 - 1);
  } while ((int)groupRound != n2);
  T_CHECK(round == c->nRanks, "schedule of rank %d has %d rounds, want %d", rank, round, c->nRanks);
}

static void checkBases(const p2pComm* sendView, const p2pComm* recvView, const char* tag) {
  int n = sendView->nRanks, G = sendView->localRanks, N = sendView->nNodes;
  int* sendTo = malloc((size_t)n * n * sizeof(int));
  int* recvFrom = malloc((size_t)n * n * sizeof(int));
  T_CHECK(sendTo && recvFrom, "oom");
  for (int r = 0; r < n; r++) scheduleOf(sendView, r, sendTo + (size_t)r * n, recvFrom + (size_t)r * n);
  for (int s = 0; s < n; s++) {
    /* The sender's node-major order of its peers: node delta, then local delta. */
    int idx = 0;
    for (int dn = 0; dn < N; dn++)
      for (int dl = 0; dl < G; dl++, idx++) {
        int r = ((s / G + dn) % N) * G + (s % G + dl) % G;
        T_CHECK(p2pNodeMajorIndex(sendView, s, r) == idx,
                "%s: node-major index of %d -> %d is %d, sender counts %d", tag, s, r,
                p2pNodeMajorIndex(sendView, s, r), idx);
      }
  }
  for (int r = 0; r < n; r++) {
    /* The receiver's node-major order of its senders: the deltas backwards. */
    int idx = 0;
    for (int dn = 0; dn < N; dn++)
      for (int dl = 0; dl < G; dl++, idx++) {
        int s = ((r / G - dn + N) % N) * G + (r % G - dl + G) % G;
        T_CHECK(p2pNodeMajorIndex(recvView, s, r) == idx,
                "%s: node-major index of %d -> %d is %d, receiver counts %d", tag, s, r,
                p2pNodeMajorIndex(recvView, s, r), idx);
      }
  }
  for (int s = 0; s < n; s++)
    for (int r = 0; r < n; r++) {
      /* The round in which s sends to r (s's schedule) and in which r
       * receives from s (r's schedule) are one round, and the layer's. */
      int rs = -1, rr = -1;
      for (int k = 0; k < n; k++) {
        if (sendTo[(size_t)s * n + k] == r && rs < 0) rs = k;
        if (recvFrom[(size_t)r * n + k] == s && rr < 0) rr = k;
      }
      T_CHECK(rs >= 0 && rs == rr, "%s: %d -> %d: sender's round %d, receiver's round %d", tag, s, r, rs, rr);
      T_CHECK(p2pScheduleRound(sendView, s, r) == rs && p2pScheduleRound(recvView, s, r) == rr,
              "%s: %d -> %d: round %d / %d, schedule says %d", tag, s, r, p2pScheduleRound(sendView, s, r),
              p2pScheduleRound(recvView, s, r), rs);
      for (int op = 0; op < P2P_NUM_OPS; op++) {
        int bs = p2pChannelBase(sendView, (p2pOp)op, s, r), br = p2pChannelBase(recvView, (p2pOp)op, s, r);
        T_CHECK(bs == br && bs >= 0 && bs < sendView->pool,
                "%s: %s %d -> %d: base %d on the sender, %d on the receiver", tag, p2pOpName((p2pOp)op), s, r,
                bs, br);
        uint64_t ms = p2pTaskMask(sendView, (p2pOp)op, s, r), mr = p2pTaskMask(recvView, (p2pOp)op, s, r);
        T_CHECK(ms == mr && popcount64(ms) == p2pTaskParts(sendView, (p2pOp)op),
                "%s: %s %d -> %d: masks differ", tag, p2pOpName((p2pOp)op), s, r);
      }
    }
  free(sendTo);
  free(recvFrom);
}

static int caseBase(void) {
  const int cfg[][4] = {{1, 8, 32, 2}, {1, 8, 64, 32}, {2, 8, 32, 2}, {3, 8, 64, 4},
                        {4, 8, 32, 2}, {5, 8, 64, 2},  {8, 8, 64, 2}, {16, 8, 64, 2},
                        {3, 4, 16, 4}, {17, 1, 32, 2}, {5, 6, 32, 8}, {3, 3, 8, 2}};
  for (size_t i = 0; i < sizeof cfg / sizeof cfg[0]; i++) {
    /* Each end builds its own view of the comm from the same comm-wide values. */
    p2pComm a = commOf(cfg[i][0], cfg[i][1], cfg[i][2], cfg[i][3], 0);
    p2pComm b = commOf(cfg[i][0], cfg[i][1], cfg[i][2], cfg[i][3], 0);
    char tag[64];
    snprintf(tag, sizeof tag, "%d x %d pool %d per-peer %d", cfg[i][0], cfg[i][1], cfg[i][2], cfg[i][3]);
    checkBases(&a, &b, tag);
    /* The scatter root's flows: each on a channel of its own whenever the
     * rule lets them fit; otherwise spread evenly (busiest = ceil). */
    int parts = p2pTaskParts(&a, P2P_OP_SCATTER), peers = a.nRanks - 1;
    for (int root = 0; root < a.nRanks && a.nNodes > 1; root++) {
      int per[P2P_MAX_CHANNELS] = {0}, busiest = 0;
      for (int r = 0; r < a.nRanks; r++) {
        if (r == root) continue;
        uint64_t m = p2pTaskMask(&a, P2P_OP_SCATTER, root, r);
        for (int ch = 0; ch < a.pool; ch++) per[ch] += (int)((m >> ch) & 1);
      }
      for (int ch = 0; ch < a.pool; ch++)
        if (per[ch] > busiest) busiest = per[ch];
      int want = (peers * parts + a.pool - 1) / a.pool;
      T_CHECK(busiest == want, "%s: root %d: busiest channel carries %d flows, want %d", tag, root, busiest,
              want);
    }
    printf("%-28s bases agree on both ends for all %d pairs x %d ops; scatter parts %d\n", tag,
           a.nRanks * a.nRanks, P2P_NUM_OPS, parts);
  }
  /* Part p's channel does not depend on the part count: more parts only add. */
  for (int pool = 1; pool <= P2P_MAX_CHANNELS; pool *= 2)
    for (int base = 0; base < pool; base++)
      for (int k = 1; k < pool; k *= 2) {
        uint64_t m = p2pChannelMask(pool, base, k), m2 = p2pChannelMask(pool, base, 2 * k);
        T_CHECK(popcount64(m) == k && popcount64(m2) == 2 * k && (m & m2) == m,
                "pool %d base %d: %d parts not a subset of %d", pool, base, k, 2 * k);
        T_CHECK(p2pChannelForPart(pool, base, 0) == base, "pool %d: part 0 is not on the base", pool);
      }
  /* The seed's 3-node example, in channels: parts on base and base + 32. */
  p2pComm c3 = commOf(3, 8, 64, 4, 0);
  T_CHECK(p2pTaskMask(&c3, P2P_OP_SCATTER, 0, 1) == ((1ull << 0) | (1ull << 32)), "3 nodes: 0 -> 1 channels");
  T_CHECK(p2pTaskMask(&c3, P2P_OP_SCATTER, 0, 23) == ((1ull << 22) | (1ull << 54)),
          "3 nodes: 0 -> 23 channels");
  T_CHECK(p2pTaskMask(&c3, P2P_OP_SCATTER, 9, 0) == ((1ull << 22) | (1ull << 54)),
          "3 nodes: 9 -> 0 is node delta 2, local delta 7: index 23");
  return 0;
}

/* ---- lazy connection: partial, then full, on both sides ------------------ */

typedef struct {
  p2pConnTable t;
  uint64_t storage[2 * 64];
} connRank;

/* One task between s and r: each end claims what its parts need, alone; the
 * claims are exchanged (as a transport handshake would) and must agree.
 * Returns the channels connected now, or fails with the agreement's message. */
static uint64_t runTask(connRank* sEnd, connRank* rEnd, uint64_t sWant, uint64_t rWant, int s, int r,
                        int expectError) {
  char err[512] = "";
  int bad = p2pConnAgree(sWant, rWant, s, r, err, sizeof err);
  if (!bad) {
    uint64_t sNew = p2pConnNeed(&sEnd->t, r, P2P_DIR_SEND, sWant);
    uint64_t rNew = p2pConnNeed(&rEnd->t, s, P2P_DIR_RECV, rWant);
    bad = p2pConnAgree(sNew, rNew, s, r, err, sizeof err);
    if (!bad) {
      /* Connected on both ends: only now recorded. */
      p2pConnCommit(&sEnd->t, r, P2P_DIR_SEND, sNew);
      p2pConnCommit(&rEnd->t, s, P2P_DIR_RECV, rNew);
      T_CHECK(!expectError, "%d -> %d: expected a disagreement, both ends connected {%llx}", s, r,
              (unsigned long long)sNew);
      return sNew;
    }
  }
  T_CHECK(expectError, "%d -> %d: %s", s, r, err);
  T_CHECK(strstr(err, "disagree") && strstr(err, "only the"), "error does not say what differs: %s", err);
  printf("  expected error: %s\n", err);
  return 0;
}

static int caseLazy(void) {
  /* 4 nodes x 8, pool 32, 2 parts per peer: a scatter takes 1 part (31 peers
   * do not fit 2 x 32), as in the seed's preconnect test. */
  p2pComm c = commOf(4, 8, 32, 2, 0);
  T_CHECK(p2pTaskParts(&c, P2P_OP_SCATTER) == 1 && c.perPeer == 2, "setup");
  static connRank ranks[32];
  for (int i = 0; i < 32; i++) p2pConnInit(&ranks[i].t, 32, ranks[i].storage);
  char a[256], b[256];

  /* Both sides: rank 9 is first the receiver of root 0's scatter, then the
   * sender to root 0 (a scatter from 9): the test reads the send copy and the
   * recv copy of one rank. */
  const int pairs[2][2] = {{0, 9}, {9, 0}};
  for (int pi = 0; pi < 2; pi++) {
    int s = pairs[pi][0], r = pairs[pi][1];
    int base = p2pChannelBase(&c, P2P_OP_SCATTER, s, r);
    uint64_t part0 = p2pChannelMask(c.pool, base, 1), full = p2pChannelMask(c.pool, base, 2);
    /* 1. A one-part scatter claims part 0 only and leaves the side unseen. */
    uint64_t now = runTask(&ranks[s], &ranks[r], p2pTaskMask(&c, P2P_OP_SCATTER, s, r),
                           p2pTaskMask(&c, P2P_OP_SCATTER, s, r), s, r, 0);
    T_CHECK(now == part0, "%d -> %d: scatter connected {%s}, want part 0 {%s}", s, r,
            p2pMaskString(now, a, sizeof a), p2pMaskString(part0, b, sizeof b));
    T_CHECK(p2pConnMask(&ranks[s].t, r, P2P_DIR_SEND) == part0 &&
                p2pConnMask(&ranks[r].t, s, P2P_DIR_RECV) == part0,
            "%d -> %d: send copy {%s}, recv copy {%s}", s, r,
            p2pMaskString(p2pConnMask(&ranks[s].t, r, P2P_DIR_SEND), a, sizeof a),
            p2pMaskString(p2pConnMask(&ranks[r].t, s, P2P_DIR_RECV), b, sizeof b));
    T_CHECK(!p2pConnSeen(&ranks[s].t, &c, s, r, P2P_DIR_SEND) &&
                !p2pConnSeen(&ranks[r].t, &c, r, s, P2P_DIR_RECV),
            "%d -> %d: a partial scatter marked the pair seen", s, r);
    /* Nothing else was touched: no other peer, no other direction. */
    for (int q = 0; q < 32; q++) {
      T_CHECK(q == r || p2pConnMask(&ranks[s].t, q, P2P_DIR_SEND) == 0 || pi == 1, "stray send channel to %d",
              q);
      T_CHECK(p2pConnMask(&ranks[s].t, q, P2P_DIR_RECV) == 0 || (pi == 1 && q == 0),
              "rank %d: stray recv channels from %d", s, q);
    }
    /* 2. The same scatter again connects nothing. */
    now = runTask(&ranks[s], &ranks[r], part0, part0, s, r, 0);
    T_CHECK(now == 0, "%d -> %d: a repeated scatter connected {%s}", s, r, p2pMaskString(now, a, sizeof a));
    /* 3. A later task on that base with all its parts adds just the missing channel. */
    now = runTask(&ranks[s], &ranks[r], full, full, s, r, 0);
    T_CHECK(now == (full & ~part0) && popcount64(now) == 1,
            "%d -> %d: the full task connected {%s}, want {%s}", s, r, p2pMaskString(now, a, sizeof a),
            p2pMaskString(full & ~part0, b, sizeof b));
    T_CHECK(p2pConnMask(&ranks[s].t, r, P2P_DIR_SEND) == full &&
                p2pConnMask(&ranks[r].t, s, P2P_DIR_RECV) == full,
            "%d -> %d: both copies hold both parts", s, r);
    /* 4. A full send/recv task on its schedule base connects what it lacks,
     * after which both sides are seen. */
    uint64_t sr = p2pTaskMask(&c, P2P_OP_SENDRECV, s, r);
    now = runTask(&ranks[s], &ranks[r], sr, sr, s, r, 0);
    T_CHECK(now == (sr & ~full), "%d -> %d: send/recv connected {%s}, want {%s}", s, r,
            p2pMaskString(now, a, sizeof a), p2pMaskString(sr & ~full, b, sizeof b));
    T_CHECK(
        p2pConnSeen(&ranks[s].t, &c, s, r, P2P_DIR_SEND) && p2pConnSeen(&ranks[r].t, &c, r, s, P2P_DIR_RECV),
        "%d -> %d: a full task left a side unseen", s, r);
    printf("%d -> %d: scatter {%s}, then +{%s} for the full task on its base\n", s, r,
           p2pMaskString(part0, a, sizeof a), p2pMaskString(full & ~part0, b, sizeof b));
  }

  /* Mismatches are errors on the spot, never a wait. (a) The ends computed
   * parts from different comm-wide values: one side believes the user set 2
   * parts per peer, the other does not. */
  p2pComm cu = commOf(4, 8, 32, 2, 2);
  connRank x, y;
  p2pConnInit(&x.t, 32, x.storage);
  p2pConnInit(&y.t, 32, y.storage);
  runTask(&x, &y, p2pTaskMask(&c, P2P_OP_SCATTER, 3, 20), p2pTaskMask(&cu, P2P_OP_SCATTER, 3, 20), 3, 20, 1);
  T_CHECK(p2pConnMask(&x.t, 20, P2P_DIR_SEND) == 0 && p2pConnMask(&y.t, 3, P2P_DIR_RECV) == 0,
          "a disagreeing task connected something");
  /* (b) Same wants, different histories: the receiver already holds a
   * channel the sender does not, so their claims differ. */
  uint64_t w = p2pTaskMask(&c, P2P_OP_SENDRECV, 3, 20);
  p2pConnClaim(&y.t, 3, P2P_DIR_RECV, w & (~w + 1)); /* lowest channel of w */
  runTask(&x, &y, w, w, 3, 20, 1);
  T_CHECK(p2pConnMask(&x.t, 20, P2P_DIR_SEND) == 0, "the sender recorded a connection the receiver refused");
  /* p2pConnClaim is need + commit in one, for a side that connects alone. */
  T_CHECK(p2pConnClaim(&x.t, 20, P2P_DIR_SEND, w) == w && p2pConnClaim(&x.t, 20, P2P_DIR_SEND, w) == 0,
          "claim");
  return 0;
}

/* ---- relaycc-plan --scatter-parts ---------------------------------------- */

/* Run the tool's main with stdout captured; returns its exit code and the
 * last line of its output. */
static int runTool(char** argv, int argc, char* last, size_t len) {
  fflush(stdout);
  FILE* f = tmpfile();
  T_CHECK(f, "tmpfile");
  int saved = dup(1);
  dup2(fileno(f), 1);
  int rc = p2pPlanToolMain(argc, argv);
  fflush(stdout);
  dup2(saved, 1);
  close(saved);
  rewind(f);
  char line[512];
  last[0] = 0;
  while (fgets(line, sizeof line, f)) {
    fputs(line, stdout);
    snprintf(last, len, "%s", line);
  }
  fclose(f);
  return rc;
}

static int caseTool(void) {
  int n = (int)(sizeof kRules / sizeof kRules[0]);
  for (int i = 0; i < n; i++) {
    const ruleRow* r = &kRules[i];
    char a[5][16];
    snprintf(a[0], 16, "%d", r->nodes);
    snprintf(a[1], 16, "%d", r->local);
    snprintf(a[2], 16, "%d", r->pool);
    snprintf(a[3], 16, "%d", r->perPeer);
    snprintf(a[4], 16, "%d", r->user);
    char* argv[] = {
        "relaycc-plan", "--scatter-parts", "--nodes", a[0], "--local", a[1], "--pool", a[2], "--per-peer",
        a[3],           "--user-per-peer", a[4]};
    char last[512], want[32];
    int rc = runTool(argv, r->user ? 12 : 10, last, sizeof last);
    snprintf(want, sizeof want, "parts %d\n", r->want);
    T_CHECK(rc == 0 && !strcmp(last, want), "%s: rc %d, last line '%s', want '%s'", r->why, rc, last, want);
  }
  /* --opt=value spelling, and errors exit 2. */
  char* eq[] = {"relaycc-plan", "--scatter-parts", "--nodes=3", "--local=8", "--pool=64", "--per-peer=4"};
  char last[512];
  T_CHECK(runTool(eq, 6, last, sizeof last) == 0 && !strcmp(last, "parts 2\n"), "--opt=value: '%s'", last);
  char* missing[] = {"relaycc-plan", "--scatter-parts", "--nodes", "3", "--local", "8", "--pool", "64"};
  T_CHECK(runTool(missing, 8, last, sizeof last) == 2, "missing --per-peer accepted");
  char* badPool[] = {"relaycc-plan", "--scatter-parts", "--nodes", "3", "--local", "8", "--pool",
                     "48",           "--per-peer",      "4"};
  T_CHECK(runTool(badPool, 10, last, sizeof last) == 2, "pool 48 accepted");
  char* junk[] = {"relaycc-plan", "--scatter-parts", "--nodes", "x3"};
  T_CHECK(runTool(junk, 4, last, sizeof last) == 2, "--nodes x3 accepted");
  return 0;
}

static const tCase kCases[] = {
    {.name = "rule", .fn = caseRule, .timeoutS = 60},   {.name = "topo", .fn = caseTopo, .timeoutS = 60},
    {.name = "parts", .fn = caseParts, .timeoutS = 60}, {.name = "base", .fn = caseBase, .timeoutS = 60},
    {.name = "lazy", .fn = caseLazy, .timeoutS = 60},   {.name = "tool", .fn = caseTool, .timeoutS = 60},
};

int main(int argc, char** argv) { return t_main(argc, argv, "p2p", kCases, T_NCASES(kCases)); }
