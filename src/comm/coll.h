/* The collectives: the one enum that plans, the router and a transport's
 * native collectives (transport.h) name a call by, with the facts about each
 * that every layer reads. */
#ifndef RELAY_COMM_COLL_H_
#define RELAY_COMM_COLL_H_

#ifdef __cplusplus
extern "C" {
#endif

/* The layout collectives come first: RELAY_NUM_COLLS counts them, and code
 * that runs "every collective" on a layout loops up to it. The rooted
 * collectives follow; their key is one group (the rank set, any size >= 1,
 * root in it or not) with a count per rank of the set, plus `root`. */
typedef enum {
  RELAY_COLL_ALLGATHER = 0,
  RELAY_COLL_REDUCESCATTER = 1,
  RELAY_COLL_ALLREDUCE = 2,
  RELAY_COLL_ALLTOALL = 3,
  RELAY_NUM_COLLS = 4,
  RELAY_COLL_SCATTER = 4,
  RELAY_COLL_GATHER = 5,
  RELAY_NUM_COLLS_ALL = 6
} relayColl_t;

static inline int relayCollRooted(relayColl_t coll) {
  return coll == RELAY_COLL_SCATTER || coll == RELAY_COLL_GATHER;
}
/* All-reduce and reduce-scatter: contributions are combined with an op. */
static inline int relayCollReduces(relayColl_t coll) {
  return coll == RELAY_COLL_ALLREDUCE || coll == RELAY_COLL_REDUCESCATTER;
}
/* Reduce-scatter and all-to-all: the send buffer holds A blocks, block j for active j. */
static inline int relayCollSendsBlocks(relayColl_t coll) {
  return coll == RELAY_COLL_REDUCESCATTER || coll == RELAY_COLL_ALLTOALL;
}
/* All-gather and all-to-all: the output holds A blocks, block j from active j. */
static inline int relayCollGathers(relayColl_t coll) {
  return coll == RELAY_COLL_ALLGATHER || coll == RELAY_COLL_ALLTOALL;
}

/* comm/common.c, beside the datatype, op and route names: */
const char* relayCollName(relayColl_t coll);            /* any of the six */
int relayParseColl(const char* s, relayColl_t* out);    /* a layout collective; 0 on success */
int relayParseCollAll(const char* s, relayColl_t* out); /* any of the six; 0 on success */

#ifdef __cplusplus
}
#endif
#endif
