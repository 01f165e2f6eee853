"""The Python package on GPUs (issue 17), under torchrun: one process per GPU.

    torchrun --nproc-per-node N tests/gpu/torch_relaycc_check.py

Builds a relaycc comm from the torch.distributed NCCL group (Comm.from_process_group: its own NCCL comm
through relayNcclGetUniqueId / relayCommInitNcclRank), asserts that exactly one libnccl is mapped (the one
torch loaded), and with 2 or more ranks all-reduces 4 KB to 64 MB against dist.all_reduce on the same data,
eager and captured into a CUDA graph replayed with new inputs. Exits non-zero on any mismatch.
"""
import os
import sys

import torch
import torch.distributed as dist

import relaycc


def main():
  rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
  torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", rank)))
  dist.init_process_group("nccl")
  comm = relaycc.Comm.from_process_group()
  libs = relaycc.nccl_libraries()
  print(f"rank {rank}: relaycc {relaycc.__version__} from {relaycc.library_path()}; comm {comm.rank}/{comm.size};"
        f" libnccl mapped: {libs}", flush=True)
  wrong = int(len(libs) != 1)
  if world >= 2:
    layout = [list(range(world))]
    for dtype in (torch.bfloat16, torch.float16, torch.float32):
      size = 4096
      while size <= 64 << 20:
        n = size // torch.tensor([], dtype=dtype).element_size()
        base = (torch.arange(n, device="cuda", dtype=torch.float32) % 5 + 1) * (rank + 1)
        x = base.to(dtype)
        ref = x.clone()
        dist.all_reduce(ref)
        relaycc.all_reduce(x, layout, comm=comm)
        torch.cuda.synchronize()
        bad = int((x != ref).sum())
        g = torch.cuda.CUDAGraph()
        y = x.clone()
        with torch.cuda.graph(g):
          relaycc.all_reduce(y, layout, comm=comm)
        y.copy_((base * 3).to(dtype))
        ref3 = y.clone()
        dist.all_reduce(ref3)
        g.replay()
        torch.cuda.synchronize()
        gbad = int((y != ref3).sum())
        if rank == 0 or bad or gbad:
          print(f"rank {rank} {str(dtype):15s} {size:>10d} B eager wrong {bad} graph wrong {gbad}", flush=True)
        wrong += bad + gbad
        size *= 8
  comm.destroy()
  dist.destroy_process_group()
  print(f"rank {rank}: {'OK' if wrong == 0 else 'FAILED'}", flush=True)
  sys.exit(1 if wrong else 0)


if __name__ == "__main__":
  main()
