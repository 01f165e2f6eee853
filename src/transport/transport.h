/*
 * The transport interface: what the executor needs to run one rank's program.
 * A transport knows no collective and no plan: it moves bytes between ranks in
 * groups, runs the reduce/copy family locally, owns scratch, and offers the
 * small host-side agreement that core uses for check mode and votes.
 *
 * Every call gets the comm; transport state lives behind comm->tpState. A
 * failing call records its error with relaySetError (naming peer and step:
 * comm->callSeq and comm->curStep say which call and step are running) and
 * returns the result. Errors after data may have moved leave the comm failed.
 */
#ifndef RELAY_TRANSPORT_H_
#define RELAY_TRANSPORT_H_

#include <stddef.h>

#include "relaycc.h"

#ifdef __cplusplus
extern "C" {
#endif

struct relayComm;

typedef struct {
  int peer;
  void* ptr; /* send: read from; recv: written to */
  size_t bytes;
} relayXferDesc;

typedef struct relayTransportOps {
  const char* name;
  /* All sends and receives progress together; returns when all are done.
   * Several transfers with one peer in a group are matched in order. A
   * transfer with peer == own rank pairs with the own-rank receive in order. */
  relayResult_t (*group)(struct relayComm* comm, const relayXferDesc* sends, int nSends,
                         const relayXferDesc* recvs, int nRecvs, relayStream_t stream);
  /* dst[i] = op(srcs[0][i], ..., srcs[nsrc-1][i]) (/ divisor when > 1), in that
   * order; dst may alias any src element-for-element. lane 1 = side lane. */
  relayResult_t (*reduce)(struct relayComm* comm, void* dst, const void* const* srcs, int nsrc,
                          size_t count, relayDataType_t dt, relayRedOp_t op, int divisor, int lane,
                          relayStream_t stream);
  relayResult_t (*copy)(struct relayComm* comm, void* dst, const void* src, size_t bytes, int lane,
                        relayStream_t stream);
  /* Grow-only scratch cache: slot holds at least bytes; *ptr is stable until
   * the next growth of that slot. */
  relayResult_t (*scratch)(struct relayComm* comm, int slot, size_t bytes, void** ptr,
                           relayStream_t stream);
  /* Join side lanes into the caller's stream (no-op where lanes are serial). */
  relayResult_t (*join)(struct relayComm* comm, relayStream_t stream);
  /* Host-synchronous all-gather of a small record among all comm ranks
   * (bytes <= 256): all[r * bytes ...] = rank r's record. Used for check mode
   * and votes; every rank must call it on the same call. */
  relayResult_t (*agree)(struct relayComm* comm, const void* mine, void* all, size_t bytes);
  relayResult_t (*barrier)(struct relayComm* comm);
  /* Tell peers this rank rejected call callSeq+1 before moving data (they
   * fail fast instead of waiting for the deadline). May be NULL. */
  void (*reject)(struct relayComm* comm);
  /* Mark failed and wake any wait (safe from another thread). */
  void (*abort)(struct relayComm* comm);
  void (*destroy)(struct relayComm* comm);
} relayTransportOps;

#ifdef __cplusplus
}
#endif
#endif
