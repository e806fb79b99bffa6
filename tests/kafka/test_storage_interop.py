"""A metadata directory either side starts on: Apache Kafka 4.4 and `kafka-rpc serve` take turns
on one controller's directory (docs/mixed-quorum.md, 'Storage either side starts on').

* `kafka-storage format` (static voter, kraft.version 0), then our node on it: it passes our
  start-up checks and leads; its ``quorum-state`` (v0), segments, ``leader-epoch-checkpoint``
  and ``partition.metadata`` are then opened by Kafka, which passes Kafka's start-up checks,
  reads our quorum-state (it finds our node's leadership and goes to the next epoch) and leads;
  our node starts again on what Kafka wrote. While one side runs, the other is refused the
  directory's ``.lock`` (a POSIX lock on both sides).
* `kafka-rpc storage format`, then Kafka on it: Kafka's cluster id, node id and directory id
  checks accept our ``meta.properties``, and `kafka-storage info` reads it.
* A dynamic quorum (KIP-853): the bootstrap snapshot
  ``__cluster_metadata-0/00000000000000000000-0000000000.checkpoint`` our `--standalone`,
  `--initial-controllers` and `--no-initial-controllers` write is Kafka's byte for byte but for
  the timestamps (the batches' and the header's LastContainedLogTimestamp) and CRCs, and
  ``meta.properties`` has the same keys and values (the listed voter's directory id); Kafka's
  `kafka-dump-log --cluster-metadata-decoder` reads our snapshot, and a Kafka controller starts
  on our `--standalone` directory as that voter, with our directory id.
"""

from __future__ import annotations

import json
import re

import pytest

from kafka_rpc.protocol import codec
from kafka_rpc.protocol.record_batch import batch_headers, decode_batches
from kafka_rpc.protocol.uuids import parse_uuid_text
from kafka_rpc.storage import meta_properties
from tests.kafka import peer

pytestmark = pytest.mark.kafka

START = 90  # s, a JVM on a loaded 2-core machine


def _props(port: int, data) -> dict:
    return {
        "process.roles": "controller",
        "node.id": 1,
        "controller.quorum.voters": f"1@127.0.0.1:{port}",
        "controller.listener.names": "CONTROLLER",
        "listeners": f"CONTROLLER://127.0.0.1:{port}",
        "log.dirs": data,
    }


def _status(version: str, port: int) -> dict:
    out = peer.run_tool(version, "kafka-metadata-quorum", "--bootstrap-controller",
                        f"127.0.0.1:{port}", "describe", "--status", timeout=60).stdout  # fmt: skip
    return {k.strip(): v.strip() for k, v in re.findall(r"^(\w+):\s+(.*)$", out, re.M)}


def _halted(node: peer.ManagedProcess) -> list[str]:
    return [ln for ln in node.log_text().splitlines()
            if "Exit.halt" in ln or "FATAL" in ln or "fatal" in ln.lower()]  # fmt: skip


def test_kafka_and_our_node_take_turns_on_one_directory(kafka_newest, tmp_path, procs):
    port = peer.free_port()
    data = tmp_path / "data"
    props = _props(port, data)
    kafka = peer.KafkaNode("kafka", kafka_newest, tmp_path / "k", props)
    kafka.format(peer.random_cluster_id(), "--release-version", "4.0-IV3")
    ours = peer.RpcNode("ours", tmp_path / "r", props)
    procs += [kafka, ours]

    ours.start()
    ours.wait_started(START)
    m = ours.wait_for_log(r"leader of epoch (\d+)", START)
    our_epoch = int(m.group(1))
    qs = json.loads((data / "__cluster_metadata-0" / "quorum-state").read_text())
    assert qs["data_version"] == 0 and qs["leaderId"] == 1 and qs["leaderEpoch"] == our_epoch
    epochs = (data / "__cluster_metadata-0" / "leader-epoch-checkpoint").read_text().split("\n")
    assert epochs[0] == "0" and f"{our_epoch} 0" in epochs

    # Kafka cannot take the directory while our node holds its .lock
    kafka.start()
    kafka.wait_for_log(r"Failed to acquire lock on file \.lock", START)
    kafka.kill()
    assert ours.alive()
    assert ours.stop(timeout=30) == 0

    kafka.log_path.unlink()
    kafka.start()
    kafka.wait_for_port("127.0.0.1", port, START)
    kafka.wait_for_log(r"Kafka Server started", START)
    st = _status(kafka_newest, port)
    assert st["LeaderId"] == "1" and int(st["LeaderEpoch"]) > our_epoch, st
    assert not _halted(kafka), _halted(kafka)
    kafka_epoch = int(st["LeaderEpoch"])
    assert kafka.stop(timeout=60) is not None

    ours.start()
    ours.wait_for_log(rf"leader of epoch {kafka_epoch + 1}\b|leader of epoch "
                      rf"{kafka_epoch + 2}\b", START)  # fmt: skip
    assert ours.alive()


