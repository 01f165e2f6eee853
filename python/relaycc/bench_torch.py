"""The "relaycc" torch.distributed backend against gloo, on CPU tensors, in the same processes and run.

    torchrun --nproc-per-node 4 -m relaycc.bench --torch [-b 4K] [-e 16M] [-f 4] [-n 20] [--reps 5] [--json]

The default group is "relaycc"; a gloo group of the same ranks runs the same calls on the same tensors.
Each op and size: --reps repetitions of --iters calls on each backend, alternating, each repetition timed
on every rank after a barrier and taken as the slowest rank's mean; the row shows the median over
repetitions, the spread (max/min over repetitions) and the ratio gloo/relaycc (above 1: relaycc faster).
Every row's outputs are checked against gloo's once. Then a DDP step (forward, backward, gradient
all-reduce, SGD) of a small MLP on each backend.
"""
import argparse
import json
import statistics
import sys
import time

import torch
import torch.distributed as dist

OPS = ("all_reduce", "all_gather", "reduce_scatter", "all_to_all", "broadcast")


def _size(s):
  mult = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
  s = s.strip().upper().rstrip("B")
  return int(float(s[:-1]) * mult[s[-1]]) if s and s[-1] in mult else int(s)


def _parse(argv):
  p = argparse.ArgumentParser(prog="python -m relaycc.bench --torch", description=__doc__.split("\n")[0])
  p.add_argument("-b", "--min-bytes", default="4K")
  p.add_argument("-e", "--max-bytes", default="16M")
  p.add_argument("-f", "--factor", type=int, default=4)
  p.add_argument("-n", "--iters", type=int, default=20)
  p.add_argument("-w", "--warmup", type=int, default=3)
  p.add_argument("--reps", type=int, default=5)
  p.add_argument("--ops", default=",".join(OPS))
  p.add_argument("--ddp-steps", type=int, default=20)
  p.add_argument("--json", action="store_true")
  a = p.parse_args(argv)
  if a.factor < 2:
    p.error(f"-f {a.factor}: the factor must be at least 2")
  a.ops = [o for o in a.ops.split(",") if o]
  for o in a.ops:
    if o not in OPS:
      p.error(f"--ops: '{o}' is not one of {', '.join(OPS)}")
  return a


def _call(op, n, world, rank):
  """(make the tensors, one call on a group) for a message of n float32 elements per rank."""
  def make():
    x = torch.arange(n, dtype=torch.float32) % 97 + rank
    if op == "all_gather":
      return x, torch.empty(n * world)
    if op == "reduce_scatter":
      return torch.arange(n * world, dtype=torch.float32) % 89 + rank, torch.empty(n)
    if op == "all_to_all":
      n2 = n - n % world
      return (torch.arange(n2, dtype=torch.float32) % 83 + rank), torch.empty(n2)
    return x, None

  def run(g, a, b):
    if op == "all_reduce":
      dist.all_reduce(a, group=g)
    elif op == "all_gather":
      dist.all_gather_into_tensor(b, a, group=g)
    elif op == "reduce_scatter":
      dist.reduce_scatter_tensor(b, a, group=g)
    elif op == "all_to_all":
      dist.all_to_all_single(b, a, group=g)
    else:
      dist.broadcast(a, 0, group=g)
  return make, run


def _time(g, gloo, run, bufs, iters):
  dist.barrier(group=gloo)
  t0 = time.perf_counter()
  for _ in range(iters):
    run(g, *bufs)
  t = torch.tensor([(time.perf_counter() - t0) / iters])
  dist.all_reduce(t, op=dist.ReduceOp.MAX, group=gloo)
  return t.item()


