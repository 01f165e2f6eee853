#include "core/nodes.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "comm/comm.h"
#include "comm/common.h"
#include "comm/params.h"
#include "comm/vote.h"
#include "route/route.h"
#include "topo/topo.h"
#include "comm/transport.h"

/* One rank's contribution to the init exchange (the transport's agree takes
 * records of at most 256 bytes). source: 1 host identity, 2 RELAYCC_NODE_ID
 * or RELAYCC_SHM_NODES; an override and a host hash never compare equal, so
 * a test that names nodes on some ranks only still gets a consistent map. */
typedef struct {
  int32_t source, pad;
  uint64_t id;
  uint64_t key; /* this rank's random value: rank 0's becomes the comm's key (comm.h commKey) */
} nodeRecord;

/* This rank's record: RELAYCC_NODE_ID (its own), else the test hook
 * RELAYCC_SHM_NODES (the agreed value, checked at init to divide nranks),
 * else the host. Both rows were resolved and validated by the parameter
 * table (an invalid value failed init on every rank before this). */
static void localRecord(const struct relayComm* c, nodeRecord* rec) {
  memset(rec, 0, sizeof *rec);
  rec->key = relayRandom64();
  long long id = relayParamInt(c, RELAY_P_NODE_ID);
  long long nodes = relayParamInt(c, RELAY_P_SHM_NODES);
  if (id >= 0) {
    rec->source = 2;
    rec->id = (uint64_t)id;
  } else if (nodes > 1) {
    rec->source = 2;
    rec->id = (uint64_t)(c->rank / (c->nranks / nodes));
  } else {
    rec->source = 1;
    rec->id = relayHostIdentity();
  }
}

/* The route model is one node's (the agreed comm->topo): on several nodes it
 * becomes nNodes copies of it joined by the default network (one NIC of
 * RELAY_TOPO_NET_GPU_BW per GPU), where the copies are the comm's nodes --
 * node-major, each node's ranks the model's GPUs. Otherwise no model (the
 * router's no-model rule: NCCL's own collective where the transport has it).
 * Every rank holds the same map and topology, so every rank gets the same. */
static relayResult_t nodesTopo(struct relayComm* c) {
  if (c->nNodes <= 1 || !c->topo) return relaySuccess;
  struct relayTopo* multi = NULL;
  int fits = relayNodesRegular(c->nodeOf, c->nranks, c->nNodes) && c->topo->nNodes <= 1 &&
             c->topo->nGPUs == c->localRanks;
  if (fits &&
      relayTopoMultiNode(c->topo, c->nNodes, c->localRanks, RELAY_TOPO_NET_GPU_BW, 0, &multi) != relaySuccess)
    multi = NULL; /* a model the network cannot join (the cpu preset's shared bus): none */
  relayTopoFree(c->topo);
  c->topo = multi;
  return relaySuccess;
}

relayResult_t relayCommDiscoverNodes(struct relayComm* c) {
  int n = c->nranks;
  nodeRecord mine;
  localRecord(c, &mine);
  const void* got;
  RELAY_CHECK(relayAgree(c, &mine, sizeof mine, &got));
  const nodeRecord* all = got;
  c->commKey = all[0].key;
  /* After the round: a rank short of memory still took part in it. */
  int* nodeOf = calloc((size_t)n, sizeof *nodeOf);
  if (!nodeOf) return relaySetError(c, relaySystemError, "out of memory for the node map");
  /* Number identities by their lowest rank: O(n * nodes), n <= a few thousand. */
  int nNodes = 0;
  for (int r = 0; r < n; r++) {
    int q = 0;
    while (q < r && (all[q].source != all[r].source || all[q].id != all[r].id)) q++;
    nodeOf[r] = q < r ? nodeOf[q] : nNodes++;
  }
  free(c->nodeOf);
  c->nodeOf = nodeOf;
  c->nNodes = nNodes;
  c->localRank = 0;
  c->localRanks = 0;
  for (int r = 0; r < n; r++) {
    if (nodeOf[r] != nodeOf[c->rank]) continue;
    if (r < c->rank) c->localRank++;
    c->localRanks++;
  }
  relayResult_t tr = nodesTopo(c);
  if (relayDebugLevel() >= 1)
    fprintf(stderr, "relaycc: rank %d: node %d of %d, local rank %d of %d; route model: %s\n", c->rank,
            nodeOf[c->rank], nNodes, c->localRank, c->localRanks, c->topo ? c->topo->name : "none");
  return tr;
}

const int* relayNodesKeyMap(const struct relayComm* c) { return c->nNodes > 1 ? c->nodeOf : NULL; }

int relayNodesRoute(const struct relayComm* c, int route) {
  return c->nNodes > 1 && route == relayRouteOneShot ? relayRouteDirect : route;
}

int relayNodesCaps(const struct relayComm* c, int caps) {
  return c->nNodes > 1 ? caps & ~(RELAY_TP_CAP_ONESHOT | RELAY_TP_CAP_ONESHOT_ROOTED | RELAY_TP_CAP_BW)
                       : caps;
}
