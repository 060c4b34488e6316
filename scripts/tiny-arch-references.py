#!/usr/bin/env python3
"""llama.cpp's greedy continuations and top-5 probabilities on the tiny random-weight GGUFs.

braid's architecture tests (crates/braid-model/tests/architectures.rs) write the same files at
test time and compare braid with what this script records in
crates/braid-model/tests/data/tiny-arch-references.json: the GGUFs are written by braid's own
writer (the write-tiny-gguf example), run by llama-server, and asked for a greedy continuation
of a fixed prompt of token ids with the top-5 probabilities of every step before sampling.

How far a wrong forward lands from the reference can be measured on a GGUF whose weights make
llama.cpp compute what that wrong forward would (biases zeroed, q/k rows permuted for the
other rope style, ...; the tiny-arch-variants example writes them): --compare runs llama.cpp
on it teacher-forced along the recorded tokens and prints each step's largest probability
difference on the reference's top 5, the quantity the test bounds.

Usage:
  scripts/tiny-arch-references.py [--llama-bin DIR] [--out FILE]
  scripts/tiny-arch-references.py --compare ARCH MODEL.gguf
"""

import argparse
import json
import math
import os
import shlex
import subprocess
import sys
import tempfile
import time
import urllib.request

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DEFAULT_BIN = "/root/.cache/llama-anchor/11434.0.0/build/bin"
DEFAULT_OUT = os.path.join(ROOT, "crates/braid-model/tests/data/tiny-arch-references.json")
ARCHES = ["llama", "llama3", "qwen2", "qwen3", "gemma3"]
SEED = 2026
# The writer's vocabulary puts byte b at id b + 3. 25 tokens: three times the gemma3 sliding
# window and more, so its windowed layers drop keys at every step.
PROMPT = [b + 3 for b in b"The quick brown fox jumps"]
N_PREDICT = 8
N_PROBS = 5
PORT = 18931


def server_command(llama_bin, model, port):
    return [
        os.path.join(llama_bin, "llama-server"),
        "-m", model,
        "--host", "127.0.0.1",
        "--port", str(port),
        "-c", "256",
        "-np", "1",
    ]


def request(port, path, body=None, timeout=60):
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(
        f"http://127.0.0.1:{port}{path}",
        data=data,
        headers={"Content-Type": "application/json"},
    )
    with urllib.request.urlopen(req, timeout=timeout) as r:
        return json.loads(r.read())


# Token whose text is one ASCII byte: forced as the sampled token (see step).
FORCED = 3 + ord("x")


def completion_body(prompt):
    # One token per request. n_probs without post_sampling_probs reports the softmax of the
    # raw logits over the whole vocabulary, before any sampler (logit_bias included), as
    # logprobs. The server drops the probabilities of a generated token whose text ends in an
    # incomplete UTF-8 sequence (half of this byte-level vocabulary), so the sampled token is
    # forced by logit_bias to an ASCII byte; the greedy token is the top of the raw
    # distribution, and it is appended to the prompt for the next step.
    return {
        "prompt": prompt,
        "n_predict": 1,
        "temperature": 0,
        "n_probs": N_PROBS,
        "logit_bias": [[FORCED, 1000.0]],
        "cache_prompt": False,
    }


class Server:
    """llama-server on `model`, on 127.0.0.1, stopped on exit."""

    def __init__(self, llama_bin, model, port):
        self.cmd = server_command(llama_bin, model, port)
        self.port = port

    def __enter__(self):
        self.log = tempfile.TemporaryFile()
        self.proc = subprocess.Popen(self.cmd, stdout=self.log, stderr=subprocess.STDOUT)
        deadline = time.time() + 60
        while True:
            if self.proc.poll() is not None:
                self.log.seek(0)
                sys.exit(f"llama-server exited:\n{self.log.read().decode(errors='replace')[-3000:]}")
            try:
                if request(self.port, "/health", timeout=2).get("status") == "ok":
                    return self
            except Exception:
                pass
            if time.time() > deadline:
                self.__exit__()
                sys.exit("llama-server did not become healthy in 60 s")
            time.sleep(0.2)

    def __exit__(self, *_):
        self.proc.terminate()
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()

    def complete(self, body):
        r = request(self.port, "/completion", body)
        # llama.cpp adds BOS to a prompt of ids when the vocabulary says add_bos_token; the
        # writer turns it off, and this checks that what was evaluated is the prompt as given.
        if r.get("tokens_evaluated") != len(body["prompt"]):
            sys.exit(f"llama.cpp evaluated {r.get('tokens_evaluated')} prompt tokens, "
                     f"not {len(body['prompt'])}")
        return r


