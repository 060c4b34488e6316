"""braid behind vLLM's router (`vllm-router` 0.1.17 from PyPI, started by
`scripts/replicas.sh --router vllm-router`): every request the router re-serializes is served;
`cache_aware` routes on the ids braid's render endpoint gives, and `kv_aware` on the KV-cache
events braid publishes (`--kv-events`), so groups of requests sharing a long system prompt land
where that prompt is cached (measured in the replicas' own prefix-cache counters, against the
ideal and against `round_robin`); `power_of_two` reads /get_load; and a
replica sent SIGTERM under load loses no request: it reports unhealthy at once, finishes what
it holds, and the router sends new work to the other."""

import concurrent.futures as cf
import os
import signal
import time

import pytest
import requests

from test_replicas import Replicas, replicas  # noqa: F401 (the fixture)

# Two replicas and the router on two cores, and prefix-cache counts that other tests' requests
# would not disturb but whose timing they would: no other test runs meanwhile.
pytestmark = pytest.mark.alone

TOPICS = ["bread", "rivers", "clocks"]
QUESTIONS = ["Summarize it.", "Give one example.", "What is the main point?", "Say it in five words."]
BLOCK = 16


def system_prompt(topic: str) -> str:
    """About 600 words about `topic`, different for each topic from the first token on."""
    sentence = f"This note about {topic} is part of a long reference text that the assistant must keep in mind. "
    return f"Reference on {topic}. " + sentence * 32


def chat(url: str, topic: str, question: str, max_tokens: int = 4) -> requests.Response:
    body = {"messages": [{"role": "system", "content": system_prompt(topic)}, {"role": "user", "content": question}],
            "max_tokens": max_tokens, "temperature": 0}
    return requests.post(url + "/v1/chat/completions", json=body, timeout=120)


def shared_prefix_tokens(worker: str, topic: str) -> int:
    """The tokens two questions of a group share, in whole KV blocks: what a cache hit can reuse."""
    ids = [requests.post(worker + "/tokenize", json={"messages": [
        {"role": "system", "content": system_prompt(topic)}, {"role": "user", "content": q}]}, timeout=30).json()["tokens"]
        for q in QUESTIONS[:2]]
    common = next(i for i, (a, b) in enumerate(zip(*ids)) if a != b)
    return common // BLOCK * BLOCK


def prefix_hits(r: Replicas) -> float:
    return sum(r.gauge(i, "braid_prefix_cache_hits_total") for i in range(len(r.replica_ports)))


def router_metric(r: Replicas, prefix: str) -> float:
    text = requests.get(f"http://127.0.0.1:{r.router_metrics_port}/metrics", timeout=10).text
    return sum(float(line.rsplit(" ", 1)[1]) for line in text.splitlines() if line.startswith(prefix))


def run_groups(r: Replicas) -> float:
    """Each group's questions, interleaved across groups and sent one at a time; the prefix-cache
    hits (tokens) they earned on the replicas."""
    before = prefix_hits(r)
    for question in QUESTIONS:
        for topic in TOPICS:
            resp = chat(r.url, topic, question)
            assert resp.status_code == 200, resp.text
    return prefix_hits(r) - before


def test_cache_and_kv_aware_route_groups_to_their_cached_prompt(replicas):
    results = {}
    for policy in ["round_robin", "cache_aware", "kv_aware"]:
        r = replicas(2, router=("--router", "vllm-router", "--policy", policy))
        worker = f"http://127.0.0.1:{r.replica_ports[0]}"
        ideal = sum(shared_prefix_tokens(worker, t) * (len(QUESTIONS) - 1) for t in TOPICS)
        results[policy] = run_groups(r)
        if policy != "round_robin":
            assert router_metric(r, 'vllm_router_kv_routing_inputs_total{transport="http",result="render"}') > 0, \
                "the router read braid's render endpoint"
        if policy == "kv_aware":
            # The router found each replica's events (/kv_event_sources), consumed them, and
            # matched requests against the blocks they said were stored.
            log = (r.dir / "router.log").read_text()
            assert "kv_index subscriber" in log, log[-3000:]
            assert router_metric(r, 'vllm_router_kv_placement_lookups_total{result="hit"}') > 0, \
                requests.get(f"http://127.0.0.1:{r.router_metrics_port}/metrics", timeout=10).text[-3000:]
        assert r.stop() == 0
    print(f"prefix-cache hits (tokens): {results}, ideal {ideal}")
    assert results["cache_aware"] >= 0.7 * ideal, (results, ideal)
    assert results["cache_aware"] >= 1.3 * results["round_robin"], (results, ideal)
    assert results["kv_aware"] >= 0.7 * ideal, (results, ideal)


def test_power_of_two_serves_concurrent_streams_on_both_replicas(replicas):
    r = replicas(2, router=("--router", "vllm-router", "--policy", "power_of_two"))

    def one(i: int) -> int:
        body = {"prompt": f"Story number {i}: once upon a time", "max_tokens": 24, "temperature": 0,
                "ignore_eos": True, "stream": True}
        with requests.post(r.url + "/v1/completions", json=body, stream=True, timeout=(5, 120)) as resp:
            assert resp.status_code == 200, resp.text
            lines = [l for l in resp.iter_lines() if l.startswith(b"data: ")]
        assert lines[-1] == b"data: [DONE]"
        return len(lines) - 1

    with cf.ThreadPoolExecutor(8) as pool:
        assert list(pool.map(one, range(16))) == [24] * 16
    served = [r.generated(i) for i in range(2)]
    assert sum(served) == 16 * 24 and min(served) > 0, served
    # The router passes the client's request id on: the replica that served it logs it.
    resp = requests.post(r.url + "/v1/completions", headers={"x-request-id": "via-router-7"},
                         json={"prompt": "Hello", "max_tokens": 2}, timeout=60)
    assert resp.status_code == 200, resp.text
    logs = "".join((r.dir / f"braid-{i}.log").read_text() for i in range(2))
    assert 'request_id="via-router-7"' in logs


def test_a_replica_sent_sigterm_under_load_loses_no_request(replicas):
    r = replicas(2, router=("--router", "vllm-router", "--policy", "round_robin"))
    outcomes: list[int] = []
    sent = 0

    def client(c: int) -> list[int]:
        statuses = []
        for i in range(10):
            resp = requests.post(r.url + "/v1/completions", timeout=120, json={
                "prompt": f"Client {c}, request {i}: the weather today", "max_tokens": 24, "temperature": 0,
                "ignore_eos": True})
            statuses.append(resp.status_code)
        return statuses

    with cf.ThreadPoolExecutor(4) as pool:
        futures = [pool.submit(client, c) for c in range(4)]
        # Once both replicas are busy, replica 0 is told to stop.
        deadline = time.time() + 60
        while time.time() < deadline and min(r.generated(i) for i in range(2)) < 24:
            time.sleep(0.05)
        os.kill(r.replica_pid(0), signal.SIGTERM)
        for f in futures:
            statuses = f.result(timeout=300)
            sent += len(statuses)
            outcomes.extend(statuses)
    assert sent == 40 and outcomes == [200] * 40, outcomes
    log = (r.dir / "braid-0.log").read_text()
    assert "drain" in log.lower(), log[-2000:]
