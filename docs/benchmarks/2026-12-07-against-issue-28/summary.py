"""The run's figures per round and their medians: python3 summary.py FOLDER ROUNDS."""
import glob, json, statistics, sys

here, rounds = sys.argv[1], int(sys.argv[2])


def engine(name, r):
    row = {}
    for n in (512, 2048, 4096):
        row[f"prefill {n}"] = json.load(open(f"{here}/{name}-prefill{n}-{r}.json"))["prefill_tokens_per_sec"]
    dec = {d[0]: d[1] for d in json.load(open(f"{here}/{name}-decode4k-{r}.json"))["decode"]}
    row["decode 1 @4k"], row["decode 16 @4k"] = dec[1], dec[16]
    return row


def interference(name, r):
    path = glob.glob(f"{here}/interference-{name}-{r}/*.json")[0]
    j = json.load(open(path))
    groups = {g["name"]: g["aggregate"] for g in j["groups"]}
    dec, long = groups["decoder"], groups["long"]
    return {
        "long prompts' TTFT p50 ms": long["ttft_ms"]["p50"],
        "first long prompt's TTFT ms (beside the decoders)": j["interference"]["long_prompts"][0]["ttft_ms"],
        "decoders' ITL p99 ms": dec["itl_ms"]["p99"],
        "decoders' worst gap ms": dec["worst_gap_ms"],
        "stalls": dec["stalls"],
    }


rows = {(n, r): {**engine(n, r), **interference(n, r)} for n in ("base", "new") for r in range(1, rounds + 1)}
for r in range(1, rounds + 1):
    rows["new", r].update({f"{k}, --speculative off": v for k, v in interference("new-nospec", r).items()})
cols = list(rows["new", 1])
print("| figure | " + " | ".join(f"{n} r{r}" for r in range(1, rounds + 1) for n in ("base", "new")) + " | base median | new median | new ÷ base, per round |")
print("|---|" + "---|" * (2 * rounds + 3))
for c in cols:
    bc = c.removesuffix(", --speculative off")
    vals = [rows[n, r][bc if n == "base" else c] for r in range(1, rounds + 1) for n in ("base", "new")]
    b = statistics.median(rows["base", r][bc] for r in range(1, rounds + 1))
    w = statistics.median(rows["new", r][c] for r in range(1, rounds + 1))
    ratios = [rows["new", r][c] / rows["base", r][bc] if rows["base", r][bc] else float("nan") for r in range(1, rounds + 1)]
    print(f"| {c} | " + " | ".join(f"{v:.1f}" for v in vals) + f" | {b:.1f} | {w:.1f} | " + ", ".join(f"{x:.2f}" for x in ratios) + " |")
