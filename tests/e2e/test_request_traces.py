"""--otlp-traces-endpoint: every generation request's trace reaches an OTLP/HTTP collector (a
small JSON receiver here), as a `request` span with `queue`, `prompt` and `decode` inside it,
carrying the token counts and the request id, and a child of the caller's W3C `traceparent`
(what a router that traces sends), so the hop is one trace."""

import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
import requests

TRACE_ID = "4bf92f3577b34da6a3ce929d0e0e4736"
CALLER_SPAN = "00f067aa0ba902b7"


class Collector:
    """Accepts OTLP/HTTP JSON trace exports on 127.0.0.1 and keeps their spans."""

    def __init__(self):
        self.spans: list[dict] = []
        self.paths: list[str] = []
        collector = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):
                body = self.rfile.read(int(self.headers["Content-Length"]))
                collector.paths.append(self.path)
                for rs in json.loads(body).get("resourceSpans", []):
                    for ss in rs.get("scopeSpans", []):
                        collector.spans.extend(ss.get("spans", []))
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.end_headers()
                self.wfile.write(b"{}")

            def log_message(self, *args):
                pass

        self.http = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.http.server_address[1]}/v1/traces"
        threading.Thread(target=self.http.serve_forever, daemon=True).start()

    def wait_for(self, names: set[str], timeout: float = 20.0) -> list[dict]:
        deadline = time.time() + timeout
        while time.time() < deadline:
            if names <= {s["name"] for s in self.spans}:
                return self.spans
            time.sleep(0.1)
        raise AssertionError(f"spans seen: {[s['name'] for s in self.spans]}")


@pytest.fixture
def collector():
    c = Collector()
    yield c
    c.http.shutdown()


def attributes(span: dict) -> dict:
    out = {}
    for a in span.get("attributes", []):
        value = a["value"]
        out[a["key"]] = next(iter(value.values()))
    return out


def test_a_request_is_one_trace_under_the_callers_span(make_server, collector):
    s = make_server("--otlp-traces-endpoint", collector.url)
    r = requests.post(s.url + "/v1/completions", timeout=60, json={
        "prompt": "The history of bread", "max_tokens": 6, "temperature": 0, "ignore_eos": True},
        headers={"traceparent": f"00-{TRACE_ID}-{CALLER_SPAN}-01", "x-request-id": "traced-1"})
    assert r.status_code == 200, r.text
    spans = collector.wait_for({"request", "queue", "prompt", "decode"})
    assert collector.paths[0] == "/v1/traces"
    by_name = {sp["name"]: sp for sp in spans}
    request = by_name["request"]
    assert request["traceId"].lower() == TRACE_ID
    assert request["parentSpanId"].lower() == CALLER_SPAN
    attrs = attributes(request)
    assert attrs["braid.request_id"] == "traced-1" and attrs["braid.endpoint"] == "completions"
    assert int(attrs["braid.completion_tokens"]) == 6 and attrs["braid.finish_reason"] == "length"
    assert int(attrs["braid.prompt_tokens"]) == r.json()["usage"]["prompt_tokens"]
    for name in ("queue", "prompt", "decode"):
        child = by_name[name]
        assert child["traceId"] == request["traceId"] and child["parentSpanId"] == request["spanId"], name
    assert int(attributes(by_name["decode"])["braid.completion_tokens"]) == 6
    start = lambda sp: int(sp["startTimeUnixNano"])
    end = lambda sp: int(sp["endTimeUnixNano"])
    assert start(request) <= start(by_name["queue"]) <= end(by_name["queue"]) <= start(by_name["prompt"])
    assert end(by_name["prompt"]) <= start(by_name["decode"]) <= end(by_name["decode"]) <= end(request)
    assert abs(time.time() - end(request) / 1e9) < 60, "wall-clock times"


def test_without_a_traceparent_a_request_starts_its_own_trace(make_server, collector):
    s = make_server("--otlp-traces-endpoint", collector.url)
    r = requests.post(s.url + "/v1/chat/completions", timeout=60, json={
        "messages": [{"role": "user", "content": "Hi"}], "max_tokens": 3})
    assert r.status_code == 200, r.text
    request = next(sp for sp in collector.wait_for({"request"}) if sp["name"] == "request")
    assert request["traceId"] and request["traceId"].lower() != TRACE_ID
    assert not request.get("parentSpanId")
    assert attributes(request)["braid.endpoint"] == "chat"
