/* The pipeline depth model: which depth T a pipelined relay runs at (the
 * seed's relayPipelineTiles and relayA4AllReducePipelineTiles). A pure
 * function of the call signature and the topology, so every rank picks the
 * same depth. */
#ifndef RELAY_ROUTE_DEPTH_H_
#define RELAY_ROUTE_DEPTH_H_

#include <stddef.h>
#include <stdint.h>

#include "plan/pipe.h"
#include "plan/plan.h"

#ifdef __cplusplus
extern "C" {
#endif

struct relayTopo;

/* Default cap when the topology gives none (the seed's kRelayMaxPipelineTiles). */
#define RELAY_DEPTH_DEFAULT_CAP 8

typedef struct {
  double boundaryBytes; /* one stage's fixed cost, in bytes of the busiest link */
  int cap;              /* the deepest depth tried */
  int switched;         /* some pair of the relay has no direct link (a switch) */
} relayDepthModel;

/* The model's figures for key on topo: boundaryBytes = stageS (boundaryS
 * when unset) x the slowest pair rate among the links the key's relay uses
 * (768 KiB on mi350x), cap = maxDepth (8 when unset). -1 when the topology
 * cannot hold the comm. */
int relayDepthModelOf(const struct relayTopo* topo, const planKey* key, relayDepthModel* out);

/* The depth for a shape carrying count elements of elemSize bytes (1 for
 * any shape but the ownForm one when the model is switched: see depth.c):
 *   - a plain shape: the power of two T <= cap minimizing
 *     linkUnits(T) * bytes/totalUnits(T) + (T+1) * boundaryBytes, i.e.
 *     (T+1) * (perStageBytes + boundaryBytes), trying T while a unit holds
 *     128 elements; ties go to the shallower depth;
 *   - an ownForm shape (4-active all-reduce): the two-group form (1) against
 *     depths 4 .. cap, its stage priced at twice the boundary, the two-group
 *     cost being 2*bytes/(nActive+nHelpers) + 2 stages.
 * Returns 1 when nothing deeper pays. */
int relayDepthPick(const relayPipeShape* shape, uint64_t count, size_t elemSize, int nActive, int nHelpers,
                   const relayDepthModel* model);

/* The model's cost of depth T in bytes of the busiest link (T = 1 of an
 * ownForm shape: the two-group form); a negative value when T is not tried
 * (a unit would fall under 128 elements). */
double relayDepthCost(const relayPipeShape* shape, uint64_t count, size_t elemSize, int nActive, int nHelpers,
                      const relayDepthModel* model, int T);

/* The depth of key's relay route on topo: 1 when the relay does not
 * pipeline the key (fused calls, routes it cannot serve, no topology). */
int relayDepthChoose(const planKey* key, const struct relayTopo* topo);

#ifdef __cplusplus
}
#endif
#endif
