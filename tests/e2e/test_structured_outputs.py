"""Structured outputs through the official openai client on the default model: the output
follows the schema, regex or choice asked for, streaming or not, whatever shares the batch."""

import json
import re
from concurrent.futures import ThreadPoolExecutor
from typing import Annotated

import openai
import pytest
import requests
from pydantic import BaseModel, Field

# Bounded strings, lists and numbers: greedy decoding on a 135M model repeats itself
# ("chocolate", "chocolate", ..., or "minutes": 3000000...) and fills anything unbounded up to
# `max_tokens`; the bounds are part of the schema, so the grammar enforces them too.
Short = Field(max_length=40)


class Person(BaseModel):
    name: str = Short
    age: int = Field(ge=0, le=150)
    city: str = Short


class Recipe(BaseModel):
    title: str = Short
    ingredients: list[Annotated[str, Short]] = Field(min_length=1, max_length=6)
    minutes: int = Field(ge=1, le=600)


class Answer(BaseModel):
    answer: str = Field(max_length=80)
    confident: bool


# Twenty varied requests, each with the Pydantic model its answer should parse into.
CASES = [
    ("Describe a fictional person: their name, age and city.", Person),
    ("Invent a character who lives in Paris.", Person),
    ("Tell me about a retired teacher.", Person),
    ("Who is a famous scientist? Give name, age, city.", Person),
    ("Make up a person from Tokyo.", Person),
    ("Give me a recipe for pancakes.", Recipe),
    ("How do I make a tomato soup?", Recipe),
    ("A quick salad recipe, please.", Recipe),
    ("Write a recipe for chocolate cake.", Recipe),
    ("What can I cook with rice and eggs?", Recipe),
    ("What is the capital of France?", Answer),
    ("How many legs does a spider have?", Answer),
    ("Is the sun a star?", Answer),
    ("What color is the sky?", Answer),
    ("What is 2 + 2?", Answer),
    ("Who wrote Romeo and Juliet?", Answer),
    ("Reply in JSON: describe your best friend.", Person),
    ("List the ingredients of bread as JSON.", Recipe),
    ("Answer as JSON: can fish fly?", Answer),
    ("Hello! What's the weather like on Mars?", Answer),
]

# Room for every answer above: a cut-off answer would not parse, and this test is about the
# constraint, not the length limit.
MAX_TOKENS = 300


@pytest.fixture(scope="module")
def client(server):
    return openai.OpenAI(base_url=server.url + "/v1", api_key="unused", max_retries=0, timeout=300)


def test_parse_with_a_pydantic_model_succeeds_on_every_prompt(client):
    parsed = 0
    unconstrained_valid = 0
    for prompt, model in CASES:
        messages = [{"role": "user", "content": prompt}]
        r = client.chat.completions.parse(
            model="", messages=messages, response_format=model, max_tokens=MAX_TOKENS, temperature=0
        )
        choice = r.choices[0]
        assert choice.finish_reason == "stop", (prompt, choice.message.content)
        assert isinstance(choice.message.parsed, model), (prompt, choice.message.content)
        parsed += 1
        plain = client.chat.completions.create(model="", messages=messages, max_tokens=MAX_TOKENS, temperature=0)
        try:
            model.model_validate_json(plain.choices[0].message.content)
            unconstrained_valid += 1
        except ValueError:
            pass
    print(f"\nparsed with the constraint: {parsed}/{len(CASES)}; without: {unconstrained_valid}/{len(CASES)}")
    assert parsed == len(CASES)


def test_json_object_gives_parseable_json_streaming_and_not(client):
    messages = [{"role": "user", "content": "Give a JSON object with the keys name and color for a cat."}]
    r = client.chat.completions.create(
        model="", messages=messages, response_format={"type": "json_object"}, max_tokens=MAX_TOKENS, temperature=0
    )
    assert r.choices[0].finish_reason == "stop"
    assert isinstance(json.loads(r.choices[0].message.content), dict)
    stream = client.chat.completions.create(
        model="",
        messages=messages,
        response_format={"type": "json_object"},
        max_tokens=MAX_TOKENS,
        temperature=0,
        stream=True,
    )
    text = "".join(c.choices[0].delta.content or "" for c in stream if c.choices)
    assert text == r.choices[0].message.content


def test_guided_choice_returns_one_of_the_choices(client):
    choices = ["positive", "negative", "neutral"]
    for prompt in ["I love this movie!", "This is terrible.", "The train leaves at 5."]:
        for temperature in (0, 1.0):
            r = client.completions.create(
                model="",
                prompt=f"Review: {prompt}\nSentiment:",
                max_tokens=10,
                temperature=temperature,
                extra_body={"guided_choice": choices},
            )
            assert r.choices[0].text in choices, r.choices[0].text
            assert r.choices[0].finish_reason == "stop"


