"""One rank's side of the torch.distributed backend tests (test_dist_*.py; no pytest here: the pool's workers
import this). Each case runs every call on this rank against the serial reference, computed here from the
inputs every rank can rebuild (value(): source, block and index encoded, never zeros), outputs poisoned
first, and returns the mismatches as text (the test asserts the list is empty)."""
import datetime
import os
import time

import torch
import torch.distributed as dist

from common import POISON, value

R = dist.ReduceOp
CPU = torch.device("cpu")


class Group:
  """What the pool hands each case: this rank's default group (relaycc)."""

  def __init__(self, rank, n):
    self.rank, self.n = rank, n

  def destroy(self):
    if dist.is_initialized():
      dist.destroy_process_group()


def dist_init(url, rank, n, job):
  """The pool's init (functools.partial binds url): the default group on the relaycc backend through a
  tcp:// or file:// url; "{job}" in it becomes the pool's job name."""
  import relaycc  # noqa: F401  (registers "relaycc")
  dist.init_process_group("relaycc", init_method=url.format(job=job), rank=rank, world_size=n,
                          timeout=datetime.timedelta(seconds=120))
  return Group(rank, n)


# ---- the serial reference ---------------------------------------------------------------------------

RED_OPS = {"sum": R.SUM, "avg": R.AVG, "min": R.MIN, "max": R.MAX, "prod": R.PRODUCT}


def ref_reduce(n, blk, k, op, dtype, premul=None):
  """The reduction over ranks 0..n-1 of value(src, blk, k, op), in float64, then in dtype."""
  vals = torch.stack([value(s, blk, k, "prod" if op == "prod" else "sum") for s in range(n)])
  if premul is not None:
    vals = (vals.to(dtype) * premul).double()
  if op in ("sum", "premul_sum"):
    x = vals.sum(0)
  elif op == "prod":
    x = vals.prod(0)
  elif op == "max":
    x = vals.max(0).values
  elif op == "min":
    x = vals.min(0).values
  else:
    x = vals.sum(0) / n
    if not dtype.is_floating_point:
      x = torch.trunc(x)
  return x


def _inp(src, blk, k, op, dtype):
  return value(src, blk, k, "prod" if op == "prod" else ("sum" if op else None)).to(dtype)


def _check(bad, what, got, want, dtype, loose=False):
  got64, want64 = got.double(), want.to(dtype).double()
  if loose and dtype.is_floating_point:
    tol = {torch.float16: 2e-3, torch.bfloat16: 1e-2, torch.float32: 1e-6, torch.float64: 1e-12}[dtype]
    ok = torch.allclose(got64, want64, rtol=tol, atol=tol)
  else:
    ok = torch.equal(got64, want64)
  if not ok:
    bad.append(f"{what}: got {got.flatten()[:8].tolist()} want {want64.flatten()[:8].tolist()}")


def _served():
  """How many calls this rank's default group's relaycc backend completed, by op name (the backend's
  counter): a case reads it before and after a call to prove relaycc served it and gloo did not."""
  from relaycc import torch_backend
  return dict(torch_backend.get_backend().served)


def _expect_served(bad, before, ops):
  """Each op of `ops` (name: how many calls) was served by relaycc since `before`."""
  now = _served()
  for op, k in ops.items():
    got = now.get(op, 0) - before.get(op, 0)
    if got != k:
      bad.append(f"{op}: relaycc served {got} calls, not {k} (forwarded?)")


def _poison(shape, dtype):
  return torch.full(shape if isinstance(shape, tuple) else (shape,), POISON).to(dtype)


REDUCE_DTYPES = ["float32", "float64", "bfloat16", "float16", "int32", "int64", "int8", "uint8"]


