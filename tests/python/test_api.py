"""The package in one process: what it exports, its errors, and the paths that need no peers."""
import os
import re

import pytest
import torch

import relaycc
from relaycc import _lib


def test_exports_and_ops():
  # The one version source is project(relaycc VERSION ...); the library and __version__ must both say it.
  top = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "CMakeLists.txt")
  with open(top) as f:
    want = re.search(r"project\(relaycc VERSION (\d+)\.(\d+)\.(\d+)", f.read()).groups()
  major, minor, patch = (int(x) for x in want)
  assert relaycc.version() == major * 10000 + minor * 100 + patch
  assert relaycc.__version__ == "%d.%d.%d" % (major, minor, patch)
  with open(os.path.join(os.path.dirname(top), "pyproject.toml")) as f:
    assert re.search(r'^version = "([0-9.]+)"', f.read(), re.M).group(1) == relaycc.__version__
  for name in ("all_reduce", "reduce_scatter", "all_gather", "all_to_all", "scatter", "gather", "send", "recv",
               "all_to_all_v", "broadcast", "reduce"):
    assert hasattr(torch.ops.relaycc, name), name
  assert issubclass(relaycc.RelayccArgumentError, relaycc.RelayccError)
  assert issubclass(relaycc.RelayccArgumentError, ValueError)
  assert os.path.samefile(relaycc.library_path(), os.environ.get("RELAYCC_LIBRARY", relaycc.library_path()))


def test_error_carries_code_and_text():
  e = _lib.error(_lib.TIMEOUT, "relayAllReduce (rank 3, call #1, step 2): passed its deadline")
  assert e.code == _lib.TIMEOUT and "deadline" in e.message and "a wait passed its deadline" in str(e)
  assert not isinstance(e, ValueError)
  assert isinstance(_lib.error(_lib.INVALID_ARGUMENT, "x"), ValueError)


@pytest.mark.parametrize("kw,what", [({
    "route": "bogus"
}, "route 'bogus'"), ({
    "timeout_ms": "soon"
}, "timeout_ms"), ({
    "depth": 1.5
}, "depth"), ({
    "topo": 3
}, "topo"), ({
    "tiemout_ms": 5
}, "'tiemout_ms' is not a config keyword")])
def test_bad_config(kw, what):
  # The C init's error (the rank joins its peers to tell them), under the init's name and the rank.
  with pytest.raises(relaycc.RelayccError, match=what) as e:
    relaycc.Comm.shm(rank=0, world_size=1, job=f"pytest-api-cfg-{os.getpid()}", **kw)
  assert isinstance(e.value, ValueError) and e.value.message.startswith("relayCommInitShm (rank 0): relaycc.Comm: ")


BAD_CONFIG_PEER = """
import sys, time, relaycc
r, job = int(sys.argv[1]), sys.argv[2]
t0 = time.monotonic()
try:
  relaycc.Comm.shm(rank=r, world_size=2, job=job, timeout_ms=60000, **({"route": "bogus"} if r == 1 else {}))
  raise SystemExit("a comm came back")
except relaycc.RelayccError as e:
  dt = time.monotonic() - t0
  want = "rank 1 failed init: " if r == 0 else ""
  assert f"relayCommInitShm (rank {r}): {want}relaycc.Comm: route 'bogus' is not one of" in e.message, e
  assert e.code == (relaycc._lib.REMOTE_ERROR if r == 0 else relaycc._lib.INVALID_ARGUMENT), e
  assert dt < 20.0, f"init failed after {dt:.1f} s (deadline 60 s; the peer's import is in it)"
print("rank", r, "ok")
"""


def test_bad_config_on_one_rank_fails_every_rank_at_once():
  # Rank 1's config error goes through the C init: rank 0 fails at once quoting it, not at its deadline.
  _ranks(BAD_CONFIG_PEER, 2, f"pytest-api-cfgpeer-{os.getpid()}")


def test_shm_init_error_names_the_argument():
  # rank >= world_size: the C library rejects it at once, and the message comes from relayGetLastError(NULL).
  with pytest.raises(relaycc.RelayccError) as e:
    relaycc.Comm.shm(rank=5, world_size=2, job=f"pytest-api-{os.getpid()}")
  assert e.value.code == _lib.INVALID_ARGUMENT and "rank" in e.value.message


HEADER = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "include")


