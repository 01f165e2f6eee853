/*
 * Registered windows on the NCCL transport: every rank's buffer IPC-mapped
 * into every peer (the direct path of the bandwidth route, bw.c / bw.cu).
 *
 * Registration (collective, after core agreed the arguments; never inside a
 * capture, which core rejected): each rank with a buffer finds the
 * allocation holding it (cuMemGetAddressRange through the runtime's driver
 * entry point: no link against libcuda; HIP: hipMemGetAddressRange) and exports its IPC handle plus the
 * buffer's offset in it; one agreement round carries handle, offset and a
 * verdict; each rank opens every peer's handle (cudaIpcMemLazyEnablePeerAccess)
 * and a second round votes. Any failure (a buffer not from cudaMalloc, a
 * device without peer access, a comm of several nodes) makes the window
 * staged-only on every rank, RELAYCC_DEBUG=1 saying why. Opened mappings
 * are cached in the window and closed at deregistration (after the device
 * synchronized and every rank passed a barrier, so no kernel of any rank
 * still reads through them) or destroy.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#ifndef RELAY_HAVE_HIP
#include <cuda.h>
#endif
#include "gpu_port.h"

#include "comm/comm.h"
#include "comm/common.h"
#include "comm/vote.h"
#include "transport/nccl/nccl_transport.h"
#include "transport/nccl/oneshot.h"

typedef struct {
  int n;
  char** peer;   /* [n] rank q's buffer as mapped here (own: the buffer; NULL: none) */
  void** mapped; /* [n] what cudaIpcOpenMemHandle returned (to close) */
} ncclWin;

typedef struct {
  cudaIpcMemHandle_t h;
  uint64_t off; /* the buffer's offset in its allocation */
  int32_t ok, has;
} winRecord;

/* The allocation holding p and p's offset in it. */
#ifdef RELAY_HAVE_HIP
static int winAllocation(void* p, void** base, uint64_t* off, char* why, size_t whyLen) {
  hipDeviceptr_t b = NULL;
  size_t size = 0;
  if (hipMemGetAddressRange(&b, &size, (hipDeviceptr_t)p) != hipSuccess) {
    hipGetLastError();
    snprintf(why, whyLen, "buffer %p is not device memory from hipMalloc", p);
    return 0;
  }
  *base = (void*)b;
  *off = (uint64_t)((uintptr_t)p - (uintptr_t)b);
  return 1;
}
#else
typedef CUresult (*addrRangeFn)(CUdeviceptr*, size_t*, CUdeviceptr);

static int winAllocation(void* p, void** base, uint64_t* off, char* why, size_t whyLen) {
  static addrRangeFn fn;
  if (!fn) {
    void* f = NULL;
    enum cudaDriverEntryPointQueryResult q;
    if (cudaGetDriverEntryPointByVersion("cuMemGetAddressRange", &f, 12000, cudaEnableDefault, &q) !=
            cudaSuccess ||
        q != cudaDriverEntryPointSuccess || !f) {
      cudaGetLastError();
      snprintf(why, whyLen, "no cuMemGetAddressRange entry point");
      return 0;
    }
    fn = (addrRangeFn)f;
  }
  CUdeviceptr b = 0;
  size_t size = 0;
  if (fn(&b, &size, (CUdeviceptr)(uintptr_t)p) != CUDA_SUCCESS) {
    snprintf(why, whyLen, "buffer %p is not device memory from cudaMalloc", p);
    return 0;
  }
  *base = (void*)(uintptr_t)b;
  *off = (uint64_t)((uintptr_t)p - (uintptr_t)b);
  return 1;
}
#endif

static void winFree(ncclWin* x) {
  if (!x) return;
  for (int q = 0; q < x->n; q++)
    if (x->mapped && x->mapped[q]) cudaIpcCloseMemHandle(x->mapped[q]);
  cudaGetLastError();
  free(x->peer);
  free(x->mapped);
  free(x);
}

