"""/v1/embeddings on all-MiniLM-L6-v2 (`--embedding-model DIR`), held to an independent
reference: tests/e2e/data/minilm_reference.json, computed from scratch in numpy float64 by
scripts/embedding-reference.py (which checks itself against the sentence-transformers
quickstart's published similarities).

Two servers: one serving only the embedding model (no `--model`), and one serving both it and
the default generation model, for routing by `model` and for embeddings next to a streaming
chat. The model directory comes from `scripts/fetch-model.sh all-minilm-l6-v2`, which
scripts/test.sh runs."""

import base64
import json
import math
import struct
import threading
import time
from pathlib import Path

import openai
import pytest
import requests
from tokenizers import Tokenizer

from conftest import EMBEDDING_MODEL, PROMPTS, Server

REFERENCE = json.loads((Path(__file__).parent / "data" / "minilm_reference.json").read_text())
TEXTS = REFERENCE["texts"]
EMBED_ID = REFERENCE["model"]  # the directory's name: all-MiniLM-L6-v2
DIMENSIONS = len(REFERENCE["embeddings"][0])  # 384
MAX_TOKENS = REFERENCE["max_seq_length"]  # 256, special tokens included
LONG = len(TEXTS) - 1  # the text past MAX_TOKENS
# The sentence-transformers quickstart's similarities of TEXTS[0..3]: (0,1), (0,2), (1,2).
QUICKSTART = {(0, 1): 0.6660, (0, 2): 0.1046, (1, 2): 0.1411}
TIMEOUT = 120  # every request's, in seconds: a bound, never a speed requirement


@pytest.fixture(scope="module")
def embed_server():
    """The embedding model alone: no `--model`."""
    s = Server("--embedding-model", EMBEDDING_MODEL, model="")
    yield s
    assert s.stop() == 0, s.log_text()


@pytest.fixture(scope="module")
def both_server():
    """The default generation model and the embedding model, side by side."""
    s = Server("--embedding-model", EMBEDDING_MODEL)
    yield s
    assert s.stop() == 0, s.log_text()


@pytest.fixture(scope="module")
def tokenizer():
    """The model's own tokenizer, as sentence-transformers runs it: no padding, no truncation
    (tokenizer.json asks for both, at 128); inputs here are shorter than MAX_TOKENS."""
    t = Tokenizer.from_file(str(Path(EMBEDDING_MODEL) / "tokenizer.json"))
    t.no_padding()
    t.no_truncation()
    return t


def cosine(a, b) -> float:
    dot = sum(x * y for x, y in zip(a, b, strict=True))
    return dot / (math.sqrt(sum(x * x for x in a)) * math.sqrt(sum(y * y for y in b)))


def embed(url: str, input, **fields) -> requests.Response:
    return requests.post(url + "/v1/embeddings", json={"model": EMBED_ID, "input": input, **fields}, timeout=TIMEOUT)


def vectors(url: str, input, **fields) -> tuple[list[list[float]], dict]:
    """The embeddings (as floats, in input order) and the usage of one request that must succeed."""
    r = embed(url, input, **fields)
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["object"] == "list" and body["model"] == EMBED_ID, body.keys()
    data = body["data"]
    assert [d["index"] for d in data] == list(range(len(data)))
    assert all(d["object"] == "embedding" for d in data)
    usage = body["usage"]
    assert usage["total_tokens"] == usage["prompt_tokens"], usage
    return [d["embedding"] for d in data], usage


def refused(r: requests.Response, param: str | None = None, mentions: tuple[str, ...] = ()) -> dict:
    """The OpenAI-style error of a 400; `param` is the field it must name, `mentions` what its
    message must say."""
    assert r.status_code == 400, (r.status_code, r.text)
    err = r.json()["error"]
    assert err["type"] == "invalid_request_error" and err["message"] and "code" in err and "param" in err, err
    if param is not None:
        assert err["param"] == param or param in err["message"], err
    for m in mentions:
        assert m in err["message"], err
    return err


def model_ids(url: str) -> list[str]:
    r = requests.get(url + "/v1/models", timeout=TIMEOUT)
    assert r.status_code == 200, r.text
    return [m["id"] for m in r.json()["data"]]


def generation_id(url: str) -> str:
    (gen,) = [m for m in model_ids(url) if m != EMBED_ID]
    return gen


# a. accuracy


