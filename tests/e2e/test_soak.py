"""The CI variant of scripts/soak.sh: 60 seconds at 32 connections (completions and chat,
streaming and not) with no non-2xx answer besides 429, no client error, RSS growth under 5%
from the warm-up mark (15 s) to the end. Its ITL p99 and request count are printed: they measure
speed, which the machine's other load decides as much as braid does. The long run is
`scripts/soak.sh` (10 minutes by default); its figures are in docs/RELIABILITY.md."""

import json
import os
import subprocess

import pytest

from conftest import BIN, MODEL, ROOT

# 32 connections keep both cores busy for a minute, and the RSS growth it checks should be
# braid's own: no other test runs meanwhile.
pytestmark = pytest.mark.alone


def test_sixty_second_soak(tmp_path):
    out = tmp_path / "soak.json"
    run = subprocess.run(
        [str(ROOT / "scripts" / "soak.sh"), "--duration", os.environ.get("BRAID_SOAK_SECS", "60"), "--warmup", "15", "--interval", "5", "--out", str(out)],
        capture_output=True,
        text=True,
        timeout=400,
        env={**os.environ, "BRAID_BIN": BIN, "BRAID_MODEL": MODEL},
        cwd=ROOT,
    )
    print(run.stdout[-4000:])
    assert out.exists(), run.stdout[-6000:] + run.stderr[-3000:]
    summary = json.loads(out.read_text())
    # soak.sh also fails a run whose ITL p99 rises over its second half (its exit status says
    # only that some check failed); a busy machine does that with no fault of braid's, so here
    # the figures are printed, not asserted, and so is the request count, which is a speed.
    checks = {name: ok for name, ok in summary["checks"].items() if not name.startswith("ITL p99")}
    assert all(checks.values()), summary["checks"]
    assert summary["status_codes"].get("200", 0) > 0, summary
    assert set(summary["status_codes"]) <= {"200", "429"}, summary["status_codes"]