def test_kafka_starts_on_a_directory_we_formatted(kafka_newest, tmp_path, procs):
    port = peer.free_port()
    data = tmp_path / "data"
    props = _props(port, data)
    ours = peer.RpcNode("ours", tmp_path / "r", props)
    cluster_id = peer.random_cluster_id()
    ours.format(cluster_id, "--kafka-compatible")  # Kafka replays our bootstrap.checkpoint
    info = peer.run_tool(kafka_newest, "kafka-storage", "info", "-c",
                         str(ours.properties_path), timeout=60).stdout  # fmt: skip
    assert cluster_id in info and "version=1" in info.replace(" ", ""), info
    kafka = peer.KafkaNode("kafka", kafka_newest, tmp_path / "k", props)
    procs.append(kafka)
    kafka.start()
    kafka.wait_for_log(r"Kafka Server started", START)
    st = _status(kafka_newest, port)
    assert st["ClusterId"] == cluster_id and st["LeaderId"] == "1", st
    assert not _halted(kafka)


# ---- KIP-853: the bootstrap snapshot of a dynamic quorum
SNAPSHOT = "__cluster_metadata-0/00000000000000000000-0000000000.checkpoint"
D1, D2, D3 = "ukQq6BGlRFu4HJt6cG3Obg", "L1puKPfrRc6kkNmYSz0nnQ", "JEXY6aqzQY-32P5TStzaFg"
# the same bootstrap records on both sides: our newest metadata.version, ELR (0 only here) off
KAFKA_LEVELS = ("--release-version", "4.2-IV1", "-f", "eligible.leader.replicas.version=0")
OUR_LEVELS = ("--release-version", "4.2-IV1", "--kafka-compatible")


def _dynamic_props(port: int, data, **extra) -> dict:
    return {
        "process.roles": "controller",
        "node.id": 1,
        "controller.quorum.bootstrap.servers": f"127.0.0.1:{port}",
        "controller.listener.names": "CONTROLLER",
        "listeners": f"CONTROLLER://127.0.0.1:{port}",
        "log.dirs": data,
        **extra,
    }


def _normalized(data: bytes) -> list[bytes]:
    """Each batch's bytes with the CRC, the first and max timestamps and the snapshot header's
    LastContainedLogTimestamp zeroed: what two formats of the same voters must share."""
    out = []
    for pos, size, _base, _epoch in batch_headers(data):
        b = bytearray(data[pos : pos + size])
        b[17:21] = bytes(4)  # crc
        b[27:43] = bytes(16)  # first and max timestamp
        out.append(b)
    head = decode_batches(data)[0]
    body = head.records[0]  # SnapshotHeaderRecord: int16 version, int64 timestamp, tags
    assert codec.decode("SnapshotHeaderRecord", 0, body).version == 0
    at = out[0].find(body)
    assert at > 0
    out[0][at + 2 : at + 10] = bytes(8)
    return [bytes(b) for b in out]


def _format_both(tmp_path, name: str, props: dict, kafka_args, our_args):
    """Format a Kafka directory and ours with the same properties; (Kafka's, ours) directory."""
    kdir, odir = tmp_path / f"{name}-kafka", tmp_path / f"{name}-ours"
    kafka = peer.KafkaNode(name, peer.NEWEST, tmp_path / f"{name}-k",
                           {**props, "log.dirs": kdir})  # fmt: skip
    kafka.format(CLUSTER, *kafka_args, *KAFKA_LEVELS)
    ours = peer.RpcNode(name, tmp_path / f"{name}-r", {**props, "log.dirs": odir})
    ours.format(CLUSTER, *our_args, *OUR_LEVELS)
    return kdir, odir


