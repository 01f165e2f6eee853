/*
 * The seed's measured tables and the comparison of the model against them
 * (seedtab.c): test_sim seedtables, relaycc-sim --vs-seed and docs/model.md
 * read them; the library does not, so they live in the toolkit.
 */
#ifndef RELAY_TOOLS_SEEDTAB_H_
#define RELAY_TOOLS_SEEDTAB_H_

#include "relaycc.h"
#include "sim/sim.h"

#ifdef __cplusplus
extern "C" {
#endif

#define RELAY_SEED_MAX_ROWS 16

typedef struct {
  relayCollective_t coll;
  int nActive;
  int nGroups;        /* 1: independent call; > 1: fused, groups of consecutive ranks */
  int depth;          /* the relay's depth in these rows (1: the two-group schedule) */
  const char* source; /* which commit and column of the seed */
  int nRows;
  double mib[RELAY_SEED_MAX_ROWS];     /* per-active-rank input, MiB (bf16) */
  double relayMs[RELAY_SEED_MAX_ROWS]; /* measured relay time (0: the seed gave only the speedup) */
  double speedup[RELAY_SEED_MAX_ROWS]; /* measured RCCL time / relay time */
} relaySeedTable;

extern const relaySeedTable relaySeedTables[];
extern const int relayNumSeedTables;

typedef struct {
  int n;
  double modelRelayMs[RELAY_SEED_MAX_ROWS];
  double modelBaseMs[RELAY_SEED_MAX_ROWS];
  /* relative errors model/measured - 1: mean and max of |.|, and the mean (bias) */
  double meanRelayErr, maxRelayErr, biasRelayErr;
  double meanSpeedupErr, maxSpeedupErr;
  double meanBaseErr, maxBaseErr; /* the baseline model against the measured RCCL column */
} relaySeedCompare;

/* Builds each row's relay plan (group g's actives g*A..g*A+A-1, bf16, the
 * table's depth), simulates it and the baseline on topo, and compares; a
 * row adds the copies the seed's relay ran in launches of their own and
 * relaycc's plan does not (single-group all-gather and all-to-all: the own
 * block; 4-active all-reduce: the out-of-place staging copy). Rows
 * without a measured time count in the speedup errors only (n counts the
 * rows with one). relayNotSupported when the relay route cannot build the
 * shape yet. */
relayResult_t relaySeedCompareRun(const relaySeedTable* t, const struct relayTopo* topo,
                                  relaySeedCompare* out);

#ifdef __cplusplus
}
#endif
#endif
