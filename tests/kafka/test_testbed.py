"""The test bed itself: a Kafka release resolved from Maven Central starts, answers its own
tools, and leaves no process behind."""

from __future__ import annotations

import os

import pytest

from tests.kafka import peer

pytestmark = pytest.mark.kafka


def controller_props(node_id: int, port: int, data) -> dict:
    return {
        "process.roles": "controller",
        "node.id": node_id,
        "controller.quorum.voters": f"{node_id}@127.0.0.1:{port}",
        "controller.listener.names": "CONTROLLER",
        "listeners": f"CONTROLLER://127.0.0.1:{port}",
        "log.dirs": data,
    }


def test_a_kafka_controller_starts_describes_itself_and_is_killed(kafka_newest, tmp_path, procs):
    port = peer.free_port()
    node = peer.KafkaNode("kafka-ctrl", kafka_newest, tmp_path,
                          controller_props(1, port, tmp_path / "data"))  # fmt: skip
    procs.append(node)
    node.format(peer.random_cluster_id())
    node.start()
    node.wait_for_port("127.0.0.1", port, timeout=60)
    out = peer.run_tool(kafka_newest, "kafka-metadata-quorum", "--bootstrap-controller",
                        f"127.0.0.1:{port}", "describe", "--status", timeout=60).stdout  # fmt: skip
    assert "LeaderId:               1" in out, out
    pid = node.pid
    node.kill()
    assert not node.alive()
    with pytest.raises(ProcessLookupError):
        os.killpg(pid, 0)


def test_a_tool_that_overruns_is_killed(kafka_newest, tmp_path):
    # the console consumer waits for ever on a port nobody listens on
    with pytest.raises(Exception) as info:
        peer.run_tool(kafka_newest, "kafka-console-consumer", "--bootstrap-server",
                      f"127.0.0.1:{peer.free_port()}", "--topic", "t", timeout=3)  # fmt: skip
    assert "timed out" in str(info.value) or "TimeoutExpired" in type(info.value).__name__
