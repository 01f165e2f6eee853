"""relaycc against torch.distributed on a subgroup of the same ranks, in the same run.

    torchrun --nproc-per-node 8 -m relaycc.bench -c all_reduce -A 2 -b 8K -e 256M [--graph] [--json]
             [--plot speedup.png]
    torchrun --nproc-per-node 4 -m relaycc.bench --torch     # the torch backend vs gloo (bench_torch.py)

Every rank joins relaycc's call (the idle ranks as helpers); the baseline is the same collective in
torch.distributed on a group of just the A active ranks (the other ranks idle), which is what a user would
otherwise run. GPUs: NCCL for both (relaycc wraps the process group's NCCL communicator), the
current stream, eager per call and, with --graph, CUDA-graph replay. CPU: shm against gloo (a smoke test;
CPU times say nothing about GPUs). Each row: the min over --reps repetitions of the mean of --iters calls,
with the spread (max/min over repetitions) beside it.
"""
import argparse
import gc
import json
import os
import sys
import time

import torch
import torch.distributed as dist

import relaycc

COLLS = ("all_reduce", "reduce_scatter", "all_gather", "all_to_all")
# nccl-tests' bus-bandwidth factors at A ranks.
BUS = {
    "all_reduce": lambda a: 2 * (a - 1) / a,
    "reduce_scatter": lambda a: (a - 1) / a,
    "all_gather": lambda a: (a - 1) / a,
    "all_to_all": lambda a: (a - 1) / a
}


def parse_size(s):
  mult = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
  s = s.strip().upper().rstrip("B")
  if s and s[-1] in mult:
    return int(float(s[:-1]) * mult[s[-1]])
  return int(s)


def args_parse(argv):
  p = argparse.ArgumentParser(prog="python -m relaycc.bench", description=__doc__.split("\n")[0])
  p.add_argument("-c", "--coll", default="all_reduce", choices=COLLS)
  p.add_argument("-A", "--active", type=int, default=2, help="active ranks per group")
  p.add_argument("-G", "--groups", type=int, default=1, help="groups (fused call when > 1)")
  p.add_argument("-b", "--min-bytes", default="8K")
  p.add_argument("-e", "--max-bytes", default="64M")
  p.add_argument("-f", "--factor", type=int, default=2)
  p.add_argument("-d", "--dtype", default="float32")
  p.add_argument("-o", "--op", default="sum")
  p.add_argument("-n", "--iters", type=int, default=20)
  p.add_argument("-w", "--warmup", type=int, default=5)
  p.add_argument("--reps", type=int, default=5)
  p.add_argument("--graph", action="store_true", help="also time CUDA-graph replay (GPUs)")
  p.add_argument("--route", default=None, help=f"relaycc route ({', '.join(relaycc._lib.ROUTES)})")
  p.add_argument("--json", action="store_true", help="print the rows as one JSON document")
  p.add_argument("--plot", default=None, metavar="FILE.png", help="speedup against size (matplotlib)")
  a = p.parse_args(argv)
  if a.factor < 2:
    p.error(f"-f {a.factor}: the size factor must be >= 2")
  if not hasattr(torch, a.dtype):
    p.error(f"--dtype {a.dtype!r} is not a torch dtype")
  return a


class Timer:
  """Seconds per call of fn: min over reps of the mean of iters calls, and the spread (max/min)."""

  def __init__(self, cuda):
    self.cuda = cuda

  def __call__(self, fn, iters, reps, warmup):
    for _ in range(warmup):
      fn()
    self.sync()
    times = []
    for _ in range(reps):
      dist.barrier()
      if self.cuda:
        s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        s.record()
        for _ in range(iters):
          fn()
        e.record()
        e.synchronize()
        times.append(s.elapsed_time(e) / 1e3 / iters)
      else:
        t0 = time.perf_counter()
        for _ in range(iters):
          fn()
        times.append((time.perf_counter() - t0) / iters)
    return min(times), max(times) / min(times)

  def sync(self):
    if self.cuda:
      torch.cuda.synchronize()


def graphed(fn, iters):
  """A CUDA graph of `iters` calls of fn; -> its replay as one call per iteration's worth."""
  s = torch.cuda.Stream()
  s.wait_stream(torch.cuda.current_stream())
  with torch.cuda.stream(s):
    fn()  # warm on the side stream before capture
  torch.cuda.current_stream().wait_stream(s)
  g = torch.cuda.CUDAGraph()
  with torch.cuda.graph(g):
    for _ in range(iters):
      fn()
  return g.replay


def main(argv=None):
  argv = sys.argv[1:] if argv is None else argv
  if "--torch" in argv:
    # The "relaycc" torch.distributed backend against gloo (bench_torch.py).
    from . import bench_torch
    rc = bench_torch.main([x for x in argv if x != "--torch"])
    gc.collect()
    return rc
  a = args_parse(argv)
  rc = _bench(a)
  # What the run made is unreferenced now: free it (gloo's threads joined) while the interpreter is whole. A
  # process group left to the interpreter's teardown ended ~1 run in 30 under torchrun with "terminate called
  # without an active exception" (a gloo worker thread destroyed while running).
  gc.collect()
  return rc


