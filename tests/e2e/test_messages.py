"""Anthropic's Messages API (/v1/messages) through the official `anthropic` SDK: plain and
streamed messages, forced tool calls, a tool_result round trip, count_tokens, stop sequences,
refusals in Anthropic's error shape, and `x-api-key`.

A Messages request runs braid's chat path, so with greedy sampling its text is the chat
completion's text for the same conversation: the tests hold it to that."""

import json

import anthropic
import openai
import pytest
import requests

TIMEOUT = 120  # every request's, in seconds: a bound, never a speed requirement
# The anthropic SDK's typed parameters no longer include sampling; the API still takes it.
# Sampled (the default temperature), a small model may ramble inside a forced call's string
# until max_tokens; greedy, every answer is the same on every run.
GREEDY = {"temperature": 0}
WEATHER = {
    "name": "get_weather",
    "description": "The current weather in a city",
    "input_schema": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
}


@pytest.fixture(scope="module")
def model(server):
    return requests.get(server.url + "/v1/models", timeout=TIMEOUT).json()["data"][0]["id"]


@pytest.fixture(scope="module")
def client(server):
    return anthropic.Anthropic(base_url=server.url, api_key="unused", max_retries=0, timeout=TIMEOUT)


def text_of(message) -> str:
    return "".join(b.text for b in message.content if b.type == "text")


def test_a_message_is_the_chat_answer_in_anthropic_s_shape(server, client, model):
    conversation = [{"role": "user", "content": "Name three colours."}]
    m = client.messages.create(model=model, max_tokens=24, extra_body=GREEDY, system="Be brief.", messages=conversation)
    assert m.type == "message" and m.role == "assistant" and m.model == model and m.id
    assert m.stop_reason in ("end_turn", "max_tokens")
    chat = openai.OpenAI(base_url=server.url + "/v1", api_key="unused", max_retries=0).chat.completions.create(
        model=model, max_tokens=24, temperature=0, messages=[{"role": "system", "content": "Be brief."}, *conversation]
    )
    assert text_of(m) == chat.choices[0].message.content
    assert m.usage.input_tokens == chat.usage.prompt_tokens
    assert m.usage.output_tokens == chat.usage.completion_tokens
    assert m.stop_reason == {"stop": "end_turn", "length": "max_tokens"}[chat.choices[0].finish_reason]


def test_a_streamed_message_gives_the_same_text_and_its_events_in_order(client, model):
    kwargs = dict(model=model, max_tokens=20, extra_body=GREEDY, messages=[{"role": "user", "content": "Count to five."}])
    whole = client.messages.create(**kwargs)
    with client.messages.stream(**kwargs) as stream:
        events = [e.type for e in stream]
        final = stream.get_final_message()
    assert text_of(final) == text_of(whole)
    assert final.usage.output_tokens == whole.usage.output_tokens
    assert final.usage.input_tokens == whole.usage.input_tokens
    assert final.stop_reason == whole.stop_reason
    assert events[0] == "message_start" and events[-1] == "message_stop" and events[-2] == "message_delta"
    assert "content_block_start" in events and "content_block_stop" in events


def test_text_stream_yields_the_text(client, model):
    kwargs = dict(model=model, max_tokens=16, extra_body=GREEDY, messages=[{"role": "user", "content": "Say hello."}])
    with client.messages.stream(**kwargs) as stream:
        text = "".join(stream.text_stream)
    assert text == text_of(client.messages.create(**kwargs))


PARIS = [{"role": "user", "content": "What is the weather in Paris?"}]


def forced_call(client, model, messages):
    """One call of get_weather, forced by `tool_choice: any`."""
    return client.messages.create(
        model=model,
        max_tokens=100,
        extra_body=GREEDY,
        tools=[WEATHER],
        tool_choice={"type": "any", "disable_parallel_tool_use": True},
        messages=messages,
    )


def test_tool_choice_any_forces_a_call_that_follows_the_schema(client, model):
    m = forced_call(client, model, PARIS)
    assert m.stop_reason == "tool_use", m
    (call,) = [b for b in m.content if b.type == "tool_use"]
    assert call.name == "get_weather" and isinstance(call.input["city"], str) and call.id


def test_a_named_tool_streamed(client, model):
    with client.messages.stream(
        model=model,
        max_tokens=100,
        extra_body=GREEDY,
        tools=[WEATHER],
        tool_choice={"type": "tool", "name": "get_weather", "disable_parallel_tool_use": True},
        messages=[{"role": "user", "content": "Weather in Rome?"}],
    ) as stream:
        final = stream.get_final_message()
    assert final.stop_reason == "tool_use"
    (call,) = [b for b in final.content if b.type == "tool_use"]
    assert call.name == "get_weather" and set(call.input) == {"city"}


def test_a_tool_result_round_trip(client, model):
    question = PARIS
    call = forced_call(client, model, question)
    tool_use = next(b for b in call.content if b.type == "tool_use")
    answer = client.messages.create(
        model=model,
        max_tokens=30,
        tools=[WEATHER],
        messages=[
            *question,
            {"role": "assistant", "content": call.content},
            {"role": "user", "content": [{"type": "tool_result", "tool_use_id": tool_use.id, "content": "18 C and sunny"}]},
        ],
    )
    assert answer.type == "message" and answer.usage.input_tokens > call.usage.input_tokens
    # The result is in the prompt: counting it shows the conversation grew by it.
    counted = client.messages.count_tokens(
        model=model,
        tools=[WEATHER],
        messages=[
            *question,
            {"role": "assistant", "content": call.content},
            {"role": "user", "content": [{"type": "tool_result", "tool_use_id": tool_use.id, "content": "18 C and sunny"}]},
        ],
    )
    assert counted.input_tokens == answer.usage.input_tokens


