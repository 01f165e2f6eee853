"""One rank's side of the opcheck, torch.compile, bad-argument and dead-peer tests (no pytest here: the
pool's workers import this)."""
import os
import time

import torch

import relaycc
from common import POISON, value

N = 6  # elements per rank in these small calls


def _code(dt):
  from relaycc._lib import DTYPES
  return DTYPES[dt]


def _op_args(comm, name, layout):
  """Arguments of torch.ops.relaycc.<name> for this rank: (send, the output's like or None, comm, ...)."""
  r, dt = comm.rank, torch.float32
  flat = [q for g in layout for q in g]
  a = len(layout[0])
  active = r in flat
  h, code = comm.handle, _code(dt)
  if name in ("scatter", "gather"):
    root, ranks, counts = 0, flat, [N] * len(flat)
    big = value(r, 1, N * len(flat)).to(dt) if r == root else None
    small = value(r, 2, N).to(dt) if active else None
    if name == "scatter":
      return (big, torch.full((N,), POISON, dtype=dt) if active else None, h, root, ranks, counts, code)
    return (small, torch.full((N * len(flat),), POISON, dtype=dt) if r == root else None, h, root, ranks, counts,
            code)
  if name in ("broadcast", "reduce"):
    # the root at position 1 of each group; a broadcast reads the root's send only, a reduce writes the
    # root's output only (the others pass None there)
    root = 1
    me = next((g.index(r) for g in layout if r in g), -1)
    bcast = name == "broadcast"
    send = value(r, 4, N, None if bcast else "sum").to(dt) if active and (me == root or not bcast) else None
    like = torch.full((N,), POISON, dtype=dt) if active and (me == root or bcast) else None
    return (send, like, h, flat, len(layout), [N] * len(layout), code, 0, root)
  send_n = {"all_reduce": N, "reduce_scatter": a * N, "all_gather": N, "all_to_all": a * N}[name]
  recv_n = {"all_reduce": N, "reduce_scatter": N, "all_gather": a * N, "all_to_all": a * N}[name]
  send = value(r, 3, send_n, "sum").to(dt) if active else None
  like = torch.full((recv_n,), POISON, dtype=dt) if active else None
  return (send, like, h, flat, len(layout), [N] * len(layout), code, 0)


def _opcheck_pt2pt(comm, name):
  """send: each rank's opcheck sends K transfers to the next rank (they fit its ring: eager), which then
  drains them with K plain receives; recv: each rank first sends K (an opcheck of send), then opchecks
  recv from the previous rank, which must make K calls too. Returns the checked op's calls."""
  r, n, dt = comm.rank, comm.size, torch.float32
  nxt, prv = (r + 1) % n, (r - 1) % n
  before = comm.calls
  torch.library.opcheck(torch.ops.relaycc.send.default, (value(r, nxt, N).to(dt), comm.handle, nxt, N, _code(dt)))
  k = comm.calls - before
  if name == "send":
    for _ in range(k):
      out = torch.full((N,), POISON, dtype=dt)
      relaycc.recv(out, prv, comm=comm)
      assert torch.equal(out, value(prv, r, N).to(dt))
    return k
  before = comm.calls
  like = torch.full((N,), POISON, dtype=dt)
  torch.library.opcheck(torch.ops.relaycc.recv.default, (like, comm.handle, prv, N, _code(dt)))
  assert comm.calls - before == k, f"recv's opcheck made {comm.calls - before} calls, send's {k}"
  return k


def opcheck_op(comm, name):
  """torch.library.opcheck on torch.ops.relaycc.<name>, every rank at once (each check calls the op on
  every rank alike), with helpers (ranks 5..7 are in no group) passing None."""
  if name in ("send", "recv"):
    return _opcheck_pt2pt(comm, name)
  if name == "all_to_all_v":
    grp = [0, 1, 2, 4]
    me = grp.index(comm.rank) if comm.rank in grp else -1
    sc = [(me + j) % 3 + 1 for j in range(4)] if me >= 0 else None
    rc = [(j + me) % 3 + 1 for j in range(4)] if me >= 0 else None
    send = value(comm.rank, 4, sum(sc)).to(torch.float32) if me >= 0 else None
    like = torch.full((sum(rc),), POISON, dtype=torch.float32) if me >= 0 else None
    args = (send, like, comm.handle, grp, sc + rc if me >= 0 else None, _code(torch.float32))
    before = comm.calls
    torch.library.opcheck(torch.ops.relaycc.all_to_all_v.default, args)
    return comm.calls - before
  layout = [[0, 1], [2, 3]] if name not in ("scatter", "gather") else [[0, 1, 2, 4]]
  args = _op_args(comm, name, layout)
  before = comm.calls
  torch.library.opcheck(getattr(torch.ops.relaycc, name).default, args)
  return comm.calls - before


