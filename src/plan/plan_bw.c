/*
 * The bandwidth route: one step, one PLAN_OP_BW per active rank. The
 * transport moves the data in tiles through a ring of staging slots per
 * source in each peer's memory (the one-shot's region machinery: vote,
 * sentinel, epochs, abort), pipelined so that tile t's push overlaps the
 * consumer's reduce or placement of tile t-1. Staging is ring * tile bytes
 * per source whatever the message, where the one-shot stages the whole
 * contribution (and so stops at its 1 MiB gate).
 *
 * Why it exists: on 2 x H200 from 512 KB on relaycc ran NCCL's collective or
 * its send/recv plan at 0.98-1.23x of NCCL, which is itself far from the
 * link (all-reduce of 4 MB in 31.8 us against ~9 us of link time at 478 GB/s
 * plus ~3 us of latency; docs/perf, issue 19).
 *
 * Form: all-reduce with A > 2 runs two-shot (reduce-scatter of shards, then
 * all-gather of the reduced shards): each rank pushes 2(A-1)/A of the count
 * instead of of it, fewer bytes for every A > 2 (A = 4: 1.5 vs 3
 * counts). At A = 2 both move one count and the push form has one phase, so
 * it stays push. Reduce-scatter and all-to-all push block j to active j only
 * ((A-1)/A of the input, already the minimum); all-gather pushes the whole
 * input to every peer, which is the output's definition.
 *
 * The settings are read here and nowhere else (RELAYCC_BW_TILE_BYTES,
 * RELAYCC_BW_RING): they shape the plan, and the transport's prepare votes
 * on them, so ranks that read different values decline the route together.
 */
#include "common.h"
#include "plan/plan.h"
#include "plan/routes.h"

size_t relayBwTileBytes(void) {
  static size_t cached;
  if (!cached) {
    /* 128 KiB: at the 370 GB/s the h200x2 link moves per direction a tile
     * takes ~0.35 us, so a 512 KB message is already 4 tiles, whose push
     * overlaps the reduce of the one before (the one-shot's flag protocol
     * runs push, fences and reduce one after another: 9.4 us at 512 KB,
     * issue 19). 16 slots keep ~5.7 us of pushes in flight per peer, more
     * than the ~2 x 1-2 us of system-scope fences and flag polls a slot's
     * round trip costs (oneshot.h), so the hand-shake stays off the critical
     * path; 16 x 128 KiB is 2 MiB of staging per source ("a few MiB",
     * issue 19). Rounded down to 64 bytes (a cache line; the GPU mover's
     * 16-byte vectors), at least 64. */
    long v = relayEnvLong("RELAYCC_BW_TILE_BYTES", (long)RELAY_BW_DEFAULT_TILE_BYTES);
    if (v < 64) v = 64;
    if (v > (1l << 30)) v = 1l << 30;
    cached = (size_t)v / 64 * 64;
  }
  return cached;
}

int relayBwRing(void) {
  /* 1 .. RELAY_BW_MAX_RING (1 runs the tiles with no overlap at all); 0 (the
   * setting <= 0) turns the route off: no plan, so the router never takes
   * it and a forced bw runs direct. */
  static int cached = -1;
  if (cached < 0) {
    long v = relayEnvLong("RELAYCC_BW_RING", RELAY_BW_DEFAULT_RING);
    cached = v < 1 ? 0 : v > RELAY_BW_MAX_RING ? RELAY_BW_MAX_RING : (int)v;
  }
  return cached;
}

relayResult_t planBuildBw(planBuilder* b) {
  const planKey* k = planBuilderKey(b);
  if ((unsigned)k->coll >= RELAY_NUM_COLLS) return relayNotSupported; /* rooted: no collective op */
  if (k->nGroups != 1 || k->nActive < 2 || k->nActive > RELAY_ONESHOT_MAX_ACTIVE) return relayNotSupported;
  size_t es = relayTypeSize(k->dtype);
  if (es == 0 || relayBwRing() == 0) return relayNotSupported; /* RELAYCC_BW_RING=0: off */
  int A = k->nActive;
  uint64_t c = k->counts[0];
  uint32_t tile = (uint32_t)(relayBwTileBytes() / es);
  int form = k->coll == RELAY_COLL_ALLREDUCE && A > 2 ? PLAN_BW_TWOSHOT : PLAN_BW_PUSH;
  int divisor = relayCollReduces(k->coll) && k->op == relayAvg ? A : 0;
  int s = planAddStep(b);
  for (int j = 0; j < A; j++)
    planBw(b, planActiveRank(k, 0, j), s, 0, planRecvRef(0), planSendRef(0), c, divisor, tile, relayBwRing(), form);
  return relaySuccess;
}