def test_guided_regex_and_structured_outputs_match(client):
    pattern = r"[0-9]{3}-[0-9]{4}"
    r = client.completions.create(
        model="", prompt="Call me at", max_tokens=20, temperature=0.8, extra_body={"guided_regex": pattern}
    )
    assert re.fullmatch(pattern, r.choices[0].text), r.choices[0].text
    r = client.chat.completions.create(
        model="",
        messages=[{"role": "user", "content": "Pick a fruit."}],
        max_tokens=20,
        extra_body={"structured_outputs": {"regex": "(apple|pear|plum)!"}},
    )
    assert r.choices[0].message.content in ("apple!", "pear!", "plum!")


# A date in llama.cpp's GBNF: `guided_grammar` reads it as GBNF because it defines rules with `::=`.
DATE_GBNF = """# a date from this century
root  ::= year "-" month "-" day
year  ::= "20" [0-9]{2}
month ::= "0" [1-9] | "1" [0-2]
day   ::= "0" [1-9] | [12] [0-9] | "3" [01]
"""


def test_a_gbnf_grammar_is_followed_and_a_broken_one_is_a_400_naming_its_line(client):
    r = client.chat.completions.create(
        model="",
        messages=[{"role": "user", "content": "When is your birthday? Answer with a date."}],
        max_tokens=20,
        temperature=0,
        extra_body={"guided_grammar": DATE_GBNF},
    )
    choice = r.choices[0]
    assert choice.finish_reason == "stop"
    date = r"20[0-9]{2}-(0[1-9]|1[0-2])-(0[1-9]|[12][0-9]|3[01])"
    assert re.fullmatch(date, choice.message.content), choice.message.content
    r = client.chat.completions.create(
        model="",
        messages=[{"role": "user", "content": "Is the sea salty?"}],
        max_tokens=5,
        extra_body={"structured_outputs": {"grammar": 'root ::= ("yes" | "no") "."\n'}},
    )
    assert r.choices[0].message.content in ("yes.", "no."), r.choices[0].message.content
    with pytest.raises(openai.BadRequestError) as e:
        client.chat.completions.create(
            model="",
            messages=[{"role": "user", "content": "Hi"}],
            extra_body={"guided_grammar": 'root ::= answer\nanswr ::= "yes" | "no"\n'},
        )
    body = e.value.body
    assert body["param"] == "guided_grammar", body
    assert "GBNF grammar: line 1: rule `answer` is used but never defined" in body["message"], body


def test_max_tokens_can_cut_constrained_output_short(client):
    r = client.chat.completions.create(
        model="",
        messages=[{"role": "user", "content": "Describe a person."}],
        response_format={"type": "json_object"},
        max_tokens=3,
        temperature=0,
    )
    assert r.choices[0].finish_reason == "length"


def test_an_invalid_schema_is_a_400_naming_the_field(client):
    with pytest.raises(openai.BadRequestError) as e:
        client.chat.completions.create(
            model="",
            messages=[{"role": "user", "content": "Hi"}],
            response_format={"type": "json_schema", "json_schema": {"name": "x", "schema": {"type": "no-such-type"}}},
        )
    body = e.value.body
    assert body["param"] == "response_format" and "cannot be enforced" in body["message"], body


def test_constrained_greedy_output_is_the_same_alone_and_in_a_batch(server):
    body = {
        "messages": [{"role": "user", "content": "Invent a character who lives in Paris."}],
        "max_tokens": MAX_TOKENS,
        "temperature": 0,
        "response_format": {"type": "json_schema", "json_schema": {"name": "p", "schema": Person.model_json_schema()}},
    }

    def chat(b):
        r = requests.post(server.url + "/v1/chat/completions", json=b, timeout=300)
        assert r.status_code == 200, r.text
        return r.json()["choices"][0]["message"]["content"]

    alone = chat(body)
    Person.model_validate_json(alone)
    others = [
        {"messages": [{"role": "user", "content": f"Tell me a story about {x}."}], "max_tokens": 60, "temperature": 0.9}
        for x in ("a dog", "the sea", "a robot", "winter")
    ]
    others.append({**body, "response_format": {"type": "json_object"}})
    with ThreadPoolExecutor(len(others) + 1) as pool:
        futures = [pool.submit(chat, b) for b in others]
        together = pool.submit(chat, body).result()
        for f in futures:
            f.result()
    assert together == alone
