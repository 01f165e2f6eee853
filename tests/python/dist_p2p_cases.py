"""One rank's side of the torch backend's point-to-point tests (test_dist_p2p.py; no pytest here: the pool's
workers import this). Every transfer's block encodes its source, destination and index (blk(): never zero),
every receive tensor is poisoned first, and the backend's served counter proves relaycc moved the tensors
(send/recv counted per transfer) rather than the inner gloo. Each case returns its mismatches as text."""
import datetime
import time

import torch
import torch.distributed as dist

from dist_cases import _check, _expect_served, _poison, _served, _timed, error_state

# Every dtype the other ops serve: the reducing ones travel as themselves, the rest as bytes.
DTYPES = [torch.float32, torch.float64, torch.bfloat16, torch.float16, torch.int32, torch.int64, torch.int8,
          torch.uint8, torch.int16, torch.bool, torch.complex64]
# 0, odd, and 300000 float32 (1.2 MB): more than the shm transport's blocks in flight between a pair, so
# a transfer run at issue would block a ring of isend/irecv (what the deferred group avoids).
SIZES = [0, 1, 7, 4097, 300000]


def blk(src, dst, k, n, dtype=torch.float32):
  """The n-element block rank src sends rank dst as its k-th: (src + 1) * 10 + dst * 3 + k + index, in
  [1, 113] (exact in every dtype; bool: True where the value is odd)."""
  x = torch.remainder((src + 1) * 10 + dst * 3 + k + torch.arange(n, dtype=torch.float64), 113) + 1
  if dtype == torch.bool:
    return torch.remainder(x, 2) == 1
  return x.to(dtype)


def _poisoned(n, dtype):
  if dtype == torch.bool:  # no value outside the range: the opposite of what comes
    return torch.ones(n, dtype=torch.bool)
  return _poison(n, dtype)


def _same(bad, what, got, want):
  if not torch.equal(got, want):
    bad.append(f"{what}: got {got.flatten()[:8].tolist()} want {want.flatten()[:8].tolist()}")


def case_dtypes(g):
  """send/recv of every dtype and size from each rank to the next; the bool blocks are the complement
  of the poison somewhere (some value is False), so a receive that moved nothing shows."""
  bad, me, n = [], g.rank, g.n
  nxt, prv = (me + 1) % n, (me - 1) % n
  before = _served()
  count = 0
  for i, dt in enumerate(DTYPES):
    for j, size in enumerate(SIZES[:4]):
      k = 10 * i + j
      out = _poisoned(size, dt)
      if me % 2 == 0:
        dist.send(blk(me, nxt, k, size, dt), nxt)
        dist.recv(out, prv)
      else:
        dist.recv(out, prv)
        dist.send(blk(me, nxt, k, size, dt), nxt)
      _same(bad, f"{dt} x {size} from {prv}", out, blk(prv, me, k, size, dt))
      count += 1
  # A non-contiguous receive and send (through a contiguous copy).
  out = _poison((4, 6), torch.float32).t()
  if me % 2 == 0:
    dist.send(blk(me, nxt, 99, 24).view(4, 6).t(), nxt)
    dist.recv(out, prv)
  else:
    dist.recv(out, prv)
    dist.send(blk(me, nxt, 99, 24).view(4, 6).t(), nxt)
  _same(bad, "non-contiguous", out, blk(prv, me, 99, 24).view(4, 6).t())
  _expect_served(bad, before, {"send": count + 1, "recv": count + 1})
  return bad


