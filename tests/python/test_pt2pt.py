"""send, recv and all_to_all_v_single at shm ranks against the serial reference (pt2pt_cases.py), their
errors through the library (a binding never rejects on its own), and the torch ops under torch.compile."""
import pytest

from common import Pool
from pt2pt_cases import a2av, a2av_mismatch, compiled_pair, mismatch_and_reject, ring
from relaycc import _lib

N = 5


@pytest.fixture(scope="module")
def pool():
  p = Pool(N)
  yield p
  p.close()


def test_ring(pool):
  assert pool.run(ring) == [True] * N


def test_mismatch_and_rejection(pool):
  res = pool.run(mismatch_and_reject)
  code, text = res[1]["mismatch"]
  assert code == _lib.INVALID_USAGE and "rank 0 sends 10 x float" in text and "rank 1 receives 10 x int32" in text
  assert res[1]["mismatch_untouched"]
  code, text = res[1]["remote"]
  assert code == _lib.REMOTE_ERROR and "rank 0 rejected" in text, text
  assert res[1]["remote_untouched"] and res[1]["last"]
  code, text = res[0]["reject"]
  assert code == _lib.INVALID_ARGUMENT and "not contiguous" in text, text


@pytest.mark.parametrize("helper", [-1, 2])
def test_all_to_all_v(pool, helper):
  assert pool.run(a2av, helper) == [True] * N


def test_all_to_all_v_mismatch(pool):
  res = pool.run(a2av_mismatch)
  assert [r for r in range(N) if res[r] is not None] == [1]
  code, text, untouched = res[1]
  assert code == _lib.INVALID_USAGE and "rank 0 sends 2 x int32, rank 1 receives 3 x int32" in text, text
  assert untouched


def test_compiled(pool):
  assert pool.run(compiled_pair, timeout=600) == [True] * N