def test_matches_the_reference_through_the_openai_client(embed_server):
    client = openai.OpenAI(base_url=embed_server.url + "/v1", api_key="x", max_retries=0, timeout=TIMEOUT)
    # Without encoding_format the client asks for base64 and decodes it (little-endian f32).
    r = client.embeddings.create(model=EMBED_ID, input=TEXTS)
    assert r.model == EMBED_ID and len(r.data) == len(TEXTS)
    for i, (got, want) in enumerate(zip((d.embedding for d in r.data), REFERENCE["embeddings"], strict=True)):
        assert len(got) == DIMENSIONS
        assert cosine(got, want) >= 0.9999, (i, TEXTS[i][:40], cosine(got, want))
        assert abs(math.sqrt(sum(x * x for x in got)) - 1) < 1e-4, "normalized, as modules.json says"
    assert r.usage.prompt_tokens == sum(REFERENCE["token_counts"]) == r.usage.total_tokens
    got = [d.embedding for d in r.data]
    for (i, j), want in QUICKSTART.items():
        assert abs(cosine(got[i], got[j]) - want) < 5e-4, ((i, j), cosine(got[i], got[j]), want)


def test_each_text_alone_has_the_reference_token_count(embed_server):
    for i, text in enumerate(TEXTS):
        (got,), usage = vectors(embed_server.url, text, encoding_format="float")
        assert usage["prompt_tokens"] == REFERENCE["token_counts"][i], (text[:40], usage)
        assert cosine(got, REFERENCE["embeddings"][i]) >= 0.9999, text[:40]


def test_a_long_text_is_cut_at_max_seq_length(embed_server, tokenizer):
    assert len(tokenizer.encode(TEXTS[LONG]).ids) > MAX_TOKENS + 100
    _, usage = vectors(embed_server.url, TEXTS[LONG])
    assert usage["prompt_tokens"] == MAX_TOKENS == 256


# b. batching


def test_batching_does_not_change_a_text_vector(embed_server):
    """Each text's vector inside a batch of texts of mixed lengths is its vector alone, to the
    bit: the forward stacks the texts' rows, unpadded, and every row's arithmetic is its own."""
    batch = [TEXTS[LONG], *PROMPTS[:6], *TEXTS[:LONG], *PROMPTS[6:]]
    together, _ = vectors(embed_server.url, batch)
    for text, v in zip(batch, together, strict=True):
        (alone,), _ = vectors(embed_server.url, text)
        assert v == alone, text[:40]


# c. input forms and bounds


def test_input_forms_give_the_same_vectors(embed_server, tokenizer):
    url = embed_server.url
    ref = REFERENCE["embeddings"]
    (one,), usage = vectors(url, TEXTS[0])
    assert cosine(one, ref[0]) >= 0.9999 and usage["prompt_tokens"] == REFERENCE["token_counts"][0]

    two, _ = vectors(url, TEXTS[:2])
    assert all(cosine(v, r) >= 0.9999 for v, r in zip(two, ref[:2], strict=True))

    # Token ids are the model's whole input, special tokens included, as given.
    ids = [tokenizer.encode(t).ids for t in TEXTS[:3]]
    assert ids == REFERENCE["token_ids"][:3]
    (from_ids,), usage = vectors(url, ids[0])
    assert cosine(from_ids, ref[0]) >= 0.9999 and usage["prompt_tokens"] == len(ids[0])
    from_lists, usage = vectors(url, ids)
    assert all(cosine(v, r) >= 0.9999 for v, r in zip(from_lists, ref[:3], strict=True))
    assert usage["prompt_tokens"] == sum(map(len, ids))
    bare = ids[0][1:-1]  # no [CLS]/[SEP]: nothing is added to ids
    (v,), usage = vectors(url, bare)
    assert usage["prompt_tokens"] == len(bare) and cosine(v, ref[0]) < 0.9999


def test_base64_is_the_little_endian_f32_bytes_of_the_floats(embed_server):
    floats, _ = vectors(embed_server.url, TEXTS[:3], encoding_format="float")
    encoded, _ = vectors(embed_server.url, TEXTS[:3], encoding_format="base64")
    for f, b in zip(floats, encoded, strict=True):
        assert isinstance(b, str) and isinstance(f[0], float)
        raw = base64.b64decode(b, validate=True)
        assert len(raw) == 4 * DIMENSIONS
        decoded = struct.unpack(f"<{DIMENSIONS}f", raw)
        assert max(abs(x - y) for x, y in zip(decoded, f)) < 1e-6


def test_dimensions_must_be_the_model_s(embed_server):
    (v,), _ = vectors(embed_server.url, TEXTS[0], dimensions=DIMENSIONS)
    assert len(v) == DIMENSIONS
    refused(embed(embed_server.url, TEXTS[0], dimensions=128), param="dimensions")


