/*
 * The pipelined relay's shape, as the depth model needs it (the seed's
 * RelayPipelineShape): two affine functions of the depth T,
 *
 *   totalUnits(T) = totalPerTile * T + totalFixed   units the count divides into,
 *   linkUnits(T)  = linkPerTile  * T + linkFixed    units the busiest link
 *                                                   direction carries over the call,
 *
 * so one unit is count / totalUnits(T) elements (aligned down to 128) and the
 * critical path is linkUnits(T) units. The relay builder (plan_relay.c) cuts
 * its message with the same totals; tests/test_depth.c holds the two to each
 * other (the plan's critical path is linkUnits(T) units at every T).
 *
 * The plan layer owns the shapes because they are its geometry; the route
 * layer (src/route/depth.c) owns the choice of T.
 */
#ifndef RELAY_PLAN_PIPE_H_
#define RELAY_PLAN_PIPE_H_

#include <stdint.h>

#include "plan/plan.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct {
  int linkPerTile, linkFixed;
  int totalPerTile, totalFixed;
  /* 1: depth 1 is not this shape but the two-group schedule (4-active
   * all-reduce: pipelined at depth 1 it moves count/3 per link against the
   * two-group count/4), so the depth model has its own selector for it. */
  int ownForm;
} relayPipeShape;

static inline uint64_t relayPipeTotalUnits(const relayPipeShape* s, int T) {
  return (uint64_t)s->totalPerTile * (uint64_t)T + (uint64_t)s->totalFixed;
}
static inline uint64_t relayPipeLinkUnits(const relayPipeShape* s, int T) {
  return (uint64_t)s->linkPerTile * (uint64_t)T + (uint64_t)s->linkFixed;
}

/* Elements per relay unit and region boundary alignment (the reference's
 * 128-element chunks); the depth model stops deepening before a unit would
 * fall under it, and the builder clamps a forced depth the same way. */
#define RELAY_PIPE_MIN_UNIT 128u

/* The shape of key's relay route when it pipelines: 0 and *out filled for an
 * independent call (nGroups == 1) the relay serves; -1 otherwise (fused calls
 * keep depth 1: a rank's scatter and its forward share one link direction, so
 * extra stages add boundaries and nothing else). key->depth is ignored. */
int planRelayPipeShape(const planKey* key, relayPipeShape* out);

#ifdef __cplusplus
}
#endif
#endif
