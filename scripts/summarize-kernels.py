#!/usr/bin/env python3
"""Summarizes a scripts/bench-kernels.sh run folder as Markdown: per kernel, the engine's
prefill and decode rates (median, min-max over the rounds) and each as a share of the fastest
kernel; decode at a long context, the fastest kernel against the baseline build; and, if the
folder has them, served throughput of braid forced to AVX2 against
llama.cpp built for AVX2."""

import json
import statistics
import sys
from pathlib import Path

COLUMNS = ["prefill"] + [f"decode {b}" for b in (1, 4, 16, 32)]


def rates(report: dict) -> dict:
    out = {"prefill": report["prefill_tokens_per_sec"]}
    for batch, tok_s, _step in report["decode"]:
        out[f"decode {batch}"] = tok_s
    return out


def main(folder: Path):
    runs: dict[str, list[dict]] = {}
    peaks: dict[str, list[dict]] = {}
    for f in sorted(folder.glob("engine-*-*.json")):
        name = f.stem.rsplit("-", 1)[0].removeprefix("engine-")
        report = json.loads(f.read_text())
        runs.setdefault(name, []).append(rates(report))
        if report.get("int8_peak_gops"):
            peaks.setdefault(name, []).append(report)
    machine = (folder / "machine.txt").read_text() if (folder / "machine.txt").exists() else ""
    print(f"# Kernels side by side: {folder.name}\n\n```\n{machine.strip()}\n```\n")
    if runs:
        med = {k: {c: statistics.median(r[c] for r in rs if c in r) for c in COLUMNS} for k, rs in runs.items()}
        best = "avx512vnni" if "avx512vnni" in med else next(iter(med))
        n = max(len(rs) for rs in runs.values())
        print(f"Engine alone (`braid bench-engine --kernel K`), tokens/s, median (min–max) of {n} alternating rounds;")
        print(f"in brackets, the median as a share of {best}'s. Decode at context 128.\n")
        print("| kernel | " + " | ".join(COLUMNS) + " |")
        print("|---" * (len(COLUMNS) + 1) + "|")
        for k, rs in runs.items():
            cells = []
            for c in COLUMNS:
                vals = [r[c] for r in rs if c in r]
                cell = f"{med[k][c]:.0f} ({min(vals):.0f}–{max(vals):.0f})"
                if k != best:
                    cell += f" [{100 * med[k][c] / med[best][c]:.0f}%]"
                cells.append(cell)
            label = "baseline: BASELINE_BRAID, avx512vnni" if k == "baseline" else k
            print(f"| {label} | " + " | ".join(cells) + " |")
        print()
        for k, reports in peaks.items():
            if reports:
                peak = statistics.median(r["int8_peak_gops"] for r in reports)
                frac = statistics.median(r["prefill_fraction_of_peak"] for r in reports)
                print(f"- {k}: int8 peak {peak:.0f} GOP/s (its multiply-add instruction from registers, all threads); prefill at {100 * frac:.1f}% of it")
        if any(peaks.values()):
            print()
    long: dict[str, list[dict]] = {}
    for f in sorted(folder.glob("long-*-*.json")):
        name = f.stem.rsplit("-", 1)[0].removeprefix("long-")
        long.setdefault(name, []).append(json.loads(f.read_text()))
    if long:
        context = next(
            (l.split(":")[1].strip() for l in machine.splitlines() if l.startswith("long context:")), "?"
        )
        print(f"Decode at context {context} (`braid bench-engine --context {context} --batch 1 --batch 16`), tokens/s,")
        print("median (min–max) of the rounds:\n")
        batches = [b for b, _, _ in next(iter(long.values()))[0]["decode"]]
        print("| build | " + " | ".join(f"decode {b}" for b in batches) + " |")
        print("|---" * (len(batches) + 1) + "|")
        meds = {}
        for k, rs in long.items():
            cells = []
            for i, b in enumerate(batches):
                vals = [r["decode"][i][1] for r in rs]
                meds[(k, b)] = statistics.median(vals)
                cell = f"{meds[(k, b)]:.1f} ({min(vals):.1f}–{max(vals):.1f})"
                if k != "baseline" and ("baseline", b) in meds:
                    cell += f" [{meds[(k, b)] / meds[('baseline', b)]:.2f}× baseline]"
                cells.append(cell)
            label = "baseline: BASELINE_BRAID, avx512vnni" if k == "baseline" else k
            print(f"| {label} | " + " | ".join(cells) + " |")
        print()
    pairs = [
        ("braid-avx2", "llama.cpp-avx2", "braid, avx2 kernel", "llama.cpp, AVX2 build"),
        ("braid-best", "llama.cpp-native", "braid, its fastest kernel", "llama.cpp, native build"),
    ]
    for ours, theirs, our_name, their_name in pairs:
        served = {}
        for label in (ours, theirs):
            f = folder / label / "scaling.json"
            if f.exists():
                served[label] = {g["concurrency"]: g["aggregate"] for g in json.loads(f.read_text())["groups"]}
        if len(served) < 2:
            continue
        print("Served (`braid bench scaling`, prompt 24 tokens, 64 output tokens), output tokens/s and ITL p50:\n")
        print(f"| concurrency | {our_name} | {their_name} | braid ÷ llama.cpp |")
        print("|---|---|---|---|")
        b, l = served[ours], served[theirs]
        for c in sorted(b):
            if c in l:
                bt, lt = b[c]["throughput_tok_s"], l[c]["throughput_tok_s"]
                print(
                    f"| {c} | {bt:.0f} (ITL p50 {b[c]['itl_ms']['p50']:.1f} ms) | {lt:.0f} (ITL p50 {l[c]['itl_ms']['p50']:.1f} ms) | {bt / lt:.2f}× |"
                )
        print()


if __name__ == "__main__":
    main(Path(sys.argv[1]))
