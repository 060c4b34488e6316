#!/usr/bin/env python3
"""The accuracy gate: how long greedy text agrees with the exact model.

The exact model is llama.cpp running the F32 dequantization of the GGUF under test. Every
quantized run (llama.cpp on the quantized file, braid on the same file) is scored by the
common prefix, in characters, of its 32-token greedy continuation with the exact model's,
averaged over the prompts. braid passes when its mean is at least 90% of llama.cpp's: the
two differ from the exact model by quantization noise, and braid must not add more than a
tenth on top of it. `scripts/accuracy.sh` starts the three servers and calls this.

    accuracy.py --exact URL --llama URL --braid URL --prompts FILE [--json OUT]
"""

import argparse
import json
import sys
import urllib.request

MAX_TOKENS = 32


def complete(url: str, prompt: str, llama: bool) -> str:
    body = {
        "prompt": prompt,
        "max_tokens": MAX_TOKENS,
        "temperature": 0,
        "top_k": 1,
    }
    if llama:
        # Do not let a cached prefix change how the prompt is batched. llama-server's own
        # field: braid refuses fields the OpenAI API does not have.
        body["cache_prompt"] = False
    req = urllib.request.Request(
        url + "/v1/completions",
        data=json.dumps(body).encode(),
        headers={"Content-Type": "application/json"},
    )
    with urllib.request.urlopen(req, timeout=300) as r:
        return json.load(r)["choices"][0]["text"]


def common_prefix(a: str, b: str) -> int:
    n = 0
    for x, y in zip(a, b):
        if x != y:
            break
        n += 1
    return n


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--exact", required=True, help="llama-server on the F32 file")
    ap.add_argument("--llama", required=True, help="llama-server on the quantized file")
    ap.add_argument("--braid", required=True, help="braid on the quantized file")
    ap.add_argument("--prompts", required=True)
    ap.add_argument("--json", help="write every continuation and score here")
    args = ap.parse_args()

    prompts = json.load(open(args.prompts))
    rows = []
    for p in prompts:
        exact = complete(args.exact, p, llama=True)
        llama = complete(args.llama, p, llama=True)
        braid = complete(args.braid, p, llama=False)
        rows.append(
            {
                "prompt": p,
                "exact": exact,
                "llama": llama,
                "braid": braid,
                "llama_prefix": common_prefix(llama, exact),
                "braid_prefix": common_prefix(braid, exact),
                "exact_chars": len(exact),
            }
        )
        print(f"{rows[-1]['llama_prefix']:4d} {rows[-1]['braid_prefix']:4d}  {p[:50]!r}", file=sys.stderr)

    n = len(rows)
    mean = lambda key: sum(r[key] for r in rows) / n
    whole = lambda who: sum(r[f"{who}_prefix"] == r["exact_chars"] == len(r[who]) for r in rows)
    llama_mean, braid_mean = mean("llama_prefix"), mean("braid_prefix")
    ratio = braid_mean / llama_mean if llama_mean else float("inf")
    summary = {
        "prompts": n,
        "exact_mean_chars": mean("exact_chars"),
        "llama_mean_prefix": llama_mean,
        "braid_mean_prefix": braid_mean,
        "llama_identical": whole("llama"),
        "braid_identical": whole("braid"),
        "ratio": ratio,
        "passes": ratio >= 0.9,
    }
    print(f"| run | mean common prefix with the exact model (chars of {summary['exact_mean_chars']:.1f}) | identical continuations |")
    print("|---|---|---|")
    print(f"| llama.cpp, quantized file | {llama_mean:.1f} | {summary['llama_identical']} of {n} |")
    print(f"| braid, same file | {braid_mean:.1f} | {summary['braid_identical']} of {n} |")
    print(f"\nbraid / llama.cpp = {ratio:.2f} (gate: ≥ 0.90): {'pass' if summary['passes'] else 'FAIL'}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"summary": summary, "continuations": rows}, f, indent=1, ensure_ascii=False)
    return 0 if summary["passes"] else 1


if __name__ == "__main__":
    sys.exit(main())
