/*
 * The topology model: creation, copies, several nodes joined by a network,
 * the queries the simulator and the router ask, and the model's check. Its
 * presets: presets.c; its text format: text.c (docs/model.md documents both).
 */
#include "topo/topo.h"

#include <math.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "comm/coll.h"
#include "comm/common.h"
#include "topo/units.h"

static atomic_ullong gTopoGeneration;

uint64_t relayTopoGeneration(void) { return (uint64_t)atomic_load(&gTopoGeneration); }

relayResult_t relayTopoCreate(int nGPUs, const char* name, struct relayTopo** out) {
  atomic_fetch_add(&gTopoGeneration, 1);
  *out = NULL;
  if (nGPUs < 1 || nGPUs > RELAY_TOPO_MAX_GPUS) return relayInvalidArgument;
  struct relayTopo* t = calloc(1, sizeof *t);
  if (!t) return relaySystemError;
  size_t nn = (size_t)nGPUs * (size_t)nGPUs;
  t->nGPUs = nGPUs;
  t->linkCount = calloc(nn, sizeof *t->linkCount);
  t->linkBw = calloc(nn, sizeof *t->linkBw);
  t->injBw = calloc((size_t)nGPUs, sizeof *t->injBw);
  t->ejBw = calloc((size_t)nGPUs, sizeof *t->ejBw);
  if (!t->linkCount || !t->linkBw || !t->injBw || !t->ejBw) {
    relayTopoFree(t);
    return relaySystemError;
  }
  snprintf(t->name, sizeof t->name, "%s", name ? name : "custom");
  *out = t;
  return relaySuccess;
}

void relayTopoFree(struct relayTopo* t) {
  atomic_fetch_add(&gTopoGeneration, 1);
  if (!t) return;
  free(t->linkCount);
  free(t->linkBw);
  free(t->injBw);
  free(t->ejBw);
  free(t);
}

/* Every scalar field of s into t (a struct copy, so a field added later is
 * never forgotten), t keeping its own arrays, GPU count and name. */
static void copyScalars(struct relayTopo* t, const struct relayTopo* s) {
  const struct relayTopo keep = *t;
  *t = *s;
  t->nGPUs = keep.nGPUs;
  memcpy(t->name, keep.name, sizeof t->name);
  t->linkCount = keep.linkCount;
  t->linkBw = keep.linkBw;
  t->injBw = keep.injBw;
  t->ejBw = keep.ejBw;
}

relayResult_t relayTopoClone(const struct relayTopo* s, struct relayTopo** out) {
  RELAY_CHECK(relayTopoCreate(s->nGPUs, s->name, out));
  struct relayTopo* t = *out;
  size_t nn = (size_t)s->nGPUs * (size_t)s->nGPUs;
  memcpy(t->linkCount, s->linkCount, nn * sizeof *t->linkCount);
  memcpy(t->linkBw, s->linkBw, nn * sizeof *t->linkBw);
  memcpy(t->injBw, s->injBw, (size_t)s->nGPUs * sizeof *t->injBw);
  memcpy(t->ejBw, s->ejBw, (size_t)s->nGPUs * sizeof *t->ejBw);
  copyScalars(t, s);
  return relaySuccess;
}

/* ---- several nodes ------------------------------------------------------ */

