"""relaycc as a torch.distributed backend ("relaycc", CPU): every op against the serial reference at 2, 3
and 8 ranks (tcp:// and file:// init), async work, DDP and FSDP2 training equal to one process, DCP
save/load, subgroups and a DeviceMesh, hundreds of cheap groups. The extension is compiled once per session
(in the build folder's torch_extensions, run.sh) before the ranks start."""
import functools
import tempfile

import pytest
import torch

import dist_cases as dc
from common import Pool, free_port


@pytest.fixture(scope="module", autouse=True)
def extension():
  from relaycc import torch_backend
  torch_backend.extension()


# 8 ranks on the 2-core machine: fewer sizes and dtypes there.
SETUPS = {
    2: dict(url="file:///tmp/{job}.store", dtypes=dc.REDUCE_DTYPES, sizes=[1, 5, 1000, 70000]),
    3: dict(url="tcp", dtypes=["float32", "bfloat16", "int64", "uint8"], sizes=[3, 4097]),
    8: dict(url="tcp", dtypes=["float32", "float16", "int32"], sizes=[2, 300]),
}


@pytest.fixture(scope="module", params=sorted(SETUPS), ids=lambda n: f"{n}ranks")
def setup(request):
  n = request.param
  s = dict(SETUPS[n])
  url = f"tcp://127.0.0.1:{free_port()}" if s["url"] == "tcp" else s["url"]
  p = Pool(n, init=functools.partial(dc.dist_init, url), timeout=600)
  s["pool"], s["n"] = p, n
  yield s
  p.close()


def _clean(results):
  bad = [f"rank {r}: {m}" for r, ms in enumerate(results) for m in ms]
  assert not bad, "\n".join(bad[:40])


def test_backend_is_relaycc(setup):
  facts = setup["pool"].run(dc.case_backend_facts)
  for r, f in enumerate(facts):
    assert f["name"] == "relaycc" and f["relay"] and f["cpu_backend"] == "RelayBackend", f"rank {r}: {f}"
    # The creator saw the group's spec (torch hands it no word of it: read from its caller's frame).
    if torch.cuda.is_available():
      assert f["cuda"].startswith("relaycc, a guest"), f"rank {r}: {f}"
    else:
      assert f["cuda"] == "forwarded to gloo (rank 0: no CUDA device or no NCCL in this torch)", f"rank {r}: {f}"
    assert f["mixed_cuda"] == "not relaycc's: the group's spec gives CUDA tensors to gloo", f"rank {r}: {f}"


def test_all_reduce(setup):
  _clean(setup["pool"].run(dc.case_all_reduce, setup["dtypes"], setup["sizes"], timeout=600))


def test_all_gather(setup):
  _clean(setup["pool"].run(dc.case_all_gather, setup["dtypes"], setup["sizes"], timeout=600))


def test_reduce_scatter(setup):
  _clean(setup["pool"].run(dc.case_reduce_scatter, setup["dtypes"], setup["sizes"][:3], timeout=600))


def test_all_to_all(setup):
  _clean(setup["pool"].run(dc.case_all_to_all, setup["dtypes"], setup["sizes"][:3], timeout=600))


def test_rooted_and_objects(setup):
  _clean(setup["pool"].run(dc.case_rooted, setup["sizes"][:2], timeout=600))


def test_p2p(setup):
  _clean(setup["pool"].run(dc.case_p2p, 33))


def test_async(setup):
  _clean(setup["pool"].run(dc.case_async, 17))


def test_ddp(setup):
  errs = setup["pool"].run(dc.case_ddp, 3, timeout=600)
  assert max(errs) < 1e-5, f"DDP vs one process: max |diff| per rank {errs}"


# FSDP2 and DCP at 2 and 3 ranks: 8 processes' FSDP2 and DCP cost minutes on 2 cores.
@pytest.mark.parametrize("setup", [2, 3], indirect=True, ids=lambda n: f"{n}ranks")
def test_fsdp2_and_dcp(setup):
  with tempfile.TemporaryDirectory() as d:
    res = setup["pool"].run(dc.case_fsdp2, 3, d, timeout=600)
  for r, (err, dcp_err) in enumerate(res):
    assert err < 1e-4, f"rank {r}: FSDP2 vs one process: max |diff| {err}"
    assert dcp_err == 0, f"rank {r}: DCP load differs from what was saved by {dcp_err}"


def test_shared_gpu_rule():
  """Ranks on one GPU (same NCCL host, same device UUID) are found, so the creator leaves CUDA tensors to
  gloo instead of failing the user's init in NCCL's "Duplicate GPU detected"; NCCL_HOSTID apart (the
  8-ranks-on-one-GPU harness) or other UUIDs are not shared."""
  from relaycc import torch_backend as tb
  assert tb._shared_gpu(["gpu:h|GPU-a", "gpu:h|GPU-b", "gpu:h|GPU-a"]) == (0, 2)
  assert tb._shared_gpu(["gpu:h|GPU-a", "gpu:h|GPU-b"]) is None
  assert tb._shared_gpu(["gpu:1|GPU-a", "gpu:2|GPU-a"]) is None
  assert tb._shared_gpu([]) is None
