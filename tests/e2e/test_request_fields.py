"""Nothing silently ignored, through the official openai client on the real model: fields braid
cannot honor are refused naming the field, documented no-ops pass, `logit_bias` changes the
text, and /tokenizer_info and /tokenize answer as lm-evaluation-harness reads them."""

import openai
import pytest
import requests

PROMPT = "The capital of France is"


@pytest.fixture(scope="module")
def client(server):
    return openai.OpenAI(base_url=server.url + "/v1", api_key="unused", max_retries=0, timeout=120)


def refusal(call) -> dict:
    with pytest.raises(openai.BadRequestError) as e:
        call()
    assert e.value.status_code == 400
    return e.value.body


@pytest.mark.parametrize(
    "extra, param",
    [
        ({"audio": {"voice": "alloy", "format": "wav"}}, "audio"),
        ({"modalities": ["text", "audio"]}, "modalities"),
        ({"web_search_options": {}}, "web_search_options"),
        # The default model's template reads neither (test_reasoning.py: one that does).
        ({"reasoning_effort": "high"}, "reasoning_effort"),
        ({"best_answer_please": True}, "best_answer_please"),
        # Fields behind other servers' advisories (docs/RELIABILITY.md): a template from the
        # request, arguments the template does not read, and llama.cpp's `n_discard`.
        ({"chat_template": "{{ messages }}"}, "chat_template"),
        ({"chat_template_kwargs": {"enable_thinking": True}}, "chat_template_kwargs.enable_thinking"),
        ({"n_discard": -5}, "n_discard"),
    ],
)
def test_fields_braid_cannot_honor_are_refused_by_name(client, extra, param):
    body = refusal(
        lambda: client.chat.completions.create(
            model="", messages=[{"role": "user", "content": "Hi"}], max_tokens=3, extra_body=extra
        )
    )
    assert body["code"] == "unsupported_parameter", body
    assert body["param"] == param and f"`{param}`" in body["message"], body


def test_documented_noops_are_accepted(client):
    r = client.chat.completions.create(
        model="",
        messages=[{"role": "user", "content": "Hi", "name": "ann"}],
        max_tokens=3,
        user="user-1",
        metadata={"run": "e2e"},
        store=False,
        service_tier="auto",
    )
    assert r.choices[0].finish_reason in ("stop", "length")


def test_a_user_message_needs_content(server):
    r = requests.post(server.url + "/v1/chat/completions", json={"messages": [{"role": "user"}]}, timeout=30)
    assert r.status_code == 400
    err = r.json()["error"]
    assert err["param"] == "messages" and "needs `content`" in err["message"], err


def test_logit_bias_bans_and_forces_tokens(client, server):
    plain = client.completions.create(model="", prompt=PROMPT, max_tokens=4, temperature=0, logprobs=1)
    first = plain.choices[0].logprobs.tokens[0]
    first_id = requests.post(server.url + "/tokenize", json={"prompt": first, "add_special_tokens": False}, timeout=30).json()["tokens"]
    assert len(first_id) == 1, first_id
    banned = client.completions.create(
        model="", prompt=PROMPT, max_tokens=4, temperature=0, logprobs=1, logit_bias={str(first_id[0]): -100}
    )
    assert banned.choices[0].logprobs.tokens[0] != first
    assert banned.choices[0].text != plain.choices[0].text
    forced_id = requests.post(server.url + "/tokenize", json={"prompt": " banana", "add_special_tokens": False}, timeout=30).json()["tokens"][0]
    forced = client.completions.create(
        model="", prompt=PROMPT, max_tokens=3, temperature=0.9, seed=3, logit_bias={str(forced_id): 100}
    )
    assert forced.choices[0].text.startswith(" banana" * 3)


def test_tokenizer_info_names_the_special_tokens(server):
    r = requests.get(server.url + "/tokenizer_info", timeout=30)
    assert r.status_code == 200
    info = r.json()
    # SmolLM2-Instruct's GGUF names the chat markers as its BOS and EOS and adds no BOS.
    assert info["eos_token"] == "<|im_end|>" and info["bos_token"] == "<|im_start|>", info
    assert info["eos_token_id"] == 2 and info["bos_token_id"] == 1 and not info["add_bos_token"]
    assert info["model_max_length"] >= 2048
    assert "<|im_start|>" in info["chat_template"]
    assert info["vocab_size"] == 49152
    ids = lambda **body: requests.post(server.url + "/tokenize", json=body, timeout=30).json()["tokens"]  # noqa: E731
    assert ids(prompt="Hello world", add_special_tokens=False) == ids(prompt="Hello world")[-2:]
