"""OpenAI's Responses API (/v1/responses) through the official `openai` SDK: plain and streamed
responses, function tools and their outputs (stateless and through `previous_response_id`),
structured text, the store (retrieve, delete, expiry by name), and refusals by field; and
OpenAI's Agents SDK running an agent with a function tool, whose requests carry every field
it sends by default.

A Responses request runs braid's chat path, so with greedy sampling its text is the chat
completion's text for the same conversation: the tests hold it to that."""

import json

import openai
import pydantic
import pytest
import requests

TIMEOUT = 120  # every request's, in seconds: a bound, never a speed requirement
WEATHER = {
    "type": "function",
    "name": "get_weather",
    "description": "The current weather in a city",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
}
PARIS = "What is the weather in Paris?"


@pytest.fixture(scope="module")
def client(server):
    return openai.OpenAI(base_url=server.url + "/v1", api_key="unused", max_retries=0, timeout=TIMEOUT)


@pytest.fixture(scope="module")
def model(client):
    return client.models.list().data[0].id


def chat_text(client, model, messages, max_tokens):
    r = client.chat.completions.create(model=model, messages=messages, max_tokens=max_tokens, temperature=0)
    return r.choices[0].message.content, r


def test_a_response_is_the_chat_answer_in_the_responses_shape(client, model):
    r = client.responses.create(model=model, instructions="Be brief.", input="Name three colours.", max_output_tokens=24, temperature=0)
    assert r.object == "response" and r.id.startswith("resp_") and r.model == model
    assert r.status in ("completed", "incomplete")
    [message] = r.output
    assert message.type == "message" and message.role == "assistant" and message.id.startswith("msg_")
    text, chat = chat_text(client, model, [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Name three colours."}], 24)
    assert r.output_text == text
    assert r.usage.input_tokens == chat.usage.prompt_tokens
    assert r.usage.output_tokens == chat.usage.completion_tokens
    assert r.usage.total_tokens == chat.usage.total_tokens
    assert r.usage.output_tokens_details.reasoning_tokens == 0
    assert r.status == {"stop": "completed", "length": "incomplete"}[chat.choices[0].finish_reason]
    assert r.instructions == "Be brief." and r.max_output_tokens == 24 and r.temperature == 0


def test_a_cut_answer_is_incomplete_and_says_why(client, model):
    r = client.responses.create(model=model, input="Write a long story about a dragon.", max_output_tokens=4, temperature=0)
    assert r.status == "incomplete"
    assert r.incomplete_details.reason == "max_output_tokens"
    assert r.output[0].status == "incomplete"
    assert r.usage.output_tokens == 4


def test_a_streamed_response_gives_the_same_text_in_openai_s_event_order(client, model):
    kwargs = dict(model=model, input="Count to five.", max_output_tokens=20, temperature=0)
    whole = client.responses.create(**kwargs)
    with client.responses.stream(**kwargs) as stream:
        events = list(stream)
    # The SDK's get_final_response() wants `response.completed`; a cut answer ends with
    # `response.incomplete`, as OpenAI's does, and its response is the last event's.
    final = events[-1].response
    assert final.output_text == whole.output_text and final.status == whole.status
    assert final.usage.output_tokens == whole.usage.output_tokens
    assert [e.sequence_number for e in events] == list(range(len(events)))
    kinds = [e.type for e in events]
    assert kinds[:4] == ["response.created", "response.in_progress", "response.output_item.added", "response.content_part.added"]
    assert kinds[-4:] == ["response.output_text.done", "response.content_part.done", "response.output_item.done", "response.completed" if whole.status == "completed" else "response.incomplete"]
    deltas = [e.delta for e in events if e.type == "response.output_text.delta"]
    assert "".join(deltas) == whole.output_text
    assert events[0].response.status == "in_progress" and events[0].response.id == events[-1].response.id


def test_a_forced_function_call_then_its_output_round_trips(client, model):
    r = client.responses.create(model=model, input=PARIS, tools=[WEATHER], tool_choice="required", parallel_tool_calls=False, max_output_tokens=60, temperature=0)
    calls = [item for item in r.output if item.type == "function_call"]
    assert calls, r.output
    call = calls[0]
    assert call.name == "get_weather" and call.call_id and call.id.startswith("fc_")
    assert isinstance(json.loads(call.arguments)["city"], str)
    assert r.status == "completed"
    # Stateless: the client sends the call back with its output.
    after = client.responses.create(
        model=model,
        store=False,
        input=[
            {"role": "user", "content": PARIS},
            *[c.model_dump(exclude_none=True) for c in calls],
            *[{"type": "function_call_output", "call_id": c.call_id, "output": "Sunny, 22 C"} for c in calls],
        ],
        tools=[WEATHER],
        max_output_tokens=30,
        temperature=0,
    )
    assert after.output_text, after.output
    # The same conversation through chat reads the same prompt.
    messages = [
        {"role": "user", "content": PARIS},
        {"role": "assistant", "content": None, "tool_calls": [{"id": c.call_id, "type": "function", "function": {"name": c.name, "arguments": c.arguments}} for c in calls]},
        *[{"role": "tool", "tool_call_id": c.call_id, "content": "Sunny, 22 C"} for c in calls],
    ]
    chat = client.chat.completions.create(model=model, messages=messages, tools=[{"type": "function", "function": {**{k: WEATHER[k] for k in ("name", "description", "parameters")}, "strict": True}}], max_tokens=30, temperature=0)
    assert after.usage.input_tokens == chat.usage.prompt_tokens
    # Stateful: only the output, continuing the stored response.
    stored = client.responses.create(
        model=model,
        previous_response_id=r.id,
        input=[{"type": "function_call_output", "call_id": c.call_id, "output": "Sunny, 22 C"} for c in calls],
        tools=[WEATHER],
        max_output_tokens=30,
        temperature=0,
    )
    assert stored.output_text == after.output_text
    assert stored.previous_response_id == r.id


def test_a_streamed_function_call_arrives_as_its_argument_events(client, model):
    kwargs = dict(model=model, input=PARIS, tools=[WEATHER], tool_choice={"type": "function", "name": "get_weather"}, max_output_tokens=60, temperature=0)
    with client.responses.stream(**kwargs) as stream:
        events = list(stream)
        final = stream.get_final_response()
    kinds = [e.type for e in events]
    assert "response.function_call_arguments.delta" in kinds and "response.function_call_arguments.done" in kinds
    done = next(e for e in events if e.type == "response.function_call_arguments.done")
    [call] = [item for item in final.output if item.type == "function_call"]
    assert json.loads(done.arguments) == json.loads(call.arguments)
    assert "city" in json.loads(call.arguments)


class Colour(pydantic.BaseModel):
    name: str
    hex: str


def test_structured_text_parses_into_the_client_s_type(client, model):
    r = client.responses.parse(model=model, input="Give one colour as JSON.", text_format=Colour, max_output_tokens=60, temperature=0)
    assert isinstance(r.output_parsed, Colour), r.output_text
    j = client.responses.create(model=model, input="Describe the sky as a JSON object.", text={"format": {"type": "json_object"}}, max_output_tokens=40, temperature=0)
    if j.status == "completed":
        assert isinstance(json.loads(j.output_text), dict)


def test_a_stored_response_continues_retrieves_and_deletes(client, model):
    first = client.responses.create(model=model, input="My name is Ada.", max_output_tokens=12, temperature=0, metadata={"case": "store"})
    assert first.store is True
    got = client.responses.retrieve(first.id)
    assert got.output_text == first.output_text and got.metadata == {"case": "store"}
    second = client.responses.create(model=model, previous_response_id=first.id, input="What is my name?", max_output_tokens=12, temperature=0)
    text, chat = chat_text(
        client,
        model,
        [
            {"role": "user", "content": "My name is Ada."},
            {"role": "assistant", "content": first.output_text},
            {"role": "user", "content": "What is my name?"},
        ],
        12,
    )
    assert second.output_text == text
    assert second.usage.input_tokens == chat.usage.prompt_tokens
    deleted = client.responses.delete(first.id)
    assert deleted is None or getattr(deleted, "deleted", True)
    with pytest.raises(openai.NotFoundError):
        client.responses.retrieve(first.id)
    with pytest.raises(openai.BadRequestError) as e:
        client.responses.create(model=model, previous_response_id=first.id, input="Again?", max_output_tokens=4)
    assert e.value.body["code"] == "previous_response_not_found"
    assert e.value.body["param"] == "previous_response_id"


def test_store_false_keeps_nothing(client, model):
    r = client.responses.create(model=model, input="Hello.", store=False, max_output_tokens=4)
    assert r.store is False
    with pytest.raises(openai.NotFoundError):
        client.responses.retrieve(r.id)


@pytest.mark.parametrize(
    "extra, param",
    [
        ({"tools": [{"type": "web_search"}]}, "tools[0].type"),
        ({"background": True}, "background"),
        ({"truncation": "auto"}, "truncation"),
        ({"include": ["message.output_text.logprobs"]}, "include"),
        ({"input": [{"role": "user", "content": [{"type": "input_image", "image_url": "http://127.0.0.1/x.png"}]}]}, "input[0].content[0].type"),
        ({"input": [{"type": "item_reference", "id": "msg_1"}]}, "input[0].type"),
        ({"tool_choice": {"type": "web_search"}}, "tool_choice.type"),
        ({"text": {"verbosity": "low"}}, "text.verbosity"),
        ({"reasoning": {"summary": "concise"}}, "reasoning.summary"),
        ({"reasoning": {"effort": "high"}}, "reasoning.effort"),
        ({"max_output_tokens": 0}, "max_output_tokens"),
        ({"conversation": "conv_1"}, "conversation"),
        ({"prompt": {"id": "pmpt_1"}}, "prompt"),
        ({"stream_options": {"include_obfuscation": True}}, "stream_options.include_obfuscation"),
        ({"top_logprobs": 2}, "top_logprobs"),
        ({"metadata": {"k": 1}}, "metadata.k"),
    ],
)
def test_what_cannot_be_honoured_is_refused_by_name(server, extra, param):
    body = {"input": "Hello.", "max_output_tokens": 4, **extra}
    r = requests.post(server.url + "/v1/responses", json=body, timeout=TIMEOUT)
    assert r.status_code == 400, r.text
    error = r.json()["error"]
    assert error["param"] == param, error
    assert error["type"] == "invalid_request_error" and error["message"]


def test_the_server_keeps_serving_after_refusals(client, model):
    r = client.responses.create(model=model, input="Say yes.", max_output_tokens=4, temperature=0)
    assert r.output_text


def test_with_the_store_off_store_true_is_refused_and_the_default_keeps_nothing(make_server):
    s = make_server("--response-store-mb", "0")
    c = openai.OpenAI(base_url=s.url + "/v1", api_key="unused", max_retries=0, timeout=TIMEOUT)
    model = c.models.list().data[0].id
    r = c.responses.create(model=model, input="Hello.", max_output_tokens=4)
    assert r.store is False
    with pytest.raises(openai.BadRequestError) as e:
        c.responses.create(model=model, input="Hello.", max_output_tokens=4, store=True)
    assert e.value.body["param"] == "store" and "--response-store-mb" in e.value.body["message"]
    with pytest.raises(openai.NotFoundError):
        c.responses.retrieve(r.id)


def test_the_agents_sdk_runs_an_agent_loop(server, model):
    import asyncio

    from agents import Agent, ModelSettings, OpenAIResponsesModel, Runner, function_tool, set_tracing_disabled

    set_tracing_disabled(True)
    asked = []

    @function_tool
    def get_weather(city: str) -> str:
        """The current weather in a city."""
        asked.append(city)
        return f"Sunny, 22 C in {city}"

    client = openai.AsyncOpenAI(base_url=server.url + "/v1", api_key="unused", max_retries=0, timeout=TIMEOUT)
    agent = Agent(
        name="weather",
        instructions="Answer briefly.",
        tools=[get_weather],
        model=OpenAIResponsesModel(model=model, openai_client=client),
        # Forced for the first turn (a 135M model seldom calls on its own); the SDK resets
        # tool_choice after a call, so the second turn answers in text.
        model_settings=ModelSettings(tool_choice="required", parallel_tool_calls=False, temperature=0, max_tokens=100),
    )
    result = asyncio.run(Runner.run(agent, PARIS, max_turns=4))
    assert asked and isinstance(asked[0], str)
    assert isinstance(result.final_output, str) and result.final_output
    kinds = [item.type for item in result.new_items]
    assert kinds[:2] == ["tool_call_item", "tool_call_output_item"] and kinds[-1] == "message_output_item"
