"""A smaller set of the end-to-end tests on the second model, Gemma 3 270M: another
architecture (gemma3), a SentencePiece vocabulary of 262,144 tokens, mixed K-quant tensors, and
a base model with no chat template, so chat needs `--chat-template`.

`scripts/fetch-model.sh gemma3-270m` puts the model in models/ (scripts/test.sh does).
"""

from pathlib import Path

import openai
import pytest
import requests

from conftest import GEMMA_MODEL, Server

TEMPLATE = str(Path(__file__).parent / "data" / "gemma3-chat.jinja")
PROMPT = "The capital of France is"
MESSAGES = [{"role": "user", "content": "What is the capital of France?"}]
# Small pools: two Gemma servers may run at once, and these requests are short.
FLAGS = ("--kv-cache-mb", "256")


def start(*args: str) -> Server:
    assert Path(GEMMA_MODEL).exists(), f"{GEMMA_MODEL} is missing; run scripts/fetch-model.sh gemma3-270m"
    return Server(*FLAGS, *args, model=GEMMA_MODEL)


@pytest.fixture(scope="module")
def gemma():
    s = start()
    yield s
    assert s.stop() == 0, s.log_text()


@pytest.fixture(scope="module")
def client(gemma):
    return openai.OpenAI(base_url=gemma.url + "/v1", api_key="unused", max_retries=0, timeout=300)


def prompt_tokens(url: str, **body) -> int:
    r = requests.post(url + "/tokenize", json=body, timeout=30)
    assert r.status_code == 200, r.text
    return r.json()["count"]


def greedy(client, max_tokens: int = 16):
    return client.completions.create(model="gemma-3-270m-q4_k_m", prompt=PROMPT, max_tokens=max_tokens, temperature=0)


def test_the_model_is_served_under_its_file_name(client, gemma):
    assert [m.id for m in client.models.list().data] == ["gemma-3-270m-q4_k_m"]
    r = requests.post(gemma.url + "/tokenize", json={"prompt": PROMPT}, timeout=30)
    assert r.json()["max_model_len"] > 0


def test_completion_gives_text_and_counts_its_tokens(client, gemma):
    r = greedy(client)
    choice = r.choices[0]
    assert choice.text.strip(), r
    assert choice.finish_reason in ("length", "stop")
    usage = r.usage
    assert usage.prompt_tokens == prompt_tokens(gemma.url, prompt=PROMPT)
    assert 5 <= usage.prompt_tokens <= 8
    assert 1 <= usage.completion_tokens <= 16
    if choice.finish_reason == "length":
        assert usage.completion_tokens == 16
    assert usage.total_tokens == usage.prompt_tokens + usage.completion_tokens


def test_greedy_text_is_the_same_every_time(client):
    first = greedy(client).choices[0].text
    assert greedy(client).choices[0].text == first


def test_streamed_completion_joins_to_the_greedy_text(client, gemma):
    want = greedy(client)
    chunks = list(
        client.completions.create(
            model="gemma-3-270m-q4_k_m",
            prompt=PROMPT,
            max_tokens=16,
            temperature=0,
            stream=True,
            stream_options={"include_usage": True},
        )
    )
    text = "".join(c.choices[0].text for c in chunks if c.choices)
    assert text == want.choices[0].text
    finishes = [c.choices[0].finish_reason for c in chunks if c.choices and c.choices[0].finish_reason]
    assert finishes == [want.choices[0].finish_reason]
    usage = [c.usage for c in chunks if c.usage]
    assert len(usage) == 1
    assert (usage[0].prompt_tokens, usage[0].completion_tokens) == (want.usage.prompt_tokens, want.usage.completion_tokens)


def test_chat_without_a_template_is_a_400_saying_how_to_supply_one(client, gemma):
    r = requests.post(gemma.url + "/v1/chat/completions", json={"messages": MESSAGES}, timeout=30)
    assert r.status_code == 400, r.text
    err = r.json()["error"]
    assert (err["type"], err["code"], err["param"]) == ("invalid_request_error", "no_chat_template", "messages")
    assert "no chat template" in err["message"] and "braid serve --chat-template FILE" in err["message"]
    with pytest.raises(openai.BadRequestError):
        client.chat.completions.create(model="gemma-3-270m-q4_k_m", messages=MESSAGES, max_tokens=4, stream=True)


def test_chat_works_with_a_gemma_template_file():
    s = start("--chat-template", TEMPLATE)
    try:
        r = requests.post(s.url + "/tokenize", json={"messages": MESSAGES}, timeout=30)
        assert r.status_code == 200, r.text
        ids = r.json()["tokens"]
        text = requests.post(s.url + "/detokenize", json={"tokens": ids}, timeout=30).json()["prompt"]
        # The template writes BOS and Gemma's tokenizer adds one (add_bos_token): one is kept.
        assert text == "<bos><start_of_turn>user\nWhat is the capital of France?<end_of_turn>\n<start_of_turn>model\n", text
        assert ids[0] == 2 and ids[1] != 2
        client = openai.OpenAI(base_url=s.url + "/v1", api_key="unused", max_retries=0, timeout=300)
        # ignore_eos: a base model may end its turn at once; eight tokens are asked for.
        ask = dict(model="gemma-3-270m-q4_k_m", messages=MESSAGES, max_tokens=8, temperature=0, extra_body={"ignore_eos": True})
        r = client.chat.completions.create(**ask)
        assert r.choices[0].message.role == "assistant"
        assert isinstance(r.choices[0].message.content, str)
        assert r.choices[0].finish_reason == "length"
        assert r.usage.prompt_tokens == len(ids) and r.usage.completion_tokens == 8
        chunks = list(client.chat.completions.create(**ask, stream=True))
        assert chunks[0].choices[0].delta.role == "assistant"
        streamed = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
        assert streamed == r.choices[0].message.content
    finally:
        assert s.stop() == 0, s.log_text()
