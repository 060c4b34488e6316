#!/usr/bin/env python3
"""Replaces the flags block of README.md with the current `braid serve --help` (run after adding a flag)."""

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
readme.write_text(new)
