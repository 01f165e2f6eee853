/* The GPU member of the reduce family (nccl_reduce.cu): the same contract and
 * the same bits as relayHostReduce (src/reduce_host.h). */
#ifndef RELAY_NCCL_REDUCE_H_
#define RELAY_NCCL_REDUCE_H_

#include <stddef.h>

#include "gpu_port.h"

#include "relaycc.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Threads per block of every reduce launch. */
#define RELAY_REDUCE_THREADS 256

/*
 * dst[i] = op(srcs[0][i], ..., srcs[nsrc-1][i]) in that order, then / divisor
 * when divisor > 1 (avg combines as sum). 16-bit floats accumulate in fp32
 * and round once to nearest even; integers wrap. dst may alias any source
 * element-for-element. 16-byte accesses when dst and every source are
 * 16-byte aligned, element accesses otherwise. At most maxBlocks blocks
 * (grid-stride). nsrc in [1, PLAN_MAX_SRCS]. Enqueued on stream; returns the
 * launch error (cudaErrorInvalidValue for a bad dtype, op or nsrc).
 */
cudaError_t relayCudaReduce(void* dst, const void* const* srcs, int nsrc, size_t count, relayDataType_t dt,
                            relayRedOp_t op, int divisor, int maxBlocks, cudaStream_t stream);

/* The block cap for a device of numSMs multiprocessors. */
int relayCudaReduceMaxBlocks(int numSMs);

#ifdef __cplusplus
}
#endif
#endif