@pytest.mark.parametrize("input", ["", ["a text", ""], [], [[]], [[101, 102], []]], ids=["empty string", "empty string in list", "empty list", "empty token list", "empty token list in list"])
def test_empty_input_is_refused(embed_server, input):
    refused(embed(embed_server.url, input))


def test_at_most_2048_inputs(embed_server):
    vs, _ = vectors(embed_server.url, ["hi"] * 2048)
    assert len(vs) == 2048
    refused(embed(embed_server.url, ["hi"] * 2049), param="input")


def test_at_most_300000_tokens_per_request(embed_server):
    # 1,200 inputs of 256 token ids: 307,200 tokens, each input within the model's 256. Sent
    # compact, it is 0.6 MB, under the 1 MiB body limit (which would answer 413).
    ids = [101] + [1] * (MAX_TOKENS - 2) + [102]
    body = json.dumps({"model": EMBED_ID, "input": [ids] * 1200}, separators=(",", ":"))
    assert len(body) < 1024 * 1024
    r = requests.post(embed_server.url + "/v1/embeddings", data=body, headers={"content-type": "application/json"}, timeout=TIMEOUT)
    refused(r)


def test_a_request_past_the_timeout_is_a_504_and_the_server_goes_on(make_server):
    """500 inputs of 256 tokens (128,000, within --max-request-tokens) take far longer than the
    1-second limit on any CPU: the answer is a 504 naming the flag, the request's waiting texts
    are dropped, and the next request is served."""
    s = make_server("--embedding-model", EMBEDDING_MODEL, "--request-timeout-secs", "1", model="")
    ids = [101] + [1] * (MAX_TOKENS - 2) + [102]
    body = json.dumps({"input": [ids] * 500}, separators=(",", ":"))
    started = time.monotonic()
    r = requests.post(s.url + "/v1/embeddings", data=body, headers={"content-type": "application/json"}, timeout=TIMEOUT)
    assert r.status_code == 504, r.text
    error = r.json()["error"]
    assert error["code"] == "request_timeout" and "--request-timeout-secs" in error["message"]
    assert time.monotonic() - started < 60
    (v,), _ = vectors(s.url, TEXTS[0])
    assert cosine(v, REFERENCE["embeddings"][0]) >= 0.9999
    s.wait_idle("the dropped texts")
    log = s.log_text()
    assert "reached its deadline" in log and "client left before its embeddings were done" in log


def test_truncate_prompt_tokens(embed_server):
    texts = [TEXTS[3], TEXTS[LONG]]  # 9 and 437 tokens
    _, usage = vectors(embed_server.url, texts, truncate_prompt_tokens=8)
    assert usage["prompt_tokens"] == 2 * 8
    (short,), _ = vectors(embed_server.url, TEXTS[LONG], truncate_prompt_tokens=8)
    assert cosine(short, REFERENCE["embeddings"][LONG]) < 0.99
    _, usage = vectors(embed_server.url, texts, truncate_prompt_tokens=-1)  # the model's max
    assert usage["prompt_tokens"] == REFERENCE["token_counts"][3] + MAX_TOKENS
    _, usage = vectors(embed_server.url, texts, truncate_prompt_tokens=MAX_TOKENS)
    assert usage["prompt_tokens"] == REFERENCE["token_counts"][3] + MAX_TOKENS
    refused(embed(embed_server.url, texts, truncate_prompt_tokens=MAX_TOKENS + 1), param="truncate_prompt_tokens")


# d. model routing


def test_an_embedding_only_server_serves_no_generation(embed_server):
    assert model_ids(embed_server.url) == [EMBED_ID]
    r = requests.post(embed_server.url + "/v1/completions", json={"model": EMBED_ID, "prompt": "Hello", "max_tokens": 4}, timeout=TIMEOUT)
    refused(r)
    r = requests.post(
        embed_server.url + "/v1/chat/completions", json={"model": EMBED_ID, "messages": [{"role": "user", "content": "Hi"}], "max_tokens": 4}, timeout=TIMEOUT
    )
    refused(r)