def case_ring(g):
  """A ring of plain isend/irecv (no batch) and one of batch_isend_irecv, both ways, every size up to
  1.2 MB: issued before any wait, so no transfer may block the next one's issue. Then is_completed()
  polling alone completes a transfer, and get_future() gives the tensor."""
  bad, me, n = [], g.rank, g.n
  nxt, prv = (me + 1) % n, (me - 1) % n
  before = _served()
  for s, size in enumerate(SIZES):
    a, b = _poison(size, torch.float32), _poison(size, torch.float32)
    ws = [dist.isend(blk(me, nxt, s, size), nxt), dist.isend(blk(me, prv, s + 50, size), prv),
          dist.irecv(a, prv), dist.irecv(b, nxt)]
    for w in reversed(ws):
      w.wait()
    _same(bad, f"isend/irecv ring x {size} from prev", a, blk(prv, me, s, size))
    _same(bad, f"isend/irecv ring x {size} from next", b, blk(nxt, me, s + 50, size))
    a, b = _poison(size, torch.float32), _poison(size, torch.float32)
    ops = [dist.P2POp(dist.irecv, a, prv), dist.P2POp(dist.isend, blk(me, nxt, s + 100, size), nxt),
           dist.P2POp(dist.irecv, b, nxt), dist.P2POp(dist.isend, blk(me, prv, s + 150, size), prv)]
    works = dist.batch_isend_irecv(ops)
    for w in works:
      w.wait()
    _same(bad, f"batch ring x {size} from prev", a, blk(prv, me, s + 100, size))
    _same(bad, f"batch ring x {size} from next", b, blk(nxt, me, s + 150, size))
  transfers = 4 * len(SIZES)
  # is_completed() alone starts the deferred transfers (a loop that only polls ends).
  a = _poison(5, torch.float32)
  ws = [dist.isend(blk(me, nxt, 200, 5), nxt), dist.irecv(a, prv)]
  deadline = time.monotonic() + 60
  while not all(w.is_completed() for w in ws) and time.monotonic() < deadline:
    time.sleep(0.01)
  if not all(w.is_completed() for w in ws):
    bad.append("is_completed() polling: the transfers never completed")
  else:
    _same(bad, "polled irecv", a, blk(prv, me, 200, 5))
  # get_future(): the value is the tensor list, as a collective's.
  a = _poison(9, torch.float32)
  ws = [dist.isend(blk(me, nxt, 201, 9), nxt), dist.irecv(a, prv)]
  val = ws[1].get_future().wait()
  ws[0].wait()
  if not (isinstance(val, list) and len(val) == 1 and torch.equal(val[0], blk(prv, me, 201, 9))):
    bad.append(f"irecv future value: {val!r}")
  _expect_served(bad, before, {"send": transfers + 2, "recv": transfers + 2})
  return bad


def _stage(x, r):
  """What pipeline stage r does to a tensor on its way: exact in float64."""
  return x * 2 + (r + 1)


def case_pipeline(g, sizes, micro):
  """A pipeline of n stages around the ring: stage 0 makes `micro` micro-batches of each size, each stage
  receives from the previous one, transforms and sends on, and stage 0 receives the result from the last
  (the compare against the serial reference). Stages other than 0 issue their receive of the next
  micro-batch before sending the current one (irecv ahead, as pipeline schedules do)."""
  bad, me, n = [], g.rank, g.n
  nxt, prv = (me + 1) % n, (me - 1) % n
  before = _served()
  transfers = 0
  for size in sizes:
    inputs = [blk(0, 1, m, size, torch.float64) for m in range(micro)]
    if me == 0:
      outs = [_poison(size, torch.float64) for _ in range(micro)]
      sends = [dist.isend(_stage(x, 0), nxt) for x in inputs]
      recvs = [dist.irecv(o, prv) for o in outs]
      for w in sends + recvs:
        w.wait()
      for m in range(micro):
        want = inputs[m]
        for r in range(n):
          want = _stage(want, r)
        _same(bad, f"pipeline x {size} micro-batch {m}", outs[m], want)
    else:
      bufs = [_poison(size, torch.float64) for _ in range(micro)]
      pending = dist.irecv(bufs[0], prv)
      sends = []
      for m in range(micro):
        pending.wait()
        if m + 1 < micro:
          pending = dist.irecv(bufs[m + 1], prv)
        sends.append(dist.isend(_stage(bufs[m], me), nxt))
      for w in sends:
        w.wait()
    transfers += micro
  _expect_served(bad, before, {"send": transfers, "recv": transfers})
  return bad


def case_objects(g):
  """send_object_list / recv_object_list around the ring: their sizes and bytes through relaycc."""
  bad, me, n = [], g.rank, g.n
  nxt, prv = (me + 1) % n, (me - 1) % n
  before = _served()
  mine = [{"from": me, "to": nxt, "data": list(range(me + 3))}, f"rank {me}" * (me + 1), None]
  got = [None, None, None]
  if me % 2 == 0:
    dist.send_object_list(mine, nxt)
    dist.recv_object_list(got, prv)
  else:
    dist.recv_object_list(got, prv)
    dist.send_object_list(mine, nxt)
  want = [{"from": prv, "to": me, "data": list(range(prv + 3))}, f"rank {prv}" * (prv + 1), None]
  if got != want:
    bad.append(f"objects: got {got!r} want {want!r}")
  _expect_served(bad, before, {"send": 2, "recv": 2})
  return bad