def _ddp_step(group, steps):
  from torch.nn.parallel import DistributedDataParallel as DDP
  torch.manual_seed(0)
  model = DDP(torch.nn.Sequential(torch.nn.Linear(256, 1024), torch.nn.ReLU(), torch.nn.Linear(1024, 256)),
              process_group=group)
  opt = torch.optim.SGD(model.parameters(), lr=0.01)
  x = torch.randn(32, 256)
  times = []
  for i in range(steps + 3):
    dist.barrier(group=group)
    t0 = time.perf_counter()
    opt.zero_grad()
    model(x).pow(2).mean().backward()
    opt.step()
    if i >= 3:
      times.append(time.perf_counter() - t0)
  t = torch.tensor([statistics.median(times)])
  dist.all_reduce(t, op=dist.ReduceOp.MAX, group=group)
  return t.item()


def main(argv=None):
  a = _parse(sys.argv[1:] if argv is None else argv)
  import relaycc  # noqa: F401  (registers "relaycc")
  dist.init_process_group("relaycc")
  rank, world = dist.get_rank(), dist.get_world_size()
  gloo = dist.new_group(backend="gloo")
  relay = dist.group.WORLD
  rows, bad = [], []
  sizes = []
  s = _size(a.min_bytes)
  while s <= _size(a.max_bytes):
    sizes.append(s)
    s *= a.factor
  for op in a.ops:
    for nbytes in sizes:
      n = max(nbytes // 4, world)
      make, run = _call(op, n, world, rank)
      # The data check: the same inputs through both backends give the same outputs.
      outs = []
      for g in (relay, gloo):
        bufs = make()
        run(g, *bufs)
        outs.append(bufs[1] if bufs[1] is not None else bufs[0])
      if not torch.allclose(outs[0], outs[1], rtol=1e-6, atol=1e-6):
        bad.append(f"{op} {nbytes} B: relaycc and gloo differ")
      bufs = {id(g): make() for g in (relay, gloo)}
      for g in (relay, gloo):
        for _ in range(a.warmup):
          run(g, *bufs[id(g)])
      times = {"relaycc": [], "gloo": []}
      for _ in range(a.reps):
        for name, g in (("relaycc", relay), ("gloo", gloo)):
          times[name].append(_time(g, gloo, run, bufs[id(g)], a.iters))
      med = {k: statistics.median(v) for k, v in times.items()}
      rows.append({"op": op, "bytes": nbytes, "ranks": world,
                   "relaycc_us": med["relaycc"] * 1e6, "gloo_us": med["gloo"] * 1e6,
                   "relaycc_spread": max(times["relaycc"]) / min(times["relaycc"]),
                   "gloo_spread": max(times["gloo"]) / min(times["gloo"]),
                   "ratio": med["gloo"] / med["relaycc"]})
  ddp = {"relaycc_ms": _ddp_step(relay, a.ddp_steps) * 1e3, "gloo_ms": _ddp_step(gloo, a.ddp_steps) * 1e3}
  ddp["ratio"] = ddp["gloo_ms"] / ddp["relaycc_ms"]
  if rank == 0:
    if a.json:
      print(json.dumps({"ranks": world, "torch": torch.__version__, "rows": rows, "ddp_step": ddp,
                        "check_failures": bad}, indent=1))
    else:
      print(f"# relaycc backend vs gloo, {world} ranks, torch {torch.__version__}, float32, median of "
            f"{a.reps} x {a.iters} calls (spread = max/min over repetitions)")
      print(f"{'op':<15}{'bytes':>10}{'relaycc us':>12}{'spread':>8}{'gloo us':>12}{'spread':>8}"
            f"{'gloo/relaycc':>14}")
      for r in rows:
        print(f"{r['op']:<15}{r['bytes']:>10}{r['relaycc_us']:>12.1f}{r['relaycc_spread']:>8.2f}"
              f"{r['gloo_us']:>12.1f}{r['gloo_spread']:>8.2f}{r['ratio']:>14.2f}")
      print(f"DDP step (MLP 256-1024-256, batch 32): relaycc {ddp['relaycc_ms']:.2f} ms, gloo "
            f"{ddp['gloo_ms']:.2f} ms, ratio {ddp['ratio']:.2f}")
      for b in bad:
        print("CHECK FAILED:", b)
  dist.destroy_process_group(gloo)
  dist.destroy_process_group()
  return 1 if bad else 0


if __name__ == "__main__":
  sys.exit(main())