def case_all_reduce(g, dtypes, sizes):
  bad, me, n = [], g.rank, g.n
  for dn in dtypes:
    dt = getattr(torch, dn)
    for k in sizes:
      for op in RED_OPS:
        if op == "avg" and not dt.is_floating_point:
          continue  # torch defines no integer average (gloo: an error); relaycc truncates
        if op == "prod" and dt in (torch.int8, torch.uint8, torch.float16, torch.bfloat16) and n > 4:
          continue  # 2**n leaves the exact range only there; the other dtypes cover it
        t = _inp(me, 0, k, op, dt)
        dist.all_reduce(t, op=RED_OPS[op])
        _check(bad, f"all_reduce {dn} {op} k={k}", t, ref_reduce(n, 0, k, op, dt), dt, op == "avg")
      if dt.is_floating_point:
        t = _inp(me, 0, k, "sum", dt)
        dist.all_reduce(t, op=dist._make_nccl_premul_sum(0.5))
        _check(bad, f"all_reduce {dn} premul_sum k={k}", t, ref_reduce(n, 0, k, "premul_sum", dt, 0.5), dt,
               True)
  # Forwarded to gloo: a bitwise op; a non-contiguous tensor is served through a copy.
  t = _inp(me, 0, 9, "sum", torch.int64)
  dist.all_reduce(t, op=R.BOR)
  want = torch.zeros(9, dtype=torch.int64)
  for s in range(n):
    want |= _inp(s, 0, 9, "sum", torch.int64)
  _check(bad, "all_reduce BOR (gloo)", t, want, torch.int64)
  base = _inp(me, 0, 20, "sum", torch.float32).view(4, 5)
  t = base.t()
  dist.all_reduce(t)
  _check(bad, "all_reduce non-contiguous", base, ref_reduce(n, 0, 20, "sum", torch.float32).view(4, 5),
         torch.float32)
  # complex: torch views it as real for SUM
  c = torch.complex(_inp(me, 0, 6, "sum", torch.float32), _inp(me, 1, 6, "sum", torch.float32))
  dist.all_reduce(c)
  want = torch.complex(ref_reduce(n, 0, 6, "sum", torch.float32).float(), ref_reduce(n, 1, 6, "sum",
                                                                                      torch.float32).float())
  _check(bad, "all_reduce complex64", torch.view_as_real(c), torch.view_as_real(want), torch.float32)
  return bad


def case_all_gather(g, dtypes, sizes):
  bad, me, n = [], g.rank, g.n
  for dn in dtypes + ["bool"]:
    dt = getattr(torch, dn)
    for k in sizes:
      mk = (lambda s, b, kk: (value(s, b, kk) % 2 == 0)) if dt == torch.bool else \
          (lambda s, b, kk: value(s, b, kk).to(dt))
      outs = [_poison(k, dt) for _ in range(n)]
      dist.all_gather(outs, mk(me, 0, k))
      for s in range(n):
        _check(bad, f"all_gather list {dn} k={k} from {s}", outs[s], mk(s, 0, k), dt)
      out = _poison(n * k, dt)
      dist.all_gather_into_tensor(out, mk(me, 1, k))
      _check(bad, f"all_gather_into_tensor {dn} k={k}", out, torch.cat([mk(s, 1, k) for s in range(n)]), dt)
  # Uneven sizes (rank s contributes s + 1 elements), and 2-D blocks.
  outs = [_poison(s + 1, torch.float32) for s in range(n)]
  dist.all_gather(outs, value(me, 2, me + 1).float())
  for s in range(n):
    _check(bad, f"all_gather uneven from {s}", outs[s], value(s, 2, s + 1), torch.float32)
  out = _poison((n * 2, 3), torch.float32)
  dist.all_gather_into_tensor(out, value(me, 3, 6).float().view(2, 3))
  _check(bad, "all_gather_into_tensor 2-D", out.view(-1), torch.cat([value(s, 3, 6) for s in range(n)]),
         torch.float32)
  # Coalesced (the functional collectives' and _coalescing_manager's entry point).
  outs = [_poison(n * 5, torch.float32), _poison(n * 3, torch.bfloat16)]
  with dist._coalescing_manager(async_ops=True) as cm:
    dist.all_gather_into_tensor(outs[0], value(me, 4, 5).float(), async_op=True)
    dist.all_gather_into_tensor(outs[1], value(me, 5, 3).bfloat16(), async_op=True)
  cm.wait()
  _check(bad, "all_gather coalesced 0", outs[0], torch.cat([value(s, 4, 5) for s in range(n)]), torch.float32)
  _check(bad, "all_gather coalesced 1", outs[1], torch.cat([value(s, 5, 3) for s in range(n)]),
         torch.bfloat16)
  return bad