relayResult_t relayTopoMultiNode(const struct relayTopo* node, int nNodes, int nicsPerNode, double nicBw,
                                 int pxn, struct relayTopo** out) {
  *out = NULL;
  int G = node->nGPUs;
  if (nNodes < 1 || G * nNodes > RELAY_TOPO_MAX_GPUS || (node->nNodes > 1))
    return relaySetError(NULL, relayInvalidArgument,
                         "topology: %d nodes of '%s' (%d GPUs, %d node%s): at most %d GPUs", nNodes,
                         node->name, G, node->nNodes > 1 ? node->nNodes : 1, node->nNodes > 1 ? "s" : "",
                         RELAY_TOPO_MAX_GPUS);
  if (nNodes > 1 && node->fabricBw > 0)
    return relaySetError(
        NULL, relayInvalidArgument,
        "topology '%s': a fabric cap bounds one node's transfers (the shm transport's memory bus); it "
        "has no multi-node meaning",
        node->name);
  if (nNodes > 1 && !(nicsPerNode >= 1 && nicBw > 0 && isfinite(nicBw)))
    return relaySetError(NULL, relayInvalidArgument, "topology: %d nodes need NICs (%d of %g GB/s)", nNodes,
                         nicsPerNode, nicBw / GBS);
  char name[RELAY_TOPO_NAME_MAX];
  snprintf(name, sizeof name, "%.40sx%d", node->name, nNodes);
  relayResult_t r = relayTopoCreate(G * nNodes, name, out);
  if (r != relaySuccess) return relaySetError(NULL, r, "topology: out of memory");
  struct relayTopo* t = *out;
  int n = t->nGPUs;
  for (int k = 0; k < nNodes; k++)
    for (int i = 0; i < G; i++) {
      int a = k * G + i;
      t->injBw[a] = node->injBw[i];
      t->ejBw[a] = node->ejBw[i];
      for (int j = 0; j < G; j++) {
        if (i == j) continue;
        t->linkCount[a * n + k * G + j] = node->linkCount[i * G + j];
        t->linkBw[a * n + k * G + j] = node->linkBw[i * G + j];
      }
    }
  copyScalars(t, node);
  /* The calibration was fitted on one node's links (its transfers and its
   * library's collectives there); it says nothing of transfers that cross
   * NICs, so a multi-node model runs on the plain link figures. */
  memset(&t->p2pEff, 0, sizeof t->p2pEff);
  memset(t->collEff, 0, sizeof t->collEff);
  t->modelErr = 0;
  t->hostStepS = 0;
  t->nNodes = nNodes;
  t->nicsPerNode = nNodes > 1 ? nicsPerNode : 0;
  t->nicBw = nNodes > 1 ? nicBw : 0;
  t->pxn = nNodes > 1 ? (pxn != 0) : 0;
  t->netLatS = nNodes > 1 ? RELAY_TOPO_NET_LAT_S : 0;
  return relaySuccess;
}

double relayTopoNicCap(const struct relayTopo* t) {
  if (t->nNodes <= 1 || t->nicsPerNode < 1) return 0.0;
  double node = (double)t->nicsPerNode * t->nicBw;
  return t->pxn ? node : node / (double)(t->nGPUs / t->nNodes);
}

/* ---- queries ------------------------------------------------------------ */

int relayTopoOneCopy(double floor, double pairFloor, double rootedFloor, int nActive, int rooted, int gather,
                     double inputBytes) {
  if (floor <= 0) return 0;
  double f = rooted ? rootedFloor : floor;
  if (nActive == 2 && pairFloor > 0 && pairFloor < f) f = pairFloor; /* RELAYCC_SHM_CMA_PAIR_BYTES says why */
  if (rooted) return gather && inputBytes * (nActive - 1) >= f;
  return inputBytes >= f;
}

int relayTopoReachable(const struct relayTopo* t, int s, int d) {
  if (s < 0 || d < 0 || s >= t->nGPUs || d >= t->nGPUs) return 0;
  if (s == d) return 1;
  if (relayTopoNodeOf(t, s) != relayTopoNodeOf(t, d)) return relayTopoNicCap(t) > 0;
  return t->linkCount[s * t->nGPUs + d] > 0 || t->hasSwitch;
}

