"""relaycc.Comm: a relay communicator (shm transport on CPU tensors, NCCL on CUDA tensors)."""
import ctypes
import os
import re
import socket
import uuid

import torch

from . import _lib, collectives
from ._lib import ROUTES, RelayccError, bad_argument, lib


_CONFIG_KEYWORDS = ("timeout_ms", "check", "route", "depth", "shm_ring_bytes", "spin", "topo")


def _config(timeout_ms=None, check=None, route=None, depth=None, shm_ring_bytes=None, spin=None, topo=None,
            **unknown):
  """relayConfig_t from keywords; None leaves a field to its RELAYCC_* variable, then the default. What it
  cannot read it does not raise: the first such reason goes in the struct's `reject`, so the C init fails
  it on every rank (this rank joins and tells its peers) instead of this rank alone leaving them to wait
  for it until their deadline."""
  undef = _lib.RELAY_CONFIG_UNDEF_INT
  cfg = _lib.RelayConfig(ctypes.sizeof(_lib.RelayConfig), _lib.RELAY_CONFIG_MAGIC, _lib.version(), undef,
                         undef, undef, undef, undef, undef, None, None)
  reasons = []
  ints = {
      "timeoutMs": ("timeout_ms", timeout_ms),
      "checkMode": ("check", check),
      "depth": ("depth", depth),
      "shmRingBytes": ("shm_ring_bytes", shm_ring_bytes),
      "spinCount": ("spin", spin)
  }
  for field, (name, v) in ints.items():
    if v is None:
      continue
    iv = int(v) if isinstance(v, bool) else collectives._index(v)
    if iv is None or not -2**31 < iv < 2**31:
      reasons.append(f"{name} = {v!r} is not an int")
    else:
      setattr(cfg, field, iv)
  if route is not None:
    code = ROUTES.get(route.lower()) if isinstance(route, str) else None
    if code is None:
      reasons.append(f"route {route!r} is not one of {', '.join(ROUTES)}")
    else:
      cfg.route = code
  if topo is not None:
    if isinstance(topo, str):
      cfg._topo = topo.encode()  # kept alive with the struct
      cfg.topo = cfg._topo
    else:
      reasons.append(f"topo = {topo!r} is not a str")
  for k in unknown:
    reasons.append(f"{k!r} is not a config keyword ({', '.join(_CONFIG_KEYWORDS)})")
  if reasons:
    cfg._reject = ("relaycc.Comm: " + reasons[0]).encode()
    cfg.reject = cfg._reject
  return cfg


# The NCCL library itself (libnccl.so, libnccl.so.2, libnccl.so.2.21.5; on a ROCm torch RCCL's librccl.so.1,
# which exports NCCL's names), not the plugins NCCL loads beside it on clusters (libnccl-net.so,
# libnccl-tuner-*.so, libnccl-profiler.so, librccl-net.so): those are not a second NCCL.
_NCCL_FILE = re.compile(r"^lib[nr]ccl\.so(\.\d+)*$")


def nccl_libraries(maps=None):
  """The distinct NCCL libraries (RCCL's on ROCm) mapped into this process: the files named
  libnccl.so[.N...] or librccl.so[.N...] in /proc/self/maps (or in `maps`, that file's text), paths
  resolved."""
  if maps is None:
    try:
      with open("/proc/self/maps") as f:
        maps = f.read()
    except OSError:
      return []
  found = set()
  for line in maps.splitlines():
    fields = line.split(None, 5)
    path = fields[5].strip() if len(fields) == 6 else ""
    if _NCCL_FILE.match(os.path.basename(path)):
      found.add(os.path.realpath(path))
  return sorted(found)