def case_reduce_scatter(g, dtypes, sizes):
  bad, me, n = [], g.rank, g.n
  for dn in dtypes:
    dt = getattr(torch, dn)
    for k in sizes:
      for op in ("sum", "avg", "max", "min"):
        if op == "avg" and not dt.is_floating_point:
          continue
        inp = _inp(me, 0, n * k, op, dt)
        out = _poison(k, dt)
        dist.reduce_scatter_tensor(out, inp, op=RED_OPS[op])
        want = ref_reduce(n, 0, n * k, op, dt)[me * k:(me + 1) * k]
        _check(bad, f"reduce_scatter_tensor {dn} {op} k={k}", out, want, dt, op == "avg")
        _check(bad, f"reduce_scatter_tensor {dn} {op} input kept", inp, _inp(me, 0, n * k, op, dt), dt)
        ins = list(_inp(me, 1, n * k, op, dt).split(k))
        out = _poison(k, dt)
        dist.reduce_scatter(out, ins, op=RED_OPS[op])
        want = ref_reduce(n, 1, n * k, op, dt)[me * k:(me + 1) * k]
        _check(bad, f"reduce_scatter list {dn} {op} k={k}", out, want, dt, op == "avg")
  k = 4
  inp = _inp(me, 2, n * k, "sum", torch.float32)
  out = _poison(k, torch.float32)
  dist.reduce_scatter_tensor(out, inp, op=dist._make_nccl_premul_sum(0.25))
  want = ref_reduce(n, 2, n * k, "premul_sum", torch.float32, 0.25)[me * k:(me + 1) * k]
  _check(bad, "reduce_scatter_tensor premul_sum", out, want, torch.float32, True)
  _check(bad, "reduce_scatter_tensor premul_sum input kept", inp, _inp(me, 2, n * k, "sum", torch.float32),
         torch.float32)
  outs = [_poison(k, torch.float32), _poison(2 * k, torch.float32)]
  with dist._coalescing_manager(async_ops=True) as cm:
    dist.reduce_scatter_tensor(outs[0], _inp(me, 3, n * k, "sum", torch.float32), async_op=True)
    dist.reduce_scatter_tensor(outs[1], _inp(me, 4, n * 2 * k, "sum", torch.float32), async_op=True)
  cm.wait()
  _check(bad, "reduce_scatter coalesced 0", outs[0],
         ref_reduce(n, 3, n * k, "sum", torch.float32)[me * k:(me + 1) * k], torch.float32)
  _check(bad, "reduce_scatter coalesced 1", outs[1],
         ref_reduce(n, 4, n * 2 * k, "sum", torch.float32)[me * 2 * k:(me + 1) * 2 * k], torch.float32)
  return bad


def _a2a_block(src, dst, k, dt):
  # Block from src to dst: block index src * 64 + dst encodes both ends.
  return value(src, src * 64 + dst, k).to(dt)


def case_all_to_all(g, dtypes, sizes):
  bad, me, n = [], g.rank, g.n
  for dn in dtypes:
    dt = getattr(torch, dn)
    for k in sizes:
      inp = torch.cat([_a2a_block(me, d, k, dt) for d in range(n)])
      out = _poison(n * k, dt)
      dist.all_to_all_single(out, inp)
      want = torch.cat([_a2a_block(s, me, k, dt) for s in range(n)])
      _check(bad, f"all_to_all_single {dn} k={k}", out, want, dt)
  # Uneven splits: src sends (src + dst) % 3 + 1 elements to dst; a zero split (src == dst + 1: nothing
  # sent); 2-D rows of 3 and the output's splits only; relaycc serves all of them (relayAllToAllv).
  before = _served()
  cnt = lambda s, d: (s + d) % 3 + 1  # noqa: E731
  inp = torch.cat([_a2a_block(me, d, cnt(me, d), torch.float32) for d in range(n)])
  out = _poison(sum(cnt(s, me) for s in range(n)), torch.float32)
  dist.all_to_all_single(out, inp, [cnt(s, me) for s in range(n)], [cnt(me, d) for d in range(n)])
  _check(bad, "all_to_all_single uneven", out,
         torch.cat([_a2a_block(s, me, cnt(s, me), torch.float32) for s in range(n)]), torch.float32)
  zc = lambda s, d: 0 if s == (d + 1) % n else s + 2 * d + 1  # noqa: E731
  inp = torch.cat([_a2a_block(me, d, 3 * zc(me, d), torch.bfloat16) for d in range(n)]).view(-1, 3)
  out = _poison(3 * sum(zc(s, me) for s in range(n)), torch.bfloat16).view(-1, 3)
  w = dist.all_to_all_single(out, inp, [zc(s, me) for s in range(n)], [zc(me, d) for d in range(n)],
                             async_op=True)
  w.wait()
  _check(bad, "all_to_all_single uneven 2-D with a zero split (async)", out.view(-1),
         torch.cat([_a2a_block(s, me, 3 * zc(s, me), torch.bfloat16) for s in range(n)]), torch.bfloat16)
  inp = torch.cat([_a2a_block(me, d, 2, torch.int32) for d in range(n)])
  out = _poison(2 * n, torch.int32)
  dist.all_to_all_single(out, inp, output_split_sizes=[2] * n)
  _check(bad, "all_to_all_single output splits only", out,
         torch.cat([_a2a_block(s, me, 2, torch.int32) for s in range(n)]), torch.int32)
  outs = [_poison(cnt(s, me), torch.int64) for s in range(n)]
  dist.all_to_all(outs, [_a2a_block(me, d, cnt(me, d), torch.int64) for d in range(n)])
  for s in range(n):
    _check(bad, f"all_to_all list uneven from {s}", outs[s], _a2a_block(s, me, cnt(s, me), torch.int64),
           torch.int64)
  _expect_served(bad, before, {"all_to_all_single_v": 3, "all_to_all": 1})
  return bad