double relayTopoPairRate(const struct relayTopo* t, int s, int d) {
  if (!relayTopoReachable(t, s, d)) return 0.0;
  if (s == d) return t->memBw / 2;
  if (relayTopoNodeOf(t, s) != relayTopoNodeOf(t, d)) return relayTopoNicCap(t);
  double r = INFINITY;
  double link = relayTopoLinkCap(t, s, d);
  if (link > 0) r = link;
  if (t->injBw[s] > 0 && t->injBw[s] < r) r = t->injBw[s];
  if (t->ejBw[d] > 0 && t->ejBw[d] < r) r = t->ejBw[d];
  if (t->fabricBw > 0 && t->fabricBw < r) r = t->fabricBw;
  return r;
}

const char* relayTopoCurveName(int c) { return c < 0 ? "p2p" : relayCollName((relayCollective_t)c); }

double relayTopoCurveAt(const relayTopoCurve* c, double bytes) {
  if (!c || c->n <= 0) return 1.0;
  if (bytes <= c->bytes[0]) return c->eff[0];
  int last = c->n - 1;
  if (bytes >= c->bytes[last]) return c->eff[last];
  int i = 0;
  while (bytes > c->bytes[i + 1]) i++;
  if (bytes == c->bytes[i + 1]) return c->eff[i + 1]; /* the measured points exactly */
  /* A power law between the two points: NCCL's efficiency rises with size
   * roughly geometrically, and this keeps it positive. */
  double x = log(bytes / c->bytes[i]) / log(c->bytes[i + 1] / c->bytes[i]);
  return exp(log(c->eff[i]) + x * log(c->eff[i + 1] / c->eff[i]));
}

int relayTopoErrf(char* err, size_t errlen, const char* fmt, ...) {
  if (err && errlen) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err, errlen, fmt, ap);
    va_end(ap);
  }
  return -1;
}

