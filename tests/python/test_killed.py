"""A rank dies: the survivors' next relaycc call raises within the deadline, and so does the one after."""
from common import Pool
from torch_cases import die_or_call

TIMEOUT_MS = 4000


def test_killed_rank_raises():
  pool = Pool(3, env={"RELAYCC_TIMEOUT_MS": str(TIMEOUT_MS)})
  try:
    res = pool.run(die_or_call, 2, timeout=120, dead_ok=(2,))
  finally:
    pool.close()
  for r in (0, 1):
    for k, (kind, secs, msg) in enumerate(res[r]):
      assert kind in ("RelayccError", "RelayccArgumentError"), f"rank {r} call {k}: {kind} {msg}"
      # Within the deadline plus the slack of a loaded 2-core machine.
      assert secs < TIMEOUT_MS / 1000 + 10, f"rank {r} call {k} took {secs:.1f} s: {msg}"
