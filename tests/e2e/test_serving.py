"""Continuous batching from the outside: concurrency, stop strings, errors, backpressure,
cancellation, preemption, load, shutdown."""

import concurrent.futures as cf
import json
import os
import shutil
import signal
import subprocess
import threading
import time

import requests

from conftest import PROMPTS, Server, complete, stream_text



def test_sixteen_concurrent_streams_equal_their_solo_runs(server):
    alone = [stream_text(server.url, prompt=p, max_tokens=32, temperature=0)[0] for p in PROMPTS]
    with cf.ThreadPoolExecutor(16) as pool:
        together = list(pool.map(lambda p: stream_text(server.url, prompt=p, max_tokens=32, temperature=0)[0], PROMPTS))
    for p, a, t in zip(PROMPTS, alone, together):
        assert a == t, f"{p!r}: alone {a!r} vs batched {t!r}"
        assert len(a) > 20


def test_stop_string_spanning_two_tokens(server):
    prompt = "Once upon a time, there was a little"
    full = complete(server.url, prompt=prompt, max_tokens=8, temperature=0)["choices"][0]["text"]
    assert full.startswith(" girl named Emma")
    # " named" and " Emma" are separate tokens: "med Em" spans both.
    r = complete(server.url, prompt=prompt, max_tokens=8, temperature=0, stop=["zzz", "med Em"])
    assert r["choices"][0]["text"] == " girl na"
    assert r["choices"][0]["finish_reason"] == "stop"
    text, finish = stream_text(server.url, prompt=prompt, max_tokens=8, temperature=0, stop="med Em")
    assert (text, finish) == (" girl na", "stop")
    r = complete(server.url, prompt=prompt, max_tokens=3, temperature=0)
    assert r["choices"][0]["finish_reason"] == "length" and r["usage"]["completion_tokens"] == 3


def assert_error(r: requests.Response, status: int):
    assert r.status_code == status, (r.status_code, r.text)
    err = r.json()["error"]
    assert isinstance(err["message"], str) and err["message"]
    assert {"message", "type", "param", "code"} <= set(err)


def test_malformed_requests_get_their_status_and_the_server_carries_on(server):
    url = server.url + "/v1/completions"
    post = lambda **kw: requests.post(url, timeout=30, **kw)
    assert_error(post(data="{not json", headers={"content-type": "application/json"}), 400)
    assert_error(post(json={"prompt": 5}), 400)
    assert_error(post(json={"prompt": "hi", "max_tokens": "ten"}), 400)
    assert_error(post(json={"prompt": "hi", "max_tokens": -1}), 400)
    assert_error(post(json={"prompt": "hi", "temperature": -0.5}), 400)
    assert_error(post(json={"prompt": "hi", "model": "no-such-model"}), 404)
    long = "hello " * 9000
    r = post(json={"prompt": long, "max_tokens": 16})
    assert_error(r, 400)
    assert "8192" in r.json()["error"]["message"]
    assert_error(requests.post(server.url + "/v1/chat/completions", json={"messages": "hi"}, timeout=30), 400)
    assert_error(requests.get(server.url + "/v1/nope", timeout=30), 404)
    r = complete(server.url, prompt="The moon is", max_tokens=4, temperature=0)
    assert r["usage"]["completion_tokens"] == 4


def test_full_queue_answers_429_with_retry_after(make_server):
    s = make_server("--max-waiting", "2", "--max-num-seqs", "2")
    statuses = []
    lock = threading.Lock()

    def one(i):
        r = requests.post(s.url + "/v1/completions", json={"prompt": PROMPTS[i % 16], "max_tokens": 24, "temperature": 0}, timeout=300)
        with lock:
            statuses.append(r.status_code)
        if r.status_code == 429:
            assert r.headers.get("Retry-After"), r.headers
            assert r.json()["error"]["message"]
        else:
            assert r.status_code == 200, r.text
            assert r.json()["usage"]["completion_tokens"] == 24

    with cf.ThreadPoolExecutor(24) as pool:
        list(pool.map(one, range(24)))
    assert 429 in statuses and 200 in statuses, statuses
    assert set(statuses) <= {200, 429}


def wait_for_idle(s: Server, timeout: float = 30.0) -> dict:
    deadline = time.time() + timeout
    while True:
        m = s.metrics()
        if (m.get("braid_num_requests_running") == 0 and m.get("braid_kv_cache_usage_perc") == 0) or time.time() > deadline:
            return m
        time.sleep(0.2)


