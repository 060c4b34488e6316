#!/usr/bin/env python3
"""Token ids of a fixed list of strings, as llama.cpp's own server reads them, for braid's
tokenizer tests (crates/braid-model/tests/data/tokenizer-vectors-*.json).

llama.cpp is the reference braid is measured against: the accuracy gate of issue 11 asks for
token ids equal to llama.cpp's /tokenize. This script starts llama-server on 127.0.0.1 with the
given GGUF, asks /tokenize for every string twice (add_special false and true, parse_special
true: special tokens written in the text become their id) and /detokenize for the round trip,
then stops the server and writes JSON that records the llama.cpp version and the command.

    scripts/tokenizer-vectors.py --server PATH/TO/llama-server \
        --model models/SmolLM2-135M-Instruct.Q4_1.gguf --name smollm2
    scripts/tokenizer-vectors.py --server PATH/TO/llama-server \
        --model models/gemma-3-270m-q4_k_m.gguf --name gemma3

Standard library only.
"""

import argparse
import json
import os
import socket
import subprocess
import sys
import time
import urllib.request

# Strings every model is asked about: unicode (CJK, accents, combining marks, right-to-left),
# digits and numbers, code, runs of spaces/tabs/newlines, emoji, text starting with a space.
COMMON = [
    "Hello world!",
    "Hello, world! How are you today?",
    " leading space",
    "  two leading spaces",
    "trailing space ",
    "trailing spaces   ",
    "a  b   c    d",
    "tab\tseparated\tvalues",
    "\t\tindented with tabs",
    "line one\nline two\n\nline four",
    "\n\n\nthree newlines first",
    "ends with newlines\n\n",
    "mixed \t \n whitespace \r\n windows",
    "3.14159",
    "The year 2024 had 366 days.",
    "1234567890",
    "12345 + 67890 = 80235",
    "$1,000,000.00 and 99.9%",
    "phone: +1 (555) 123-4567",
    "café naïve résumé façade",
    "e\u0301 combining acute, n\u0303 tilde",
    "Ελληνικά κείμενο",
    "Привет, мир!",
    "日本語のテキストです。",
    "中文分词测试：你好，世界！",
    "한국어 문장입니다",
    "مرحبا بالعالم",
    "עברית טקסט",
    "हिन्दी पाठ",
    "emoji 🦀 and 🎉🎉",
    "family 👨\u200d👩\u200d👧 flag 🇫🇷",
    "def add(a, b):\n    return a + b\n",
    "fn main() {\n    println!(\"{}\", x * 2);\n}",
    "if (x != 0 && y <= 10) { z++; }",
    "<div class=\"a\">text</div>",
    "SELECT * FROM users WHERE id = 42;",
    "I'm sure you're right, we'll see. It's they've",
    "don't DON'T Don't",
    "snake_case camelCase PascalCase kebab-case",
    "https://example.com/path?query=1&b=2",
    "!!!???...,,,;;;",
    "    ",
    "a",
    "A.B.C.",
    "x" * 40,
    "ÅÄÖ åäö ØÆ øæ ß",
    "\u00a0non-breaking\u00a0spaces",
    "zero\u200bwidth",
]

SPECIAL = {
    "smollm2": [
        "<|im_start|>user\nHello!<|im_end|>\n<|im_start|>assistant\n",
        "text<|endoftext|>more",
        "<|im_end|>",
        " <|im_start|> spaced <|im_end|> ",
    ],
    "gemma3": [
        "<start_of_turn>user\nHello!<end_of_turn>\n<start_of_turn>model\n",
        "<bos>already has bos",
        "<bos><start_of_turn>user\nhi<end_of_turn>",
        "text<eos>more",
        "<end_of_turn>",
        "<table><tr><td>1</td></tr></table>",
        "<b>bold</b> and <code>x</code>",
        "<0x41> is not a byte token here",
        "<unused0> <mask> [multimodal]",
        "</s>",
    ],
}


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def post(port, path, body):
    req = urllib.request.Request(
        f"http://127.0.0.1:{port}{path}",
        data=json.dumps(body).encode(),
        headers={"Content-Type": "application/json"},
    )
    with urllib.request.urlopen(req, timeout=60) as r:
        return json.load(r)


def get(port, path):
    with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=60) as r:
        return r.read().decode()


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--server", required=True, help="llama-server binary")
    ap.add_argument("--model", required=True, help="GGUF file")
    ap.add_argument("--name", required=True, choices=sorted(SPECIAL), help="which string set")
    ap.add_argument("--out", help="output JSON (default: crates/braid-model/tests/data/tokenizer-vectors-NAME.json)")
    args = ap.parse_args()
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    out = args.out or os.path.join(
        root, "crates/braid-model/tests/data", f"tokenizer-vectors-{args.name}.json"
    )

    version = subprocess.run(
        [args.server, "--version"], capture_output=True, text=True
    )
    version = (version.stdout + version.stderr).strip().splitlines()
    version = next((l for l in version if l.startswith("version:")), " ".join(version))

    port = free_port()
    cmd = [args.server, "-m", args.model, "--host", "127.0.0.1", "--port", str(port), "-c", "512"]
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        for _ in range(600):
            try:
                if json.loads(get(port, "/health")).get("status") == "ok":
                    break
            except Exception:
                pass
            if proc.poll() is not None:
                sys.exit(f"llama-server exited with {proc.returncode}")
            time.sleep(0.5)
        else:
            sys.exit("llama-server did not become ready")
        props = json.loads(get(port, "/props"))
        vectors = []
        for text in COMMON + SPECIAL[args.name]:
            plain = post(port, "/tokenize", {"content": text, "add_special": False, "parse_special": True})
            special = post(port, "/tokenize", {"content": text, "add_special": True, "parse_special": True})
            back = post(port, "/detokenize", {"tokens": plain["tokens"]})
            vectors.append(
                {
                    "text": text,
                    "ids": plain["tokens"],
                    "ids_add_special": special["tokens"],
                    "detokenized": back["content"],
                }
            )
    finally:
        proc.terminate()
        proc.wait(timeout=30)

    doc = {
        "source": "llama.cpp llama-server /tokenize (parse_special true; ids: add_special false, "
        "ids_add_special: add_special true) and /detokenize of ids",
        "llama_cpp_version": version,
        "llama_cpp_build_info": props.get("build_info"),
        "model": os.path.basename(args.model),
        "command": " ".join(["scripts/tokenizer-vectors.py", "--server", "llama-server",
                             "--model", os.path.relpath(args.model, root), "--name", args.name]),
        "server_command": " ".join(["llama-server", "-m", os.path.basename(args.model),
                                    "--host", "127.0.0.1", "--port", "PORT", "-c", "512"]),
        "vectors": vectors,
    }
    with open(out, "w", encoding="utf-8") as f:
        json.dump(doc, f, ensure_ascii=False, indent=1)
        f.write("\n")
    print(f"{len(vectors)} vectors -> {out}", file=sys.stderr)


if __name__ == "__main__":
    main()