int relayTopoCheck(const struct relayTopo* t, char* err, size_t errlen) {
  int n = t->nGPUs;
  if (n < 1 || n > RELAY_TOPO_MAX_GPUS)
    return relayTopoErrf(err, errlen, "gpus %d out of 1..%d", n, RELAY_TOPO_MAX_GPUS);
  if (t->nNodes < 0 || (t->nNodes > 1 && n % t->nNodes != 0))
    return relayTopoErrf(err, errlen, "nodes %d must divide gpus %d", t->nNodes, n);
  if (t->nNodes > 1) {
    if (t->nicsPerNode < 1 || !(t->nicBw > 0 && isfinite(t->nicBw)))
      return relayTopoErrf(err, errlen, "%d nodes need nics_per_node >= 1 and nic_gbs > 0", t->nNodes);
    if (t->fabricBw > 0)
      return relayTopoErrf(err, errlen, "a fabric cap is one node's: not with %d nodes", t->nNodes);
    for (int s = 0; s < n; s++)
      for (int d = 0; d < n; d++)
        if (relayTopoNodeOf(t, s) != relayTopoNodeOf(t, d) && t->linkCount[s * n + d] > 0)
          return relayTopoErrf(err, errlen,
                               "link %d %d: GPUs of different nodes reach each other over the network only",
                               s, d);
  }
  if (t->netsByBw < 0) return relayTopoErrf(err, errlen, "nets_by_bw must be >= 0");
  if (!(t->opBudgetBw >= 0 && isfinite(t->opBudgetBw)))
    return relayTopoErrf(err, errlen, "op_budget_gbs must be >= 0");
  if (!(t->chanBw >= 0 && isfinite(t->chanBw))) return relayTopoErrf(err, errlen, "chan_gbs must be >= 0");
  if (!(t->chanShare >= 0 && t->chanShare <= 1))
    return relayTopoErrf(err, errlen, "chan_share must be in [0, 1]");
  if (t->p2pChannels < 0 || t->p2pChannels > 64)
    return relayTopoErrf(err, errlen, "p2p_channels must be in 0..64");
  if (t->p2pPerPeer < 0 || t->p2pPerPeer > 64 || (t->p2pPerPeer & (t->p2pPerPeer - 1)))
    return relayTopoErrf(err, errlen, "p2p_per_peer must be 0 or a power of two up to 64");
  for (int s = 0; s < n; s++) {
    for (int d = 0; d < n; d++) {
      if (s == d) continue;
      int c = t->linkCount[s * n + d];
      double bw = t->linkBw[s * n + d];
      if (c < 0) return relayTopoErrf(err, errlen, "link %d %d: negative count %d", s, d, c);
      if (c > 0 && !(bw > 0 && isfinite(bw)))
        return relayTopoErrf(err, errlen, "link %d %d: %d links need a positive bandwidth", s, d, c);
      if (!relayTopoReachable(t, s, d))
        return relayTopoErrf(err, errlen, "GPU %d cannot reach GPU %d: no link and no switch", s, d);
    }
    if (!(t->injBw[s] >= 0 && isfinite(t->injBw[s])) || !(t->ejBw[s] >= 0 && isfinite(t->ejBw[s])))
      return relayTopoErrf(err, errlen, "ports %d: bandwidths must be finite and >= 0", s);
    if (t->hasSwitch && t->fabricBw <= 0 && (t->injBw[s] <= 0 || t->ejBw[s] <= 0)) {
      /* Through a switch with an uncapped port and no fabric cap a transfer
       * would move at an infinite rate. */
      for (int d = 0; d < n; d++)
        if (d != s && relayTopoNodeOf(t, s) == relayTopoNodeOf(t, d) &&
            (t->linkCount[s * n + d] == 0 || t->linkCount[d * n + s] == 0))
          return relayTopoErrf(err, errlen, "ports %d: a switch needs injection and ejection > 0", s);
    }
  }
  if (!(t->fabricBw >= 0 && isfinite(t->fabricBw))) return relayTopoErrf(err, errlen, "fabric must be >= 0");
  const double costs[] = {t->callS, t->boundaryS, t->launchS, t->hopS};
  for (int i = 0; i < 4; i++)
    if (!(costs[i] >= 0 && isfinite(costs[i])))
      return relayTopoErrf(err, errlen, "costs must be finite and >= 0");
  if (!(t->memBw > 0 && isfinite(t->memBw))) return relayTopoErrf(err, errlen, "mem_gbs must be > 0");
  if (!(t->reduceBw >= 0 && isfinite(t->reduceBw)))
    return relayTopoErrf(err, errlen, "reduce_gbs must be >= 0");
  if (!(t->stageS >= 0 && isfinite(t->stageS)))
    return relayTopoErrf(err, errlen, "stage_us must be finite and >= 0");
  if (t->maxDepth < 0 || t->maxDepth > 1024)
    return relayTopoErrf(err, errlen, "max_depth must be in 0..1024");
  for (int c = -1; c < RELAY_TOPO_NCOLLS; c++) {
    const relayTopoCurve* cv = c < 0 ? &t->p2pEff : &t->collEff[c];
    const char* who = relayTopoCurveName(c);
    if (cv->n < 0 || cv->n > RELAY_TOPO_CURVE_MAX)
      return relayTopoErrf(err, errlen, "eff %s: %d points, at most %d", who, cv->n, RELAY_TOPO_CURVE_MAX);
    for (int i = 0; i < cv->n; i++) {
      if (!(cv->bytes[i] > 0 && isfinite(cv->bytes[i]) && cv->eff[i] > 0 && isfinite(cv->eff[i])))
        return relayTopoErrf(err, errlen, "eff %s: point %d needs bytes > 0 and an efficiency > 0", who,
                             i + 1);
      if (i > 0 && !(cv->bytes[i] > cv->bytes[i - 1]))
        return relayTopoErrf(err, errlen, "eff %s: sizes must increase (point %d)", who, i + 1);
    }
  }
  if (!(t->modelErr >= 0 && t->modelErr < 1))
    return relayTopoErrf(err, errlen, "model_err must be in [0, 1)");
  return 0;
}
