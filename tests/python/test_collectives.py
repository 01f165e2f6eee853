"""Every collective, dtype and op at 8 shm ranks, in and out of place, on random layouts (idle ranks pass
None), against the serial reference; the torchcomms-named methods against the plain functions."""
import zlib

import pytest
import torch

from cases import async_all_reduce, check_results, make_cases, run_cases
from common import COLLS, DTYPE_NAMES, NRANKS, Pool


@pytest.fixture(scope="module")
def pool():
  p = Pool(NRANKS)
  yield p
  p.close()


@pytest.mark.parametrize("dtype_name", DTYPE_NAMES)
@pytest.mark.parametrize("coll", COLLS)
def test_collective(pool, coll, dtype_name):
  cases = make_cases(coll, dtype_name, seed=zlib.crc32(f"{coll}/{dtype_name}".encode()))
  results = pool.run(run_cases, cases)
  check_results(cases, results)


@pytest.mark.parametrize("coll", ["all_reduce", "reduce_scatter", "all_gather", "all_to_all"])
def test_torchcomms_names(pool, coll):
  """The sharded_relay_multi_group_* methods give what the plain functions give, on the same cases."""
  cases = make_cases(coll, "float32", seed=7) + make_cases(coll, "int32", seed=8)
  plain = pool.run(run_cases, cases, "plain")
  named = pool.run(run_cases, cases, "torchcomms")
  check_results(cases, named)
  for r in range(NRANKS):
    for k in range(len(cases)):
      a, b = plain[r][k]["out"], named[r][k]["out"]
      assert (a is None) == (b is None) and (a is None or torch.equal(a, b))


def test_torchcomms_async(pool):
  res = pool.run(async_all_reduce)
  for t in res:
    assert torch.equal(t, torch.full((9,), float(sum(range(1, NRANKS + 1)))))
