#!/usr/bin/env python3
"""Writes the report of one scripts/bench.sh output folder (to stdout; bench.sh saves it as the
folder's README.md, and docs/PERFORMANCE.md quotes its figures per CPU and links to it).

Every figure in the report comes from the JSON files in that folder, so the report and the
benchmark cannot drift apart; the prose around the tables says how to read them.
"""

import json
import platform
import subprocess
import sys
from pathlib import Path

LLAMA_REF = {1: (128, 7.8), 4: (139, 28), 16: (265, 58), 32: (250, 54)}
TARGETS = {1: 1.0, 4: 1.5, 16: 1.5, 32: 1.5}
MEM_BW = 34.7e9
F32_FLOPS = 227e9
FLOP_PER_TOKEN = 0.27e9


def load(path: Path):
    return json.loads(path.read_text()) if path.exists() else None


def group(report, name):
    for g in report["groups"]:
        if g["name"] == name:
            return g["aggregate"]
    return None


def f(x, digits=1):
    return "–" if x is None else f"{x:,.{digits}f}"


def cpu_name() -> str:
    cpu = "unknown CPU"
    try:
        for line in subprocess.run(["lscpu"], capture_output=True, text=True).stdout.splitlines():
            if line.startswith("Model name:"):
                cpu = line.split(":", 1)[1].strip()
        flags = open("/proc/cpuinfo").read()
        if "avx512_vnni" in flags:
            cpu += ", AVX-512 VNNI"
    except OSError:
        pass
    return cpu


def machine() -> str:
    """The machine rendering the report: bench.sh renders it right after the run, on the same machine."""
    cpu = cpu_name()
    try:
        mem = int(open("/proc/meminfo").read().split()[1]) / 1024 / 1024
    except OSError:
        mem = 0
    cores = subprocess.run(["nproc"], capture_output=True, text=True).stdout.strip()
    return f"{cpu}, {cores} cores, {mem:.0f} GB, {platform.system()} {platform.release()}"