def _assert_same_snapshot(kdir, odir) -> None:
    theirs = _normalized((kdir / SNAPSHOT).read_bytes())
    assert _normalized((odir / SNAPSHOT).read_bytes()) == theirs


def _assert_same_storage(kdir, odir) -> None:
    _assert_same_snapshot(kdir, odir)
    theirs, mine = meta_properties.read(kdir), meta_properties.read(odir)
    assert mine == theirs, (mine, theirs)
    keys = {ln.partition("=")[0] for ln in (kdir / "meta.properties").read_text().splitlines()
            if ln and not ln.startswith("#")}  # fmt: skip
    mine_keys = {ln.partition("=")[0] for ln in (odir / "meta.properties").read_text().splitlines()
                 if ln and not ln.startswith("#")}  # fmt: skip
    assert mine_keys == keys == {"version", "cluster.id", "node.id", "directory.id"}


CLUSTER = "q1Sh-9_ISia_zwGINzRvyQ"


def test_initial_controllers_snapshot_is_kafkas(kafka_newest, tmp_path):
    port = peer.free_port()
    voters = f"1@127.0.0.1:{port}:{D1},2@[::1]:{port + 1}:{D2},3@c3.example:{port + 2}:{D3}"
    props = _dynamic_props(port, None)
    kdir, odir = _format_both(tmp_path, "init", props, ("-I", voters), ("-I", voters))
    _assert_same_storage(kdir, odir)
    assert meta_properties.read(odir).directory_id == D1
    # node 4, not listed: the voters all the same, a directory id of its own
    props4 = {**props, "node.id": 4}
    kdir, odir = _format_both(tmp_path, "init4", props4, ("-I", voters), ("-I", voters))
    k, o = meta_properties.read(kdir), meta_properties.read(odir)
    assert o.directory_id not in (D1, D2, D3) and (o.cluster_id, o.node_id) == (k.cluster_id, 4)
    _assert_same_snapshot(kdir, odir)


def test_standalone_and_no_initial_controllers_snapshots_are_kafkas(kafka_newest, tmp_path):
    port = peer.free_port()
    props = _dynamic_props(port, None)
    # Kafka's --standalone draws the directory id; ours as the -I entry Kafka builds from it
    kdir = tmp_path / "alone-kafka"
    kafka = peer.KafkaNode("alone", kafka_newest, tmp_path / "alone-k", {**props, "log.dirs": kdir})
    out = kafka.format(CLUSTER, "--standalone", *KAFKA_LEVELS).stdout
    assert f"Formatting dynamic metadata voter directory {kdir} with metadata.version" in out
    dir_id = meta_properties.read(kdir).directory_id
    ours = peer.RpcNode("alone", tmp_path / "alone-r", {**props, "log.dirs": tmp_path / "o1"})
    ours.format(CLUSTER, "-I", f"1@127.0.0.1:{port}:{dir_id}", *OUR_LEVELS)
    _assert_same_storage(kdir, tmp_path / "o1")
    # our --standalone writes the same but for the (random) directory id
    mine = peer.RpcNode("alone2", tmp_path / "alone-r2", {**props, "log.dirs": tmp_path / "o2"})
    line = mine.format(CLUSTER, "--standalone", *OUR_LEVELS).stdout
    assert f"Formatting dynamic metadata voter directory {tmp_path / 'o2'} with" in line
    ours_id = meta_properties.read(tmp_path / "o2").directory_id
    mine = _normalized((tmp_path / "o2" / SNAPSHOT).read_bytes())
    ours_b, theirs_b = parse_uuid_text(ours_id).bytes, parse_uuid_text(dir_id).bytes
    assert _normalized((kdir / SNAPSHOT).read_bytes()) == [m.replace(ours_b, theirs_b)
                                                          for m in mine]  # fmt: skip
    # --no-initial-controllers: kraft.version 1, no voters, the bootstrap records
    kdir, odir = _format_both(tmp_path, "none", props, ("-N",), ("-N",))
    _assert_same_snapshot(kdir, odir)