relayResult_t relayNcclWinRegister(struct relayComm* c, struct relayWindow* w, const uint64_t* bases) {
  relayNcclState* st = c->tpState;
  int n = c->nranks, r = c->rank;
  char why[256] = "";
  int prevDev = -1;
  cudaGetDevice(&prevDev);
  if (prevDev != st->device) cudaSetDevice(st->device);
  winRecord mine;
  memset(&mine, 0, sizeof mine);
  mine.has = w->base != NULL;
  mine.ok = bases != NULL && c->nNodes == 1;
  if (!bases) snprintf(why, sizeof why, "out of memory");
  if (c->nNodes != 1) snprintf(why, sizeof why, "a comm of %d nodes", c->nNodes);
  if (mine.ok && mine.has) {
    void* base = NULL;
    mine.ok = winAllocation(w->base, &base, &mine.off, why, sizeof why);
    if (mine.ok && cudaIpcGetMemHandle(&mine.h, base) != cudaSuccess) {
      snprintf(why, sizeof why, "cudaIpcGetMemHandle of the allocation at %p: %s", base,
               cudaGetErrorString(cudaGetLastError()));
      mine.ok = 0;
    }
  }
  ncclWin* x = calloc(1, sizeof *x);
  if (x) {
    x->n = n;
    x->peer = calloc((size_t)n, sizeof *x->peer);
    x->mapped = calloc((size_t)n, sizeof *x->mapped);
  }
  if (!x || !x->peer || !x->mapped) { /* still both rounds: the peers go staged-only with it */
    mine.ok = 0;
    snprintf(why, sizeof why, "out of memory for %d ranks' handles", n);
  }
  const void* got;
  relayResult_t res = relayAgree(c, &mine, sizeof mine, &got);
  const winRecord* all = got;
  int ok = res == relaySuccess;
  for (int q = 0; q < n && ok; q++) {
    ok = all[q].ok;
    if (!ok && !why[0]) snprintf(why, sizeof why, "rank %d could not share its buffer", q);
  }
  /* Open every peer's handle; a rank that fails votes no in the second round. */
  int opened = ok;
  for (int q = 0; q < n && opened; q++) {
    if (!all[q].has) continue;
    if (q == r) {
      x->peer[q] = w->base;
      continue;
    }
    void* p = NULL;
    cudaError_t e = cudaIpcOpenMemHandle(&p, all[q].h, cudaIpcMemLazyEnablePeerAccess);
    if (e != cudaSuccess) {
      snprintf(why, sizeof why, "cudaIpcOpenMemHandle of rank %d's window: %s", q, cudaGetErrorString(e));
      cudaGetLastError();
      opened = 0;
      break;
    }
    x->mapped[q] = p;
    x->peer[q] = (char*)p + all[q].off;
  }
  relayVerdict v = {0};
  if (res == relaySuccess) {
    res = relayVote(c, opened, why, &v);
    ok = res == relaySuccess && v.yes;
  }
  if (prevDev >= 0 && prevDev != st->device) cudaSetDevice(prevDev);
  if (res != relaySuccess || !ok) {
    if (res == relaySuccess && relayDebugLevel() >= 1)
      fprintf(stderr, "relaycc: rank %d: window %u is staged-only: rank %d voted no: %s\n", r, w->id, v.rank,
              v.why);
    winFree(x);
    w->direct = 0;
    w->tp = NULL;
    return res;
  }
  w->direct = 1;
  w->tp = x;
  return relaySuccess;
}

void relayNcclWinDeregister(struct relayComm* c, struct relayWindow* w, int collective) {
  relayNcclState* st = c->tpState;
  if (st) {
    int prevDev = -1;
    cudaGetDevice(&prevDev);
    if (prevDev != st->device) cudaSetDevice(st->device);
    /* No kernel of this rank still reads a peer through the mappings, and
     * with the barrier none of the peers' reads this buffer. */
    cudaDeviceSynchronize();
    cudaGetLastError();
    if (collective) c->tp->barrier(c);
    if (prevDev >= 0 && prevDev != st->device) cudaSetDevice(prevDev);
  }
  winFree(w->tp);
  w->tp = NULL;
}

char* relayNcclWinPeer(const struct relayWindow* w, int rank) {
  const ncclWin* x = w ? w->tp : NULL;
  return x && rank >= 0 && rank < x->n ? x->peer[rank] : NULL;
}
