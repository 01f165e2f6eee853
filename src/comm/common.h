/* Shared by every layer: datatype facts, error recording, parsing, clocks (settings: comm/params.h). */
#ifndef RELAY_COMMON_H_
#define RELAY_COMMON_H_

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "relaycc.h"

#ifdef __cplusplus
extern "C" {
#endif

struct relayComm;

size_t relayTypeSize(relayDataType_t dt); /* 0 for an unknown type */
const char* relayTypeName(relayDataType_t dt);
const char* relayOpName(relayRedOp_t op);
int relayParseType(const char* s, relayDataType_t* out); /* 0 on success */
int relayParseOp(const char* s, relayRedOp_t* out);
/* The routes' names, indexed by relayRoute_t and NULL-terminated. */
extern const char* const relayRouteNames[];
const char* relayRouteName(int route);        /* "?" outside relayRoute_t */
int relayParseRoute(const char* s, int* out); /* a name of relayRouteNames, or "one-shot"; 0 on success */
/* Comparison tolerance for floats, relative to the largest |input| summed. */
double relayTypeTolerance(relayDataType_t dt);

/* The one error builder: records an error on the comm (comm may be NULL)
 * and returns result. With a comm the text gets the prefix the comm's state
 * says, "<function> (rank R, call #N, step S): ": the function is the call or
 * init in progress (comm->curCallName, else "relaycc"); the call number is
 * there while a collective runs (comm->inCall); the step while the executor
 * runs one (comm->curStep >= 0). A site writes only what happened, naming the
 * argument or the peer; it never writes its own rank, call or step. */
relayResult_t relaySetError(struct relayComm* comm, relayResult_t result, const char* fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* The prefix relaySetError puts before a message on this comm (without the
 * trailing ": "), for text a transport sends to peers (a failure notice). */
void relayErrorContext(const struct relayComm* comm, char* buf, size_t len);
/* An earlier error text of this rank (comm->lastError, or that of a comm of
 * the same rank such as a control comm) made fit to quote inside a new error
 * of comm: its "rank R" goes (the new prefix says it), its call and step
 * stay, and a prefix of nothing else goes when it names comm's function or
 * none. "relayAllReduce (rank 2, call #3, step 1): x" -> "relayAllReduce
 * (call #3, step 1): x"; "relaycc (rank 2): x" -> "x"; a text without this
 * rank's prefix is copied as it is. Returns buf. */
const char* relayErrorQuote(const struct relayComm* comm, const char* text, char* buf, size_t len);

uint64_t relayNowNs(void); /* CLOCK_MONOTONIC */

/* A byte count: 4096, 4K, 1.5M, 2GiB, 64KB (binary units); 0 on success. */
int relayParseBytes(const char* s, uint64_t* out);
/* A whole decimal integer in [lo, hi]: no junk after it, no overflow, not
 * empty; 0 on success (the tools' option parser, one for all three). */
int relayParseInt(const char* s, long long lo, long long hi, long long* out);

/* FNV-1a over n bytes continuing from h (start from RELAY_HASH_SEED), word by
 * word with a fold: the route lookup runs it on every call, and a byte loop
 * over key and topology cost ~0.3 us of a ~7 us enqueue. */
#define RELAY_HASH_SEED 0xcbf29ce484222325ull
static inline uint64_t relayHash64(uint64_t h, const void* p, size_t n) {
  const unsigned char* b = (const unsigned char*)p;
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    uint64_t w;
    memcpy(&w, b + i, 8);
    h = (h ^ w) * 0x100000001b3ull;
    h ^= h >> 29;
  }
  for (; i < n; i++) h = (h ^ b[i]) * 0x100000001b3ull;
  return h;
}

/* This host's identity: a hash of hostname and boot id, the one answer to "same node?" in a process (core's
 * node map, the NCCL transport's shared-GPU check, the interposer). Two containers on one host share the boot
 * id but may differ in hostname (two nodes to relaycc, which is safe: IPC is only tried within one); hosts
 * cloned from one image share a hostname, never a boot id. NCCL's own host hash (NCCL_HOSTID) is not used:
 * a test gives each rank its own to run several ranks on one GPU, and they stay one node to relaycc. */
uint64_t relayHostIdentity(void);

/* 64 random bits, never 0 (getrandom; where it fails, clock, pid and a stack address). */
uint64_t relayRandom64(void);

/* 1 when every node holds nranks / nNodes ranks, node-major (rank r on node
 * r / (nranks / nNodes)): the layout the P2P channel layer's part rules and
 * the simulator's multi-node topologies assume. */
int relayNodesRegular(const int* nodeOf, int nranks, int nNodes);

#define RELAY_CHECK(call)                              \
  do {                                                 \
    relayResult_t relay_res_ = (call);                 \
    if (relay_res_ != relaySuccess) return relay_res_; \
  } while (0)

#ifdef __cplusplus
}
#endif
#endif
