#!/usr/bin/env python3
"""Time to read one fresh prompt on two braid builds side by side: one request at a time on idle
servers, alternating per prompt, the same seeded random token ids to both (those of
../2026-12-06-prompt-curve/ttft.py), each answered with one token.

    old_vs_new.py OLD_URL NEW_URL ROUNDS OUT.json
"""
import json, random, statistics, sys, time, urllib.request

old, new, rounds, out = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]
LENGTHS = [500, 2000, 4000, 7000]


def timed(url, ids):
    body = {"prompt": ids, "max_tokens": 1, "temperature": 0}
    req = urllib.request.Request(url + "/v1/completions", data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json"})
    t = time.perf_counter()
    with urllib.request.urlopen(req, timeout=600) as r:
        assert json.load(r)["usage"]["prompt_tokens"] == len(ids)
    return time.perf_counter() - t


rows = []
for r in range(rounds):
    for n in LENGTHS:
        ids = [random.Random(f"{r}-{n}-{i}").randrange(1000, 40000) for i in range(n)]
        o, w = timed(old, ids), timed(new, ids)
        rows.append({"round": r, "tokens": n, "old_s": o, "new_s": w})
        print(f"round {r} {n:>5} tokens: old {o:6.2f} s, new {w:6.2f} s, new/old {w / o:.2f}", flush=True)
json.dump(rows, open(out, "w"), indent=1)
print("| tokens | old s | new s | new ÷ old | old tok/s | new tok/s |")
print("|---|---|---|---|---|---|")
for n in LENGTHS:
    o = statistics.median(x["old_s"] for x in rows if x["tokens"] == n)
    w = statistics.median(x["new_s"] for x in rows if x["tokens"] == n)
    print(f"| {n:,} | {o:.2f} | {w:.2f} | {w / o:.2f} | {n / o:.0f} | {n / w:.0f} |")
