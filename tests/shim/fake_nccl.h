/* The fake libnccl.so.2 of the shim tests (fake_nccl.c): what a test reads
 * back of the calls that reached it. */
#ifndef RELAY_FAKE_NCCL_H_
#define RELAY_FAKE_NCCL_H_

#include <stdint.h>

#include <nccl.h>

#define FAKE_NCCL_MAX_CALLS 8192
#define FAKE_NCCL_MAX_ARGS 8

typedef struct {
  char name[40];
  int nargs;
  /* The arguments as words, in the order of the call (collectives: send,
   * recv, count, dtype, op (0 when none), comm, stream). */
  uintptr_t a[FAKE_NCCL_MAX_ARGS];
} fakeNcclCall;

int fakeNcclNumCalls(void);
const fakeNcclCall* fakeNcclGetCall(int i);
void fakeNcclReset(void);
/* Append one call (the fake's own functions). */
void fakeNcclRecord(const char* name, int n, const uintptr_t* a);

#endif