def step(server, prompt, n_probs):
    """llama.cpp's (id, probability) of the `n_probs` likeliest next tokens after `prompt`."""
    body = completion_body(prompt)
    body["n_probs"] = n_probs
    r = server.complete(body)
    (p,) = r["completion_probabilities"]
    if p["id"] != FORCED:
        sys.exit(f"the forced token {FORCED} was not sampled: {p['id']}")
    return [[t["id"], math.exp(t["logprob"])] for t in p["top_logprobs"]]


def run_llama(llama_bin, model, port):
    """Greedy tokens and each step's top-5 (id, prob) from llama-server on `model`."""
    steps = []
    with Server(llama_bin, model, port) as server:
        for _ in range(N_PREDICT):
            top = step(server, PROMPT + [s["token"] for s in steps], N_PROBS)
            steps.append({"token": top[0][0], "top": top})
    return steps, server.cmd


def compare(llama_bin, port, arch, model, reference):
    """Teacher-forced along the reference's tokens: each step's largest difference of
    probability on the reference's top 5, and whether the top-1 changed."""
    steps = reference["architectures"][arch]["steps"]
    worst = 0.0
    with Server(llama_bin, model, port) as server:
        for i, ref in enumerate(steps):
            top = step(server, PROMPT + [s["token"] for s in steps[:i]], 100)
            probs = dict((t, p) for t, p in top)
            diff = max(abs(probs.get(t, 0.0) - q) for t, q in ref["top"])
            worst = max(worst, diff)
            print(f"step {i}: largest difference {diff:.4f}; top-1 {top[0][0]} {top[0][1]:.3f} "
                  f"(reference {ref['top'][0][0]} {ref['top'][0][1]:.3f})")
    print(f"{arch} {model}: largest difference {worst:.4f}")


def write_gguf(arch, path):
    subprocess.run(
        ["cargo", "run", "--release", "--quiet", "-p", "braid-model", "--example",
         "write-tiny-gguf", "--", arch, path, str(SEED)],
        cwd=ROOT,
        check=True,
    )


def dumps(out):
    """Indented JSON with the prompt and each step on one line."""
    prompt, out["prompt"] = out["prompt"], "@@prompt@@"
    for a in out["architectures"].values():
        for s in a["steps"]:
            s["top"] = [[t, round(p, 6)] for t, p in s["top"]]
    steps = {a: v["steps"] for a, v in out["architectures"].items()}
    for a in out["architectures"]:
        out["architectures"][a]["steps"] = f"@@{a}@@"
    text = json.dumps(out, indent=1)
    for a, v in steps.items():
        lines = ",\n    ".join(json.dumps(s) for s in v)
        text = text.replace(f'"@@{a}@@"', f"[\n    {lines}\n   ]")
    text = text.replace('"@@prompt@@"', json.dumps(prompt))
    return text + "\n"


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--llama-bin", default=DEFAULT_BIN)
    ap.add_argument("--out", default=DEFAULT_OUT)
    ap.add_argument("--port", type=int, default=PORT)
    ap.add_argument("--compare", nargs=2, metavar=("ARCH", "GGUF"),
                    help="compare llama.cpp on GGUF with the recorded reference of ARCH")
    args = ap.parse_args()

    if args.compare:
        with open(args.out) as f:
            reference = json.load(f)
        compare(args.llama_bin, args.port, *args.compare, reference)
        return

    version = subprocess.run(
        [os.path.join(args.llama_bin, "llama-server"), "--version"],
        capture_output=True, text=True,
    )
    version = (version.stdout + version.stderr).strip()
    out = {
        "about": "llama.cpp on the tiny random-weight GGUFs of braid_model::tiny_gguf::write_arch "
                 "(seed below): greedy tokens after the prompt and each step's top-5 token ids "
                 "with their probabilities before sampling. Written by "
                 "scripts/tiny-arch-references.py.",
        "llama_cpp_version": version,
        "command": None,
        "request": completion_body("<prompt and the greedy tokens so far>"),
        "gguf_command": "cargo run --release -p braid-model --example write-tiny-gguf -- "
                        f"{{arch}} tiny-{{arch}}.gguf {SEED}",
        "seed": SEED,
        "prompt": PROMPT,
        "architectures": {},
    }
    with tempfile.TemporaryDirectory() as tmp:
        for arch in ARCHES:
            path = os.path.join(tmp, f"tiny-{arch}.gguf")
            write_gguf(arch, path)
            steps, cmd = run_llama(args.llama_bin, path, args.port)
            out["command"] = " ".join(
                shlex.quote(c if c != path else f"tiny-{{arch}}.gguf") for c in cmd
            ) + "  # then, for each step, POST /completion with the request below"
            out["architectures"][arch] = {"steps": steps}
            tops = ", ".join(f"{s['top'][0][1]:.2f}/{s['top'][1][1]:.2f}" for s in steps)
            print(f"{arch}: tokens {[s['token'] for s in steps]}; top-1/top-2 {tops}")
    with open(args.out, "w") as f:
        f.write(dumps(out))
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
