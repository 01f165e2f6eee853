/*
 * The bandwidth route on the NCCL transport, host half: prepare (the
 * one-shot's region, which carries the bw ring: one creation, vote,
 * sentinel and error word per comm, oneshot.c) and the launch of bw.cu's
 * kernel. Its errors are the one-shot's: the kernel writes the packed word
 * the next prepare or call of this comm reports.
 */
#include <string.h>

#include "common.h"
#include "core/comm.h"
#include "plan/plan.h"
#include "transport/nccl/nccl_transport.h"
#include "transport/nccl/oneshot.h"

/* 512 threads: the one-shot's flag protocol measured 512 faster than 256
 * from 256 KiB per destination on (oneshot.h, RELAY_OS_T512_BYTES), and a
 * tile part is 4 KiB per block at the 128 KiB default. */
#define RELAY_BW_THREADS 512

relayResult_t relayNcclBwPrepare(struct relayComm* c, size_t tileBytes, int ring, relayStream_t stream) {
  const relayOsLayout* L = NULL;
  relayResult_t r = relayNcclOsRegion(c, stream, &L);
  if (r != relaySuccess) return r;
  /* Settings other than the region's (a comm created before they changed):
   * declined on every rank alike, since the region's were agreed. */
  return L->bwRing == ring && tileBytes <= L->bwTileBytes ? relaySuccess : relayNotSupported;
}

relayResult_t relayNcclBw(struct relayComm* c, const relayBwDesc* d, relayStream_t stream) {
  relayBwArgs w;
  memset(&w, 0, sizeof w);
  RELAY_CHECK(relayNcclOsArgs(c, &d->c, "bw", &w.os));
  size_t es = relayTypeSize(d->c.dtype);
  if (!d->tileElems || d->tileElems * es > w.os.L.bwTileBytes || d->ring != w.os.L.bwRing ||
      (d->twoShot && d->c.gather))
    return relaySetError(c, relayInternalError,
                         "bw with tile %zu x %zu bytes (slot %llu), ring %d (region %d)", d->tileElems, es,
                         (unsigned long long)w.os.L.bwTileBytes, d->ring, w.os.L.bwRing);
  if (d->c.count == 0) return relaySuccess; /* every rank has the same count: none launches */
  w.os.grid = RELAY_BW_BLOCKS;
  w.tile = d->tileElems;
  if (d->twoShot) {
    w.shard = planBwShard(d->c.count, d->c.nActive);
    w.T1 = (w.shard + w.tile - 1) / w.tile;
    w.U = 2 * w.T1;
  } else {
    w.U = (d->c.count + w.tile - 1) / w.tile;
  }
  return relayNcclOsLaunched(c, relayCudaBw(&w, d->c.dtype, d->c.op, RELAY_BW_THREADS, (cudaStream_t)stream), "bw");
}
