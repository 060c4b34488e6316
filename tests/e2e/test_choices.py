"""Several choices in one request, through the official openai client on the real model: `n`
(streaming and not, distinct when sampled, reproducible with a seed) and arrays of prompts as
lm-evaluation-harness batches them (strings or token-id lists), each its own choice, with usage
summed."""

import openai
import pytest
import requests

from conftest import complete

MESSAGES = [{"role": "user", "content": "Write one sentence about the sea."}]


@pytest.fixture(scope="module")
def client(server):
    return openai.OpenAI(base_url=server.url + "/v1", api_key="unused", max_retries=0, timeout=300)


def test_n_4_chat_gives_four_distinct_choices(client):
    r = client.chat.completions.create(model="", messages=MESSAGES, n=4, max_tokens=16, temperature=1.0, seed=11)
    assert [c.index for c in r.choices] == [0, 1, 2, 3]
    texts = [c.message.content for c in r.choices]
    assert len(set(texts)) == 4, texts
    single = client.chat.completions.create(model="", messages=MESSAGES, max_tokens=16, temperature=1.0, seed=11)
    assert r.usage.prompt_tokens == single.usage.prompt_tokens, "the prompt counts once"
    # Choice j samples with seed + j: choice 0 is the single request's answer, choice 1 seed 12's.
    assert texts[0] == single.choices[0].message.content
    seed_12 = client.chat.completions.create(model="", messages=MESSAGES, max_tokens=16, temperature=1.0, seed=12)
    assert texts[1] == seed_12.choices[0].message.content


def test_n_4_streaming_carries_each_choices_index(client):
    stream = client.chat.completions.create(
        model="", messages=MESSAGES, n=4, max_tokens=12, temperature=1.0, seed=5, stream=True,
        stream_options={"include_usage": True},
    )
    texts, finished, usage = {}, set(), None
    for chunk in stream:
        if chunk.usage:
            usage = chunk.usage
        for c in chunk.choices:
            texts[c.index] = texts.get(c.index, "") + (c.delta.content or "")
            if c.finish_reason:
                finished.add(c.index)
    assert finished == {0, 1, 2, 3} and len(set(texts.values())) == 4, texts
    whole = client.chat.completions.create(model="", messages=MESSAGES, n=4, max_tokens=12, temperature=1.0, seed=5)
    assert [texts[i] for i in range(4)] == [c.message.content for c in whole.choices]
    assert usage.completion_tokens == whole.usage.completion_tokens


def test_a_prompt_array_answers_each_prompt_as_alone(server, client):
    prompts = ["The capital of France is", "def fibonacci(n):", "Once upon a time"]
    ids = requests.post(server.url + "/tokenize", json={"prompt": prompts[2]}, timeout=30).json()["tokens"]
    batch = client.completions.create(model="", prompt=[prompts[0], prompts[1], ids], max_tokens=8, temperature=0)
    assert [c.index for c in batch.choices] == [0, 1, 2]
    alone = [complete(server.url, prompt=p, max_tokens=8, temperature=0) for p in prompts]
    assert [c.text for c in batch.choices] == [a["choices"][0]["text"] for a in alone]
    assert batch.usage.prompt_tokens == sum(a["usage"]["prompt_tokens"] for a in alone)
    assert batch.usage.completion_tokens == sum(a["usage"]["completion_tokens"] for a in alone)


def test_a_prompt_array_with_n_orders_choices_prompt_by_prompt(client):
    r = client.completions.create(model="", prompt=["Red", "Blue"], n=2, max_tokens=6, temperature=0.8, seed=3,
                                  echo=True)
    assert [c.index for c in r.choices] == [0, 1, 2, 3]
    assert all(c.text.startswith("Red") for c in r.choices[:2])
    assert all(c.text.startswith("Blue") for c in r.choices[2:])
    assert r.choices[0].text != r.choices[1].text or r.choices[2].text != r.choices[3].text


def test_n_choices_read_the_prompt_once(server, client):
    """Choices 1..3 wait for choice 0 to read the prompt, then take its full KV blocks from the
    prefix cache and a copy of its last partial block: only the prompt's last token is read
    again, for the logits the choice samples its first token from. Each choice is still the
    answer a lone request with its seed gives."""
    def hits():
        return server.metrics().get("braid_prefix_cache_hits_total", 0.0)

    words = " ".join(f"item{i} is number {i * 7 % 13}." for i in range(60))
    before = hits()
    r = client.completions.create(model="", prompt=words, n=4, max_tokens=4, temperature=1.0, seed=1)
    shared = hits() - before
    assert r.usage.prompt_tokens > 200
    assert shared == 3 * (r.usage.prompt_tokens - 1), (shared, r.usage.prompt_tokens)
    for j in (1, 3):
        alone = client.completions.create(model="", prompt=words, max_tokens=4, temperature=1.0, seed=1 + j)
        assert r.choices[j].text == alone.choices[0].text, j
