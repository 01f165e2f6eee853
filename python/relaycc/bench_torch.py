"""The "relaycc" torch.distributed backend against gloo, on CPU tensors, in the same processes and run.

    python -m relaycc.bench --torch --ranks 4,8 [-b 4K] [-e 16M] [-f 4] [-n 20] [--reps 3] [--json]
    torchrun --nproc-per-node 4 -m relaycc.bench --torch [...]      (the ranks torchrun started)

--ranks N,M,...: the tool starts N processes itself (env:// on a free local port), then M, ... (the
extension is compiled once first). The default group is "relaycc"; a gloo group of the same ranks runs
the same calls on the same tensors. Each op and size: --reps repetitions on each backend, alternating,
each a barrier then up to --iters calls each timed on every rank, a call's time the slowest rank's; the
row shows the minimum over all timed calls, the spread beside it (median / minimum) and the ratio gloo
min / relaycc min (above 1: relaycc faster). The calls per repetition shrink where a call is slow (each
backend's row gets about 0.3 s, at least 2 calls), so a 16-core machine runs --ranks 4,8 in a few
minutes. Every row's outputs are checked against gloo's once. Then a DDP step (forward, backward,
gradient all-reduce, SGD) of a small MLP on each backend: its minimum and spread over --ddp-steps steps.
"""
import argparse
import json
import os
import socket
import statistics
import subprocess
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
  p.add_argument("--reps", type=int, default=3)
  p.add_argument("--ranks", default=None, help="start these rank counts here (4,8), not under torchrun")
  p.add_argument("--row-seconds", type=float, default=0.3, help=argparse.SUPPRESS)
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


def _times(g, gloo, run, bufs, iters):
  """Each call's time, the slowest rank's (the same list on every rank)."""
  dist.barrier(group=gloo)
  ts = []
  for _ in range(iters):
    t0 = time.perf_counter()
    run(g, *bufs)
    ts.append(time.perf_counter() - t0)
  t = torch.tensor(ts, dtype=torch.float64)
  dist.all_reduce(t, op=dist.ReduceOp.MAX, group=gloo)
  return t.tolist()


def _stats(ts):
  """(minimum, spread = median / minimum)."""
  m = min(ts)
  return m, statistics.median(ts) / m if m > 0 else float("inf")


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
  t = torch.tensor(times, dtype=torch.float64)
  dist.all_reduce(t, op=dist.ReduceOp.MAX, group=group)
  return _stats(t.tolist())


def _free_port():
  with socket.socket() as s:
    s.bind(("127.0.0.1", 0))
    return s.getsockname()[1]


def spawn(a, argv):
  """--ranks: run this tool at each rank count, each rank a process of its own; rank 0's output shows."""
  from . import torch_backend
  torch_backend.extension()  # compiled (or found) once here, not by every rank at once
  rest, skip = [], False
  for x in argv:  # the same arguments less --ranks
    if skip:
      skip = False
    elif x == "--ranks":
      skip = True
    elif not x.startswith("--ranks="):
      rest.append(x)
  rc = 0
  for n in [int(x) for x in a.ranks.split(",") if x]:
    port = _free_port()
    procs = []
    for r in range(n):
      env = dict(os.environ, RANK=str(r), LOCAL_RANK=str(r), WORLD_SIZE=str(n), LOCAL_WORLD_SIZE=str(n),
                 MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), OMP_NUM_THREADS="1")
      procs.append(subprocess.Popen([sys.executable, "-m", "relaycc.bench", "--torch"] + rest, env=env,
                                    stdout=None if r == 0 else subprocess.DEVNULL))
    codes = [p.wait() for p in procs]
    if any(codes):
      print(f"relaycc.bench --torch: {n} ranks: exit codes {codes}", file=sys.stderr)
      rc = 1
  return rc


def main(argv=None):
  argv = sys.argv[1:] if argv is None else argv
  a = _parse(argv)
  if a.ranks:
    return spawn(a, argv)
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
      # Warm-up, timed: the calls per repetition from the slower backend's call (the same on every rank).
      warm = [max(1, a.warmup)]
      slow = max(min(_times(g, gloo, run, bufs[id(g)], warm[0])) for g in (relay, gloo))
      iters = max(2, min(a.iters, int(a.row_seconds / a.reps / max(slow, 1e-7))))
      times = {"relaycc": [], "gloo": []}
      for _ in range(a.reps):
        for name, g in (("relaycc", relay), ("gloo", gloo)):
          times[name] += _times(g, gloo, run, bufs[id(g)], iters)
      (rmin, rsp), (gmin, gsp) = _stats(times["relaycc"]), _stats(times["gloo"])
      rows.append({"op": op, "bytes": nbytes, "ranks": world, "calls": iters * a.reps,
                   "relaycc_us": rmin * 1e6, "gloo_us": gmin * 1e6, "relaycc_spread": rsp,
                   "gloo_spread": gsp, "ratio": gmin / rmin})
  (rmin, rsp), (gmin, gsp) = _ddp_step(relay, a.ddp_steps), _ddp_step(gloo, a.ddp_steps)
  ddp = {"relaycc_ms": rmin * 1e3, "relaycc_spread": rsp, "gloo_ms": gmin * 1e3, "gloo_spread": gsp,
         "ratio": gmin / rmin}
  if rank == 0:
    if a.json:
      print(json.dumps({"ranks": world, "torch": torch.__version__, "rows": rows, "ddp_step": ddp,
                        "check_failures": bad}, indent=1))
    else:
      print(f"# relaycc backend vs gloo, {world} ranks, torch {torch.__version__}, float32; per call the "
            f"slowest rank's time; min over {a.reps} repetitions x up to {a.iters} calls (spread = median/min)")
      print(f"{'op':<15}{'bytes':>10}{'calls':>6}{'relaycc us':>12}{'spread':>8}{'gloo us':>12}"
            f"{'spread':>8}{'gloo/relaycc':>14}")
      for r in rows:
        print(f"{r['op']:<15}{r['bytes']:>10}{r['calls']:>6}{r['relaycc_us']:>12.1f}"
              f"{r['relaycc_spread']:>8.2f}{r['gloo_us']:>12.1f}{r['gloo_spread']:>8.2f}{r['ratio']:>14.2f}")
      print(f"DDP step (MLP 256-1024-256, batch 32), min over {a.ddp_steps} steps: relaycc "
            f"{ddp['relaycc_ms']:.2f} ms (spread {ddp['relaycc_spread']:.2f}), gloo {ddp['gloo_ms']:.2f} ms "
            f"(spread {ddp['gloo_spread']:.2f}), ratio {ddp['ratio']:.2f}", flush=True)
      for b in bad:
        print("CHECK FAILED:", b)
  dist.destroy_process_group(gloo)
  dist.destroy_process_group()
  return 1 if bad else 0


if __name__ == "__main__":
  sys.exit(main())