def case_rooted(g, sizes):
  """broadcast, reduce, gather, scatter from every root, barrier, and the object collectives."""
  bad, me, n = [], g.rank, g.n
  dt = torch.float32
  before = _served()
  for k in sizes:
    for root in range(n):
      t = value(me, 0, k).to(dt) if me == root else _poison(k, dt)
      dist.broadcast(t, root)
      _check(bad, f"broadcast root={root} k={k}", t, value(root, 0, k), dt)
      for op in ("sum", "max", "avg"):
        t = _inp(me, 1, k, op, dt)
        dist.reduce(t, root, op=RED_OPS[op])
        if me == root:
          _check(bad, f"reduce {op} root={root} k={k}", t, ref_reduce(n, 1, k, op, dt), dt, op == "avg")
        else:
          _check(bad, f"reduce {op} root={root} non-root input kept", t, _inp(me, 1, k, op, dt), dt)
      gl = [_poison(k, dt) for _ in range(n)] if me == root else None
      dist.gather(value(me, 2, k).to(dt), gl, dst=root)
      if me == root:
        for s in range(n):
          _check(bad, f"gather root={root} from {s}", gl[s], value(s, 2, k), dt)
      sl = [value(root, 3 + d, k).to(dt) for d in range(n)] if me == root else None
      out = _poison(k, dt)
      dist.scatter(out, sl, src=root)
      _check(bad, f"scatter root={root} k={k}", out, value(root, 3 + me, k), dt)
  dist.barrier()
  calls = len(sizes) * n
  _expect_served(bad, before, {"broadcast": calls, "reduce": 3 * calls, "gather": calls, "scatter": calls,
                               "barrier": 1})
  # Other dtypes: a bool and a non-contiguous broadcast (bytes), an int reduce with a premul on float16.
  root = n - 1
  t = (value(me, 4, 7) % 2 == 0) if me == root else torch.zeros(7, dtype=torch.bool) | (me % 2 == 0)
  dist.broadcast(t, root)
  _check(bad, "broadcast bool", t, value(root, 4, 7) % 2 == 0, torch.bool)
  base = value(me, 5, 12).double().view(3, 4) if me == root else _poison((3, 4), torch.float64)
  t = base.t()
  dist.broadcast(t, root)
  _check(bad, "broadcast non-contiguous", base, value(root, 5, 12).view(3, 4), torch.float64)
  t = _inp(me, 6, 9, "sum", torch.int64)  # a bitwise op: gloo's
  dist.reduce(t, 0, op=R.BOR)
  want = torch.zeros(9, dtype=torch.int64)
  for s in range(n):
    want |= _inp(s, 6, 9, "sum", torch.int64)
  _check(bad, "reduce BOR (gloo)", t, want if me == 0 else _inp(me, 6, 9, "sum", torch.int64), torch.int64)
  t = _inp(me, 7, 9, "sum", torch.int32)
  dist.reduce(t, root, op=R.MIN)
  _check(bad, "reduce int32 min", t, ref_reduce(n, 7, 9, "min", torch.int32) if me == root else
         _inp(me, 7, 9, "sum", torch.int32), torch.int32)
  t = _inp(me, 8, 9, "sum", torch.float16)
  dist.reduce(t, root, op=dist._make_nccl_premul_sum(0.5))
  _check(bad, "reduce float16 premul_sum", t, ref_reduce(n, 8, 9, "premul_sum", torch.float16, 0.5)
         if me == root else _inp(me, 8, 9, "sum", torch.float16), torch.float16, True)
  _expect_served(bad, before, {"broadcast": calls + 2, "reduce": 3 * calls + 2})
  objs = [None] * n
  dist.all_gather_object(objs, {"rank": me, "data": list(range(me + 1))})
  if objs != [{"rank": s, "data": list(range(s + 1))} for s in range(n)]:
    bad.append(f"all_gather_object: {objs}")
  lst = [f"from {me}", me] if me == 0 else [None, None]
  dist.broadcast_object_list(lst, src=0)
  if lst != ["from 0", 0]:
    bad.append(f"broadcast_object_list: {lst}")
  got = [None] * n if me == n - 1 else None
  dist.gather_object(("g", me), got, dst=n - 1)
  if me == n - 1 and got != [("g", s) for s in range(n)]:
    bad.append(f"gather_object: {got}")
  out = [None]
  dist.scatter_object_list(out, [f"s{d}" * (d + 1) for d in range(n)] if me == 0 else None, src=0)
  if out != [f"s{me}" * (me + 1)]:
    bad.append(f"scatter_object_list: {out}")
  return bad