def test_each_model_answers_only_its_own_endpoints(both_server):
    url = both_server.url
    ids = model_ids(url)
    assert EMBED_ID in ids and len(ids) == 2, ids
    gen = generation_id(url)

    refused(requests.post(url + "/v1/embeddings", json={"model": gen, "input": "Hello"}, timeout=TIMEOUT), mentions=(EMBED_ID,))
    chat = {"model": EMBED_ID, "messages": [{"role": "user", "content": "Hi"}], "max_tokens": 4}
    refused(requests.post(url + "/v1/chat/completions", json=chat, timeout=TIMEOUT), mentions=(gen,))
    completion = {"model": EMBED_ID, "prompt": "Hello", "max_tokens": 4}
    refused(requests.post(url + "/v1/completions", json=completion, timeout=TIMEOUT), mentions=(gen,))

    # Both still work on the same server.
    (v,), _ = vectors(url, TEXTS[0])
    assert cosine(v, REFERENCE["embeddings"][0]) >= 0.9999
    r = requests.post(
        url + "/v1/chat/completions",
        json={"model": gen, "messages": [{"role": "user", "content": "What is the capital of Germany?"}], "max_tokens": 30, "temperature": 0},
        timeout=TIMEOUT,
    )
    assert r.status_code == 200, r.text
    assert r.json()["choices"][0]["message"]["content"]


# e. langchain-openai


def test_langchain_openai_embeddings(embed_server):
    from langchain_openai import OpenAIEmbeddings

    emb = OpenAIEmbeddings(
        model=EMBED_ID,
        base_url=embed_server.url + "/v1",
        api_key="x",
        check_embedding_ctx_length=False,  # send the texts, not tiktoken's token ids
        max_retries=0,
        request_timeout=TIMEOUT,
    )
    docs = emb.embed_documents(TEXTS[:5])
    assert len(docs) == 5
    for i, v in enumerate(docs):
        assert cosine(v, REFERENCE["embeddings"][i]) >= 0.9999, TEXTS[i]
    q = emb.embed_query(TEXTS[3])
    assert cosine(q, REFERENCE["embeddings"][3]) >= 0.9999


# f. metrics

REQUESTS = "braid_embedding_requests_total"
TOKENS = "braid_embedding_prompt_tokens_total"


def metric(server, name: str) -> float:
    """The sum of every series of `name`, whatever its labels."""
    return sum(v for k, v in server.metrics().items() if k == name or k.startswith(name + "{"))


def settled(server, timeout: float = 10.0) -> dict[str, float]:
    """The counters once two reads 0.2 s apart agree: an earlier test's last request can be
    counted just after its answer."""
    deadline = time.time() + timeout
    last = None
    while True:
        now = {n: metric(server, n) for n in (REQUESTS, TOKENS)}
        if now == last or time.time() > deadline:
            return now
        last = now
        time.sleep(0.2)


def test_metrics_count_embedding_requests_and_tokens(embed_server):
    before = settled(embed_server)
    sent = [
        vectors(embed_server.url, TEXTS[0])[1]["prompt_tokens"],
        vectors(embed_server.url, TEXTS[:5])[1]["prompt_tokens"],
        vectors(embed_server.url, REFERENCE["token_ids"][2])[1]["prompt_tokens"],
        vectors(embed_server.url, TEXTS[LONG], truncate_prompt_tokens=16)[1]["prompt_tokens"],
    ]
    assert sent[-1] == 16
    # A request's count can land just after its answer.
    deadline = time.time() + 30
    while metric(embed_server, REQUESTS) < before[REQUESTS] + len(sent) and time.time() < deadline:
        time.sleep(0.05)
    moved = {n: metric(embed_server, n) - before[n] for n in before}
    assert moved == {REQUESTS: len(sent), TOKENS: sum(sent)}, (moved, sent)


# g. a busy server


def test_embeddings_stay_right_beside_a_streaming_chat(both_server):
    url = both_server.url
    distinct = [*PROMPTS, *TEXTS]  # 25 texts, up to 256 tokens
    alone = {t: vectors(url, t)[0][0] for t in distinct}
    gen = generation_id(url)

    stream = {"chunks": 0, "finish": None, "done": False, "error": None}
    first_chunk = threading.Event()

    def chat():
        body = {
            "model": gen,
            "messages": [{"role": "user", "content": "Tell me a long story about a lighthouse."}],
            "max_tokens": 200,
            "temperature": 0,
            "stream": True,
        }
        try:
            with requests.post(url + "/v1/chat/completions", json=body, stream=True, timeout=TIMEOUT) as r:
                assert r.status_code == 200, r.text
                for line in r.iter_lines():
                    if not line.startswith(b"data: "):
                        continue
                    if line == b"data: [DONE]":
                        stream["done"] = True
                        break
                    chunk = json.loads(line[6:])
                    stream["chunks"] += 1
                    first_chunk.set()
                    for c in chunk.get("choices", []):
                        stream["finish"] = c.get("finish_reason") or stream["finish"]
        except Exception as e:  # reported below, from the test's thread
            stream["error"] = repr(e)
        finally:
            first_chunk.set()

    failures: list[str] = []

    def embedder(k: int):
        texts = [distinct[(k * 7 + i) % len(distinct)] for i in range(100)]
        try:
            for start in range(0, 100, 25):
                batch = texts[start : start + 25]
                got, _ = vectors(url, batch)
                for t, v in zip(batch, got, strict=True):
                    if cosine(v, alone[t]) < 0.99999:
                        failures.append(f"thread {k}: {t[:40]!r}: cosine {cosine(v, alone[t])}")
        except Exception as e:
            failures.append(f"thread {k}: {e!r}")

    chat_thread = threading.Thread(target=chat)
    chat_thread.start()
    assert first_chunk.wait(TIMEOUT), "the chat stream never started"
    workers = [threading.Thread(target=embedder, args=(k,)) for k in range(4)]
    for w in workers:
        w.start()
    for w in workers:
        w.join(4 * TIMEOUT)
    chat_thread.join(TIMEOUT)
    assert not any(w.is_alive() for w in workers) and not chat_thread.is_alive(), "a request did not end in time"
    assert not failures, failures[:5]
    assert stream["error"] is None, stream["error"]
    assert stream["done"] and stream["chunks"] > 1 and stream["finish"] in ("stop", "length"), stream


