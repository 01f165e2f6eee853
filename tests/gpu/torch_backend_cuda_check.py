"""The "relaycc" torch.distributed backend on CUDA tensors (issue 37 item 2), under torchrun.

    PYTHONPATH=python:tests/gpu RELAYCC_LIBRARY=build/librelaycc.so \
      torchrun --standalone --nproc-per-node N tests/gpu/torch_backend_cuda_check.py

N may exceed the GPUs (rank r on GPU r % GPUs, its own NCCL_HOSTID: place_rank). RELAYCC_ROUTE=direct (or
any forced route) makes relaycc take every CUDA call it serves; unset, the router decides per call which
calls relaycc takes and which the inner NCCL runs.

Two groups: WORLD from init_process_group("relaycc") (CUDA tensors through the backend: relaycc as a guest
on its inner NCCL communicator) and new_group(backend="cpu:relaycc,cuda:nccl") (CUDA tensors are torch's
NCCL's, CPU ones relaycc's). On each, with CUDA tensors: all_reduce SUM (bf16, fp32) and AVG (fp32),
all_gather_into_tensor, reduce_scatter_tensor, broadcast, all_to_all_single, barrier, async_op=True with
wait(), each output poisoned first and compared with the value computed serially here; inputs encode the
source rank and the index, and every bf16 partial sum is an integer <= 256 (exact in any order). Then one
DDP step of a tiny model equal to the same step in one process. Then CUDA-graph capture on WORLD
(all_reduce SUM fp32, all_gather_into_tensor; issue 37 item 4): captured once, replayed three times with
new inputs copied in between, each replay's output checked; the line "capture: ..." says whether relaycc
or the inner NCCL served the captured calls (never run on a GPU before this check was written). Also: the creator made no change to the
process's environment and one NCCL library is mapped. Each rank's last line is "rank R: OK" or
"rank R: FAILED (...)"; the exit code is 1 on FAILED.
"""
import datetime
import os

import torch
import torch.distributed as dist

import relaycc
from relaycc import torch_backend
from torch_relaycc_check import c_environ
from torch_shim_check import finish, place_rank  # beside this file: rank r on GPU r % GPUs

POISON = -7.0
SIZES = [1000, 1 << 18]  # elements: a small call and a 1 MB (fp32) one


def check(bad, what, got, want, rtol=0.0):
  if got.shape != want.shape:
    bad.append(f"{what}: shape {tuple(got.shape)}, want {tuple(want.shape)}")
    return
  diff = (got.float() - want.float()).abs()
  if (diff > rtol * want.float().abs()).any():
    i = int(diff.argmax())
    bad.append(f"{what}: {int((diff != 0).sum())} wrong, first at {i}: {got.flatten()[i].item()} "
               f"want {want.flatten()[i].item()}")


