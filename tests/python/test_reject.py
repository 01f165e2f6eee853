"""One call, one lockstep (issue 25 item 1): a call the Python layer finds bad is a rejected call of the C
library on that rank (relayCallReject), never a rank that skips the call. At 4 shm ranks, for every kind of
bad argument the package checks, in check mode 0 and 1, on one rank and on every rank: each rank's error or
success and its data in that call, and the next good call right on every rank (README "After a rejected
call" says what each case guarantees); then 300 calls per check mode mixing good and bad calls on random
ranks, each good call against the serial reference."""
import random
import zlib

import pytest
import torch

from cases import expected
from common import OPS, Pool, close
from reject_cases import BUFFER, ROOTED, SAYS, SHAPE, drop, kinds_for, run_calls
from relaycc import _lib

NR = 4
C = 64
ALL4 = [[0, 1, 2, 3]]
COLLS = ("all_reduce", "reduce_scatter", "all_gather", "all_to_all", "scatter", "gather")


@pytest.fixture(scope="module")
def pool():
  p = Pool(NR)
  yield p
  p.close()


def _call(coll, bad, **kw):
  c = {"coll": coll, "dtype": "float32", "op": "sum" if coll in ("all_reduce", "reduce_scatter") else None,
       "in_place": False, "bad": bad}
  if coll in ROOTED:
    c.update(ranks=[0, 1, 2, 3], root=0, counts=[C] * 4)
  else:
    c.update(layout=ALL4, counts=[C])
  c.update(kw)
  return c


def _good(call):
  return dict(call, bad={})


def _ok(call, r, res):
  """A result that says success must be the reference's."""
  want = expected(call, r)
  if want is None:
    return res["out"] is None
  return res["out"] is not None and close(res["out"], want, getattr(torch, call["dtype"]), call["op"])


# The rooted calls take the call's agreement in check mode 0 too on shm (README "After a rejected call").
ROOTED_AGREE = ("scatter", "gather")


def check_call(call, check, res):
  """What README "After a rejected call" says each rank of `call` gets; res[r] is rank r's one_call()."""
  bad = call["bad"]
  shape_bad = any(k in SHAPE for k in bad.values())
  tag = f"check mode {check}, {call}"
  for r in range(NR):
    x = res[r]
    where = f"rank {r}: {tag}: raised={x['raised']} {x['msg']}"
    if r in bad:
      # The rank's own rejection: the library's error, the layer's reason in its text, nothing written.
      assert x["raised"] and x["code"] == _lib.INVALID_ARGUMENT, where
      assert SAYS[bad[r]] in x["msg"] and f"(rank {r}, call #" in x["msg"], where
      assert x["input_kept"] and x["output_kept"], f"{where}: a rejected call wrote caller memory"
    elif bad and (check == 1 or call["coll"] in ROOTED_AGREE):
      # Every rank fails alike, naming the first rejecting rank and quoting its reason; nothing moves (check
      # mode 1, and scatter/gather on shm in check mode 0 too: they agree on their shape first).
      q = min(bad)
      assert x["raised"] and x["code"] == _lib.INVALID_ARGUMENT, where
      assert f"rank {q} rejected the call" in x["msg"] and SAYS[bad[q]] in x["msg"], where
      assert x["input_kept"] and x["output_kept"], f"{where}: data moved in a call every rank refused"
    elif bad and not shape_bad:
      # A peer of a buffer error: success with the reference's data, or relayRemoteError naming a bad rank.
      if x["raised"]:
        assert x["code"] == _lib.REMOTE_ERROR and any(f"rank {q} passed a bad buffer" in x["msg"] for q in bad), where
      else:
        assert _ok(call, r, x), f"{where}: success with wrong data"
      assert x["input_kept"], f"{where}: a failed call changed its input"
    elif bad:
      # A peer of one rank's shape error: an error, or success with right data (a rank that only sends).
      if x["raised"]:
        assert x["code"] in (_lib.REMOTE_ERROR, _lib.INVALID_USAGE), where
      else:
        assert _ok(call, r, x), f"{where}: success with wrong data"
    else:
      assert not x["raised"] and _ok(call, r, x), f"{where}: a good call"
      assert x["input_kept"], f"{where}: the input changed"


def _run(pool, job, check, calls):
  """calls on every rank in one task -> per call, the NR ranks' results."""
  res = pool.run(run_calls, job, check, calls)
  return [[res[r][k] for r in range(NR)] for k in range(len(calls))]


# ---- the issue's case -----------------------------------------------------------------------------------