def test_clients_that_leave_mid_stream_or_before_the_answer_free_everything(server):
    def leave_early(i):
        with requests.post(
            server.url + "/v1/completions",
            json={"prompt": PROMPTS[i % 16], "max_tokens": 500, "stream": True, "ignore_eos": True},
            stream=True,
            timeout=120,
        ) as r:
            assert r.status_code == 200
            for n, _ in enumerate(r.iter_lines()):
                if n >= 3 + i % 5:
                    break

    def leave_before_the_answer(i):
        import socket

        body = json.dumps({"prompt": PROMPTS[i % 16], "max_tokens": 2000, "ignore_eos": True}).encode()
        with socket.create_connection(("127.0.0.1", server.port)) as sock:
            head = f"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n"
            sock.sendall(head.encode() + body)
            time.sleep(0.3 + (i % 4) * 0.2)

    with cf.ThreadPoolExecutor(10) as pool:
        list(pool.map(leave_early, range(50)))
        list(pool.map(leave_before_the_answer, range(10)))
    m = wait_for_idle(server)
    assert m["braid_num_requests_running"] == 0 and m["braid_kv_cache_usage_perc"] == 0, m
    assert complete(server.url, prompt="The moon is", max_tokens=4)["usage"]["completion_tokens"] == 4


def test_a_kv_pool_too_small_preempts_and_loses_nothing(make_server):
    # 23 KB of KV per token: 20 MB hold ~900 tokens, far less than 16 × 210.
    s = make_server("--kv-cache-mb", "20")
    body = lambda p: {"prompt": p, "max_tokens": 200, "temperature": 0, "ignore_eos": True}
    alone = [complete(s.url, **body(p))["choices"][0]["text"] for p in PROMPTS[:4]]
    with cf.ThreadPoolExecutor(16) as pool:
        together = list(pool.map(lambda p: complete(s.url, **body(p))["choices"][0]["text"], PROMPTS))
    assert together[:4] == alone
    for p, t in zip(PROMPTS[4:], together[4:]):
        assert t == complete(s.url, **body(p))["choices"][0]["text"], p
    m = s.metrics()
    assert m["braid_num_preemptions_total"] > 0, m


def test_oha_sixteen_connections_for_twenty_seconds_without_errors(server):
    oha = shutil.which("oha") or os.path.expanduser("~/.cargo/bin/oha")
    body = json.dumps({"prompt": "The moon is", "max_tokens": 16, "temperature": 0.7})
    out = subprocess.run(
        [oha, "-z", "20s", "-c", "16", "--wait-ongoing-requests-after-deadline", "--no-tui", "--output-format", "json", "-m", "POST", "-H", "content-type: application/json", "-d", body, server.url + "/v1/completions"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 0, out.stderr
    report = json.loads(out.stdout)
    statuses = report["statusCodeDistribution"]
    assert set(statuses) == {"200"}, statuses
    assert report["summary"]["successRate"] == 1.0
    assert not report.get("errorDistribution"), report["errorDistribution"]


def test_ready_only_once_the_cost_model_is_calibrated(server):
    # A request sent when /health first says ok must not wait behind the start-up calibration:
    # the "ready" line, like /health's 200, comes after it.
    log = server.log_all()
    calibrated, ready = log.find("cost model calibrated"), log.find("ready in")
    assert 0 <= calibrated < ready, log[-3000:]


def test_curl_streams_sse(server):
    out = subprocess.run(
        ["curl", "-sN", server.url + "/v1/completions", "-H", "content-type: application/json", "-d", json.dumps({"prompt": "The moon is", "max_tokens": 5, "stream": True, "ignore_eos": True})],
        capture_output=True,
        text=True,
        timeout=60,
    )
    events = [line for line in out.stdout.split("\n\n") if line.strip()]
    assert all(e.startswith("data: ") for e in events), out.stdout
    assert events[-1] == "data: [DONE]"
    assert len(events) >= 6


def test_sigterm_drains_running_requests_then_exits_zero(make_server):
    s = make_server("--drain-timeout-secs", "60")
    result = {"text": "", "finish": None}
    streaming = threading.Event()

    def long_request():
        body = {"prompt": "The moon is", "max_tokens": 1000, "ignore_eos": True, "stream": True}
        with requests.post(s.url + "/v1/completions", json=body, stream=True, timeout=300) as r:
            for line in r.iter_lines():
                if not line.startswith(b"data: ") or line == b"data: [DONE]":
                    continue
                for choice in json.loads(line[6:]).get("choices", []):
                    result["text"] += choice.get("text") or ""
                    result["finish"] = choice.get("finish_reason") or result["finish"]
                streaming.set()

    t = threading.Thread(target=long_request)
    t.start()
    # Signal only once the request is surely running, however slow the machine is.
    assert streaming.wait(60), "the request never started streaming"
    s.proc.send_signal(signal.SIGTERM)
    time.sleep(0.3)
    r = requests.get(s.url + "/health", timeout=5)
    assert r.status_code == 503
    assert_error(requests.post(s.url + "/v1/completions", json={"prompt": "hi"}, timeout=5), 503)
    t.join(300)
    assert result["finish"] == "length", result
    assert s.proc.wait(60) == 0
