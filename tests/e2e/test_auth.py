"""API keys end to end: each route class without a key, with a wrong key and with a right
one; /metrics open or protected; the key in the query string on the dashboard's feed only;
keys from BRAID_API_KEY; and no key ever in the log."""

import requests

KEY_A = "sk-braid-test-aaaaaaaaaaaaaaaa"
KEY_B = "sk-braid-test-bbbbbbbbbbbbbbbb"

# (method, path, JSON body): one per route class that needs the key.
PROTECTED = [
    ("POST", "/v1/completions", {"prompt": "The moon is", "max_tokens": 2}),
    ("POST", "/v1/chat/completions", {"messages": [{"role": "user", "content": "Hi"}], "max_tokens": 2}),
    ("GET", "/v1/models", None),
    ("GET", "/v1/models/SmolLM2-135M-Instruct.Q4_1", None),
    ("POST", "/tokenize", {"prompt": "hello"}),
    ("POST", "/detokenize", {"tokens": [1, 2]}),
    ("POST", "/v1/chat/completions/render", {"messages": [{"role": "user", "content": "Hi"}]}),
    ("POST", "/v1/completions/render", {"prompt": "Hi"}),
    ("GET", "/get_server_info", None),
    ("GET", "/get_model_info", None),
    ("POST", "/flush_cache", None),
]
# vllm-router polls /get_load without a key.
OPEN = ["/health", "/get_load", "/dashboard", "/openapi.json"]


def call(url, method, path, body, key=None, stream=False):
    headers = {"Authorization": f"Bearer {key}"} if key else {}
    return requests.request(method, url + path, json=body, headers=headers, timeout=60, stream=stream)


def assert_401(r):
    assert r.status_code == 401, (r.status_code, r.text)
    err = r.json()["error"]
    assert err["code"] == "invalid_api_key" and err["type"] == "invalid_request_error" and err["message"]
    assert r.headers["WWW-Authenticate"] == "Bearer"


def first_event(r) -> bytes:
    for line in r.iter_lines():
        if line.startswith(b"data: "):
            return line
    return b""


def test_every_route_class_with_no_wrong_and_right_keys(make_server):
    s = make_server("--api-key", KEY_A, "--api-key", KEY_B, env={"RUST_LOG": "debug"})
    for method, path, body in PROTECTED:
        assert_401(call(s.url, method, path, body))
        assert_401(call(s.url, method, path, body, key="sk-wrong"))
        assert_401(call(s.url, method, path, body, key=KEY_A[:-1]))
        assert_401(call(s.url, method, path, body, key=KEY_A + "x"))
        for key in (KEY_A, KEY_B):
            r = call(s.url, method, path, body, key=key)
            assert r.status_code == 200, (path, r.status_code, r.text)
    # An unknown route does not tell whether it exists without the key.
    assert_401(call(s.url, "GET", "/v1/nope", None))
    assert call(s.url, "GET", "/v1/nope", None, key=KEY_A).status_code == 404
    for path in OPEN:
        assert requests.get(s.url + path, timeout=30).status_code == 200, path
    assert requests.get(s.url + "/metrics", timeout=30).status_code == 200
    # The dashboard's feed: a header or ?api_key= (EventSource cannot send headers).
    assert_401(requests.get(s.url + "/debug/steps", timeout=30))
    assert_401(requests.get(s.url + "/debug/steps?api_key=sk-wrong", timeout=30))
    for kw in ({"headers": {"Authorization": f"Bearer {KEY_A}"}}, {"params": {"api_key": KEY_B}}):
        with requests.get(s.url + "/debug/steps", stream=True, timeout=30, **kw) as r:
            assert r.status_code == 200 and r.headers["content-type"].startswith("text/event-stream")
            assert call(s.url, *PROTECTED[0], key=KEY_A).status_code == 200
            assert first_event(r).startswith(b"data: {")
    # ... but only there: the query string does not open the API.
    assert_401(requests.post(s.url + "/v1/completions", params={"api_key": KEY_A}, json={"prompt": "a"}, timeout=30))
    # The streaming API with the key.
    with call(s.url, "POST", "/v1/completions", {"prompt": "Hi", "max_tokens": 3, "stream": True}, key=KEY_A, stream=True) as r:
        assert r.status_code == 200 and first_event(r).startswith(b"data: {")
    log = s.log_all()
    assert "request rejected" in log and "401" in log
    for secret in (KEY_A, KEY_B, KEY_A[:-1]):
        assert secret not in log, "a key reached the log"


def test_protect_metrics_and_keys_from_the_environment(make_server):
    s = make_server("--protect-metrics", env={"BRAID_API_KEY": f"{KEY_A},{KEY_B}"})
    assert_401(requests.get(s.url + "/metrics", timeout=30))
    assert_401(call(s.url, "GET", "/metrics", None, key="sk-wrong"))
    r = call(s.url, "GET", "/metrics", None, key=KEY_B)
    assert r.status_code == 200 and "braid_num_requests_running" in r.text
    assert requests.get(s.url + "/health", timeout=30).status_code == 200
    assert_401(call(s.url, *PROTECTED[0]))
    assert call(s.url, *PROTECTED[0], key=KEY_A).status_code == 200


def test_without_keys_everything_is_open(server):
    for method, path, body in PROTECTED:
        assert call(server.url, method, path, body).status_code == 200, path
    assert call(server.url, *PROTECTED[0], key="anything").status_code == 200


def test_bad_key_flags_are_refused_at_start(tmp_path):
    import subprocess

    from conftest import BIN, MODEL

    for args, env, needle in [
        (["--protect-metrics"], {}, "--protect-metrics needs an API key"),
        (["--api-key", "two words"], {}, "printable ASCII"),
        (["--cors-origin", "https://example.com/"], {}, "--cors-origin"),
        # Set but empty (a template that expanded to nothing): refused, not an open server.
        ([], {"BRAID_API_KEY": ""}, "unset BRAID_API_KEY"),
        ([], {"BRAID_API_KEY": "a,,b"}, "must not be empty"),
    ]:
        out = subprocess.run([BIN, "serve", "--port", "0", "--model", MODEL, *args], capture_output=True, text=True, timeout=60, env={"PATH": "/usr/bin:/bin", **env})
        assert out.returncode != 0, out
        assert needle in out.stderr, out.stderr
    # --help shows the flags but never the key in the environment.
    out = subprocess.run([BIN, "serve", "--help"], capture_output=True, text=True, timeout=60, env={"PATH": "/usr/bin:/bin", "BRAID_API_KEY": KEY_A})
    for flag in ("--api-key", "--protect-metrics", "--cors-origin", "--max-connections", "--max-prompt-tokens"):
        assert flag in out.stdout, flag
    assert KEY_A not in out.stdout
