"""Every way a request ends is counted once in /metrics, whoever decided it: the scheduler (a
stop token, `max_tokens`) or the server (a stop string, `--request-timeout-secs`); a client
that leaves is not counted as a success.

Each case reads /metrics before and after one request and checks that
`braid_request_success_total` moved by one under the reason the client was given, that the
e2e-latency and generation-token histograms each gained one observation, and that the tokens
observed are the tokens the client was told it got (`usage.completion_tokens`)."""

import json
import time

import pytest
import requests

from conftest import Server, complete

SUCCESS = 'braid_request_success_total{finished_reason="%s"}'
E2E = "braid_e2e_request_latency_seconds_count"
GENERATED = "braid_request_generation_tokens_count"
GENERATED_SUM = "braid_request_generation_tokens_sum"


@pytest.fixture(scope="module")
def server():
    """This module's own server: the session's is shared with other test files, whose requests
    can still be finishing when a case here reads its counters before and after."""
    s = Server()
    yield s
    assert s.stop() == 0, s.log_text()


def counters(server) -> dict[str, float]:
    m = server.metrics()
    keys = [SUCCESS % "stop", SUCCESS % "length", E2E, GENERATED, GENERATED_SUM]
    return {k: m.get(k, 0.0) for k in keys}


def counters_after(server, requests_ended: float, timeout: float = 30.0) -> dict[str, float]:
    """The counters once `requests_ended` requests have been observed ending. A request the
    server ends (a stop string, the deadline) is answered before the engine hears of it, so
    its count can land just after the client has its answer."""
    deadline = time.time() + timeout
    while True:
        c = counters(server)
        if c[E2E] >= requests_ended or time.time() > deadline:
            return c
        time.sleep(0.05)


def assert_counted_once(before: dict, server, reason: str, completion_tokens: int):
    after = counters_after(server, before[E2E] + 1)
    moved = {k: after[k] - before[k] for k in before}
    other = "length" if reason == "stop" else "stop"
    assert moved == {
        SUCCESS % reason: 1,
        SUCCESS % other: 0,
        E2E: 1,
        GENERATED: 1,
        GENERATED_SUM: completion_tokens,
    }, moved


def chat(url: str, **body) -> dict:
    r = requests.post(url + "/v1/chat/completions", json=body, timeout=300)
    assert r.status_code == 200, r.text
    return r.json()


def test_a_stop_string_is_counted_once(server):
    before = counters(server)
    r = complete(server.url, prompt="Once upon a time, there was a little", max_tokens=8, temperature=0, stop="med Em")
    assert r["choices"][0]["finish_reason"] == "stop" and r["choices"][0]["text"] == " girl na"
    assert_counted_once(before, server, "stop", r["usage"]["completion_tokens"])


def test_a_streamed_stop_string_is_counted_once(server):
    before = counters(server)
    body = {"prompt": "Once upon a time, there was a little", "max_tokens": 8, "temperature": 0, "stop": "med Em",
            "stream": True, "stream_options": {"include_usage": True}}
    finish, usage = None, None
    with requests.post(server.url + "/v1/completions", json=body, stream=True, timeout=300) as r:
        assert r.status_code == 200, r.text
        for line in r.iter_lines():
            if not line.startswith(b"data: ") or line == b"data: [DONE]":
                continue
            chunk = json.loads(line[6:])
            for choice in chunk.get("choices", []):
                finish = choice.get("finish_reason") or finish
            usage = chunk.get("usage") or usage
    assert finish == "stop"
    assert_counted_once(before, server, "stop", usage["completion_tokens"])


def test_a_stop_token_is_counted_once(server):
    before = counters(server)
    r = chat(server.url, messages=[{"role": "user", "content": "What is the capital of Germany?"}], temperature=0, max_tokens=60)
    assert r["choices"][0]["finish_reason"] == "stop", r
    assert r["usage"]["completion_tokens"] < 60
    assert_counted_once(before, server, "stop", r["usage"]["completion_tokens"])


def test_max_tokens_is_counted_once(server):
    before = counters(server)
    r = complete(server.url, prompt="The moon is", max_tokens=5, temperature=0, ignore_eos=True)
    assert r["choices"][0]["finish_reason"] == "length" and r["usage"]["completion_tokens"] == 5
    assert_counted_once(before, server, "length", 5)


def test_the_deadline_is_counted_once(make_server):
    s = make_server("--request-timeout-secs", "1")
    # The engine times its cost model after the server is ready, and reads no request until
    # it is done: a first answer with its one token says it is, and leaves the deadline to the
    # request below. On a slow CPU the timing outlasts the second allowed, and the warm-up
    # requests that meet the deadline first are counted too, so the count starts once they are.
    warmups = 0
    while True:
        warmups += 1
        if complete(s.url, prompt="The moon is", max_tokens=1)["usage"]["completion_tokens"] == 1:
            break
        assert warmups < 60, "no answer within the deadline in 60 tries"
    before = counters_after(s, warmups)
    assert before[E2E] == warmups, before
    # No CPU writes the 8,000 tokens asked for within the one second allowed.
    r = complete(s.url, prompt="The moon is", max_tokens=8000, temperature=0, ignore_eos=True)
    assert r["choices"][0]["finish_reason"] == "length"
    assert r["usage"]["completion_tokens"] < 8000
    assert_counted_once(before, s, "length", r["usage"]["completion_tokens"])
    assert "request-timeout-secs" in s.log_all()


def test_a_client_that_leaves_is_not_counted(server):
    before = counters(server)
    body = {"prompt": "The moon is", "max_tokens": 4000, "temperature": 0, "ignore_eos": True, "stream": True}
    with requests.post(server.url + "/v1/completions", json=body, stream=True, timeout=300) as r:
        assert r.status_code == 200
        next(r.iter_lines())  # the first token came; then the client goes
    server.wait_idle("the departed client's sequence")
    assert counters(server) == before
    assert 'finish_reason="cancelled" status=499' in server.log_all()
