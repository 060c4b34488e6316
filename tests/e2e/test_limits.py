"""Connection cap (--max-connections) and CORS (--cors-origin) on the real server."""

import json
import socket
import time

import requests

from conftest import read_until_closed

ORIGIN = "https://app.example.com"
# Long, so that a refusal at the cap is told apart from a connection held until this timeout
# by a wide margin rather than by how fast a busy machine answers.
HEADER_READ_TIMEOUT = 30


def open_idle(port: int) -> socket.socket:
    """A keep-alive connection that has been served once and now sits idle."""
    sock = socket.create_connection(("127.0.0.1", port), timeout=10)
    sock.sendall(b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n")
    data = b""
    while b'"ok"}' not in data:
        chunk = sock.recv(4096)
        assert chunk, data
        data += chunk
    assert data.startswith(b"HTTP/1.1 200"), data
    return sock


def exchange(port: int, raw: bytes, timeout: float = 10.0) -> tuple[bytes, float]:
    started = time.time()
    with socket.create_connection(("127.0.0.1", port), timeout=timeout) as sock:
        try:
            sock.sendall(raw)
        except OSError:
            pass
        out = read_until_closed(sock)
    return out, time.time() - started


def test_past_max_connections_new_ones_get_503_then_are_closed(make_server):
    s = make_server("--max-connections", "4", "--header-read-timeout-secs", str(HEADER_READ_TIMEOUT))
    held = [open_idle(s.port) for _ in range(4)]
    body = json.dumps({"prompt": "The moon is", "max_tokens": 2}).encode()
    request = b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nConnection: close\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s" % (len(body), body)
    answer, secs = exchange(s.port, request, timeout=HEADER_READ_TIMEOUT)
    assert answer.startswith(b"HTTP/1.1 503"), answer
    assert secs < HEADER_READ_TIMEOUT / 2, f"answered at once, not at the header-read timeout: {secs:.1f}s"
    head, _, payload = answer.partition(b"\r\n\r\n")
    assert b"retry-after: 1" in head.lower() and b"connection: close" in head.lower(), head
    err = json.loads(payload)["error"]
    assert err["code"] == "too_many_connections" and "--max-connections" in err["message"]
    # Past twice the cap, a connection is closed without an answer, at once.
    time.sleep(0.2)  # the refused connection above gives its place back
    waiting = [socket.create_connection(("127.0.0.1", s.port), timeout=10) for _ in range(4)]
    time.sleep(0.3)
    answer, secs = exchange(s.port, request, timeout=HEADER_READ_TIMEOUT)
    assert answer == b"", answer
    assert secs < HEADER_READ_TIMEOUT / 2, f"closed at once, not at the header-read timeout: {secs:.1f}s"
    for sock in waiting:
        sock.close()
    # A closed connection frees its place.
    held.pop().close()
    deadline = time.time() + 10
    while True:
        answer, _ = exchange(s.port, request, timeout=60)
        if answer.startswith(b"HTTP/1.1 200") or time.time() > deadline:
            break
        time.sleep(0.2)
    assert answer.startswith(b"HTTP/1.1 200"), answer
    for sock in held:
        sock.close()
    time.sleep(0.3)
    with requests.Session() as session:  # all four places free again
        for _ in range(4):
            assert session.get(s.url + "/health", timeout=10).status_code == 200
    log = s.log_all()
    assert "refusing new connections with 503" in log and "(--max-connections)" in log


def test_cors_is_off_by_default(server):
    r = requests.post(server.url + "/v1/completions", json={"prompt": "a", "max_tokens": 1}, headers={"Origin": ORIGIN}, timeout=60)
    assert r.status_code == 200 and "Access-Control-Allow-Origin" not in r.headers
    r = requests.options(server.url + "/v1/completions", headers={"Origin": ORIGIN, "Access-Control-Request-Method": "POST"}, timeout=60)
    assert "Access-Control-Allow-Origin" not in r.headers


def test_cors_origin_allows_that_origin_only(make_server):
    key = "sk-cors-test"
    s = make_server("--cors-origin", ORIGIN, "--cors-origin", "http://localhost:3000", "--api-key", key)
    preflight = {"Origin": ORIGIN, "Access-Control-Request-Method": "POST", "Access-Control-Request-Headers": "authorization,content-type"}
    r = requests.options(s.url + "/v1/chat/completions", headers=preflight, timeout=60)
    assert r.status_code == 200, r.text
    assert r.headers["Access-Control-Allow-Origin"] == ORIGIN
    assert "authorization" in r.headers["Access-Control-Allow-Headers"].lower()
    assert "POST" in r.headers["Access-Control-Allow-Methods"]
    body = {"messages": [{"role": "user", "content": "Hi"}], "max_tokens": 2}
    r = requests.post(s.url + "/v1/chat/completions", json=body, headers={"Origin": ORIGIN, "Authorization": f"Bearer {key}"}, timeout=60)
    assert r.status_code == 200 and r.headers["Access-Control-Allow-Origin"] == ORIGIN
    # Errors carry the header too, so the page can read why.
    r = requests.post(s.url + "/v1/chat/completions", json=body, headers={"Origin": ORIGIN}, timeout=60)
    assert r.status_code == 401 and r.headers["Access-Control-Allow-Origin"] == ORIGIN
    # Another origin gets no CORS headers (the browser blocks it).
    r = requests.post(s.url + "/v1/chat/completions", json=body, headers={"Origin": "https://evil.example.com", "Authorization": f"Bearer {key}"}, timeout=60)
    assert "Access-Control-Allow-Origin" not in r.headers
    r = requests.options(s.url + "/v1/chat/completions", headers={**preflight, "Origin": "https://evil.example.com"}, timeout=60)
    assert "Access-Control-Allow-Origin" not in r.headers


def test_one_client_address_holds_at_most_its_share(make_server):
    s = make_server("--max-connections-per-ip", "2")
    held = [open_idle(s.port) for _ in range(2)]
    time.sleep(0.3)
    r = requests.get(s.url + "/health", timeout=10)
    assert r.status_code == 503, r.text
    err = r.json()["error"]
    assert err["code"] == "too_many_connections" and "--max-connections-per-ip" in err["message"], err
    held.pop().close()
    deadline = time.time() + 10
    while requests.get(s.url + "/health", timeout=10).status_code != 200:
        assert time.time() < deadline, "a closed connection's place never came back"
        time.sleep(0.2)
    for sock in held:
        sock.close()