def test_output_config_format_makes_the_answer_follow_the_schema(client, model):
    schema = {"type": "object", "properties": {"colour": {"type": "string", "enum": ["red", "green", "blue"]}}, "required": ["colour"], "additionalProperties": False}
    m = client.messages.create(
        model=model,
        max_tokens=30,
        output_config={"format": {"type": "json_schema", "schema": schema}},
        messages=[{"role": "user", "content": "Pick a colour."}],
    )
    assert m.stop_reason == "end_turn", m
    assert json.loads(text_of(m))["colour"] in ("red", "green", "blue")


def test_count_tokens_is_the_prompt_a_message_reads(client, model):
    messages = [{"role": "user", "content": "Hello there, how are you?"}]
    counted = client.messages.count_tokens(model=model, system="Be kind.", messages=messages)
    m = client.messages.create(model=model, system="Be kind.", max_tokens=1, messages=messages)
    assert counted.input_tokens == m.usage.input_tokens > 5


def test_a_stop_sequence_ends_the_text_and_is_named(client, model):
    kwargs = dict(model=model, max_tokens=40, extra_body=GREEDY, messages=[{"role": "user", "content": "Tell me about the sea."}])
    text = text_of(client.messages.create(**kwargs))
    words = text.split()
    assert len(words) > 4, text
    stop = " " + words[3]
    m = client.messages.create(**kwargs, stop_sequences=[stop])
    assert m.stop_reason == "stop_sequence" and m.stop_sequence == stop
    assert text_of(m) == text[: text.index(stop)]


@pytest.mark.parametrize(
    "body,param",
    [
        ({"messages": [{"role": "user", "content": "hi"}]}, "max_tokens"),
        ({"max_tokens": 5, "messages": [{"role": "user", "content": [{"type": "image", "source": {}}]}]}, "messages[0].content[0].type"),
        ({"max_tokens": 5, "thinking": {"type": "enabled", "budget_tokens": 1024}, "messages": [{"role": "user", "content": "hi"}]}, "thinking"),
        ({"max_tokens": 5, "temperature": 1.5, "messages": [{"role": "user", "content": "hi"}]}, "temperature"),
        ({"max_tokens": 5, "tools": [{"type": "web_search_20250305", "name": "web_search"}], "messages": [{"role": "user", "content": "hi"}]}, "tools[0].type"),
        ({"max_tokens": 5, "messages": [{"role": "user", "content": [{"type": "text", "text": "hi", "citations": [1]}]}]}, "messages[0].content[0].citations"),
        ({"max_tokens": 5, "container": "c1", "messages": [{"role": "user", "content": "hi"}]}, "container"),
        ({"max_tokens": 5, "speed": "fast", "messages": [{"role": "user", "content": "hi"}]}, "speed"),
        ({"max_tokens": 5, "output_config": {"effort": "high"}, "messages": [{"role": "user", "content": "hi"}]}, "effort"),
        ({"max_tokens": 5, "mcp_servers": [{"type": "url", "url": "x"}], "messages": [{"role": "user", "content": "hi"}]}, "mcp_servers"),
    ],
)
def test_what_braid_cannot_honour_is_a_400_in_anthropic_s_shape(server, model, body, param):
    r = requests.post(server.url + "/v1/messages", json={"model": model, **body}, timeout=TIMEOUT)
    assert r.status_code == 400, r.text
    e = r.json()
    assert e["type"] == "error" and e["error"]["type"] == "invalid_request_error"
    assert param.split(".")[-1].split("[")[0] in e["error"]["message"], e


def test_bookkeeping_fields_are_accepted(client, model):
    m = client.messages.create(
        model=model,
        max_tokens=3,
        metadata={"user_id": "u1"},
        service_tier="auto",
        cache_control={"type": "ephemeral"},
        diagnostics={"previous_message_id": None},
        speed="standard",
        messages=[{"role": "user", "content": [{"type": "text", "text": "hi", "cache_control": {"type": "ephemeral"}}]}],
    )
    assert m.usage.output_tokens == 3


def test_errors_reach_the_sdk_as_its_exceptions(client, model):
    with pytest.raises(anthropic.NotFoundError):
        client.messages.create(model="claude-nonexistent", max_tokens=5, messages=[{"role": "user", "content": "hi"}])
    with pytest.raises(anthropic.BadRequestError) as e:
        client.messages.create(model=model, max_tokens=5, messages=[{"role": "system", "content": "hi"}])
    assert "system" in str(e.value)


def test_x_api_key_is_a_key(make_server):
    s = make_server("--api-key", "sesame")
    model = requests.get(s.url + "/v1/models", headers={"x-api-key": "sesame"}, timeout=TIMEOUT).json()["data"][0]["id"]
    ok = anthropic.Anthropic(base_url=s.url, api_key="sesame", max_retries=0, timeout=TIMEOUT)
    assert ok.messages.create(model=model, max_tokens=3, messages=[{"role": "user", "content": "hi"}]).usage.output_tokens == 3
    wrong = anthropic.Anthropic(base_url=s.url, api_key="wrong", max_retries=0, timeout=TIMEOUT)
    with pytest.raises(anthropic.AuthenticationError) as e:
        wrong.messages.create(model=model, max_tokens=3, messages=[{"role": "user", "content": "hi"}])
    assert e.value.body["error"]["type"] == "authentication_error"