def collectives(bad, group, tag, rank, world):
  dev = torch.device("cuda", torch.cuda.current_device())
  for n in SIZES:
    idx = torch.arange(n, device=dev, dtype=torch.float32)
    base = idx % 5 + 1
    parity = sum(r % 2 + 1 for r in range(world))  # <= 12 at 8 ranks: base * parity <= 60
    for dtype in (torch.bfloat16, torch.float32):
      x = (base * (rank % 2 + 1)).to(dtype)
      dist.all_reduce(x, group=group)
      check(bad, f"{tag} all_reduce SUM {dtype} n={n}", x, (base * parity).to(dtype))
    # AVG in fp32: each input a multiple of world, so the mean is an integer (NCCL scales by 1 / world
    # first, which may round: a relative 1e-6).
    x = base * (rank % 2 + 1) * world
    dist.all_reduce(x, op=dist.ReduceOp.AVG, group=group)
    check(bad, f"{tag} all_reduce AVG fp32 n={n}", x, base * parity, rtol=1e-6)
    # Async: the Work's wait() orders the current stream after the call.
    x = (base * (rank + 1)).to(torch.bfloat16)
    w = dist.all_reduce(x, group=group, async_op=True)
    w.wait()
    tri = world * (world + 1) // 2  # <= 36: base * tri <= 180
    check(bad, f"{tag} all_reduce async bf16 n={n}", x, (base * tri).to(torch.bfloat16))
    # all_gather_into_tensor: block r is rank r's input (rank * 8 + index % 8 <= 63: exact in bf16).
    for dtype in (torch.bfloat16, torch.float32):
      mine = (rank * 8 + idx % 8).to(dtype)
      out = torch.full((world * n,), POISON, device=dev, dtype=dtype)
      dist.all_gather_into_tensor(out, mine, group=group)
      want = torch.cat([(r * 8 + idx % 8) for r in range(world)]).to(dtype)
      check(bad, f"{tag} all_gather_into_tensor {dtype} n={n}", out, want)
    # reduce_scatter_tensor SUM: block j of rank r is (j + 1) * (r % 2 + 1) + index % 3; rank j gets the sum.
    for dtype in (torch.bfloat16, torch.float32):
      inp = torch.cat([(j + 1) * (rank % 2 + 1) + idx % 3 for j in range(world)]).to(dtype)
      out = torch.full((n,), POISON, device=dev, dtype=dtype)
      dist.reduce_scatter_tensor(out, inp, group=group)
      want = ((rank + 1) * parity + world * (idx % 3)).to(dtype)  # <= 8 * 12 + 16 = 112
      check(bad, f"{tag} reduce_scatter_tensor {dtype} n={n}", out, want)
    # broadcast from the last rank.
    root = world - 1
    x = torch.full((n,), POISON, device=dev) if rank != root else idx + 1000 * root
    dist.broadcast(x, root, group=group)  # both groups hold every rank: group rank = global rank
    check(bad, f"{tag} broadcast n={n}", x, idx + 1000 * root)
    # all_to_all_single, even: segment j of rank r goes to rank j as segment r.
    seg = max(1, n // world)
    sidx = torch.arange(seg, device=dev, dtype=torch.float32)
    inp = torch.cat([rank * 100000 + j * 1000 + sidx % 1000 for j in range(world)])
    out = torch.full((world * seg,), POISON, device=dev)
    dist.all_to_all_single(out, inp, group=group)
    want = torch.cat([r * 100000 + rank * 1000 + sidx % 1000 for r in range(world)])
    check(bad, f"{tag} all_to_all_single n={world * seg}", out, want)
  dist.barrier(group=group)
  torch.cuda.synchronize()


def ddp_step(bad, rank, world):
  """One SGD step of DDP on a tiny model equals the step in one process on every rank's batch."""
  torch.manual_seed(0)
  ref = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 4)).cuda()
  model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 4)).cuda()
  model.load_state_dict(ref.state_dict())
  ddp = torch.nn.parallel.DistributedDataParallel(model)
  g = torch.Generator().manual_seed(1)
  batches = [torch.randn(4, 8, generator=g) for _ in range(world)]
  targets = [torch.randn(4, 4, generator=g) for _ in range(world)]
  opt = torch.optim.SGD(ddp.parameters(), lr=0.1)
  loss = torch.nn.functional.mse_loss(ddp(batches[rank].cuda()), targets[rank].cuda())
  loss.backward()
  opt.step()
  ropt = torch.optim.SGD(ref.parameters(), lr=0.1)
  rloss = torch.nn.functional.mse_loss(ref(torch.cat(batches).cuda()), torch.cat(targets).cuda())
  rloss.backward()
  ropt.step()
  err = max((a - b).abs().max().item() for a, b in zip(model.parameters(), ref.parameters()))
  if err > 1e-5:
    bad.append(f"DDP step vs one process: max |diff| {err}")


