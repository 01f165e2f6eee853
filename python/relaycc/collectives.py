"""The collectives on torch tensors, as torch ops (torch.ops.relaycc.*) and the Python functions over them.

Each op calls the C library once (relayAllReduce, ...). Registration (torch.library.custom_op):
- `recv` and `token` are declared mutated. `token` is a one-element tensor of the comm: EVERY call of every
  rank mutates it, so a helper's call (no tensor of its own, no output) is a mutation of a graph input
  that torch.compile must keep, not dead code (a dropped helper call hangs the active ranks), and all
  relaycc calls on one comm form one chain in program order (reordering two of them differently on two
  ranks would deadlock). The op never writes the token's value: the declaration is the point.
- The comm handle, layout, counts, dtype code and op code are ints and int lists: constants in a graph.
- On CUDA tensors a call enqueues on torch.cuda.current_stream() and never host-synchronizes.
"""
import ctypes
from typing import List, Optional

import torch

from . import _lib
from ._lib import DTYPES, OPS, bad_argument

Tensor = torch.Tensor

# handle -> Comm, so that an op (which gets the handle as an int) can count its calls on this rank.
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

  def make():
    arr = (ctypes.c_int * len(ranks))(*ranks)
    lay = _lib.RelayLayout(n_groups, len(ranks) // n_groups if n_groups > 0 else 0, arr)
    return (lay, arr)  # arr kept alive with the struct

  return ctypes.byref(_cached(_layout_cache, (tuple(ranks), n_groups), make)[0])


def _c_counts(counts):
  return _cached(_counts_cache, tuple(counts), lambda: (ctypes.c_size_t * len(counts))(*counts))


def _c_ranks(ranks):
  return _cached(_ranks_cache, tuple(ranks), lambda: (ctypes.c_int * len(ranks))(*ranks))


def _ptr(t):
  return t.data_ptr() if t is not None else None


def _stream(token):
  return torch.cuda.current_stream(token.device).cuda_stream if token.is_cuda else None


def _counted(comm):
  c = comms.get(comm)
  if c is not None:
    c.calls += 1


# ---- the ops ---------------------------------------------------------------------------------------


@torch.library.custom_op("relaycc::all_reduce", mutates_args=("recv", "token"))
def _all_reduce(send: Optional[Tensor], recv: Optional[Tensor], token: Tensor, comm: int, ranks: List[int],
                n_groups: int, counts: List[int], dtype: int, op: int) -> None:
  """send None: in place in recv."""
  _counted(comm)
  s = recv if send is None else send
  _lib.check(
      _lib.lib.relayAllReduce(_ptr(s), _ptr(recv), _c_counts(counts), dtype, op, _c_layout(ranks, n_groups),
                              comm, _stream(token)), comm)


@torch.library.custom_op("relaycc::reduce_scatter", mutates_args=("recv", "token"))
def _reduce_scatter(send: Optional[Tensor], recv: Optional[Tensor], token: Tensor, comm: int,
                    ranks: List[int], n_groups: int, counts: List[int], dtype: int, op: int) -> None:
  _counted(comm)
  _lib.check(
      _lib.lib.relayReduceScatter(_ptr(send), _ptr(recv), _c_counts(counts), dtype, op,
                                  _c_layout(ranks, n_groups), comm, _stream(token)), comm)


@torch.library.custom_op("relaycc::all_gather", mutates_args=("recv", "token"))
def _all_gather(send: Optional[Tensor], recv: Optional[Tensor], token: Tensor, comm: int, ranks: List[int],
                n_groups: int, counts: List[int], dtype: int) -> None:
  _counted(comm)
  _lib.check(
      _lib.lib.relayAllGather(_ptr(send), _ptr(recv), _c_counts(counts), dtype, _c_layout(ranks, n_groups),
                              comm, _stream(token)), comm)


@torch.library.custom_op("relaycc::all_to_all", mutates_args=("recv", "token"))
def _all_to_all(send: Optional[Tensor], recv: Optional[Tensor], token: Tensor, comm: int, ranks: List[int],
                n_groups: int, counts: List[int], dtype: int) -> None:
  _counted(comm)
  _lib.check(
      _lib.lib.relayAllToAll(_ptr(send), _ptr(recv), _c_counts(counts), dtype, _c_layout(ranks, n_groups),
                             comm, _stream(token)), comm)


@torch.library.custom_op("relaycc::scatter", mutates_args=("recv", "token"))
def _scatter(send: Optional[Tensor], recv: Optional[Tensor], token: Tensor, comm: int, root: int,
             ranks: List[int], counts: List[int], dtype: int) -> None:
  _counted(comm)
  _lib.check(
      _lib.lib.relayScatter(_ptr(send), _ptr(recv), _c_counts(counts), dtype, root, _c_ranks(ranks),
                            len(ranks), comm, _stream(token)), comm)


@torch.library.custom_op("relaycc::gather", mutates_args=("recv", "token"))
def _gather(send: Optional[Tensor], recv: Optional[Tensor], token: Tensor, comm: int, root: int,
            ranks: List[int], counts: List[int], dtype: int) -> None:
  _counted(comm)
  _lib.check(
      _lib.lib.relayGather(_ptr(send), _ptr(recv), _c_counts(counts), dtype, root, _c_ranks(ranks),
                           len(ranks), comm, _stream(token)), comm)


def _fake(*args, **kwargs):
  return None


for _op in (_all_reduce, _reduce_scatter, _all_gather, _all_to_all, _scatter, _gather):
  _op.register_fake(_fake)

OP_NAMES = ("all_reduce", "reduce_scatter", "all_gather", "all_to_all", "scatter", "gather")

# ---- argument checks (this rank's view; the C library checks the rest and every rank's agreement) -----


def _need_comm(comm, fn):
  if comm is None or not getattr(comm, "handle", 0):
    raise bad_argument(f"{fn}: comm is {'None' if comm is None else 'destroyed'}; pass comm=relaycc.Comm...")
  return comm


def _parse_layout(comm, layout, fn, name="layout"):
  """-> (flat ranks, n_groups, n_active, my group or -1, my index or -1)."""
  if not isinstance(layout, (list, tuple)) or len(layout) == 0:
    raise bad_argument(
        f"{fn} (rank {comm.rank}): {name} must be a non-empty list of groups (lists of comm ranks)")
  flat = []
  width = None
  for g, grp in enumerate(layout):
    if not isinstance(grp, (list, tuple)):
      raise bad_argument(f"{fn} (rank {comm.rank}): {name}[{g}] must be a list of comm ranks")
    if width is None:
      width = len(grp)
    elif len(grp) != width:
      raise bad_argument(f"{fn} (rank {comm.rank}): {name}[{g}] has {len(grp)} ranks, {name}[0] has {width}: "
                         "every group has the same number of active ranks")
    for q in grp:
      if isinstance(q, bool) or not isinstance(q, int):
        raise bad_argument(f"{fn} (rank {comm.rank}): {name}[{g}] holds {q!r}, not a comm rank")
      flat.append(q)
  mine = flat.index(comm.rank) if comm.rank in flat else -1
  return flat, len(layout), width, (mine // width if mine >= 0 else -1), (mine % width if mine >= 0 else -1)


def _dtype_code(comm, fn, dtype, tensors):
  """The call's datatype: `dtype` or the rank's tensors, which must agree."""
  have = [(n, t) for n, t in tensors if t is not None]
  for n, t in have:
    if not isinstance(t, torch.Tensor):
      raise bad_argument(f"{fn} (rank {comm.rank}): {n} is a {type(t).__name__}, not a torch.Tensor or None")
  dt = dtype
  for n, t in have:
    if dt is None:
      dt = t.dtype
    elif t.dtype != dt:
      raise bad_argument(f"{fn} (rank {comm.rank}): {n} has dtype {t.dtype}, the call's dtype is {dt}")
  if dt is None:
    raise bad_argument(
        f"{fn} (rank {comm.rank}): dtype is required on a rank with no tensor in the call (a helper)")
  code = DTYPES.get(dt)
  if code is None:
    raise bad_argument(f"{fn} (rank {comm.rank}): dtype {dt} is not supported (relaycc has "
                       f"{', '.join(str(d).replace('torch.', '') for d in DTYPES)})")
  return code


def _op_code(comm, fn, op):
  key = op
  if not isinstance(op, str):
    key = getattr(op, "name",
                  None) or str(op).split(".")[-1]  # torch.distributed.ReduceOp.SUM, torchcomms' ops
    key = {
        "SUM": "sum",
        "PRODUCT": "prod",
        "PROD": "prod",
        "MAX": "max",
        "MIN": "min",
        "AVG": "avg"
    }.get(str(key).upper(), key)
  code = OPS.get(key) if isinstance(key, str) else None
  if code is None:
    raise bad_argument(f"{fn} (rank {comm.rank}): op {op!r} is not one of {', '.join(OPS)}")
  return code


def _check_tensor(comm, fn, name, t, numel):
  if t is None:
    return
  if not t.is_contiguous():
    raise bad_argument(f"{fn} (rank {comm.rank}): {name} is not contiguous (stride {tuple(t.stride())})")
  if t.device != comm.device:
    raise bad_argument(
        f"{fn} (rank {comm.rank}): {name} is on {t.device}, the comm's tensors are on {comm.device}")
  if t.numel() != numel:
    raise bad_argument(f"{fn} (rank {comm.rank}): {name} has {t.numel()} elements, the call needs {numel}")


def _counts(comm, fn, counts, n_groups, my_group, implied, count_name="counts"):
  """Per-group counts: `counts`, or the caller's own count for every group (`implied`, None on a helper)."""
  if counts is None:
    if implied is None:
      raise bad_argument(
          f"{fn} (rank {comm.rank}): {count_name} is required on a rank with no tensor in the call "
          "(a helper): one element count per group")
    return [implied] * n_groups
  if not isinstance(counts, (list, tuple)) or len(counts) != n_groups:
    raise bad_argument(
        f"{fn} (rank {comm.rank}): {count_name} must be a list of {n_groups} counts (one per group)")
  for g, c in enumerate(counts):
    if isinstance(c, bool) or not isinstance(c, int) or c < 0:
      raise bad_argument(f"{fn} (rank {comm.rank}): {count_name}[{g}] = {c!r} is not a count (an int >= 0)")
  return list(counts)


def _require_tensors(comm, fn, my_group, pairs):
  """An active rank passes its tensors; a helper passes None."""
  for n, t in pairs:
    if my_group >= 0 and t is None:
      raise bad_argument(f"{fn} (rank {comm.rank}): {n} is None, but this rank is active in group {my_group}")
    if my_group < 0 and t is not None:
      raise bad_argument(f"{fn} (rank {comm.rank}): {n} is given, but this rank is active in no group "
                         "(a helper passes None)")


def _whole(comm, fn, layout, counts, dtype, tensors, implied_of):
  """Shared front half of the four layout collectives. `implied_of(a)` -> the caller's count from its
  tensors (a = group width). Returns (flat, n_groups, a, my_group, counts list, dtype code)."""
  flat, n_groups, a, g, _ = _parse_layout(comm, layout, fn)
  _require_tensors(comm, fn, g, tensors)
  code = _dtype_code(comm, fn, dtype, tensors)
  cnt = _counts(comm, fn, counts, n_groups, g, implied_of(a) if g >= 0 else None)
  return flat, n_groups, a, g, cnt, code


# ---- the Python functions ----------------------------------------------------------------------------


def all_reduce(tensor, layout, op="sum", comm=None, out=None, counts=None, dtype=None):
  """All-reduce within each group of `layout`: in place in `tensor`, or into `out`. A helper passes None."""
  fn = "relaycc.all_reduce"
  comm = _need_comm(comm, fn)
  opc = _op_code(comm, fn, op)
  pairs = [("tensor", tensor)] + ([("out", out)] if out is not None else [])
  flat, n, a, g, cnt, code = _whole(comm, fn, layout, counts, dtype, pairs, lambda a: tensor.numel())
  if g >= 0:
    _check_tensor(comm, fn, "tensor", tensor, cnt[g])
    _check_tensor(comm, fn, "out", out, cnt[g])
  torch.ops.relaycc.all_reduce(tensor if out is not None else None, out if out is not None else tensor,
                               comm._token, comm.handle, flat, n, cnt, code, opc)
  return out if out is not None else tensor


def reduce_scatter(input, output, layout, op="sum", comm=None, counts=None, dtype=None):
  """input: A*count elements (block i for active i); output: count. In place: output is input's own block."""
  fn = "relaycc.reduce_scatter"
  comm = _need_comm(comm, fn)
  opc = _op_code(comm, fn, op)
  flat, n, a, g, cnt, code = _whole(comm, fn, layout, counts, dtype, [("input", input), ("output", output)],
                                    lambda a: output.numel())
  if g >= 0:
    _check_tensor(comm, fn, "input", input, a * cnt[g])
    _check_tensor(comm, fn, "output", output, cnt[g])
  torch.ops.relaycc.reduce_scatter(input, output, comm._token, comm.handle, flat, n, cnt, code, opc)
  return output


def all_gather(input, output, layout, comm=None, counts=None, dtype=None):
  """input: count elements; output: A*count (block i from active i). In place: input is output's own block."""
  fn = "relaycc.all_gather"
  comm = _need_comm(comm, fn)
  flat, n, a, g, cnt, code = _whole(comm, fn, layout, counts, dtype, [("input", input), ("output", output)],
                                    lambda a: input.numel())
  if g >= 0:
    _check_tensor(comm, fn, "input", input, cnt[g])
    _check_tensor(comm, fn, "output", output, a * cnt[g])
  torch.ops.relaycc.all_gather(input, output, comm._token, comm.handle, flat, n, cnt, code)
  return output


def all_to_all(input, output, layout, comm=None, counts=None, dtype=None):
  """input and output: A*count elements (segment j of input goes to active j). Not in place."""
  fn = "relaycc.all_to_all"
  comm = _need_comm(comm, fn)

  def implied(a):
    if input.numel() % a:
      raise bad_argument(
          f"{fn} (rank {comm.rank}): input has {input.numel()} elements, not a multiple of the "
          f"group width {a}")
    return input.numel() // a

  flat, n, a, g, cnt, code = _whole(comm, fn, layout, counts, dtype, [("input", input), ("output", output)],
                                    implied)
  if g >= 0:
    _check_tensor(comm, fn, "input", input, a * cnt[g])
    _check_tensor(comm, fn, "output", output, a * cnt[g])
    if input is output:
      raise bad_argument(f"{fn} (rank {comm.rank}): input is output: in-place all-to-all is not supported")
  torch.ops.relaycc.all_to_all(input, output, comm._token, comm.handle, flat, n, cnt, code)
  return output


def _rooted(fn, op, input, output, root, ranks, counts, comm, dtype, root_sends):
  comm = _need_comm(comm, fn)
  if isinstance(root, bool) or not isinstance(root, int):
    raise bad_argument(f"{fn} (rank {comm.rank}): root {root!r} is not a comm rank")
  flat, _, _, _, idx = _parse_layout(comm, [ranks] if isinstance(ranks, (list, tuple)) else ranks, fn,
                                     "ranks")
  cnt = _counts(comm, fn, counts, len(flat), idx, None)
  me = comm.rank
  # Which tensors this rank's role uses (relaycc.h "Rooted collectives").
  big, small = ("input", input), ("output", output)
  if not root_sends:
    big, small = ("output", output), ("input", input)
  uses = {big[0]: me == root, small[0]: idx >= 0}
  for name, t in (big, small):
    if uses[name] and t is None:
      raise bad_argument(f"{fn} (rank {me}): {name} is None, but this rank's role uses it")
    if not uses[name] and t is not None:
      raise bad_argument(
          f"{fn} (rank {me}): {name} is given, but this rank's role does not use it (pass None)")
  code = _dtype_code(comm, fn, dtype, [big, small])
  if uses[big[0]]:
    _check_tensor(comm, fn, big[0], big[1], sum(cnt))
  if uses[small[0]]:
    _check_tensor(comm, fn, small[0], small[1], cnt[idx])
  op(input, output, comm._token, comm.handle, root, flat, cnt, code)
  return output


def scatter(input, output, root, ranks, counts, comm=None, dtype=None):
  """The root's input (sum(counts) elements, blocks in `ranks` order) -> ranks[i]'s output (counts[i])."""
  return _rooted("relaycc.scatter", torch.ops.relaycc.scatter, input, output, root, ranks, counts, comm,
                 dtype, True)


def gather(input, output, root, ranks, counts, comm=None, dtype=None):
  """ranks[i]'s input (counts[i] elements) -> the root's output (sum(counts), blocks in `ranks` order)."""
  return _rooted("relaycc.gather", torch.ops.relaycc.gather, input, output, root, ranks, counts, comm, dtype,
                 False)
