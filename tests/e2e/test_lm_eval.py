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
