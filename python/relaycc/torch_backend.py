"""relaycc as a torch.distributed backend: `dist.init_process_group("relaycc")` (CPU and CUDA tensors),
`"cpu:relaycc,cuda:nccl"` (CPU tensors), `dist.new_group(..., backend="relaycc")`, DeviceMesh dimensions.

The backend is a C++ c10d::Backend (csrc/c10d_backend.cpp), compiled once against the installed torch on
first use with torch.utils.cpp_extension and cached (a c10d extension is bound to the exact torch build).
The creator here runs on the members of each new group with the group's own store: it builds an inner gloo
backend from that store (what relaycc does not serve is forwarded to it), and agrees through the store

  - a token: rank 0 draws it and puts it in the store, every rank reads it; it names the group's shm
    rendezvous (relayCommInitShmUnique), so tcp:// and file:// init and ranks of unrelated parents meet,
    and nothing of the environment (MASTER_*, TORCHELASTIC_RUN_ID, the parent pid) enters it;
  - whether all members are on one host (each puts its host identity; each reads all of them, so every
    rank decides the same): if not, every call is forwarded to gloo.

Where the group's CUDA tensors are the backend's too (`init_process_group("relaycc")` on a machine with
GPUs), the creator also builds torch's own ProcessGroupNCCL from the same store (the inner NCCL), makes it
create its communicator now on the group's device (eager connect: never inside a user's call) and attaches
a relaycc comm to that communicator as a guest (relayCommInitNccl, as relaycc.Comm.from_process_group
does): no second NCCL communicator, nothing in the environment changed, the group's timeout as relaycc's
deadline. Each CUDA call then takes relaycc's route where the router predicts it beats NCCL's collective
(relayCallRouted, the same answer on every rank), else the inner NCCL's op. A CUDA side that cannot be
built on every member (no GPU, another NCCL mapped, the attach failed: all voted) leaves every CUDA call
to the inner NCCL, or to gloo where there is none.

docs/python.md describes what is served and what is forwarded.
"""
import datetime
import hashlib
import os
import socket
import sys
import uuid

import torch
import torch.distributed as dist

from . import _lib

NAME = "relaycc"
# CPU tensors always; CUDA ones where the machine has them (the creator decides per group, _cuda_side).
DEVICES = ["cpu", "cuda"]
_SOURCE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "csrc", "c10d_backend.cpp")
_ext = None


def _include_dirs():
  """relaycc.h and relaycc_version.h: the wheel ships them in relaycc/include; in the source tree they are
  include/ and the build folder's generated/include (RELAYCC_LIBRARY names a build's library)."""
  here = os.path.dirname(os.path.abspath(__file__))
  shipped = os.path.join(here, "include")
  if os.path.exists(os.path.join(shipped, "relaycc.h")):
    return [shipped]
  lib_dir = os.path.dirname(os.path.realpath(_lib.library_path()))
  dirs = [os.path.join(here, "..", "..", "include"), os.path.join(lib_dir, "generated", "include")]
  dirs = [os.path.abspath(d) for d in dirs]
  for header in ("relaycc.h", "relaycc_version.h"):
    if not any(os.path.exists(os.path.join(d, header)) for d in dirs):
      raise ImportError(f"relaycc: {header} not found in {dirs} (needed to build the torch backend)")
  return dirs


def _name(incs):
  """The module's name: a key of what it is bound to (torch's version and files, this Python, the
  source and relaycc's headers), so a new torch or relaycc gets a new one. Not the library's path: the
  module links the library by its SONAME, which the package has loaded (ctypes, _lib) before it."""
  key = hashlib.sha256()
  for part in (torch.__version__, torch.__file__, sys.version):
    key.update(part.encode())
  for path in [_SOURCE] + [os.path.join(d, h) for d in incs for h in ("relaycc.h", "relaycc_version.h")]:
    if os.path.exists(path):
      with open(path, "rb") as f:
        key.update(f.read())
  return "relaycc_c10d_" + key.hexdigest()[:12]


def _compile(name, incs, build, verbose=False):
  from torch.utils import cpp_extension
  lib = os.path.realpath(_lib.library_path())
  return cpp_extension.load(
      name=name,
      sources=[_SOURCE],
      extra_include_paths=incs,
      extra_cflags=["-O2"],
      extra_ldflags=[f"-L{os.path.dirname(lib)}", f"-l:{os.path.basename(lib)}"],
      build_directory=build,
      verbose=verbose or bool(os.environ.get("RELAYCC_BUILD_VERBOSE")),
  )


