"""Speculative decoding, from outside: answers that copy are drafted and verified, and what comes
back is exactly what plain decoding gives (`--speculative off`): text, tokens, logprobs, seeded
samples, structured outputs. OpenAI's `prediction` drafts its text and reports how much of it
was used; the counters carry vLLM's spec-decode names. A draft model (`--draft-model`; here the
model drafts for itself, the one SmolLM2 there is) changes no answer either, and one with another
vocabulary is refused at start, naming both files."""

import json
import subprocess

import openai
import pytest
import requests
from conftest import BIN, GEMMA_MODEL, MODEL, Server

PARAGRAPH = (
    "The river town of Alder Ford was built where three roads met a shallow crossing. "
    "Farmers brought grain there every autumn, and merchants from the coast came to trade salt, "
    "cloth and iron tools. Over the years the market grew into a fair that lasted two weeks, "
    "and the town built a stone bridge so that carts no longer had to wait for the water to fall."
)
EXAMPLE = (
    "The lighthouse keeper climbed the stairs every evening at six. He wound the clock that turned "
    "the lamp and wrote the weather in a thick book."
)


def edit_messages(text: str, old: str, new: str) -> list[dict]:
    """A request for `text` back with one change, after a turn that did the same (small models
    copy far more reliably with one example)."""
    ask = 'Repeat the following text exactly, but replace "{}" with "{}":\n\n{}'
    return [
        {"role": "user", "content": ask.format("six", "seven", EXAMPLE)},
        {"role": "assistant", "content": EXAMPLE.replace("six", "seven")},
        {"role": "user", "content": ask.format(old, new, text)},
    ]


@pytest.fixture(scope="module")
def plain():
    s = Server("--speculative", "off")
    yield s
    assert s.stop() == 0, s.log_text()


def accepted(server) -> float:
    return server.metrics().get("braid_spec_decode_num_accepted_tokens_total", 0.0)


def chat(url: str, **body) -> dict:
    r = requests.post(url + "/v1/chat/completions", json=body, timeout=300)
    assert r.status_code == 200, r.text
    return r.json()


def answer(response: dict) -> tuple[str, list, str]:
    choice = response["choices"][0]
    lp = choice.get("logprobs") or {}
    tokens = [(c["token"], c["logprob"], [t["logprob"] for t in c["top_logprobs"]]) for c in lp.get("content") or []]
    return choice["message"]["content"], tokens, choice["finish_reason"]


def test_a_copying_answer_is_drafted_and_is_exactly_plain_decoding(server, plain):
    body = dict(
        messages=edit_messages(PARAGRAPH, "autumn", "spring"),
        max_tokens=120,
        temperature=0,
        logprobs=True,
        top_logprobs=3,
    )
    before = accepted(server)
    drafted = answer(chat(server.url, **body))
    after = accepted(server)
    assert after - before > 0, "no drafted token accepted on an answer that copies"
    assert "Alder Ford was built where three roads met" in drafted[0], drafted[0]
    assert drafted == answer(chat(plain.url, **body)), "speculation changed the answer"
    assert accepted(plain) == 0


def test_seeded_samples_and_choices_are_those_of_plain_decoding(server, plain):
    body = dict(
        messages=edit_messages(PARAGRAPH, "salt", "spice"),
        max_tokens=80,
        temperature=0.7,
        seed=11,
        n=2,
        logprobs=True,
    )
    on, off = chat(server.url, **body), chat(plain.url, **body)
    assert [answer({"choices": [c]}) for c in on["choices"]] == [answer({"choices": [c]}) for c in off["choices"]]
    assert on["usage"] == off["usage"]


def test_a_structured_output_copying_its_prompt_is_unchanged(server, plain):
    record = {"name": "weather-station", "version": "1.4.2", "sensors": ["temperature", "humidity", "pressure"]}
    schema = {
        "type": "object",
        "properties": {
            "name": {"type": "string"},
            "version": {"type": "string"},
            "sensors": {"type": "array", "items": {"type": "string"}},
        },
        "required": ["name", "version", "sensors"],
        "additionalProperties": False,
    }
    body = dict(
        messages=[{"role": "user", "content": "Repeat this JSON exactly:\n" + json.dumps(record)}],
        max_tokens=80,
        temperature=0,
        response_format={"type": "json_schema", "json_schema": {"name": "r", "schema": schema, "strict": True}},
    )
    on = answer(chat(server.url, **body))
    assert on == answer(chat(plain.url, **body))
    assert set(json.loads(on[0])) == {"name", "version", "sensors"}


def test_a_prediction_is_drafted_counted_and_changes_nothing(server, plain):
    body = dict(messages=edit_messages(PARAGRAPH, "autumn", "spring"), max_tokens=120, temperature=0)
    without = chat(server.url, **body)
    assert "completion_tokens_details" not in without["usage"]
    predicted = chat(server.url, **body, prediction={"type": "content", "content": PARAGRAPH})
    assert predicted["choices"][0]["message"]["content"] == without["choices"][0]["message"]["content"]
    details = predicted["usage"]["completion_tokens_details"]
    used, unused = details["accepted_prediction_tokens"], details["rejected_prediction_tokens"]
    # How many are used depends on the planner's cost model, which a busy machine sways (a
    # benchmark measures it, not a test); that some are, and the count, do not.
    assert used > 0, details
    # OpenAI's meaning: the prediction's tokens that did not make it into the answer.
    tokens = requests.post(server.url + "/tokenize", json={"prompt": PARAGRAPH, "add_special_tokens": False}, timeout=30).json()
    assert used + unused == len(tokens["tokens"]), (details, len(tokens["tokens"]))
    # The prediction is a request's own: a server drafting nothing else still drafts it.
    on_plain = chat(plain.url, **body, prediction={"type": "content", "content": [{"type": "text", "text": PARAGRAPH}]})
    assert on_plain["choices"][0]["message"]["content"] == without["choices"][0]["message"]["content"]
    assert on_plain["usage"]["completion_tokens_details"]["accepted_prediction_tokens"] > 0