class Work:
  """What async_op=True returns: wait() orders the current stream after the call (an event on CUDA; the
  shm transport completes calls before they return). Under torch.compile the call is an op on the
  current stream already, so there is no event to record (nothing breaks fullgraph)."""

  def __init__(self, device):
    self._event = None
    if device.type == "cuda" and not torch.compiler.is_compiling():
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
    self.calls = 0  # relaycc calls this rank issued on the comm (tests: a compiled helper's call ran)
    self.guest = False  # True: it wraps a communicator it does not own (from_process_group's NCCL group's)
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
    """A relay comm over the ranks of a torch.distributed group (default: WORLD), with the group's rank
    numbers. Collective over the group.

    CUDA (`device` a CUDA device, or None on a group with an NCCL backend: the current device): the relay
    comm wraps the group's own NCCL communicator (the NCCL backend's comm pointer, after a one-element
    all-reduce on the group makes torch create it) as a guest: no relaycc deadline unless you set one
    (timeout_ms= or RELAYCC_TIMEOUT_MS) and never an abort of torch's communicator; a failure raises from
    the relaycc call that meets it (a kernel's from the next call) and leaves the relay comm failed; the
    group must outlive the comm. Where torch offers no pointer, the relay comm makes an NCCL comm of
    its own from a unique id that travels through the group's store. Either way nothing in the process's
    environment changes here, and the process must map one NCCL library (checked first).
    ROCm (a torch with torch.version.hip, relaycc built with RELAY_WITH_HIP): the same, on AMD GPUs; torch's
    "nccl" backend is RCCL there, which gives its communicator's pointer the same way and exports NCCL's
    names, so the relay comm wraps RCCL's communicator as above.
    CPU (`device` "cpu", or None on a gloo group): the shm transport on this host, its rendezvous name
    made by the group's rank 0 and handed out through the group's store (the launch identity rules of
    Comm.shm still apply)."""
    import torch.distributed as dist
    fn = "relaycc.Comm.from_process_group"
    if not dist.is_initialized():
      raise bad_argument(f"{fn}: torch.distributed is not initialized (dist.init_process_group first)")
    group = group if group is not None else dist.group.WORLD
    rank, nranks = dist.get_rank(group), dist.get_world_size(group)
    device = _group_device(group, device, f"{fn} (rank {rank})")
    cfg = _config(**config)
    name = getattr(group, "group_name", "") or str(id(group))
    seq = cls._pg_seq.get(name, 0)
    cls._pg_seq[name] = seq + 1
    key = f"relaycc/{name}/{seq}"
    if device.type == "cpu":
      # One host: a shm segment is seen only there (the ranks would wait for each other until the deadline).
      hosts = _exchange(group, key + "/host", _host_id())
      if len(set(hosts)) > 1:
        raise RelayccError(
            _lib.INVALID_USAGE, f"{fn} (rank {rank}): the group's ranks run on {len(set(hosts))} hosts; the "
            "CPU (shm) transport needs one host")
      job = _share(group, key + "/job", f"pg-{uuid.uuid4().hex}".encode() if rank == 0 else None).decode()
      h = ctypes.c_void_p()
      _lib.check(lib.relayCommInitShm(ctypes.byref(h), nranks, rank, job.encode(), ctypes.byref(cfg)), None,
                 "relayCommInitShm")
      return cls(h.value, "cpu")
    if not _lib.has_nccl():
      raise RelayccError(
          _lib.NOT_SUPPORTED, f"{fn}: {_lib.library_path()} has no relayCommInitNccl / relayNcclGetUniqueId / "
          "relayCommInitNcclRank: built without the NCCL transport (no nvcc or NCCL), or older than those entry "
          "points")
    # Before any collective init, on every rank alike: one NCCL in the process, else relaycc would drive
    # torch's communicator with another library's functions.
    ncc = nccl_libraries()
    why = (f"{len(ncc)} NCCL libraries are mapped in this process ({', '.join(ncc)}): relaycc must use the NCCL "
           "torch uses; import torch before anything that loads another libnccl, or point LD_LIBRARY_PATH at "
           "torch's") if len(ncc) > 1 else ""
    _vote(group, key + "/nccl", why, fn, rank)
    index = device.index if device.index is not None else torch.cuda.current_device()
    device = torch.device("cuda", index)
    with torch.cuda.device(index):
      ptr = _torch_nccl_comm(group, device)
      modes = _exchange(group, key + "/mode", b"attach" if ptr else b"own")
      if len(set(modes)) > 1:
        raise RelayccError(
            _lib.INVALID_USAGE, f"{fn} (rank {rank}): torch gives the NCCL communicator's pointer on ranks "
            f"{[q for q, m in enumerate(modes) if m == b'attach']} only: every rank must run the same torch")
      h = ctypes.c_void_p()
      if ptr:
        _lib.check(lib.relayCommInitNccl(ctypes.byref(h), ptr, ctypes.byref(cfg)), None, "relayCommInitNccl")
      else:
        uid = _lib.RelayNcclUniqueId()
        if rank == 0:
          _lib.check(lib.relayNcclGetUniqueId(ctypes.byref(uid)), None, "relayNcclGetUniqueId")
        blob = _share(group, key + "/uid", bytes(uid.internal) if rank == 0 else None)
        ctypes.memmove(ctypes.addressof(uid), blob, len(blob))
        _lib.check(
            lib.relayCommInitNcclRank(ctypes.byref(h), nranks, ctypes.byref(uid), rank, index, ctypes.byref(cfg)),
            None, "relayCommInitNcclRank")
    comm = cls(h.value, device)
    comm.guest = bool(ptr)
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

  def broadcast(self, tensor, root, layout, counts=None, dtype=None):
    return collectives.broadcast(tensor, root, layout, comm=self, counts=counts, dtype=dtype)

  def reduce(self, tensor, root, layout, op="sum", counts=None, dtype=None):
    return collectives.reduce(tensor, root, layout, op, comm=self, counts=counts, dtype=dtype)

  def barrier(self):
    return collectives.barrier(comm=self)

  # ---- torchcomms' names (TorchCommRCCLX): one tensor per group, the caller's group's entry carries the
  # data, the others are placeholders that are not read (a helper's give the dtype) ----
  def _tc_entry(self, all_active_ranks, lists):
    """-> (my group or -1, dtype or None, the first thing wrong or None). `lists`: (name, list of per-group
    tensors or None). Nothing is rejected here: the collective gets the reason (collectives.py)."""
    chk = collectives._Call(self)
    _, n, _, g, _ = collectives._parse_layout(chk, all_active_ranks, "all_active_ranks")
    if chk.reason is not None:
      return -1, None, None  # the collective reads the layout again and says what is wrong with it
    for name, ts in lists:
      if ts is not None and (not isinstance(ts, (list, tuple)) or len(ts) != n):
        return -1, None, f"{name} must be a list of {n} tensors (one per group)"
    first = lists[0][1]
    src = first[g] if g >= 0 else (first[0] if first else None)
    if not isinstance(src, torch.Tensor):
      return g, None, f"{lists[0][0]}[{max(g, 0)}] must be a tensor (it gives the dtype)"
    return g, src.dtype, None

  def _tc_done(self, async_op):
    return Work(self.device) if async_op else None

  def sharded_relay_multi_group_all_reduce(self,
                                           tensors,
                                           op,
                                           all_active_ranks,
                                           per_group_counts,
                                           async_op=False,
                                           output_tensors=None):
    g, dt, why = self._tc_entry(all_active_ranks, [("tensors", tensors), ("output_tensors", output_tensors)])
    ok = why is None and g >= 0
    collectives.all_reduce(tensors[g] if ok else None,
                           all_active_ranks,
                           op,
                           comm=self,
                           out=output_tensors[g] if ok and output_tensors is not None else None,
                           counts=per_group_counts,
                           dtype=dt,
                           _reject=why)
    return self._tc_done(async_op)

  def _tc_pair(self, coll, input_tensors, output_tensors, all_active_ranks, counts, async_op, op=None):
    """The three input/output collectives under their torchcomms names."""
    g, dt, why = self._tc_entry(all_active_ranks, [("input_tensors", input_tensors),
                                                   ("output_tensors", output_tensors)])
    x, y = (input_tensors[g], output_tensors[g]) if why is None and g >= 0 else (None, None)
    kw = dict(comm=self, counts=counts, dtype=dt, _reject=why)
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
  store = _store(group)
  if store is not None:
    if blob is not None:
      store.set(key, blob)
      return blob
    return bytes(store.get(key))
  obj = [blob]
  dist.broadcast_object_list(obj, src=dist.get_global_rank(group, 0), group=group)
  return obj[0]


