#!/usr/bin/env python3
"""Replaces the command-line blocks of README.md with the current `--help` texts (run after adding a flag)."""

import re
import subprocess
import sys
from pathlib import Path

root = Path(__file__).resolve().parents[1]
binary = sys.argv[1] if len(sys.argv) > 1 else str(root / "target" / "release" / "braid")
options = subprocess.run([binary, "serve", "--help"], capture_output=True, text=True, check=True).stdout.split("Options:", 1)[1]
readme = root / "README.md"
text = readme.read_text()
block = "## `braid serve` flags\n\n```text\n" + options.strip("\n") + "\n```"
new = re.sub(r"## `braid serve` flags\n\n```text\n.*?\n```", lambda _: block, text, count=1, flags=re.S)
others = []
for cmd in ("generate", "chat", "tokenize", "bench-engine", "info"):
    text = subprocess.run([binary, cmd, "--help"], capture_output=True, text=True, check=True).stdout
    others.append(f"<details><summary><code>braid {cmd}</code></summary>\n\n```text\n{text.strip()}\n```\n\n</details>")
for scenario in ("scaling", "interference", "poisson", "prefix-cache"):
    text = subprocess.run([binary, "bench", scenario, "--help"], capture_output=True, text=True, check=True).stdout
    others.append(f"<details><summary><code>braid bench {scenario}</code></summary>\n\n```text\n{text.strip()}\n```\n\n</details>")
reference = "## Other commands\n\n" + "\n\n".join(others) + "\n"
if "## Other commands" in new:
    new = re.sub(r"## Other commands\n.*?(?=\n## |\Z)", lambda _: reference, new, count=1, flags=re.S)
else:
    new = new.replace("\n## Docker", "\n" + reference + "\n## Docker", 1)
readme.write_text(new)