def extension():
  """The compiled backend module: the one `pip install --no-build-isolation` built beside this package
  (relaycc/torch_ext/, when torch was importable then and is the same torch now), else built on first
  use against this torch and cached in $TORCH_EXTENSIONS_DIR when set, else
  ~/.cache/relaycc/torch-<version>."""
  global _ext
  if _ext is not None:
    return _ext
  incs = _include_dirs()
  name = _name(incs)
  shipped = os.path.join(os.path.dirname(os.path.abspath(__file__)), "torch_ext", name + ".so")
  if os.path.exists(shipped):
    import importlib.util
    spec = importlib.util.spec_from_file_location(name, shipped)
    _ext = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(_ext)
    return _ext
  root = os.environ.get("TORCH_EXTENSIONS_DIR") or os.path.join(
      os.path.expanduser("~"), ".cache", "relaycc", "torch-" + torch.__version__.replace("+", "_"))
  build = os.path.join(root, name)
  os.makedirs(build, exist_ok=True)
  if not os.path.exists(os.path.join(build, name + ".so")):
    print(f"relaycc: compiling the torch.distributed backend for torch {torch.__version__} "
          f"(once; about a minute; cached in {build})", file=sys.stderr, flush=True)
  _ext = _compile(name, incs, build)
  return _ext


def prebuild(out):
  """`pip install` (python/CMakeLists.txt): compile the module into out/ for relaycc/torch_ext/."""
  incs = _include_dirs()
  name = _name(incs)
  print(f"relaycc: compiling the torch.distributed backend for torch {torch.__version__} now (pip install "
        f"beside torch; about a minute on 2 cores)", file=sys.stderr, flush=True)
  os.makedirs(out, exist_ok=True)
  _compile(name, incs, out, verbose=True)
  return os.path.join(out, name + ".so")


def _host_identity():
  """What tells this host apart: hostname and boot id (a container on one kernel shares /dev/shm only
  when it shares both, in practice)."""
  try:
    with open("/proc/sys/kernel/random/boot_id") as f:
      boot = f.read().strip()
  except OSError:
    boot = ""
  return f"{socket.gethostname()}/{boot}"


def _device_key(device):
  """The GPU as NCCL tells ranks' GPUs apart: its host (NCCL_HOSTID where set, which NCCL reads in place of
  the host's own hash, else this host's identity) and the device's UUID."""
  host = os.environ.get("NCCL_HOSTID") or _host_identity()
  try:
    gpu = str(torch.cuda.get_device_properties(device).uuid)
  except Exception:  # a torch without the UUID: the index on this host
    gpu = f"cuda:{device.index}"
  return f"{host}|{gpu}"


def _shared_gpu(keys):
  """(r, s), the first two ranks whose device keys (_device_key) are equal, else None: NCCL refuses two ranks
  of one communicator on one GPU ("Duplicate GPU detected"), as in a CPU job of several ranks on a GPU host."""
  first = {}
  for r, k in enumerate(keys):
    if k in first:
      return first[k], r
    first[k] = r
  return None


def _timeout_ms(timeout):
  if timeout is None:
    return 30 * 60 * 1000
  ms = int(timeout / datetime.timedelta(milliseconds=1))
  return max(1, min(ms, 2**31 - 1))


def _group_creation():
  """(device -> backend map, device_id) of the group being created, read from torch's group-creation frame:
  the creator's caller (_new_process_group_helper, torch 2.x) holds them as `backend_config` and
  `device_id`. torch hands an extended-API creator no word of the devices it will serve
  (_DistributedBackendOptions carries the store, ranks, timeout and group id only), and "relaycc" and
  "cpu:relaycc,cuda:nccl" call it alike, on the "cpu" entry. ({}, None) where no caller holds them (a
  torch that creates groups otherwise): the group is then CPU-only, which every rank decides alike."""
  f = sys._getframe(1)
  for _ in range(10):  # _create's caller is at most a wrapper or two away (autoload entry point)
    if f is None:
      break
    cfg = f.f_locals.get("backend_config")
    if cfg is not None and hasattr(cfg, "get_device_backend_map"):
      try:
        m = {str(k).lower(): str(v).lower() for k, v in cfg.get_device_backend_map().items()}
      except Exception:
        return {}, None
      dev = f.f_locals.get("device_id")
      return m, dev if isinstance(dev, torch.device) else None
    f = f.f_back
  return {}, None


def _serves_cuda(device_map):
  """Whether this group's CUDA tensors come to this backend: its spec gives relaycc the "cuda" device
  ("relaycc", "cuda:relaycc,..."), not NCCL ("cpu:relaycc,cuda:nccl"). The same answer on every member
  (the same spec)."""
  return device_map.get("cuda") == NAME