def test_the_step_feed_shows_embedding_tokens(embed_server):
    """The dashboard's feed (/debug/steps) carries each step's embedded texts and tokens."""
    seen: list[dict] = []
    with requests.get(embed_server.url + "/debug/steps", stream=True, timeout=TIMEOUT) as feed:
        sender = threading.Thread(target=lambda: vectors(embed_server.url, TEXTS[:4]))
        sender.start()
        deadline = time.time() + 60
        for line in feed.iter_lines():
            if line.startswith(b"data: "):
                step = json.loads(line[len(b"data: "):])
                seen.append(step)
                if step.get("embed_tokens", 0) > 0 or time.time() > deadline:
                    break
        sender.join(timeout=TIMEOUT)
    embedded = [s for s in seen if s.get("embed_tokens", 0) > 0]
    assert embedded, f"no step with embedding tokens among {len(seen)}"
    assert embedded[0]["embed_texts"] >= 1
    assert embedded[0]["embed_tokens"] >= embedded[0]["embed_texts"]


# The generation model as an embedder (--pooling): pooled final hidden states. Their accuracy
# is held to llama.cpp on tiny random-weight models (crates/braid-engine/tests/pooling.rs);
# here the real model answers through the real server and clients.


@pytest.fixture(scope="module")
def pooled_server():
    s = Server("--pooling", "last")
    yield s
    assert s.stop() == 0, s.log_text()


def test_the_generation_model_embeds_with_pooling(pooled_server):
    gen = generation_id(pooled_server.url)
    assert model_ids(pooled_server.url) == [gen]
    client = openai.OpenAI(base_url=pooled_server.url + "/v1", api_key="x", timeout=TIMEOUT)
    texts = [TEXTS[0], TEXTS[1], TEXTS[2]]
    r = client.embeddings.create(model=gen, input=texts)
    vs = [d.embedding for d in r.data]
    assert len(vs) == 3 and all(len(v) == 576 for v in vs)  # SmolLM2-135M's hidden size
    for v in vs:
        assert abs(math.sqrt(sum(x * x for x in v)) - 1.0) < 1e-4
    counts = [
        requests.post(pooled_server.url + "/tokenize", json={"prompt": t}, timeout=TIMEOUT).json()["count"] for t in texts
    ]
    assert r.usage.prompt_tokens == sum(counts)
    # A request that names no model embeds with the one model that does, and a text's vector
    # does not depend on what it is batched with (bit for bit: the forward is batch-invariant).
    plain = requests.post(pooled_server.url + "/v1/embeddings", json={"input": texts[1]}, timeout=TIMEOUT)
    assert plain.status_code == 200 and plain.json()["model"] == gen, plain.text
    alone = client.embeddings.create(model=gen, input=texts[1]).data[0].embedding
    assert alone == vs[1]
    assert cosine(vs[0], vs[2]) < 0.9999


def test_pooling_serves_chat_beside_embeddings(pooled_server):
    gen = generation_id(pooled_server.url)
    r = requests.post(
        pooled_server.url + "/v1/chat/completions",
        json={"model": gen, "messages": [{"role": "user", "content": PROMPTS[0]}], "max_tokens": 8},
        timeout=TIMEOUT,
    )
    assert r.status_code == 200 and r.json()["choices"][0]["message"]["content"]
    # No sentence model here: its id is a model this server does not have.
    r = embed(pooled_server.url, "hi", model="all-MiniLM-L6-v2")
    assert r.status_code == 404 and r.json()["error"]["code"] == "model_not_found", r.text