def case_mixed(g):
  """Transfers and collectives in program order: an isend before an all_reduce whose Work is waited
  after it (the peer receives before its all_reduce), and tagged transfers, which are gloo's (matched by
  tag: out of order here), beside untagged ones."""
  bad, me, n = [], g.rank, g.n
  nxt, prv = (me + 1) % n, (me - 1) % n
  big = SIZES[-1]
  a = _poison(big, torch.float32)
  w = dist.isend(blk(me, nxt, 300, big), nxt)
  r = dist.irecv(a, prv)
  t = torch.ones(3)
  dist.all_reduce(t)
  w.wait()
  r.wait()
  _same(bad, "isend before all_reduce", a, blk(prv, me, 300, big))
  _same(bad, "all_reduce after isend", t, torch.full((3,), float(n)))
  before = _served()
  x, y, z = _poison(4, torch.float32), _poison(4, torch.float32), _poison(6, torch.float32)
  ws = [dist.isend(blk(me, nxt, 301, 4), nxt, tag=7), dist.isend(blk(me, nxt, 302, 4), nxt, tag=8),
        dist.isend(blk(me, nxt, 303, 6), nxt)]
  rs = [dist.irecv(y, prv, tag=8), dist.irecv(x, prv, tag=7), dist.irecv(z, prv)]
  for w in rs + ws:
    w.wait()
  _same(bad, "tag 7 (gloo)", x, blk(prv, me, 301, 4))
  _same(bad, "tag 8 (gloo)", y, blk(prv, me, 302, 4))
  _same(bad, "tag 0 beside tagged", z, blk(prv, me, 303, 6))
  _expect_served(bad, before, {"send": 1, "recv": 1})
  # A tagged receive from any source is gloo's: rank 1 gets rank 0's.
  if n > 1 and me in (0, 1):
    any_in = _poison(5, torch.float32)
    if me == 0:
      dist.send(blk(0, 1, 304, 5), 1, tag=3)
    else:
      src = dist.recv(any_in, tag=3)
      if src != 0:
        bad.append(f"any-source recv said source {src}")
      _same(bad, "any-source tagged recv", any_in, blk(0, 1, 304, 5))
  return bad


def case_mismatch(g, timeout_s):
  """Rank 0 sends 10 float32 where rank 1 receives 12 (then a float32 where rank 1 receives int32): rank 1
  raises DistBackendError naming its rank, the op and both shapes at once, its tensor untouched (the send
  returns: its data was handed off, then drained); the pair, the group and a collective stay usable and
  right after it."""
  me, n = g.rank, g.n
  grp = dist.new_group(list(range(n)), backend="relaycc", timeout=datetime.timedelta(seconds=timeout_s))
  dist.all_reduce(torch.ones(2), group=grp)
  res = {}
  if me in (0, 1):
    for what, (scount, rcount, rdt) in {"count": (10, 12, torch.float32),
                                        "dtype": (10, 10, torch.int32)}.items():
      out = _poison(rcount, rdt)
      if me == 0:
        res[what] = _timed(lambda: dist.send(blk(0, 1, 0, scount), 1, group=grp))
      else:
        res[what] = _timed(lambda: dist.recv(out, 0, group=grp))
        res[what + "_untouched"] = torch.equal(out, _poison(rcount, rdt))
    out = _poison(10, torch.float32)
    if me == 0:
      dist.send(blk(0, 1, 1, 10), 1, group=grp)
    else:
      dist.recv(out, 0, group=grp)
    res["after"] = me == 0 or torch.equal(out, blk(0, 1, 1, 10))
  t = torch.ones(5)
  dist.all_reduce(t, group=grp)
  res["all_reduce"] = torch.equal(t, torch.full((5,), float(n)))
  res["state"] = error_state(grp)
  return res


