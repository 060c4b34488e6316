#!/usr/bin/env python3
"""Time to read one fresh prompt, served: braid and llama-server side by side, one request at a
time on idle servers, alternating per prompt. Prompts are seeded random token ids (the same ids
to both), each answered with one token, so the time is the prompt's reading plus one step.

    ttft.py BRAID_URL LLAMA_URL ROUNDS OUT.json
"""
import json, random, statistics, sys, time, urllib.request

braid, llama, rounds, out = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]
LENGTHS = [500, 2000, 4000, 7000]


def timed(url, ids, extra):
    body = {"prompt": ids, "max_tokens": 1, "temperature": 0, **extra}
    req = urllib.request.Request(url + "/v1/completions", data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json"})
    t = time.perf_counter()
    with urllib.request.urlopen(req, timeout=600) as r:
        usage = json.load(r)["usage"]
    dt = time.perf_counter() - t
    assert usage["prompt_tokens"] == len(ids), usage
    return dt


rows = []
for r in range(rounds):
    for n in LENGTHS:
        ids = [random.Random(f"{r}-{n}-{i}").randrange(1000, 40000) for i in range(n)]
        b = timed(braid, ids, {})
        l = timed(llama, ids, {"cache_prompt": False})
        rows.append({"round": r, "tokens": n, "braid_s": b, "llama_s": l})
        print(f"round {r} {n:>5} tokens: braid {b:6.2f} s ({n / b:5.0f} tok/s), llama.cpp {l:6.2f} s ({n / l:5.0f} tok/s), braid/llama {b / l:.2f}", flush=True)
json.dump(rows, open(out, "w"), indent=1)
print("| tokens | braid s | llama.cpp s | braid ÷ llama.cpp | braid tok/s | llama.cpp tok/s |")
print("|---|---|---|---|---|---|")
first = None
for n in LENGTHS:
    b = statistics.median(x["braid_s"] for x in rows if x["tokens"] == n)
    l = statistics.median(x["llama_s"] for x in rows if x["tokens"] == n)
    print(f"| {n:,} | {b:.2f} | {l:.2f} | {b / l:.2f} | {n / b:.0f} | {n / l:.0f} |")
