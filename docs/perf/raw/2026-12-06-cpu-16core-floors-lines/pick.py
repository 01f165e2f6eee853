"""Reads sweep files of relaycc-bench rows ('--- TAG=value ranks=n rep=k' headers) and prints, per tag,
the value whose geometric mean of median times over the cells every value ran is the least, with the table
of per-value geometric means relative to the first value. Usage: pick.py FILE TAG"""
import math, re, sys, collections
path, tag = sys.argv[1], sys.argv[2]
cur = None
t = collections.defaultdict(list)  # (value, ranks, coll, size) -> [med]
coll = None
for line in open(path):
    m = re.match(r'--- (\S+)=(\S+) ranks=(\d+) rep=(\d+)', line)
    if m:
        cur = (m.group(2), int(m.group(3)))
        continue
    m = re.match(r'# (allreduce|allgather|reducescatter|alltoall|broadcast)\s*$', line)
    if m:
        coll = m.group(1)
        continue
    f = line.split()
    if cur and len(f) >= 7 and f[0].isdigit():
        try:
            t[(cur[0], cur[1], coll, int(f[0]))].append(float(f[6]))
        except ValueError:
            pass
vals = []
for k in t:
    if k[0] not in vals:
        vals.append(k[0])
cells = set((k[1], k[2], k[3]) for k in t)
common = [c for c in cells if all((v,) + c in t for v in vals)]
def med(x):
    x = sorted(x); return x[len(x) // 2]
score = {v: sum(math.log(med(t[(v,) + c])) for c in common) / max(1, len(common)) for v in vals}
best = min(vals, key=lambda v: score[v])
for v in vals:
    print(f"# {tag}={v}: geomean x{math.exp(score[v] - score[vals[0]]):.3f} of {vals[0]} over {len(common)} cells", file=sys.stderr)
for c in sorted(common):
    print(f"# {c[0]}r {c[1]} {c[2]}: " + " ".join(f"{v}={med(t[(v,) + c]):.1f}" for v in vals), file=sys.stderr)
print(best)
