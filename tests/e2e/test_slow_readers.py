"""Clients that stop reading cannot hold the server's places.

A streamed answer whose client never reads fills the socket's buffers; after
`--write-timeout-secs` without being able to write, the server closes the connection, which
cancels the request and frees its sequence and KV blocks. `/debug/steps` streams forever, so
its viewers are bounded."""

import json
import socket
import time

import pytest
import requests

from conftest import Server

VIEWERS = 16  # MAX_STEP_VIEWERS in crates/braid-server/src/state.rs


@pytest.fixture(scope="module")
def server():
    s = Server("--write-timeout-secs", "2")
    yield s
    assert s.stop() == 0, s.log_text()


def running(server) -> float:
    return server.metrics()["braid_num_requests_running"]


def test_a_stream_nobody_reads_is_dropped_and_its_sequence_freed(server):
    # About 30 MB of events (16 choices of 2,000 tokens, 20 alternatives each), far more than
    # the socket buffers hold, from a client that reads nothing and offers a small window.
    body = json.dumps({"prompt": "Once upon a time", "max_tokens": 2000, "n": 16, "ignore_eos": True,
                       "logprobs": 20, "stream": True}).encode()
    head = (f"POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
            f"Content-Length: {len(body)}\r\n\r\n").encode()
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    sock.connect(("127.0.0.1", server.port))
    try:
        sock.sendall(head + body)
        deadline = time.monotonic() + 30
        while running(server) == 0:
            assert time.monotonic() < deadline, "the request never started"
            time.sleep(0.1)
        started = time.monotonic()
        # Generating all 32,000 tokens takes far longer than filling the buffers plus 2 s.
        while running(server) > 0:
            assert time.monotonic() - started < 120, "the unread stream still holds its sequence"
            time.sleep(0.2)
        log = server.log_all()
        assert "read nothing for 2s (--write-timeout-secs)" in log, log[-5000:]
        assert 'finish_reason="cancelled"' in log, log[-5000:]
        assert server.metrics()["braid_kv_cache_usage_perc"] == 0
    finally:
        sock.close()
    # Everybody else is served as before.
    r = requests.post(server.url + "/v1/completions", json={"prompt": "The sky is", "max_tokens": 3}, timeout=60)
    assert r.status_code == 200, r.text


def test_step_viewers_are_bounded(server):
    viewers = []
    try:
        for _ in range(VIEWERS):
            r = requests.get(server.url + "/debug/steps", stream=True, timeout=10)
            assert r.status_code == 200, r.text
            viewers.append(r)
        r = requests.get(server.url + "/debug/steps", stream=True, timeout=10)
        assert r.status_code == 429, r.text
        err = r.json()["error"]
        assert err["code"] == "server_at_capacity" and f"{VIEWERS} viewers" in err["message"], err
        viewers.pop().close()
        deadline = time.monotonic() + 30
        while True:
            # The closed viewer's place comes back when the server finds it gone, which it
            # does on writing the next steps to it: a short request makes some.
            requests.post(server.url + "/v1/completions", json={"prompt": "Hi", "max_tokens": 4}, timeout=60)
            r = requests.get(server.url + "/debug/steps", stream=True, timeout=10)
            if r.status_code == 200:
                viewers.append(r)
                break
            r.close()
            assert time.monotonic() < deadline, "a closed viewer's place never came back"
            time.sleep(0.2)
    finally:
        for v in viewers:
            v.close()


def test_a_flood_of_large_bodies_waits_a_bounded_time_for_preparation(make_server):
    """Tokenizing and templating run on two preparation slots; a request waits at most
    --prep-wait-secs for one, then gets a 429, so a flood of megabyte prompts costs its
    senders instead of queueing everyone behind it without end."""
    import concurrent.futures as cf
    import random

    s = make_server("--prep-wait-secs", "1")
    rng = random.Random(5)
    words = ["house", "river", "quick", "mountain", "lazy", "dog", "alpha"]
    text = " ".join(rng.choice(words) for _ in range(150_000))[:900_000]  # ~0.3 s to tokenize

    def tokenize():
        return requests.post(s.url + "/tokenize", json={"prompt": text}, timeout=120)

    with cf.ThreadPoolExecutor(32) as pool:
        answers = list(pool.map(lambda _: tokenize(), range(32)))
    codes = [r.status_code for r in answers]
    assert set(codes) <= {200, 429}, codes
    refused = [r for r in answers if r.status_code == 429]
    assert refused, f"32 bodies of 0.9 MB never waited over a second: {codes}"
    err = refused[0].json()["error"]
    assert err["code"] == "server_at_capacity" and "--prep-wait-secs" in err["message"], err
    assert refused[0].headers.get("retry-after") == "1"
    print(f"{len(refused)} of 32 refused after waiting a second")
    # After the flood everyone is prepared again at once.
    r = requests.post(s.url + "/v1/completions", json={"prompt": "The sky is", "max_tokens": 2}, timeout=60)
    assert r.status_code == 200, r.text
