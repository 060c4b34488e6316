#!/usr/bin/env python3
"""llama.cpp's embeddings of the tiny random-weight GGUFs, for braid's `--pooling` test.

braid's pooling test (crates/braid-engine/tests/pooling.rs) writes the same tiny GGUFs at test
time, embeds a fixed prompt of token ids with the generation model's final hidden states
pooled (mean, last, cls) and normalised, and compares each vector with what this script
records from llama.cpp's `llama-server --embedding --pooling P` on the same file, in
crates/braid-engine/tests/data/tiny-pooling-references.json.

Usage: scripts/tiny-pooling-references.py [--llama-bin DIR] [--out FILE]
(a llama.cpp build, run by hand, never by the tests; the files come from the write-tiny-gguf example)
"""

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
import urllib.request

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DEFAULT_BIN = "/root/.cache/llama-anchor/11434.0.0/build/bin"
DEFAULT_OUT = os.path.join(ROOT, "crates/braid-engine/tests/data/tiny-pooling-references.json")
ARCHES = ["llama", "qwen3", "gemma3"]
POOLINGS = ["mean", "last", "cls"]
SEED = 2026
# The writer's vocabulary puts byte b at id b + 3.
PROMPT = [b + 3 for b in b"The quick brown fox jumps over the lazy dog"]
PORT = 18932


def request(path, body=None, timeout=60):
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(f"http://127.0.0.1:{PORT}{path}", data=data, headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=timeout) as r:
        return json.loads(r.read())


def embed(llama_bin, model, pooling):
    cmd = [os.path.join(llama_bin, "llama-server"), "-m", model, "--host", "127.0.0.1", "--port", str(PORT),
           "-c", "256", "-np", "1", "-t", "2", "--embedding", "--pooling", pooling]
    with tempfile.TemporaryFile() as log:
        proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT)
        try:
            deadline = time.time() + 60
            while True:
                if proc.poll() is not None:
                    log.seek(0)
                    sys.exit(f"llama-server exited:\n{log.read().decode(errors='replace')[-3000:]}")
                try:
                    if request("/health", timeout=2).get("status") == "ok":
                        break
                except Exception:
                    pass
                if time.time() > deadline:
                    sys.exit("llama-server did not become healthy in 60 s")
                time.sleep(0.2)
            r = request("/v1/embeddings", {"input": PROMPT})
            if r["usage"]["prompt_tokens"] != len(PROMPT):
                sys.exit(f"llama.cpp read {r['usage']['prompt_tokens']} tokens, not the {len(PROMPT)} given")
            return [round(x, 7) for x in r["data"][0]["embedding"]]
        finally:
            proc.terminate()
            proc.wait(timeout=10)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--llama-bin", default=DEFAULT_BIN)
    ap.add_argument("--out", default=DEFAULT_OUT)
    a = ap.parse_args()
    out = {"made_by": "scripts/tiny-pooling-references.py", "seed": SEED, "prompt": PROMPT, "embeddings": {}}
    with tempfile.TemporaryDirectory() as tmp:
        for arch in ARCHES:
            path = os.path.join(tmp, f"{arch}.gguf")
            subprocess.run(["cargo", "run", "--quiet", "--release", "-p", "braid-model", "--example", "write-tiny-gguf",
                            "--", arch, path, str(SEED)], check=True, cwd=ROOT)
            out["embeddings"][arch] = {p: embed(a.llama_bin, path, p) for p in POOLINGS}
            print(f"{arch}: {len(out['embeddings'][arch]['mean'])} dimensions", file=sys.stderr)
    os.makedirs(os.path.dirname(a.out), exist_ok=True)
    with open(a.out, "w") as f:
        json.dump(out, f, indent=1)
        f.write("\n")
    print(f"wrote {a.out}", file=sys.stderr)


if __name__ == "__main__":
    main()
