"""The CI variant of scripts/soak.sh: 60 seconds at 32 connections (completions and chat,
streaming and not) with no non-2xx answer besides 429, no client error, RSS growth under 5%
from the warm-up mark (15 s) to the end, and a steady ITL p99. The long run is
`scripts/soak.sh` (10 minutes by default); its figures are in docs/RELIABILITY.md."""

import json
import os
import subprocess

from conftest import BIN, MODEL, ROOT


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
    assert run.returncode == 0, run.stdout[-6000:] + run.stderr[-3000:]
    summary = json.loads(out.read_text())
    assert summary["requests"] > 100, summary
    assert all(summary["checks"].values()), summary["checks"]
    assert set(summary["status_codes"]) <= {"200", "429"}, summary["status_codes"]
