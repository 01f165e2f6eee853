/* The shared-memory transport: one process per rank on one host. */
#ifndef RELAY_TRANSPORT_SHM_H_
#define RELAY_TRANSPORT_SHM_H_

#include <stddef.h>
#include <stdint.h>

#include "p2p/p2p.h"
#include "relaycc.h"

#ifdef __cplusplus
extern "C" {
#endif

struct relayComm;

/* Rendezvous with the other comm->nranks ranks through the shared-memory
 * segment named after jobName, then attach the shm transport to comm
 * (comm->tp, comm->tpState). Blocks until all ranks arrived or
 * comm->cfg.timeoutMs passes (relayTimeout naming the missing ranks).
 *
 * The segment is relayShmSegmentName(jobName, unique) (jobName: 1-200 characters, no '/'; unique:
 * the name alone is the rendezvous, relayCommInitShmUnique),
 * sized from nranks and rank 0's cfg.shmRingBytes (>= 1024; rounded up to
 * 64) and RELAYCC_NCHANNELS: per directed pair, the ring bytes split into one
 * ring per channel, plus a 1 KiB control ring. When /dev/shm has no room,
 * rank 0 halves the rings (not below 64 KiB) and says so on stderr. Rank 0 replaces whatever a crashed run
 * left under the name and unlinks the name once everyone arrived, so nothing is left behind; one job name
 * serves one comm at a time (create comms of one job one after the other, or give them different names).
 *
 * Errors of the transport's waits (group, agree, barrier): relayTimeout (no
 * progress for cfg.timeoutMs, naming the peer, step and bytes),
 * relayRemoteError (a peer we wait on failed, aborted, rejected the call,
 * destroyed its comm or died), relayInvalidUsage (sizes or call sequence
 * differ between ranks; the comm was aborted or failed before). Any of them
 * leaves the comm failed and tells the peers. Dead peers are found with
 * kill(pid, 0) and /proc, so ranks must share a PID namespace. */
relayResult_t relayShmAttach(struct relayComm* comm, const char* jobName, int unique);

/* Point-to-point data runs through the P2P channel layer (src/p2p): each
 * transfer is split into parts on channels of a pool, and channels connect
 * lazily, per (peer, direction, channel), when a transfer first uses them.
 * Settings (environment, read at init):
 *   RELAYCC_NCHANNELS               the pool (default 2; rank 0's counts: it
 *                                   splits each pair's ring into that many
 *                                   rings, lowered until each has 1 KiB);
 *   RELAYCC_NCHANNELS_PER_NET_PEER  channels per network peer, as NCCL's
 *                                   NCCL_NCHANNELS_PER_NET_PEER (only with
 *                                   several nodes);
 * The layer's node count is the comm's (comm->nNodes, src/core/nodes.c:
 * RELAYCC_NODE_ID per rank, or the test hook RELAYCC_SHM_NODES=N for nodes
 * of nranks / N ranks, node-major), so the multi-node part rules (scatter's)
 * run on one host; a map that is not node-major with equal nodes gets the
 * one-node rules.
 * Ranks whose settings give different channels for a transfer fail it with
 * relayInvalidUsage naming both channel sets, before any data moves. */

/* The segment name of jobName for this process's launch: "/relaycc-<job>.<h>",
 * h a hash of the launch identity (TORCHELASTIC_RUN_ID, MASTER_ADDR,
 * MASTER_PORT where any is set, else the parent pid; shm/segment.c says why),
 * or of nothing when unique is 1 (the caller made jobName unique). */
void relayShmSegmentName(const char* jobName, int unique, char* buf, size_t len);

/* Internal views for tests and tools (not part of the API). */
/* The layer's comm-wide facts on this rank (built on first use). */
relayResult_t relayShmP2pInfo(struct relayComm* comm, p2pComm* out);
/* This rank's connected channels with peer in direction dir (a p2pDir). */
uint64_t relayShmP2pConnMask(struct relayComm* comm, int peer, int dir);
/* Channels this rank connected in direction dir over the comm's life. */
uint64_t relayShmP2pConnected(struct relayComm* comm, int dir);
/* The connection flags in the segment of the pair src -> dst: the channels
 * whose sender (side P2P_DIR_SEND) or receiver (P2P_DIR_RECV) connected.
 * Any rank can read any pair's. */
uint64_t relayShmP2pConnFlags(struct relayComm* comm, int src, int dst, int side);
/* What this rank's waits did over the comm's life: busy polls, and waits that slept at once because a peer
 * last waited on the same CPU (wait.c, shmPause). Zeros on a comm without the shm transport. */
void relayShmWaitCounts(struct relayComm* comm, uint64_t* busyPolls, uint64_t* coLocatedWaits);
/* Whether this rank's waiting word is set now (rings then bump its doorbell and wake it: wait.c, shmSleep),
 * and how many times its waits armed it over the comm's life (arms). 0 on a comm without the shm transport.
 */
int relayShmArmed(struct relayComm* comm, uint64_t* arms);

#ifdef __cplusplus
}
#endif
#endif
