"""The official openai package against braid: completions, streaming and chat."""

import json
from pathlib import Path

import openai
import pytest

GOLDEN = Path(__file__).parent / "data" / "greedy_golden.json"


def pinned_text(prompt: str) -> str:
    """The greedy continuation test_greedy_golden.py pins for `prompt` (32 tokens)."""
    for c in json.loads(GOLDEN.read_text())["completions"]:
        if c["prompt"] == prompt:
            return c["output"]["text"]
    raise KeyError(prompt)


@pytest.fixture(scope="module")
def client(server):
    return openai.OpenAI(base_url=server.url + "/v1", api_key="unused", max_retries=0, timeout=120)


def model_id(client) -> str:
    models = client.models.list()
    assert len(models.data) == 1
    return models.data[0].id


def test_models_lists_the_served_model(client):
    m = client.models.list().data[0]
    assert m.object == "model" and m.id


def test_completion(client):
    r = client.completions.create(model=model_id(client), prompt="Once upon a time, there was a little", max_tokens=8, temperature=0)
    assert r.object == "text_completion" and r.id and r.created > 0
    assert r.choices[0].text.startswith(" girl named Emma")
    assert r.choices[0].finish_reason == "length"
    assert r.usage.prompt_tokens == 9 and r.usage.completion_tokens == 8 and r.usage.total_tokens == 17


def test_streamed_completion_with_usage(client):
    chunks = list(
        client.completions.create(
            model=model_id(client), prompt="The sun rises in the", max_tokens=12, temperature=0, stream=True, stream_options={"include_usage": True}
        )
    )
    text = "".join(c.choices[0].text for c in chunks if c.choices)
    # The streamed deltas join to the first 12 tokens of the pinned greedy text.
    assert len(text) > 20 and pinned_text("The sun rises in the").startswith(text)
    finishes = [c.choices[0].finish_reason for c in chunks if c.choices and c.choices[0].finish_reason]
    assert finishes == ["length"]
    usage = [c.usage for c in chunks if c.usage]
    assert usage and usage[-1].completion_tokens == 12 and usage[-1].prompt_tokens == 5


def test_chat(client):
    r = client.chat.completions.create(model=model_id(client), messages=[{"role": "user", "content": "What is the capital of Germany?"}], temperature=0, max_tokens=30)
    assert r.object == "chat.completion"
    msg = r.choices[0].message
    assert msg.role == "assistant" and "Berlin" in msg.content
    assert r.choices[0].finish_reason == "stop"
    assert r.usage.completion_tokens > 0


def test_streamed_chat(client):
    stream = client.chat.completions.create(
        model=model_id(client), messages=[{"role": "user", "content": "Name three fruits."}], temperature=0, max_tokens=40, stream=True
    )
    chunks = list(stream)
    assert chunks[0].object == "chat.completion.chunk"
    assert chunks[0].choices[0].delta.role == "assistant"
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert "Banana" in text or "Apple" in text or "Orange" in text, text
    assert [c.choices[0].finish_reason for c in chunks if c.choices and c.choices[0].finish_reason] in (["stop"], ["length"])


def test_seeded_sampling_is_reproducible(client):
    args = dict(model=model_id(client), prompt="My favorite food is", max_tokens=16, temperature=0.9, seed=1234)
    a = client.completions.create(**args).choices[0].text
    b = client.completions.create(**args).choices[0].text
    assert a == b


def test_logprobs(client):
    r = client.completions.create(model=model_id(client), prompt="The moon is", max_tokens=4, temperature=0, logprobs=3)
    lp = r.choices[0].logprobs
    assert len(lp.tokens) == 4 and len(lp.token_logprobs) == 4
    assert all(x <= 0 for x in lp.token_logprobs)
    assert all(len(t) == 3 for t in lp.top_logprobs)