def main(out: Path):
    engine = load(out / "engine.json")
    ctx = {c: load(out / f"engine-context-{c}.json") for c in (1024, 4096)}
    scenarios = ("scaling", "interference", "poisson", "prefix-cache")
    braid = {s: load(out / "braid" / f"{s}.json") for s in scenarios}
    llama = {s: load(out / "llama.cpp" / f"{s}.json") for s in scenarios}
    nochunk = load(out / "braid-no-chunking" / "interference.json")
    llama_b128 = load(out / "llama.cpp-b128" / "interference.json")
    overload = {"braid": load(out / "braid" / "overload" / "poisson.json"), "llama.cpp": load(out / "llama.cpp" / "overload" / "poisson.json")}
    rss = (out / "braid-rss-bytes.txt").read_text().strip() if (out / "braid-rss-bytes.txt").exists() else None
    p = print
    p(f"# `scripts/bench.sh` run: {out.name}\n")
    p("The JSON reports, SVG charts and raw server logs are in this folder; [docs/PERFORMANCE.md](../../PERFORMANCE.md) has the current figures per CPU.")
    p(f"Machine: {machine()}. Model: SmolLM2-135M-Instruct Q4_1 GGUF (the default). All figures are from one run;")
    p("the machine is shared and noisy, so compare ratios measured side by side and read medians and percentiles.")
    load_file = out / "load.txt"
    if load_file.exists():
        p("Load average (1, 5, 15 min) at the start and end of the run, from `/proc/loadavg`: " + "; ".join(" ".join(line.split()[:4]) for line in load_file.read_text().splitlines()) + ".")
        p("On 2 cores, a load above 2 means braid and llama.cpp had only part of the machine: the absolute figures are then low for both.")
    p("")
    targets(p, engine, braid, llama, nochunk)
    notes = out / "notes.md"
    if notes.exists():
        p(notes.read_text().strip() + "\n")

    if engine:
        p("## The engine alone (`braid bench-engine`)\n")
        p(f"Kernel `{engine['kernel']}`, {engine['threads']} threads, {engine['weight_bytes'] / 1e6:.0f} MB of packed weights read per step.\n")
        p("| measure | braid | target | fraction of the machine's limit |")
        p("|---|---|---|---|")
        pre = engine["prefill_tokens_per_sec"]
        p(f"| prefill, one 512-token prompt | {f(pre)} tok/s | ≥ 500 | {pre * FLOP_PER_TOKEN / F32_FLOPS:.0%} of f32 peak ({F32_FLOPS / 1e9:.0f} GFLOP/s) |")
        for n, rate, step in engine["decode"]:
            target = {1: "≥ 130", 16: "≥ 400"}.get(n, "")
            limit = ""
            if n == 1:
                limit = f"{rate * engine['weight_bytes'] / MEM_BW:.0%} of memory bandwidth ({MEM_BW / 1e9:.1f} GB/s ÷ {engine['weight_bytes'] / 1e6:.0f} MB per token)"
            p(f"| decode, {n} sequence{'s' if n > 1 else ''} at context 128 | {f(rate)} tok/s (step p50 {f(step, 2)} ms) | {target} | {limit} |")
        p("")
        if engine.get("kernels"):
            p("Why braid has its own kernel: the linear layers of one forward (30 layers × 7 weights), tokens/s by path,")
            p("measured in the same run (`braid bench-engine --compare-kernels`):\n")
            p(f"| rows per step | candle, Q4_1 as shipped | candle, requantized Q8_0 | candle, dequantized f32 | braid int8 (`{engine['kernel']}`) |")
            p("|---|---|---|---|---|")
            for k in engine["kernels"]:
                p(f"| {k['rows']} | {f(k['candle_as_shipped'], 0)} | {f(k['candle_q8_0'], 0)} | {f(k['candle_f32'], 0)} | {f(k['braid_int8'], 0)} |")
            p("\nbraid's kernel reads each weight block once per step for every row (weight-stationary), so one path")
            p("serves a single decode and a 512-token prompt alike, and every row is computed the same way whatever")
            p("the batch (bit-identical results).\n")
        if all(ctx.values()):
            p("As the context grows (decode, step p50):\n")
            p("| context | 1 sequence tok/s | 16 sequences tok/s | 16-sequence step p50 |")
            p("|---|---|---|---|")
            rows = [(128, engine)] + [(c, ctx[c]) for c in (1024, 4096)]
            for c, e in rows:
                d = {n: (r, s) for n, r, s in e["decode"]}
                p(f"| {c} | {f(d.get(1, (None,))[0])} | {f(d.get(16, (None,))[0])} | {f(d.get(16, (None, None))[1], 1)} ms |")
            p("\nKV memory per running sequence: 23 KB per token in half floats (30 layers × 3 KV heads × 64 dims × K and V),")
            p("so 2.9 MB at 128 tokens, 24 MB at 1,024 and 94 MB at 4,096; the default `--kv-cache-mb 1024` holds 46,592 tokens.")
            if rss:
                p(f"Resident memory of `braid serve` after the suite: {int(rss) / 1e6:.0f} MB (weights, the preallocated KV pool, buffers).")
            p("")

    per_kernel(p, out)

    sc = braid["scaling"]
    if sc:
        p("## Serving: throughput and latency vs concurrency (`braid bench scaling`)\n")
        p("Random 24-token prompts (token ids from a fixed seed), 64 output tokens, greedy, `ignore_eos`.\n")
        lsc = llama["scaling"]
        head = "| concurrency | braid tok/s | ITL p50 | ITL p99 | TTFT p50 | TTFT p99 |"
        sep = "|---|---|---|---|---|---|"
        if lsc:
            head += " llama.cpp tok/s (same run) | llama.cpp ITL p50 | llama.cpp TTFT p50 | braid / llama.cpp |"
            sep += "---|---|---|---|"
        else:
            head += " llama.cpp tok/s (issue's reference) | braid / reference | target |"
            sep += "---|---|---|"
        p(head)
        p(sep)
        for g in sc["groups"]:
            c = g.get("concurrency")
            a = g["aggregate"]
            row = f"| {c} | {f(a['throughput_tok_s'])} | {f(a['itl_ms']['p50'])} ms | {f(a['itl_ms']['p99'])} ms | {f(a['ttft_ms']['p50'], 0)} ms | {f(a['ttft_ms']['p99'], 0)} ms |"
            if lsc:
                la = group(lsc, g["name"])
                if la:
                    row += f" {f(la['throughput_tok_s'])} | {f(la['itl_ms']['p50'])} ms | {f(la['ttft_ms']['p50'], 0)} ms | {a['throughput_tok_s'] / la['throughput_tok_s']:.2f}× |"
            elif c in LLAMA_REF:
                ref = LLAMA_REF[c][0]
                row += f" {ref} | {a['throughput_tok_s'] / ref:.2f}× | ≥ {TARGETS[c]}× |"
            else:
                row += " | | |"
            p(row)
        p("")

    it = braid["interference"]
    if it:
        p("## A long prompt must not freeze the streams (`braid bench interference`)\n")
        p("4 streams decode 400 tokens each while three 1,200-token prompts arrive 3 s apart (random token ids, so no cache helps).\n")
        p("| server | decoders' worst gap | gaps > 250 ms | decoders' ITL p50 | ITL p99 | long prompts' TTFT p50 | TTFT max |")
        p("|---|---|---|---|---|---|---|")
        runs = [("braid (braided, `--itl-target-ms 100`)", it), ("braid `--no-chunked-prefill`", nochunk), ("llama.cpp default `-b 2048` (same run)", llama["interference"]), ("llama.cpp `-b 128 -ub 128` (same run)", llama_b128)]
        for name, r in runs:
            if not r:
                continue
            d, l = group(r, "decoder"), group(r, "long")
            p(f"| {name} | {f(d['worst_gap_ms'], 0)} ms | {d['stalls']} | {f(d['itl_ms']['p50'])} ms | {f(d['itl_ms']['p99'])} ms | {f(l['ttft_ms']['p50'] / 1e3, 2)} s | {f(l['ttft_ms']['max'] / 1e3, 2)} s |")
        p("| llama.cpp default `-b 2048` (issue's reference) | 3.9–4.3 s | 12 | | | 4.3–4.6 s | |")
        p("| llama.cpp `-b 128 -ub 128` (issue's reference) | 0.63 s | 116 | | | 7.7 s | |")
        p("")
        p("Charts: [braided](braid/interference.svg), [whole prompts](braid-no-chunking/interference.svg).\n")

    for title, reports in (("within capacity", {"braid": braid["poisson"], "llama.cpp": llama["poisson"]}), ("overload", overload)):
        if not reports["braid"]:
            continue
        params = reports["braid"].get("params", {})
        p(f"## Poisson arrivals, {title} (`braid bench poisson`)\n")
        p(f"{params.get('rate', '?')} requests/s for {params.get('duration_secs', '?')} s, prompt lengths 32/256/1024 (50/30/20 %), 64 output tokens; goodput counts requests with TTFT ≤ 2 s and ITL p99 ≤ 150 ms.\n")
        p("| server | goodput req/s | requests ok | tok/s | TTFT p50 | TTFT p99 | ITL p50 | ITL p99 | stalls |")
        p("|---|---|---|---|---|---|---|---|---|")
        for name, r in reports.items():
            if r:
                a = r["overall"]
                p(f"| {name} | {f(a['goodput_req_s'], 2)} | {a['succeeded']}/{a['requests']} | {f(a['throughput_tok_s'])} | {f(a['ttft_ms']['p50'], 0)} ms | {f(a['ttft_ms']['p99'], 0)} ms | {f(a['itl_ms']['p50'])} ms | {f(a['itl_ms']['p99'])} ms | {a['stalls']} |")
        p("")

    prefix_cache(p, {"braid": braid["prefix-cache"], "llama.cpp `--no-cache-prompt` (same run)": llama["prefix-cache"]})