def test_kafka_reads_our_dynamic_snapshot(kafka_newest, tmp_path, procs):
    port = peer.free_port()
    data = tmp_path / "data"
    props = _dynamic_props(port, data)
    ours = peer.RpcNode("ours", tmp_path / "r", props)
    ours.format(CLUSTER, "--standalone", "--kafka-compatible")
    dir_id = meta_properties.read(data).directory_id
    dump = peer.run_tool(kafka_newest, "kafka-dump-log", "--cluster-metadata-decoder", "--files",
                         str(data / SNAPSHOT), timeout=60).stdout  # fmt: skip
    assert 'KRaftVersion {"version":0,"kRaftVersion":1}' in dump, dump
    voters = json.loads(re.search(r"KRaftVoters (\{.*\})$", dump, re.M).group(1))
    assert voters["voters"] == [{
        "voterId": 1, "voterDirectoryId": dir_id,
        "endpoints": [{"name": "CONTROLLER", "host": "127.0.0.1", "port": port}],
        "kRaftVersionFeature": {"minSupportedVersion": 0, "maxSupportedVersion": 1},
    }]  # fmt: skip
    assert '"name":"metadata.version"' in dump and "SnapshotFooter" in dump
    assert "Error" not in dump and "skipping" not in dump
    # a Kafka controller starts on it as that voter, with our directory id
    kafka = peer.KafkaNode("kafka", kafka_newest, tmp_path / "k", props)
    procs.append(kafka)
    kafka.start()
    kafka.wait_for_log(r"Kafka Server started", START)
    st = _status(kafka_newest, port)
    assert st["ClusterId"] == CLUSTER and st["LeaderId"] == "1", st
    (voter,) = json.loads(st["CurrentVoters"])
    assert voter["id"] == 1 and voter["directoryId"] == dir_id, voter
    assert voter["endpoints"] == [f"CONTROLLER://127.0.0.1:{port}"], voter
    assert not _halted(kafka)


_STATIC = {"controller.quorum.voters": "1@127.0.0.1:19093"}
_BROKER = {"process.roles": "broker", "node.id": 7, "listeners": "PLAINTEXT://127.0.0.1:19092"}


@pytest.mark.parametrize(
    ("extra", "args"),
    [
        (_STATIC, ("--standalone",)),
        (_STATIC, ("-I", f"1@h:1:{D1}")),
        ({}, ()),
        (_BROKER, ("-s",)),
        ({}, ("-s", "-f", "kraft.version=0")),
        (_STATIC, ("-f", "kraft.version=1")),
        ({}, ("-I", ",")),
        ({}, ("-I", f"1@h:1:{D1},1@g:2:{D2}")),
        ({}, ("-I", "1@h:1:nope")),
        ({}, ("-I=-1@h:1:x",)),  # (a value starting with "-" needs the "=" for argparse4j)
        ({}, ("-I", "1@[::1:1:x")),
    ],
)
def test_format_refusals_are_kafkas(kafka_newest, tmp_path, extra, args):
    props = {**_dynamic_props(19093, None), **extra}
    kafka = peer.KafkaNode("k", kafka_newest, tmp_path / "k",
                           {**props, "log.dirs": tmp_path / "kd"})  # fmt: skip
    theirs = peer.run_tool(kafka_newest, "kafka-storage", "format", "-t", CLUSTER, "-c",
                           str(kafka.properties_path), *args, check=False, timeout=60)  # fmt: skip
    ours = peer.RpcNode("o", tmp_path / "o", {**props, "log.dirs": tmp_path / "od"})
    mine = ours.cli("storage", "format", "-t", CLUSTER, "-c", str(ours.properties_path), *args,
                    check=False)  # fmt: skip
    assert theirs.returncode == mine.returncode == 1, (theirs.stderr, mine.stderr)
    # Kafka prints a refusal alone, and a parse error as the uncaught exception's first line
    first = theirs.stderr.strip().splitlines()[0]
    expected = first.split("IllegalArgumentException: ", 1)[-1]
    assert mine.stderr.strip() == expected, theirs.stderr
    assert not (tmp_path / "od").exists() and not (tmp_path / "kd").exists()
