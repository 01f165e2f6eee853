"""The collectives on torch tensors: the Python functions, and the torch ops (torch.ops.relaycc.*) that
torch.compile traces.

One call, one lockstep (CONTRIBUTING.md): this layer never rejects a call on its own. Each check below
(a tensor's dtype, contiguity, device or size, a counts list of the wrong length, an unknown op, a None
where this rank's role needs a tensor, ...) only records why; the call then goes to the C library, as
the collective when nothing was found, else as relayCallReject with the call's shape as this rank read
it and that reason. So a bad call counts on this rank as on its peers, and the peers see what they see
when a C caller passes a bad argument (README "After a rejected call"); the error raised is the
library's (`.code`, its text naming the argument and the rank). Only a call without a comm (comm=None, a
destroyed comm) raises here: there is nothing to take part in.

Eager calls go to the library straight through ctypes, on the caller's own tensors (in place where the
call is): no dispatcher, so nothing imported lazily (the compiler stack: 2-12 s) runs inside a call's
deadline. Under torch.compile (and any tracing: a torch dispatch mode on the stack) each call is a torch
op instead:
- functional: it returns its output, which the wrapper copies into the caller's tensor, and it is
  registered with the ORDERED effect (torch._higher_order_ops.effects). AOTAutograd then threads one
  effect token through every relaycc call (with_effects), so a compiled graph keeps relaycc's calls in
  program order against each other and against every other effectful op, and never drops a helper's
  call (which has no output) as dead code. torch's own _c10d_functional collectives are not effectful
  (torch 2.15: their effect is None; inductor orders them among themselves by its comm-ordering pass),
  so nothing that torch.library offers orders a custom op against them: between a relaycc call and a
  torch.distributed collective the order is the graph's, which inductor keeps unless a reordering pass
  (reorder_for_compute_comm_overlap, off by default) moves collectives.
- the comm handle, layout, counts, dtype code and op code are ints and int lists: constants in a graph.
On CUDA tensors a call enqueues on torch.cuda.current_stream() and never host-synchronizes.
"""
import ctypes
import operator
from typing import List, Optional

import torch

from . import _lib
from ._lib import COLLECTIVES, DTYPES, OPS, bad_argument

Tensor = torch.Tensor
# Which calls reduce, which take a rank set and a comm-rank root (scatter, gather), which a layout and a
# root position in each group (broadcast, reduce): the library's table of collectives says
# (relayGetCollectiveInfo).
REDUCING = tuple(n for n, i in _lib.COLLECTIVE_INFO.items() if i.reduces)
ROOTED = tuple(n for n, i in _lib.COLLECTIVE_INFO.items() if i.kind == "relayKindRootedRank")
POSITIONED = tuple(n for n, i in _lib.COLLECTIVE_INFO.items() if i.kind == "relayKindRootedPosition")
# Point-to-point and per-peer calls (send, recv, all_to_all_v): their own arguments (relaycc.h).
PT2PT = tuple(n for n, i in _lib.COLLECTIVE_INFO.items() if i.kind == "relayKindPointToPoint")
PER_PEER = tuple(n for n, i in _lib.COLLECTIVE_INFO.items() if i.kind == "relayKindPerPeer")
OP_NAMES = tuple(COLLECTIVES)  # the torch ops, one per collective, in relayCollective_t's order

# handle -> Comm: an op gets the handle as an int; from it, the comm's device and its call count.
comms = {}

# ctypes arrays per layout and counts: a call signature repeats, and building them costs ~5 us a call.
_layout_cache = {}
_counts_cache = {}
_ranks_cache = {}
_CACHE_MAX = 4096


def _cached(cache, key, make):
  v = cache.get(key)
  if v is None:
    if len(cache) >= _CACHE_MAX:
      cache.clear()
    v = cache[key] = make()
  return v