def _layout3():
  return [[0, 2, 5]]


def compiled_helper(comm, backend):
  """torch.compile(fullgraph=True) over a function that calls two relaycc ops; ranks outside the layout
  are helpers whose compiled function has no tensor of its own. Returns (graph breaks, graphs, calls this
  rank made in the compiled run, the result or None)."""
  import torch._dynamo
  torch._dynamo.reset()
  layout = _layout3()
  active = comm.rank in layout[0]

  def active_fn(x):
    y = x * 2 + 1
    relaycc.all_reduce(y, layout, comm=comm)
    z = torch.empty(3 * N, dtype=x.dtype)
    relaycc.all_gather(y, z, layout, comm=comm)
    # torchcomms' async form: its Work must not break fullgraph (no CUDA event under compile).
    comm.sharded_relay_multi_group_all_reduce([z], "max", layout, [3 * N], async_op=True).wait()
    return z - 1

  def helper_fn():
    relaycc.all_reduce(None, layout, comm=comm, counts=[N], dtype=torch.float32)
    relaycc.all_gather(None, None, layout, comm=comm, counts=[N], dtype=torch.float32)
    ph = [torch.empty(0, dtype=torch.float32)]  # the placeholder gives the dtype
    comm.sharded_relay_multi_group_all_reduce(ph, "max", layout, [3 * N], async_op=True).wait()

  fn = active_fn if active else helper_fn
  args = (value(comm.rank, 0, N).to(torch.float32),) if active else ()
  ex = torch._dynamo.explain(fn)(*args)  # runs fn once (three calls on every rank)
  torch._dynamo.reset()
  compiled = torch.compile(fn, fullgraph=True, backend=backend)
  before = comm.calls
  out = compiled(*args)
  made = comm.calls - before
  # A second run with new input: the compiled graph is reused and still calls.
  args2 = (value(comm.rank, 1, N).to(torch.float32),) if active else ()
  out2 = compiled(*args2)
  made2 = comm.calls - before - made
  return {
      "breaks": ex.graph_break_count,
      "graphs": ex.graph_count,
      "made": made,
      "made2": made2,
      "out": out,
      "out2": out2
  }


def compiled_graph(comm):
  """The forward graph AOTAutograd makes of a function with three relaycc calls between torch ops (the
  active ranks) or with nothing but the calls (a helper): -> its code."""
  import torch._dynamo
  from torch._dynamo.backends.common import aot_autograd
  torch._dynamo.reset()
  layout = _layout3()
  codes = []

  def keep(gm, example_inputs):
    codes.append(gm.code)
    return gm

  def fn(x):
    y = x + 1 if x is not None else None
    relaycc.all_reduce(y, layout, comm=comm, counts=[N], dtype=torch.float32)
    relaycc.all_reduce(y, layout, "max", comm=comm, counts=[N], dtype=torch.float32)
    relaycc.all_gather(y, torch.empty(3 * N) if y is not None else None, layout, comm=comm, counts=[N],
                       dtype=torch.float32)
    return y * 2 if y is not None else None

  active = comm.rank in layout[0]
  x = value(comm.rank, 0, N).to(torch.float32) if active else None
  torch.compile(fn, fullgraph=True, backend=aot_autograd(fw_compiler=keep))(x)
  return codes


# ---- bad arguments: every rank makes the same mistake, so every rank raises and the comm stays usable ---


def _all8(comm):
  return [list(range(comm.size))]


