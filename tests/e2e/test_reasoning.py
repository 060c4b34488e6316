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


def respond(client, model, extra=None, **kw):
    return client.responses.create(model=model, input=QUESTION, max_output_tokens=24, temperature=0, extra_body=extra, **kw)


def test_responses_put_the_reasoning_in_a_reasoning_item(client, model):
    chat = ask(client, model, THINKING).choices[0].message
    r = respond(client, model, THINKING, reasoning={"summary": "auto"}, include=["reasoning.encrypted_content"])
    [item] = r.output
    assert item.type == "reasoning" and item.id.startswith("rs_")
    assert [p.type for p in item.content] == ["reasoning_text"]
    assert item.content[0].text == chat.reasoning_content
    assert item.summary[0].text == chat.reasoning_content
    assert item.encrypted_content == chat.reasoning_content
    assert r.output_text == "", "SmolLM2 does not close the block: no reply"
    assert r.usage.output_tokens_details.reasoning_tokens == r.usage.output_tokens
    off = respond(client, model, {"chat_template_kwargs": {"enable_thinking": False}})
    assert [i.type for i in off.output] == ["message"] and off.usage.output_tokens_details.reasoning_tokens == 0


def test_streamed_responses_reasoning_arrives_as_reasoning_text_events(client, model):
    whole = respond(client, model, THINKING)
    with client.responses.stream(model=model, input=QUESTION, max_output_tokens=24, temperature=0, extra_body=THINKING) as stream:
        events = list(stream)
    deltas = "".join(e.delta for e in events if e.type == "response.reasoning_text.delta")
    assert deltas == whole.output[0].content[0].text
    done = [e for e in events if e.type == "response.output_item.done"]
    assert [e.item.type for e in done] == ["reasoning"]
    final = events[-1].response
    assert final.usage.output_tokens_details.reasoning_tokens == whole.usage.output_tokens_details.reasoning_tokens


def test_a_reasoning_item_sent_back_is_read_as_the_turn_s_reasoning(client, model):
    first = respond(client, model, THINKING, store=False)
    follow = [
        *QUESTION,
        *[item.model_dump(exclude_none=True) for item in first.output],
        {"role": "assistant", "content": "Four."},
        {"role": "user", "content": "And three plus three?"},
    ]
    r = client.responses.create(model=model, input=follow, max_output_tokens=8, temperature=0, store=False)
    assert r.status in ("completed", "incomplete") and r.output
