"""The README documents every `braid serve` flag (it lists `braid serve --help` verbatim)."""

import re
import subprocess

from conftest import BIN, ROOT


def test_readme_lists_every_serve_flag_with_its_default():
    help_text = subprocess.run([BIN, "serve", "--help"], capture_output=True, text=True, check=True).stdout
    readme = (ROOT / "README.md").read_text()
    flags = set(re.findall(r"^\s+(?:-\w, )?(--[a-z0-9-]+)", help_text, re.M)) - {"--help"}
    assert len(flags) > 10
    missing = sorted(f for f in flags if f not in readme)
    assert not missing, f"README lacks {missing}; run scripts/update-readme-flags.py"
    for default in re.findall(r"\[default: ([^\]]+)\]", help_text):
        assert default in readme, f"README lacks the default {default!r}"
