"""A relaycc kernel that gives up, reported through the wrapped ncclCommGetAsyncError (issue 34, item 4).

    RELAYCC_TIMEOUT_MS=2000 RELAYCC_ROUTE=oneshot TORCH_NCCL_ASYNC_ERROR_HANDLING=0 \
      LD_PRELOAD=build/librelaycc_shim.so torchrun --nproc-per-node N tests/gpu/torch_shim_async_check.py

RELAYCC_TIMEOUT_MS is the user's own deadline (a guest sets none of its own on a user's comm). A 4 KB
all-reduce that the interposer routes to relaycc, checked; then rank 1 arrives three deadlines late. Every
rank's relaycc kernel must give up, and ncclCommGetAsyncError on the group's NCCL communicator (the symbol the
process resolves: the interposer's wrapper) must say so, not ncclSuccess, within the deadline plus a margin.
TORCH_NCCL_ASYNC_ERROR_HANDLING=0 keeps torch's watchdog from tearing the process down first. Exits non-zero
when a rank sees no error or a wait outlives its bound.
"""
import ctypes
import os
import sys
import threading
import time

import torch
import torch.distributed as dist

from torch_shim_check import place_rank


def comm_pointer():
  backend = dist.group.WORLD._get_backend(torch.device("cuda"))
  for attr in ("comm_ptr", "_comm_ptr"):
    get = getattr(backend, attr, None)
    if callable(get):
      return int(get())
  raise RuntimeError("this torch's ProcessGroupNCCL exposes no comm pointer")


def main():
  rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
  place_rank(rank, world)
  dist.init_process_group("nccl")
  deadline_s = int(os.environ.get("RELAYCC_TIMEOUT_MS", "2000")) / 1000
  x = torch.full((1024,), float(rank + 1), device="cuda")
  dist.all_reduce(x)
  torch.cuda.synchronize()
  ok = int((x != world * (world + 1) / 2).sum()) == 0
  comm = ctypes.c_void_p(comm_pointer())
  get_async = ctypes.CDLL(None).ncclCommGetAsyncError
  err = ctypes.c_int(0)
  rc = get_async(comm, ctypes.byref(err))
  print(f"rank {rank}: first all-reduce right: {ok}; async error before: rc {rc} error {err.value}", flush=True)
  ok = ok and rc == 0 and err.value == 0
  if rank == 1:
    time.sleep(3 * deadline_s)
  y = torch.full((1024,), 1.0, device="cuda")
  t0 = time.monotonic()
  dist.all_reduce(y)
  seen = 0
  while time.monotonic() - t0 < deadline_s + 20:
    rc = get_async(comm, ctypes.byref(err))
    if rc != 0 or err.value != 0:
      seen = err.value or rc
      break
    time.sleep(0.05)
  took = time.monotonic() - t0
  print(f"rank {rank}: ncclCommGetAsyncError after the late call: {seen} after {took:.1f} s "
        f"(deadline {deadline_s:.0f} s)", flush=True)
  ok = ok and seen != 0
  # The stream ends once the kernel gave up; bounded, so a kernel that never ends fails instead of hanging.
  done = threading.Event()
  threading.Thread(target=lambda: (torch.cuda.synchronize(), done.set()), daemon=True).start()
  if not done.wait(30):
    print(f"rank {rank}: the stream did not finish within 30 s of the failed call", flush=True)
    ok = False
  print(f"rank {rank}: {'OK' if ok else 'FAILED'}", flush=True)
  sys.stdout.flush()
  os._exit(0 if ok else 1)  # the comm is failed: no teardown that could wait on it


if __name__ == "__main__":
  main()
