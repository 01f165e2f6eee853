import json, sys, statistics as st
from collections import defaultdict
d=defaultdict(list); mins=defaultdict(list); routes=defaultdict(set)
for l in open(sys.argv[1]):
    r=json.loads(l); k=(r['label'],r['ranks'],r['coll'],r['bytes']); d[k].append(r['med']); mins[k].append(r['min']); routes[k].add(r['route'])
labels=list(dict.fromkeys(k[0] for k in d))
cells=sorted({k[1:] for k in d})
for n in sorted({c[0] for c in cells}):
    print(f"\n{n} ranks\n")
    print("| coll | size | route | " + " | ".join(f"{l} med (spread) / min" for l in labels) + " | speedup |")
    print("|---|---|---|" + "---|"*len(labels) + "---|")
    for c in cells:
        if c[0]!=n: continue
        row=[]; meds=[]
        for l in labels:
            v=d.get((l,)+c); m=mins.get((l,)+c)
            meds.append(st.median(v))
            row.append(f"{st.median(v):.1f} ({max(v)/min(v):.2f}) / {min(m):.1f}")
        rt="/".join(sorted(set().union(*[routes[(l,)+c] for l in labels])))
        print(f"| {c[1]} | {c[2]>>10} KiB | {rt} | " + " | ".join(row)+f" | {meds[0]/meds[-1]:.2f} |")
