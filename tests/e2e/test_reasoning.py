"""Reasoning split from the reply: `reasoning_content` on chat (vLLM's field), through the
official `openai` client.

The server runs the default model with a real reasoning template, DeepSeek-R1-Distill-Qwen's
(llama.cpp's copy, in crates/braid-text/tests/data/templates/), whose prompt ends inside an
open `<think>` block when `chat_template_kwargs` sets `enable_thinking`, and closes it
otherwise. SmolLM2 never learnt to close it, so with thinking on, its whole greedy answer is
reasoning; with thinking off, all of it is reply. `chat_template_kwargs` reaches the template
only for variables the template reads."""

import openai
import pytest
import requests

from conftest import ROOT, Server

TEMPLATE = ROOT / "crates" / "braid-text" / "tests" / "data" / "templates" / "deepseek-ai-DeepSeek-R1-Distill-Qwen-32B.jinja"
TIMEOUT = 120  # every request's, in seconds: a bound, never a speed requirement
QUESTION = [{"role": "user", "content": "What is two plus two?"}]
THINKING = {"chat_template_kwargs": {"enable_thinking": True}}


@pytest.fixture(scope="module")
def r1_server():
    s = Server("--chat-template", str(TEMPLATE))
    yield s
    assert s.stop() == 0, s.log_text()


@pytest.fixture(scope="module")
def client(r1_server):
    return openai.OpenAI(base_url=r1_server.url + "/v1", api_key="unused", max_retries=0, timeout=TIMEOUT)


@pytest.fixture(scope="module")
def model(client):
    return client.models.list().data[0].id


def ask(client, model, extra=None, **kw):
    return client.chat.completions.create(model=model, messages=QUESTION, max_tokens=24, temperature=0, extra_body=extra, **kw)


def test_thinking_on_the_answer_is_reasoning(client, model):
    m = ask(client, model, THINKING).choices[0].message
    reasoning = getattr(m, "reasoning_content", None)
    assert reasoning and reasoning.strip(), m
    assert "<think>" not in reasoning and "</think>" not in reasoning
    assert not m.content, "SmolLM2 does not close the block: no reply"


def test_thinking_off_the_answer_is_reply(client, model):
    m = ask(client, model, {"chat_template_kwargs": {"enable_thinking": False}}).choices[0].message
    assert getattr(m, "reasoning_content", None) is None
    assert m.content and m.content.strip()


def test_streamed_reasoning_is_the_whole_answer_s(client, model):
    whole = ask(client, model, THINKING).choices[0].message
    reasoning, content = "", ""
    for chunk in ask(client, model, THINKING, stream=True):
        if chunk.choices:
            delta = chunk.choices[0].delta
            reasoning += getattr(delta, "reasoning_content", None) or ""
            content += delta.content or ""
    assert reasoning == whole.reasoning_content
    assert content == (whole.content or "")


@pytest.mark.parametrize(
    "extra,param",
    [
        ({"chat_template_kwargs": {"enable_thinkin": True}}, "chat_template_kwargs.enable_thinkin"),
        ({"reasoning_effort": "low"}, "reasoning_effort"),
    ],
)
def test_a_variable_the_template_does_not_read_is_refused(r1_server, model, extra, param):
    r = requests.post(r1_server.url + "/v1/chat/completions", json={"model": model, "messages": QUESTION, **extra}, timeout=TIMEOUT)
    assert r.status_code == 400, r.text
    error = r.json()["error"]
    assert error["param"] == param and "enable_thinking" in error["message"], error


def test_tokenize_renders_with_the_same_variables(r1_server, client, model):
    def count(kwargs):
        body = {"model": model, "messages": QUESTION, "chat_template_kwargs": kwargs}
        r = requests.post(r1_server.url + "/tokenize", json=body, timeout=TIMEOUT)
        assert r.status_code == 200, r.text
        return r.json()["count"]

    on, off = count({"enable_thinking": True}), count({"enable_thinking": False})
    assert on != off, "the variable changed nothing"
    assert on == ask(client, model, THINKING).usage.prompt_tokens
    r = requests.post(
        r1_server.url + "/tokenize",
        json={"model": model, "messages": QUESTION, "chat_template_kwargs": {"thinking": True}},
        timeout=TIMEOUT,
    )
    assert r.status_code == 400 and r.json()["error"]["param"] == "chat_template_kwargs.thinking", r.text


def test_reasoning_parser_none_leaves_the_answer_whole(make_server):
    s = make_server("--chat-template", str(TEMPLATE), "--reasoning-parser", "none")
    c = openai.OpenAI(base_url=s.url + "/v1", api_key="unused", max_retries=0, timeout=TIMEOUT)
    m = ask(c, c.models.list().data[0].id, THINKING).choices[0].message
    assert getattr(m, "reasoning_content", None) is None and m.content
