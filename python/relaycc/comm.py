"""relaycc.Comm: a relay communicator (shm transport on CPU tensors, NCCL on CUDA tensors)."""
import ctypes
import os

import torch

from . import _lib, collectives
from ._lib import ROUTES, RelayccError, bad_argument, lib


def _config(timeout_ms=None, check=None, route=None, depth=None, shm_ring_bytes=None, spin=None, topo=None):
  """relayConfig_t from keywords; None leaves a field to its RELAYCC_* variable, then the default."""
  undef = _lib.RELAY_CONFIG_UNDEF_INT
  cfg = _lib.RelayConfig(ctypes.sizeof(_lib.RelayConfig), _lib.RELAY_CONFIG_MAGIC, _lib.version(), undef,
                         undef, undef, undef, undef, undef, None)
  ints = {
      "timeoutMs": timeout_ms,
      "checkMode": check,
      "depth": depth,
      "shmRingBytes": shm_ring_bytes,
      "spinCount": spin
  }
  names = {
      "timeoutMs": "timeout_ms",
      "checkMode": "check",
      "depth": "depth",
      "shmRingBytes": "shm_ring_bytes",
      "spinCount": "spin"
  }
  for field, v in ints.items():
    if v is None:
      continue
    if isinstance(v, bool):
      v = int(v)
    if not isinstance(v, int):
      raise bad_argument(f"relaycc.Comm: {names[field]} = {v!r} is not an int")
    setattr(cfg, field, v)
  if route is not None:
    if route not in ROUTES:
      raise bad_argument(f"relaycc.Comm: route {route!r} is not one of {', '.join(ROUTES)}")
    cfg.route = ROUTES[route]
  if topo is not None:
    cfg._topo = topo.encode()  # kept alive with the struct
    cfg.topo = cfg._topo
  return cfg


def nccl_libraries():
  """The distinct libnccl files mapped into this process (/proc/self/maps, paths resolved)."""
  found = set()
  try:
    with open("/proc/self/maps") as f:
      for line in f:
        path = line.split(None, 5)[-1].strip() if len(line.split(None, 5)) == 6 else ""
        base = os.path.basename(path)
        if base.startswith("libnccl") and ".so" in base:
          found.add(os.path.realpath(path))
  except OSError:
    pass
  return sorted(found)


class Work:
  """What async_op=True returns: wait() orders the current stream after the call (an event on CUDA; the
  shm transport completes calls before they return)."""

  def __init__(self, device):
    self._event = None
    if device.type == "cuda":
      self._event = torch.cuda.Event()
      self._event.record(torch.cuda.current_stream(device))

  def wait(self):
    if self._event is not None:
      torch.cuda.current_stream().wait_event(self._event)
    return True

  def is_completed(self):
    return self._event is None or self._event.query()


