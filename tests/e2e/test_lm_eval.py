"""lm-evaluation-harness (`lm-eval` from PyPI, its `local-completions` model) scores a small
multiple-choice task from tests/e2e/data/lm_eval against braid: it finds braid's tokenizer through
/tokenizer_info and /tokenize, and scores every choice with `echo` + `logprobs`, four prompts
per request (`--batch_size 4`). Its per-item
loglikelihoods must be the ones braid's own echo + logprobs answers give."""

import glob
import json
import math
import os
import subprocess
import sys
from pathlib import Path

import requests

DATA = Path(__file__).parent / "data" / "lm_eval"
LM_EVAL = Path(sys.executable).parent / "lm_eval"


def tokens(url: str, text: str) -> list[int]:
    r = requests.post(url + "/tokenize", json={"prompt": text, "add_special_tokens": False}, timeout=30)
    assert r.status_code == 200, r.text
    return r.json()["tokens"]


def braid_loglikelihood(url: str, context: str, continuation: str) -> tuple[float, bool]:
    """The continuation's summed logprob, and whether each of its tokens was the top one, from one
    echo + logprobs request with max_tokens 0 (lm-eval splits the tokens the same way)."""
    whole = tokens(url, context + continuation)
    n_ctx = len(tokens(url, context))
    r = requests.post(
        url + "/v1/completions",
        json={"prompt": whole, "max_tokens": 0, "echo": True, "logprobs": 1, "temperature": 0},
        timeout=120,
    )
    assert r.status_code == 200, r.text
    lp = r.json()["choices"][0]["logprobs"]
    scored = lp["token_logprobs"][n_ctx:]
    greedy = all(t == max(top.values()) for t, top in zip(scored, lp["top_logprobs"][n_ctx:]))
    return sum(scored), greedy


def test_lm_eval_scores_a_local_task_with_braids_own_logprobs(server, tmp_path):
    model = requests.get(server.url + "/v1/models", timeout=10).json()["data"][0]["id"]
    args = ",".join([
        f"model={model}",
        f"base_url={server.url}/v1/completions",
        "tokenizer_backend=remote",
        "tokenized_requests=True",
        "num_concurrent=2",
        "max_retries=1",
        "max_length=2048",
    ])
    env = {**os.environ, "HF_DATASETS_OFFLINE": "1", "HF_HUB_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false"}
    run = subprocess.run(
        [str(LM_EVAL), "run", "--model", "local-completions", "--model_args", args, "--tasks", "braid_mc",
         "--include_path", str(DATA), "--batch_size", "4", "--log_samples", "--output_path", str(tmp_path)],
        cwd=DATA, env=env, capture_output=True, text=True, timeout=900,
    )
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-5000:]
    [results] = glob.glob(str(tmp_path / "**" / "results_*.json"), recursive=True)
    acc = json.loads(Path(results).read_text())["results"]["braid_mc"]["acc,none"]
    print(f"lm-eval braid_mc acc = {acc:.3f}")
    [samples] = glob.glob(str(tmp_path / "**" / "samples_braid_mc_*.jsonl"), recursive=True)
    items = [json.loads(line) for line in Path(samples).read_text().splitlines()]
    assert len(items) == 8
    for item in items:
        for args_, (theirs, their_greedy) in zip(item["arguments"].values(), item["filtered_resps"]):
            context, continuation = args_["arg_0"], args_["arg_1"]
            ours, our_greedy = braid_loglikelihood(server.url, context, continuation)
            assert math.isclose(float(theirs), ours, abs_tol=1e-3), (context, continuation, theirs, ours)
            assert str(their_greedy) == str(our_greedy), (context, continuation)


def test_vllm_prompt_logprobs_match_the_echo_scores(server):
    """vLLM's `prompt_logprobs` shape carries the same scores as `echo` + `logprobs`, with each
    prompt token's rank and the alternatives asked for; chat has them once, at the top."""
    prompt = "The capital of France is Paris, and the capital of Italy is"
    echo = requests.post(
        server.url + "/v1/completions",
        json={"prompt": prompt, "max_tokens": 0, "echo": True, "logprobs": 3, "temperature": 0},
        timeout=120,
    ).json()["choices"][0]["logprobs"]
    r = requests.post(
        server.url + "/v1/completions",
        json={"prompt": prompt, "max_tokens": 2, "prompt_logprobs": 3, "temperature": 0, "n": 2},
        timeout=120,
    )
    assert r.status_code == 200, r.text
    ids = tokens(server.url, prompt)
    for choice in r.json()["choices"]:
        assert choice["logprobs"] is None
        plp = choice["prompt_logprobs"]
        assert len(plp) == len(ids) and plp[0] is None
        for i, (token, entries) in enumerate(zip(ids[1:], plp[1:]), start=1):
            own = entries[str(token)]
            assert math.isclose(own["logprob"], echo["token_logprobs"][i], abs_tol=1e-4), i
            assert own["decoded_token"] == echo["tokens"][i]
            ranks = sorted(e["rank"] for e in entries.values())
            assert ranks[:3] == [1, 2, 3] and len(entries) in (3, 4), entries
            assert (own["rank"] == 1) == (echo["token_logprobs"][i] >= max(echo["top_logprobs"][i].values()) - 1e-6)
    chat = requests.post(
        server.url + "/v1/chat/completions",
        json={"messages": [{"role": "user", "content": "Hi"}], "max_tokens": 2, "prompt_logprobs": 0},
        timeout=120,
    ).json()
    rendered = requests.post(server.url + "/tokenize", json={"messages": [{"role": "user", "content": "Hi"}]}, timeout=30).json()
    assert len(chat["prompt_logprobs"]) == rendered["count"]
    assert all(len(e) == 1 for e in chat["prompt_logprobs"][1:])
    refused = requests.post(
        server.url + "/v1/completions", json={"prompt": "a", "prompt_logprobs": 1, "stream": True}, timeout=30
    )
    assert refused.status_code == 400 and refused.json()["error"]["param"] == "prompt_logprobs"
