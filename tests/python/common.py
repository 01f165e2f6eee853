"""Test support: a pool of spawned processes, one relaycc.Comm.shm rank each, made once per test module; input
patterns that encode source, destination and region; the serial reference of every collective."""
import multiprocessing as mp
import os
import queue
import socket
import time
import traceback
import uuid

import torch

NRANKS = 8
POISON = 119  # outside every result's range below (non-reductions 1..113, sums <= 8*7, products <= 4)

DTYPE_NAMES = [
    "float16", "bfloat16", "float32", "float64", "int8", "uint8", "int32", "int64", "uint32", "uint64"
]
DTYPE_NAMES = [n for n in DTYPE_NAMES if hasattr(torch, n)]
OPS = ["sum", "prod", "max", "min", "avg"]
COLLS = ["all_reduce", "reduce_scatter", "all_gather", "all_to_all", "scatter", "gather"]



def free_port():
  """A TCP port free on 127.0.0.1 now (a tcp:// rendezvous of its own per test module)."""
  with socket.socket() as s:
    s.bind(("127.0.0.1", 0))
    return s.getsockname()[1]

# ---- the pool -------------------------------------------------------------------------------------


def shm_comm(rank, n, job):
  import relaycc
  return relaycc.Comm.shm(rank=rank, world_size=n, job=job)


def _worker(rank, n, job, env, inq, outq, init):
  os.environ.update(env)
  torch.set_num_threads(1)
  import relaycc  # noqa: F401
  # Init only when every rank has imported torch (seconds apart on a loaded machine), so that a short
  # RELAYCC_TIMEOUT_MS bounds the calls, not the imports.
  outq.put((rank, True, "imported"))
  inq.get()
  try:
    comm = init(rank, n, job)
  except Exception:
    outq.put((rank, False, traceback.format_exc()))
    return
  outq.put((rank, True, "ready"))
  while True:
    task = inq.get()
    if task is None:
      break
    fn, args = task
    try:
      outq.put((rank, True, fn(comm, *args)))
    except BaseException:
      outq.put((rank, False, traceback.format_exc()))
  try:
    comm.destroy()
  except Exception:
    pass
  # Skip the interpreter's teardown: with torch loaded it took 25-28 s per process on the loaded 2-core
  # machine. Our results are flushed first.
  outq.close()
  outq.join_thread()
  os._exit(0)


class Pool:
  """n spawned processes, each rank `r` of one shm comm (or of what `init(rank, n, job)`, a module-level
  function, returns: an object with destroy()). run(fn, *args) calls fn(comm, *args) on every rank (fn: a
  module-level function) and returns the n results, or raises with the failing ranks' tracebacks; every
  wait has a deadline."""

  def __init__(self, n=NRANKS, env=None, timeout=300, init=shm_comm):
    ctx = mp.get_context("spawn")
    self.n = n
    self.job = f"pytest-{os.getpid()}-{uuid.uuid4().hex[:8]}"
    self.outq = ctx.Queue()
    self.inqs = [ctx.Queue() for _ in range(n)]
    env = dict(env or {})
    env.setdefault("OMP_NUM_THREADS", "1")
    self.procs = [
        ctx.Process(target=_worker, args=(r, n, self.job, env, self.inqs[r], self.outq, init), daemon=True)
        for r in range(n)
    ]
    for p in self.procs:
      p.start()
    self._collect(timeout, "import")
    for q in self.inqs:
      q.put("go")
    self._collect(timeout, "init")

  def _collect(self, timeout, what, dead_ok=()):
    deadline = time.monotonic() + timeout
    got = {r: (True, None) for r in dead_ok}
    while len(got) < self.n:
      left = deadline - time.monotonic()
      if left <= 0:
        raise AssertionError(f"pool: {what}: no answer from ranks {sorted(set(range(self.n)) - set(got))} "
                             f"within {timeout} s")
      try:
        r, ok, v = self.outq.get(timeout=min(left, 1.0))
      except queue.Empty:
        dead = [r for r, p in enumerate(self.procs) if not p.is_alive() and r not in got]
        if dead:
          raise AssertionError(f"pool: {what}: ranks {dead} died (exit codes "
                               f"{[self.procs[r].exitcode for r in dead]})")
        continue
      got[r] = (ok, v)
    bad = {r: v for r, (ok, v) in got.items() if not ok}
    if bad:
      raise AssertionError(f"pool: {what}: failed on ranks {sorted(bad)}:\n" +
                           "\n".join(f"--- rank {r} ---\n{v}" for r, v in sorted(bad.items())))
    return [got[r][1] for r in range(self.n)]

  def run(self, fn, *args, timeout=300, dead_ok=()):
    """dead_ok: ranks that are expected to die in fn (their result is None)."""
    for q in self.inqs:
      q.put((fn, args))
    return self._collect(timeout, fn.__name__, dead_ok)

  def close(self):
    for q in self.inqs:
      try:
        q.put(None)
      except Exception:
        pass
    for p in self.procs:
      p.join(timeout=30)
      if p.is_alive():
        p.kill()


# ---- patterns and the serial reference ------------------------------------------------------------


def value(src, blk, k, reduce_op=None):
  """Element k of the block `blk` that comm rank `src` contributes, as float64 (exact in every dtype).
  Non-reductions: 1..113, distinct for neighbouring sources/blocks/elements. Reductions: small values so
  that sums and products stay exact and in range in int8 and float16 at 8 ranks."""
  k = torch.arange(k, dtype=torch.float64) if isinstance(k, int) else k
  if reduce_op is None:
    return torch.remainder(src * 31 + blk * 7 + k, 113) + 1
  if reduce_op == "prod":
    return torch.where(torch.remainder(src + blk + k, 4) == 0, 2.0, 1.0).to(torch.float64)
  return torch.remainder(src * 5 + blk * 3 + k, 7) + 1


def reduce(vals, op, nactive, dtype):
  x = torch.stack(vals)
  if op == "sum":
    return x.sum(0)
  if op == "prod":
    return x.prod(0)
  if op == "max":
    return x.max(0).values
  if op == "min":
    return x.min(0).values
  s = x.sum(0) / nactive
  return s if dtype.is_floating_point else torch.trunc(s)


def as_dtype(x64, dtype):
  return x64.to(dtype)


def to64(t):
  return t.to(torch.float64)


def close(got, want, dtype, op):
  """Exact except for float avg, whose division may round differently (fp16/bf16: ~1 ulp)."""
  got, want = to64(got), to64(as_dtype(want, dtype))
  if op == "avg" and dtype.is_floating_point:
    tol = {torch.float16: 2e-3, torch.bfloat16: 1e-2, torch.float32: 1e-6, torch.float64: 1e-12}[dtype]
    return torch.allclose(got, want, rtol=tol, atol=tol)
  return torch.equal(got, want)
