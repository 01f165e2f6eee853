"""relaycc as a torch.distributed backend for CPU tensors: `dist.init_process_group("relaycc")`,
`"cpu:relaycc,cuda:nccl"`, `dist.new_group(..., backend="relaycc")`, DeviceMesh dimensions.

The backend is a C++ c10d::Backend (csrc/c10d_backend.cpp), compiled once against the installed torch on
first use with torch.utils.cpp_extension and cached (a c10d extension is bound to the exact torch build).
The creator here runs on the members of each new group with the group's own store: it builds an inner gloo
backend from that store (what relaycc does not serve is forwarded to it), and agrees through the store

  - a token: rank 0 draws it and puts it in the store, every rank reads it; it names the group's shm
    rendezvous (relayCommInitShmUnique), so tcp:// and file:// init and ranks of unrelated parents meet,
    and nothing of the environment (MASTER_*, TORCHELASTIC_RUN_ID, the parent pid) enters it;
  - whether all members are on one host (each puts its host identity; each reads all of them, so every
    rank decides the same): if not, every call is forwarded to gloo.

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


def extension():
  """The compiled backend module, built on first use against this torch and cached: in
  $TORCH_EXTENSIONS_DIR when set, else ~/.cache/relaycc/torch-<version>. The cache key holds the torch
  version, the library and the sources, so a new torch or relaycc builds a new one."""
  global _ext
  if _ext is not None:
    return _ext
  from torch.utils import cpp_extension
  lib = os.path.realpath(_lib.library_path())
  incs = _include_dirs()
  key = hashlib.sha256()
  for part in (torch.__version__, torch.__file__, lib, sys.version):
    key.update(part.encode())
  for path in [_SOURCE] + [os.path.join(d, h) for d in incs for h in ("relaycc.h", "relaycc_version.h")]:
    if os.path.exists(path):
      with open(path, "rb") as f:
        key.update(f.read())
  name = "relaycc_c10d_" + key.hexdigest()[:12]
  root = os.environ.get("TORCH_EXTENSIONS_DIR") or os.path.join(
      os.path.expanduser("~"), ".cache", "relaycc", "torch-" + torch.__version__.replace("+", "_"))
  build = os.path.join(root, name)
  os.makedirs(build, exist_ok=True)
  if not os.path.exists(os.path.join(build, name + ".so")):
    print(f"relaycc: compiling the torch.distributed backend for torch {torch.__version__} "
          f"(once; about a minute; cached in {build})", file=sys.stderr, flush=True)
  lib_dir = os.path.dirname(lib)
  _ext = cpp_extension.load(
      name=name,
      sources=[_SOURCE],
      extra_include_paths=incs,
      extra_cflags=["-O2"],
      # The library this package loaded (ctypes, _lib): the loader reuses it by SONAME.
      extra_ldflags=[f"-L{lib_dir}", f"-l:{os.path.basename(lib)}", f"-Wl,-rpath,{lib_dir}"],
      build_directory=build,
      verbose=bool(os.environ.get("RELAYCC_BUILD_VERBOSE")),
  )
  return _ext


def _host_identity():
  """What tells this host apart: hostname and boot id (a container on one kernel shares /dev/shm only
  when it shares both, in practice)."""
  try:
    with open("/proc/sys/kernel/random/boot_id") as f:
      boot = f.read().strip()
  except OSError:
    boot = ""
  return f"{socket.gethostname()}/{boot}"


def _timeout_ms(timeout):
  if timeout is None:
    return 30 * 60 * 1000
  ms = int(timeout / datetime.timedelta(milliseconds=1))
  return max(1, min(ms, 2**31 - 1))


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
  own.set(f"host/{rank}", _host_identity())
  hosts = {own.get(f"host/{r}").decode() for r in range(size)}
  return extension().RelayBackend(inner, rank, size, token, _timeout_ms(timeout), len(hosts) == 1)


def register():
  """Register "relaycc" with torch.distributed (idempotent: the autoload entry point may have done it,
  with a creator that lands in _create)."""
  if NAME in dist.Backend.backend_list or hasattr(dist.Backend, NAME.upper()):
    return
  dist.Backend.register_backend(NAME, _create, extended_api=True, devices=["cpu"])


def get_backend(group=None):
  """This group's relaycc backend object (relay_active: whether relaycc serves its calls; comm_created:
  whether its relaycc comm exists yet)."""
  pg = group or dist.group.WORLD
  return pg._get_backend(torch.device("cpu"))