def _finish(comm, subs):
  """The run's end on every rank: relaycc's comm first (on GPUs it wraps WORLD's NCCL communicator), then,
  once every rank is done with its collectives, each group this run made and WORLD."""
  if comm is not None:
    comm.destroy()
  dist.barrier()
  for s in subs:
    dist.destroy_process_group(s)
  subs.clear()
  dist.destroy_process_group()


def _bench(a):
  cuda = torch.cuda.is_available() and os.environ.get("RELAYCC_BENCH_CPU") != "1"
  if cuda:
    torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", "0")))
  dist.init_process_group("nccl" if cuda else "gloo")
  rank, world = dist.get_rank(), dist.get_world_size()
  if a.active < 2 or a.active * a.groups > world:
    if rank == 0:
      print(f"relaycc.bench: -A {a.active} x -G {a.groups} needs 2 <= A and A*G <= {world} ranks",
            file=sys.stderr)
    _finish(None, [])
    return 2
  dt = getattr(torch, a.dtype)
  es = torch.empty(0, dtype=dt).element_size()
  layout = [list(range(g * a.active, (g + 1) * a.active)) for g in range(a.groups)]
  cfg = {"route": a.route} if a.route else {}
  comm = relaycc.Comm.from_process_group(**cfg)  # NCCL: WORLD's communicator; gloo: shm, named via the store
  subs = [dist.new_group(ranks=grp) for grp in layout]  # every rank creates every group
  g = next((k for k, grp in enumerate(layout) if rank in grp), -1)
  dev = comm.device
  timer = Timer(cuda)
  A = a.active
  rows = []
  size = max(parse_size(a.min_bytes), es * A)
  top = parse_size(a.max_bytes)
  if rank == 0 and not a.json:
    print(
        f"# relaycc.bench: {a.coll} A={A} G={a.groups} on {world} ranks "
        f"({'cuda' if cuda else 'cpu: shm vs gloo'}), "
        f"dtype {a.dtype}, op {a.op}, min of {a.reps} x {a.iters} calls")
    print(f"# {'size(B)':>12} {'count':>10} {'relaycc(us)':>12} {'algbw':>7} {'busbw':>7} {'spread':>6} "
          f"{'torch(us)':>11} {'spread':>6} {'speedup':>8}" +
          (f" {'graph(us)':>10} {'tgraph(us)':>10}" if a.graph else ""))
  while size <= top:
    # size: the largest per-rank buffer, as nccl-tests count it.
    count = size // es if a.coll == "all_reduce" else size // es // A
    size_b = count * es * (1 if a.coll == "all_reduce" else A)
    send = recv = None
    if g >= 0:
      n_send = count if a.coll in ("all_reduce", "all_gather") else A * count
      n_recv = count if a.coll in ("all_reduce", "reduce_scatter") else A * count
      send = (torch.arange(n_send, device=dev) % 7 + rank + 1).to(dt)
      recv = torch.empty(n_recv, dtype=dt, device=dev)
    counts = [count] * a.groups

    def relay():
      if a.coll == "all_reduce":
        relaycc.all_reduce(send, layout, a.op, comm=comm, out=recv, counts=counts, dtype=dt)
      elif a.coll == "reduce_scatter":
        relaycc.reduce_scatter(send, recv, layout, a.op, comm=comm, counts=counts, dtype=dt)
      else:
        getattr(relaycc, a.coll)(send, recv, layout, comm=comm, counts=counts, dtype=dt)

    base, base_out = baseline(a, send, subs[g] if g >= 0 else None, dt)
    ok, base = check(relay, base, base_out, recv, dev if cuda else "cpu")
    t_r, s_r = timer(relay, a.iters, a.reps, a.warmup)
    t_t, s_t = timer(base, a.iters, a.reps, a.warmup) if base else (float("nan"), float("nan"))
    row = {
        "coll": a.coll,
        "size": size_b,
        "count": count,
        "dtype": a.dtype,
        "op": a.op,
        "active": A,
        "groups": a.groups,
        "ranks": world,
        "relaycc_us": t_r * 1e6,
        "relaycc_spread": s_r,
        "torch_us": t_t * 1e6,
        "torch_spread": s_t,
        "speedup": t_t / t_r,
        "check": ok,
        "algbw": size_b / t_r / 1e9,
        "busbw": size_b / t_r / 1e9 * BUS[a.coll](A)
    }
    if a.graph and cuda:
      t_g, _ = timer(graphed(relay, a.iters), 1, a.reps, 1)
      t_tg, _ = timer(graphed(base, a.iters), 1, a.reps, 1) if base else (float("nan"), 0)
      row.update(graph_us=t_g / a.iters * 1e6, torch_graph_us=t_tg / a.iters * 1e6)
    # The slowest rank's times decide (a collective finishes when its last rank does).
    for k in ("relaycc_us", "torch_us") + (("graph_us", "torch_graph_us") if "graph_us" in row else ()):
      v = torch.tensor([row[k] if row[k] == row[k] else -1.0],
                       dtype=torch.float64,
                       device=dev if cuda else "cpu")
      dist.all_reduce(v, op=dist.ReduceOp.MAX)
      row[k] = v.item()
    row["speedup"] = row["torch_us"] / row["relaycc_us"] if row["torch_us"] > 0 else float("nan")
    rows.append(row)
    if rank == 0 and not a.json:
      print(
          f"  {size_b:>12} {count:>10} {row['relaycc_us']:>12.2f} {row['algbw']:>7.2f} {row['busbw']:>7.2f} "
          f"{s_r:>6.2f} {row['torch_us']:>11.2f} {s_t:>6.2f} {row['speedup']:>8.3f}" +
          (f" {row['graph_us']:>10.2f} {row['torch_graph_us']:>10.2f}" if "graph_us" in row else "") +
          ("" if ok else "  CHECK FAILED"))
    size *= a.factor
  bad = [r["size"] for r in rows if not r["check"]]
  if rank == 0:
    if a.json:
      print(
          json.dumps(
              {
                  "rows": rows,
                  "commit": os.environ.get("RELAYCC_COMMIT", "unknown"),
                  "device": torch.cuda.get_device_name() if cuda else "cpu"
              },
              indent=1))
    if a.plot:
      plot(rows, a.plot, a)
  _finish(comm, subs)
  if bad:
    print(f"relaycc.bench (rank {rank}): results differ from torch.distributed's at sizes {bad}",
          file=sys.stderr)
    return 1
  return 0