def case_p2p(g, k):
  """send/recv around the ring, isend/irecv, batch_isend_irecv both ways."""
  bad, me, n = [], g.rank, g.n
  nxt, prv = (me + 1) % n, (me - 1) % n
  dt = torch.float32
  t = _poison(k, dt)
  if me % 2 == 0:
    dist.send(value(me, nxt, k).to(dt), nxt)
    dist.recv(t, prv)
  else:
    dist.recv(t, prv)
    dist.send(value(me, nxt, k).to(dt), nxt)
  _check(bad, "send/recv ring", t, value(prv, me, k), dt)
  a, b = _poison(k, dt), _poison(k, dt)
  ops = [dist.P2POp(dist.isend, value(me, nxt + 100, k).to(dt), nxt),
         dist.P2POp(dist.isend, value(me, prv + 200, k).to(dt), prv),
         dist.P2POp(dist.irecv, a, prv), dist.P2POp(dist.irecv, b, nxt)]
  for w in dist.batch_isend_irecv(ops):
    w.wait()
  _check(bad, "batch_isend_irecv from prev", a, value(prv, me + 100, k), dt)
  _check(bad, "batch_isend_irecv from next", b, value(nxt, me + 200, k), dt)
  return bad


def case_async(g, k):
  """async_op=True: Work.wait(), is_completed(), get_future() with the output list (what DDP reads)."""
  bad, me, n = [], g.rank, g.n
  t = _inp(me, 0, k, "sum", torch.float32)
  w = dist.all_reduce(t, async_op=True)
  fut = w.get_future()
  w.wait()
  if not w.is_completed():
    bad.append("all_reduce work not completed after wait()")
  val = fut.wait()
  if not (isinstance(val, list) and len(val) == 1 and val[0] is not None):
    bad.append(f"future value: {val!r}")
  else:
    _check(bad, "future value", val[0], ref_reduce(n, 0, k, "sum", torch.float32), torch.float32)
  _check(bad, "async all_reduce", t, ref_reduce(n, 0, k, "sum", torch.float32), torch.float32)
  # Async returns before the data moves: rank 0 calls while the last rank sleeps; its Work is not
  # completed until the last rank comes, and wait() then gives the sum.
  t = _inp(me, 5, k, "sum", torch.float32)
  if me == n - 1:
    time.sleep(1.0)
  t0 = time.monotonic()
  w = dist.all_reduce(t, async_op=True)
  secs, early = time.monotonic() - t0, w.is_completed()
  w.wait()
  if me == 0 and (secs > 0.5 or early):
    bad.append(f"async all_reduce returned after {secs:.2f} s, completed before the peer came: {early}")
  _check(bad, "async all_reduce with a late peer", t, ref_reduce(n, 5, k, "sum", torch.float32),
         torch.float32)
  # A forwarded async call (gloo: a bitwise op) followed by a relaycc call without a wait in between:
  # program order.
  b = _inp(me, 1, k, "sum", torch.int64)
  w1 = dist.all_reduce(b, op=R.BOR, async_op=True)
  dist.all_reduce(b)
  w1.wait()
  want = torch.zeros(k, dtype=torch.int64)
  for s in range(n):
    want |= _inp(s, 1, k, "sum", torch.int64)
  _check(bad, "all_reduce BOR (gloo, async) then all_reduce", b, want * n, torch.int64)
  # An async relaycc broadcast and reduce, then a wait on each.
  b = value(me, 2, k).float() if me == n - 1 else _poison(k, torch.float32)
  r = _inp(me, 3, k, "sum", torch.float32)
  wb, wr = dist.broadcast(b, n - 1, async_op=True), dist.reduce(r, 0, async_op=True)
  wr.wait()
  wb.wait()
  _check(bad, "async broadcast", b, value(n - 1, 2, k), torch.float32)
  _check(bad, "async reduce", r, ref_reduce(n, 3, k, "sum", torch.float32) if me == 0 else
         _inp(me, 3, k, "sum", torch.float32), torch.float32)
  # Several async relaycc calls, waited out of order.
  ts = [_inp(me, 10 + i, k, "sum", torch.float32) for i in range(3)]
  ws = [dist.all_reduce(t, async_op=True) for t in ts]
  for i in (2, 0, 1):
    ws[i].wait()
    _check(bad, f"async all_reduce {i}", ts[i], ref_reduce(n, 10 + i, k, "sum", torch.float32), torch.float32)
  return bad


