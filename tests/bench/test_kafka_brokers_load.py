"""The pieces of ``kafka-rpc bench --kafka-brokers N`` (bench/kafka_brokers.py, the launcher, and
bench/spark_kafka_load.py, the PySpark job), without JVMs: the batches' records, the per-key check
the Spark read applies (each kind of fault it must catch), the connector version choice, the
summary, report and plot of a run, and the command line. The full run (three controllers, three
Kafka brokers, Spark, two kills) takes minutes on this machine; its figures are in
docs/kafka-brokers.md.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from bench import kafka_brokers as kb  # noqa: E402
from bench import spark_kafka_load as job  # noqa: E402


def test_batch_rows_give_each_key_a_rising_sequence():
    rows = job.batch_rows(3, keys=4, per_key=5)
    assert len(rows) == 20
    for k in range(4):
        seqs = [s for key, s, _v in rows if key == f"k{k}"]
        assert seqs == list(range(15, 20))
    assert all(v == f"{key}:{s}" for key, s, v in rows)
    # the next batch continues every key's sequence
    assert min(s for _k, s, _v in job.batch_rows(4, 4, 5)) == 20


def _read(batches, per_key, partition=0):
    """(partition, offset, seq) of one key when every record of ``batches`` is there once."""
    seqs = [b * per_key + j for b in sorted(batches) for j in range(per_key)]
    return [(partition, i, s) for i, s in enumerate(seqs)]


def test_check_key_clean():
    c = job.check_key(_read({0, 1, 2}, 3), acked={0, 1, 2}, attempted={0, 1, 2}, per_key=3)
    assert c == {
        "read": 9,
        "acked_records": 9,
        "lost": 0,
        "duplicates": 0,
        "out_of_order": 0,
        "unexpected": 0,
        "partitions": 1,
    }
    assert job.merge_checks({"k0": c})["passed"]


def test_check_key_a_failed_batch_may_be_there_or_not():
    for read in (_read({0, 2}, 3), _read({0, 1, 2}, 3)):
        c = job.check_key(read, acked={0, 2}, attempted={0, 1, 2}, per_key=3)
        assert c["lost"] == c["unexpected"] == 0, c
        assert job.merge_checks({"k0": c})["passed"]


@pytest.mark.parametrize(
    ("mutate", "field"),
    [
        (lambda r: r[:4] + r[5:], "lost"),  # an acknowledged record missing
        (lambda r: [*r, (0, 99, r[2][2])], "duplicates"),  # one seq read twice
        (
            lambda r: [(p, o, r[1][2] if o == 0 else r[0][2] if o == 1 else s) for p, o, s in r],
            "out_of_order",
        ),  # two records swapped
        (lambda r: [*r, (0, 99, 50)], "unexpected"),  # a seq of no batch
        (lambda r: [(1 if o >= 6 else p, o, s) for p, o, s in r], "partitions"),  # split
    ],
)
def test_check_key_detects(mutate, field):
    read = mutate(_read({0, 1, 2}, 3))
    c = job.check_key(read, acked={0, 1, 2}, attempted={0, 1, 2}, per_key=3)
    assert c[field] >= (2 if field == "partitions" else 1), c
    assert not job.merge_checks(
        {"k0": c, "k1": job.check_key(_read({0, 1, 2}, 3), {0, 1, 2}, {0, 1, 2}, 3)}
    )["passed"]


def test_a_key_never_read_loses_everything_acknowledged():
    c = job.check_key((), acked={0, 1}, attempted={0, 1}, per_key=4)
    assert c["lost"] == 8 and not job.merge_checks({"k0": c})["passed"]


def test_nothing_acknowledged_does_not_pass():
    c = job.check_key((), acked=set(), attempted={0}, per_key=4)
    assert not job.merge_checks({"k0": c})["passed"]


def test_connector_version():
    central = ["3.5.1", "4.0.0", "4.1.0-preview3", "4.1.1", "4.2.0-preview5", "4.2.0"]
    assert kb.connector_version("4.2.0", central) == "4.2.0"
    # a PySpark newer than any connector on Maven Central: the newest release of its major
    assert kb.connector_version("4.3.0", central) == "4.2.0"
    assert kb.connector_version("4.1.3", central) == "4.1.1"
    assert kb.connector_version("5.0.0", central) is None
    assert kb.connector_version("3.4.0", central) is None


def test_scala_binary_version(tmp_path):
    (tmp_path / "jars").mkdir()
    (tmp_path / "jars" / "scala-library-2.13.18.jar").write_bytes(b"")
    assert kb.scala_binary_version(tmp_path) == "2.13"
    with pytest.raises(RuntimeError):
        kb.scala_binary_version(tmp_path / "nowhere")


def _run(tmp_path, fail_batch=None, lost=0):
    batches = []
    t = 1000.0
    for b in range(20):
        took = 2.5 if b == 8 else 0.2  # the controller's kill at 1004 stalls batch 8
        batches.append(
            {
                "batch": b,
                "records": 100,
                "start": t,
                "end": t + took,
                "ok": b != fail_batch,
                "error": None if b != fail_batch else "x",
            }
        )
        t += took + 0.3
    events = [
        {"event": "kill_controller", "t": 1004.1, "node": 2},
        {"event": "new_controller", "t": 1005.0, "node": 3},
        {"event": "restart_controller", "t": 1009.1, "node": 2},
        {"event": "kill_broker", "t": 1008.0, "node": 12},
        {"event": "restart_broker", "t": 1013.0, "node": 12},
        {"event": "broker_running", "t": 1015.0, "node": 12},
    ]
    acked = sum(1 for b in batches if b["ok"]) * 100
    load = {
        "batches": batches,
        "spark": "4.3.0",
        "producer": job.PRODUCER,
        "verification": {
            "read": acked,
            "acked_records": acked,
            "lost": lost,
            "duplicates": 0,
            "out_of_order": 0,
            "unexpected": 0,
            "keys_in_two_partitions": 0,
            "passed": lost == 0,
        },
    }
    results = {
        "connector": "org.apache.spark:spark-sql-kafka-0-10_2.13:4.2.0",
        "pyspark": "4.3.0",
        "spark_master": "local[2]",
        "events": events,
        "load": load,
        "cluster": {
            "brokers": 3,
            "kafka": "4.4.0",
            "controllers": 3,
            "topic": "t",
            "partitions": 6,
            "replication_factor": 3,
            "min_insync_replicas": 2,
        },
    }
    results["summary"] = kb.summarize(load, events)
    return results


def test_summary_report_and_plot(tmp_path):
    results = _run(tmp_path)
    s = results["summary"]
    assert s["passed"] and s["batches"] == 20 and s["records_acked"] == 2000
    assert s["batch_write_max_s"] == pytest.approx(2.5)
    assert s["kills"]["kill_controller"]["node"] == 2
    assert s["kills"]["kill_controller"]["stall_s"] == pytest.approx(2.5)
    assert s["kills"]["kill_broker"]["stall_s"] == pytest.approx(0.2)
    assert s["warmup_s"] == pytest.approx(0.2) and s["records_per_s"] > 0
    assert s["kills"]["kill_broker"]["node"] == 12
    per_s = kb.series(results["load"])
    assert sum(n for _s, n in per_s) == 2000 and any(n == 0 for _s, n in per_s)
    paths = kb.write_all(results, tmp_path)
    assert Path(paths["throughput"]).stat().st_size > 10_000
    md = Path(paths["report"]).read_text()
    assert (
        "**PASSED**" in md
        and "kill controller (node 2)" in md
        and "2.50" in md
        and "kill_broker node 12" in md
    )
    assert json.loads(Path(paths["results"]).read_text())["plots"]["throughput"]


def test_report_again_from_results_json(tmp_path):
    results = _run(tmp_path)
    results["args"] = {"kill_controller_at": 4.0, "kill_broker_at": -1}
    paths = kb.write_all(results, tmp_path)
    (tmp_path / "report.md").unlink()
    again = kb.regenerate(Path(paths["results"]))
    assert Path(again["report"]).read_text().count("**PASSED**") == 1
    assert json.loads(Path(again["results"]).read_text())["summary"] == results["summary"]
    assert kb.planned_kills(results["args"]) == ("kill_controller",)
    assert kb.planned_kills({"kill_controller_at": 1, "kill_broker_at": 2}) == (
        "kill_controller",
        "kill_broker",
    )


def test_summary_fails_on_a_failed_batch_a_loss_or_a_missing_kill(tmp_path):
    assert not _run(tmp_path, fail_batch=3)["summary"]["passed"]
    assert not _run(tmp_path, lost=1)["summary"]["passed"]
    r = _run(tmp_path)
    events = [e for e in r["events"] if e["event"] != "kill_broker"]
    assert not kb.summarize(r["load"], events)["passed"]
    assert kb.summarize(r["load"], events, planned=("kill_controller",))["passed"]
    late = [dict(e, t=e["t"] + 100) if e["event"] == "kill_broker" else e for e in r["events"]]
    s = kb.summarize(r["load"], late)
    assert not s["kills"]["kill_broker"]["during_write"] and not s["passed"]


def test_command_line(tmp_path):
    args = kb.parse_args(["--duration", "30", "--", "--keys", "8"])
    assert args.kill_controller_at == 10 and args.kill_broker_at == 20
    assert args.load_args == ["--keys", "8"]
    cmd = kb.spark_command(args, "g:a:1", "127.0.0.1:1", tmp_path)
    assert cmd[cmd.index("--packages") + 1] == "g:a:1"
    assert cmd[-2:] == ["--keys", "8"] and str(REPO / "bench" / "spark_kafka_load.py") in cmd
    # the job's own options parse what the launcher passes
    j = job.parse_args(cmd[cmd.index(str(REPO / "bench" / "spark_kafka_load.py")) + 1 :])
    assert (j.bootstrap, j.duration, j.keys) == ("127.0.0.1:1", 30.0, 8)
    r = subprocess.run(
        [sys.executable, "-m", "kafka_rpc.cli", "bench", "--kafka-brokers", "0"],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=REPO,
    )
    assert r.returncode == 2 and "at least 1" in r.stderr


def test_cli_passes_its_options_to_the_launcher(monkeypatch):
    from kafka_rpc import cli

    seen = []
    monkeypatch.setattr(subprocess, "call", lambda cmd, env=None: seen.append(cmd) or 0)
    argv = ["bench", "--kafka-brokers", "3", "--duration", "30", "--no-kill",
            "--restart-after", "2", "--out", "/tmp/x", "--", "--keys", "8"]  # fmt: skip
    assert cli.main(argv) == 0
    (cmd,) = seen
    assert cmd[1] == str(REPO / "bench" / "kafka_brokers.py")
    args = kb.parse_args(cmd[2:])
    assert (args.brokers, args.duration, args.restart_after, args.out) == (3, 30.0, 2.0, "/tmp/x")
    assert kb.planned_kills(vars(args)) == () and args.load_args == ["--keys", "8"]
    seen.clear()
    assert cli.main(["bench", "--kafka-brokers", "3", "--kill-at", "7"]) == 0
    args = kb.parse_args(seen[0][2:])
    assert (args.kill_controller_at, args.kill_broker_at) == (7.0, 40.0)