def case_reject(g, timeout_s):
  """Rank 0 calls the group's send with two tensors (torch's contract: one): the backend rejects it
  through the C core (never alone), so rank 0 raises with the reason and rank 1's matching receive
  raises naming rank 0, at once. A receive from any source with tag 0 is rejected on its rank (no peer
  to tell). The pair and the group stay usable."""
  me, n = g.rank, g.n
  grp = dist.new_group(list(range(n)), backend="relaycc", timeout=datetime.timedelta(seconds=timeout_s))
  dist.all_reduce(torch.ones(2), group=grp)
  res = {}
  if me in (0, 1):
    out = _poison(4, torch.float32)
    if me == 0:
      res["two"] = _timed(lambda: grp.send([blk(0, 1, 0, 4), blk(0, 1, 1, 4)], 1, 0).wait())
    else:
      res["two"] = _timed(lambda: dist.recv(out, 0, group=grp))
      res["untouched"] = torch.equal(out, _poison(4, torch.float32))
    if me == 1:
      res["any"] = _timed(lambda: dist.recv(out, group=grp))
    if me == 0:
      dist.send(blk(0, 1, 2, 4), 1, group=grp)
    else:
      dist.recv(out, 0, group=grp)
    res["after"] = me == 0 or torch.equal(out, blk(0, 1, 2, 4))
  t = torch.ones(5)
  dist.all_reduce(t, group=grp)
  res["all_reduce"] = torch.equal(t, torch.full((5,), float(n)))
  return res


def case_silent_peer(g, timeout_s):
  """Rank 1 never receives: rank 0's send of 1.2 MB raises DistBackendError at the group's deadline,
  naming the op (a send never waits for ever)."""
  me = g.rank
  grp = dist.new_group(list(range(g.n)), backend="relaycc", timeout=datetime.timedelta(seconds=timeout_s))
  dist.all_reduce(torch.ones(2), group=grp)
  if me != 0:
    return None
  return _timed(lambda: dist.send(blk(0, 1, 0, SIZES[-1]), 1, group=grp))


def case_check_mode(g, timeout_s, asymmetric):
  """A group whose comm has RELAYCC_CHECK=1 (read when the comm is made). asymmetric=False: blocking
  send/recv (each end's groups hold one transfer): a count mismatch raises at BOTH ends (the pair's check
  round), then a right transfer arrives. asymmetric=True: rank 0 defers a send and a receive with rank 1
  into one group, rank 1 runs them one at a time: returns what each end saw (the documented limit)."""
  import os
  me, n = g.rank, g.n
  os.environ["RELAYCC_CHECK"] = "1"
  try:
    grp = dist.new_group(list(range(n)), backend="relaycc", timeout=datetime.timedelta(seconds=timeout_s))
    dist.all_reduce(torch.ones(2), group=grp)
  finally:
    os.environ.pop("RELAYCC_CHECK", None)
  res = {}
  if me not in (0, 1):
    return res
  out = _poison(12 if me == 1 else 5, torch.float32)
  if not asymmetric:
    if me == 0:
      res["mismatch"] = _timed(lambda: dist.send(blk(0, 1, 0, 10), 1, group=grp))
    else:
      res["mismatch"] = _timed(lambda: dist.recv(out, 0, group=grp))
      res["untouched"] = torch.equal(out, _poison(12, torch.float32))
    right = _poison(10, torch.float32)
    if me == 0:
      dist.send(blk(0, 1, 1, 10), 1, group=grp)
    else:
      dist.recv(right, 0, group=grp)
    res["after"] = me == 0 or torch.equal(right, blk(0, 1, 1, 10))
    return res
  out = _poison(5, torch.float32)
  if me == 0:
    ws = [dist.isend(blk(0, 1, 2, 5), 1, group=grp), dist.irecv(out, 1, group=grp)]
    res["asym"] = _timed(lambda: [w.wait() for w in ws])
  else:
    res["asym"] = _timed(lambda: (dist.recv(out, 0, group=grp), dist.send(blk(1, 0, 2, 5), 0, group=grp)))
  res["right"] = torch.equal(out, blk(1 - me, me, 2, 5))
  return res


