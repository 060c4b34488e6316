#!/usr/bin/env python3
"""The accuracy gate: how long greedy text agrees with the exact model.

The exact model is llama.cpp running the F32 dequantization of the GGUF under test. Every
quantized run (llama.cpp on the quantized file, braid on the same file) is scored by the
common prefix, in characters, of its 32-token greedy continuation with the exact model's,
averaged over the prompts. braid passes when its mean is at least 90% of llama.cpp's: the
two differ from the exact model by quantization noise, and braid must not add more than a
tenth on top of it. `scripts/accuracy.sh` starts the three servers and calls this.

Greedy text parts at the first near-tie, so one rounding changed anywhere moves that mean by
10–16 characters either way. With --teacher-forced, every run also reads each prompt
followed by the exact model's continuation, one token more at a time, and is scored at every
position: how often its most likely next token is the exact model's, and the mean
log-probability it gives that token. That figure is steady enough to tell two builds apart
(--baseline: a second braid, scored the same way).

    accuracy.py --exact URL --llama URL --braid URL --prompts FILE [--json OUT]
                [--teacher-forced] [--baseline URL]
"""

import argparse
import json
import sys
import urllib.request

MAX_TOKENS = 32
# Alternatives asked for at each teacher-forced position: the exact model's token is among a
# quantized run's 20 most likely nearly always; where not, the 20th's log-probability stands in.
TOP = 20


def post(url: str, path: str, body: dict) -> dict:
    req = urllib.request.Request(
        url + path,
        data=json.dumps(body).encode(),
        headers={"Content-Type": "application/json"},
    )
    with urllib.request.urlopen(req, timeout=300) as r:
        return json.load(r)


def completion(url: str, body: dict, llama: bool) -> dict:
    if llama:
        # Do not let a cached prefix change how the prompt is batched. llama-server's own
        # field: braid refuses fields the OpenAI API does not have.
        body = {**body, "cache_prompt": False}
    return post(url, "/v1/completions", body)["choices"][0]


def complete(url: str, prompt: str, llama: bool) -> str:
    body = {"prompt": prompt, "max_tokens": MAX_TOKENS, "temperature": 0, "top_k": 1}
    return completion(url, body, llama)["text"]


def next_token(url: str, ids: list[int], llama: bool) -> tuple[str, dict[str, float]] | None:
    """The most likely token after `ids`, and the `TOP` most likely with their log-probabilities,
    by text (llama-server answers in the chat shape, braid in the completions one); None where
    the answer is the end of text, which neither server reports a token for."""
    body = {"prompt": ids, "max_tokens": 1, "temperature": 0, "logprobs": TOP}
    lp = completion(url, body, llama)["logprobs"]
    if lp and lp.get("content"):
        first = lp["content"][0]
        return first["token"], {t["token"]: t["logprob"] for t in first["top_logprobs"]}
    if lp and lp.get("tokens"):
        return lp["tokens"][0], lp["top_logprobs"][0]
    return None


def teacher_forced(urls: dict[str, tuple[str, bool]], tokenizer: str, prompt: str, exact: str) -> dict:
    """Each run's score at every position of the exact continuation: whether its most likely
    token is the exact model's, and the log-probability it gives that token. Positions where
    some run would end the text are counted apart (`ended`)."""
    ids = post(tokenizer, "/tokenize", {"prompt": prompt + exact})["tokens"]
    start = len(post(tokenizer, "/tokenize", {"prompt": prompt})["tokens"])
    scores = {name: {"agree": 0, "logprob": 0.0, "outside_top": 0} for name in urls if name != "exact"}
    positions = ended = 0
    for i in range(max(start, 1), len(ids)):
        answers = {name: next_token(url, ids[:i], llama) for name, (url, llama) in urls.items()}
        if any(a is None for a in answers.values()):
            ended += 1
            continue
        want = answers["exact"][0]
        positions += 1
        for name, score in scores.items():
            got, top = answers[name]
            score["agree"] += got == want
            if want not in top:
                score["outside_top"] += 1
            score["logprob"] += top.get(want, min(top.values()))
    return {"positions": positions, "ended": ended, **scores}


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
    ap.add_argument("--teacher-forced", action="store_true", help="also score every position of the exact continuation")
    ap.add_argument("--baseline", help="another braid on the quantized file, scored like --braid")
    args = ap.parse_args()

    urls = {"exact": (args.exact, True), "llama": (args.llama, True), "braid": (args.braid, False)}
    if args.baseline:
        urls["baseline"] = (args.baseline, False)
    runs = [name for name in urls if name != "exact"]
    prompts = json.load(open(args.prompts))
    rows = []
    for p in prompts:
        exact = complete(args.exact, p, llama=True)
        row = {"prompt": p, "exact": exact}
        for name in runs:
            row[name] = complete(urls[name][0], p, urls[name][1])
            row[f"{name}_prefix"] = common_prefix(row[name], exact)
        row["exact_chars"] = len(exact)
        if args.teacher_forced:
            row["teacher_forced"] = teacher_forced(urls, args.braid, p, exact)
        rows.append(row)
        print(" ".join(f"{row[f'{name}_prefix']:4d}" for name in runs) + f"  {p[:50]!r}", file=sys.stderr)

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
    if args.baseline:
        summary["baseline_mean_prefix"] = mean("baseline_prefix")
        summary["baseline_identical"] = whole("baseline")
    if args.teacher_forced:
        positions = sum(r["teacher_forced"]["positions"] for r in rows)
        ended = sum(r["teacher_forced"]["ended"] for r in rows)
        summary["teacher_forced"] = {"positions": positions, "ended": ended} | {
            name: {
                "agree": sum(r["teacher_forced"][name]["agree"] for r in rows) / positions,
                "mean_logprob": sum(r["teacher_forced"][name]["logprob"] for r in rows) / positions,
                "outside_top": sum(r["teacher_forced"][name]["outside_top"] for r in rows),
            }
            for name in runs
        }
    print(f"| run | mean common prefix with the exact model (chars of {summary['exact_mean_chars']:.1f}) | identical continuations |")
    print("|---|---|---|")
    print(f"| llama.cpp, quantized file | {llama_mean:.1f} | {summary['llama_identical']} of {n} |")
    print(f"| braid, same file | {braid_mean:.1f} | {summary['braid_identical']} of {n} |")
    if args.baseline:
        print(f"| braid baseline, same file | {summary['baseline_mean_prefix']:.1f} | {summary['baseline_identical']} of {n} |")
    if args.teacher_forced:
        tf = summary["teacher_forced"]
        print(f"\nTeacher-forced, {tf['positions']} positions of the exact continuations"
              f" ({tf['ended']} more where a run would end the text):\n")
        print("| run | most likely token is the exact model's | mean log-probability of the exact model's token |")
        print("|---|---|---|")
        labels = {"llama": "llama.cpp, quantized file", "braid": "braid, same file", "baseline": "braid baseline, same file"}
        for name in runs:
            print(f"| {labels[name]} | {tf[name]['agree']:.2%} | {tf[name]['mean_logprob']:.4f} |")
    print(f"\nbraid / llama.cpp = {ratio:.2f} (gate: ≥ 0.90): {'pass' if summary['passes'] else 'FAIL'}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"summary": summary, "continuations": rows}, f, indent=1, ensure_ascii=False)
    return 0 if summary["passes"] else 1


if __name__ == "__main__":
    sys.exit(main())
