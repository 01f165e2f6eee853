"""Tables for scripts/cpu_peers_bench.sh (standard library only).

  report.py ingest BENCH_JSON REP [PEER] >> results.jsonl   relaycc-bench's --json rows as result lines
  report.py table results.jsonl [--stat med|min]     the markdown table of ratios

A result line: {"peer", "ranks", "coll", "dtype", "bytes", "rep", "time_min_us", "time_med_us", "wrong"}
(or "unsupported": why). A cell's time is the median over the repetitions of each repetition's
statistic (median, or min, over its iterations of the slowest rank's call); the spread beside it is
max/min over the repetitions. ratio = peer's time / relaycc's time: above 1, relaycc is faster."""
import json
import statistics
import sys
from collections import defaultdict

PEERS = ("openmpi", "gloo", "deepspeed", "relaycc-base")
BEHIND = 0.97


def size_name(b):
    for unit, k in (("G", 30), ("M", 20), ("K", 10)):
        if b >= 1 << k and b % (1 << k) == 0:
            return f"{b >> k}{unit}"
    return str(b)


def ingest(path, rep, peer="relaycc"):
    d = json.load(open(path))
    for row in d.get("rows", []):
        print(json.dumps({"peer": peer, "ranks": d["nranks"], "coll": row["coll"], "dtype": row["dtype"],
                          "bytes": row["bytes"], "rep": int(rep), "route": row.get("route"),
                          "time_min_us": row["time_min_us"], "time_med_us": row["time_med_us"],
                          "wrong": row["wrong"]}))


def table(path, stat):
    key = "time_min_us" if stat == "min" else "time_med_us"
    times = defaultdict(list)
    routes = defaultdict(set)
    notes = {}
    wrong = []
    for line in open(path):
        line = line.strip()
        if not line.startswith("{"):
            continue
        try:
            r = json.loads(line)
        except ValueError:  # a line a killed launch left half written
            continue
        cell = (r["ranks"], r["coll"], r["dtype"], r["bytes"], r["peer"])
        if "unsupported" in r:
            notes[cell] = r["unsupported"]
            continue
        if r.get("wrong"):
            wrong.append(cell)
        times[cell].append(r[key])
        if r.get("route"):
            routes[cell].add(r["route"])
            if r["peer"] != "relaycc":
                routes[cell[:4] + ("relaycc",)].add(r["peer"].replace("relaycc-", "") + ":" + r["route"])

    def med(cell):
        v = times.get(cell)
        if not v:
            return None, None, 0
        return statistics.median(v), max(v) / min(v) if min(v) > 0 else float("inf"), len(v)

    order = ["allreduce", "allgather", "reducescatter", "alltoall", "broadcast"]
    rows = sorted({c[:4] for c in times},
                  key=lambda c: (c[0], order.index(c[1]) if c[1] in order else 9, c[2] != "float", c[3]))
    peers = [p for p in PEERS if any(c[4] == p for c in times)]
    out = []
    out.append(f"statistic per repetition: {stat} over iterations of the slowest rank's call; cell = median "
               f"over repetitions (n = repetitions), (x) = max/min spread over them; ratio = peer / relaycc, "
               f"bold below {BEHIND}")
    out.append("")
    out.append("| ranks | coll | dtype | size | relaycc us (spread, n) | route | " +
               " | ".join(f"{p} ratio (spread)" for p in peers) + " |")
    out.append("|" + "---|" * (6 + len(peers)))
    ratios = defaultdict(list)
    for c in rows:
        rt, rs, rn = med(c + ("relaycc",))
        cells = []
        for p in peers:
            pt, ps, pn = med(c + (p,))
            if (c + (p,)) in notes:
                cells.append("n/a")
            elif p == "deepspeed" and c[1] != "allreduce":
                cells.append("none")  # its csrc/cpu/comm has only the all-reduce (broadcast included)
            elif pt is None:
                cells.append("")
            elif rt is None:
                cells.append(f"({pt:.1f} us)")  # relaycc did not run it (a bench without the collective)
            else:
                ratio = pt / rt
                ratios[p].append(ratio)
                txt = f"{ratio:.2f}"
                cells.append((f"**{txt}**" if ratio < BEHIND else txt) + f" ({ps:.2f})")
        rel = f"{rt:.1f} ({rs:.2f}, {rn})" if rt is not None else "missing"
        route = "/".join(sorted(routes.get(c + ("relaycc",), ())))
        out.append(f"| {c[0]} | {c[1]} | {c[2]} | {size_name(c[3])} | {rel} | {route} | "
                   + " | ".join(cells) + " |")
    out.append("")
    if "deepspeed" in peers:
        out.append("- deepspeed: none = DeepSpeed's shm (csrc/cpu/comm) has no such collective; it has an "
                   "all-reduce only, no broadcast")
    for p in peers:
        v = ratios[p]
        if v:
            behind = sum(1 for x in v if x < BEHIND)
            out.append(f"- {p}: {len(v)} cells, median ratio {statistics.median(v):.2f}, min {min(v):.2f}, "
                       f"{behind} behind (< {BEHIND})")
    base = [c for c in rows if times.get(c + ("relaycc-base",))]
    if base:
        # The same cells for the base build: each peer's ratio against it, then against this build.
        out.append("")
        out.append("relaycc-base (another build, timed in the same turns) against the same peers: "
                   "peer / base -> peer / relaycc")
        out.append("")
        others = [p for p in peers if p != "relaycc-base"]
        out.append("| ranks | coll | dtype | size | base us | relaycc us | " +
                   " | ".join(f"{p} before -> after" for p in others) + " |")
        out.append("|" + "---|" * (6 + len(others)))
        for c in base:
            bt, rt = med(c + ("relaycc-base",))[0], med(c + ("relaycc",))[0]
            cells = []
            for p in others:
                pt = med(c + (p,))[0]
                if pt is None or bt is None or rt is None:
                    cells.append("")
                    continue
                b, a = pt / bt, pt / rt
                fmt = lambda x: f"**{x:.2f}**" if x < BEHIND else f"{x:.2f}"
                cells.append(f"{fmt(b)} -> {fmt(a)}")
            out.append(f"| {c[0]} | {c[1]} | {c[2]} | {size_name(c[3])} | {bt:.1f} | "
                       f"{rt:.1f} | " + " | ".join(cells) + " |")
    if notes:
        out.append("- not measured (the peer rejected the call): " +
                   "; ".join(sorted({f'{c[4]} {c[1]} {c[2]}: {w}' for c, w in notes.items()})))
    if wrong:
        out.append("- WRONG RESULTS in: " + ", ".join(sorted({f"{c[4]} {c[0]}r {c[1]} {c[2]} {c[3]}"
                                                            for c in wrong})))
    print("\n".join(out))


def main():
    if len(sys.argv) >= 4 and sys.argv[1] == "ingest":
        ingest(sys.argv[2], sys.argv[3], sys.argv[4] if len(sys.argv) > 4 else "relaycc")
    elif len(sys.argv) >= 3 and sys.argv[1] == "table":
        stat = sys.argv[sys.argv.index("--stat") + 1] if "--stat" in sys.argv else "med"
        table(sys.argv[2], stat)
    else:
        print(__doc__, file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
