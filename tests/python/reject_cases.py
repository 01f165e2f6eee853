"""One rank's side of the rejection tests (test_reject.py; the pool's workers import this, so no pytest):
calls whose arguments this rank's Python layer finds bad, beside good calls, and what each rank saw.

A call is a dict made in the test process (the same on every rank): the collective, its shape (layout or
rank set and root, counts, dtype, op, in place), and `bad`: {rank: kind} for the ranks that get a bad
argument of that kind. run_calls() makes this rank's call, good or bad, with fresh inputs that encode
source, destination and position (common.value) and poisoned outputs, and reports: raised or not, the
error's code and text, the output, and whether the rank's input and (after an error) its output are what
they were before the call."""
import torch

import relaycc
from cases import _poison, _where
from common import value
from relaycc import RelayccError

LAYOUT = ("all_reduce", "reduce_scatter", "all_gather", "all_to_all")
ROOTED = ("scatter", "gather")
# Kinds of bad argument. BUFFER: the call's shape stays valid (C's buffer-error path: this rank runs its part
# through scratch); SHAPE: the shape is what is wrong (C's shape-error path).
BUFFER = ("dtype", "contiguous", "size", "none", "given", "inplace")
SHAPE = ("op", "counts", "unsupported", "root", "layout")
# What the rank's own error says (a part of this layer's reason, which the library's text carries).
SAYS = {
    "dtype": "has dtype torch.",
    "contiguous": "is not contiguous",
    "size": "elements, the call needs",
    "none": "is None, but",
    "given": "is given, but",
    "inplace": "in-place all-to-all is not supported",
    "op": "op 'bogus' is not one of",
    "counts": "counts must be a list of",
    "unsupported": "torch.complex64",
    "root": "root 'x' is not a comm rank",
    "layout": "holds 'x', not a comm rank",
}

_comms = {}


def comm_for(base, job, check):
  """This rank's comm for (job, check mode): made on first use by every rank alike (the tasks run in the same
  order on every rank); 20 s deadline: a wait that long is a failure here, every error is prompt."""
  key = (job, check)
  if key not in _comms:
    _comms[key] = relaycc.Comm.shm(rank=base.rank, world_size=base.size, job=f"{job}-c{check}", check=check,
                                   timeout_ms=20000)
  return _comms[key]


def drop(base, job, check):
  c = _comms.pop((job, check), None)
  if c is not None:
    c.abort()  # a failed comm's peers may be gone already: abort does not wait for them
  return True


def roles(call, r):
  """(sends a tensor, receives into one) for rank r in call: what its role uses."""
  if call["coll"] in ROOTED:
    member = r in call["ranks"]
    root = r == call["root"]
    return (root, member) if call["coll"] == "scatter" else (member, root)
  g, _ = _where(call["layout"], r)
  return g >= 0, g >= 0


def _good(call, r):
  """This rank's good arguments: (send, recv, in place) with send/recv None where the role has none."""
  dt, op, coll = getattr(torch, call["dtype"]), call["op"], call["coll"]
  if coll in ROOTED:
    ranks, counts, root = call["ranks"], call["counts"], call["root"]
    idx = ranks.index(r) if r in ranks else -1
    off = [sum(counts[:k]) for k in range(len(ranks))]
    inplace = call["in_place"] and r == root and idx >= 0
    if coll == "scatter":
      send = torch.cat([value(root, k, counts[k]) for k in range(len(ranks))]).to(dt) if r == root else None
      recv = None
      if idx >= 0:
        recv = send[off[idx]:off[idx] + counts[idx]] if inplace else _poison(counts[idx], dt)
      return send, recv, inplace
    recv = _poison(sum(counts), dt) if r == root else None
    send = value(r, root, counts[idx]).to(dt) if idx >= 0 else None
    if inplace:
      recv[off[idx]:off[idx] + counts[idx]] = send
      send = recv[off[idx]:off[idx] + counts[idx]]
    return send, recv, inplace
  layout, counts = call["layout"], call["counts"]
  g, i = _where(layout, r)
  if g < 0:
    return None, None, False
  c, a = counts[g], len(layout[g])
  inplace = call["in_place"] and coll != "all_to_all"
  if coll == "all_reduce":
    x = value(r, g, c, op).to(dt)
    return x, (x if inplace else _poison(c, dt)), inplace
  if coll == "reduce_scatter":
    x = torch.cat([value(r, g * 8 + j, c, op) for j in range(a)]).to(dt)
    return x, (x[i * c:(i + 1) * c] if inplace else _poison(c, dt)), inplace
  if coll == "all_gather":
    mine = value(r, g, c).to(dt)
    out = _poison(a * c, dt)
    if inplace:
      out[i * c:(i + 1) * c] = mine
      return out[i * c:(i + 1) * c], out, True
    return mine, out, False
  return torch.cat([value(r, g * 8 + j, c) for j in range(a)]).to(dt), _poison(a * c, dt), False