def test_predicted_outputs_through_the_openai_client_streamed_and_on_completions(server):
    client = openai.OpenAI(base_url=server.url + "/v1", api_key="unused", max_retries=0, timeout=120)
    model = client.models.list().data[0].id
    stream = client.chat.completions.create(
        model=model,
        messages=edit_messages(PARAGRAPH, "two weeks", "ten days"),
        max_tokens=120,
        temperature=0,
        prediction={"type": "content", "content": PARAGRAPH},
        stream=True,
        stream_options={"include_usage": True},
    )
    text, usage = "", None
    for chunk in stream:
        if chunk.choices:
            text += chunk.choices[0].delta.content or ""
        if chunk.usage:
            usage = chunk.usage
    assert "ten days" in text or "two weeks" in text, text
    assert usage.completion_tokens_details.accepted_prediction_tokens > 0, usage
    prompt = "Copy: " + PARAGRAPH + "\nCopy: "
    done = client.completions.create(
        model=model, prompt=prompt, max_tokens=60, temperature=0, extra_body={"prediction": {"type": "content", "content": PARAGRAPH}}
    )
    assert done.usage.completion_tokens_details.accepted_prediction_tokens > 0, done.usage


@pytest.mark.parametrize(
    "prediction, field",
    [
        ({"type": "text", "content": "x"}, "prediction.type"),
        ({"type": "content", "content": 5}, "prediction.content"),
        ({"type": "content", "content": [{"type": "image_url", "image_url": "x"}]}, "prediction.content"),
        ({"type": "content"}, "prediction.content"),
        ("some text", "prediction"),
    ],
)
def test_a_malformed_prediction_is_a_400_naming_the_field(server, prediction, field):
    r = requests.post(
        server.url + "/v1/chat/completions",
        json={"messages": [{"role": "user", "content": "hi"}], "max_tokens": 4, "prediction": prediction},
        timeout=30,
    )
    assert r.status_code == 400, r.text
    error = r.json()["error"]
    assert error["param"] == field, error
    assert requests.get(server.url + "/health", timeout=10).status_code == 200


def test_drafts_show_in_the_metrics_and_the_step_feed(server):
    with requests.get(server.url + "/debug/steps", stream=True, timeout=60) as feed:
        chat(server.url, messages=edit_messages(PARAGRAPH, "stone", "wooden"), max_tokens=100, temperature=0)
        drafted = 0
        for line in feed.iter_lines():
            if line.startswith(b"data: "):
                step = json.loads(line[6:])
                assert "drafted_tokens" in step and "accepted_tokens" in step
                drafted += step["drafted_tokens"]
                if step["decode_tokens"] == 0 and step["prefill_tokens"] == 0 or drafted > 10:
                    break
    assert drafted > 10
    m = server.metrics()
    assert m["braid_spec_decode_num_drafts_total"] > 0
    assert m["braid_spec_decode_num_draft_tokens_total"] >= m["braid_spec_decode_num_accepted_tokens_total"] > 0
    assert m['braid_spec_decode_num_accepted_tokens_per_pos_total{position="0"}'] > 0


def test_a_draft_model_drafts_and_changes_no_answer(plain):
    drafting = Server("--draft-model", MODEL)
    try:
        assert "drafting with a draft model" in drafting.log_all()
        bodies = [
            dict(messages=[{"role": "user", "content": "Name three colours of the rainbow."}], max_tokens=40, temperature=0, logprobs=True, top_logprobs=2),
            dict(messages=[{"role": "user", "content": "Write a line about rain."}], max_tokens=30, temperature=0.8, seed=4, n=2),
        ]
        for body in bodies:
            assert answer_all(chat(drafting.url, **body)) == answer_all(chat(plain.url, **body)), body
        # The model drafting for itself guesses its own greedy tokens.
        assert accepted(drafting) > 0
    finally:
        assert drafting.stop() == 0, drafting.log_text()


def answer_all(response: dict) -> list:
    return [answer({"choices": [c]}) for c in response["choices"]]


@pytest.mark.parametrize(
    "args, needle",
    [
        (["--draft-model", GEMMA_MODEL], "vocabulary"),
        (["--draft-model", MODEL, "--speculative", "off"], "--speculative off"),
        (["--draft-model", "models/no-such-draft.gguf"], "no-such-draft.gguf"),
    ],
)
def test_a_draft_model_that_cannot_draft_stops_start_up_saying_why(args, needle):
    r = subprocess.run([BIN, "serve", "--host", "127.0.0.1", "--port", "0", "--model", MODEL, *args], capture_output=True, text=True, timeout=120)
    assert r.returncode != 0
    assert needle in r.stderr, r.stderr
    if "vocabulary" in needle:
        # Both files are named, with their sizes.
        assert MODEL.split("/")[-1] in r.stderr and GEMMA_MODEL.split("/")[-1] in r.stderr, r.stderr
