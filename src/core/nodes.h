/* Node discovery: which node each comm rank runs on (docs/design.md, "Beyond one node"). */
#ifndef RELAY_NODES_H_
#define RELAY_NODES_H_

#include "relaycc.h"

#ifdef __cplusplus
extern "C" {
#endif

struct relayComm;

/* COLLECTIVE at init, in relayInitFinish (core/init.c) after the topology
 * was agreed, for every transport (it uses the transport's agree): every
 * rank contributes its host identity -- a hash of its hostname and
 * /proc/sys/kernel/random/boot_id, or the parameter RELAYCC_NODE_ID when set
 * (a test splits one host into nodes with it; the test hook
 * RELAYCC_SHM_NODES=N is the same thing spelled for all ranks at once: rank
 * r gets node id r / (nranks / N)) -- and every rank numbers the distinct
 * identities in order of their lowest rank, so node 0 holds rank 0 and all
 * ranks hold the same map. Sets comm->nodeOf[nranks], comm->nNodes,
 * comm->localRank and comm->localRanks (ranks on this rank's node). Both
 * settings are rows of the parameter table, validated there (a bad value
 * fails every rank before this runs). On several nodes it makes the
 * one-node model a model of the comm's nodes, or drops it (nodes.c,
 * nodesTopo). */
relayResult_t relayCommDiscoverNodes(struct relayComm* comm);

/* What a call on comm c takes from its nodes (core's one use of them): the
 * node map its plan key carries (NULL on one node), and the route and the
 * router's transport capabilities without what cannot span nodes -- the
 * one-shot and every IPC route map peers' memory, which another host's
 * ranks cannot, and their staging is created per comm. */
const int* relayNodesKeyMap(const struct relayComm* c);
int relayNodesRoute(const struct relayComm* c, int route);
int relayNodesCaps(const struct relayComm* c, int caps);

#ifdef __cplusplus
}
#endif
#endif