def test_issue_repro(pool):
  # Rank 1 passes float64 with dtype=float32 (in place, 64 elements), ranks 0, 2, 3 float32; then a good
  # float32 all-reduce of 64. Before: rank 1 raised without calling, rank 0 returned success with data of two
  # calls and rank 1's next call was wrong in 63 of 64 elements.
  bad = _call("all_reduce", {1: "dtype"}, in_place=True)
  first, nxt = _run(pool, "issue", 0, [bad, _good(bad)])
  for r in (0, 2, 3):  # every peer receives from rank 1 in an all-reduce of all four: none may succeed
    assert first[r]["raised"] and first[r]["code"] == _lib.REMOTE_ERROR, \
        (r, first[r]["raised"], first[r]["msg"], _ok(bad, r, first[r]))
  check_call(_good(bad), 0, nxt)  # right on every rank
  check_call(bad, 0, first)
  assert "relayAllReduce (rank 1, call #1): tensor has dtype torch.float64, the call's dtype is torch.float32" \
      in first[1]["msg"]
  pool.run(drop, "issue", 0)


# ---- every kind, both check modes, one rank and every rank ----------------------------------------------

KIND_CALLS = {
    "dtype": _call("all_reduce", {}, in_place=True),
    "op": _call("reduce_scatter", {}),
    "counts": _call("all_gather", {}),
    "inplace": _call("all_to_all", {}),
    "contiguous": _call("all_gather", {}),
    "none": _call("reduce_scatter", {}),
    "unsupported": _call("all_reduce", {}),
    "size": _call("all_to_all", {}),
    "given": _call("scatter", {}),
    "root": _call("gather", {}),
    "layout": _call("scatter", {}),
}


@pytest.mark.parametrize("who", ["one", "all"])
@pytest.mark.parametrize("check", [0, 1])
@pytest.mark.parametrize("kind", sorted(KIND_CALLS))
def test_kind(pool, kind, check, who):
  base = KIND_CALLS[kind]
  ranks = [1] if who == "one" else range(NR)
  bad = dict(base, bad={r: kind for r in ranks if kind in kinds_for(base, r)})
  assert bad["bad"], f"{kind} applies to no rank of {base}"
  job = f"kind-{kind}-{check}-{who}"
  first, nxt = _run(pool, job, check, [bad, _good(bad)])
  check_call(bad, check, first)
  one_shape = check == 0 and kind in SHAPE and len(bad["bad"]) < NR and base["coll"] not in ROOTED_AGREE
  if not one_shape:
    check_call(_good(bad), check, nxt)  # the comm is usable: right on every rank
  else:
    # One rank's shape error fails the comm on the ranks that waited on it (README): the next call is an
    # error there, never stale data.
    for r in range(NR):
      assert nxt[r]["raised"] or _ok(bad, r, nxt[r]), f"rank {r}: {kind}: the next call: success with wrong data"
  pool.run(drop, job, check)


# ---- random: 300 calls per check mode, good and bad on random ranks -----------------------------------


def random_calls(seed, n, check):
  rng = random.Random(seed)
  calls = []
  for _ in range(n):
    coll = rng.choice(COLLS)
    call = {"coll": coll, "dtype": rng.choice(["float32", "int32", "float64", "bfloat16"]),
            "op": rng.choice(OPS) if coll in ("all_reduce", "reduce_scatter") else None,
            "in_place": rng.random() < 0.3, "bad": {}}
    if coll in ROOTED:
      ranks = rng.sample(range(NR), rng.randint(1, NR))
      call.update(ranks=ranks, root=rng.randrange(NR), counts=[rng.choice([0, 1, 5, 33, 100]) for _ in ranks])
    else:
      g = rng.choice([1, 1, 2])
      a = rng.randint(2, NR // g)
      rs = rng.sample(range(NR), g * a)
      layout = [rs[i * a:(i + 1) * a] for i in range(g)]
      counts = [rng.choice([0, 1, 5, 33, 100]) for _ in layout]
      call.update(layout=layout, counts=counts if rng.random() < 0.5 else [counts[0]] * g)
    if rng.random() < 0.45:
      u = rng.random()
      bad_ranks = [rng.randrange(NR)] if u < 0.6 else rng.sample(range(NR), 2) if u < 0.8 else list(range(NR))
      # Check mode 0: a shape error only where every rank makes one (one rank's fails the comm, README), and
      # never beside a buffer error (the two take different paths).
      allowed = SHAPE + BUFFER if check == 1 else (rng.choice([SHAPE, BUFFER]) if len(bad_ranks) == NR else BUFFER)
      for r in bad_ranks:
        ks = [k for k in kinds_for(call, r) if k in allowed]
        if ks:
          call["bad"][r] = rng.choice(ks)
      if check == 0 and any(k in SHAPE for k in call["bad"].values()) and len(call["bad"]) < NR:
        call["bad"] = {}
    calls.append(call)
  return calls


@pytest.mark.parametrize("check", [0, 1])
def test_random(pool, check):
  calls = random_calls(zlib.crc32(f"reject/{check}".encode()), 300, check)
  kinds = {k for c in calls for k in c["bad"].values()}
  assert sum(1 for c in calls if c["bad"]) > 60 and kinds >= set(BUFFER), kinds
  assert check == 0 or kinds >= set(SHAPE), kinds
  assert {c["coll"] for c in calls} == set(COLLS)
  results = _run(pool, f"random-{check}", check, calls)
  for call, res in zip(calls, results):
    check_call(call, check, res)
  pool.run(drop, f"random-{check}", check)
