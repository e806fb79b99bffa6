"""Smoke test of bench/raft.py: ``--quick`` runs all four parts end to end (real child
processes on loopback) and prints a parsable Markdown table for each."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tests.bench.tables import number, tables

REPO = Path(__file__).resolve().parents[2]

pytestmark = [pytest.mark.slow, pytest.mark.integration]


def test_quick_runs_and_prints_tables(tmp_path):
    proc = subprocess.run(
        [sys.executable, str(REPO / "bench" / "raft.py"), "--quick", "--dir", str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=400,  # a bound; ~60 s alone, far more beside other tests
        cwd=REPO,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    t = tables(proc.stdout)
    assert sorted(t) == ["a", "b", "c", "d"], proc.stdout
    assert "Method:" in proc.stdout
    # (a), (b): floor + linger 25 + linger 0 + Raft only (+ the bare replication floor in (b)),
    # each with records/s, p50, p99 and ratios
    for part, n in (("a", 4), ("b", 5)):
        names = [r[0] for r in t[part]]
        assert names[0] == "floor" and len(names) == n, names
        for row in t[part]:
            rps, p50, p99, ratio = (number(c) for c in row[1:5])
            assert rps > 0 and 0 < p50 <= p99 and ratio > 0, row
    # (c): one row per kill plus the p50/p99 row
    kills = [r for r in t["c"] if not r[0].startswith("*")]
    assert len(kills) >= 1 and all(number(r[1]) > 0 for r in kills)
    assert "p99" in t["c"][-1][0]
    # (d): ours (transfer, from start) and the floor, MB/s > 0
    assert len(t["d"]) == 3 and all(number(r[2]) > 0 for r in t["d"])
