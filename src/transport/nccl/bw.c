/*
 * The bandwidth route on the NCCL transport, host half: prepare (the
 * one-shot's region, which carries the bw ring: one creation, vote,
 * sentinel and error word per comm, region.c) and the launch of bw.cu's
 * kernel. Its errors are the one-shot's: the kernel writes the packed word
 * the next prepare or call of this comm reports.
 */
#include <string.h>

#include "comm/comm.h"
#include "comm/common.h"
#include "comm/params.h"
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

/* The direct path (d->win: every active's buffers in one registered window,
 * bw.cu bwDirectKernel). RELAYCC_BW_MOVER=ce moves an all-gather's or
 * all-to-all's blocks with one copy-engine peer copy each between the entry
 * and exit kernels; a reduction keeps the SM kernel (the copy engines do not
 * add), and so does auto until sm and ce are measured (comm/params.h). */
static relayResult_t bwDirect(struct relayComm* c, const relayBwDesc* d, relayBwArgs* w,
                              cudaStream_t stream) {
  const relayOneShotDesc* o = &d->c;
  size_t es = relayTypeSize(o->dtype);
  uintptr_t align = (uintptr_t)d->sendOff | (uintptr_t)d->recvOff;
  for (int i = 0; i < o->nActive; i++) {
    w->win[i] = relayNcclWinPeer(d->win, o->ranks[i]);
    if (!w->win[i])
      return relaySetError(c, relayInternalError, "bw direct: window %u has no mapping of rank %d",
                           d->win->id, o->ranks[i]);
    align |= (uintptr_t)w->win[i];
  }
  /* 16-byte vectors only where every peer's pointer allows them too. */
  if (align % 16 || (o->count * es) % 16) w->os.vec = 0;
  w->winId = d->win->id;
  w->sendOff = d->sendOff;
  w->recvOff = d->recvOff;
  int ce = relayParamInt(c, RELAY_P_BW_MOVER) == RELAY_BW_MOVER_CE && o->gather;
  return relayNcclOsLaunched(c, relayCudaBwDirectRun(w, o->dtype, o->op, RELAY_BW_THREADS, ce, stream),
                             ce ? "bw direct (copy engines)" : "bw direct");
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
  if (d->win) return bwDirect(c, d, &w, (cudaStream_t)stream);
  w.tile = d->tileElems;
  if (d->twoShot) {
    w.shard = planBwShard(d->c.count, d->c.nActive);
    w.T1 = (w.shard + w.tile - 1) / w.tile;
    w.U = 2 * w.T1;
  } else {
    w.U = (d->c.count + w.tile - 1) / w.tile;
  }
  return relayNcclOsLaunched(c, relayCudaBw(&w, d->c.dtype, d->c.op, RELAY_BW_THREADS, (cudaStream_t)stream),
                             "bw");
}
