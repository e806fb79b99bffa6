"""Smoke test of bench/metadata_apply.py: it runs and prints one row per step with a positive
cost (no figure is asserted: numbers belong to the bench)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def test_prints_a_row_per_step():
    proc = subprocess.run([sys.executable, str(REPO / "bench" / "metadata_apply.py")],
                          capture_output=True, text=True, timeout=120, cwd=REPO)  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-2000:]
    rows = [line.split("|")[1:-1] for line in proc.stdout.splitlines()
            if line.startswith("| ") and not line.startswith("| step")]  # fmt: skip
    assert [r[0].strip() for r in rows] == ["encode_batch", "decode_batches",
                                            "codec.decode_record",
                                            "QuorumController.handle_commit"]  # fmt: skip
    assert all(float(r[1]) > 0 and float(r[2]) > 0 for r in rows), rows
