/*
 * relaycc-plan --scatter-parts: the scatter part rule for a comm of
 * nodes x local ranks with a given pool and per-peer count, with the numbers
 * that decide it and the root's channel occupancy. Its last line is
 * `parts <n>`, for scripts and for checking the seed's table:
 *
 *   relaycc-plan --scatter-parts --nodes 3 --local 8 --pool 64 --per-peer 4
 *   ...
 *   parts 2
 *
 * Its own file (not in tools/plan.c) so the planning tool only dispatches
 * to it and the p2p layer's options stay in one place; tool code, so it is
 * in the relaycc_toolkit target that tools and tests link, not in the
 * library.
 */
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "p2p/p2p.h"
#include "p2p_tool.h"

static void usage(FILE* f) {
  fprintf(
      f,
      "usage: relaycc-plan --scatter-parts --nodes N --local G --pool P --per-peer K [--user-per-peer U]\n"
      "                    [--root R]\n"
      "  Parts per peer a scatter uses on N nodes x G ranks, with a P2P channel pool of P\n"
      "  (a power of two <= %d) and K parts per peer for other operations (a power of two <= P).\n"
      "  --user-per-peer U: RELAYCC_NCHANNELS_PER_NET_PEER=U was set; the per-peer count is then\n"
      "  U (rounded up to a power of two, at most P) and scatter keeps it.\n"
      "  --root R: whose peers' channels to count (default 0).\n"
      "  The last line is `parts <n>`.\n",
      P2P_MAX_CHANNELS);
}

static int intOpt(const char* name, const char* v, int lo, int* out) {
  char* end;
  errno = 0;
  long x = v ? strtol(v, &end, 10) : 0;
  if (!v || !*v || *end || errno || x < lo || x > INT_MAX) {
    fprintf(stderr, "relaycc-plan: %s '%s': want an integer >= %d\n", name, v ? v : "", lo);
    return -1;
  }
  *out = (int)x;
  return 0;
}

int p2pPlanToolMain(int argc, char** argv) {
  int nodes = -1, local = -1, pool = -1, perPeer = -1, user = 0, root = 0;
  for (int i = 1; i < argc; i++) {
    const char* a = argv[i];
    if (!strcmp(a, "--scatter-parts")) continue;
    if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
      usage(stdout);
      return 0;
    }
    static const struct {
      const char* name;
      int lo;
    } kOpts[] = {{"--nodes", 1},    {"--local", 1},         {"--pool", 1},
                 {"--per-peer", 1}, {"--user-per-peer", 1}, {"--root", 0}};
    int* dst[] = {&nodes, &local, &pool, &perPeer, &user, &root};
    int matched = 0;
    for (size_t k = 0; k < sizeof kOpts / sizeof kOpts[0] && !matched; k++) {
      size_t n = strlen(kOpts[k].name);
      if (strncmp(a, kOpts[k].name, n) != 0 || (a[n] != 0 && a[n] != '=')) continue;
      const char* v = a[n] == '=' ? a + n + 1 : (i + 1 < argc ? argv[++i] : NULL);
      if (intOpt(kOpts[k].name, v, kOpts[k].lo, dst[k])) return 2;
      matched = 1;
    }
    if (!matched) {
      fprintf(stderr, "relaycc-plan: unknown option '%s'\n", a);
      usage(stderr);
      return 2;
    }
  }
  const char* missing = nodes < 0     ? "--nodes"
                        : local < 0   ? "--local"
                        : pool < 0    ? "--pool"
                        : perPeer < 0 ? "--per-peer"
                                      : NULL;
  if (missing) {
    fprintf(stderr, "relaycc-plan --scatter-parts: %s is required\n", missing);
    usage(stderr);
    return 2;
  }
  p2pComm c;
  char err[256];
  if (p2pCommSet(nodes, local, pool, perPeer, user, &c, err, sizeof err) != relaySuccess) {
    fprintf(stderr, "relaycc-plan --scatter-parts: %s\n", err);
    return 2;
  }
  if (root >= c.nRanks) {
    fprintf(stderr, "relaycc-plan --scatter-parts: --root %d is not in [0, %d)\n", root, c.nRanks);
    return 2;
  }
  int peers = c.nRanks - 1;
  int parts = p2pTaskParts(&c, P2P_OP_SCATTER);
  printf("# scatter on %d node%s x %d local = %d ranks, pool %d, per-peer %d%s\n", nodes,
         nodes == 1 ? "" : "s", local, c.nRanks, pool, perPeer, user > 0 ? " (user-set: see below)" : "");
  if (nodes == 1) {
    printf("rule      one node: scatter keeps the per-peer count %d\n", c.perPeer);
  } else if (c.perPeerUserSet) {
    printf("rule      RELAYCC_NCHANNELS_PER_NET_PEER=%d: per-peer %d (power of two, <= pool), kept\n", user,
           c.perPeer);
  } else if (peers > 0) {
    int q = pool / peers, fit = 1;
    while (fit * 2 <= q) fit *= 2;
    printf("rule      pool / peers = %d / %d = %d -> power of two %d", pool, peers, q, q >= 1 ? fit : 0);
    printf(", capped at per-peer %d, at least 1 -> %d\n", c.perPeer, parts);
  }
  /* The root's flows: how many channels they cover and the busiest one. */
  int perChannel[P2P_MAX_CHANNELS] = {0};
  for (int r = 0; r < c.nRanks; r++) {
    if (r == root) continue;
    uint64_t m = p2pTaskMask(&c, P2P_OP_SCATTER, root, r);
    for (int ch = 0; ch < c.pool; ch++) perChannel[ch] += (int)((m >> ch) & 1);
  }
  int used = 0, busiest = 0;
  for (int ch = 0; ch < c.pool; ch++) {
    used += perChannel[ch] > 0;
    if (perChannel[ch] > busiest) busiest = perChannel[ch];
  }
  printf("flows     %d peers x %d parts = %d flows of root %d on %d of %d channels (busiest: %d)\n", peers,
         parts, peers * parts, root, used, c.pool, busiest);
  printf("others    send/recv, gather, all-to-all: %d parts per peer\n", c.perPeer);
  printf("parts %d\n", parts);
  return 0;
}