def case_backend_facts(g):
  """relaycc serves this group (all ranks on one host) and its comm exists after a call."""
  from relaycc import torch_backend
  b = torch_backend.get_backend()
  # The creator's CUDA decision: WORLD ("relaycc") gives it CUDA tensors (on this GPU-less machine they
  # then go to gloo, voted); a "cpu:relaycc,cuda:gloo" group's CUDA tensors are gloo's by its spec.
  mixed = dist.new_group(backend="cpu:relaycc,cuda:gloo")
  return {"name": dist.get_backend(), "relay": b.relay_active, "comm": b.comm_created,
          "cpu_backend": type(b).__name__, "cuda": torch_backend.cuda_status(),
          "mixed_cuda": torch_backend.cuda_status(mixed), "mixed_name": dist.get_backend(mixed)}


def _relay_segments():
  """This process's mappings of relaycc torch-group segments (their names stay in /proc/self/maps after
  the unlink, with " (deleted)")."""
  with open("/proc/self/maps") as f:
    return sum(1 for line in f if "relaycc-torch-" in line)


def case_many_groups(g, count):
  """`count` new_group calls of the whole world: none creates a segment until it runs a call; each that
  ran one and is destroyed unmaps it; a dead group's memory is gone."""
  from relaycc import torch_backend
  bad, me, n = [], g.rank, g.n
  t0 = time.monotonic()
  before = _relay_segments()
  groups = [dist.new_group(list(range(n)), backend="relaycc") for _ in range(count)]
  secs = time.monotonic() - t0
  if _relay_segments() != before or any(torch_backend.get_backend(x).comm_created for x in groups):
    bad.append(f"{count} idle groups created segments: {_relay_segments() - before}")
  for i, x in enumerate(groups[:4]):
    t = _inp(me, i, 7, "sum", torch.float32)
    dist.all_reduce(t, group=x)
    _check(bad, f"group {i} all_reduce", t, ref_reduce(n, i, 7, "sum", torch.float32), torch.float32)
  if _relay_segments() <= before:
    bad.append("groups that ran a call hold no segment")
  for x in groups:
    dist.destroy_process_group(x)
  if _relay_segments() != before:
    bad.append(f"destroyed groups left {_relay_segments() - before} mappings")
  if os.path.isdir("/dev/shm"):
    left = [f for f in os.listdir("/dev/shm") if f.startswith("relaycc-torch-")]
    if left:
      bad.append(f"segments left in /dev/shm: {left}")
  return bad, secs


def case_disjoint_subgroups(g, k):
  """Two disjoint subgroups (even and odd ranks) run their calls at the same time; then a DeviceMesh 2 x
  (n/2) whose dimensions are relaycc groups."""
  from torch.distributed.device_mesh import init_device_mesh
  bad, me, n = [], g.rank, g.n
  evens, odds = list(range(0, n, 2)), list(range(1, n, 2))
  ge = dist.new_group(evens, backend="relaycc")
  go = dist.new_group(odds, backend="relaycc")
  mine, grp = (evens, ge) if me % 2 == 0 else (odds, go)
  for rep in range(3):
    t = value(me, rep, k).float()
    dist.all_reduce(t, group=grp)
    _check(bad, f"subgroup {mine} all_reduce {rep}", t, sum(value(s, rep, k) for s in mine), torch.float32)
    outs = [_poison(k, torch.float32) for _ in mine]
    dist.all_gather(outs, value(me, rep + 5, k).float(), group=grp)
    for i, s in enumerate(mine):
      _check(bad, f"subgroup {mine} all_gather from {s}", outs[i], value(s, rep + 5, k), torch.float32)
    # Group ranks vs global ranks: broadcast from the subgroup's second member.
    b = value(me, 9, k).float() if me == mine[-1] else _poison(k, torch.float32)
    dist.broadcast(b, src=mine[-1], group=grp)
    _check(bad, f"subgroup {mine} broadcast", b, value(mine[-1], 9, k), torch.float32)
  mesh = init_device_mesh("cpu", (2, n // 2), mesh_dim_names=("dp", "tp"))
  for dim in ("dp", "tp"):
    pg = mesh.get_group(dim)
    members = dist.get_process_group_ranks(pg)
    t = value(me, 20, k).float()
    dist.all_reduce(t, group=pg)
    _check(bad, f"mesh {dim} {members}", t, sum(value(s, 20, k) for s in members), torch.float32)
    if dist.get_backend(pg) != "relaycc":
      bad.append(f"mesh dim {dim} backend {dist.get_backend(pg)}")
  return bad


# ---- training ---------------------------------------------------------------------------------------

def _model():
  torch.manual_seed(0)
  nn = torch.nn
  return nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 16), nn.ReLU(), nn.Linear(16, 4))


