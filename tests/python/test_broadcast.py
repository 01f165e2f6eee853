"""relaycc.broadcast, relaycc.reduce (a root POSITION in each group of a layout) and relaycc.barrier at 8
shm ranks, eager: against the serial reference, helpers passing None, a non-root's tensor left as the call
says (reduce: untouched), and a bad argument on one rank raised on every rank through the C library."""
import pytest
import torch

import relaycc
from common import NRANKS, Pool, reduce, value

LAYOUTS = [[[2, 5]], [[0, 1, 2, 3, 4, 5, 6, 7]], [[6, 1, 3], [0, 7, 4]], [[1, 0], [3, 2], [5, 4], [7, 6]]]


@pytest.fixture(scope="module")
def pool():
  p = Pool(NRANKS)
  yield p
  p.close()


def _where(layout, r):
  for g, grp in enumerate(layout):
    if r in grp:
      return g, grp.index(r)
  return -1, -1


def run_rooted(comm, coll, layout, root, counts, dtype_name, op):
  """-> (this rank's tensor after the call or None, its value before)."""
  dt = getattr(torch, dtype_name)
  g, i = _where(layout, comm.rank)
  if g < 0:
    t = None
  else:
    t = value(comm.rank, 0, counts[g], op if coll == "reduce" else None).to(dt)
  before = None if t is None else t.clone()
  if coll == "broadcast":
    relaycc.broadcast(t, root, layout, comm=comm, counts=counts, dtype=dt)
  else:
    relaycc.reduce(t, root, layout, op, comm=comm, counts=counts, dtype=dt)
  return t, before


@pytest.mark.parametrize("coll", ["broadcast", "reduce"])
@pytest.mark.parametrize("dtype_name", ["float32", "int32", "bfloat16"])
def test_rooted(pool, coll, dtype_name):
  dt = getattr(torch, dtype_name)
  ops = ["sum", "max", "avg"] if coll == "reduce" else [None]
  for li, layout in enumerate(LAYOUTS):
    a = len(layout[0])
    for op in ops:
      root = (li + len(ops)) % a
      counts = [7 + 3 * g for g in range(len(layout))] if li != 1 else [0]
      res = pool.run(run_rooted, coll, layout, root, counts, dtype_name, op)
      for r in range(NRANKS):
        g, i = _where(layout, r)
        got, before = res[r]
        if g < 0:
          assert got is None
          continue
        src = layout[g][root]
        if coll == "broadcast":
          want = value(src, 0, counts[g]).to(dt)
        elif i == root:
          want = reduce([value(q, 0, counts[g], op) for q in layout[g]], op, a, dt).to(dt)
        else:
          want = before  # a reduce writes the root's tensor only
        assert torch.equal(got, want), (coll, layout, root, op, r, got, want)


def bad_root_on_one_rank(comm):
  """Rank 3 names root 5 in groups of 2: the library rejects it there, and every rank raises."""
  layout = [[0, 1], [2, 3], [4, 5], [6, 7]]
  t = torch.full((4,), float(comm.rank + 1))
  try:
    relaycc.broadcast(t, 5 if comm.rank == 3 else 0, layout, comm=comm)
  except relaycc.RelayccError as e:
    return str(e), t
  return None, t


def test_bad_root_every_rank_raises(pool):
  res = pool.run(bad_root_on_one_rank)
  for r, (err, t) in enumerate(res):
    assert err is not None, f"rank {r} returned from a call rank 3 rejected"
    assert "rootIndex = 5" in err or "rank 3" in err, err
    assert torch.equal(t, torch.full((4,), float(r + 1))), f"rank {r}: a rejected call wrote its tensor"


def barrier_then_sum(comm):
  relaycc.barrier(comm=comm)
  comm.barrier()
  t = torch.full((3,), float(comm.rank))
  relaycc.reduce(t, 0, [list(range(comm.size))], "sum", comm=comm)
  return t


def test_barrier(pool):
  res = pool.run(barrier_then_sum)
  assert torch.equal(res[0], torch.full((3,), float(sum(range(NRANKS)))))
  for r in range(1, NRANKS):
    assert torch.equal(res[r], torch.full((3,), float(r)))
