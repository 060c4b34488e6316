#!/usr/bin/env python3
"""Rewrites the generated part of docs/CLI.md, from `## \`braid serve\` flags` to the end, with the
binary's current `--help` texts (run after adding or changing a flag; tests/e2e/test_docs.py
fails while the page lacks a flag or a default). The text above that heading is kept as written."""

import re
import subprocess
import sys
from pathlib import Path

root = Path(__file__).resolve().parents[1]
binary = sys.argv[1] if len(sys.argv) > 1 else str(root / "target" / "release" / "braid")
page = root / "docs" / "CLI.md"
MARKER = "## `braid serve` flags"


def help_text(*args: str) -> str:
    text = subprocess.run([binary, *args, "--help"], capture_output=True, text=True, check=True).stdout.strip("\n")
    # clap names the program after the file it was run as; the page names it `braid`.
    return re.sub(r"^Usage: \S+", "Usage: braid", text, flags=re.M)


def details(title: str, text: str) -> str:
    return f"<details><summary><code>{title}</code></summary>\n\n```text\n{text}\n```\n\n</details>"


preamble = page.read_text().split(MARKER, 1)[0]
serve_options = help_text("serve").split("Options:", 1)[1].strip("\n")
others = [details(f"braid {cmd}", help_text(cmd)) for cmd in ("generate", "chat", "tokenize", "bench-engine", "info")]
others += [details(f"braid bench {scenario}", help_text("bench", scenario)) for scenario in ("scaling", "interference", "poisson", "prefix-cache")]
generated = (
    f"{MARKER}\n\n```text\n{serve_options}\n```\n\n"
    "`RUST_LOG` sets the log level (`info` by default); every finished request logs one line with\n"
    "its id, prompt and output tokens, queue time, TTFT, e2e time and finish reason.\n\n"
    "## Other commands\n\n" + "\n\n".join(others) + "\n"
)
page.write_text(preamble + generated)
