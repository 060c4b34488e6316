"""Faults from the outside: clients that vanish at any moment, and more clients than the
queue holds. Nothing is lost (running and KV go back to 0, normal requests still get the
right answer) and nobody gets a 5xx or waits forever."""

import concurrent.futures as cf
import json
import random
import signal
import socket
import threading
import time

import requests

from conftest import PROMPTS, Server


# Where a client may vanish, from before its first byte to deep into its stream.
MOMENTS = [
    "connect_only",  # opens the connection, sends nothing
    "mid_headers",  # part of the request line and headers
    "mid_body",  # headers and half the JSON body (the prompt half read)
    "after_request",  # the whole request, then gone before any answer
    "after_headers",  # reads the response headers only
    "mid_stream",  # reads a random number of events
    "mid_stream_slow",  # reads some events, waits, leaves
]


def cut(port: int, i: int, rng: random.Random, stream: bool = True) -> str:
    moment = MOMENTS[i % len(MOMENTS)] if stream else "after_request"
    prompt = PROMPTS[i % len(PROMPTS)] + " " + "word " * rng.randrange(0, 200)
    body = json.dumps({"prompt": prompt, "max_tokens": 200, "stream": stream, "ignore_eos": True, "temperature": 0.8}).encode()
    if i % 5 == 0:  # some chat requests too
        body = json.dumps({"messages": [{"role": "user", "content": prompt}], "max_tokens": 200, "stream": stream, "ignore_eos": True}).encode()
        path = "/v1/chat/completions"
    else:
        path = "/v1/completions"
    head = f"POST {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n".encode()
    with socket.create_connection(("127.0.0.1", port), timeout=60) as sock:
        if moment == "connect_only":
            time.sleep(rng.random() * 0.05)
        elif moment == "mid_headers":
            sock.sendall(head[: rng.randrange(1, len(head) - 1)])
            time.sleep(rng.random() * 0.05)
        elif moment == "mid_body":
            sock.sendall(head + body[: rng.randrange(1, len(body))])
            time.sleep(rng.random() * 0.1)
        elif moment == "after_request":
            sock.sendall(head + body)
            time.sleep(rng.random() * (0.3 if stream else 1.5))
        else:
            sock.sendall(head + body)
            f = sock.makefile("rb")
            status = f.readline()
            assert status.startswith(b"HTTP/1.1 200"), status
            while f.readline() not in (b"\r\n", b""):
                pass
            if moment != "after_headers":
                for _ in range(rng.randrange(1, 40)):
                    if not f.readline():
                        break
                if moment == "mid_stream_slow":
                    time.sleep(rng.random() * 0.5)
        # Closing with unread data makes the kernel send RST: the rudest way to leave.
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\x00\x00\x00\x00\x00\x00\x00")
    return moment


def wait_for_idle(s: Server, timeout: float = 60.0) -> dict:
    deadline = time.time() + timeout
    while True:
        m = s.metrics()
        idle = m.get("braid_num_requests_running") == 0 and m.get("braid_num_requests_waiting") == 0 and m.get("braid_kv_cache_usage_perc") == 0
        if idle or time.time() > deadline:
            return m
        time.sleep(0.2)


def greedy(url: str, prompt: str, n: int = 16) -> str:
    r = requests.post(url + "/v1/completions", json={"prompt": prompt, "max_tokens": n, "temperature": 0, "ignore_eos": True}, timeout=300)
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["usage"]["completion_tokens"] == n, body
    return body["choices"][0]["text"]


def test_disconnect_storm_of_500_streams_frees_everything(make_server):
    """500 streams cut at moments spread over MOMENTS (seeded), 32 at a time."""
    s = make_server("--max-waiting", "1024")
    expected = {p: greedy(s.url, p) for p in PROMPTS}
    rng = random.Random(6)
    seeds = [rng.randrange(1 << 30) for _ in range(500)]
    started = time.time()
    with cf.ThreadPoolExecutor(32) as pool:
        moments = list(pool.map(lambda i: cut(s.port, i, random.Random(seeds[i])), range(500)))
        # And non-streaming clients that leave while their answer is being generated.
        list(pool.map(lambda i: cut(s.port, i, random.Random(i), stream=False), range(50)))
    storm_secs = time.time() - started
    assert len(moments) == 500 and set(moments) == set(MOMENTS)
    m = wait_for_idle(s)
    assert m["braid_num_requests_running"] == 0, m
    assert m["braid_num_requests_waiting"] == 0, m
    assert m["braid_kv_cache_usage_perc"] == 0, m
    assert not any(k.startswith('braid_request_errors_total{status="5') for k in m), m
    with cf.ThreadPoolExecutor(16) as pool:
        after = list(pool.map(lambda p: greedy(s.url, p), PROMPTS))
    assert after == [expected[p] for p in PROMPTS]
    assert s.proc.poll() is None
    print(f"storm: 500 cut streams and 50 cut non-streaming requests in {storm_secs:.1f}s")


