/*
 * The one-shot op on the NCCL transport, host half: one kernel per call that
 * pushes every contribution into its peers' slots of the IPC region
 * (region.c) and reduces or places what it received. The kernel:
 * oneshot.cu; the CPU twin: ../shm/oneshot.c.
 *
 * Protocols (oneshot.h): LL at or below RELAYCC_ONESHOT_LL_BYTES per
 * destination (default 256 KiB, 0 = never), LL128 in place of LL from
 * RELAYCC_ONESHOT_LL128_BYTES per destination (0 = never), the flag
 * protocol above the LL threshold. Rooted calls (broadcast, reduce:
 * d->root) take the same protocols (oneshot.h relayOsPairs).
 * Tuning: RELAYCC_ONESHOT_BLOCKS (default 64: 16 and 32 measured no faster at
 * 4-32 KiB and up to 2x slower at 1 MiB on H200), RELAYCC_ONESHOT_THREADS
 * (256 or 512; default by size, oneshot.h). The block count and the LL
 * thresholds are rank 0's on every rank. RELAYCC_ONESHOT_WIDE=1 runs the
 * kernels compiled for 8 actives at A = 2 too (oneshot.cu: the pair
 * kernels are the default there; the knob measures the difference).
 */
#include "comm/common.h"
#include "transport/nccl/nccl_transport.h"
#include "transport/nccl/oneshot.h"

relayResult_t relayNcclOneShot(struct relayComm* c, const relayOneShotDesc* d, relayStream_t stream) {
  size_t es = relayTypeSize(d->dtype), bytes = d->count * es;
  relayOsArgs a;
  RELAY_CHECK(relayNcclOsArgs(c, d, "one-shot", &a));
  if (bytes > a.L.slotBytes)
    return relaySetError(c, relayInternalError, "one-shot of %zu bytes (slot %llu)", bytes,
                         (unsigned long long)a.L.slotBytes);
  if (d->count == 0) return relaySuccess; /* every rank has the same count: none launches */
  int threads;
  relayNcclOsShape(c, bytes, d->count, (int)es, &a, &threads);
  return relayNcclOsLaunched(c, relayCudaOneShot(&a, d->dtype, d->op, threads, (cudaStream_t)stream),
                             "one-shot");
}
