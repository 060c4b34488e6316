"""Medians (and per-round ratios) of the decode runs that run.sh wrote."""
import json
import statistics
import sys
from pathlib import Path

here, rounds = Path(sys.argv[1]), int(sys.argv[2])
names = ["issue-f16", "before-f16", "before-q8_0", "new-f16", "new-q8_0", "before-q8_0-avx2", "new-q8_0-avx2"]


def rate(name, r, batch):
    report = json.loads((here / f"{name}-{r}.json").read_text())
    return next(d[1] for d in report["decode"] if d[0] == batch)


print((here / "machine.txt").read_text())
for batch in [1, 16]:
    print(f"## decode {batch} @4k, tokens/s (median, rounds)\n")
    print("| build, KV cache | median | rounds |\n|---|---|---|")
    for n in names:
        xs = [rate(n, r, batch) for r in range(1, rounds + 1)]
        print(f"| {n} | {statistics.median(xs):.1f} | {' / '.join(f'{x:.1f}' for x in xs)} |")
    print("\n| ratio | median | rounds |\n|---|---|---|")
    for a, b in [("new-q8_0", "issue-f16"), ("new-f16", "issue-f16"), ("new-q8_0", "before-q8_0"), ("new-f16", "before-f16"), ("new-q8_0-avx2", "before-q8_0-avx2")]:
        xs = [rate(a, r, batch) / rate(b, r, batch) for r in range(1, rounds + 1)]
        print(f"| {a} ÷ {b} | {statistics.median(xs):.2f} | {' / '.join(f'{x:.2f}' for x in xs)} |")
    print()
