"""The metadata quorum's settings in kafka_rpc.config (Kafka's keys and defaults)."""

import uuid

import pytest

from kafka_rpc.config import ConfigError, load_config


def test_defaults_are_kafkas(tmp_path):
    c = load_config(overrides={"log.dirs": str(tmp_path / "a")})
    assert (c.quorum_election_timeout_ms, c.quorum_fetch_timeout_ms) == (1000, 2000)
    assert (c.quorum_election_backoff_max_ms, c.quorum_request_timeout_ms) == (1000, 2000)
    assert (c.quorum_retry_backoff_ms, c.quorum_append_linger_ms) == (20, 25)
    assert c.metadata_snapshot_max_record_bytes == 20 * 1024 * 1024
    assert c.metadata_snapshot_interval_ms == 3_600_000
    assert c.controller_snapshot_minimum_records == 0
    assert c.metadata_max_retention_bytes == 100 * 1024 * 1024
    assert c.metadata_max_retention_ms == 7 * 24 * 3600 * 1000
    assert c.metadata_retention_check_interval_ms == 60_000
    assert c.max_replication_lag_ms == 30_000
    assert c.metadata_max_idle_interval_ms == 500
    assert c.metadata_log_segment_bytes == 1 << 30
    assert c.metadata_log_dir == str(tmp_path / "a")
    assert c.metadata_partition_dir == tmp_path / "a" / "__cluster_metadata-0"
    assert c.voters() == {1: ("127.0.0.1", 9093)}


def test_metadata_log_dir_override(tmp_path):
    c = load_config(overrides={"log.dirs": str(tmp_path / "a"), "metadata.log.dir": str(tmp_path)})
    assert c.metadata_partition_dir == tmp_path / "__cluster_metadata-0"
    assert c.storage_dirs() == [tmp_path / "a", tmp_path]


@pytest.mark.parametrize(
    ("key", "value"),
    [
        ("controller.quorum.election.timeout.ms", "0"),
        ("controller.quorum.retry.backoff.ms", "-1"),
        ("metadata.max.idle.interval.ms", "-5"),
        ("metadata.log.max.record.bytes.between.snapshots", "0"),
        ("metadata.max.retention.bytes", "-2"),
        ("controller.quorum.voters", "1@a:1,1@b:2"),
    ],
)
def test_bad_values(key, value):
    with pytest.raises(ConfigError, match=key.replace(".", r"\.")):
        load_config(overrides={key: value})


def test_controller_node_id_must_be_a_voter():
    with pytest.raises(ConfigError, match="must be included in the set of voters"):
        load_config(overrides={"node.id": "2"})
    c = load_config(overrides={"node.id": "2", "controller.quorum.voters": "2@127.0.0.1:9093"})
    assert c.voters() == {2: ("127.0.0.1", 9093)}
    with pytest.raises(ConfigError, match="process.roles does not contain controller"):
        load_config(overrides={"process.roles": "broker", "listeners": "PLAINTEXT://:9092"})
    broker = load_config(overrides={"process.roles": "broker", "node.id": "5",
                                    "listeners": "PLAINTEXT://:9092"})  # fmt: skip
    assert not broker.is_controller


def test_raft_config(tmp_path):
    pytest.importorskip("kafka_rpc.raft.core")
    c = load_config(overrides={"controller.quorum.election.timeout.ms": "300",
                               "metadata.log.max.snapshot.interval.ms": "0"})  # fmt: skip
    rc = c.raft_config("AAAAAAAAAAAAAAAAAAAAAQ", uuid.UUID(int=0))
    assert (rc.node_id, rc.voters, rc.cluster_id) == (1, {1: ("127.0.0.1", 9093)},
                                                      "AAAAAAAAAAAAAAAAAAAAAQ")  # fmt: skip
    assert (rc.election_timeout_ms, rc.snapshot_interval_ms) == (300, 0)
    assert rc.max_replication_lag_ms == 30_000
