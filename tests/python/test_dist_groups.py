"""The relaycc torch.distributed backend's groups and failures: two disjoint subgroups at once and a 2 x 2
DeviceMesh of relaycc groups; hundreds of new_group calls that hold no shared memory until they run a
call and leave none behind; ranks started by unrelated parents meeting through a file:// store; a rank
that never calls and a rank that dies (DistBackendError naming rank and op within the group's timeout on
every survivor); abort()."""
import functools
import os
import subprocess
import sys
import tempfile

import pytest

import dist_cases as dc
from common import Pool

TIMEOUT_S = 4
SLACK_S = 10  # a loaded 2-core machine


@pytest.fixture(scope="module", autouse=True)
def extension():
  from relaycc import torch_backend
  torch_backend.extension()


@pytest.fixture(scope="module")
def pool4():
  p = Pool(4, init=functools.partial(dc.dist_init, "file:///tmp/{job}.store"), timeout=600)
  yield p
  p.close()


def _clean(results):
  bad = [f"rank {r}: {m}" for r, ms in enumerate(results) for m in ms]
  assert not bad, "\n".join(bad[:40])


def test_disjoint_subgroups_and_mesh(pool4):
  _clean(pool4.run(dc.case_disjoint_subgroups, 9, timeout=600))


def test_many_groups_cheap(pool4):
  res = pool4.run(dc.case_many_groups, 200, timeout=600)
  _clean([bad for bad, _ in res])
  # Each group builds its inner gloo (a store rendezvous and 3 connections): well under a second apiece.
  assert max(secs for _, secs in res) < 200 * 0.5, f"200 new_group calls took {[s for _, s in res]} s"


def test_abort(pool4):
  for r, (kind, secs, msg) in enumerate(pool4.run(dc.case_abort)):
    assert kind == "DistBackendError", f"rank {r}: {kind} {msg}"
    assert "all_reduce" in msg and f"rank {r}" in msg, f"rank {r}: {msg}"


def test_silent_rank_times_out(pool4):
  res = pool4.run(dc.case_silent_rank, TIMEOUT_S, timeout=300)
  for r in range(3):
    kind, secs, msg = res[r]
    assert kind == "DistBackendError", f"rank {r}: {kind} {msg}"
    assert f"rank {r}" in msg and "all_reduce" in msg, f"rank {r}: {msg}"
    assert secs < TIMEOUT_S + SLACK_S, f"rank {r}: raised after {secs:.1f} s: {msg}"


def test_killed_rank():
  p = Pool(3, init=functools.partial(dc.dist_init, "file:///tmp/{job}.store"), timeout=600)
  try:
    res = p.run(dc.case_killed_rank, TIMEOUT_S, timeout=300, dead_ok=(2,))
  finally:
    p.close()
  for r in (0, 1):
    for k, (kind, secs, msg) in enumerate(res[r]):
      assert kind == "DistBackendError", f"rank {r} call {k}: {kind} {msg}"
      assert f"rank {r}" in msg, f"rank {r} call {k}: {msg}"
      assert secs < TIMEOUT_S + SLACK_S, f"rank {r} call {k}: raised after {secs:.1f} s: {msg}"


UNRELATED = r"""
import datetime, sys, torch, torch.distributed as dist
import relaycc
rank, n, url = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
dist.init_process_group("relaycc", init_method=url, rank=rank, world_size=n,
                        timeout=datetime.timedelta(seconds=60))
t = torch.arange(5, dtype=torch.float32) + 10 * rank
dist.all_reduce(t)
from relaycc import torch_backend
assert torch_backend.get_backend().comm_created, "relaycc did not serve the call"
print("RESULT", t.tolist(), flush=True)
dist.destroy_process_group()
"""


