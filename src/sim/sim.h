/*
 * Link-level simulator: runs every rank's program of a plan on a topology and
 * predicts the call's time. Also the baseline model (src/sim/baseline.c): the
 * same collective done by NCCL/RCCL on the active ranks only, so that every
 * prediction can be printed as a ratio a user can check by measuring both.
 *
 * What is modeled (docs/model.md says more, and what is left out):
 *   - each step's transfers are flows that share capacity max-min fairly
 *     (progressive filling) over link-direction resources: a mesh's directed
 *     links, a switch's injection and ejection ports, per-GPU port caps and
 *     a fabric cap, whichever the topology has; a transfer to oneself is a
 *     local copy at memory bandwidth;
 *   - ranks synchronize only through matched transfers: a step's flows
 *     between two ranks start when both have entered the step and paid the
 *     step's boundary cost (launch + sync of one grouped transfer);
 *   - a rank's step ends when its last flow ends; then its lane-0 local ops
 *     run in order, each a launch plus (bytes read + written) / memBw, and the
 *     rank enters the next step. Lane-1 ops run in order on a side lane that
 *     starts each op no earlier than the point it was issued and are joined
 *     at the end of the call;
 *   - on a topology with an operation budget (topo->opBudgetBw > 0, RCCL's
 *     per-operation channel budget) each transfer a rank sends to another
 *     GPU in a step moves at most its equal share of the budget over the
 *     rank's sends of that step, the share fixed for the step;
 *   - the call adds its fixed cost once;
 *   - on a topology with P2P channels (topo->chanBw > 0) each transfer is
 *     split into parts by the P2P channel layer (src/p2p: the plan's
 *     operation, its part rule and channel bases), each part a flow on one
 *     channel, capped by the channel's rate and sharing that (rank, channel)
 *     resource with the other flows on it; a channel that carries two or more
 *     flows moves chanShare of its rate in all. Transfers between nodes go
 *     through the NICs (topo.h), not the links.
 * Deterministic (fixed iteration order, no randomness) and cheap: an 8-rank
 * plan of ~20 steps runs in well under a millisecond.
 */
#ifndef RELAY_SIM_H_
#define RELAY_SIM_H_

#include <stddef.h>
#include <stdint.h>

#include "p2p/p2p.h"
#include "plan/plan.h"
#include "topo/topo.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct {
  double totalS; /* predicted time of the call, seconds: callS + the last rank's end */
  int nranks, nSteps;
  double* stepEndS; /* [nSteps] when the last rank left step s (its lane-0 ops done), after callS */
  double* stepS;    /* [nSteps] stepEndS[s] - stepEndS[s-1] (stepEndS[-1] = 0) */
  double* rankEndS; /* [nranks] when each rank's program ended, side lane joined, after callS */
  /* Traffic, self transfers excluded. */
  uint64_t* linkBytes;        /* [nranks * nranks] bytes src -> dst over the call */
  uint64_t* stepBusiestBytes; /* [nSteps] the busiest directed pair's bytes in step s */
  uint64_t busiestLinkBytes;  /* max of linkBytes */
  int busiestSrc, busiestDst; /* the first pair (src-major order) that carries it */
  uint64_t criticalPathBytes; /* sum of stepBusiestBytes */
  /* Counts on the rank that ends last. */
  int boundaries; /* steps with transfers */
  int launches;   /* local ops, both lanes */
  int events;     /* fluid-model events (rate recomputations) over the whole run */
  /* The channel model only (NULL / 0 without it). Occupancy: chanFlows[r *
   * P2P_MAX_CHANNELS + c] is the most flows one step puts on channel c of
   * rank r as a sender, chanFlowsIn as a receiver; poolSize the pool they
   * sit in. */
  int* chanFlows;
  int* chanFlowsIn;
  int poolSize;
  int partsMax; /* the most parts a transfer took */
} relaySimResult;

