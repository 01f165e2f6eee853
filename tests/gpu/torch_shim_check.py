"""An unmodified torch.distributed program, run under the NCCL interposer (issue 18).

    LD_PRELOAD=build/librelaycc_shim.so RELAYCC_DEBUG=2 torchrun --nproc-per-node N tests/gpu/torch_shim_check.py

Eager and CUDA-graph-captured all-reduce of 4 KB to 64 MB (bf16 and float32), every result checked against
the sum the ranks' inputs must give (exact in bf16 in any order up to 8 ranks). Nothing here knows about relaycc: the shim decides per call whether
relaycc or NCCL runs it (with one rank it forwards everything). Exits non-zero on a wrong element.
"""
import faulthandler
import os
import signal
import sys
import time

import torch
import torch.distributed as dist

T0 = time.monotonic()  # the teardown lines say when they ran


def place_rank(rank, world):
  """This rank's GPU, LOCAL_RANK % GPUs. Where ranks share a GPU (the 8-ranks-on-one-GPU harness,
  docs/gpu-harness.md), give this process what NCCL 2.28 needs to accept that, before NCCL starts: its own
  NCCL_HOSTID, with loopback sockets (NCCL 2.30's NCCL_MULTI_RANK_GPU_ENABLE=1, where set, needs none)."""
  # SIGUSR1 prints every thread's Python stack: scripts/device_run.sh (DUMP_AT) sends it to a run that has not
  # ended, so a step cut by its time limit says where each rank waited.
  faulthandler.register(signal.SIGUSR1, all_threads=True)
  ndev = torch.cuda.device_count()
  if world > ndev and os.environ.get("NCCL_MULTI_RANK_GPU_ENABLE") != "1":
    os.environ["NCCL_HOSTID"] = f"{os.environ.get('NCCL_HOSTID', 'relaycc-torch')}.r{rank}"
    os.environ.setdefault("NCCL_SOCKET_IFNAME", "lo")
    os.environ.setdefault("NCCL_IB_DISABLE", "1")
    if rank == 0:
      print(f"{world} ranks on {ndev} GPU(s): not performance: ranks share one GPU", flush=True)
  torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", rank)) % ndev)


def finish(rank, world, failed, what):
  """Destroy the default group and exit (1 when failed). Where ranks share a GPU over loopback sockets, NCCL's
  own teardown inside destroy_process_group does not return, with or without relaycc (torchrun 8 on one H200,
  2026-12-05: plain torch, no interposer, waited there for 120 s after every check passed; relaycc's part of
  the teardown took 6 ms on every rank; docs/perf/2026-12-05-h200-8ranks.md). There the verdict is printed
  and the process ends without it, so a run says what it checked instead of running into its time limit."""
  if world > torch.cuda.device_count() and os.environ.get("NCCL_MULTI_RANK_GPU_ENABLE") != "1":
    print(f"rank {rank}: {what} at {time.monotonic() - T0:.1f} s; ranks share a GPU: NCCL's teardown skipped "
          f"(it does not return in this mode, relaycc or not)", flush=True)
    os._exit(1 if failed else 0)
  dist.destroy_process_group()
  print(f"rank {rank}: {what} at {time.monotonic() - T0:.1f} s", flush=True)
  sys.exit(1 if failed else 0)


def main():
  rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
  place_rank(rank, world)
  dist.init_process_group("nccl")
  wrong = 0
  for dtype in (torch.bfloat16, torch.float32):
    size = 4096
    while size <= int(os.environ.get("TORCH_CHECK_MAX_BYTES", 64 << 20)):  # a device call cuts it shorter
      n = size // torch.tensor([], dtype=dtype).element_size()
      # Values encode rank (its parity) and index. Every partial sum of any order stays an integer <= 240 at
      # 8 ranks and 3x replays, exact in bf16 (integers up to 256 are): NCCL's ring adds in bf16, and with
      # (idx % 7 + 1) * (rank + 1) its partial sums passed 256 and rounded (8 ranks on one H200, 2026-12-04).
      idx = torch.arange(n, device="cuda", dtype=torch.float32)
      base = (idx % 5) + 1
      want = base * sum(r % 2 + 1 for r in range(world))
      x = (base * (rank % 2 + 1)).to(dtype)
      dist.all_reduce(x)
      torch.cuda.synchronize()
      bad = int((x.float() != want).sum())
      # Captured: the same call in a graph, replayed on new inputs.
      y = torch.empty(n, device="cuda", dtype=dtype)
      s = torch.cuda.Stream()
      s.wait_stream(torch.cuda.current_stream())
      with torch.cuda.stream(s):
        y.copy_(base.to(dtype))
        dist.all_reduce(y)  # warm-up outside the graph (NCCL and the shim set up here)
      torch.cuda.current_stream().wait_stream(s)
      torch.cuda.synchronize()
      g = torch.cuda.CUDAGraph()
      with torch.cuda.graph(g):
        dist.all_reduce(y)
      gbad = 0
      for k in (2, 3):
        y.copy_((base * (rank % 2 + 1) * k).to(dtype))
        g.replay()
        torch.cuda.synchronize()
        gbad += int((y.float() != want * k).sum())
      if rank == 0 or bad or gbad:
        print(f"rank {rank} {str(dtype):15s} {size:>10d} B eager wrong {bad} graph wrong {gbad}", flush=True)
      wrong += bad + gbad
      size *= 4
  # Said before the teardown so a run cut by its time limit shows whether the checks or the teardown took it.
  finish(rank, world, wrong, f"{'OK' if wrong == 0 else 'FAILED'} ({wrong} wrong elements)")


if __name__ == "__main__":
  main()