def _c_layout(ranks, n_groups):
  """relayLayout_t of n_groups groups over ranks (a rooted call's set: one group); None: NULL."""
  if n_groups < 1:
    return None

  def make():
    arr = (ctypes.c_int * len(ranks))(*ranks)
    return (_lib.RelayLayout(n_groups, len(ranks) // n_groups, arr), arr)  # arr kept alive with the struct

  return ctypes.byref(_cached(_layout_cache, (tuple(ranks), n_groups), make)[0])


def _c_counts(counts):
  if counts is None:
    return None
  return _cached(_counts_cache, tuple(counts), lambda: (ctypes.c_size_t * len(counts))(*counts))


def _c_ranks(ranks):
  return _cached(_ranks_cache, tuple(ranks), lambda: (ctypes.c_int * len(ranks))(*ranks))


def _ptr(t):
  return t.data_ptr() if t is not None else None


def _device_of(handle):
  c = comms.get(handle)
  return c.device if c is not None else torch.device("cpu")


def _stream(handle):
  dev = _device_of(handle)
  return torch.cuda.current_stream(dev).cuda_stream if dev.type == "cuda" else None


def _counted(handle):
  c = comms.get(handle)
  if c is not None:
    c.calls += 1


# ---- the two calls into the library: a collective, a rejected one ---------------------------------------


def _c_call(name, send, recv, handle, ranks, n_groups, counts, dtype, op, root):
  """One C collective (relayAllReduce, ...) on these buffers (None: NULL); raises its error."""
  _counted(handle)
  L, s, r, cnt, st = _lib.lib, _ptr(send), _ptr(recv), _c_counts(counts), _stream(handle)
  # The C function and its argument list follow from the collective's row: its name, its kind, whether it
  # reduces (an op argument).
  info = _lib.COLLECTIVE_INFO[name]
  fn = getattr(L, info.call)
  if name in ROOTED:
    res = fn(s, r, cnt, dtype, root, _c_ranks(ranks), len(ranks), handle, st)
  elif name in POSITIONED:
    res = fn(s, r, cnt, dtype, *([op] if info.reduces else []), root, _c_layout(ranks, n_groups), handle, st)
  elif name in PT2PT:  # counts: [count]; root: the peer; the one buffer is send's or recv's
    res = fn(s if s is not None else r, counts[0], dtype, root, handle, st)
  elif name in PER_PEER:  # counts: sendcounts + recvcounts, blocks back to back (torchcomms' splits)
    a = len(ranks)
    sc, rc = (counts[:a], counts[a:]) if counts else (None, None)  # a rank outside the group: NULL
    sd = [sum(sc[:j]) for j in range(a)] if sc else None
    rd = [sum(rc[:j]) for j in range(a)] if rc else None
    res = fn(s, _c_counts(sc), _c_counts(sd), r, _c_counts(rc), _c_counts(rd), dtype, _c_layout(ranks, 1),
             handle, st)
  elif info.reduces:
    res = fn(s, r, cnt, dtype, op, _c_layout(ranks, n_groups), handle, st)
  else:
    res = fn(s, r, cnt, dtype, _c_layout(ranks, n_groups), handle, st)
  _lib.check(res, handle)


def _c_reject(name, handle, ranks, n_groups, counts, dtype, op, root, reason):
  """relayCallReject: the call as this rank read it (n_groups 0: no layout; counts None: none; -1: a
  dtype, op or root it could not read), with the reason. Always raises the library's error."""
  _counted(handle)
  res = _lib.lib.relayCallReject(COLLECTIVES[name], _c_counts(counts), dtype, op, _c_layout(ranks, n_groups),
                                 root, reason.encode(errors="replace"), handle, _stream(handle))
  _lib.check(res, handle)
  raise _lib.error(_lib.INTERNAL_ERROR, f"relayCallReject returned success for: {reason}")


# ---- the ops (the traced path) ------------------------------------------------------------------------


def _output(like):
  # A rank with no output (a helper) returns an empty tensor: an op with the effect keeps it anyway.
  return torch.empty(0) if like is None else torch.empty_like(like)


def _layout_op(name):

  def run(send: Optional[Tensor], like: Optional[Tensor], comm: int, ranks: List[int], n_groups: int,
          counts: List[int], dtype: int, op: int) -> Tensor:
    out = _output(like)
    _c_call(name, send, None if like is None else out, comm, ranks, n_groups, counts, dtype, op, 0)
    return out

  return run


def _rooted_op(name):

  def run(send: Optional[Tensor], like: Optional[Tensor], comm: int, root: int, ranks: List[int],
          counts: List[int], dtype: int) -> Tensor:
    out = _output(like)
    _c_call(name, send, None if like is None else out, comm, ranks, 1, counts, dtype, 0, root)
    return out

  return run


def _send_op(send: Tensor, comm: int, peer: int, count: int, dtype: int) -> Tensor:
  _c_call("send", send, None, comm, [], 0, [count], dtype, 0, peer)
  return torch.empty(0)


def _recv_op(like: Tensor, comm: int, peer: int, count: int, dtype: int) -> Tensor:
  out = _output(like)
  _c_call("recv", None, out, comm, [], 0, [count], dtype, 0, peer)
  return out


def _per_peer_op(name):

  def run(send: Optional[Tensor], like: Optional[Tensor], comm: int, ranks: List[int], counts: Optional[List[int]],
          dtype: int) -> Tensor:
    out = _output(like)
    _c_call(name, send, None if like is None else out, comm, ranks, 1, counts, dtype, 0, 0)
    return out

  return run


def _positioned_op(name):

  def run(send: Optional[Tensor], like: Optional[Tensor], comm: int, ranks: List[int], n_groups: int,
          counts: List[int], dtype: int, op: int, root: int) -> Tensor:
    out = _output(like)
    _c_call(name, send, None if like is None else out, comm, ranks, n_groups, counts, dtype, op, root)
    return out

  return run


def _reject_op(comm: int, coll: int, ranks: List[int], n_groups: int, counts: Optional[List[int]], dtype: int,
               op: int, root: int, reason: str) -> None:
  _c_reject(OP_NAMES[coll], comm, ranks, n_groups, counts, dtype, op, root, reason)


def _register():
  try:
    from torch._higher_order_ops.effects import _EffectType, _register_effectful_op
  except ImportError as e:  # torch < 2.3
    raise ImportError(f"relaycc needs torch's effect registration (torch._higher_order_ops.effects): {e}") from e

  def make(n):
    if n in PT2PT:
      return _send_op if COLLECTIVE_SENDS[n] else _recv_op
    return (_rooted_op if n in ROOTED else _positioned_op if n in POSITIONED else
            _per_peer_op if n in PER_PEER else _layout_op)(n)

  ops = [(n, make(n)) for n in OP_NAMES] + [("reject", _reject_op)]
  for name, fn in ops:
    opdef = torch.library.custom_op(f"relaycc::{name}", fn, mutates_args=())
    if name == "reject":
      opdef.register_fake(lambda *args: None)
    elif fn is _send_op:
      opdef.register_fake(lambda *args: torch.empty(0))
    elif fn is _recv_op:
      opdef.register_fake(lambda like, *rest: _output(like))
    else:
      opdef.register_fake(lambda send, like, *rest: _output(like))
    _register_effectful_op(getattr(torch.ops.relaycc, name).default, _EffectType.ORDERED)


# Which point-to-point row sends: relaySend's (its NCCL twin is ncclSend).
COLLECTIVE_SENDS = {n: (_lib.COLLECTIVE_INFO[n].nccl_name or "").endswith("Send") for n in PT2PT}

_register()


def _tracing():
  """torch.compile tracing, or a dispatch mode (make_fx, FakeTensorMode): the op path."""
  if torch.compiler.is_compiling():
    return True
  stack = getattr(torch._C, "_len_torch_dispatch_stack", None)
  return stack is not None and stack() > 0


# ---- argument checks: each records a reason, none raises ----------------------------------------------


class _Call:
  """One call as this rank reads it: `reason` is the first thing found wrong (None: nothing)."""

  def __init__(self, comm):
    self.comm = comm
    self.reason = None

  def bad(self, why):
    if self.reason is None:
      self.reason = why


def _need_comm(comm, fn):
  # The one rejection of this layer alone: without a comm there is no call to take part in.
  if comm is None or not getattr(comm, "handle", 0):
    raise bad_argument(f"{fn}: comm is {'None' if comm is None else 'destroyed'}; pass comm=relaycc.Comm...")
  return comm


def _index(x):
  """An int from an int-like (int, numpy integer, integer 0-d tensor); None for anything else (a bool too)."""
  if type(x) is int:
    return x
  if isinstance(x, bool):
    return None
  try:
    return operator.index(x)
  except TypeError:
    return None


def _seq(x):
  """A list from a list, a tuple or an array (numpy, torch); None for anything else."""
  if isinstance(x, (list, tuple)):
    return list(x)
  if hasattr(x, "tolist") and not isinstance(x, (str, bytes)) and getattr(x, "ndim", 0) >= 1:
    return x.tolist()
  return None


def _parse_layout(chk, layout, name="layout"):
  """-> (flat ranks or None when unread, n_groups, n_active, my group or -1, my index or -1)."""
  groups = _seq(layout)
  if not groups:
    chk.bad(f"{name} must be a non-empty list of groups (lists of comm ranks), not {layout!r}")
    return None, 0, 0, -1, -1
  flat = []
  width = None
  for g, grp in enumerate(groups):
    members = _seq(grp)
    if members is None:
      chk.bad(f"{name}[{g}] must be a list of comm ranks, not {grp!r}")
      return None, 0, 0, -1, -1
    if width is None:
      width = len(members)
    elif len(members) != width:
      chk.bad(f"{name}[{g}] has {len(members)} ranks, {name}[0] has {width}: every group has the same number "
              "of active ranks")
      return None, 0, 0, -1, -1
    for q in members:
      v = _index(q)
      if v is None:
        chk.bad(f"{name}[{g}] holds {q!r}, not a comm rank")
        return None, 0, 0, -1, -1
      flat.append(v)
  me = chk.comm.rank
  mine = flat.index(me) if me in flat else -1
  if width == 0:
    return flat, len(groups), 0, -1, -1
  return flat, len(groups), width, (mine // width if mine >= 0 else -1), (mine % width if mine >= 0 else -1)


def _tensors(chk, pairs):
  """The (name, tensor or None) pairs with anything not a tensor recorded and dropped (None)."""
  out = []
  for n, t in pairs:
    if t is not None and not isinstance(t, torch.Tensor):
      chk.bad(f"{n} is a {type(t).__name__}, not a torch.Tensor or None")
      t = None
    out.append((n, t))
  return out


def _dtype_code(chk, dtype, pairs):
  """The call's datatype code: `dtype`, else the rank's first tensor's; the tensors must have it. None:
  none could be read."""
  dt = dtype
  if dt is not None and not isinstance(dt, torch.dtype):
    chk.bad(f"dtype {dt!r} is not a torch.dtype")
    return None
  for n, t in pairs:
    if t is None:
      continue
    if dt is None:
      dt = t.dtype
    elif t.dtype != dt:
      chk.bad(f"{n} has dtype {t.dtype}, the call's dtype is {dt}")
  if dt is None:
    chk.bad("dtype is required on a rank with no tensor in the call (a helper)")
    return None
  code = DTYPES.get(dt)
  if code is None:
    chk.bad(f"dtype {dt} is not supported (relaycc has {', '.join(str(d).replace('torch.', '') for d in DTYPES)})")
  return code


# torch.distributed.ReduceOp's spellings that are not relaycc's (relayRedOp_t: "sum", "prod", ...).
_TORCH_OP_NAMES = {"product": "prod"}


def _op_code(chk, op):
  """relayRedOp_t from "sum", ..., a torch.distributed.ReduceOp (its RedOpType, or an instance of the class
  holding one in .op) or torchcomms' ops (a .name). None: not an op."""
  key = op
  if not isinstance(op, str):
    inner = getattr(op, "op", op)  # dist.ReduceOp(dist.ReduceOp.MAX).op is RedOpType.MAX
    key = getattr(inner, "name", None) or str(inner).split(".")[-1]
  key = _TORCH_OP_NAMES.get(str(key).lower(), str(key).lower())
  code = OPS.get(key)
  if code is None:
    chk.bad(f"op {op!r} is not one of {', '.join(OPS)}")
  return code


def _counts(chk, counts, n, implied, per="group", name="counts"):
  """The call's counts: `counts` (n of them; n None: the layout unread, so unchecked), or the caller's
  own count for every group (`implied`, None when this rank has none). None: none could be read."""
  if counts is None:
    if implied is None:
      chk.bad(f"{name} is required on a rank with no tensor to give it (a helper): one element count per {per}")
      return None
    return [implied] * n if n is not None else None
  seq = _seq(counts)
  if seq is None or (n is not None and len(seq) != n):
    chk.bad(f"{name} must be a list of {n} counts (one per {per}), not {counts!r}")
    return None
  out = []
  for g, c in enumerate(seq):
    v = _index(c)
    if v is None or v < 0:
      chk.bad(f"{name}[{g}] = {c!r} is not a count (an int >= 0)")
      return None
    out.append(v)
  return out if n is not None else None


def _check_tensor(chk, name, t, numel):
  """A tensor this rank's role uses: contiguous, on the comm's device, numel elements (None: unknown)."""
  if t is None:
    return
  if not t.is_contiguous():
    chk.bad(f"{name} is not contiguous (stride {tuple(t.stride())})")
  elif t.device != chk.comm.device:
    chk.bad(f"{name} is on {t.device}, the comm's tensors are on {chk.comm.device}")
  elif numel is not None and t.numel() != numel:
    chk.bad(f"{name} has {t.numel()} elements, the call needs {numel}")


def _roles(chk, pairs, uses, what):
  """A tensor where the rank's role uses one, None where it does not (`what` says the role)."""
  for (n, t), used in zip(pairs, uses):
    if used and t is None:
      chk.bad(f"{n} is None, but {what[0]}")
    if not used and t is not None:
      chk.bad(f"{n} is given, but {what[1]} (pass None)")


# ---- the call: the collective, or its rejection -------------------------------------------------------


def _submit(chk, name, send, recv, flat, n_groups, counts, code, opc, root):
  """The call goes to the library: the collective when nothing was found wrong, else relayCallReject
  with what was read. Eager: into the caller's tensors. Traced: the op, whose output lands in recv."""
  handle = chk.comm.handle
  if chk.reason is not None:
    # What could not be read goes as what C cannot take: no layout, no counts, -1.
    shape = (flat if flat is not None else [], n_groups if flat is not None else 0, counts,
             -1 if code is None else code, -1 if opc is None else opc, -1 if root is None else root, chk.reason)
    if _tracing():
      torch.ops.relaycc.reject(handle, COLLECTIVES[name], *shape)  # raises the library's error when run
    else:
      _c_reject(name, handle, *shape)
    return
  if not _tracing():
    _c_call(name, send, recv, handle, flat, n_groups, counts, code, opc or 0, root or 0)
    return
  op = getattr(torch.ops.relaycc, name)
  if name in PT2PT:
    if send is not None:
      op(send, handle, root, counts[0], code)
    else:
      recv.copy_(op(recv, handle, root, counts[0], code))
    return
  if name in PER_PEER:
    out = op(send, recv, handle, flat, counts, code)
  elif name in ROOTED:
    out = op(send, recv, handle, root, flat, counts, code)
  elif name in POSITIONED:
    out = op(send, recv, handle, flat, n_groups, counts, code, opc or 0, root or 0)
  else:
    out = op(send, recv, handle, flat, n_groups, counts, code, opc or 0)
  if recv is not None:
    recv.copy_(out)


def _layout_call(fn, name, comm, layout, counts, dtype, op, pairs, implied_of, sizes, reject=None):
  """The four layout collectives. pairs: (send name, send), (recv name, recv); implied_of(a, send, recv) ->
  the caller's count from its tensors (None: it cannot tell); sizes(a, count) -> (send, recv) elements."""
  comm = _need_comm(comm, fn)
  chk = _Call(comm)
  if reject is not None:
    chk.bad(reject)
  opc = _op_code(chk, op) if name in REDUCING else 0
  flat, n, a, g, _ = _parse_layout(chk, layout)
  pairs = _tensors(chk, pairs)
  if flat is not None:
    _roles(chk, pairs, [g >= 0] * 2,
           (f"this rank is active in group {g}", "this rank is active in no group (a helper)"))
  code = _dtype_code(chk, dtype, pairs)
  (_, send), (_, recv) = pairs
  implied = implied_of(chk, a, send, recv) if g >= 0 and counts is None else None
  cnt = _counts(chk, counts, n if flat is not None else None, implied)
  if g >= 0 and cnt is not None:
    for (nm, t), numel in zip(pairs, sizes(a, cnt[g])):
      _check_tensor(chk, nm, t, numel)
  if name == "all_to_all" and send is not None and send is recv:
    chk.bad(f"{pairs[0][0]} is {pairs[1][0]}: in-place all-to-all is not supported")
  _submit(chk, name, send, recv, flat, n, cnt, code, opc, None)


def _count_of(t_index):
  """implied_of for a collective whose count is one tensor's numel (t_index: 0 send, 1 recv)."""
  return lambda chk, a, send, recv: ((send, recv)[t_index].numel() if (send, recv)[t_index] is not None else None)


# ---- the Python functions ----------------------------------------------------------------------------


def all_reduce(tensor, layout, op="sum", comm=None, out=None, counts=None, dtype=None, _reject=None):
  """All-reduce within each group of `layout`: in place in `tensor`, or into `out`. A helper passes None."""
  if out is None:
    # In place: the one tensor is both buffers; named "tensor" in what is said about it.
    _layout_call("relaycc.all_reduce", "all_reduce", comm, layout, counts, dtype, op, [("tensor", tensor),
                                                                                       ("tensor", tensor)],
                 _count_of(0), lambda a, c: (c, c), _reject)
    return tensor
  _layout_call("relaycc.all_reduce", "all_reduce", comm, layout, counts, dtype, op, [("tensor", tensor),
                                                                                     ("out", out)],
               _count_of(0), lambda a, c: (c, c), _reject)
  return out


def reduce_scatter(input, output, layout, op="sum", comm=None, counts=None, dtype=None, _reject=None):
  """input: A*count elements (block i for active i); output: count. In place: output is input's own block."""
  _layout_call("relaycc.reduce_scatter", "reduce_scatter", comm, layout, counts, dtype, op,
               [("input", input), ("output", output)], _count_of(1), lambda a, c: (a * c, c), _reject)
  return output


def all_gather(input, output, layout, comm=None, counts=None, dtype=None, _reject=None):
  """input: count elements; output: A*count (block i from active i). In place: input is output's own block."""
  _layout_call("relaycc.all_gather", "all_gather", comm, layout, counts, dtype, None,
               [("input", input), ("output", output)], _count_of(0), lambda a, c: (c, a * c), _reject)
  return output


def _a2a_count(chk, a, send, recv):
  if send is None or a == 0:
    return None
  if send.numel() % a:
    chk.bad(f"input has {send.numel()} elements, not a multiple of the group width {a}")
    return None
  return send.numel() // a


def all_to_all(input, output, layout, comm=None, counts=None, dtype=None, _reject=None):
  """input and output: A*count elements (segment j of input goes to active j). Not in place."""
  _layout_call("relaycc.all_to_all", "all_to_all", comm, layout, counts, dtype, None,
               [("input", input), ("output", output)], _a2a_count, lambda a, c: (a * c, a * c), _reject)
  return output


def _rooted(fn, name, input, output, root, ranks, counts, comm, dtype):
  comm = _need_comm(comm, fn)
  chk = _Call(comm)
  me = comm.rank
  r = _index(root)
  if r is None:
    chk.bad(f"root {root!r} is not a comm rank")
  seq = _seq(ranks)
  flat, _, _, _, idx = _parse_layout(chk, [seq] if seq is not None else ranks, "ranks")
  cnt = _counts(chk, counts, len(flat) if flat is not None else None, None, "rank of the set")
  # Which tensors this rank's role uses (relaycc.h "Rooted collectives"): the root's sum(counts) buffer
  # (a scatter's input, a gather's output) and a member's own block.
  pairs = _tensors(chk, [("input", input), ("output", output)])
  big, small = (0, 1) if _lib.COLLECTIVE_INFO[name].send_blocks else (1, 0)  # the root sends the blocks
  uses = [False, False]
  uses[big] = r is not None and me == r
  uses[small] = idx >= 0
  if flat is not None and r is not None:
    _roles(chk, pairs, uses, ("this rank's role uses it", "this rank's role does not use it"))
  code = _dtype_code(chk, dtype, [p for p, u in zip(pairs, uses) if u])
  if cnt is not None:
    if uses[big]:
      _check_tensor(chk, pairs[big][0], pairs[big][1], sum(cnt))
    if uses[small]:
      _check_tensor(chk, pairs[small][0], pairs[small][1], cnt[idx])
  send, recv = pairs[0][1], pairs[1][1]
  _submit(chk, name, send if uses[0] else None, recv if uses[1] else None, flat, 1, cnt, code, 0, r)
  return output


def _positioned(fn, name, tensor, root, layout, op, comm, counts, dtype):
  """Broadcast and reduce, in place in `tensor` (None on a helper). root: the root's POSITION in each group
  of `layout` (0 <= root < A; relaycc.h), not a comm rank: layout [[0..n-1]] makes it the comm rank."""
  comm = _need_comm(comm, fn)
  chk = _Call(comm)
  opc = _op_code(chk, op) if name in REDUCING else 0
  r = _index(root)
  if r is None:
    chk.bad(f"root {root!r} is not a position in the group (an int)")
  flat, n, a, g, idx = _parse_layout(chk, layout)
  ((_, t),) = _tensors(chk, [("tensor", tensor)])
  if flat is not None:
    _roles(chk, [("tensor", t)], [g >= 0],
           (f"this rank is active in group {g}", "this rank is active in no group (a helper)"))
  code = _dtype_code(chk, dtype, [("tensor", t)])
  implied = t.numel() if g >= 0 and t is not None and counts is None else None
  cnt = _counts(chk, counts, n if flat is not None else None, implied)
  if g >= 0 and cnt is not None:
    _check_tensor(chk, "tensor", t, cnt[g])
  # The buffers the rank's role uses (the library's range check of root judges r): a broadcast reads the
  # root's only, a reduce writes the root's only; the other side goes as None, so that the traced op's
  # output (undefined there) is never copied into a tensor the call must leave alone.
  is_root = g >= 0 and r is not None and idx == r
  send = t if g >= 0 and (is_root or name in REDUCING) else None
  recv = t if g >= 0 and (is_root or name not in REDUCING) else None
  _submit(chk, name, send, recv, flat, n, cnt, code, opc, r)
  return tensor


def broadcast(tensor, root, layout, comm=None, counts=None, dtype=None):
  """In each group of `layout`, the tensor of the group's root (its position `root`) into every active's
  tensor, in place. A helper passes None."""
  return _positioned("relaycc.broadcast", "broadcast", tensor, root, layout, None, comm, counts, dtype)


def reduce(tensor, root, layout, op="sum", comm=None, counts=None, dtype=None):
  """In each group of `layout`, op over the actives' tensors into the tensor of the group's root (its
  position `root`), in place; the others' tensors are left as they were. A helper passes None."""
  return _positioned("relaycc.reduce", "reduce", tensor, root, layout, op, comm, counts, dtype)


def barrier(comm=None):
  """Every rank of the comm waits for the others (relayBarrier: host-side, no call number taken)."""
  comm = _need_comm(comm, "relaycc.barrier")
  _lib.check(_lib.lib.relayBarrier(comm.handle, _stream(comm.handle)), comm.handle)


def scatter(input, output, root, ranks, counts, comm=None, dtype=None):
  """The root's input (sum(counts) elements, blocks in `ranks` order) -> ranks[i]'s output (counts[i])."""
  return _rooted("relaycc.scatter", "scatter", input, output, root, ranks, counts, comm, dtype)


def gather(input, output, root, ranks, counts, comm=None, dtype=None):
  """ranks[i]'s input (counts[i] elements) -> the root's output (sum(counts), blocks in `ranks` order)."""
  return _rooted("relaycc.gather", "gather", input, output, root, ranks, counts, comm, dtype)


# ---- point-to-point and the uneven all-to-all -----------------------------------------------------------


def _pt2pt(fn, name, tensor, peer, comm, tname):
  """send/recv: the whole contiguous tensor, to or from comm rank `peer`. Only the two ranks call."""
  comm = _need_comm(comm, fn)
  chk = _Call(comm)
  p = _index(peer)
  if p is None:
    chk.bad(f"peer {peer!r} is not a comm rank")
  (_, t), = _tensors(chk, [(tname, tensor)])
  if t is None:
    chk.bad(f"{tname} is required")
  code = _dtype_code(chk, None, [(tname, t)]) if t is not None else None
  _check_tensor(chk, tname, t, None)
  count = t.numel() if t is not None else 0
  sends = COLLECTIVE_SENDS[name]
  _submit(chk, name, t if sends else None, None if sends else t, None, 0, [count], code, 0, p)


def send(tensor, dst, comm=None):
  """Send `tensor` (contiguous) to comm rank dst; its receive must name the same count and dtype. Matched
  in order per pair, outside the collectives' lockstep (relaycc.h "Point-to-point")."""
  _pt2pt("relaycc.send", "send", tensor, dst, comm, "tensor")
  return tensor


def recv(tensor, src, comm=None):
  """Receive into `tensor` (contiguous) from comm rank src; a count or dtype differing from the send's is
  an error naming both ranks, `tensor` untouched."""
  _pt2pt("relaycc.recv", "recv", tensor, src, comm, "tensor")
  return tensor


def _splits(chk, splits, a, name, t):
  """Split sizes: a list of a counts, or None for equal splits of t."""
  if splits is None:
    if t is None or a == 0 or t.numel() % a:
      chk.bad(f"{name} is required unless the tensor splits evenly over the {a} ranks")
      return None
    return [t.numel() // a] * a
  return _counts(chk, splits, a, None, "rank of the group", name)


def all_to_all_v_single(output, input, output_split_sizes, input_split_sizes, layout, comm=None, dtype=None):
  """Uneven all-to-all over ONE group (torchcomms' name): input's block j (input_split_sizes[j] elements,
  back to back) goes to layout's rank j; output's block j (output_split_sizes[j]) comes from it. A rank
  outside the group passes None for the tensors and the splits. Each rank knows only its own splits: a
  pair whose sizes disagree is an error naming both ranks (relaycc.h relayAllToAllv)."""
  name = "all_to_all_v"
  comm = _need_comm(comm, "relaycc.all_to_all_v_single")
  chk = _Call(comm)
  grp = _seq(layout)
  if grp is not None and grp and _seq(grp[0]) is not None:  # [[ranks]]: one group
    if len(grp) != 1:
      chk.bad(f"layout has {len(grp)} groups: all_to_all_v_single takes one")
    grp = _seq(grp[0])
  flat, n, a, g, _ = _parse_layout(chk, [grp] if grp is not None else layout)
  pairs = _tensors(chk, [("input", input), ("output", output)])
  if flat is not None:
    _roles(chk, pairs, [g >= 0] * 2, ("this rank is in the group", "this rank is not in the group"))
  code = _dtype_code(chk, dtype, pairs)
  (_, send), (_, recv) = pairs
  counts = None
  if g >= 0:
    sc = _splits(chk, input_split_sizes, a, "input_split_sizes", send)
    rc = _splits(chk, output_split_sizes, a, "output_split_sizes", recv)
    if sc is not None and rc is not None:
      counts = sc + rc
      _check_tensor(chk, "input", send, sum(sc))
      _check_tensor(chk, "output", recv, sum(rc))
    if send is not None and send is recv:
      chk.bad("input is output: in-place all-to-all-v is not supported")
  if chk.reason is not None:
    counts = None  # relayCallReject takes no counts for all-to-all-v
  _submit(chk, name, send, recv, flat, 1 if flat is not None else 0, counts, code, 0, None)
  return output