/* How the channel model splits transfers. */
typedef struct {
  p2pComm comm;     /* pool, parts per peer, ranks per node: the bases */
  int parts;        /* > 0: every transfer takes this many parts (at most the
                       pool), to compare part rules; 0: the layer's rule for
                       the plan's operation (p2pTaskSplit) */
  int scheduleBase; /* 1: scatter too takes its schedule round's base (RCCL
                       before the seed's node-major base) */
} relaySimP2p;

/* The P2P layer's comm-wide facts on topology t: nodes x GPUs, the direct
 * links of a node's pairs, netsByBw, the pool from t->p2pChannels (0: 64),
 * and the per-peer count from t->p2pPerPeer when the topology gives it (the
 * count the library chose on that machine), else from links and NICs.
 * userPerPeer: RELAYCC_NCHANNELS_PER_NET_PEER (0: unset). */
relayResult_t relaySimP2pComm(const struct relayTopo* t, int userPerPeer, p2pComm* out);

/* Simulate plan on topo. topo->nGPUs must be >= plan->nranks (rank r runs on
 * GPU r). Fills *out (free with relaySimResultFree, also after a failure).
 * relayInvalidArgument names the problem with relaySetError (a plan whose
 * transfers do not match, an unreachable pair, a topology that fails
 * relayTopoCheck); relaySystemError on allocation failure. */
relayResult_t relaySimRun(const relayPlan* plan, const struct relayTopo* topo, relaySimResult* out);
/* The network model of a collective among n comm ranks (GPUs of topo) that
 * the transport library runs itself: a plan's sub-collective
 * (PLAN_OP_SUBCOLL) and the flat NCCL collective it is compared with. A ring
 * (all-to-all: pairwise): launchS + steps * latency (netLatS once the ring
 * leaves a node, else hopS) + the slower of the ring edge inside a node and
 * each node's network egress over its members' NIC shares. blkBytes: the
 * collective's count in bytes. */
double relaySimSubCollSeconds(const struct relayTopo* topo, relayCollective_t coll, const int* members, int n,
                              double blkBytes);
/* The same with the channel model's split given (p2p NULL: every transfer
 * one flow; relaySimRun passes the topology's, relaySimP2pComm, when it has
 * channels). p2p->comm must cover the plan's ranks. */
relayResult_t relaySimRunP2p(const relayPlan* plan, const struct relayTopo* topo, const relaySimP2p* p2p,
                             relaySimResult* out);
void relaySimResultFree(relaySimResult* r);

/* The fluid model alone: n flows src[i] -> dst[i] of bytes[i] bytes, all
 * starting at time 0 (no boundary or call cost). Writes the time the last one
 * ends (0 when n == 0) and, when ends != NULL, each flow's end. */
relayResult_t relaySimFlows(const struct relayTopo* topo, int n, const int* src, const int* dst,
                            const double* bytes, double* makespan, double* ends);

/* ---- baseline: the collective by NCCL/RCCL on the active ranks only ---- */

typedef enum { RELAY_BASE_RING = 0, RELAY_BASE_DIRECT = 1 } relayBaselineAlgo;

typedef struct {
  double totalS;      /* predicted time of the call, seconds (the slowest group) */
  double ringS;       /* the ring model's time */
  double directS;     /* the direct (one-shot / pairwise) model's time */
  int algo;           /* relayBaselineAlgo: the lesser of the two */
  double egressBytes; /* per active rank, of the chosen algorithm */
} relayBaselineResult;

/* key->coll, nranks, nGroups, nActive, ranks, counts and dtype are used (the
 * op, route and depth are not). Counts follow the API: elements per rank of
 * the all-gather send, the reduce-scatter recv, the all-reduce buffer and the
 * all-to-all segment. The nGroups groups run at once, as the reference's fused
 * sweep compares against nGroups concurrent A-rank NCCL calls. */
relayResult_t relayBaselineRun(const planKey* key, const struct relayTopo* topo, relayBaselineResult* out);
const char* relayBaselineAlgoName(int algo);

#ifdef __cplusplus
}
#endif
#endif
