"""Smoke test of bench/authorizer.py: it runs (its own check that the index and the scan answer
alike included) and prints its row with positive rates (no figure is asserted: numbers belong
to the bench)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def test_prints_the_indexed_and_scan_rates(tmp_path):
    out = tmp_path / "authorizer.json"  # not bench/results/: a test run is no measurement
    proc = subprocess.run(
        [sys.executable, str(REPO / "bench" / "authorizer.py"), "--acls", "2000", "--rounds", "1",
         "--seconds", "0.2", "--json", str(out)],
        capture_output=True, text=True, timeout=120, cwd=REPO,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-2000:]
    rows = [line.split("|")[1:-1] for line in proc.stdout.splitlines()
            if line.startswith("| ") and not line.startswith("| ACLs")]  # fmt: skip
    assert len(rows) == 1 and rows[0][0].strip() == "2,000", proc.stdout
    assert float(rows[0][1].replace(",", "")) > 0 and float(rows[0][2].replace(",", "")) > 0
    assert json.loads(out.read_text())["acls"] == 2000