def _gather(own, key, rank, size, value):
  own.set(f"{key}/{rank}", value)
  return [own.get(f"{key}/{r}").decode() for r in range(size)]


def _cuda_side(dist_opts, own, timeout, host_ok, device_map, device_id):
  """(inner NCCL backend, relaycc guest comm handle or 0, device index, status) or (None, 0, -1, status);
  see the module's docstring; status says in words what serves the group's CUDA tensors and why (the same
  on every rank: cuda_status). Each step that may differ between ranks is voted through the group's store
  first."""
  rank, size = dist_opts.group_rank, dist_opts.group_size
  if not _serves_cuda(device_map):
    return None, 0, -1, f"not relaycc's: the group's spec gives CUDA tensors to {device_map.get('cuda', 'none')}"
  device = None
  if not dist.is_nccl_available() or not torch.cuda.is_available():
    mine = "why:no CUDA device or no NCCL in this torch"
  else:
    # init_process_group(device_id=...)'s device, else the current one (torch's own rule for NCCL). A rank
    # whose CUDA fails here (torch.cuda.current_device() raises where the driver's init fails though the
    # device count said yes) votes its error: raising would leave its peers in this vote's store.get until
    # the store's deadline (30 min by default) and fail the user's init over relaycc's CUDA side.
    try:
      device = torch.device("cuda", device_id.index if device_id is not None and device_id.type == "cuda"
                            and device_id.index is not None else torch.cuda.current_device())
      mine = "gpu:" + _device_key(device)
    except Exception as e:
      mine = f"why:CUDA failed on this rank ({type(e).__name__}: {(str(e).splitlines() or [''])[0][:160]})"
  votes = _gather(own, "cuda", rank, size, mine)
  bad = next((r for r, v in enumerate(votes) if v.startswith("why:")), None)
  if bad is not None:
    return None, 0, -1, f"forwarded to gloo (rank {bad}: {votes[bad][4:]})"
  shared = _shared_gpu(votes)
  if shared:  # NCCL's init would fail on every rank ("Duplicate GPU detected"): a CPU job on a GPU host
    return None, 0, -1, (f"forwarded to gloo (ranks {shared[0]} and {shared[1]} share a GPU; NCCL takes one "
                         f"GPU per rank)")
  opts = dist.ProcessGroupNCCL.Options()
  opts._timeout = timeout
  try:  # torch's names for its logs and flight recorder (absent in some versions: only names)
    opts.group_name = f"{dist_opts.group_id}:relaycc-nccl"
    opts.global_ranks_in_group = list(dist_opts.global_ranks_in_group)
  except Exception:
    pass
  # The inner NCCL's communicator, now (collective over the members, who all run this creator). A failure
  # here leaves the group's CUDA tensors to gloo on every rank (voted), never the user's init failed by
  # relaycc's inner NCCL.
  nccl, failed = None, ""
  try:
    nccl = dist.ProcessGroupNCCL(dist.PrefixStore("nccl/", dist_opts.store), rank, size, opts)
    with torch.cuda.device(device):
      nccl.eager_connect_single_device(device)
  except Exception as e:  # torch's DistBackendError and its kin: a line of it is the status
    failed = f"{type(e).__name__}: {(str(e).splitlines() or [''])[0][:160]}"
  # What this rank would stop: its inner NCCL's connection ("nccl:" why, then gloo serves the group's CUDA
  # tensors on every rank), else relaycc's attach to it ("attach:" why, then the inner NCCL does); one vote
  # for both.
  why = ""
  if failed:
    why = "nccl:" + failed
  else:
    from .comm import nccl_comm_pointer_of, nccl_libraries
    ptr = nccl_comm_pointer_of(nccl)
    if not host_ok:
      why = "attach:the group spans hosts"
    elif not _lib.has_nccl():
      why = f"attach:{_lib.library_path()} has no NCCL transport"
    elif len(nccl_libraries()) > 1:
      why = f"attach:{len(nccl_libraries())} NCCL libraries are mapped in this process"
    elif not ptr:
      why = "attach:torch gives no pointer to its NCCL communicator"
  votes = _gather(own, "nccl", rank, size, why)
  bad = next((r for r, w in enumerate(votes) if w.startswith("nccl:")), None)
  if bad is not None:
    if nccl is not None:
      try:
        nccl.abort()
      except Exception:
        pass
    status = f"forwarded to gloo (rank {bad}: the inner NCCL did not connect: {votes[bad][5:]})"
    print(f"relaycc: rank {rank}: CUDA calls {status}", file=sys.stderr)
    return None, 0, -1, status
  bad = next((r for r, w in enumerate(votes) if w), None)
  if bad is not None:
    status = f"forwarded to the inner NCCL (rank {bad}: {votes[bad][7:]})"
    print(f"relaycc: rank {rank}: CUDA calls {status}", file=sys.stderr)
    return nccl, 0, device.index, status
  import ctypes
  from .comm import _config
  cfg = _config(timeout_ms=_timeout_ms(timeout))
  h = ctypes.c_void_p()
  with torch.cuda.device(device):
    res = _lib.lib.relayCommInitNccl(ctypes.byref(h), ptr, ctypes.byref(cfg))
  if res != _lib.SUCCESS:  # voted inside the init: every rank got an error
    status = (f"forwarded to the inner NCCL (relayCommInitNccl: "
              f"{(_lib.lib.relayGetLastError(None) or b'').decode()})")
    print(f"relaycc: rank {rank}: CUDA calls {status}", file=sys.stderr)
    return nccl, 0, device.index, status
  return nccl, h.value, device.index, f"relaycc, a guest on the inner NCCL's communicator (cuda:{device.index})"


