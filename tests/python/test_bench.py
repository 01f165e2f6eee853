"""python -m relaycc.bench under torchrun on CPU (shm against gloo, the comm made from the gloo group): a smoke
test of the tool, its own data check against torch.distributed, its JSON and a clean end."""
import json
import os
import subprocess
import sys


def test_bench_smoke(tmp_path):
  env = dict(os.environ, RELAYCC_BENCH_CPU="1", OMP_NUM_THREADS="1", RELAYCC_TIMEOUT_MS="120000")
  pkg = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "python")
  if "RELAYCC_LIBRARY" in env:  # in-tree: the package from the source tree
    env["PYTHONPATH"] = os.path.abspath(pkg) + os.pathsep + env.get("PYTHONPATH", "")
  cmd = [
      sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "4", "-m",
      "relaycc.bench", "-c", "all_reduce", "-A", "2", "-b", "1K", "-e", "16K", "-f", "4", "-n", "3", "--reps",
      "2", "-w", "1", "--json"
  ]
  p = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=600, cwd=str(tmp_path))
  assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
  # The bench ends its process groups itself (gloo's threads joined before the interpreter's teardown).
  assert "terminate called" not in p.stderr and "destroy_process_group() was not called" not in p.stderr, \
      p.stderr[-3000:]
  doc = json.loads(p.stdout[p.stdout.index("{"):])
  rows = doc["rows"]
  assert [r["size"] for r in rows] == [1024, 4096, 16384]
  for r in rows:
    assert r["check"] and r["relaycc_us"] > 0 and r["torch_us"] > 0 and r["speedup"] > 0, r


def test_bench_bad_argument():
  p = subprocess.run([sys.executable, "-m", "relaycc.bench", "-f", "1"],
                     capture_output=True,
                     text=True,
                     timeout=300)
  assert p.returncode == 2 and "-f 1" in p.stderr


def test_bench_torch_backend_smoke(tmp_path):
  """python -m relaycc.bench --torch --ranks 2: the tool starts its ranks; the "relaycc" backend against gloo
  in the same processes; every row's outputs agree with gloo's, every op and size has a row, and the DDP
  step is timed on both."""
  env = dict(os.environ, OMP_NUM_THREADS="1")
  pkg = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "python")
  if "RELAYCC_LIBRARY" in env:
    env["PYTHONPATH"] = os.path.abspath(pkg) + os.pathsep + env.get("PYTHONPATH", "")
  from relaycc import torch_backend
  torch_backend.extension()  # compiled here once, not by both ranks at once
  cmd = [
      sys.executable, "-m", "relaycc.bench", "--torch", "--ranks", "2", "-b", "4K", "-e", "64K", "-f", "16",
      "-n", "3", "--reps", "2", "-w", "1", "--ddp-steps", "3", "--json"
  ]
  p = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=600, cwd=str(tmp_path))
  assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
  doc = json.loads(p.stdout[p.stdout.index("{"):])
  assert doc["check_failures"] == [], doc["check_failures"]
  ops = ["all_reduce", "all_gather", "reduce_scatter", "all_to_all", "broadcast"]
  assert [(r["op"], r["bytes"]) for r in doc["rows"]] == [(o, s) for o in ops for s in (4096, 65536)]
  for r in doc["rows"]:
    assert r["relaycc_us"] > 0 and r["gloo_us"] > 0 and r["ratio"] > 0 and r["relaycc_spread"] >= 1, r
    assert 2 <= r["calls"] <= 6, r
  assert doc["ddp_step"]["relaycc_ms"] > 0 and doc["ddp_step"]["gloo_ms"] > 0