def _header_enums(text):
  """{C type name: {identifier: value}} of every `typedef enum {...} name;` in text; an enum made from a table
  (`RELAY_<NAME>_TABLE(X)`, rows X(identifier, value, ...)) reads that table's rows."""
  tables = {}
  for name, body in re.findall(r"#define (RELAY_\w+_TABLE)\(X\)((?:[^\n]*\\\n)*[^\n]*)", text):
    tables[name] = {k: int(v) for k, v in re.findall(r"X\((relay\w+), (\d+),", body)}
  out = {}
  for body, name in re.findall(r"typedef enum \{(.*?)\}\s*(\w+);", text, re.S):
    body = re.sub(r"/\*.*?\*/", "", body, flags=re.S)
    vals = dict((k, int(v)) for k, v in re.findall(r"(\w+)\s*=\s*(\d+)", body))
    for table in re.findall(r"(RELAY_\w+_TABLE)\(", body):
      vals.update(tables[table])
    out[name] = {k: v for k, v in vals.items() if not k.startswith("relayNum")}
  return out


def test_constants_come_from_the_library():
  # Every enum the package uses is read from librelaycc (relayGetEnumName), and what it reads is relaycc.h's:
  # the same identifiers at the same values, none missing (no hand copy left to go stale).
  with open(os.path.join(HEADER, "relaycc.h")) as f:
    text = f.read()
  enums = _header_enums(text)
  assert _lib._enum(0) == enums["relayEnum_t"]
  kinds = {"Result": "relayResult_t", "DataType": "relayDataType_t", "RedOp": "relayRedOp_t",
           "Route": "relayRoute_t", "Collective": "relayCollective_t", "Enum": "relayEnum_t",
           "CollectiveKind": "relayCollectiveKind_t"}
  assert set(_lib.ENUMS) == set(kinds)
  for kind, ctype in kinds.items():
    assert _lib._enum(_lib.ENUMS[kind]) == enums[ctype], kind
  assert _lib.RESULTS["INVALID_ARGUMENT"] == enums["relayResult_t"]["relayInvalidArgument"]
  assert _lib.INVALID_ARGUMENT == 4 and _lib.REMOTE_ERROR == 6 and _lib.TIMEOUT == 8
  assert {str(d).replace("torch.", "") for d in _lib.DTYPES} <= {k[5:].lower() for k in enums["relayDataType_t"]}
  assert _lib.DTYPES[torch.bfloat16] == enums["relayDataType_t"]["relayBfloat16"]
  assert list(_lib.OPS) == ["sum", "prod", "max", "min", "avg"]
  assert list(_lib.ROUTES) == ["auto", "direct", "relay", "oneshot", "native", "bw"]
  assert list(_lib.COLLECTIVES) == ["all_gather", "reduce_scatter", "all_reduce", "all_to_all", "scatter", "gather",
                                    "send", "recv", "all_to_all_v", "broadcast", "reduce"]
  # What ctypes cannot read from the library: the struct layouts and defines, checked against the headers.
  body = re.search(r"typedef struct relayConfig \{(.*?)\} relayConfig_t;", text, re.S).group(1)
  body = re.sub(r"/\*.*?\*/", "", body, flags=re.S)
  fields = re.findall(r"(\w+)\s*;", body)
  assert [f for f, _ in _lib.RelayConfig._fields_] == fields
  assert re.search(r"#define RELAY_CONFIG_MAGIC (0x[0-9a-f]+)u", text).group(1) == hex(_lib.RELAY_CONFIG_MAGIC)
  assert "#define RELAY_CONFIG_UNDEF_INT INT_MIN" in text and _lib.RELAY_CONFIG_UNDEF_INT == -2**31
  lay = re.search(r"typedef struct \{(.*?)\} relayLayout_t;", text, re.S).group(1)
  assert [f for f, _ in _lib.RelayLayout._fields_] == re.findall(r"(\w+);", lay)
  with open(os.path.join(HEADER, "relaycc_nccl.h")) as f:
    nccl = f.read()
  assert int(re.search(r"#define RELAY_NCCL_UNIQUE_ID_BYTES (\d+)", nccl).group(1)) == _lib.RELAY_NCCL_UNIQUE_ID_BYTES


