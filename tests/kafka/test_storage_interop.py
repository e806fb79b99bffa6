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
"""

from __future__ import annotations

import json
import re

import pytest

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
