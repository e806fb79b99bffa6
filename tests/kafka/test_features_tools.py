"""Apache Kafka's own tools and servers against our features: ``kafka-features`` describes,
upgrades and downgrades through our controller; a directory ``kafka-rpc storage format
--kafka-compatible`` wrote passes ``kafka-storage info`` and a Kafka controller starts on it with
our bootstrap levels; our node starts on a directory ``kafka-storage format`` wrote."""

from __future__ import annotations

import re

import pytest

from kafka_rpc.controller.features import default_feature_levels
from tests.kafka import peer

pytestmark = pytest.mark.kafka

TOOL_TIMEOUT = 120.0
START_TIMEOUT = 90.0


def _props(node_id: int, roles: str, port: int, data, broker_port: int | None = None) -> dict:
    listeners = f"CONTROLLER://127.0.0.1:{port}"
    if broker_port is not None:
        listeners = f"PLAINTEXT://127.0.0.1:{broker_port}," + listeners
    return {
        "process.roles": roles,
        "node.id": node_id,
        "controller.quorum.voters": f"{node_id}@127.0.0.1:{port}",
        "controller.listener.names": "CONTROLLER",
        "listeners": listeners,
        "log.dirs": data,
    }


def describe(version: str, port: int) -> dict[str, dict[str, str]]:
    """``kafka-features --bootstrap-controller ... describe`` as {feature: {column: value}}."""
    out = peer.run_tool(version, "kafka-features", "--bootstrap-controller", f"127.0.0.1:{port}",
                        "describe", timeout=TOOL_TIMEOUT).stdout  # fmt: skip
    rows = {}
    for line in out.splitlines():
        cols = dict(re.findall(r"(\w+): (\S+)", line))
        if "Feature" in cols:
            rows[cols.pop("Feature")] = cols
    assert rows, out
    return rows


def _range(row: dict[str, str]) -> tuple[str, str, str]:
    return row["SupportedMinVersion"], row["SupportedMaxVersion"], row["FinalizedVersionLevel"]


def features_tool(version: str, port: int, *args: str):
    return peer.run_tool(version, "kafka-features", "--bootstrap-controller", f"127.0.0.1:{port}",
                         *args, timeout=TOOL_TIMEOUT, check=False)  # fmt: skip


def test_kafka_features_against_our_controller(kafka_newest, tmp_path, procs):
    port, bport = peer.free_port(), peer.free_port()
    node = peer.RpcNode("rpc", tmp_path, _props(1, "broker,controller", port, tmp_path / "d",
                                                 broker_port=bport))  # fmt: skip
    procs.append(node)
    node.start().wait_started(START_TIMEOUT)
    rows = describe(kafka_newest, port)
    want = {k: v for k, v in default_feature_levels().items() if v > 0}
    # every supported feature has a line; kraft.version (0-1, Kafka's range) at level 0: a
    # static quorum (SupportedFeatures carries it from ApiVersions v4, FinalizedFeatures not)
    want["kraft.version"] = 0
    assert {k: r["FinalizedVersionLevel"] for k, r in rows.items()} == {
        k: ("4.2-IV1" if k == "metadata.version" else str(v)) for k, v in want.items()}
    assert rows["metadata.version"]["SupportedMinVersion"] == "3.3-IV3"
    assert rows["kafka_rpc.chunks.version"]["SupportedMaxVersion"] == "1"
    assert _range(rows["kraft.version"]) == ("0", "1", "0")
    epoch = int(rows["metadata.version"]["Epoch"])

    r = features_tool(kafka_newest, port, "downgrade", "--feature", "group.version=0")
    assert r.returncode == 0 and "group.version was downgraded to 0." in r.stdout, r
    r = features_tool(kafka_newest, port, "upgrade", "--feature", "group.version=1")
    assert r.returncode == 0 and "group.version was upgraded to 1." in r.stdout, r
    after = describe(kafka_newest, port)
    assert after["group.version"]["FinalizedVersionLevel"] == "1"
    assert int(after["group.version"]["Epoch"]) > epoch
    # kraft.version has no downgrade (FeatureControlManager.updateFeature)
    r = features_tool(kafka_newest, port, "downgrade", "--feature", "kraft.version=0")
    assert r.returncode == 0 and "kraft.version was downgraded to 0." in r.stdout, r  # same level
    # the upgrade to 1 is the Raft layer's: every voter supports 1 and has a directory id (this
    # node alone, its own entry), so it is taken; FinalizedFeatures then carries it
    r = features_tool(kafka_newest, port, "upgrade", "--feature", "kraft.version=1")
    assert r.returncode == 0 and "kraft.version was upgraded to 1." in r.stdout, r
    assert _range(describe(kafka_newest, port)["kraft.version"]) == ("0", "1", "1")
    r = features_tool(kafka_newest, port, "downgrade", "--feature", "kraft.version=0")
    assert r.returncode != 0 and "Can't downgrade the version of this feature." in (
        r.stdout + r.stderr), r
    # refusals carry our controller's message through Kafka's admin client
    r = features_tool(kafka_newest, port, "upgrade", "--feature", "metadata.version=30")
    assert r.returncode != 0 and "only supports versions 7-29" in r.stdout + r.stderr, r
    r = features_tool(kafka_newest, port, "downgrade", "--feature", "metadata.version=21")
    assert r.returncode != 0 and "Refusing to perform the requested downgrade" in (
        r.stdout + r.stderr), r