def baseline(a, send, sub, dt):
  """torch.distributed's call on the active ranks' subgroup -> (fn, its output); a helper's fn is a no-op."""
  if sub is None:
    return (lambda: None), None
  op = {
      "sum": dist.ReduceOp.SUM,
      "prod": dist.ReduceOp.PRODUCT,
      "max": dist.ReduceOp.MAX,
      "min": dist.ReduceOp.MIN,
      "avg": getattr(dist.ReduceOp, "AVG", None)
  }[a.op]
  A = a.active
  if a.coll == "all_reduce":
    out = torch.empty_like(send)

    def f():
      out.copy_(send)  # out of place, as relaycc's call here
      dist.all_reduce(out, op=op, group=sub)

    return f, out
  if a.coll == "reduce_scatter":
    out = torch.empty(send.numel() // A, dtype=dt, device=send.device)
    return (lambda: dist.reduce_scatter_tensor(out, send, op=op, group=sub)), out
  if a.coll == "all_gather":
    out = torch.empty(send.numel() * A, dtype=dt, device=send.device)
    return (lambda: dist.all_gather_into_tensor(out, send, group=sub)), out
  out = torch.empty_like(send)
  return (lambda: dist.all_to_all_single(out, send, group=sub)), out


def check(relay, base, base_out, recv, dev):
  """One call of each; relaycc's result must equal torch.distributed's. -> (agreed verdict, the baseline
  or None where torch's backend lacks the collective, e.g. gloo's reduce_scatter). Every rank agrees."""
  relay()
  flags = torch.zeros(2, dtype=torch.int32, device=dev)
  try:
    base()
  except (RuntimeError, NotImplementedError, ValueError):
    flags[1] = 1
  if recv is not None and flags[1] == 0:
    flags[0] = int(not torch.allclose(recv.double(), base_out.double(), rtol=1e-2, atol=1e-2))
  dist.all_reduce(flags, op=dist.ReduceOp.MAX)
  return flags[0].item() == 0, (None if flags[1].item() else base)


def plot(rows, path, a):
  try:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
  except ImportError:
    print("relaycc.bench: --plot needs matplotlib (pip install matplotlib)", file=sys.stderr)
    return
  fig, ax = plt.subplots(figsize=(7, 4))
  ax.semilogx([r["size"] for r in rows], [r["speedup"] for r in rows], marker="o", base=2, label="eager")
  if rows and "graph_us" in rows[0]:
    ax.semilogx([r["size"] for r in rows], [r["torch_graph_us"] / r["graph_us"] for r in rows],
                marker="s",
                base=2,
                label="CUDA graph")
  ax.axhline(1.0, color="gray", lw=0.8)
  ax.set_xlabel("size (bytes)")
  ax.set_ylabel("speedup vs torch.distributed")
  ax.set_title(f"relaycc {a.coll}, A={a.active} G={a.groups}, {a.dtype}")
  ax.legend()
  fig.tight_layout()
  fig.savefig(path)


if __name__ == "__main__":
  sys.exit(main())
