"""What routers send a worker, on the real model: the bodies vllm-router 0.1.17 re-serializes
(every vLLM/SGLang field at its default) answer as the plain request does; the fields braid can
honor change the answer (`no_stop_trim`, `include_stop_str_in_output`,
`skip_special_tokens: false`, `continue_final_message`, `add_special_tokens: false`); others at
a non-default value are refused naming the field; the render endpoints give the ids the request
is read as; and the worker endpoints routers poll answer in the shape they parse."""

import pytest
import requests

from conftest import complete

# As vllm-router 0.1.17 writes a completions and a chat body it received without these fields.
COMPLETION_DEFAULTS = {"stream": False, "echo": False, "no_stop_trim": False, "ignore_eos": False,
                       "skip_special_tokens": True, "return_hidden_states": False}
CHAT_DEFAULTS = {"stream": False, "logprobs": False, "no_stop_trim": False, "ignore_eos": False,
                 "continue_final_message": False, "skip_special_tokens": True, "separate_reasoning": True,
                 "stream_reasoning": True, "return_hidden_states": False, "include_reasoning": True}
QUESTION = [{"role": "user", "content": "What is the capital of Germany?"}]


def post(url: str, path: str, **body) -> requests.Response:
    return requests.post(url + path, json=body, timeout=300)


def chat(url: str, **body) -> dict:
    r = post(url, "/v1/chat/completions", **body)
    assert r.status_code == 200, r.text
    return r.json()


def test_router_bodies_answer_as_plain_requests(server):
    plain = complete(server.url, prompt="The moon is", max_tokens=8, temperature=0)
    routed = complete(server.url, prompt="The moon is", max_tokens=8, temperature=0, **COMPLETION_DEFAULTS)
    assert routed["choices"][0]["text"] == plain["choices"][0]["text"]
    plain = chat(server.url, messages=QUESTION, max_tokens=12, temperature=0)
    # Floats as the router widens them from f32.
    routed = chat(server.url, messages=QUESTION, max_tokens=12, temperature=0.0, top_p=1.0, **CHAT_DEFAULTS)
    assert routed["choices"][0]["message"] == plain["choices"][0]["message"]


@pytest.mark.parametrize("field", ["no_stop_trim", "include_stop_str_in_output"])
def test_a_kept_stop_string_ends_the_text(server, field):
    body = dict(prompt="Once upon a time, there was a little", max_tokens=8, temperature=0, stop="med Em")
    assert complete(server.url, **body)["choices"][0]["text"] == " girl na"
    kept = complete(server.url, **body, **{field: True})["choices"][0]
    assert (kept["text"], kept["finish_reason"]) == (" girl named Em", "stop")


def test_special_tokens_stay_in_the_text_when_asked(server):
    # Past its end-of-turn token (ignore_eos), the model writes more turns with their marks.
    body = dict(messages=QUESTION, max_tokens=30, temperature=0, ignore_eos=True)
    skipped = chat(server.url, **body)["choices"][0]["message"]["content"]
    kept = chat(server.url, **body, skip_special_tokens=False)["choices"][0]["message"]["content"]
    assert "<|im_end|>" in kept and "<|im_end|>" not in skipped
    assert kept.replace("<|im_end|>", "").replace("<|im_start|>", "") == skipped


def test_continue_final_message_continues_the_assistants_text(server):
    messages = QUESTION + [{"role": "assistant", "content": "The capital of Germany is"}]
    body = dict(messages=messages, max_tokens=6, temperature=0, continue_final_message=True,
                add_generation_prompt=False)
    answer = chat(server.url, **body)["choices"][0]["message"]["content"]
    assert answer.startswith(" Berlin"), answer
    rendered = post(server.url, "/v1/chat/completions/render", **body).json()
    assert rendered["prompt"].endswith("<|im_start|>assistant\nThe capital of Germany is")
    tokenized = post(server.url, "/tokenize", messages=messages, continue_final_message=True,
                     add_generation_prompt=False).json()
    assert tokenized["tokens"] == rendered["token_ids"]
    # Not asked for alone, it drops the turn opener; both asked for at once is a contradiction,
    # and a last message that is not the assistant's cannot be continued.
    alone = chat(server.url, messages=messages, max_tokens=6, temperature=0, continue_final_message=True)
    assert alone["choices"][0]["message"]["content"] == answer
    r = post(server.url, "/v1/chat/completions", messages=messages, continue_final_message=True,
             add_generation_prompt=True)
    assert r.status_code == 400 and r.json()["error"]["param"] == "continue_final_message", r.text
    r = post(server.url, "/v1/chat/completions", messages=QUESTION, continue_final_message=True,
             add_generation_prompt=False)
    assert r.status_code == 400 and "continue_final_message" in r.json()["error"]["message"], r.text


def test_add_special_tokens_false_reads_the_prompt_without_bos(server):
    with_bos = post(server.url, "/v1/completions/render", prompt="The moon is").json()[0]["token_ids"]
    without = post(server.url, "/v1/completions/render", prompt="The moon is", add_special_tokens=False).json()[0]
    assert without["token_ids"] == post(server.url, "/tokenize", prompt="The moon is", add_special_tokens=False).json()["tokens"]
    assert len(with_bos) >= len(without["token_ids"])