def _batches(n, steps, per_rank=4):
  g = torch.Generator().manual_seed(1)
  return [(torch.randn(n * per_rank, 8, generator=g), torch.randn(n * per_rank, 4, generator=g))
          for _ in range(steps)]


def _reference(n, steps):
  """Single-process training on the whole batch (mean loss): what data parallelism must equal."""
  model = _model()
  opt = torch.optim.SGD(model.parameters(), lr=0.1)
  for x, y in _batches(n, steps):
    opt.zero_grad()
    torch.nn.functional.mse_loss(model(x), y).backward()
    opt.step()
  return [p.detach().clone() for p in model.parameters()]


def case_ddp(g, steps):
  from torch.nn.parallel import DistributedDataParallel as DDP
  me, n = g.rank, g.n
  model = DDP(_model())
  opt = torch.optim.SGD(model.parameters(), lr=0.1)
  for x, y in _batches(n, steps):
    opt.zero_grad()
    xs, ys = x.chunk(n)[me], y.chunk(n)[me]
    torch.nn.functional.mse_loss(model(xs), ys).backward()
    opt.step()
  ref = _reference(n, steps)
  return max((p.detach() - q).abs().max().item() for p, q in zip(model.parameters(), ref))


def _fsdp_model():
  from torch.distributed.fsdp import fully_shard
  model = _model()
  for layer in model:
    if isinstance(layer, torch.nn.Linear):
      fully_shard(layer)
  fully_shard(model)
  return model


def case_fsdp2(g, steps, ckpt_dir):
  """FSDP2 training equal to the reference; then DCP save, load into a fresh sharded model, equal again."""
  import torch.distributed.checkpoint as dcp
  me, n = g.rank, g.n
  model = _fsdp_model()
  opt = torch.optim.SGD(model.parameters(), lr=0.1)
  for x, y in _batches(n, steps):
    opt.zero_grad()
    xs, ys = x.chunk(n)[me], y.chunk(n)[me]
    torch.nn.functional.mse_loss(model(xs), ys).backward()
    opt.step()
  ref = _reference(n, steps)
  full = [p.full_tensor().detach() for p in model.parameters()]
  err = max((p - q).abs().max().item() for p, q in zip(full, ref))
  dcp.save(model.state_dict(), checkpoint_id=ckpt_dir)
  fresh = _fsdp_model()
  with torch.no_grad():
    for p in fresh.parameters():
      p.to_local().fill_(POISON)
  sd = fresh.state_dict()
  dcp.load(sd, checkpoint_id=ckpt_dir)
  fresh.load_state_dict(sd)
  loaded = [p.full_tensor().detach() for p in fresh.parameters()]
  dcp_err = max((p - q).abs().max().item() for p, q in zip(loaded, full))
  return err, dcp_err


# ---- failures ----------------------------------------------------------------------------------------

def _timed(fn):
  t0 = time.monotonic()
  try:
    fn()
  except Exception as e:  # noqa: BLE001
    return type(e).__name__, time.monotonic() - t0, str(e)
  return "none", time.monotonic() - t0, ""


def case_silent_rank(g, timeout_s):
  """A group with a short timeout; its last rank never calls: the others raise DistBackendError naming
  their rank and the op within the deadline (and no rank hangs)."""
  me, n = g.rank, g.n
  grp = dist.new_group(list(range(n)), backend="relaycc", timeout=datetime.timedelta(seconds=timeout_s))
  t = torch.ones(8)
  dist.all_reduce(t, group=grp)  # the comm exists on every rank
  if me == n - 1:
    return None
  return _timed(lambda: dist.all_reduce(t, group=grp))


def case_killed_rank(g, timeout_s):
  """The last rank dies before a call: the survivors raise DistBackendError within the deadline, on the
  next call too."""
  me, n = g.rank, g.n
  grp = dist.new_group(list(range(n)), backend="relaycc", timeout=datetime.timedelta(seconds=timeout_s))
  t = torch.ones(8)
  dist.all_reduce(t, group=grp)
  if me == n - 1:
    os._exit(3)
  time.sleep(0.5)
  res = [_timed(lambda: dist.all_reduce(t, group=grp))]
  res.append(_timed(lambda: dist.all_gather_into_tensor(torch.empty(8 * n), t, group=grp)))
  return res


def case_abort(g):
  """abort() on a group wakes nothing stuck here, and the group's next call raises instead of hanging."""
  me, n = g.rank, g.n
  grp = dist.new_group(list(range(n)), backend="relaycc", timeout=datetime.timedelta(seconds=60))
  t = torch.ones(4)
  dist.all_reduce(t, group=grp)
  from relaycc import torch_backend
  torch_backend.get_backend(grp).abort()
  return _timed(lambda: dist.all_reduce(t, group=grp))


