"""Run by `run.sh install` after `pip install .`, from outside the source tree, without RELAYCC_LIBRARY: the
installed package imports, finds the library it ships, and two ranks all-reduce through it."""
import os
import subprocess
import sys
import uuid

import relaycc

RANK = """
import sys, torch, relaycc
r, job = int(sys.argv[1]), sys.argv[2]
c = relaycc.Comm.shm(rank=r, world_size=2, job=job, timeout_ms=60000)
t = torch.arange(5, dtype=torch.float32) + 10 * (r + 1)
relaycc.all_reduce(t, [[0, 1]], comm=c)
assert torch.equal(t, 2 * torch.arange(5, dtype=torch.float32) + 30), t
c.destroy()
print("rank", r, "ok")
"""


def test_installed_package_ships_its_library():
  assert "RELAYCC_LIBRARY" not in os.environ
  here = os.path.dirname(os.path.abspath(relaycc.__file__))
  assert "site-packages" in here, here
  assert relaycc.library_path() == os.path.join(here, "librelaycc.so")
  assert os.path.exists(relaycc.library_path())


def test_installed_package_runs_two_ranks():
  job = f"pytest-install-{uuid.uuid4().hex[:8]}"
  procs = [
      subprocess.Popen([sys.executable, "-c", RANK, str(r), job],
                       stdout=subprocess.PIPE,
                       stderr=subprocess.STDOUT,
                       text=True,
                       cwd="/") for r in range(2)
  ]
  for r, p in enumerate(procs):
    out, _ = p.communicate(timeout=300)
    assert p.returncode == 0 and f"rank {r} ok" in out, out


AUTOLOAD = """
import sys, torch, torch.distributed as dist
assert "relaycc" in dist.Backend.backend_list, dist.Backend.backend_list
assert "relaycc" not in sys.modules, "the autoload imported the package"
print("autoload ok")
"""


def test_installed_package_registers_backend_through_torch_autoload():
  """`import torch` alone registers "relaycc" (entry point torch.backends), without importing relaycc;
  the headers the backend compiles against are shipped."""
  p = subprocess.run([sys.executable, "-c", AUTOLOAD], capture_output=True, text=True, cwd="/", timeout=300)
  assert p.returncode == 0 and "autoload ok" in p.stdout, p.stdout + p.stderr
  here = os.path.dirname(os.path.abspath(relaycc.__file__))
  for h in ("relaycc.h", "relaycc_version.h"):
    assert os.path.exists(os.path.join(here, "include", h)), h


PREBUILT = """
import time, relaycc
from relaycc import torch_backend
t0 = time.perf_counter()
m = torch_backend.extension()
print("MODULE", m.__file__, "LOAD_S", time.perf_counter() - t0)
"""


def test_installed_package_ships_torch_backend_built_at_install():
  """run.sh install runs `pip install --no-build-isolation` beside torch: the backend was compiled then,
  shipped in relaycc/torch_ext/, and first use loads it (no compile, no message) in well under a second."""
  here = os.path.dirname(os.path.abspath(relaycc.__file__))
  shipped = [f for f in os.listdir(os.path.join(here, "torch_ext")) if f.endswith(".so")]
  assert len(shipped) == 1, shipped
  env = dict(os.environ, TORCH_EXTENSIONS_DIR="/nonexistent-relaycc-cache")
  p = subprocess.run([sys.executable, "-c", PREBUILT], capture_output=True, text=True, cwd="/", timeout=300,
                     env=env)
  assert p.returncode == 0, p.stdout + p.stderr
  assert "compiling" not in p.stderr, p.stderr
  path, secs = p.stdout.split("MODULE ")[1].split(" LOAD_S ")
  assert path == os.path.join(here, "torch_ext", shipped[0]), path
  assert float(secs) < 1.0, f"loading the backend took {secs} s"
