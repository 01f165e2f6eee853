"""Cases of the collective tests and the serial reference (imported by the pool's workers: no pytest)."""
import random

import torch

import relaycc
from common import NRANKS, OPS, POISON, close, reduce, value

REDUCING = ("all_reduce", "reduce_scatter")
ROOTED = ("scatter", "gather")

# ---- cases (made in the test process, run on every rank) ------------------------------------------

COUNT_CHOICES = [0, 1, 5, 33, 128, 700, 3000]


def random_layout(rng, n=NRANKS):
  g = rng.choice([1, 1, 2, 3, 4])
  a = rng.randint(2, n // g)
  ranks = rng.sample(range(n), g * a)
  return [ranks[i * a:(i + 1) * a] for i in range(g)]


def make_cases(coll, dtype_name, seed):
  rng = random.Random(seed)
  ops = OPS if coll in REDUCING else [None]
  places = [False] if coll == "all_to_all" else [False, True]
  cases = []
  for op in ops:
    for in_place in places:
      for rep in range(1 if coll in REDUCING else 2):
        case = {
            "coll": coll,
            "dtype": dtype_name,
            "op": op,
            "in_place": in_place,
            "infer": rng.random() < 0.5
        }
        if coll in ROOTED:
          ranks = rng.sample(range(NRANKS), rng.randint(1, NRANKS))
          root = rng.randrange(NRANKS)
          if in_place and root not in ranks:
            ranks[rng.randrange(len(ranks))] = root  # in place needs the root in the set
          case.update(ranks=ranks, root=root, counts=[rng.choice(COUNT_CHOICES[:6]) for _ in ranks])
        else:
          layout = random_layout(rng)
          if rng.random() < 0.5:
            counts = [rng.choice(COUNT_CHOICES)] * len(layout)
          else:
            counts = [rng.choice(COUNT_CHOICES) for _ in layout]
          case.update(layout=layout, counts=counts)
        cases.append(case)
  return cases


def _where(layout, r):
  for g, grp in enumerate(layout):
    if r in grp:
      return g, grp.index(r)
  return -1, -1


def _poison(n, dt):
  return torch.full((n,), POISON, dtype=dt)


# ---- one rank's side ------------------------------------------------------------------------------


def run_case(comm, case, api="plain"):
  """Runs one case on this rank. -> {"out": result tensor or None, "send_ok": send buffer untouched}."""
  r, dt, op, coll = comm.rank, getattr(torch, case["dtype"]), case["op"], case["coll"]
  if coll in ROOTED:
    return _run_rooted(comm, case, dt)
  layout, counts = case["layout"], case["counts"]
  g, i = _where(layout, r)
  a = len(layout[0])
  uniform = len(set(counts)) == 1
  # An active rank may leave counts/dtype to its tensors (uniform counts only); a helper never can.
  cnt = None if (case["infer"] and g >= 0 and uniform) else counts
  dd = None if (case["infer"] and g >= 0) else dt
  if g < 0:
    _helper_call(comm, coll, layout, counts, dt, op, api)
    return {"out": None, "send_ok": True}
  c = counts[g]
  send_ok = True
  if coll == "all_reduce":
    x = value(r, g, c, op).to(dt)
    keep = x.clone()
    if case["in_place"]:
      _call(comm, api, coll, x, None, layout, op, cnt, dd)
      out = x
    else:
      out = _poison(c, dt)
      _call(comm, api, coll, x, out, layout, op, cnt, dd)
      send_ok = torch.equal(x, keep)
  elif coll == "reduce_scatter":
    x = torch.cat([value(r, g * 8 + j, c, op) for j in range(a)]).to(dt)
    keep = x.clone()
    if case["in_place"]:
      view = x[i * c:(i + 1) * c]
      _call(comm, api, coll, x, view, layout, op, cnt, dd)
      out = view.clone()
      # The other blocks of the input are the caller's: untouched.
      send_ok = torch.equal(torch.cat([x[:i * c], x[(i + 1) * c:]]),
                            torch.cat([keep[:i * c], keep[(i + 1) * c:]]))
    else:
      out = _poison(c, dt)
      _call(comm, api, coll, x, out, layout, op, cnt, dd)
      send_ok = torch.equal(x, keep)
  elif coll == "all_gather":
    mine = value(r, g, c).to(dt)
    out = _poison(a * c, dt)
    if case["in_place"]:
      out[i * c:(i + 1) * c] = mine
      _call(comm, api, coll, out[i * c:(i + 1) * c], out, layout, None, cnt, dd)
    else:
      _call(comm, api, coll, mine, out, layout, None, cnt, dd)
      send_ok = torch.equal(mine, value(r, g, c).to(dt))
  else:  # all_to_all
    x = torch.cat([value(r, g * 8 + j, c) for j in range(a)]).to(dt)
    keep = x.clone()
    out = _poison(a * c, dt)
    _call(comm, api, coll, x, out, layout, None, cnt, dd)
    send_ok = torch.equal(x, keep)
  return {"out": out, "send_ok": send_ok}


def _call(comm, api, coll, x, y, layout, op, counts, dtype):
  """The plain function, or the torchcomms-named method with the same arguments (one tensor per group,
  placeholders elsewhere)."""
  if api == "plain":
    if coll == "all_reduce":
      return relaycc.all_reduce(x, layout, op, comm=comm, out=y, counts=counts, dtype=dtype)
    if coll == "reduce_scatter":
      return relaycc.reduce_scatter(x, y, layout, op, comm=comm, counts=counts, dtype=dtype)
    return getattr(relaycc, coll)(x, y, layout, comm=comm, counts=counts, dtype=dtype)
  g, _ = _where(layout, comm.rank)
  full_counts = counts if counts is not None else [_implied(coll, x, y, len(layout[0]))] * len(layout)
  ph = torch.empty(0, dtype=(x if x is not None else y).dtype)

  def lst(t):
    return [t if k == g else ph for k in range(len(layout))]

  if coll == "all_reduce":
    return comm.sharded_relay_multi_group_all_reduce(lst(x),
                                                     op,
                                                     layout,
                                                     full_counts,
                                                     output_tensors=lst(y) if y is not None else None)
  if coll == "reduce_scatter":
    return comm.sharded_relay_multi_group_reduce_scatter(lst(x), lst(y), op, layout, full_counts)
  return getattr(comm, f"sharded_relay_multi_group_{coll}")(lst(x), lst(y), layout, full_counts)


def _implied(coll, x, y, a):
  if coll == "reduce_scatter":
    return y.numel()
  return x.numel() // a if coll == "all_to_all" else x.numel()


def _helper_call(comm, coll, layout, counts, dt, op, api):
  if api == "plain":
    if coll == "all_reduce":
      return relaycc.all_reduce(None, layout, op, comm=comm, counts=counts, dtype=dt)
    if coll == "reduce_scatter":
      return relaycc.reduce_scatter(None, None, layout, op, comm=comm, counts=counts, dtype=dt)
    return getattr(relaycc, coll)(None, None, layout, comm=comm, counts=counts, dtype=dt)
  ph = [torch.empty(0, dtype=dt) for _ in layout]  # placeholders: they give the dtype
  if coll == "all_reduce":
    return comm.sharded_relay_multi_group_all_reduce(ph, op, layout, counts)
  if coll == "reduce_scatter":
    return comm.sharded_relay_multi_group_reduce_scatter(ph, ph, op, layout, counts)
  return getattr(comm, f"sharded_relay_multi_group_{coll}")(ph, ph, layout, counts)


def _run_rooted(comm, case, dt):
  r, root, ranks, counts = comm.rank, case["root"], case["ranks"], case["counts"]
  idx = ranks.index(r) if r in ranks else -1
  off = [sum(counts[:k]) for k in range(len(ranks))]
  total = sum(counts)
  dd = None if (case["infer"] and (r == root or idx >= 0)) else dt
  fn = relaycc.scatter if case["coll"] == "scatter" else relaycc.gather
  out, send_ok = None, True
  if case["coll"] == "scatter":
    send = torch.cat([value(root, k, counts[k]) for k in range(len(ranks))]).to(dt) if r == root else None
    keep = send.clone() if send is not None else None
    recv = None
    if idx >= 0:
      recv = send[off[idx]:off[idx] +
                  counts[idx]] if (case["in_place"] and r == root) else _poison(counts[idx], dt)
    fn(send, recv, root, ranks, counts, comm=comm, dtype=dd)
    out = recv.clone() if recv is not None else None
    if send is not None:
      send_ok = torch.equal(send, keep)
  else:
    send = value(r, root, counts[idx]).to(dt) if idx >= 0 else None
    recv = _poison(total, dt) if r == root else None
    if case["in_place"] and r == root and idx >= 0:
      recv[off[idx]:off[idx] + counts[idx]] = send
      send = recv[off[idx]:off[idx] + counts[idx]]
    fn(send, recv, root, ranks, counts, comm=comm, dtype=dd)
    out = recv
    if send is not None and not (case["in_place"] and r == root):
      send_ok = torch.equal(send, value(r, root, counts[idx]).to(dt))
  return {"out": out, "send_ok": send_ok}


def run_cases(comm, cases, api="plain"):
  return [run_case(comm, c, api) for c in cases]


# ---- the serial reference -------------------------------------------------------------------------


def expected(case, r):
  """What rank r's result of `case` must be (float64), or None when it has none."""
  dt, op, coll = getattr(torch, case["dtype"]), case["op"], case["coll"]
  if coll == "scatter":
    ranks, counts, root = case["ranks"], case["counts"], case["root"]
    return value(root, ranks.index(r), counts[ranks.index(r)]) if r in ranks else None
  if coll == "gather":
    ranks, counts, root = case["ranks"], case["counts"], case["root"]
    if r != root:
      return None
    return torch.cat([value(q, root, counts[k]) for k, q in enumerate(ranks)])
  layout, counts = case["layout"], case["counts"]
  g, i = _where(layout, r)
  if g < 0:
    return None
  grp, c, a = layout[g], counts[g], len(layout[g])
  if coll == "all_reduce":
    return reduce([value(m, g, c, op) for m in grp], op, a, dt)
  if coll == "reduce_scatter":
    return reduce([value(m, g * 8 + i, c, op) for m in grp], op, a, dt)
  if coll == "all_gather":
    return torch.cat([value(m, g, c) for m in grp])
  return torch.cat([value(m, g * 8 + i, c) for m in grp])


def check_results(cases, results):
  for k, case in enumerate(cases):
    for r in range(NRANKS):
      got = results[r][k]
      want = expected(case, r)
      assert got["send_ok"], f"rank {r} case {case}: the send buffer changed"
      if want is None:
        assert got["out"] is None, f"rank {r} case {case}: a result on a rank that has none"
        continue
      dt = getattr(torch, case["dtype"])
      assert got["out"].dtype == dt
      assert close(got["out"], want, dt, case["op"]), \
          f"rank {r} case {case}:\n got {got['out'][:16].tolist()}\nwant {want[:16].tolist()}"


def async_all_reduce(comm):
  t = torch.full((9,), float(comm.rank + 1))
  w = comm.sharded_relay_multi_group_all_reduce([t], "sum", [list(range(comm.size))], [9], async_op=True)
  assert w.wait()
  return t
