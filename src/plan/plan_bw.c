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
 * it stays push. Broadcast and reduce (rooted by position) push one way:
 * the root's tiles to every peer, or every peer's to the root, which
 * reduces them in active-index order; on shm with cross-memory attach every
 * peer reads the root's buffer once instead (transport/shm/bw.c), where the
 * direct route stages every byte twice through the pair rings.
 * Reduce-scatter and all-to-all push block j to active j only
 * ((A-1)/A of the input, already the minimum); all-gather pushes the whole
 * input to every peer, which is the output's definition.
 *
 * The settings (RELAYCC_BW_TILE_BYTES, RELAYCC_BW_RING: comm/params.h, the
 * comm's agreed values) come in the key (planKey.bwTileBytes, bwRing), so the
 * plan is a pure function of it; the transport's prepare votes on them too.
 */
#include "comm/comm.h"
#include "comm/common.h"
#include "plan/plan.h"
#include "plan/routes.h"

/* 128 KiB tiles and 16 slots unless the key says (comm/params.h says why);
 * the tile rounded down to 64 bytes (a cache line; the GPU mover's 16-byte
 * vectors), at least 64. A ring below 0 is RELAYCC_BW_RING=0: the route off. */
size_t planBwTileBytes(const planKey* k) {
  size_t v = k->bwTileBytes ? k->bwTileBytes : RELAY_BW_DEFAULT_TILE_BYTES;
  return v < 64 ? 64 : v / 64 * 64;
}

int planBwRing(const planKey* k) {
  if (k->bwRing < 0) return 0;
  int v = k->bwRing ? k->bwRing : RELAY_BW_DEFAULT_RING;
  return v > RELAY_BW_MAX_RING ? RELAY_BW_MAX_RING : v;
}

void relayCommKeySettings(const struct relayComm* c, planKey* key) {
  key->bwTileBytes = (uint32_t)relayParamInt(c, RELAY_P_BW_TILE_BYTES);
  int ring = (int)relayParamInt(c, RELAY_P_BW_RING);
  key->bwRing = ring > 0 ? ring : -1; /* 0 in the key is the default; RELAYCC_BW_RING=0 is "off" */
  int gate = (int)relayParamInt(c, RELAY_P_ONESHOT_MAX_BYTES); /* <= RELAY_ONESHOT_GATE_MAX, 1 GiB */
  key->oneShotGate = gate > 0 ? gate : -1;                     /* as the ring: 0 in the key is the default */
  /* What api.c's agreeOnShape carries: a rooted call's agreement in check mode 0 without direct windows. */
  key->carry = c->tp && (c->tp->caps & RELAY_TP_CAP_CARRY) && !c->cfg.checkMode && !c->directWindows;
  key->twoShotFrom = c->tp && (c->tp->caps & RELAY_TP_CAP_ONESHOT_TWOSHOT)
                         ? (uint32_t)relayParamInt(c, RELAY_P_ONESHOT_TWOSHOT_BYTES)
                         : 0;
}

relayResult_t planBuildBw(planBuilder* b) {
  const planKey* k = planBuilderKey(b);
  /* Rooted by comm rank (scatter, gather): no collective op; by position (broadcast, reduce): its rooted
   * form (planOp.root: only the root's pairs move, the data one way). */
  if (!relayCollOnLayout(k->coll) || (relayCollRooted(k->coll) && (k->root < 0 || k->root >= k->nActive)))
    return relayNotSupported;
  if (k->nGroups != 1 || k->nActive < 2 || k->nActive > RELAY_ONESHOT_MAX_ACTIVE) return relayNotSupported;
  size_t es = relayTypeSize(k->dtype);
  int ring = planBwRing(k);
  if (es == 0 || ring == 0) return relayNotSupported; /* RELAYCC_BW_RING=0: off */
  int A = k->nActive;
  uint64_t c = k->counts[0];
  uint32_t tile = (uint32_t)(planBwTileBytes(k) / es);
  int form = k->coll == relayCollectiveAllReduce && A > 2 ? PLAN_BW_TWOSHOT : PLAN_BW_PUSH;
  int divisor = relayCollReduces(k->coll) && k->op == relayAvg ? A : 0;
  int s = planAddStep(b);
  for (int j = 0; j < A; j++)
    planBw(b, planActiveRank(k, 0, j), s, 0, planRecvRef(0), planSendRef(0), c, divisor, tile, ring, form);
  return relaySuccess;
}