def error_state(grp):
  """The group's error state by name: the backend's `error_state` (every torch) and, where this torch binds
  it (2.15; 2.11 does not), torch's `get_error()`, which must say the same (else the answer says both)."""
  from relaycc import torch_backend
  b = torch_backend.get_backend(grp)
  state = b.error_state
  if hasattr(b, "get_error") and b.get_error().name != state:
    return f"get_error() {b.get_error().name} but error_state {state}"
  return state


def case_reject(g, timeout_s):
  """Rank 0's all_to_all_single breaks the contract (4n + 1 elements at n ranks): it rejects the call through
  the C core, so it raises at once and its peers raise too, not at their deadline. Its shape differs from
  the peers' (a shape error: README "After a rejected call"), so the group's comm is failed after it: the
  next call raises on every rank at once too, and never computes a wrong result."""
  me, n = g.rank, g.n
  grp = dist.new_group(list(range(n)), backend="relaycc", timeout=datetime.timedelta(seconds=timeout_s))
  dist.all_reduce(torch.ones(2), group=grp)
  k = 4 * n + 1 if me == 0 else 4 * n
  out = _poison(k, torch.float32)
  first = _timed(lambda: dist.all_to_all_single(out, torch.ones(k), group=grp))
  t = value(me, 0, 6).float()
  second = _timed(lambda: dist.all_reduce(t, group=grp))
  state = error_state(grp)
  return first, second, torch.equal(t.double(), sum(value(s, 0, 6) for s in range(n))), state


def case_reject_usable(g, timeout_s, checked):
  """A call rejected through the C core in a way that keeps the ranks in one lockstep leaves the group
  usable: the next call is right on every rank (issue 37 item 4).
  checked=False: rank 0's all_gather_into_tensor output has one element too many: it rejects with the
  shape a valid call passes (its input's count, the peers' too: a buffer error, README "After a rejected
  call"); it raises, the ranks that receive from it raise (relayRemoteError), the comm is not failed.
  checked=True (RELAYCC_CHECK=1, read when the group's comm is made): case_reject's all_to_all_single whose
  shape differs on rank 0; the agreement round fails it on every rank before anything moves."""
  me, n = g.rank, g.n
  if checked:
    os.environ["RELAYCC_CHECK"] = "1"
  try:
    grp = dist.new_group(list(range(n)), backend="relaycc", timeout=datetime.timedelta(seconds=timeout_s))
    dist.all_reduce(torch.ones(2), group=grp)  # the comm is made here, with the setting
  finally:
    os.environ.pop("RELAYCC_CHECK", None)
  if checked:
    k = 4 * n + 1 if me == 0 else 4 * n
    out = _poison(k, torch.float32)
    first = _timed(lambda: dist.all_to_all_single(out, torch.ones(k), group=grp))
  else:
    k = 6
    out = _poison(k * n + (1 if me == 0 else 0), torch.float32)
    first = _timed(lambda: dist.all_gather_into_tensor(out, value(me, 0, k).float(), group=grp))
  t = value(me, 0, 6).float()
  second = _timed(lambda: dist.all_reduce(t, group=grp))
  state = error_state(grp)
  return first, second, torch.equal(t.double(), sum(value(s, 0, 6) for s in range(n))), state


def case_abort_wakes_peers(g):
  """relaycc.torch_backend.abort(group) on rank 0 while its peers wait in a call rank 0 never makes: the
  peers' calls end with DistBackendError at once (relayCommAbort marks the comm failed and the peers see
  it), not at the group's 60 s deadline."""
  me, n = g.rank, g.n
  grp = dist.new_group(list(range(n)), backend="relaycc", timeout=datetime.timedelta(seconds=60))
  dist.all_reduce(torch.ones(4), group=grp)
  from relaycc import torch_backend
  if me == 0:
    time.sleep(1.0)
    torch_backend.abort(grp)
    return _timed(lambda: dist.all_reduce(torch.ones(4), group=grp))
  return _timed(lambda: dist.all_reduce(torch.ones(4), group=grp))


def case_shutdown(g):
  """relaycc.torch_backend.shutdown(group) after every rank's last call: the comms are destroyed and the
  group's next call raises DistBackendError at once (never a hang or a wrong result)."""
  me, n = g.rank, g.n
  grp = dist.new_group(list(range(n)), backend="relaycc", timeout=datetime.timedelta(seconds=60))
  t = torch.ones(4)
  dist.all_reduce(t, group=grp)
  right = torch.equal(t, torch.full((4,), float(n)))
  from relaycc import torch_backend
  torch_backend.shutdown(grp)
  return right, _timed(lambda: dist.all_reduce(t, group=grp))
