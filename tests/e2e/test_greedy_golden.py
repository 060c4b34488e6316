"""Greedy output is pinned: refactoring the engine, the scheduler or the server must not move
a single bit of what the model says.

`data/greedy_golden.json` holds greedy completions (text, tokens and their logprobs) that an
earlier build served one at a time; `python tests/e2e/test_greedy_golden.py URL` writes it
again from a server at URL, for the rare change that is meant to alter the output (a new
kernel's rounding, say), and the commit that does so says why. Here the same requests go in
all at once, so they also share steps: batch invariance is checked on the way.
"""

import json
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import requests

try:
    from conftest import PROMPTS
except ImportError:  # run as a script from elsewhere
    sys.path.insert(0, str(Path(__file__).parent))
    from conftest import PROMPTS

GOLDEN = Path(__file__).parent / "data" / "greedy_golden.json"
CHATS = ["Name three fruits.", "What is the capital of Germany?", "Write a haiku about rain."]


def completion(url: str, prompt: str) -> dict:
    r = requests.post(
        url + "/v1/completions",
        json={"prompt": prompt, "max_tokens": 32, "temperature": 0, "logprobs": 1},
        timeout=300,
    )
    r.raise_for_status()
    choice = r.json()["choices"][0]
    lp = choice["logprobs"]
    return {"text": choice["text"], "tokens": lp["tokens"], "logprobs": lp["token_logprobs"]}


def chat(url: str, message: str) -> dict:
    r = requests.post(
        url + "/v1/chat/completions",
        json={"messages": [{"role": "user", "content": message}], "max_tokens": 32, "temperature": 0, "logprobs": True},
        timeout=300,
    )
    r.raise_for_status()
    choice = r.json()["choices"][0]
    content = choice["logprobs"]["content"]
    return {
        "text": choice["message"]["content"],
        "tokens": [c["token"] for c in content],
        "logprobs": [c["logprob"] for c in content],
    }


def test_greedy_output_is_bit_identical_to_the_pinned_build(server):
    assert_serves_the_pinned_output(server.url)


def assert_serves_the_pinned_output(url: str, first: int | None = None):
    """All the pinned requests at once, or the `first` completions and the first chat."""
    golden = json.loads(GOLDEN.read_text())
    prompts, chats_asked = (PROMPTS, CHATS) if first is None else (PROMPTS[:first], CHATS[:1])
    with ThreadPoolExecutor(len(prompts) + len(chats_asked)) as pool:
        completions = list(pool.map(lambda p: completion(url, p), prompts))
        chats = list(pool.map(lambda m: chat(url, m), chats_asked))
    for prompt, want, got in zip(prompts, golden["completions"], completions):
        assert want["prompt"] == prompt, "the golden file was written for other prompts: regenerate it"
        assert got == want["output"], f"completion of {prompt!r} changed"
    for message, want, got in zip(chats_asked, golden["chats"], chats):
        assert want["message"] == message, "the golden file was written for other messages: regenerate it"
        assert got == want["output"], f"chat answer to {message!r} changed"


if __name__ == "__main__":
    url = sys.argv[1].rstrip("/")
    GOLDEN.parent.mkdir(exist_ok=True)
    data = {
        "made_with": "one request at a time, temperature 0, max_tokens 32, by " + " ".join(sys.argv[2:]),
        "completions": [{"prompt": p, "output": completion(url, p)} for p in PROMPTS],
        "chats": [{"message": m, "output": chat(url, m)} for m in CHATS],
    }
    GOLDEN.write_text(json.dumps(data, indent=1, ensure_ascii=False) + "\n")
    print(f"wrote {GOLDEN}")