def test_every_route_is_a_config_value():
  # RELAYCC_ROUTE's names, bw included, each accepted by the config and agreed by a comm.
  for name, code in _lib.ROUTES.items():
    assert relaycc.comm._config(route=name).route == code
    assert relaycc.comm._config(route=name.upper()).route == code
  c = relaycc.Comm.shm(rank=0, world_size=1, job=f"pytest-api-bw-{os.getpid()}", route="bw")
  c.destroy()


def test_one_nccl_counts_only_the_library():
  # NCCL's plugins (net, tuner, profiler) are not a second NCCL; two libnccl.so.* files are.
  maps = "\n".join([
      "7f0000000000-7f0000100000 r-xp 00000000 08:01 1 /opt/torch/lib/libnccl.so.2",
      "7f0000100000-7f0000200000 r--p 00100000 08:01 1 /opt/torch/lib/libnccl.so.2",
      "7f0000300000-7f0000400000 r-xp 00000000 08:01 2 /usr/lib/libnccl-net.so",
      "7f0000500000-7f0000600000 r-xp 00000000 08:01 3 /usr/lib/libnccl-tuner-ofi.so",
      "7f0000700000-7f0000800000 r-xp 00000000 08:01 4 /usr/lib/libnccl-profiler.so",
      "7f0000900000-7f0000a00000 rw-p 00000000 00:00 0 ",
      "7f0000b00000-7f0000c00000 r-xp 00000000 08:01 5 /usr/lib/libnccl_static_helper.so",
  ])
  assert relaycc.nccl_libraries(maps) == ["/opt/torch/lib/libnccl.so.2"]
  two = maps + "\n7f0000d00000-7f0000e00000 r-xp 00000000 08:01 6 /usr/local/nccl/lib/libnccl.so.2.21.5"
  assert relaycc.nccl_libraries(two) == ["/opt/torch/lib/libnccl.so.2", "/usr/local/nccl/lib/libnccl.so.2.21.5"]
  assert isinstance(relaycc.nccl_libraries(), list)  # this process's own maps read without error
  # A ROCm torch maps RCCL (NCCL's names, NCCL's ABI) and its net plugin: one NCCL; with a libnccl, two.
  rocm = "\n".join([
      "7f0000000000-7f0000100000 r-xp 00000000 08:01 7 /opt/torch/lib/librccl.so.1",
      "7f0000300000-7f0000400000 r-xp 00000000 08:01 8 /opt/rocm/lib/librccl-net.so",
  ])
  assert relaycc.nccl_libraries(rocm) == ["/opt/torch/lib/librccl.so.1"]
  assert len(relaycc.nccl_libraries(rocm + "\n" + maps)) == 2


class _Backend:

  def __init__(self, **ptrs):
    for k, v in ptrs.items():
      setattr(self, k, (lambda v: lambda: v)(v))


class _Group:

  def __init__(self, backend):
    self.backend = backend

  def _get_backend(self, device):
    if self.backend is None:
      raise RuntimeError("no backend for " + str(device))
    return self.backend


def test_nccl_comm_pointer_choice():
  # from_process_group attaches to torch's communicator where the backend gives its pointer (comm_ptr in torch
  # 2.15, _comm_ptr before), and falls back to a comm of its own (None) where it gives none.
  dev = torch.device("cuda", 0)
  pick = relaycc.comm.nccl_comm_pointer
  assert pick(_Group(_Backend(_comm_ptr=0x7f00dead0000)), dev) == 0x7f00dead0000
  assert pick(_Group(_Backend(comm_ptr=0x1234, _comm_ptr=0x5678)), dev) == 0x1234
  assert pick(_Group(_Backend()), dev) is None  # an older torch: no pointer
  assert pick(_Group(_Backend(_comm_ptr=0)), dev) is None  # not created yet
  assert pick(_Group(None), dev) is None  # no backend for the device


def test_from_process_group_needs_a_group():
  with pytest.raises(relaycc.RelayccError, match="torch.distributed is not initialized"):
    relaycc.Comm.from_process_group()


SHARE = """
import sys, torch.distributed as dist
from relaycc.comm import _share
r, init = int(sys.argv[1]), sys.argv[2]
dist.init_process_group("gloo", init_method=init, rank=r, world_size=3)
sub = dist.new_group([1, 2])  # rank 1 is the subgroup's rank 0: the one that makes the id
blob = bytes(range(128)) if r == 1 else None
if r in (1, 2):
  got = _share(sub, "relaycc/uid/test/0", blob)
  assert got == bytes(range(128)), got
print("rank", r, "ok")
dist.destroy_process_group()
"""


