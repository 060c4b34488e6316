"""The docs stay true to the binary and to themselves: docs/CLI.md lists `braid serve --help`
verbatim, and every relative link in the README and docs/ leads to a file that exists."""

import re
import subprocess

from conftest import BIN, ROOT


def test_cli_reference_lists_every_serve_flag_with_its_default():
    help_text = subprocess.run([BIN, "serve", "--help"], capture_output=True, text=True, check=True).stdout
    page = (ROOT / "docs" / "CLI.md").read_text()
    flags = set(re.findall(r"^\s+(?:-\w, )?(--[a-z0-9-]+)", help_text, re.M)) - {"--help"}
    assert len(flags) > 10
    missing = sorted(f for f in flags if f not in page)
    assert not missing, f"docs/CLI.md lacks {missing}; run scripts/update-cli-reference.py"
    for default in re.findall(r"\[default: ([^\]]+)\]", help_text):
        assert default in page, f"docs/CLI.md lacks the default {default!r}"


def test_readme_and_docs_links_lead_to_files():
    pages = [ROOT / "README.md", ROOT / "CONTRIBUTING.md", *sorted((ROOT / "docs").glob("*.md")), ROOT / "docs" / "benchmarks" / "HISTORY.md"]
    broken, checked = [], 0
    for page in pages:
        for target in re.findall(r"\]\(([^)\s]+)\)", page.read_text()):
            path = target.split("#", 1)[0]
            if not path or re.match(r"[a-z]+:", path):
                continue
            checked += 1
            if not (page.parent / path).exists():
                broken.append(f"{page.relative_to(ROOT)}: {target}")
    assert checked > 50, f"found only {checked} relative links: is the pattern still right?"
    assert not broken, f"links to missing files: {broken}"
