"""The Python package on GPUs (issues 17, 26 item 8), under torchrun: one process per GPU.

    torchrun --nproc-per-node N tests/gpu/torch_relaycc_check.py      (N = 1 works: the rooted calls)

Comm.from_process_group on the torch.distributed NCCL group must attach to the group's own NCCL communicator
(a guest: comm.guest, through relayCommInitNccl) and leave the process's environment as it was (the C
library's environ, not only os.environ: a C setenv does not show there); exactly one libnccl is mapped (the
one torch loaded). Data: scatter and gather on a set of this rank alone (any N), and with 2 or more ranks
all-reduce 4 KB to 64 MB against dist.all_reduce on the same data, eager and captured into a CUDA graph
replayed with new inputs, all-gather, reduce-scatter and all-to-all against dist.*; torch.compile(fullgraph=True) of calls with torchcomms' async Work (N >= 2) or of
a scatter (N = 1). Exits non-zero on any mismatch.
"""
import ctypes
import os

import torch
import torch.distributed as dist

import relaycc
from torch_shim_check import finish, place_rank  # beside this file: rank r on GPU r % GPUs


def c_environ():
  """The process's environment as the C library sees it (char **environ)."""
  env = ctypes.POINTER(ctypes.c_char_p).in_dll(ctypes.CDLL(None), "environ")
  out, i = [], 0
  while env[i] is not None:
    out.append(env[i])
    i += 1
  return sorted(out)


def main():
  rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
  place_rank(rank, world)
  dist.init_process_group("nccl")
  env0, py0 = c_environ(), dict(os.environ)
  comm = relaycc.Comm.from_process_group()
  env_same = c_environ() == env0 and dict(os.environ) == py0
  libs = relaycc.nccl_libraries()
  print(f"rank {rank}: torch {torch.__version__}; relaycc {relaycc.__version__} from {relaycc.library_path()}; "
        f"comm {comm.rank}/{comm.size}, guest {comm.guest}; libnccl mapped: {libs}; environment unchanged: "
        f"{env_same}", flush=True)
  wrong = int(len(libs) != 1) + int(not comm.guest) + int(not env_same)
  # A rank set of this rank alone: the root scatters to itself, and gathers from itself.
  n = 1 << 16
  src = torch.arange(n, device="cuda", dtype=torch.float32) + 1000 * rank
  got = torch.full((n,), -1.0, device="cuda")
  relaycc.scatter(src, got, rank, [rank], [n], comm=comm)
  back = torch.full((n,), -1.0, device="cuda")
  relaycc.gather(got, back, rank, [rank], [n], comm=comm)
  torch.cuda.synchronize()
  rbad = int((got != src).sum()) + int((back != src).sum())
  print(f"rank {rank}: one-rank scatter/gather wrong {rbad}", flush=True)
  wrong += rbad
  if world >= 2:
    layout = [list(range(world))]
    for dtype in (torch.bfloat16, torch.float16, torch.float32):
      size = 4096
      while size <= 64 << 20:
        n = size // torch.tensor([], dtype=dtype).element_size()
        # Partial sums of any order <= 240 at 8 ranks and the 3x replay: exact in bf16, so relaycc (fp32
        # accumulation) and NCCL's ring (bf16) agree; (rank + 1) passed 256 at 8 ranks and NCCL rounded.
        base = (torch.arange(n, device="cuda", dtype=torch.float32) % 5 + 1) * (rank % 2 + 1)
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

    # The other layout collectives against torch's own on the same data (fp32 and bf16, 1 MiB per rank).
    for dtype in (torch.float32, torch.bfloat16):
      n = (1 << 20) // torch.tensor([], dtype=dtype).element_size() // world * world
      idx = torch.arange(n, device="cuda", dtype=torch.float32)
      x = ((idx % 11) + 3 * rank + 1).to(dtype)  # encodes rank and index; sums <= 8 * 32 = 256: exact
      ag, ag_ref = torch.empty(n * world, device="cuda", dtype=dtype), torch.empty(n * world, device="cuda",
                                                                                   dtype=dtype)
      relaycc.all_gather(x, ag, layout, comm=comm)
      dist.all_gather_into_tensor(ag_ref, x)
      rs, rs_ref = torch.empty(n // world, device="cuda", dtype=dtype), torch.empty(n // world, device="cuda",
                                                                                    dtype=dtype)
      relaycc.reduce_scatter(x, rs, layout, comm=comm)
      dist.reduce_scatter_tensor(rs_ref, x)
      a2, a2_ref = torch.empty_like(x), torch.empty_like(x)
      relaycc.all_to_all(x, a2, layout, comm=comm)
      dist.all_to_all_single(a2_ref, x)
      torch.cuda.synchronize()
      obad = int((ag != ag_ref).sum()) + int((rs != rs_ref).sum()) + int((a2 != a2_ref).sum())
      if rank == 0 or obad:
        print(f"rank {rank} {str(dtype):15s} all_gather / reduce_scatter / all_to_all vs dist.*: wrong {obad}",
              flush=True)
      wrong += obad

    def step(t):
      u = t * 2
      comm.sharded_relay_multi_group_all_reduce([u], "sum", layout, [u.numel()], async_op=True).wait()
      return u + 1

    t = torch.full((4096,), float(rank + 1), device="cuda")
    out = torch.compile(step, fullgraph=True)(t)
    torch.cuda.synchronize()
    cbad = int((out != 2 * sum(range(1, world + 1)) + 1).sum())
  else:

    def step(t):
      o = torch.empty_like(t)
      relaycc.scatter(t * 2, o, rank, [rank], [t.numel()], comm=comm)
      return o + 1

    out = torch.compile(step, fullgraph=True)(src)
    torch.cuda.synchronize()
    cbad = int((out != src * 2 + 1).sum())
  print(f"rank {rank}: torch.compile(fullgraph=True) wrong {cbad}", flush=True)
  wrong += cbad
  comm.destroy()  # relaycc's guest state on torch's comm: its own teardown, before torch's
  finish(rank, world, wrong, f"comm destroyed; {'OK' if wrong == 0 else 'FAILED'} ({wrong} wrong)")


if __name__ == "__main__":
  main()
