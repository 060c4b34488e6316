"""Paired ratios from run.sh's reports: python summarize.py DIR ROUNDS [PREFIX].

Reads PREFIX-1.json ... PREFIX-ROUNDS.json (PREFIX: `round`, run.sh's; llama.sh writes others).

Each record of a group is paired with its twin in the `(baseline)` group (the same request,
sent to the other server just before or after it); the many-stream group, sent level by level,
is paired as a whole. Per group: the median (quartiles) over every pair of every round of the
ratio on/off of the decode rate (tokens after the first over the time since the first) and of
the output rate (tokens over the request's whole time, prompt included). The last row is
OpenAI's comparison for Predicted Outputs: the edits with their prediction on the server with
speculation, against the same edits without one on the server without."""

import json
import statistics
import sys


def rates(r):
    t = r["token_times_s"]
    # A chat stream's first chunk carries only the role: the answer starts at the second.
    if r["group"].startswith("edit"):
        t = t[1:]
    n = r.get("usage_completion_tokens") or len(t)
    return (len(t) - 1) / (t[-1] - t[0]), n / r["end_s"]


def quartiles(xs):
    qs = statistics.quantiles(xs, n=4) if len(xs) > 1 else [xs[0]] * 3
    return f"{statistics.median(xs):.2f} ({qs[0]:.2f}–{qs[2]:.2f})"


def main():
    here, rounds = sys.argv[1], int(sys.argv[2])
    prefix = sys.argv[3] if len(sys.argv) > 3 else "round"
    pairs = {}
    for k in range(1, rounds + 1):
        by = {}
        for r in json.load(open(f"{here}/{prefix}-{k}.json"))["requests"]:
            if r["outcome"] == "ok":
                by.setdefault(r["group"], []).append(r)
        twins = [(g, g + " (baseline)", g) for g in by if not g.endswith(" (baseline)")]
        twins.append(("edit+prediction, against edit off", "edit (baseline)", "edit+prediction"))
        for name, base, own in twins:
            on, off = by.get(own, []), by.get(base, [])
            if own.startswith("random c=") and own != "random c=1":
                a = [statistics.mean(x) for x in zip(*map(rates, on))]
                b = [statistics.mean(x) for x in zip(*map(rates, off))]
                pairs.setdefault(name, []).append((a[0] / b[0], a[1] / b[1], a[0], b[0]))
                continue
            for x, y in zip(on, off):
                a, b = rates(x), rates(y)
                pairs.setdefault(name, []).append((a[0] / b[0], a[1] / b[1], a[0], b[0]))
    print("| group | pairs | decode tok/s on / off (medians) | decode on/off | output on/off |")
    print("|---|---|---|---|---|")
    for name, ps in pairs.items():
        d, o, a, b = zip(*ps)
        print(f"| {name} | {len(ps)} | {statistics.median(a):.0f} / {statistics.median(b):.0f} | {quartiles(d)} | {quartiles(o)} |")


if __name__ == "__main__":
    main()
