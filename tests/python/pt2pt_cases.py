"""Rank bodies of test_pt2pt.py (module level: the pool's spawned workers import them; no pytest)."""
import torch

import relaycc


def val(s, d, n, dtype=torch.int32):
  """Block from rank s to rank d: element i is (s + 1) * 1000000 + d * 10000 + i (never zero)."""
  return ((s + 1) * 1000000 + d * 10000 + torch.arange(n, dtype=torch.int64)).to(dtype)


def count(s, d):
  return 0 if (s + d) % 5 == 0 else 37 * s + 11 * d + 1


POISON = -7


def ring(comm):
  """Each rank sends to the next and receives from the previous; even ranks send first (no group: the
  shm rings hold a block, so the eager sends complete)."""
  r, n = comm.rank, comm.size
  nxt, prv = (r + 1) % n, (r - 1) % n
  out = torch.full((count(prv, r),), POISON, dtype=torch.int32)
  if r % 2 == 0:
    relaycc.send(val(r, nxt, count(r, nxt)), nxt, comm=comm)
    relaycc.recv(out, prv, comm=comm)
  else:
    relaycc.recv(out, prv, comm=comm)
    relaycc.send(val(r, nxt, count(r, nxt)), nxt, comm=comm)
  return torch.equal(out, val(prv, r, count(prv, r)))


def mismatch_and_reject(comm):
  """Rank 0 sends float32 where rank 1 receives int32: rank 1's error names both, its tensor untouched.
  Then rank 0 passes a non-contiguous tensor: the binding rejects it through the library, rank 1's receive
  names rank 0's rejection. The pair stays in step: a last transfer arrives whole."""
  r = comm.rank
  got = {}
  if r == 0:
    relaycc.send(torch.ones(10, dtype=torch.float32), 1, comm=comm)
    try:
      relaycc.send(torch.arange(20, dtype=torch.int32)[::2], 1, comm=comm)
    except relaycc.RelayccError as e:
      got["reject"] = (e.code, str(e))
    relaycc.send(val(0, 1, 12), 1, comm=comm)
  elif r == 1:
    out = torch.full((10,), POISON, dtype=torch.int32)
    for key in ("mismatch", "remote"):
      try:
        relaycc.recv(out, 0, comm=comm)
      except relaycc.RelayccError as e:
        got[key] = (e.code, str(e))
      got[key + "_untouched"] = bool((out == POISON).all())
    last = torch.full((12,), POISON, dtype=torch.int32)
    relaycc.recv(last, 0, comm=comm)
    got["last"] = torch.equal(last, val(0, 1, 12))
  return got


def a2av(comm, helper):
  """all_to_all_v_single over the ranks but `helper` (in reverse order), uneven splits with zeros."""
  n = comm.size
  grp = [q for q in reversed(range(n)) if q != helper]
  a = len(grp)
  r = comm.rank
  if r not in grp:
    relaycc.all_to_all_v_single(None, None, None, None, [grp], comm=comm, dtype=torch.int32)
    return True
  me = grp.index(r)

  def cnt(i, j):
    return (3 * i + 5 * j + 1) % 7 * (i + 1)

  sc = [cnt(me, j) for j in range(a)]
  rc = [cnt(j, me) for j in range(a)]
  inp = torch.cat([val(r, grp[j], sc[j]) for j in range(a)])
  out = torch.full((sum(rc),), POISON, dtype=torch.int32)
  relaycc.all_to_all_v_single(out, inp, rc, sc, [grp], comm=comm)
  want = torch.cat([val(grp[j], r, rc[j]) for j in range(a)])
  return torch.equal(out, want)


def a2av_mismatch(comm):
  """Rank 1 expects one element more from rank 0 than rank 0 sends: rank 1's error names both."""
  grp = list(range(comm.size))
  r = comm.rank
  sc = [2] * len(grp)
  rc = [2] * len(grp)
  if r == 1:
    rc[0] = 3
  inp = torch.cat([val(r, q, 2) for q in grp])
  out = torch.full((sum(rc),), POISON, dtype=torch.int32)
  try:
    relaycc.all_to_all_v_single(out, inp, rc, sc, [grp], comm=comm)
  except relaycc.RelayccError as e:
    return (e.code, str(e), bool((out[:3] == POISON).all()))
  return None


def compiled_pair(comm):
  """send/recv as torch ops under torch.compile (aot_eager: the effect tokens of AOTAutograd)."""
  r = comm.rank
  if r > 1:
    return True

  @torch.compile(fullgraph=True, backend="aot_eager")
  def step(x, y):
    if r == 0:
      relaycc.send(x * 2, 1, comm=comm)
      relaycc.recv(y, 1, comm=comm)
    else:
      relaycc.recv(y, 0, comm=comm)
      relaycc.send(x + 1, 0, comm=comm)
    return y

  x = val(r, 1 - r, 9)
  y = torch.full((9,), POISON, dtype=torch.int32)
  y = step(x, y)
  other = val(1 - r, r, 9)
  return torch.equal(y, other * 2 if r == 1 else other + 1)