def _group_device(group, device, who):
  """The device a comm over `group` runs on: `device` (an int is a CUDA device), else the current CUDA device
  on a group with an NCCL backend, else the CPU (gloo). Never torch's own error about a missing driver."""
  import torch.distributed as dist
  if device is None:
    backend = str(dist.get_backend(group)).lower()
    device = "cuda" if "nccl" in backend else "cpu"
  device = torch.device("cuda", device) if isinstance(device, int) else torch.device(device)
  if device.type not in ("cpu", "cuda"):
    raise bad_argument(f"{who}: device {device} is neither a CUDA device nor the CPU")
  if device.type == "cuda" and not torch.cuda.is_available():
    raise RelayccError(_lib.NOT_SUPPORTED, f"{who}: the group's backend or device= asks for CUDA, and torch sees "
                       "no CUDA device; on a CPU (gloo) group pass device='cpu' or leave it to the backend")
  return device


def _torch_nccl_comm(group, device):
  """The ncclComm_t (an int) under the group's NCCL backend on `device`, or None where torch offers no
  pointer. The one-element all-reduce first (every rank, whatever it finds next) makes torch create its
  communicator, which it does lazily at a group's first collective."""
  import torch.distributed as dist
  dist.all_reduce(torch.zeros(1, device=device), group=group)
  torch.cuda.current_stream(device).synchronize()
  return nccl_comm_pointer(group, device)