def per_kernel(p, out: Path):
    """`braid bench-engine --kernel K` once per kernel the CPU supports: each kernel's figures
    and their share of the fastest kernel's."""
    runs = [r for r in (load(path) for path in out.glob("engine-kernel-*.json")) if r]
    if not runs:
        return
    # bench.sh runs them fastest first; `braid info --json` of the run keeps that order.
    info = load(out / "info.json") or {}
    order = info.get("supported_kernels") or []
    runs.sort(key=lambda r: (order.index(r["kernel"]) if r["kernel"] in order else len(order), -r["prefill_tokens_per_sec"]))
    batches = sorted({n for r in runs for n, _, _ in r["decode"]})
    columns = [("prefill tok/s", lambda r: r["prefill_tokens_per_sec"])]
    for n in batches:
        columns.append((f"decode {n} tok/s", lambda r, n=n: next((rate for b, rate, _ in r["decode"] if b == n), None)))
    best = [max((v for v in map(get, runs) if v), default=None) for _, get in columns]
    threads = sorted({r["threads"] for r in runs})
    p("## The engine per kernel (`braid bench-engine --kernel`)\n")
    p(f"Every kernel this CPU ({cpu_name()}) supports, one `braid bench-engine` process each in the same run, "
      f"{'/'.join(map(str, threads))} threads, a 512-token prompt and decode at context 128. "
      "In brackets, each figure as a share of the fastest kernel's in its column. "
      "`BRAID_KERNEL` picks a kernel for `braid serve`; by default it takes the fastest this CPU supports (the first row).\n")
    p("| kernel | " + " | ".join(name for name, _ in columns) + " |")
    p("|---|" + "---|" * len(columns))
    for r in runs:
        cells = []
        for (_, get), top in zip(columns, best):
            v = get(r)
            cells.append("–" if v is None else f"{f(v)} ({v / top:.0%})" if top else f(v))
        p(f"| `{r['kernel']}` | " + " | ".join(cells) + " |")
    p("")


