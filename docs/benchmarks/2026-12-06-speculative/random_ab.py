"""Random sampled text, speculation on (port 8091) against off (8092), request by request.

    python random_ab.py PAIRS [CONCURRENCY] [SEED]

Each pair sends the same CONCURRENCY (default 1) random-token prompts, sampled at temperature 1
with a seed per prompt, 128 tokens each with `ignore_eos`, to one server and then the other
(alternating which goes first), and takes the ratio on/off of the mean decode rate (tokens after
the first over the time since the first). Pairing request by request cancels most of a noisy
machine's drift, which rounds of whole benchmark runs do not. Give each run its own SEED: a
prompt and seed sent before come back word for word, and braid drafts them from its recent
answers.
"""

import json
import random
import statistics
import sys
import time
import urllib.request
from concurrent.futures import ThreadPoolExecutor


def decode_rate(port: int, prompt: list[int], seed: int) -> float:
    body = {"prompt": prompt, "max_tokens": 128, "temperature": 1.0, "seed": seed, "ignore_eos": True, "stream": True}
    req = urllib.request.Request(
        f"http://127.0.0.1:{port}/v1/completions", json.dumps(body).encode(), {"Content-Type": "application/json"}
    )
    times = []
    with urllib.request.urlopen(req, timeout=300) as r:
        for line in r:
            if line.startswith(b"data: {"):
                times.append(time.time())
    return (len(times) - 1) / (times[-1] - times[0])


def main():
    pairs = int(sys.argv[1])
    c = int(sys.argv[2]) if len(sys.argv) > 2 else 1
    seed = int(sys.argv[3]) if len(sys.argv) > 3 else 1
    rng = random.Random(seed)
    ratios = []
    with ThreadPoolExecutor(c) as pool:
        for i in range(pairs):
            prompts = [[rng.randrange(1000, 40000) for _ in range(24)] for _ in range(c)]
            order = [8091, 8092] if i % 2 == 0 else [8092, 8091]
            rate = {}
            for port in order:
                rates = list(pool.map(lambda k: decode_rate(port, prompts[k], seed * 100_000 + i * c + k), range(c)))
                rate[port] = statistics.mean(rates)
            ratios.append(rate[8091] / rate[8092])
    q = statistics.quantiles(ratios, n=4)
    print(f"c={c}, {pairs} pairs: on/off decode rate median {statistics.median(ratios):.3f} (quartiles {q[0]:.3f}–{q[2]:.3f})")


if __name__ == "__main__":
    main()
