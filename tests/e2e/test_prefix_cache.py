"""Prefix caching on the real model: a request that shares a 1,000-token prefix with an earlier
one is not read again (first token >= 5x sooner), answers exactly what it answers without the
cache, and the hit counter says so."""

import json
import time

import requests

PREFIX = (
    "You are a careful assistant for a library. The library opens at nine and closes at six. "
    "Members may borrow up to five books for three weeks; reference books stay in the building. "
    "Late returns cost ten cents a day. The reading room is quiet, the children's corner is not. "
) * 18
QUESTIONS = ["\nQ: When does the library close?\nA:", "\nQ: How many books may I borrow?\nA:"]


def first_token_and_text(url: str, prompt: str, max_tokens: int = 24) -> tuple[float, str]:
    """Seconds to the first streamed text, and the whole greedy text."""
    body = {"prompt": prompt, "max_tokens": max_tokens, "temperature": 0, "stream": True}
    t0 = time.monotonic()
    first, text = None, ""
    with requests.post(url + "/v1/completions", json=body, stream=True, timeout=120) as r:
        assert r.status_code == 200, r.text
        for line in r.iter_lines():
            if not line.startswith(b"data: ") or line == b"data: [DONE]":
                continue
            for choice in json.loads(line[6:]).get("choices", []):
                if choice.get("text"):
                    first = first if first is not None else time.monotonic() - t0
                    text += choice["text"]
    assert first is not None, "no text streamed"
    return first, text


def test_a_shared_prefix_is_read_once(make_server):
    cached = make_server()
    plain = make_server("--no-prefix-cache")
    n = requests.post(cached.url + "/tokenize", json={"prompt": PREFIX}, timeout=10).json()["count"]
    assert n >= 1000, n

    cold, first_answer = first_token_and_text(cached.url, PREFIX + QUESTIONS[0])
    before = cached.metrics()
    warm, answer = first_token_and_text(cached.url, PREFIX + QUESTIONS[1])
    after = cached.metrics()
    hits = after["braid_prefix_cache_hits_total"] - before["braid_prefix_cache_hits_total"]
    queries = after["braid_prefix_cache_queries_total"] - before["braid_prefix_cache_queries_total"]
    print(f"prefix {n} tokens: first token {cold * 1e3:.0f} ms cold, {warm * 1e3:.0f} ms cached "
          f"({cold / warm:.1f}x); {hits:.0f} of {queries:.0f} tokens hit")
    assert hits >= n - 16 - 8, "all full blocks of the shared prefix are reused"
    assert queries >= n
    assert cold >= 5 * warm, f"cold {cold:.3f}s vs cached {warm:.3f}s"

    # Exactly the greedy answer the server gives without the cache.
    _, reference = first_token_and_text(plain.url, PREFIX + QUESTIONS[1])
    assert answer == reference
    assert len(answer) > 10
    assert plain.metrics()["braid_prefix_cache_hits_total"] == 0
    # And the first request, repeated, hits everything but its last block and answers the same.
    again_ttft, again = first_token_and_text(cached.url, PREFIX + QUESTIONS[0])
    assert again == first_answer
    assert cold >= 5 * again_ttft
