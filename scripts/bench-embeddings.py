#!/usr/bin/env python3
"""Embedding throughput, and what embedding load does to streams decoding beside it.

    .venv/bin/python scripts/bench-embeddings.py --url http://127.0.0.1:8080 [--decoders 4]

Sends --texts short texts (8 to 24 words, fixed by --seed) to /v1/embeddings in batches of
--batch from --clients clients at once, and reports texts/s over the whole run and each
batch's latency. Any OpenAI-compatible embedding server answers the same requests, so the
same command measures llama.cpp's `llama-server --embedding` (pass --model to name its
model, --embedding-only when it serves nothing else).

With --decoders N, N streaming chat requests (--decode-tokens each, ignore_eos) start first
and run while the texts are embedded; their inter-token latency is reported from the client's
clock: median, p99, the worst gap and the gaps over --stall-ms. braid sizes each step so
decodes stay under its --itl-target-ms; this is how that holds under bulk embedding.

Prints one JSON object (and a short summary on stderr). Bounded: every request has a
timeout, and the run stops after --max-secs.
"""

import argparse
import json
import random
import statistics
import sys
import threading
import time

import requests

WORDS = (
    "the a of and to in is was for on that with as by at from it this be are or an which "
    "river station market garden engine window letter summer morning doctor city music "
    "paper table country question system answer number story picture family water light "
    "quickly slowly often never always under over between after before during without"
).split()


def texts(n: int, seed: int) -> list[str]:
    rng = random.Random(seed)
    return [" ".join(rng.choice(WORDS) for _ in range(rng.randint(8, 24))) + "." for _ in range(n)]


def percentile(values: list[float], q: float) -> float | None:
    if not values:
        return None
    s = sorted(values)
    k = min(len(s) - 1, max(0, round(q * (len(s) - 1))))
    return s[k]


def embed_batches(url: str, model: str | None, batches: list[list[str]], out: dict, lock, deadline: float):
    while time.time() < deadline:
        with lock:
            if not batches:
                return
            batch = batches.pop()
        body = {"input": batch}
        if model:
            body["model"] = model
        t = time.time()
        r = requests.post(url + "/v1/embeddings", json=body, timeout=max(1.0, deadline - t))
        elapsed = time.time() - t
        with lock:
            if r.status_code == 200 and len(r.json()["data"]) == len(batch):
                out["latencies"].append(elapsed)
                out["texts"] += len(batch)
            else:
                out["errors"].append(f"{r.status_code}: {r.text[:200]}")


def decode(url: str, model: str | None, tokens: int, out: list, errors: list, deadline: float):
    try:
        out.append(stream_times(url, model, tokens, deadline))
    except Exception as e:  # reported, and the run fails
        errors.append(f"decoder: {e}")


def stream_times(url: str, model: str | None, tokens: int, deadline: float) -> list[float]:
    body = {
        "messages": [{"role": "user", "content": "Tell me a long story about a lighthouse keeper."}],
        "max_tokens": tokens,
        "ignore_eos": True,
        "stream": True,
        "temperature": 0,
    }
    if model:
        body["model"] = model
    times = []
    with requests.post(url + "/v1/chat/completions", json=body, stream=True, timeout=max(1.0, deadline - time.time())) as r:
        r.raise_for_status()
        for line in r.iter_lines():
            if line.startswith(b"data: ") and line != b"data: [DONE]":
                times.append(time.time())
            if time.time() > deadline:
                break
    return times


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--url", default="http://127.0.0.1:8080")
    ap.add_argument("--model", help="the embedding model's id (default: the server's)")
    ap.add_argument("--chat-model", help="the generation model's id, for --decoders (default: the server's)")
    ap.add_argument("--texts", type=int, default=1000)
    ap.add_argument("--batch", type=int, default=100)
    ap.add_argument("--clients", type=int, default=4)
    ap.add_argument("--decoders", type=int, default=0)
    ap.add_argument("--decode-tokens", type=int, default=2000)
    ap.add_argument("--stall-ms", type=float, default=250.0)
    ap.add_argument("--warmup", type=int, default=2, help="batches sent (and not counted) first")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--max-secs", type=float, default=600.0)
    a = ap.parse_args()

    deadline = time.time() + a.max_secs
    all_texts = texts(a.texts, a.seed)
    for i in range(a.warmup):
        body = {"input": texts(a.batch, 10_000 + a.seed + i)}
        if a.model:
            body["model"] = a.model
        requests.post(a.url + "/v1/embeddings", json=body, timeout=120).raise_for_status()

    streams: list[list[float]] = []
    decoder_errors: list[str] = []
    decoders = [
        threading.Thread(target=decode, args=(a.url, a.chat_model, a.decode_tokens, streams, decoder_errors, deadline))
        for _ in range(a.decoders)
    ]
    for d in decoders:
        d.start()
    if decoders:
        time.sleep(3.0)  # the streams are decoding before the texts come

    batches = [all_texts[i : i + a.batch] for i in range(0, len(all_texts), a.batch)][::-1]
    out = {"latencies": [], "texts": 0, "errors": []}
    lock = threading.Lock()
    clients = [
        threading.Thread(target=embed_batches, args=(a.url, a.model, batches, out, lock, deadline))
        for _ in range(a.clients)
    ]
    t0 = time.time()
    for c in clients:
        c.start()
    for c in clients:
        c.join()
    wall = time.time() - t0
    window = (t0, t0 + wall)
    for d in decoders:
        d.join()

    # Gaps between tokens that arrived while the texts were being embedded.
    gaps = [
        (b - x) * 1e3
        for times in streams
        for x, b in zip(times, times[1:])
        if window[0] <= b <= window[1]
    ]
    lat = out["latencies"]
    result = {
        "url": a.url,
        "texts": out["texts"],
        "batch": a.batch,
        "clients": a.clients,
        "wall_s": round(wall, 3),
        "texts_per_s": round(out["texts"] / wall, 2) if wall > 0 else None,
        "batch_latency_s": {
            "p50": percentile(lat, 0.5),
            "p90": percentile(lat, 0.9),
            "max": max(lat) if lat else None,
        },
        "errors": (decoder_errors + out["errors"])[:5],
        "error_count": len(decoder_errors) + len(out["errors"]),
    }
    if decoders:
        result["decoders"] = {
            "streams": len(streams),
            "gaps_during_embedding": len(gaps),
            "itl_ms": {
                "p50": percentile(gaps, 0.5),
                "p99": percentile(gaps, 0.99),
                "mean": statistics.fmean(gaps) if gaps else None,
                "max": max(gaps) if gaps else None,
            },
            "stalls_over_ms": a.stall_ms,
            "stalls": sum(g > a.stall_ms for g in gaps),
        }
    print(json.dumps(result, indent=2))
    print(
        f"bench-embeddings: {out['texts']} texts in {wall:.1f} s = {result['texts_per_s']} texts/s"
        + (
            f"; decoders' ITL p50 {result['decoders']['itl_ms']['p50']:.1f} ms, p99 {result['decoders']['itl_ms']['p99']:.1f} ms, "
            f"worst {result['decoders']['itl_ms']['max']:.1f} ms, {result['decoders']['stalls']} gaps over {a.stall_ms:.0f} ms"
            if decoders and gaps
            else ""
        ),
        file=sys.stderr,
    )
    return 0 if result["error_count"] == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
