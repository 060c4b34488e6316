"""Qwen3's real chat template on a random-weight qwen3 model, through the official `openai`
client: reasoning split into `reasoning_content` (whole and streamed), and `enable_thinking`
reaching the template. (Its tools prompt does not fit the tiny model's 512-token context;
the calls Qwen3's template writes are read back in braid-text's tests.)

The model is braid's tiny random-weight qwen3 GGUF (`braid_model::tiny_gguf`, written here by
the write-tiny-gguf example) with Qwen3-0.6B's template (llama.cpp's copy, in
crates/braid-text/tests/data/templates/). Its text is noise, so what is tested is what braid
does with it: an answer that starts inside an open `<think>` block is reasoning until the
block closes, which noise never does; a forced call is a call whatever the weights."""

import subprocess
from pathlib import Path

import openai
import pytest
import requests

from conftest import BIN, ROOT, Server

TEMPLATE = ROOT / "crates" / "braid-text" / "tests" / "data" / "templates" / "Qwen-Qwen3-0.6B.jinja"
TIMEOUT = 120  # every request's, in seconds: a bound, never a speed requirement
SEED = 7
# The assistant's turn begun with an open think block: the answer continues inside it.
THINKING = [{"role": "user", "content": "What is two plus two?"}, {"role": "assistant", "content": "<think>\n"}]
CONTINUE = {"continue_final_message": True, "add_generation_prompt": False}


@pytest.fixture(scope="module")
def qwen3(tmp_path_factory):
    path = tmp_path_factory.mktemp("qwen3") / "tiny-qwen3.gguf"
    # scripts/test.sh builds the examples beside the binary; `cargo run -p braid-model` alone
    # would build braid-model again with its own features, most of a minute.
    built = Path(BIN).parent / "examples" / "write-tiny-gguf"
    writer = [str(built)] if built.exists() else ["cargo", "run", "--quiet", "--release", "-p", "braid-model", "--example", "write-tiny-gguf", "--"]
    subprocess.run([*writer, "qwen3", str(path), str(SEED)], cwd=ROOT, check=True, timeout=600)
    s = Server("--chat-template", str(TEMPLATE), model=str(path))
    client = openai.OpenAI(base_url=s.url + "/v1", api_key="unused", max_retries=0, timeout=TIMEOUT)
    yield s, client, client.models.list().data[0].id
    assert s.stop() == 0, s.log_text()


def test_an_answer_inside_an_open_think_block_is_reasoning(qwen3):
    _, client, model = qwen3
    whole = client.chat.completions.create(model=model, messages=THINKING, max_tokens=12, temperature=0, extra_body=CONTINUE)
    m = whole.choices[0].message
    assert m.reasoning_content, m
    assert not m.content, "noise never closes the block: no reply"
    assert whole.choices[0].finish_reason == "length"
    reasoning = ""
    for chunk in client.chat.completions.create(model=model, messages=THINKING, max_tokens=12, temperature=0, extra_body=CONTINUE, stream=True):
        if chunk.choices:
            reasoning += getattr(chunk.choices[0].delta, "reasoning_content", None) or ""
            assert not chunk.choices[0].delta.content
    assert reasoning == m.reasoning_content


def test_enable_thinking_reaches_the_template(qwen3):
    server, client, model = qwen3
    question = THINKING[:1]

    def prompt_tokens(kwargs):
        r = client.chat.completions.create(model=model, messages=question, max_tokens=1, temperature=0, extra_body={"chat_template_kwargs": kwargs})
        return r.usage.prompt_tokens

    # Thinking off, the template closes an empty think block in the prompt.
    assert prompt_tokens({"enable_thinking": False}) > prompt_tokens({"enable_thinking": True})
    r = requests.post(server.url + "/v1/chat/completions", json={"model": model, "messages": question, "chat_template_kwargs": {"thinking": False}}, timeout=TIMEOUT)
    assert r.status_code == 400 and r.json()["error"]["param"] == "chat_template_kwargs.thinking", r.text
    assert "enable_thinking" in r.json()["error"]["message"]



def test_anthropic_thinking_disabled_switches_thinking_off(qwen3):
    import anthropic

    server, _, model = qwen3
    client = anthropic.Anthropic(base_url=server.url, api_key="unused", max_retries=0, timeout=TIMEOUT)
    question = THINKING[:1]
    plain = client.messages.count_tokens(model=model, messages=question).input_tokens
    off = client.messages.count_tokens(model=model, messages=question, thinking={"type": "disabled"}).input_tokens
    assert off > plain, "thinking off, the template closes an empty think block in the prompt"
    with pytest.raises(anthropic.BadRequestError) as e:
        client.messages.create(model=model, max_tokens=2048, messages=question, thinking={"type": "enabled", "budget_tokens": 1024})
    assert "budget_tokens" in str(e.value)
