"""IncrementalAlterConfigs and AlterConfigs on the pure commands (ConfigurationControlManager,
ControllerConfigurationValidator, ConfigResourceExistenceChecker): Kafka's codes per resource,
ConfigRecords with null = delete, nothing written for a failing resource or ValidateOnly."""

from __future__ import annotations

from kafka_rpc.controller import configuration, replication
from kafka_rpc.controller.image import RESOURCE_BROKER, RESOURCE_TOPIC
from kafka_rpc.protocol import codec
from kafka_rpc.protocol.errors import ErrorCode as E
from tests.controller.harness import Cluster, topic

R = codec.message_class
IAC = codec.module("IncrementalAlterConfigsRequest")
LAC = codec.module("AlterConfigsRequest")
SET, DELETE, APPEND, SUBTRACT = 0, 1, 2, 3


def incremental(c: Cluster, *resources, validate_only=False, **ctx):
    req = R("IncrementalAlterConfigsRequest")(
        resources=tuple(
            IAC.AlterConfigsResource(resource_type=t, resource_name=n, configs=tuple(
                IAC.AlterableConfig(name=k, config_operation=op, value=v) for k, op, v in cfgs))
            for t, n, cfgs in resources),
        validate_only=validate_only,
    )  # fmt: skip
    return c.run(
        lambda img, r, x: configuration.incremental_alter_configs(
            img, r, x, replication.validate_topic_name
        ),
        req,
        **ctx,
    )


def legacy(c: Cluster, *resources):
    req = R("AlterConfigsRequest")(
        resources=tuple(
            LAC.AlterConfigsResource(resource_type=t, resource_name=n, configs=tuple(
                LAC.AlterableConfig(name=k, value=v) for k, v in cfgs))
            for t, n, cfgs in resources),
    )  # fmt: skip
    return c.run(
        lambda img, r, x: configuration.legacy_alter_configs(
            img, r, x, replication.validate_topic_name
        ),
        req,
    )


def codes(res):
    return [(r.resource_name, r.error_code) for r in res.response.responses]


def test_incremental_topic_and_broker_configs():
    c = Cluster()
    c.live(1)
    c.create(topic("t", configs=[("retention.ms", "1000")]))
    res = incremental(
        c,
        (RESOURCE_TOPIC, "t", [("retention.ms", SET, "5000"), ("cleanup.policy", APPEND, "compact"),
                               ("segment.ms", DELETE, None)]),
        (RESOURCE_BROKER, "", [("log.cleaner.threads", SET, "2")]),
        (RESOURCE_BROKER, "1", [("log.retention.ms", SET, "10")]),
    )  # fmt: skip
    assert codes(res) == [("t", 0), ("", 0), ("1", 0)]
    # segment.ms was not set: no record for it; broker keys always get one
    assert [(r.resource_name, r.name, r.value) for r in res.records] == [
        ("t", "retention.ms", "5000"), ("t", "cleanup.policy", "compact"),
        ("", "log.cleaner.threads", "2"), ("1", "log.retention.ms", "10"),
    ]  # fmt: skip
    assert dict(c.image.topic_configs("t")) == {"retention.ms": "5000", "cleanup.policy": "compact"}
    assert dict(c.image.configs[(RESOURCE_BROKER, "")]) == {"log.cleaner.threads": "2"}
    res = incremental(c, (RESOURCE_TOPIC, "t", [("cleanup.policy", APPEND, "delete,compact")]))
    assert c.image.topic_configs("t")["cleanup.policy"] == "compact,delete"
    incremental(c, (RESOURCE_TOPIC, "t", [("cleanup.policy", SUBTRACT, "compact"),
                                          ("retention.ms", DELETE, None)]))  # fmt: skip
    assert dict(c.image.topic_configs("t")) == {"cleanup.policy": "delete"}
    # the same value again: no record for a topic, one for a broker (KAFKA-14136)
    assert not incremental(c, (RESOURCE_TOPIC, "t", [("cleanup.policy", SET, "delete")])).records
    assert incremental(c, (RESOURCE_BROKER, "", [("log.cleaner.threads", SET, "2")])).records


