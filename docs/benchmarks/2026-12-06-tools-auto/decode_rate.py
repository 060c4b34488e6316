"""Decode rate of a streamed chat answer with tools offered in `auto` (whose grammar follows
the text unmasked until a call opens) against the same request with `tool_choice: none` and a
system prompt of about the same length, alternating, on a running braid.

    python decode_rate.py [URL] [ROUNDS]   (default http://127.0.0.1:8080, 7)

Prints each side's median tokens/s: completion tokens after the first, over the time from
the first content event to the last."""

import json
import statistics
import sys
import time

import requests

URL = sys.argv[1] if len(sys.argv) > 1 else "http://127.0.0.1:8080"
ROUNDS = int(sys.argv[2]) if len(sys.argv) > 2 else 7
WEATHER = {"type": "function", "function": {"name": "get_weather", "description": "The current weather in a city",
           "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}


def rate(choice: str) -> tuple[float, int]:
    system = [] if choice == "auto" else [{"role": "system", "content": "You are a helpful assistant. " * 25}]
    body = dict(messages=system + [{"role": "user", "content": "Write a long story about a dragon."}], tools=[WEATHER],
                tool_choice=choice, max_tokens=200, temperature=0, ignore_eos=True, stream=True,
                stream_options={"include_usage": True})
    first = last = None
    usage = {}
    with requests.post(URL + "/v1/chat/completions", json=body, stream=True, timeout=120) as r:
        for line in r.iter_lines():
            if not line.startswith(b"data: {"):
                continue
            d = json.loads(line[6:])
            if d.get("usage"):
                usage = d["usage"]
            elif d["choices"] and d["choices"][0]["delta"].get("content"):
                last = time.time()
                first = first or last
    return (usage["completion_tokens"] - 1) / (last - first), usage["prompt_tokens"]


runs = {"auto": [], "none": []}
for _ in range(ROUNDS):
    for choice in runs:
        tok_s, prompt = rate(choice)
        runs[choice].append(tok_s)
for choice, rates in runs.items():
    print(f"{choice}: median {statistics.median(rates):.1f} tok/s over {ROUNDS} ({', '.join(f'{r:.0f}' for r in rates)})")