def test_unrelated_parents_meet():
  """Each rank is started by a shell of its own (different parent pids) with no launcher variables: the
  store's token is the whole rendezvous."""
  n = 2
  with tempfile.TemporaryDirectory() as d:
    script = os.path.join(d, "rank.py")
    with open(script, "w") as f:
      f.write(UNRELATED)
    env = {k: v for k, v in os.environ.items()
           if k not in ("MASTER_ADDR", "MASTER_PORT", "TORCHELASTIC_RUN_ID", "RANK", "WORLD_SIZE")}
    url = f"file://{d}/store"
    procs = [subprocess.Popen(["sh", "-c", f'"{sys.executable}" "{script}" {r} {n} {url}; exit $?'],
                              env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
             for r in range(n)]
    outs = [p.communicate(timeout=300)[0] for p in procs]
  want = [float(sum(10 * r + i for r in range(n))) for i in range(5)]
  for r, (p, out) in enumerate(zip(procs, outs)):
    assert p.returncode == 0, f"rank {r}:\n{out}"
    assert f"RESULT {want}" in out, f"rank {r}:\n{out}"


def test_rejected_call_fails_every_rank(pool4):
  res = pool4.run(dc.case_reject, 60, timeout=300)
  for r, ((kind, secs, msg), (kind2, secs2, msg2), right, state) in enumerate(res):
    assert kind == "DistBackendError", f"rank {r}: {kind} {msg}"
    assert f"rank {r}" in msg and "all_to_all_single" in msg, f"rank {r}: {msg}"
    # Rank 0's text is the C core's: its reason, or the shape disagreement the core met first.
    if r == 0:
      assert "divisible" in msg or "another shape" in msg, msg
    assert secs < 30, f"rank {r}: raised after {secs:.1f} s (the deadline is 60 s): {msg}"
    # The next call: right, or an error at once; never a wrong result or a wait for the deadline.
    assert right or kind2 == "DistBackendError", f"rank {r}: {kind2} {msg2}, result right: {right}"
    assert secs2 < 30, f"rank {r}: the next call took {secs2:.1f} s: {msg2}"
    # A failed group says so in torch's error state.
    assert kind2 == "none" or state != "SUCCESS", f"rank {r}: get_error() {state} after: {msg2}"


@pytest.mark.parametrize("checked", [False, True], ids=["buffer_error", "check_mode_1"])
def test_rejected_call_leaves_group_usable(pool4, checked):
  res = pool4.run(dc.case_reject_usable, 60, checked, timeout=300)
  for r, ((kind, secs, msg), (kind2, secs2, msg2), right, state) in enumerate(res):
    if r == 0 or checked:
      # The rejecting rank always raises; in check mode 1 every rank does (the agreement round).
      assert kind == "DistBackendError", f"rank {r}: {kind} {msg}"
      assert f"rank {r}" in msg, f"rank {r}: {msg}"
    if r == 0:
      assert ("output has" in msg) if not checked else ("divisible" in msg or "another" in msg), msg
    assert secs < 30, f"rank {r}: raised after {secs:.1f} s (the deadline is 60 s): {msg}"
    # The group is still in lockstep: the next call is right on every rank.
    assert kind2 == "none" and right, f"rank {r}: the next call: {kind2} {msg2}, result right: {right}"
    assert state == "SUCCESS", f"rank {r}: get_error() is {state} for a group that stayed usable"


def test_abort_wakes_peers(pool4):
  res = pool4.run(dc.case_abort_wakes_peers, timeout=300)
  for r, (kind, secs, msg) in enumerate(res):
    assert kind == "DistBackendError", f"rank {r}: {kind} {msg}"
    assert f"rank {r}" in msg and "all_reduce" in msg, f"rank {r}: {msg}"
    # Rank 0 slept 1 s before aborting; the deadline is 60 s.
    assert secs < 20, f"rank {r}: raised after {secs:.1f} s: {msg}"


def test_shutdown(pool4):
  for r, (right, (kind, secs, msg)) in enumerate(pool4.run(dc.case_shutdown, timeout=300)):
    assert right, f"rank {r}: the call before shutdown was wrong"
    assert kind == "DistBackendError" and "shut down" in msg, f"rank {r}: {kind} {msg}"
    assert secs < 5, f"rank {r}: raised after {secs:.1f} s: {msg}"