def test_incremental_errors_change_nothing():
    c = Cluster()
    c.live(1)
    c.create(topic("t"))
    before = c.image
    res = incremental(
        c,
        (RESOURCE_TOPIC, "t", [("no.such.config", SET, "1")]),
        (RESOURCE_TOPIC, "t2", [("retention.ms", SET, "x")]),
        (RESOURCE_TOPIC, "missing", [("retention.ms", SET, "1")]),
        (RESOURCE_TOPIC, "", [("retention.ms", SET, "1")]),
        (RESOURCE_TOPIC, "bad/name", [("retention.ms", SET, "1")]),
        (RESOURCE_TOPIC, "t", [("retention.ms", APPEND, "1")]),  # a duplicate of the first
        (RESOURCE_BROKER, "x", [("a", SET, "1")]),
        (RESOURCE_BROKER, "-1", [("a", SET, "1")]),
        (RESOURCE_BROKER, "7", [("a", SET, "1")]),
        (RESOURCE_BROKER, "1", [("log.retention.ms", APPEND, "1")]),
        (99, "z", [("a", SET, "1")]),
        (16, "m", [("a", SET, "1")]),
    )
    assert codes(res) == [
        ("t", E.INVALID_REQUEST),  # Duplicate resource.
        ("t2", E.INVALID_CONFIG), ("missing", E.UNKNOWN_TOPIC_OR_PARTITION),
        ("", E.INVALID_REQUEST), ("bad/name", E.INVALID_TOPIC_EXCEPTION),
        ("x", E.INVALID_REQUEST), ("-1", E.INVALID_REQUEST), ("7", E.BROKER_ID_NOT_REGISTERED),
        ("1", E.INVALID_CONFIG), ("z", E.UNSUPPORTED_VERSION), ("m", E.INVALID_REQUEST),
    ]  # fmt: skip
    msgs = {r.resource_name: r.error_message for r in res.response.responses}
    assert msgs["t"] == "Duplicate resource."
    assert msgs["missing"] == "The topic 'missing' does not exist."
    assert msgs["1"] == "Can't APPEND to key log.retention.ms because its type is not LIST."
    assert not res.records and c.image == before
    res = incremental(c, (RESOURCE_TOPIC, "t", [("no.such.config", SET, "1")]))
    assert codes(res) == [("t", E.INVALID_CONFIG)]
    assert res.response.responses[0].error_message == "Unknown topic config name: no.such.config"
    # validate only: the answer, no records; a controller id is a valid broker resource
    res = incremental(c, (RESOURCE_TOPIC, "t", [("retention.ms", SET, "7")]),
                      (RESOURCE_BROKER, "3000", [("a", SET, "1")]),
                      validate_only=True, controller_ids=frozenset({3000}))  # fmt: skip
    assert codes(res) == [("t", 0), ("3000", 0)] and not res.records


def test_legacy_alter_configs_replaces_the_whole_set():
    c = Cluster()
    c.live(1)
    c.create(topic("t", configs=[("retention.ms", "1000"), ("segment.ms", "99")]))
    new = [("retention.ms", "1000"), ("cleanup.policy", "compact")]
    res = legacy(c, (RESOURCE_TOPIC, "t", new))
    assert codes(res) == [("t", 0)]
    assert [(r.name, r.value) for r in res.records] == [
        ("cleanup.policy", "compact"), ("segment.ms", None)]  # fmt: skip
    assert dict(c.image.topic_configs("t")) == {"retention.ms": "1000", "cleanup.policy": "compact"}
    # a null value deletes the key, as Kafka's legacyAlterConfigResource writes it
    res = legacy(c, (RESOURCE_TOPIC, "t", [("retention.ms", None)]))
    assert codes(res) == [("t", 0)] and dict(c.image.topic_configs("t")) == {}
    res = legacy(c, (RESOURCE_TOPIC, "t", [("retention.ms", "soon")]))
    assert codes(res) == [("t", E.INVALID_CONFIG)] and not res.records


def test_one_table_of_topic_configs_checks_type_and_kafkas_validators():
    from kafka_rpc.controller.topic_configs import TOPIC_CONFIG_DEFS, list_configs, value_check

    # every row is checked by its ConfigDef type, then its validator (LogConfig's)
    assert all(value_check(n) is not None for n in TOPIC_CONFIG_DEFS)
    assert value_check("no.such.config") is None
    ok = {"cleanup.policy": "compact,delete", "compression.type": "zstd",
          "message.timestamp.type": "LogAppendTime", "min.cleanable.dirty.ratio": "0.1",
          "segment.bytes": "1048576", "retention.ms": "-1", "preallocate": "TRUE",
          "diskless.enable": "true", "leader.replication.throttled.replicas": "0:1"}  # fmt: skip
    bad = {"cleanup.policy": "compact,forever", "compression.type": "brotli",
           "message.timestamp.type": "WallClock", "min.cleanable.dirty.ratio": "1.5",
           "segment.bytes": "2147483648", "retention.ms": "1h", "preallocate": "yes"}  # fmt: skip
    assert all(value_check(k)(v) for k, v in ok.items())
    assert not any(value_check(k)(v) for k, v in bad.items())
    # APPEND / SUBTRACT apply to the LIST rows only
    assert list_configs() == {"cleanup.policy", "follower.replication.throttled.replicas",
                              "leader.replication.throttled.replicas"}  # fmt: skip
    assert configuration.LIST_CONFIGS[RESOURCE_TOPIC] == list_configs()