def test_overload_burst_of_four_times_the_queue_gets_only_429s_and_correct_answers(make_server):
    queue = 8
    s = make_server("--max-waiting", str(queue), "--max-num-seqs", "4")
    prompts = [PROMPTS[i % len(PROMPTS)] for i in range(4 * queue)]
    expected = {p: greedy(s.url, p, 24) for p in set(prompts)}
    results = []
    lock = threading.Lock()
    barrier = threading.Barrier(len(prompts))

    def one(i):
        p = prompts[i]
        stream = i % 2 == 0
        barrier.wait(30)
        body = {"prompt": p, "max_tokens": 24, "temperature": 0, "ignore_eos": True, "stream": stream}
        try:
            r = requests.post(s.url + "/v1/completions", json=body, timeout=120, stream=stream)
        except requests.RequestException as e:  # a timeout or reset would be a failure
            with lock:
                results.append(("error", p, str(e)))
            return
        if r.status_code == 429:
            assert r.headers.get("Retry-After") == "1", r.headers
            assert r.json()["error"]["code"] == "server_at_capacity"
            text = None
        elif stream:
            text = ""
            for line in r.iter_lines():
                if line.startswith(b"data: {"):
                    text += "".join(c.get("text") or "" for c in json.loads(line[6:])["choices"])
        else:
            text = r.json()["choices"][0]["text"] if r.status_code == 200 else r.text
        with lock:
            results.append((r.status_code, p, text))

    with cf.ThreadPoolExecutor(len(prompts)) as pool:
        list(pool.map(one, range(len(prompts))))
    statuses = [st for st, _, _ in results]
    assert set(statuses) <= {200, 429}, results
    assert statuses.count(200) >= queue and statuses.count(429) >= queue, statuses
    for status, p, text in results:
        if status == 200:
            assert text == expected[p], (p, text, expected[p])
    m = wait_for_idle(s)
    assert m["braid_num_requests_running"] == 0 and m["braid_kv_cache_usage_perc"] == 0, m


def eight_tokens_in_the_background(url: str) -> tuple[threading.Thread, dict]:
    """A started thread asking for an 8-token completion, and where its response lands ("r")."""
    answer = {}

    def ask():
        answer["r"] = requests.post(url + "/v1/completions", json={"prompt": "The sky is", "max_tokens": 8, "ignore_eos": True}, timeout=120)

    t = threading.Thread(target=ask)
    t.start()
    return t, answer


def test_a_stuck_step_turns_health_to_503_until_it_returns(make_server):
    """A step that does not return (injected: the engine loop's 3rd step sleeps 6 s) makes
    /health answer 503 `engine_stalled` once it has run past --step-stall-secs, so a probe can
    act on it; when the step returns, health is 200 again and the request still completes."""
    s = make_server("--step-stall-secs", "1", env={"BRAID_FAULT_STALL_STEP": "3:6"})
    t, answer = eight_tokens_in_the_background(s.url)
    seen, deadline = [], time.monotonic() + 60
    while t.is_alive() and time.monotonic() < deadline:
        r = requests.get(s.url + "/health", timeout=5)
        seen.append((r.status_code, r.json()["status"]))
        time.sleep(0.1)
    t.join(60)
    assert (503, "engine_stalled") in seen, seen
    assert requests.get(s.url + "/health", timeout=5).status_code == 200
    assert answer["r"].status_code == 200 and answer["r"].json()["usage"]["completion_tokens"] == 8
    assert "BRAID_FAULT_STALL_STEP: step 3 stalls" in s.log_path.read_text()


def test_sigterm_during_a_requests_first_step_still_drains_it(make_server):
    """The request's first step (injected: it sleeps 8 s, past the 5 s the server gives open
    connections once it stops) has taken it off the waiting queue; a drain that then saw it
    neither waiting nor running stopped the server under it (a CI run lost a stream so). It is
    counted as running before its step starts, and drained."""
    s = make_server("--drain-timeout-secs", "60", env={"BRAID_FAULT_STALL_STEP": "1:8"})
    t, answer = eight_tokens_in_the_background(s.url)
    deadline = time.monotonic() + 60
    while "step 1 stalls" not in s.log_path.read_text():
        assert time.monotonic() < deadline, s.log_path.read_text()
        time.sleep(0.05)
    s.proc.send_signal(signal.SIGTERM)
    t.join(60)
    assert answer["r"].status_code == 200, answer["r"].text
    assert answer["r"].json()["usage"]["completion_tokens"] == 8
    assert s.proc.wait(60) == 0