def _spoil(kind, t):
  """The tensor a bad argument of `kind` puts in t's place (the same values where it can)."""
  if kind == "dtype":
    return t.to(torch.float64 if t.dtype != torch.float64 else torch.float32)
  if kind == "contiguous":
    wide = torch.zeros(2 * t.numel(), dtype=t.dtype)
    wide[::2] = t
    return wide[::2]
  if kind == "size":
    return torch.cat([t, torch.zeros(3, dtype=t.dtype)])
  raise AssertionError(kind)


def kinds_for(call, r):
  """The kinds of bad argument rank r can make in call (a kind needs what it spoils)."""
  sends, recvs = roles(call, r)
  has = sends or recvs
  out = ["counts", "unsupported", "layout"]
  out += ["op"] if call["coll"] in ("all_reduce", "reduce_scatter") else []
  out += ["root"] if call["coll"] in ROOTED else []
  out += ["dtype", "size", "none"] if has else ["given"]
  if call["coll"] == "all_to_all" and has:
    out.append("inplace")
  if call["coll"] in ROOTED and has and not (sends and recvs):
    out.append("given")  # the tensor of the role it does not have
  send, recv, _ = _good(call, r)
  if any(t is not None and t.numel() >= 2 for t in (send, recv)):
    out.append("contiguous")
  return out


def _args(call, r, kind):
  """This rank's arguments: (send, recv, keyword changes, tensors to compare after the call)."""
  spoils = kind in ("dtype", "contiguous", "size")
  # A spoilt tensor is this rank's own send or recv, so its call is out of place (in place is per rank).
  send, recv, _ = _good(dict(call, in_place=False) if spoils else call, r)
  kw = {}
  if spoils:
    if send is not None and (kind != "contiguous" or send.numel() >= 2):
      send = _spoil(kind, send)
    else:
      recv = _spoil(kind, recv)
  elif kind == "none":
    if send is not None:
      send = None
    else:
      recv = None
  elif kind == "given":
    if send is None:
      send = torch.zeros(4, dtype=getattr(torch, call["dtype"]))
    else:
      recv = torch.zeros(4, dtype=getattr(torch, call["dtype"]))
  elif kind == "inplace":
    recv = send
  elif kind == "op":
    kw["op"] = "bogus"
  elif kind == "counts":
    kw["counts"] = list(call["counts"]) + [1]
  elif kind == "unsupported":
    kw["dtype"] = torch.complex64
  elif kind == "root":
    kw["root"] = "x"
  elif kind == "layout":
    if call["coll"] in ROOTED:
      kw["ranks"] = list(call["ranks"]) + ["x"]
    else:
      kw["layout"] = [list(call["layout"][0]) + ["x"]] + [list(g) for g in call["layout"][1:]]
  return send, recv, kw


def _invoke(call, comm, send, recv, kw):
  coll, dt = call["coll"], getattr(torch, call["dtype"])
  dtype = kw.get("dtype", dt)
  counts = kw.get("counts", call["counts"])
  op = kw.get("op", call["op"])
  if coll in ROOTED:
    fn = relaycc.scatter if coll == "scatter" else relaycc.gather
    return fn(send, recv, kw.get("root", call["root"]), kw.get("ranks", call["ranks"]), counts, comm=comm,
              dtype=dtype)
  layout = kw.get("layout", call["layout"])
  if coll == "all_reduce":
    inplace = send is not None and send is recv
    return relaycc.all_reduce(send, layout, op, comm=comm, out=None if inplace else recv, counts=counts,
                              dtype=dtype)
  if coll == "reduce_scatter":
    return relaycc.reduce_scatter(send, recv, layout, op, comm=comm, counts=counts, dtype=dtype)
  return getattr(relaycc, coll)(send, recv, layout, comm=comm, counts=counts, dtype=dtype)


def _overlap(a, b):
  a0, b0 = a.data_ptr(), b.data_ptr()
  return a0 < b0 + b.numel() * b.element_size() and b0 < a0 + a.numel() * a.element_size()


def one_call(comm, call):
  """This rank's part of call. -> {"raised", "code", "msg", "out", "input_kept", "output_kept", "kind"}."""
  r = comm.rank
  kind = call["bad"].get(r)
  send, recv, kw = _args(call, r, kind)
  keep_send = send.clone() if send is not None else None
  keep_recv = recv.clone() if recv is not None else None
  raised, code, msg = False, None, ""
  try:
    _invoke(call, comm, send, recv, kw)
  except RelayccError as e:
    raised, code, msg = True, e.code, str(e)
  in_place = send is not None and recv is not None and _overlap(send, recv)
  # The input must not change (in place, it is the output: checked with it).
  input_kept = in_place or send is None or torch.equal(send, keep_send)
  output_kept = recv is None or torch.equal(recv, keep_recv)
  out = None
  if roles(call, r)[1] and recv is not None:
    out = recv.clone()
  return {"raised": raised, "code": code, "msg": msg, "out": out, "input_kept": input_kept,
          "output_kept": output_kept, "kind": kind}


def run_calls(base, job, check, calls):
  comm = comm_for(base, job, check)
  return [one_call(comm, c) for c in calls]
