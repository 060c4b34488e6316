"""Tool calls in each model family's own syntax, through the official `openai` client.

The server runs the default model with a real chat template of each family (llama.cpp's copies,
in crates/braid-text/tests/data/templates/): Llama 3.2's JSON calls, Qwen3-Coder's XML, and
Mistral Nemo's `[TOOL_CALLS]`. braid reads the syntax from the template, holds a forced call
(`required`, a named function) to it with a grammar, and reads the model's text back as calls,
whole and streamed. SmolLM2 was never trained on any of these, so what it writes unforced is
not tested for calls; what the grammar forces must always come back as a call whose arguments
follow the function's schema."""

import json

import openai
import pytest

from conftest import ROOT, Server

TEMPLATES = ROOT / "crates" / "braid-text" / "tests" / "data" / "templates"
TIMEOUT = 120  # every request's, in seconds: a bound, never a speed requirement
WEATHER = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "The current weather in a city",
        "parameters": {
            "type": "object",
            "properties": {"city": {"type": "string"}, "days": {"type": "integer"}},
            "required": ["city"],
        },
    },
}
PARIS = [{"role": "user", "content": "What is the weather in Paris?"}]
FAMILIES = {
    "llama3_json": "meta-llama-Llama-3.2-3B-Instruct.jinja",
    "qwen3_coder": "Qwen3-Coder.jinja",
    "mistral": "mistralai-Mistral-Nemo-Instruct-2407.jinja",
}


@pytest.fixture(scope="module", params=sorted(FAMILIES))
def family(request):
    s = Server("--chat-template", str(TEMPLATES / FAMILIES[request.param]))
    client = openai.OpenAI(base_url=s.url + "/v1", api_key="unused", max_retries=0, timeout=TIMEOUT)
    yield request.param, s, client, client.models.list().data[0].id
    assert s.stop() == 0, s.log_text()


def check_call(call):
    assert call.type == "function" and call.function.name == "get_weather" and call.id
    args = json.loads(call.function.arguments)
    assert isinstance(args["city"], str) and set(args) <= {"city", "days"}
    assert isinstance(args.get("days", 0), int) and abs(args.get("days", 0)) < 10**15
    return args


def test_the_template_names_the_syntax(family):
    syntax, server, _, _ = family
    assert f"tool calls are read in the {syntax} syntax" in server.log_all()


@pytest.mark.parametrize("choice", ["required", {"type": "function", "function": {"name": "get_weather"}}])
def test_a_forced_call_comes_back_as_a_call(family, choice):
    _, _, client, model = family
    r = client.chat.completions.create(
        model=model, messages=PARIS, tools=[WEATHER], tool_choice=choice, parallel_tool_calls=False, max_tokens=80, temperature=0
    )
    c = r.choices[0]
    assert c.finish_reason == "tool_calls", c
    [call] = c.message.tool_calls
    check_call(call)
    assert not c.message.content


def test_a_streamed_forced_call_is_the_whole_call(family):
    _, _, client, model = family
    kwargs = dict(model=model, messages=PARIS, tools=[WEATHER], tool_choice="required", parallel_tool_calls=False, max_tokens=80, temperature=0)
    whole = client.chat.completions.create(**kwargs).choices[0].message.tool_calls[0]
    calls, finish = [], None
    for chunk in client.chat.completions.create(stream=True, **kwargs):
        if chunk.choices:
            calls.extend(chunk.choices[0].delta.tool_calls or [])
            finish = chunk.choices[0].finish_reason or finish
    assert finish == "tool_calls"
    [call] = calls
    assert call.function.name == whole.function.name
    assert json.loads(call.function.arguments) == json.loads(whole.function.arguments)


def test_a_call_round_trip_renders_in_the_family_s_syntax(family):
    _, _, client, model = family
    r = client.chat.completions.create(
        model=model, messages=PARIS, tools=[WEATHER], tool_choice="required", parallel_tool_calls=False, max_tokens=80, temperature=0
    )
    call = r.choices[0].message.tool_calls[0]
    # Mistral's template wants nine-character alphanumeric call ids, as Mistral's API makes.
    call_id = "abcdefghi"
    follow = [
        *PARIS,
        {"role": "assistant", "content": None, "tool_calls": [{"id": call_id, "type": "function", "function": {"name": call.function.name, "arguments": call.function.arguments}}]},
        {"role": "tool", "tool_call_id": call_id, "content": "Sunny, 22 C"},
    ]
    after = client.chat.completions.create(model=model, messages=follow, tools=[WEATHER], max_tokens=16, temperature=0)
    assert after.choices[0].finish_reason in ("stop", "length", "tool_calls")


def test_a_parser_the_template_cannot_teach_is_refused_at_start(tmp_path):
    import subprocess

    from conftest import BIN, MODEL

    out = subprocess.run(
        [BIN, "serve", "--port", "0", "--model", MODEL, "--tool-call-parser", "mistral"],
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
    )
    assert out.returncode != 0
    assert "--tool-call-parser mistral needs a chat template that renders tools" in out.stderr + out.stdout
