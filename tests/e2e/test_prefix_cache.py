"""Prefix caching on the real model: a request that shares a 1,000-token prefix with an earlier
one reuses every full block of it (the hit counter says so) and answers exactly what it answers
without the cache. How much sooner its first token comes is the benchmark's to measure
(`braid bench`), not a test's: on a slow or busy machine a timing bound fails for no fault."""

import requests

from conftest import complete

PREFIX = (
    "You are a careful assistant for a library. The library opens at nine and closes at six. "
    "Members may borrow up to five books for three weeks; reference books stay in the building. "
    "Late returns cost ten cents a day. The reading room is quiet, the children's corner is not. "
) * 18
QUESTIONS = ["\nQ: When does the library close?\nA:", "\nQ: How many books may I borrow?\nA:"]
BLOCK_SIZE = 16  # braid serve's default --block-size


def tokens(url: str, prompt: str) -> list[int]:
    r = requests.post(url + "/tokenize", json={"prompt": prompt}, timeout=10)
    assert r.status_code == 200, r.text
    return r.json()["tokens"]


def full_blocks(n_tokens: int) -> int:
    """Tokens in the full blocks among the first `n_tokens`."""
    return n_tokens // BLOCK_SIZE * BLOCK_SIZE


def shared_len(a: list[int], b: list[int]) -> int:
    return next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), min(len(a), len(b)))


def greedy(url: str, prompt: str) -> str:
    return complete(url, prompt=prompt, max_tokens=24, temperature=0)["choices"][0]["text"]


def counters(server) -> tuple[float, float]:
    m = server.metrics()
    return m["braid_prefix_cache_hits_total"], m["braid_prefix_cache_queries_total"]


def test_a_shared_prefix_is_read_once(server, make_server):
    # The session's server (the cache is on by default): what earlier tests left in its cache
    # can only add hits, and the checks below are lower bounds on hits.
    cached = server
    plain = make_server("--no-prefix-cache")
    assert len(tokens(cached.url, PREFIX)) >= 1000
    first, second = (tokens(cached.url, PREFIX + q) for q in QUESTIONS)
    shared = shared_len(first, second)

    first_answer = greedy(cached.url, PREFIX + QUESTIONS[0])
    hits, queries = counters(cached)
    answer = greedy(cached.url, PREFIX + QUESTIONS[1])
    hits_after, queries_after = counters(cached)
    print(f"{len(second)} prompt tokens, {shared} shared: {hits_after - hits:.0f} hit")
    assert hits_after - hits >= full_blocks(shared), "every full block of the shared prefix is reused"
    assert queries_after - queries >= len(second)

    # Exactly the greedy answers the server gives without the cache.
    assert answer == greedy(plain.url, PREFIX + QUESTIONS[1])
    assert first_answer == greedy(plain.url, PREFIX + QUESTIONS[0])
    assert len(answer) > 10
    assert plain.metrics()["braid_prefix_cache_hits_total"] == 0

    # The first request, repeated, reuses every full block of its prompt (all but the last token's
    # block when the prompt fills its last block exactly) and answers the same.
    hits, _ = counters(cached)
    assert greedy(cached.url, PREFIX + QUESTIONS[0]) == first_answer
    hits_after, _ = counters(cached)
    assert hits_after - hits >= full_blocks(len(first) - 1)