def captured(bad, rank, world):
  """CUDA-graph capture of relaycc-backend calls: the replays, not the capture, must move the new data."""
  dev = torch.device("cuda", torch.cuda.current_device())
  backend = torch_backend.get_backend()
  n = 1 << 16
  idx = torch.arange(n, device=dev, dtype=torch.float32)
  x = torch.zeros(n, device=dev)
  mine = torch.zeros(n, device=dev)
  out = torch.full((world * n,), POISON, device=dev)
  side = torch.cuda.Stream()
  side.wait_stream(torch.cuda.current_stream())
  with torch.cuda.stream(side):  # warm-up outside capture, as torch's graph docs ask for NCCL
    dist.all_reduce(x)
    dist.all_gather_into_tensor(out, mine)
  torch.cuda.current_stream().wait_stream(side)
  torch.cuda.synchronize()
  before = dict(backend.served)
  g = torch.cuda.CUDAGraph()
  try:
    with torch.cuda.graph(g):
      dist.all_reduce(x)
      dist.all_gather_into_tensor(out, mine)
  except Exception as e:  # the verdict names it; the rest of the check already ran
    bad.append(f"capture: {type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}")
    return
  served = {k: v - before.get(k, 0) for k, v in backend.served.items() if v != before.get(k, 0)}
  for rep in range(3):
    x.copy_(idx % 7 + rank + 10 * rep)
    mine.copy_(rank * 8 + (idx + rep) % 8)
    out.fill_(POISON)
    g.replay()
    torch.cuda.synchronize()
    check(bad, f"captured all_reduce replay {rep}", x,
          (idx % 7) * world + world * (world - 1) // 2 + 10 * rep * world)
    want = torch.cat([r * 8 + (idx + rep) % 8 for r in range(world)])
    check(bad, f"captured all_gather_into_tensor replay {rep}", out, want)
  print(f"rank {rank}: capture: replayed 3x, served by relaycc at capture: {served or 'none (inner NCCL)'}",
        flush=True)


def main():
  rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
  place_rank(rank, world)
  bad = []
  env0, py0 = c_environ(), dict(os.environ)
  dist.init_process_group("relaycc", timeout=datetime.timedelta(seconds=60))
  backend = torch_backend.get_backend()
  if c_environ() != env0 or dict(os.environ) != py0:
    c_diff = sorted(set(c_environ()) ^ set(env0))
    py_diff = sorted(k for k in set(os.environ) | set(py0) if os.environ.get(k) != py0.get(k))
    bad.append(f"the process's environment changed in init_process_group: C {c_diff[:6]}, "
               f"os.environ {py_diff}")
  libs = relaycc.nccl_libraries()
  if len(libs) != 1:
    bad.append(f"NCCL libraries mapped: {libs}")
  if not backend.cuda_active:
    bad.append(f"the relaycc backend has no CUDA side: {torch_backend.cuda_status()}")
  print(f"rank {rank}: torch {torch.__version__}, relaycc {relaycc.__version__}, "
        f"cuda:{torch.cuda.current_device()}, CUDA side {backend.cuda_active} ({torch_backend.cuda_status()}), "
        f"RELAYCC_ROUTE={os.environ.get('RELAYCC_ROUTE', 'auto')}", flush=True)
  collectives(bad, None, "relaycc", rank, world)
  ddp_step(bad, rank, world)
  captured(bad, rank, world)
  # The mixed spec: CUDA tensors are torch's NCCL's, CPU ones relaycc's.
  mixed = dist.new_group(backend="cpu:relaycc,cuda:nccl")
  collectives(bad, mixed, "cpu:relaycc,cuda:nccl", rank, world)
  x = torch.arange(10, dtype=torch.float32) + rank
  dist.all_reduce(x, group=mixed)
  check(bad, "cpu:relaycc,cuda:nccl CPU all_reduce", x,
        torch.arange(10, dtype=torch.float32) * world + world * (world - 1) // 2)
  if torch_backend.get_backend(mixed).cuda_active:
    bad.append("cpu:relaycc,cuda:nccl: the relaycc backend attached to CUDA (torch's NCCL serves it)")
  if not torch_backend.cuda_status(mixed).startswith("not relaycc's"):
    bad.append(f"cpu:relaycc,cuda:nccl: CUDA status {torch_backend.cuda_status(mixed)!r}")
  for b in bad[:20]:
    print(f"rank {rank}: {b}", flush=True)
  finish(rank, world, bad, "OK" if not bad else f"FAILED ({len(bad)} checks)")


if __name__ == "__main__":
  main()