def prefix_cache(p, reports):
    """`braid bench prefix-cache`: TTFT of each group, and the server's cache counters."""
    if not reports["braid"]:
        return
    q = reports["braid"].get("params", {})
    p("## The same long prompt again, or a shared prefix (`braid bench prefix-cache`)\n")
    p(f"{q.get('prompts', '?')} distinct {q.get('prompt_tokens', '?')}-token prompts sent one at a time (cold), then each once more (warm);")
    p(f"then {q.get('shared_prompts', '?')} prompts of one {q.get('prefix_tokens', '?')}-token prefix and a {q.get('suffix_tokens', '?')}-token suffix of their own,")
    p(f"the first of which brings the prefix to the server (shared-first). {q.get('max_tokens', '?')} output tokens each, greedy.")
    p("Cache hits and queries are the rise of braid's `braid_prefix_cache_{hits,queries}_total` (tokens) during each group.\n")
    p("| server | group | TTFT p50 | TTFT p90 | TTFT max | cold p50 ÷ p50 | cache hits / queries |")
    p("|---|---|---|---|---|---|---|")
    for name, r in reports.items():
        if not r:
            continue
        counters = {c["group"]: c for c in (r.get("prefix_cache") or {}).get("counters", [])}
        cold = (group(r, "cold") or {}).get("ttft_ms") or {}
        for g in r["groups"]:
            t = g["aggregate"].get("ttft_ms") or {}
            ratio = f"{cold['p50'] / t['p50']:.1f}×" if cold.get("p50") and t.get("p50") else "–"
            c = counters.get(g["name"])
            hits = f"{c['hits']:,} / {c['queries']:,}" if c else "–"
            p(f"| {name} | {g['name']} | {f(t.get('p50'), 0)} ms | {f(t.get('p90'), 0)} ms | {f(t.get('max'), 0)} ms | {ratio} | {hits} |")
    p("")


def targets(p, engine, braid, llama, nochunk):
    """The issues' targets, each against this run's figure."""
    rows = []

    def row(what, measured, goal, met):
        rows.append(f"| {what} | {measured} | {goal} | {'yes' if met else '**no**'} |")

    if engine:
        pre = engine["prefill_tokens_per_sec"]
        row("prefill, one 512-token prompt (`braid bench-engine`)", f"{f(pre)} tok/s", "≥ 500 tok/s", pre >= 500)
    sc, lsc = braid["scaling"], llama["scaling"]
    if sc:
        for c, goal in TARGETS.items():
            a = group(sc, f"c={c}")
            if not a:
                continue
            la = group(lsc, f"c={c}") if lsc else None
            ref, where = (la["throughput_tok_s"], "same run") if la else (LLAMA_REF[c][0], "issue's figure")
            ratio = a["throughput_tok_s"] / ref
            row(f"serving, {c} stream{'s' if c > 1 else ''}: braid / llama.cpp ({where}, {f(ref)} tok/s)", f"{f(a['throughput_tok_s'])} tok/s = {ratio:.2f}×", f"≥ {goal}×", ratio >= goal)
            if c == 16:
                row("serving, 16 streams", f"{f(a['throughput_tok_s'])} tok/s", "≥ 400 tok/s", a["throughput_tok_s"] >= 400)
            if c == 32:
                ttft = a["ttft_ms"]["p50"]
                row("serving, 32 streams: TTFT p50 (`--max-num-seqs 32`)", f"{f(ttft, 0)} ms", "≤ 1,000 ms", ttft <= 1000)
    it = braid["interference"]
    if it:
        d, l = group(it, "decoder"), group(it, "long")
        row("interference: decoders' worst gap", f"{f(d['worst_gap_ms'], 0)} ms", "≤ 250 ms", d["worst_gap_ms"] <= 250)
        row("interference: decoders' ITL p99", f"{f(d['itl_ms']['p99'])} ms", "≤ 150 ms", d["itl_ms"]["p99"] <= 150)
        row("interference: long prompts' TTFT p50", f"{f(l['ttft_ms']['p50'] / 1e3, 2)} s", "≤ 4.3 s (llama.cpp default)", l["ttft_ms"]["p50"] <= 4300)
    if nochunk:
        d = group(nochunk, "decoder")
        row("interference with `--no-chunked-prefill`: the stalls show", f"worst gap {f(d['worst_gap_ms'], 0)} ms, {d['stalls']} gaps > 250 ms", "stalls", d["stalls"] > 0)
    pc = braid["prefix-cache"]
    speedup = ((pc or {}).get("prefix_cache") or {}).get("warm_speedup")
    if speedup is not None:
        length = pc.get("params", {}).get("prompt_tokens", "?")
        row(f"prefix cache: a repeated {length}-token prompt's TTFT p50, cold ÷ warm", f"{speedup:.1f}×", "≥ 5×", speedup >= 5)
    if rows:
        p("## Targets (issues \"Measure and win\" and \"Never stall\"), this run\n")
        p("| target | measured | goal | met |")
        p("|---|---|---|---|")
        for r in rows:
            p(r)
        p("")

if __name__ == "__main__":
    main(Path(sys.argv[1]))
