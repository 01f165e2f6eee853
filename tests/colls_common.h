/* Fill patterns and the serial reference shared by the collective tests. */
#ifndef RELAY_TEST_COLLS_COMMON_H_
#define RELAY_TEST_COLLS_COMMON_H_

#include <stddef.h>
#include <stdint.h>

#include "plan/plan.h"
#include "relaycc.h"

/* The value active `src` contributes at element e of the block it sends to
 * active `dst` (dst = 0 for all-gather and all-reduce, whose input is one
 * block). Encodes source, destination and position, never zero, and small
 * enough that float sums of up to 64 inputs stay exact in fp32. */
void tc_value(relayDataType_t dt, relayRedOp_t op, int src, int dst, size_t e, void* out);
void tc_fill_input(relayCollective_t coll, relayDataType_t dt, relayRedOp_t op, int A, int me, size_t count,
                   void* buf);
/* Expected output of active `me`, computed serially (relayHostReduce over
 * the A inputs in active-index order). out holds the recv extent. */
void tc_expected(relayCollective_t coll, relayDataType_t dt, relayRedOp_t op, int A, int me, size_t count,
                 void* out);
/* tc_expected for a call with a root position (broadcast: the root's input; reduce: the reduction, which
 * the caller reads on the root only). */
void tc_expected_root(relayCollective_t coll, relayDataType_t dt, relayRedOp_t op, int A, int me, int root,
                      size_t count, void* out);
size_t tc_send_elems(relayCollective_t coll, int A, size_t count);
size_t tc_recv_elems(relayCollective_t coll, int A, size_t count);
/* Number of elements of got that differ from want (floats within tolerance). */
size_t tc_compare(relayDataType_t dt, const void* got, const void* want, size_t n, size_t* firstBad);
double tc_as_double(relayDataType_t dt, const void* p, size_t i);
/* One call of a layout collective (op ignored where it does not reduce) or
 * of a rooted one (set, n, root), on the shm transport (stream NULL). */
relayResult_t tc_run(relayCollective_t coll, const void* s, void* r, const size_t* counts, relayDataType_t dt,
                     relayRedOp_t op, const relayLayout_t* L, relayComm_t comm);
/* Broadcast or reduce (root: the position in each group of L). */
relayResult_t tc_run_root(relayCollective_t coll, const void* s, void* r, const size_t* counts,
                          relayDataType_t dt, relayRedOp_t op, int root, const relayLayout_t* L,
                          relayComm_t comm);
relayResult_t tc_run_rooted(relayCollective_t coll, const void* s, void* r, const size_t* counts,
                            relayDataType_t dt, int root, const int* set, int n, relayComm_t comm);

#define TC_POISON 0xCD   /* active outputs before every call */
#define TC_SENTINEL 0x5A /* helpers' buffers, which must come back untouched */
/* A check-mode shm comm of this launch forcing route `route` (a relayParseRoute
 * name), on a job name of its own (the launch's, suffixed with the route); with
 * RELAYCC_CHECK set, check mode as it says. */
relayComm_t tc_comm_route(int rank, int nranks, const char* route, int timeoutMs);
/* One call of coll on layout (G groups of A, ranks) on every rank, inputs
 * from tc_fill_input, outputs poisoned, helpers' buffers sentinel-filled;
 * fails the rank on an error result; returns the number of wrong elements
 * on this rank (a helper's written byte and a modified send buffer count). */
size_t tc_one_call(relayComm_t comm, int rank, relayCollective_t coll, int A, int G, const int* ranks,
                   const size_t* counts, relayDataType_t dt, relayRedOp_t op, int inPlace, const char* tag);
/* tc_one_call with the root at position `root` of each group (broadcast, reduce; ignored by the others).
 * A non-root's unused buffer (broadcast's send, reduce's recv) must come back as it was; an odd active
 * passes NULL for it. */
size_t tc_one_call_root(relayComm_t comm, int rank, relayCollective_t coll, int A, int G, const int* ranks,
                        const size_t* counts, relayDataType_t dt, relayRedOp_t op, int root, int inPlace,
                        const char* tag);

#endif
