#!/usr/bin/env python3
"""Medians of the issue-30 converge runs: python3 summarize.py *.json

Groups every successful run by finalizer, N, W and peer; prints per group
the runs, the median converge s, CPU s and peak RSS MiB (with ranges), the
tail writes other than Leases in each run, and kube's medians over each
other peer's. A file's load averages are printed beside its name."""
import json, statistics, sys
from collections import defaultdict

groups = defaultdict(list)
for path in sys.argv[1:]:
    rep = json.load(open(path))
    print(f"# {path.split('/')[-1]}: load {rep['load_average_before']} -> {rep['load_average_after']}")
    for r in rep['runs']:
        if r.get('error'):
            print(f"#   {r['peer']} N={r['objects']} W={r['workers']} failed: {r['error'][:120]}")
            continue
        groups[(rep['finalizer'], r['objects'], r['workers'], r['peer'])].append(r)

def tail(r):
    return sum(v for k, v in (r.get('settle_requests') or {}).items()
               if not k.endswith(' leases') and not k.startswith(('GET', 'LIST', 'WATCH')))

def med(xs):
    return statistics.median(xs) if xs else float('nan')

peers = ['kube', 'client-go', 'floor', 'controller-runtime']
keys = sorted({k[:3] for k in groups})
print()
print('| fin | N | W | peer | runs | converge s (range) | CPU s (range) | peak RSS MiB | heap MiB | synced s | tail writes |')
print('|---|---|---|---|---|---|---|---|---|---|---|')
for k in keys:
    for p in peers:
        rs = groups.get(k + (p,))
        if not rs:
            continue
        c = [r['converge_seconds'] for r in rs]
        u = [r['cpu_seconds'] for r in rs]
        m = [r['peak_rss_bytes'] / 2**20 for r in rs]
        h = [r['heap_inuse_bytes'] / 2**20 for r in rs]
        s = [r['synced_seconds'] for r in rs if r.get('synced_seconds')]
        t = ','.join(str(int(tail(r))) if r.get('settle_requests') is not None else '-' for r in rs)
        print(f"| {'yes' if k[0] else 'no'} | {k[1]} | {k[2]} | {p} | {len(rs)} | {med(c):.2f} ({min(c):.2f}-{max(c):.2f}) | "
              f"{med(u):.2f} ({min(u):.2f}-{max(u):.2f}) | {med(m):.1f} | {med(h):.1f} | {med(s):.2f} | {t} |")
print()
print('| fin | N | W | kube/client-go converge, CPU, RSS | kube/floor converge, CPU, RSS | kube/controller-runtime converge, CPU, RSS |')
print('|---|---|---|---|---|---|')
for k in keys:
    kr = groups.get(k + ('kube',))
    if not kr:
        continue
    cells = []
    for p in ['client-go', 'floor', 'controller-runtime']:
        o = groups.get(k + (p,))
        if not o:
            cells.append('-')
            continue
        f = lambda g, rs: med([g(r) for r in rs])
        cells.append(' / '.join(f"{f(g, kr) / f(g, o):.2f}" for g in
                     (lambda r: r['converge_seconds'], lambda r: r['cpu_seconds'], lambda r: r['peak_rss_bytes'])))
    print(f"| {'yes' if k[0] else 'no'} | {k[1]} | {k[2]} | " + ' | '.join(cells) + ' |')
