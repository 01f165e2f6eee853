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
  for name in ("all_reduce", "reduce_scatter", "all_gather", "all_to_all", "scatter", "gather"):
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
}, "depth")])
def test_bad_config(kw, what):
  with pytest.raises(relaycc.RelayccError, match=what) as e:
    relaycc.Comm.shm(rank=0, world_size=2, job="unused", **kw)
  assert isinstance(e.value, ValueError)


def test_shm_init_error_names_the_argument():
  # rank >= world_size: the C library rejects it at once, and the message comes from relayGetLastError(NULL).
  with pytest.raises(relaycc.RelayccError) as e:
    relaycc.Comm.shm(rank=5, world_size=2, job=f"pytest-api-{os.getpid()}")
  assert e.value.code == _lib.INVALID_ARGUMENT and "rank" in e.value.message


def test_from_process_group_without_nccl(tmp_path):
  if _lib.has_nccl():
    pytest.skip("this librelaycc has the NCCL transport (the GPU checks cover it)")
  with pytest.raises(relaycc.RelayccError, match="built without the NCCL transport"):
    relaycc.Comm.from_process_group()


def test_one_nccl_check_reads_the_maps():
  # Only the mechanism: the GPU runs check the real case (torch's NCCL mapped once).
  libs = relaycc.nccl_libraries()
  assert isinstance(libs, list) and len(set(libs)) == len(libs)


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