def test_formatted_directories_start_on_the_other_side(kafka_newest, tmp_path, procs):
    """kafka-rpc storage format --kafka-compatible -> kafka-storage info accepts it and a Kafka
    controller bootstraps from our bootstrap.checkpoint; kafka-storage format -> our controller
    bootstraps from Kafka's (4.4 writes it as the bootstrap snapshot
    __cluster_metadata-0/00000000000000000000-0000000000.checkpoint)."""
    cid = peer.random_cluster_id()
    # ours -> Kafka
    port = peer.free_port()
    ours = peer.RpcNode("ours-fmt", tmp_path / "a", _props(1, "controller", port, tmp_path / "a/d"))
    ours.format(cid, "--kafka-compatible", "--release-version", "4.0")
    info = peer.run_tool(kafka_newest, "kafka-storage", "info", "-c", str(ours.properties_path),
                         timeout=TOOL_TIMEOUT)  # fmt: skip
    assert f"cluster.id={cid}" in info.stdout and "Found problem" not in info.stdout, info.stdout
    kafka = peer.KafkaNode("kafka-ctrl", kafka_newest, tmp_path / "a", ours.props)
    procs.append(kafka)
    kafka.start()
    kafka.wait_for_port("127.0.0.1", port, timeout=START_TIMEOUT)
    rows = describe(kafka_newest, port)
    assert _range(rows["kraft.version"]) == ("0", "1", "0")  # Kafka's line, as ours above
    assert rows["metadata.version"]["FinalizedVersionLevel"] == "4.0-IV3"
    assert rows["group.version"]["FinalizedVersionLevel"] == "1"
    assert rows["transaction.version"]["FinalizedVersionLevel"] == "2"
    kafka.kill()
    # Kafka -> ours (ELR is Kafka's default at 4.2; kafka-rpc keeps it at 0)
    port = peer.free_port()
    kprops = _props(2, "controller", port, tmp_path / "b/d")
    fmt = peer.KafkaNode("kafka-fmt", kafka_newest, tmp_path / "b", kprops)
    fmt.format(cid, "--release-version", "4.2-IV1", "--feature",
               "eligible.leader.replicas.version=0")  # fmt: skip
    node = peer.RpcNode("rpc", tmp_path / "b", kprops)
    procs.append(node)
    node.start().wait_started(START_TIMEOUT)
    rows = describe(kafka_newest, port)
    assert rows["metadata.version"]["FinalizedVersionLevel"] == "4.2-IV1"
    assert rows["share.version"]["FinalizedVersionLevel"] == "1"
    assert rows["kafka_rpc.chunks.version"]["FinalizedVersionLevel"] == "0"


def test_we_read_the_bootstrap_checkpoint_kafka_4_0_writes(kafka_oldest, tmp_path):
    """Kafka 4.0's kafka-storage format writes bootstrap.checkpoint into every directory (4.4
    writes the bootstrap snapshot instead): our reader takes its records as they are."""
    from kafka_rpc.storage.bootstrap import BOOTSTRAP_FILE, read_bootstrap

    node = peer.KafkaNode("kafka-fmt", kafka_oldest, tmp_path,
                          _props(1, "controller", peer.free_port(), tmp_path / "d"))  # fmt: skip
    node.format(peer.random_cluster_id(), "--release-version", "3.9", "--add-scram",
                "SCRAM-SHA-256=[name=alice,password=alice-secret]")  # fmt: skip
    assert (tmp_path / "d" / BOOTSTRAP_FILE).exists()
    boot = read_bootstrap(tmp_path / "d")
    assert boot.levels == {"metadata.version": 21}  # 3.9: every other feature at 0
    names = [type(r).__spec_name__ for r in boot.records]
    assert names == ["FeatureLevelRecord", "UserScramCredentialRecord"]
    assert boot.records[1].name == "alice" and boot.records[1].iterations == 4096
