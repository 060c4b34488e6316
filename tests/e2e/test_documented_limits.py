"""The limits docs/RELIABILITY.md documents are the limits the server enforces: the table of
request field bounds is read from the document, and for every row the least and the most
values are accepted while one step past either is refused with a 400 naming the field."""

import pytest
import requests

from conftest import ROOT

DOC = ROOT / "docs" / "RELIABILITY.md"
CHAT = [{"role": "user", "content": "Hi"}]


def documented() -> list[tuple[str, str, str, str]]:
    text = DOC.read_text()
    table = text[text.index("| Field | Endpoint | Least | Most |"):].split("\n\n")[0]
    rows = []
    for line in table.splitlines()[2:]:
        field, endpoint, least, most = [c.strip() for c in line.strip("|").split("|")]
        rows.append((field.replace("`", ""), endpoint, least, most))
    return rows


ROWS = documented()
COUNTS = {"logit_bias entries", "stop_token_ids entries", "stop strings"}
INTEGER = COUNTS | {"n", "logprobs", "top_logprobs", "prompt_logprobs"}


def request_for(field: str, endpoint: str, value) -> tuple[str, dict, str]:
    """(path, body, the param a refusal names) of a small request setting `field` to `value`
    (a number, or a count of entries). Fields of both endpoints are sent to /v1/completions."""
    body: dict = {"max_tokens": 1}
    param = field
    if field == "logit_bias entries":
        body["logit_bias"], param = {str(1000 + i): 1 for i in range(value)}, "logit_bias"
    elif field == "logit_bias values":
        body["logit_bias"], param = {"1000": value}, "logit_bias"
    elif field == "stop_token_ids entries":
        body["stop_token_ids"], param = list(range(1000, 1000 + value)), "stop_token_ids"
    elif field == "stop strings":
        body["stop"], param = [f"zq{i}" for i in range(value)], "stop"
    elif field == "prompts × n":
        body["prompt"], body["n"], param = ["Hi"] * (value // 16), 16, "prompt"
    elif field == "top_logprobs":
        body["logprobs"], body["top_logprobs"] = True, value
    else:
        body[field] = value
    if endpoint == "chat":
        return "/v1/chat/completions", {**body, "messages": CHAT}, param
    body.setdefault("prompt", "Hi")
    return "/v1/completions", body, param


def values(field: str, least: str, most: str) -> tuple[list, list]:
    """(accepted, refused) values for a documented range: the bounds, and one step past
    each (a count is never negative, so a count's least has nothing below it)."""
    if field == "prompts × n":
        return [16, 64], [80]
    integer = field in INTEGER
    step = 1 if integer else 0.01
    num = int if integer else float
    accepted, refused = [], []
    if least.startswith("above "):
        low = num(least.split()[1])
        accepted.append(low + step)
        refused.append(low)
    else:
        low = num(least)
        accepted.append(low)
        if not (field in COUNTS and low == 0):
            refused.append(round(low - step, 2))
    high = num(most)
    accepted.append(high)
    refused.append(round(high + step, 2))
    return accepted, refused


def test_the_table_covers_the_bounds_that_matter():
    fields = {r[0] for r in ROWS}
    assert {"temperature", "n", "logprobs", "logit_bias entries", "stop_token_ids entries", "prompts × n"} <= fields, fields


@pytest.mark.parametrize("field,endpoint,least,most", ROWS, ids=[r[0] for r in ROWS])
def test_documented_bounds_are_the_enforced_ones(server, field, endpoint, least, most):
    accepted, refused = values(field, least, most)
    for value in accepted:
        path, payload, _ = request_for(field, endpoint, value)
        r = requests.post(server.url + path, json=payload, timeout=120)
        assert r.status_code == 200, f"{field} = {value} is documented as accepted: {r.text[:300]}"
    for value in refused:
        path, payload, param = request_for(field, endpoint, value)
        r = requests.post(server.url + path, json=payload, timeout=120)
        assert r.status_code == 400, f"{field} = {value} is documented as refused: {r.status_code} {r.text[:300]}"
        assert r.json()["error"]["param"] == param, r.json()