@pytest.mark.parametrize(
    "path, extra, param",
    [
        ("/v1/completions", {"return_hidden_states": True}, "return_hidden_states"),
        ("/v1/completions", {"min_tokens": 4}, "min_tokens"),
        ("/v1/completions", {"cache_salt": "tenant-a"}, "cache_salt"),
        ("/v1/completions", {"priority": 3}, "priority"),
        ("/v1/chat/completions", {"separate_reasoning": False}, "separate_reasoning"),
        ("/v1/chat/completions", {"include_reasoning": False}, "include_reasoning"),
        ("/v1/chat/completions", {"echo": True}, "echo"),
        ("/v1/chat/completions/render", {"return_hidden_states": True}, "return_hidden_states"),
    ],
)
def test_a_value_braid_cannot_honor_is_refused_by_name(server, path, extra, param):
    base = {"prompt": "The moon is", "max_tokens": 2} if path == "/v1/completions" else {"messages": QUESTION, "max_tokens": 2}
    if path == "/tokenize":
        base = {"messages": QUESTION}
    r = post(server.url, path, **base, **extra)
    assert r.status_code == 400, r.text
    error = r.json()["error"]
    assert (error["param"], error["code"]) == (param, "unsupported_parameter"), error
    assert "default" in error["message"], error


def test_render_gives_the_ids_the_request_is_read_as(server):
    chat_body = dict(messages=QUESTION, max_tokens=5, temperature=0, **CHAT_DEFAULTS)
    rendered = post(server.url, "/v1/chat/completions/render", **chat_body).json()
    assert rendered["features"] is None and rendered["request_id"].startswith("chatcmpl-")
    assert rendered["token_ids"] == post(server.url, "/tokenize", messages=QUESTION).json()["tokens"]
    answer = chat(server.url, **chat_body)
    assert answer["usage"]["prompt_tokens"] == len(rendered["token_ids"])
    assert rendered["sampling_params"]["max_tokens"] == 5
    items = post(server.url, "/v1/completions/render", prompt=["The moon is", "Bread is"], **COMPLETION_DEFAULTS).json()
    assert [i["token_ids"] for i in items] == [post(server.url, "/tokenize", prompt=p).json()["tokens"]
                                               for p in ["The moon is", "Bread is"]]
    # A request the endpoint would refuse is refused here, with the same error.
    bad = dict(prompt="x", max_tokens=2, temperature=7)
    assert post(server.url, "/v1/completions/render", **bad).json() == post(server.url, "/v1/completions", **bad).json()


def test_worker_endpoints_answer_as_routers_read_them(server):
    load = requests.get(server.url + "/get_load", timeout=10).json()
    assert isinstance(load["load"], int) and load["load"] >= 0
    info = requests.get(server.url + "/get_server_info", timeout=10).json()
    assert info["kv_block_size"] == 16 and info["model_id"]
    model = requests.get(server.url + "/get_model_info", timeout=10).json()
    assert model["is_generation"] is True
    assert requests.get(server.url + "/health_generate", timeout=60).json() == {"status": "ok"}
    # Without --kv-events there is nothing to subscribe to, and the router is told so.
    sources = requests.get(server.url + "/kv_event_sources", timeout=10)
    assert sources.status_code == 404 and sources.json()["error"]["code"] == "kv_events_off"


def test_flush_cache_drops_what_nobody_holds(make_server):
    s = make_server()
    prompt = "The history of bread goes back thousands of years. " * 8
    complete(s.url, prompt=prompt, max_tokens=1)
    s.wait_idle("the first request")
    flushed = requests.post(s.url + "/flush_cache", timeout=30).json()
    assert flushed["status"] == "ok" and flushed["dropped_blocks"] >= 4, flushed
    hits = s.metrics().get("braid_prefix_cache_hits_total", 0.0)
    complete(s.url, prompt=prompt, max_tokens=1)
    assert s.metrics().get("braid_prefix_cache_hits_total", 0.0) == hits, "nothing left to hit after a flush"
    complete(s.url, prompt=prompt, max_tokens=1)
    assert s.metrics()["braid_prefix_cache_hits_total"] > hits, "the cache fills again"


def test_metrics_compat_vllm_exports_the_names_routers_read(make_server):
    s = make_server("--metrics-compat", "vllm")
    complete(s.url, prompt="The history of bread goes back thousands of years. " * 4, max_tokens=1)
    complete(s.url, prompt="The history of bread goes back thousands of years. " * 4, max_tokens=1)
    m = s.metrics()
    for braid, vllm in [("braid_num_requests_waiting", "vllm:num_requests_waiting"),
                        ("braid_num_requests_running", "vllm:num_requests_running"),
                        ("braid_kv_cache_usage_perc", "vllm:kv_cache_usage_perc"),
                        ("braid_kv_cache_usage_perc", "vllm:gpu_cache_usage_perc"),
                        ("braid_prefix_cache_queries_total", "vllm:prefix_cache_queries_total"),
                        ("braid_prefix_cache_hits_total", "vllm:prefix_cache_hits_total")]:
        assert m[vllm] == m[braid], (vllm, m.get(vllm), m[braid])
    assert m["vllm:prefix_cache_hits_total"] > 0
    text = requests.get(s.url + "/metrics", timeout=10).text
    assert 'vllm:cache_config_info{block_size="16"' in text


def test_x_request_id_is_returned_and_names_the_requests_log_lines(make_server):
    s = make_server()
    r = requests.post(s.url + "/v1/completions", headers={"x-request-id": "trace-me-42"},
                      json={"prompt": "The moon is", "max_tokens": 2}, timeout=60)
    assert r.status_code == 200 and r.headers["x-request-id"] == "trace-me-42"
    made = requests.post(s.url + "/v1/completions", json={"prompt": "x", "max_tokens": 2, "temperature": 9}, timeout=60)
    assert made.status_code == 400 and len(made.headers["x-request-id"]) == 36  # a UUID
    s.wait_idle("the requests")
    lines = [l for l in s.log_all().splitlines() if "trace-me-42" in l]
    assert any("request finished" in l for l in lines), lines
    assert any(made.headers["x-request-id"] in l and "request rejected" in l
               for l in s.log_all().splitlines())
