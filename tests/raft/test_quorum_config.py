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


# ---- KIP-853: dynamic quorums (Kafka's QuorumConfig and KafkaConfig rules)
BOOTSTRAP = "controller.quorum.bootstrap.servers"
NEITHER = (
    "If using process.roles, either controller.quorum.bootstrap.servers must contain the set "
    "of bootstrap controllers or controller.quorum.voters must contain a parseable set of "
    "controllers."
)


def test_bootstrap_servers_parse_as_kafkas_host_port_entries():
    c = load_config(overrides={
        "controller.quorum.bootstrap.servers": "127.0.0.1:9093, [::1]:9094,h-1.example:1",
    })  # fmt: skip
    assert c.controller_quorum_bootstrap_servers == (("127.0.0.1", 9093), ("::1", 9094),
                                                     ("h-1.example", 1))  # fmt: skip
    # no static voters then: the quorum is dynamic, and node 1 need not be a voter
    assert c.controller_quorum_voters == () and c.voters() == {} and c.dynamic_quorum
    assert not load_config().dynamic_quorum
    assert load_config().controller_quorum_bootstrap_servers == ()


@pytest.mark.parametrize("entry", ["localhost", "a b:1", "h:", "h:x", "@h:1"])
def test_bad_bootstrap_server_has_kafkas_message(entry):
    msg = (
        f"Failed to parse host name from {entry} for the configuration "
        'controller.quorum.bootstrap.servers. Each entry should be in the form "{host}:{port}"'
    )
    with pytest.raises(ConfigError) as e:
        load_config(overrides={"controller.quorum.bootstrap.servers": entry})
    assert str(e.value) == msg


def test_bootstrap_server_port_range():
    with pytest.raises(ConfigError, match="port out of range:65536"):
        load_config(overrides={"controller.quorum.bootstrap.servers": "h:65536"})


@pytest.mark.parametrize(
    "roles", [
        {},
        {"process.roles": "controller", "listeners": "CONTROLLER://127.0.0.1:9093"},
        {"process.roles": "broker", "node.id": "5", "listeners": "PLAINTEXT://:9092"},
    ],
)  # fmt: skip
def test_neither_voters_nor_bootstrap_servers_is_kafkas_error(roles):
    with pytest.raises(ConfigError) as e:
        load_config(overrides={**roles, "controller.quorum.voters": ""})
    assert str(e.value) == NEITHER


def test_controller_of_a_dynamic_quorum_need_not_be_listed():
    c = load_config(overrides={"node.id": "7", "controller.quorum.voters": "",
                               BOOTSTRAP: "127.0.0.1:9093"})  # fmt: skip
    assert c.node_id == 7 and c.dynamic_quorum
    # with both set the static voters stay the rule (and the fallback voter set)
    with pytest.raises(ConfigError, match="must be included in the set of voters"):
        load_config(overrides={"node.id": "7", "controller.quorum.voters": "1@h:1",
                               "controller.quorum.bootstrap.servers": "h:1"})  # fmt: skip
    both = load_config(overrides={"controller.quorum.voters": "1@h:1",
                                  "controller.quorum.bootstrap.servers": "h:1"})  # fmt: skip
    assert both.voters() == {1: ("h", 1)} and not both.dynamic_quorum


def test_auto_join_needs_the_controller_role():
    assert load_config().quorum_auto_join_enable is False
    c = load_config(overrides={"controller.quorum.auto.join.enable": "true",
                               BOOTSTRAP: "127.0.0.1:9093"})  # fmt: skip
    assert c.quorum_auto_join_enable is True
    with pytest.raises(ConfigError) as e:
        load_config(overrides={"process.roles": "broker", "node.id": "5",
                               "listeners": "PLAINTEXT://:9092",
                               "controller.quorum.auto.join.enable": "true"})  # fmt: skip
    assert str(e.value) == ("controller.quorum.auto.join.enable is only supported when "
                            "process.roles contains the 'controller' role.")  # fmt: skip
    with pytest.raises(ConfigError, match="expected true or false"):
        load_config(overrides={"controller.quorum.auto.join.enable": "yes"})


def test_raft_config_of_a_dynamic_quorum():
    pytest.importorskip("kafka_rpc.raft.core")
    c = load_config(overrides={
        "process.roles": "controller", "node.id": "4", "controller.quorum.voters": "",
        "controller.quorum.bootstrap.servers": "127.0.0.1:9093,127.0.0.1:9094",
        "controller.quorum.auto.join.enable": "true",
        "controller.listener.names": "CONTROLLER,C2",
        "listeners": "CONTROLLER://0.0.0.0:0,C2://127.0.0.1:9095",
        "advertised.listeners": "C2://c2.example:19095",
        "listener.security.protocol.map": "CONTROLLER:PLAINTEXT,C2:PLAINTEXT",
    })  # fmt: skip
    assert [str(e) for e in c.advertised_controller_listeners()] == [
        "CONTROLLER://:0", "C2://c2.example:19095"]  # fmt: skip
    d = uuid.uuid4()
    rc = c.raft_config("AAAAAAAAAAAAAAAAAAAAAQ", d, bound={"CONTROLLER": ("127.0.0.2", 40001)})
    assert rc.voters == {} and rc.directory_id == d
    assert rc.bootstrap_servers == (("127.0.0.1", 9093), ("127.0.0.1", 9094))
    # the bound port and address replace port 0 and the wildcard host; advertised ones win
    assert rc.local_listeners == {"CONTROLLER": ("127.0.0.2", 40001),
                                  "C2": ("c2.example", 19095)}  # fmt: skip
    assert list(rc.local_listeners) == ["CONTROLLER", "C2"]  # controller.listener.names order
    assert rc.can_become_voter and rc.auto_join
    broker = load_config(overrides={"process.roles": "broker", "node.id": "5",
                                    "listeners": "PLAINTEXT://:9092"})  # fmt: skip
    brc = broker.raft_config("AAAAAAAAAAAAAAAAAAAAAQ", d)
    assert not brc.can_become_voter and not brc.auto_join and brc.local_listeners == {}
    assert load_config().raft_config("AAAAAAAAAAAAAAAAAAAAAQ", d).local_listeners == {
        "CONTROLLER": ("127.0.0.1", 9093)}  # fmt: skip
