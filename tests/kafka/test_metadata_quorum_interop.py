"""`kafka-rpc metadata-quorum` prints what Kafka 4.4's `kafka-metadata-quorum` prints: for
add-controller / remove-controller on the same controller properties file, the dry runs' lines
and the refusals' messages (neither sends a request, so no quorum is needed); for describe
--status / --replication on our node, the same lines (the replication timestamps aside)."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import time

import pytest

from kafka_rpc.storage import meta_properties
from tests.kafka import peer

pytestmark = pytest.mark.kafka

DIR_ID = "ukQq6BGlRFu4HJt6cG3Obg"
WHERE = ("--bootstrap-controller", "127.0.0.1:9")  # nothing listens: nothing may be sent


def ours(*args):
    return subprocess.run([sys.executable, "-m", "kafka_rpc.cli", "metadata-quorum", *WHERE,
                           *args], capture_output=True, text=True, timeout=60)  # fmt: skip


def kafkas(version, *args):
    return peer.run_tool(version, "kafka-metadata-quorum", *WHERE, *args, timeout=60,
                         check=False)  # fmt: skip


def _message(stderr: str) -> str:
    """The tool's own first line, past the admin client's log lines (``[<date> ...] WARN ...``)."""
    return next(ln for ln in stderr.splitlines() if ln and not re.match(r"\[\d{4}-", ln))


def _properties(tmp_path, name, **props) -> str:
    meta = tmp_path / "meta"
    if not (meta / "meta.properties").exists():
        meta_properties.write(meta, meta_properties.MetaProperties(1, "c", 4, DIR_ID))
    base = {"process.roles": "controller", "node.id": "4", "log.dirs": f"{meta},{tmp_path}/b",
            "controller.listener.names": "CONTROLLER,C2",
            "listeners": "CONTROLLER://:19097,C2://[::1]:19098",
            "advertised.listeners": "CONTROLLER://ctl.example:29097"}  # fmt: skip
    base.update(props)
    path = tmp_path / f"{name}.properties"
    path.write_text("".join(f"{k}={v}\n" for k, v in base.items() if v is not None))
    return str(path)


def test_dry_runs_print_kafkas_lines(kafka_newest, tmp_path):
    cfg = _properties(tmp_path, "ok")
    theirs = kafkas(kafka_newest, "--command-config", cfg, "add-controller", "--dry-run")
    mine = ours("--command-config", cfg, "add-controller", "--dry-run")
    assert theirs.returncode == mine.returncode == 0, (theirs.stderr, mine.stderr)
    assert mine.stdout == theirs.stdout and "C2://[::1]:19098" in mine.stdout, theirs.stdout
    args = ("remove-controller", "--controller-id", "4", "--controller-directory-id", DIR_ID,
            "--dry-run")  # fmt: skip
    theirs, mine = kafkas(kafka_newest, *args), ours(*args)
    assert theirs.returncode == mine.returncode == 0
    assert mine.stdout == theirs.stdout


@pytest.mark.parametrize(
    "props",
    [
        {"node.id": None},
        {"node.id": "-1"},
        {"process.roles": "broker"},
        {"log.dirs": None},
        {"controller.listener.names": "OTHER"},
        {"controller.listener.names": None},
        {"metadata.log.dir": "/nonexistent/kafka-rpc-meta"},
    ],
)
def test_add_controller_refusals_are_kafkas(kafka_newest, tmp_path, props):
    cfg = _properties(tmp_path, "bad", **props)
    theirs = kafkas(kafka_newest, "--command-config", cfg, "add-controller", "--dry-run")
    mine = ours("--command-config", cfg, "add-controller", "--dry-run")
    assert theirs.returncode == mine.returncode == 1
    assert mine.stderr.strip() == _message(theirs.stderr), theirs.stderr


@pytest.mark.parametrize("args", [("-i", "-2", "-d", DIR_ID), ("-i", "2", "-d", "AAAA"),
                                  ("-i", "2", "-d", "A" * 30)])  # fmt: skip
def test_remove_controller_refusals_are_kafkas(kafka_newest, args):
    theirs = kafkas(kafka_newest, "remove-controller", *args, "--dry-run")
    mine = ours("remove-controller", *args, "--dry-run")
    assert theirs.returncode == mine.returncode == 1
    assert mine.stderr.strip() == _message(theirs.stderr), theirs.stderr


def test_describe_prints_what_kafkas_tool_prints(kafka_newest, tmp_path, procs):
    bport, cport = peer.free_port(), peer.free_port()
    node = peer.RpcNode("ours", tmp_path / "r", {
        "process.roles": "broker,controller", "node.id": 1,
        "listeners": f"PLAINTEXT://127.0.0.1:{bport},CONTROLLER://127.0.0.1:{cport}",
        "controller.listener.names": "CONTROLLER",
        "controller.quorum.voters": f"1@127.0.0.1:{cport}",
        "log.dirs": tmp_path / "data",
        "metadata.max.idle.interval.ms": 0,  # no NoOpRecords: the numbers stay put
    })  # fmt: skip
    procs.append(node)
    node.start()
    node.wait_started(90)
    where = ("--bootstrap-controller", f"127.0.0.1:{cport}")

    def both(*args):
        theirs = peer.run_tool(kafka_newest, "kafka-metadata-quorum", *where, *args, timeout=60)
        mine = subprocess.run([sys.executable, "-m", "kafka_rpc.cli", "metadata-quorum", *where,
                               *args], capture_output=True, text=True, timeout=60)  # fmt: skip
        assert mine.returncode == 0, mine.stderr
        return theirs.stdout, mine.stdout

    t0 = time.monotonic()
    while True:  # until the high watermark stops moving (registrations done)
        theirs, mine = both("describe", "--status")
        if theirs == mine or time.monotonic() - t0 > 60:
            break
        time.sleep(1)
    assert mine == theirs
    theirs, mine = both("describe", "--replication")

    def masked(table: str) -> list[list[str]]:  # the two timestamps move with every fetch
        rows = [ln.split("\t") for ln in table.splitlines()]
        return [r[:4] + ["ts", "ts"] + r[6:] if i else r for i, r in enumerate(rows)]

    assert masked(mine) == masked(theirs), (mine, theirs)
    assert [len(c) for c in mine.splitlines()[1].split("\t")] == [
        len(c) for c in theirs.splitlines()[1].split("\t")]  # fmt: skip


@pytest.mark.parametrize("kinds", [["ours", "ours"], ["kafka", "kafka"]], ids=["ours", "kafka"])
def test_our_tool_grows_and_shrinks_a_dynamic_quorum(kinds, kafka_newest, tmp_path, procs):
    """Our add-controller / remove-controller / describe on a quorum of our nodes, and on one of
    Kafka's: the same lines as Kafka's tool, and the voter set changes."""
    from tests.kafka.dynamic import DynamicQuorum

    q = DynamicQuorum(tmp_path, kinds)
    procs.extend(q.nodes.values())
    q.format(1, "standalone")
    q.format(2, "none")
    q.start(1, 2)
    q.wait_listening(1, 2)
    q.wait_voters({1})
    where = ("--bootstrap-controller", q.address(1), "--timeout", "30")

    def mine(*args):
        return subprocess.run([sys.executable, "-m", "kafka_rpc.cli", "metadata-quorum", *where,
                               *args], capture_output=True, text=True, timeout=90)  # fmt: skip

    d2 = q.directory_id(2)
    cfg = str(q.properties_path(2))
    q.wait_observer(2)  # the leader adds only a caught-up observer
    r = mine("--command-config", cfg, "add-controller")
    assert r.returncode == 0, r.stderr
    assert r.stdout == (f"Added controller 2 with directory id {d2} and endpoints: "
                        f"CONTROLLER://127.0.0.1:{q.ports[2]}\n")  # fmt: skip
    q.wait_voters({1, 2})
    status = mine("describe", "--status").stdout
    voters = json.loads(re.search(r"^CurrentVoters:\s+(.*)$", status, re.M).group(1))
    assert {v["id"]: v["directoryId"] for v in voters} == {1: q.directory_id(1), 2: d2}
    # a second add of the same voter: the leader's DuplicateVoterException, as Kafka's tool
    again = mine("--command-config", cfg, "add-controller")
    assert again.returncode == 1
    assert again.stderr.startswith("org.apache.kafka.common.errors.DuplicateVoterException: ")
    r = mine("remove-controller", "--controller-id", "2", "--controller-directory-id", d2)
    assert r.returncode == 0, r.stderr
    assert r.stdout == f"Removed KRaft controller 2 with directory id {d2}\n"
    q.wait_voters({1})
    gone = mine("remove-controller", "-i", "2", "-d", d2)
    assert gone.returncode == 1
    assert gone.stderr.startswith("org.apache.kafka.common.errors.VoterNotFoundException: ")
