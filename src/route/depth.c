/*
 * The pipeline depth model. A pipelined relay at depth T runs T+1 steps;
 * each step costs a fixed boundary (a grouped launch, the work-FIFO upload
 * and a fence on RCCL) on top of its busiest link's bytes. Deeper pipelines
 * move fewer bytes on the busiest link (both directions of every cross link
 * busy) and pay more boundaries, so the depth is the one that minimizes
 *
 *   linkUnits(T) * bytes / totalUnits(T)  +  (T+1) * boundaryBytes
 *
 * over powers of two up to a cap: the two competing terms stated directly,
 * never a size threshold per depth (the seed's thresholds went stale when
 * pipelining moved the curves). With 768 KiB and cap 8 (mi350x) this picks:
 *   2 active, H = 6 (units 7T+1, link T+1): depth 1 below 15 MiB of relayed
 *     count, 2 to 54 MiB, 4 to 207 MiB, 8 above (the seed: 9 and 13.5 MB
 *     unchanged at depth 1, depth 8 from 256 MB);
 *   4-active all-to-all (2T+1, T+1) on the segment, a quarter of the
 *     message: depth 2 from 45 MiB of message, 4 from 135, 8 from 459 MiB
 *     (the seed: tiles from ~63 MB, depth 8 only from 512 MB);
 *   fan-out all-gather / reduce-scatter at 4 active (7T+1, 3T+1): 2 from
 *     22.5 MiB, 4 from 82, 8 from 310 MiB of relayed count (reduce-scatter
 *     relays recvcount, a quarter of the message, so it tiles later).
 * The 4-active all-reduce has its own selector (relayDepthPick).
 *
 * The shapes count bytes on the links between pairs, a mesh's. Through a
 * switch (NVSwitch: no link of a pair's own, every transfer through the
 * GPU's ports) a relay adds traffic without adding bandwidth: pipelining
 * brings the 2-active and fan-out relays' port bytes down towards the direct
 * exchange's (from 1.75x at depth 1 to 1.1x at depth 8 on 8 GPUs) but never
 * below, so such a relay could only win on overlapping its reduce, which the
 * direct route run as the native collective (NCCL) already fuses. Only the
 * 4-active all-reduce cuts egress there (helpers sum and broadcast), and it
 * keeps its selector: on h200 it picks depth 4 at 1 GB, which takes the
 * relay from 0.83x of NCCL at depth 1 to 1.08x (relaycc-sim; the direct
 * plan is 0.92x). Every other shape stays at depth
 * 1 on a switch, which keeps the router at direct where the relay cannot
 * pay (docs/design.md, "The physical picture").
 */
#include "route/depth.h"

#include <math.h>

#include "comm/common.h"
#include "topo/topo.h"

int relayDepthModelOf(const struct relayTopo* topo, const planKey* key, relayDepthModel* out) {
  out->boundaryBytes = 0;
  out->cap = 1;
  out->switched = 0;
  if (!topo || topo->nGPUs < key->nranks) return -1;
  /* The links the relay of group 0 uses: its actives to every other rank
   * (helpers and peers). A stage is priced on the slowest of them, the one
   * a balanced schedule waits for. */
  double rate = INFINITY;
  for (int i = 0; i < key->nActive; i++) {
    int a = key->ranks[i];
    for (int r = 0; r < key->nranks; r++) {
      if (r == a) continue;
      double x = relayTopoPairRate(topo, a, r), y = relayTopoPairRate(topo, r, a);
      if (x < rate) rate = x;
      if (y < rate) rate = y;
      if (relayTopoLinkCap(topo, a, r) <= 0 || relayTopoLinkCap(topo, r, a) <= 0) out->switched = 1;
    }
  }
  if (!(rate > 0) || !isfinite(rate)) return -1;
  out->boundaryBytes = (topo->stageS > 0 ? topo->stageS : topo->boundaryS) * rate;
  out->cap = topo->maxDepth > 0 ? topo->maxDepth : RELAY_DEPTH_DEFAULT_CAP;
  return 0;
}

double relayDepthCost(const relayPipeShape* s, uint64_t count, size_t es, int nActive, int nHelpers,
                      const relayDepthModel* m, int T) {
  double bytes = (double)count * (double)es;
  if (s->ownForm && T == 1) /* the two-group form: 2*bytes/(A+H) over two stages */
    return 2.0 * bytes / (double)(nActive + nHelpers) + 2.0 * 2.0 * m->boundaryBytes;
  uint64_t total = relayPipeTotalUnits(s, T);
  if (T < 1 || total == 0 || count / total < RELAY_PIPE_MIN_UNIT) return -1;
  /* The 4-active all-reduce issues two reduce kernels per stage (the owner's
   * shard tile, the helper's offload tile) on top of the boundary: its
   * measured depth curve (two-group to 72 MB, depth 4 from 135 MB, 8 from
   * 512 MB) pins the stage between 1.33 and 1.875 MiB, twice 768 KiB. */
  double stage = (s->ownForm ? 2.0 : 1.0) * m->boundaryBytes;
  return (double)relayPipeLinkUnits(s, T) * bytes / (double)total + (double)(T + 1) * stage;
}

int relayDepthPick(const relayPipeShape* s, uint64_t count, size_t es, int nActive, int nHelpers,
                   const relayDepthModel* m) {
  int best = 1;
  double bestCost = relayDepthCost(s, count, es, nActive, nHelpers, m, 1);
  if (bestCost < 0 || (m->switched && !s->ownForm)) return 1;
  /* Own form: depths 1 and 2 of the pipelined shape lose to the two-group
   * form (count/3, then count/4 with one more boundary), so they are not
   * candidates; the search starts at 4. */
  for (int T = s->ownForm ? 4 : 2; T <= m->cap; T *= 2) {
    double c = relayDepthCost(s, count, es, nActive, nHelpers, m, T);
    if (c < 0) break; /* a unit would fall under 128 elements: so would every deeper one */
    if (c < bestCost) {
      bestCost = c;
      best = T;
    }
  }
  return best;
}

int relayDepthChoose(const planKey* key, const struct relayTopo* topo) {
  relayPipeShape s;
  relayDepthModel m;
  if (planRelayPipeShape(key, &s) != 0 || relayDepthModelOf(topo, key, &m) != 0) return 1;
  return relayDepthPick(&s, key->counts[0], relayTypeSize(key->dtype), key->nActive,
                        key->nranks - key->nActive, &m);
}