BAD_CASES = {
    "op":
        lambda c: relaycc.all_reduce(torch.ones(N), _all8(c), op="bogus", comm=c),
    "dtype":
        lambda c: relaycc.all_reduce(torch.ones(N, dtype=torch.complex64), _all8(c), comm=c),
    "dtype_bool":
        lambda c: relaycc.all_gather(
            torch.ones(N, dtype=torch.bool), torch.ones(8 * N, dtype=torch.bool), _all8(c), comm=c),
    "size":
        lambda c: relaycc.all_reduce(torch.ones(N), _all8(c), comm=c, counts=[N + 1]),
    "out_size":
        lambda c: relaycc.all_gather(torch.ones(N), torch.ones(8 * N - 1), _all8(c), comm=c),
    "contiguous":
        lambda c: relaycc.all_reduce(torch.ones(2 * N)[::2], _all8(c), comm=c),
    "ragged":
        lambda c: relaycc.all_reduce(
            torch.ones(N) if c.rank < 3 else None, [[0, 1], [2]], comm=c, counts=[N, N], dtype=torch.float32),
    "counts_len":
        lambda c: relaycc.all_reduce(torch.ones(N), _all8(c), comm=c, counts=[N, N]),
    "counts_neg":
        lambda c: relaycc.reduce_scatter(torch.ones(8 * N), torch.ones(N), _all8(c), comm=c, counts=[-1]),
    "dtype_mismatch":
        lambda c: relaycc.all_reduce(torch.ones(N), _all8(c), comm=c, dtype=torch.int32),
    "helper_no_counts":
        lambda c: relaycc.all_reduce(
            torch.ones(N, dtype=torch.int32) if c.rank < 2 else None, [[0, 1]], comm=c, dtype=torch.float32),
    "alltoall_inplace":
        lambda c: (lambda t: relaycc.all_to_all(t, t, _all8(c), comm=c))(torch.ones(8 * N)),
    "rank_range":
        lambda c: relaycc.all_reduce(
            torch.ones(N) if c.rank in (0,) else None, [[0, 9]], comm=c, counts=[N], dtype=torch.float32),
    "scatter_role":
        lambda c: relaycc.scatter(
            torch.ones(8 * N)
            if c.rank == 0 else None, None, 0, list(range(c.size)), [N] * c.size, comm=c),
    "comm":
        lambda c: relaycc.all_reduce(torch.ones(N), _all8(c), comm=None),
}
# What each error must say (it names the argument): a substring of the message; a pair is (ranks 0-1, others).
BAD_NAMES = {
    "op": "op 'bogus'",
    "dtype": "dtype torch.complex64",
    "dtype_bool": "dtype torch.bool",
    "size": "tensor has 6 elements",
    "out_size": "output has 47 elements",
    "contiguous": "tensor is not contiguous",
    "ragged": "layout[1] has 1 ranks",
    "counts_len": "counts must be a list of 1",
    "counts_neg": "counts[0] = -1",
    "dtype_mismatch": "dtype torch.float32, the call's dtype is torch.int32",
    "helper_no_counts": ("dtype torch.int32, the call's dtype is torch.float32", "counts is required"),
    "alltoall_inplace": "in-place all-to-all",
    "rank_range": "layout.ranks[1] = 9",
    "scatter_role": "output is None, but this rank's role uses it",
    "comm": "comm is None",
}


def bad_call(comm, case):
  """-> (is RelayccError, is ValueError, message, a good call afterwards is right)."""
  try:
    BAD_CASES[case](comm)
    res = (False, False, "no error", False)
  except Exception as e:
    res = (isinstance(e, relaycc.RelayccError), isinstance(e, ValueError), str(e), None)
  t = torch.full((N,), float(comm.rank + 1))
  relaycc.all_reduce(t, _all8(comm), comm=comm)
  ok = torch.equal(t, torch.full((N,), float(sum(range(1, comm.size + 1)))))
  return res[:3] + (ok,)


# ---- a dead peer ----------------------------------------------------------------------------------


def die_or_call(comm, victim):
  """The victim exits without a word; the others call a collective it is in, then another: both must raise
  within the deadline."""
  # One good call first: the first torch op call of a process imports torch._dynamo (tens of seconds on a
  # loaded machine), which must not count against the deadline measured below.
  relaycc.all_reduce(torch.ones(N), [list(range(comm.size))], comm=comm)
  if comm.rank == victim:
    os._exit(3)
  time.sleep(0.5)
  out = []
  for _ in range(2):
    t0 = time.monotonic()
    try:
      relaycc.all_reduce(torch.ones(N), [list(range(comm.size))], comm=comm)
      out.append(("no error", time.monotonic() - t0, ""))
    except relaycc.RelayccError as e:
      out.append((type(e).__name__, time.monotonic() - t0, str(e)))
  return out