def nccl_comm_pointer(group, device):
  """The NCCL backend object's comm pointer (recent torch: comm_ptr() or _comm_ptr() of ProcessGroupNCCL),
  None where the backend has none or gives 0."""
  try:
    backend = group._get_backend(device)
  except Exception:  # no such backend for the device, or a torch without _get_backend
    return None
  return nccl_comm_pointer_of(backend)


def nccl_comm_pointer_of(backend):
  """A ProcessGroupNCCL backend's comm pointer, None where it gives none or 0 (the torch backend's creator
  asks its inner NCCL)."""
  for attr in ("comm_ptr", "_comm_ptr"):
    get = getattr(backend, attr, None)
    if callable(get):
      try:
        ptr = int(get())
      except Exception:
        continue
      return ptr or None
  return None


def _host_id():
  try:
    with open("/proc/sys/kernel/random/boot_id") as f:
      boot = f.read().strip()
  except OSError:
    boot = ""
  return f"{socket.gethostname()}/{boot}".encode()


def _store(group):
  import torch.distributed as dist
  try:
    from torch.distributed.distributed_c10d import _get_process_group_store
    return _get_process_group_store(group)
  except Exception:  # older or newer torch without it: the default store, whose keys are global
    try:
      return dist.distributed_c10d._get_default_store()
    except Exception:
      return None


def _exchange(group, key, blob):
  """Every rank's bytes, in group rank order, through the group's store (else an object all-gather)."""
  import torch.distributed as dist
  rank, n = dist.get_rank(group), dist.get_world_size(group)
  store = _store(group)
  if store is None:
    out = [None] * n
    dist.all_gather_object(out, blob, group=group)
    return out
  store.set(f"{key}/{rank}", blob)
  return [bytes(store.get(f"{key}/{q}")) for q in range(n)]


def _vote(group, key, why, fn, rank):
  """A local check before init, voted: every rank raises the first failing rank's reason, or none does."""
  got = _exchange(group, key, why.encode())
  bad = [q for q, w in enumerate(got) if w]
  if bad:
    q = bad[0]
    raise RelayccError(_lib.INVALID_USAGE, f"{fn} (rank {rank}): " +
                       (got[q].decode() if q == rank else f"rank {q} refused: {got[q].decode()}"))
