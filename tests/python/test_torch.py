"""torch integration at 8 shm ranks: torch.library.opcheck on every op; torch.compile(fullgraph=True) with
helper ranks (no graph break, the helpers' calls run, the result is right); bad arguments raise
RelayccError (a ValueError) naming the argument, and the comm stays usable."""
import re

import pytest
import torch

from common import NRANKS, Pool, value
from torch_cases import BAD_CASES, BAD_NAMES, N, bad_call, compiled_graph, compiled_helper, opcheck_op
from relaycc.collectives import OP_NAMES


@pytest.fixture(scope="module")
def pool():
  # A hang (a helper's call dropped) is an error after 120 s, not a stuck suite; inductor compiles 8
  # processes at once on 2 cores, so the actives may wait a while for the helpers in the first call.
  p = Pool(NRANKS, env={"RELAYCC_TIMEOUT_MS": "120000", "TORCHINDUCTOR_COMPILE_THREADS": "1"})
  yield p
  p.close()


@pytest.mark.parametrize("name", OP_NAMES)
def test_opcheck(pool, name):
  calls = pool.run(opcheck_op, name)
  assert len(set(calls)) == 1 and calls[0] > 0, f"ranks made different numbers of calls: {calls}"


@pytest.mark.parametrize("backend", ["aot_eager", "inductor"])
def test_compile_with_helpers(pool, backend):
  res = pool.run(compiled_helper, backend, timeout=600)
  layout = [0, 2, 5]
  for r, x in enumerate(res):
    assert x["breaks"] == 0 and x["graphs"] == 1, \
        f"rank {r}: {x['breaks']} graph breaks, {x['graphs']} graphs"
    assert x["made"] == 3 and x[
        "made2"] == 3, f"rank {r}: the compiled function made {x['made']}, {x['made2']} calls"
    if r not in layout:
      assert x["out"] is None
      continue
    for key, blk in (("out", 0), ("out2", 1)):
      y = sum(value(q, blk, N) * 2 + 1 for q in layout)
      assert torch.equal(x[key].double(), torch.cat([y] * 3) - 1), f"rank {r} {key}: {x[key]}"


@pytest.mark.parametrize("case", sorted(BAD_CASES))
def test_bad_argument(pool, case):
  res = pool.run(bad_call, case)
  want = BAD_NAMES[case]
  for r, (is_relay, is_value, msg, usable) in enumerate(res):
    assert is_relay and is_value, f"rank {r}: {msg}"
    w = want if isinstance(want, str) else want[0 if r < 2 else 1]
    assert w in msg, f"rank {r}: {msg!r} does not say {w!r}"
    assert usable, f"rank {r}: the comm gave a wrong result after the error"


def test_compiled_calls_are_ordered_effects(pool):
  # Each relaycc call is an effectful op (ORDERED): AOTAutograd threads one effect token through them, so the
  # graph keeps them in program order against each other and any other effectful op, and a helper's calls
  # (no output to keep them) are not dead code. Mutating ops (the registration before) got no token.
  res = pool.run(compiled_graph, timeout=600)
  call = re.compile(r"(\w+) = torch\.ops\.higher_order\.with_effects\((\w+), torch\.ops\.relaycc\.(\w+)\.default")
  for r, codes in enumerate(res):
    assert len(codes) == 1, f"rank {r}: {len(codes)} graphs"
    code = codes[0]
    calls = call.findall(code)
    assert [c[2] for c in calls] == ["all_reduce", "all_reduce", "all_gather"], f"rank {r}:\n{code}"
    assert code.count("torch.ops.relaycc.") == 3, f"rank {r}: a relaycc op outside the effect chain:\n{code}"
    for prev, nxt in zip(calls, calls[1:]):
      # The next call's token is the previous call's new token (output 0 of its with_effects).
      assert re.search(rf"\b{nxt[1]} = {prev[0]}\[0\]", code), f"rank {r}: the token chain is broken:\n{code}"