def case_unwaited(g, timeout_s):
  """A transfer never waited on is not lost: rank 0's isend (no wait) reaches rank 1's blocking recv when
  rank 0 shuts its group down (shutdown starts the deferred transfers). An abort instead fails a deferred
  transfer: its wait raises DistBackendError at once."""
  from relaycc import torch_backend
  me, n = g.rank, g.n
  grp = dist.new_group(list(range(n)), backend="relaycc", timeout=datetime.timedelta(seconds=timeout_s))
  dist.all_reduce(torch.ones(2), group=grp)
  res = {}
  if me == 0:
    dist.isend(blk(0, 1, 0, 7), 1, group=grp)  # never waited
    time.sleep(0.5)
    torch_backend.shutdown(grp)
  elif me == 1:
    out = _poison(7, torch.float32)
    res["recv"] = _timed(lambda: dist.recv(out, 0, group=grp))
    res["right"] = torch.equal(out, blk(0, 1, 0, 7))
  grp2 = dist.new_group(list(range(n)), backend="relaycc", timeout=datetime.timedelta(seconds=timeout_s))
  dist.all_reduce(torch.ones(2), group=grp2)
  if me == 0:
    w = dist.isend(blk(0, 1, 1, 7), 1, group=grp2)
    torch_backend.abort(grp2)
    res["aborted"] = _timed(w.wait)
  return res


def case_grouped_against_calls(g):
  """Rank 0's batch of two isends and an irecv against rank 1's blocking recv, recv, send (valid under
  gloo and NCCL): rank 1 sends only after it received both, so the batch's transfers must progress as one
  group, not as rounds of one transfer per direction (they timed out so). Ranks > 1 stay out."""
  bad, me = [], g.rank
  if me > 1:
    return bad
  big = SIZES[-1]
  if me == 0:
    c = _poison(big, torch.float32)
    ws = dist.batch_isend_irecv([dist.P2POp(dist.isend, blk(0, 1, 400, big), 1),
                                 dist.P2POp(dist.isend, blk(0, 1, 401, 7), 1), dist.P2POp(dist.irecv, c, 1)])
    for w in ws:
      w.wait()
    _same(bad, "the batch's receive", c, blk(1, 0, 402, big))
  else:
    a, b = _poison(big, torch.float32), _poison(7, torch.float32)
    dist.recv(a, 0)
    dist.recv(b, 0)
    dist.send(blk(1, 0, 402, big), 0)
    _same(bad, "first of the batch", a, blk(0, 1, 400, big))
    _same(bad, "second of the batch", b, blk(0, 1, 401, 7))
  return bad


def case_wait_in_callback(g, timeout_s):
  """A Future callback runs on the group's worker thread and waits on an irecv issued before: the
  transfer must run there and then (queued behind the callback's own task it waited forever)."""
  import threading
  bad, me = [], g.rank
  x = torch.ones(16)
  if me > 1:
    dist.all_reduce(x)  # the all_reduce is the group's: every rank takes part
    return bad
  if me == 0:
    y = _poison(10, torch.float32)
    w_ar = dist.all_reduce(x, async_op=True)
    w_r = dist.irecv(y, 1)
    where = []

    def cb(f):
      where.append(threading.current_thread().name)
      w_r.wait()
      return y

    fut = w_ar.get_future().then(cb)
    done = threading.Event()
    threading.Thread(target=lambda: (fut.wait(), done.set()), daemon=True).start()
    if not done.wait(timeout_s):
      bad.append(f"the callback's wait on the irecv did not end within {timeout_s} s (ran on {where})")
      return bad
    _same(bad, "irecv waited in a callback", y, blk(1, 0, 410, 10))
  else:
    time.sleep(0.5)
    dist.all_reduce(x)
    dist.send(blk(1, 0, 410, 10), 0)
  return bad


def case_tagged_after_isend(g):
  """Rank 0's tag-0 isend (relaycc's, deferred) then a blocking tagged recv (gloo's) that rank 1 sends only
  after receiving the isend: the forwarded recv must start the deferred isend first."""
  bad, me = [], g.rank
  if me == 0:
    w = dist.isend(blk(0, 1, 420, 100), 1)
    y = _poison(100, torch.float32)
    dist.recv(y, 1, tag=5)
    w.wait()
    _same(bad, "tagged recv after an isend", y, blk(1, 0, 421, 100))
  elif me == 1:
    x = _poison(100, torch.float32)
    dist.recv(x, 0)
    dist.send(blk(1, 0, 421, 100), 0, tag=5)
    _same(bad, "the isend before a tagged send", x, blk(0, 1, 420, 100))
  return bad
