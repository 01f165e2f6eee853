/* The CPU member of the reduce family: used by the shm transport and by the
 * reference executor, so both compute the same bits. */
#ifndef RELAY_REDUCE_HOST_H_
#define RELAY_REDUCE_HOST_H_

#include <stddef.h>

#include "relaycc.h"

#ifdef __cplusplus
extern "C" {
#endif

/* dst[i] = op(srcs[0][i], ..., srcs[nsrc-1][i]) in that order, then / divisor
 * when divisor > 1. 16-bit floats accumulate in fp32 and round once (to
 * nearest even). dst may alias any source element-for-element. */
void relayHostReduce(void* dst, const void* const* srcs, int nsrc, size_t count, relayDataType_t dt,
                     relayRedOp_t op, int divisor);

/* The 16-bit floats' (fp16 and bf16) reduce path: software (bit operations, any CPU) or vector (x86-64: fp16
 * through F16C on a CPU with F16C and AVX; bf16 through AVX2 where it has that too, else software), the same
 * bits either way. relayHostPath16: the one relayHostReduce takes, the best this CPU has unless a test set
 * another. relayHostPath16Set (tests: both paths against each other): takes
 * `path` when this CPU has it and returns 0, else returns -1 and changes nothing; -1 goes back to the best.
 */
enum { relayPath16Software = 0, relayPath16Vector = 1 };
int relayHostPath16(void);
int relayHostPath16Set(int path);

/* Conversions used by tests and the bench for 16-bit floats. */
float relayHalfToFloat(unsigned short h);
unsigned short relayFloatToHalf(float f);
float relayBf16ToFloat(unsigned short h);
unsigned short relayFloatToBf16(float f);

#ifdef __cplusplus
}
#endif
#endif