# group name -> what serves the group's CUDA tensors, in words (cuda_status).
_CUDA_STATUS = {}


def cuda_status(group=None):
  """What serves this relaycc group's CUDA tensors and why, as its creator decided on every member alike:
  "relaycc, a guest on the inner NCCL's communicator (cuda:N)", "forwarded to the inner NCCL (rank R:
  why)", "forwarded to gloo (rank R: why)" or "not relaycc's: ..." (the spec gave them to another
  backend). The decision is every member's; the text may name this rank's own device (cuda:N) or, where
  relayCommInitNccl failed (on every rank: its init votes), this rank's own error text."""
  pg = group or dist.group.WORLD
  return _CUDA_STATUS.get(str(pg.group_name), "unknown: not a relaycc group of this process")


def _create(dist_opts, backend_options=None):
  """The creator torch calls on each member of a new group (extended API)."""
  store, rank, size, timeout = dist_opts.store, dist_opts.group_rank, dist_opts.group_size, dist_opts.timeout
  # The inner gloo under a prefix of its own: its keys and ours never meet.
  inner = dist.ProcessGroupGloo(dist.PrefixStore("gloo/", store), rank, size, timeout)
  own = dist.PrefixStore("relaycc/", store)
  if rank == 0:
    own.set("token", uuid.uuid4().hex)
  # The job name: the token (unique per group and launch) is the whole rendezvous.
  token = "torch-" + own.get("token").decode()
  hosts = set(_gather(own, "host", rank, size, _host_identity()))
  device_map, device_id = _group_creation()
  nccl, cuda_comm, cuda_device, _CUDA_STATUS[str(dist_opts.group_id)] = _cuda_side(
      dist_opts, own, timeout, len(hosts) == 1, device_map, device_id)
  backend = extension().RelayBackend(inner, rank, size, token, _timeout_ms(timeout), len(hosts) == 1, nccl,
                                     cuda_comm, cuda_device)
  # torch's own abort of the inner NCCL group (its watchdog's) ends relaycc's waits and kernels first.
  if cuda_comm and getattr(nccl, "supports_abort_hooks", lambda: False)():
    nccl.register_abort_hook(0, backend.abort_relay)
  return backend


def register():
  """Register "relaycc" with torch.distributed (idempotent: the autoload entry point may have done it,
  with a creator that lands in _create)."""
  if NAME in dist.Backend.backend_list or hasattr(dist.Backend, NAME.upper()):
    return
  dist.Backend.register_backend(NAME, _create, extended_api=True, devices=DEVICES)


def get_backend(group=None):
  """This group's relaycc backend object (relay_active: whether relaycc serves its calls; comm_created:
  whether its relaycc comm exists yet)."""
  pg = group or dist.group.WORLD
  return pg._get_backend(torch.device("cpu"))


def abort(group=None):
  """Abort the group's relaycc backend (relaycc's comms, then the inner gloo and NCCL): a call in
  flight on any rank ends with DistBackendError; torch's own `dist.abort` reaches it as well."""
  get_backend(group).abort()


def shutdown(group=None):
  """Shut the group's relaycc backend down (after every member's last call): the comms are destroyed."""
  get_backend(group).shutdown()


if __name__ == "__main__":
  # python -m relaycc.torch_backend --prebuild DIR (the wheel's build step)
  if len(sys.argv) == 3 and sys.argv[1] == "--prebuild":
    print(prebuild(sys.argv[2]))
  else:
    sys.exit("usage: python -m relaycc.torch_backend --prebuild DIR")