class Comm:
  """A relay communicator. Make one with Comm.shm(...) or Comm.from_process_group(...).

  Plan-shaping settings (route=, depth=, check=, timeout_ms=, ...) are the comm's config (relayConfig_t):
  the C library agrees them across ranks at init, so they are keywords of the constructors, not of a call.
  """

  _pg_seq = {}  # per process group: how many comms were made from it (the store key of each)

  def __init__(self, handle, device):
    self.handle = handle
    self.device = torch.device(device)
    n, r = ctypes.c_int(), ctypes.c_int()
    _lib.check(lib.relayCommCount(handle, ctypes.byref(n)), handle)
    _lib.check(lib.relayCommUserRank(handle, ctypes.byref(r)), handle)
    self.size, self.rank = n.value, r.value
    # Mutated (in declaration) by every call: keeps a helper's call alive under torch.compile and all calls
    # of this comm in program order (collectives.py says why).
    self._token = torch.zeros(1, dtype=torch.int32, device=self.device)
    self.calls = 0  # relaycc calls this rank issued on the comm (tests: a compiled helper's call ran)
    collectives.comms[handle] = self

  # ---- constructors ----
  @classmethod
  def shm(cls, rank=None, world_size=None, job=None, **config):
    """The shm transport (CPU tensors), one process per rank on this host. None takes RELAYCC_RANK /
    RELAYCC_NRANKS / RELAYCC_JOB, then RANK / WORLD_SIZE as torchrun sets them. Collective."""
    cfg = _config(**config)
    h = ctypes.c_void_p()
    res = lib.relayCommInitShm(ctypes.byref(h), -1 if world_size is None else int(world_size),
                               -1 if rank is None else int(rank), None if job is None else str(job).encode(),
                               ctypes.byref(cfg))
    _lib.check(res, None, "relayCommInitShm")
    return cls(h.value, "cpu")

  @classmethod
  def from_process_group(cls, group=None, device=None, **config):
    """A relay comm with its own NCCL communicator over the ranks of a torch.distributed group (default:
    WORLD), on `device` (default: the current CUDA device). Rank 0 of the group makes the NCCL unique id;
    it travels through the group's store (no NCCL communicator of torch's is needed, so a lazily
    initialized group works). Collective over the group."""
    import torch.distributed as dist
    if not _lib.has_nccl():
      raise RelayccError(
          _lib.NOT_SUPPORTED, f"relaycc.Comm.from_process_group: {_lib.library_path()} has no "
          "relayNcclGetUniqueId / relayCommInitNcclRank: built without the NCCL transport (no nvcc or NCCL), "
          "or older than those entry points")
    if not dist.is_initialized():
      raise bad_argument("relaycc.Comm.from_process_group: torch.distributed is not initialized "
                         "(dist.init_process_group first)")
    group = group if group is not None else dist.group.WORLD
    rank, nranks = dist.get_rank(group), dist.get_world_size(group)
    if device is None:
      device = torch.cuda.current_device()
    device = torch.device("cuda", device) if isinstance(device, int) else torch.device(device)
    if device.type != "cuda":
      raise bad_argument(
          f"relaycc.Comm.from_process_group (rank {rank}): device {device} is not a CUDA device")
    index = device.index if device.index is not None else torch.cuda.current_device()
    cfg = _config(**config)
    uid = _lib.RelayNcclUniqueId()
    name = getattr(group, "group_name", "") or str(id(group))
    seq = cls._pg_seq.get(name, 0)
    cls._pg_seq[name] = seq + 1
    key = f"relaycc/uid/{name}/{seq}"
    if rank == 0:
      _lib.check(lib.relayNcclGetUniqueId(ctypes.byref(uid)), None, "relayNcclGetUniqueId")
    blob = _share(group, key, bytes(uid.internal) if rank == 0 else None)
    ctypes.memmove(ctypes.addressof(uid), blob, len(blob))
    torch.cuda.set_device(index)
    h = ctypes.c_void_p()
    _lib.check(
        lib.relayCommInitNcclRank(ctypes.byref(h), nranks, ctypes.byref(uid), rank, index, ctypes.byref(cfg)),
        None, "relayCommInitNcclRank")
    comm = cls(h.value, device)
    ncc = nccl_libraries()
    if len(ncc) > 1:
      comm.destroy()
      raise RelayccError(
          _lib.INVALID_USAGE, f"relaycc (rank {rank}): {len(ncc)} NCCL libraries are mapped in this "
          f"process ({', '.join(ncc)}): relaycc must use the NCCL torch uses; import torch before "
          "anything that loads another libnccl, or point LD_LIBRARY_PATH at torch's")
    return comm

  # ---- lifetime ----
  def destroy(self):
    """Release the comm (after every rank's last call on it)."""
    if self.handle:
      h, self.handle = self.handle, 0
      collectives.comms.pop(h, None)
      _lib.check(lib.relayCommDestroy(h), None, "relayCommDestroy")

  def abort(self):
    """Mark the comm failed (peers see it), wake a call stuck in it, free it."""
    if self.handle:
      h, self.handle = self.handle, 0
      collectives.comms.pop(h, None)
      _lib.check(lib.relayCommAbort(h), None, "relayCommAbort")

  def last_error(self):
    s = lib.relayGetLastError(self.handle) if self.handle else None
    return s.decode(errors="replace") if s else ""

  def __enter__(self):
    return self

  def __exit__(self, exc_type, exc, tb):
    # After a failure the peers may be stuck in a call: abort wakes them; destroy would wait.
    if exc_type is None:
      self.destroy()
    else:
      self.abort()
    return False

  def __repr__(self):
    return f"relaycc.Comm(rank={self.rank}, size={self.size}, device={self.device}, handle={self.handle:#x})"

  # ---- the collectives as methods ----
  def all_reduce(self, tensor, layout, op="sum", out=None, counts=None, dtype=None):
    return collectives.all_reduce(tensor, layout, op, comm=self, out=out, counts=counts, dtype=dtype)

  def reduce_scatter(self, input, output, layout, op="sum", counts=None, dtype=None):
    return collectives.reduce_scatter(input, output, layout, op, comm=self, counts=counts, dtype=dtype)

  def all_gather(self, input, output, layout, counts=None, dtype=None):
    return collectives.all_gather(input, output, layout, comm=self, counts=counts, dtype=dtype)

  def all_to_all(self, input, output, layout, counts=None, dtype=None):
    return collectives.all_to_all(input, output, layout, comm=self, counts=counts, dtype=dtype)

  def scatter(self, input, output, root, ranks, counts, dtype=None):
    return collectives.scatter(input, output, root, ranks, counts, comm=self, dtype=dtype)

  def gather(self, input, output, root, ranks, counts, dtype=None):
    return collectives.gather(input, output, root, ranks, counts, comm=self, dtype=dtype)

  # ---- torchcomms' names (TorchCommRCCLX): one tensor per group, the caller's group's entry carries the
  # data, the others are placeholders that are not read (a helper's give the dtype) ----
  def _tc_entry(self, fn, all_active_ranks, lists):
    """-> (my group or -1, dtype). `lists`: (name, list of per-group tensors or None)."""
    _, n, _, g, _ = collectives._parse_layout(self, all_active_ranks, fn, "all_active_ranks")
    for name, ts in lists:
      if ts is None:
        continue
      if not isinstance(ts, (list, tuple)) or len(ts) != n:
        raise bad_argument(f"{fn} (rank {self.rank}): {name} must be a list of {n} tensors (one per group)")
    first = lists[0][1]
    src = first[g] if g >= 0 else (first[0] if first else None)
    if not isinstance(src, torch.Tensor):
      raise bad_argument(
          f"{fn} (rank {self.rank}): {lists[0][0]}[{max(g, 0)}] must be a tensor (it gives the dtype)")
    return g, src.dtype

  def _tc_done(self, async_op):
    return Work(self.device) if async_op else None

  def sharded_relay_multi_group_all_reduce(self,
                                           tensors,
                                           op,
                                           all_active_ranks,
                                           per_group_counts,
                                           async_op=False,
                                           output_tensors=None):
    fn = "sharded_relay_multi_group_all_reduce"
    g, dt = self._tc_entry(fn, all_active_ranks, [("tensors", tensors), ("output_tensors", output_tensors)])
    collectives.all_reduce(tensors[g] if g >= 0 else None,
                           all_active_ranks,
                           op,
                           comm=self,
                           out=output_tensors[g] if g >= 0 and output_tensors is not None else None,
                           counts=list(per_group_counts),
                           dtype=dt)
    return self._tc_done(async_op)

  def _tc_pair(self, coll, input_tensors, output_tensors, all_active_ranks, counts, async_op, op=None):
    """The three input/output collectives under their torchcomms names."""
    fn = f"sharded_relay_multi_group_{coll}"
    g, dt = self._tc_entry(fn, all_active_ranks, [("input_tensors", input_tensors),
                                                  ("output_tensors", output_tensors)])
    x, y = (input_tensors[g], output_tensors[g]) if g >= 0 else (None, None)
    kw = dict(comm=self, counts=list(counts), dtype=dt)
    if op is None:
      getattr(collectives, coll)(x, y, all_active_ranks, **kw)
    else:
      getattr(collectives, coll)(x, y, all_active_ranks, op, **kw)
    return self._tc_done(async_op)

  def sharded_relay_multi_group_reduce_scatter(self,
                                               input_tensors,
                                               output_tensors,
                                               op,
                                               all_active_ranks,
                                               per_group_recv_counts,
                                               async_op=False):
    return self._tc_pair("reduce_scatter", input_tensors, output_tensors, all_active_ranks,
                         per_group_recv_counts, async_op, op)

  def sharded_relay_multi_group_all_to_all(self,
                                           input_tensors,
                                           output_tensors,
                                           all_active_ranks,
                                           per_group_segment_counts,
                                           async_op=False):
    return self._tc_pair("all_to_all", input_tensors, output_tensors, all_active_ranks,
                         per_group_segment_counts, async_op)

  def sharded_relay_multi_group_all_gather(self,
                                           input_tensors,
                                           output_tensors,
                                           all_active_ranks,
                                           per_group_send_counts,
                                           async_op=False):
    return self._tc_pair("all_gather", input_tensors, output_tensors, all_active_ranks, per_group_send_counts,
                         async_op)


def _share(group, key, blob):
  """Rank 0's bytes to every rank of `group`: through the store under `key`, else an object broadcast."""
  import torch.distributed as dist
  store = None
  try:
    from torch.distributed.distributed_c10d import _get_process_group_store
    store = _get_process_group_store(group)
  except Exception:  # older or newer torch without it: the default store, whose keys are global
    try:
      store = dist.distributed_c10d._get_default_store()
    except Exception:
      store = None
  if store is not None:
    if blob is not None:
      store.set(key, blob)
      return blob
    return bytes(store.get(key))
  obj = [blob]
  dist.broadcast_object_list(obj, src=dist.get_global_rank(group, 0), group=group)
  return obj[0]