def test_unique_id_travels_through_the_group_store(tmp_path):
  # from_process_group's id exchange (the rest of it needs the NCCL transport: the GPU checks).
  import subprocess
  import sys
  init = f"file://{tmp_path}/store"
  env = dict(os.environ)
  procs = [
      subprocess.Popen([sys.executable, "-c", SHARE, str(r), init],
                       stdout=subprocess.PIPE,
                       stderr=subprocess.STDOUT,
                       text=True,
                       env=env) for r in range(3)
  ]
  for r, p in enumerate(procs):
    out, _ = p.communicate(timeout=300)
    assert p.returncode == 0 and f"rank {r} ok" in out, out


PG = """
import os, sys, numpy as np, torch, torch.distributed as dist, relaycc
r, init = int(sys.argv[1]), sys.argv[2]
dist.init_process_group("gloo", init_method=init, rank=r, world_size=3)
env = dict(os.environ)
comm = relaycc.Comm.from_process_group()  # a gloo group: the shm transport, named through the group's store
assert comm.device == torch.device("cpu") and (comm.rank, comm.size) == (r, 3), comm
t = torch.full((5,), float(r + 1))
relaycc.all_reduce(t, [[0, 1, 2]], comm=comm)
assert torch.equal(t, torch.full((5,), 6.0)), t
# numpy integers in the layout and counts, a ReduceOp instance (not only its RedOpType) as the op.
t = torch.arange(4, dtype=torch.float32) * (r + 1)
relaycc.all_reduce(t, [np.array([0, 1, 2])], dist.ReduceOp(dist.ReduceOp.MAX), comm=comm, counts=[np.int64(4)])
assert torch.equal(t, torch.arange(4, dtype=torch.float32) * 3), t
sub = dist.new_group([1, 2])
if r in (1, 2):
  sc = relaycc.Comm.from_process_group(sub)  # the group's own rank numbers
  assert (sc.rank, sc.size) == (r - 1, 2), sc
  x = torch.full((3,), float(10 * r))
  relaycc.all_reduce(x, [[0, 1]], comm=sc, op=dist.ReduceOp.MIN)
  assert torch.equal(x, torch.full((3,), 10.0)), x
  sc.destroy()
try:
  relaycc.Comm.from_process_group(device="cuda")
  raise SystemExit("device=cuda on a machine without CUDA made a comm")
except relaycc.RelayccError as e:
  assert "CUDA" in str(e) and "NVIDIA driver" not in str(e), e
comm.destroy()
assert dict(os.environ) == env, "the environment changed"
print("rank", r, "ok")
dist.destroy_process_group()
"""


def _ranks(script, n, *args, timeout=300):
  import subprocess
  import sys
  procs = [
      subprocess.Popen([sys.executable, "-c", script, str(r), *args],
                       stdout=subprocess.PIPE,
                       stderr=subprocess.STDOUT,
                       text=True,
                       env=dict(os.environ)) for r in range(n)
  ]
  outs = [p.communicate(timeout=timeout)[0] for p in procs]
  for r, (p, out) in enumerate(zip(procs, outs)):
    assert p.returncode == 0 and f"rank {r} ok" in out, out
  return outs


def test_from_process_group_on_a_cpu_group(tmp_path):
  _ranks(PG, 3, f"file://{tmp_path}/store")


FIRST = """
import sys, time, torch, relaycc
r, job = int(sys.argv[1]), sys.argv[2]
c = relaycc.Comm.shm(rank=r, world_size=2, job=job, timeout_ms=3000)
t = torch.full((8,), float(r + 1))
t0 = time.monotonic()
relaycc.all_reduce(t, [[0, 1]], comm=c)  # the process's first call: no op registration inside its deadline
dt = time.monotonic() - t0
assert torch.equal(t, torch.full((8,), 3.0)), t
assert dt < 2.0, f"the first call took {dt:.1f} s"
c.destroy()
print("rank", r, "ok", f"{dt:.3f}")
"""


def test_first_call_within_a_short_deadline():
  # The first eager call of a process used to take 2-12 s (the torch op's dispatch imports the compiler stack),
  # inside the call's deadline: with timeout_ms=3000 the peer could time out, and the call was slow anyway.
  _ranks(FIRST, 2, f"pytest-first-{os.getpid()}")
