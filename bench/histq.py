#!/usr/bin/env python3
# p50 and p99 of every histogram series in a Prometheus text exposition
# whose name contains PATTERN, interpolated within buckets:
#   bench/histq.py METRICS.txt [PATTERN]
import collections
import re
import sys

buckets = collections.defaultdict(list)
for line in open(sys.argv[1]):
    if line.startswith('#'):
        continue
    m = re.match(r'(\w+)_bucket\{(.*)\} (\S+)', line)
    if m:
        labels = re.sub(r',?le="[^"]*"', '', m.group(2))
        le = re.search(r'le="([^"]*)"', m.group(2)).group(1)
        buckets[(m.group(1), labels)].append((float('inf') if le == '+Inf' else float(le), float(m.group(3))))


def quantile(bs, p):
    r = p * bs[-1][1]
    prev_le, prev_c = 0.0, 0.0
    for le, c in bs:
        if c >= r:
            if le == float('inf'):
                return prev_le
            return prev_le + (le - prev_le) * (r - prev_c) / max(c - prev_c, 1e-9)
        prev_le, prev_c = le, c


pattern = sys.argv[2] if len(sys.argv) > 2 else ''
for (name, labels), bs in sorted(buckets.items()):
    bs.sort()
    if pattern not in name or bs[-1][1] == 0:
        continue
    print(f"{name}{{{labels}}} count={int(bs[-1][1])} p50={quantile(bs, .5)*1e3:.2f}ms p99={quantile(bs, .99)*1e3:.2f}ms")
