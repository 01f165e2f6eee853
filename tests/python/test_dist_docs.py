"""docs/python.md's DDP and FSDP2 examples, run as written under torchrun (env:// init, 2 ranks)."""
import os
import re
import subprocess
import sys
import tempfile

import pytest

DOC = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "docs", "python.md")


def _examples():
  with open(DOC) as f:
    text = f.read()
  return dict(re.findall(r"<!-- example: (\w+) -->\n```python\n(.*?)```", text, re.S))


@pytest.fixture(scope="module", autouse=True)
def extension():
  from relaycc import torch_backend
  torch_backend.extension()


def test_doc_has_examples():
  assert sorted(_examples()) == ["ddp", "fsdp2"]


@pytest.mark.parametrize("name", ["ddp", "fsdp2"])
def test_doc_example(name):
  code = _examples()[name]
  with tempfile.TemporaryDirectory() as d:
    path = os.path.join(d, f"{name}.py")
    with open(path, "w") as f:
      f.write(code)
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2", path]
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
  out = p.stdout + p.stderr
  assert p.returncode == 0, out[-4000:]
  assert f"{name} ok" in out, out[-4000:]
