"""DescribeConfigs (32) and DescribeTopicPartitions (75) answered from a hand-built
MetadataImage, through the wire codec at every version: Kafka's ``ConfigHelper`` and
``DescribeTopicPartitionsRequestHandler`` rules (the comparison with a running Kafka broker is in
``tests/kafka/test_kafka_tools.py``)."""

from __future__ import annotations

import uuid

import pytest
from pyrsistent import pmap

from kafka_rpc.controller.image import (
    BrokerRegistration,
    Endpoint,
    MetadataImage,
    PartitionRegistration,
    TopicImage,
)
from kafka_rpc.controller.topic_configs import TOPIC_CONFIG_DEFS, describe_topic_configs
from kafka_rpc.handlers.configs import describe_configs_response
from kafka_rpc.handlers.configs import error_response as configs_error
from kafka_rpc.handlers.topic_partitions import describe_topic_partitions_response
from kafka_rpc.handlers.topic_partitions import error_response as partitions_error
from kafka_rpc.protocol import codec
from kafka_rpc.protocol.errors import ErrorCode as E

DC = codec.module("DescribeConfigsRequest")
DT = codec.module("DescribeTopicPartitionsRequest")
PLAIN = "PLAINTEXT"
T_A = uuid.UUID("11111111-1111-4111-8111-111111111111")
T_B = uuid.UUID("22222222-2222-4222-8222-222222222222")
T_C = uuid.UUID("33333333-3333-4333-8333-333333333333")
ALL_TOPIC_OPS = sum(1 << op for op in (3, 4, 5, 6, 7, 8, 10, 11))


def _broker(bid, fenced=False, listeners=(PLAIN,)):
    return BrokerRegistration(
        broker_id=bid,
        incarnation_id=uuid.uuid4(),
        epoch=bid,
        endpoints=tuple(Endpoint(n, f"h{bid}", 9000 + bid, 0) for n in listeners),
        fenced=fenced,
    )


def image() -> MetadataImage:
    def topic(name, tid, n):
        return TopicImage(name, tid, pmap({
            i: PartitionRegistration(replicas=(1, 2), isr=(1,), leader=1 + i % 3, leader_epoch=i,
                                     elr=(2,) if i == 0 else None)
            for i in range(n)
        }))  # fmt: skip

    return MetadataImage(
        brokers=pmap({1: _broker(1), 2: _broker(2, fenced=True), 3: _broker(3, listeners=("X",))}),
        topics=pmap({T_A: topic("alpha", T_A, 3), T_B: topic("beta", T_B, 2),
                     T_C: topic("__diskless-metadata", T_C, 1)}),  # fmt: skip
        topics_by_name=pmap({"alpha": T_A, "beta": T_B, "__diskless-metadata": T_C}),
        configs=pmap({(2, "alpha"): pmap({"retention.ms": "1000", "cleanup.policy": "compact"})}),
    )


def wire(name, version, msg):
    return codec.decode(name, version, codec.encode(msg, version))


# ------------------------------------------------------------------------------ DescribeConfigs
def configs(resources, version=4, synonyms=False, settings=None, img=None):
    req = DC.DescribeConfigsRequest(
        resources=tuple(DC.DescribeConfigsResource(resource_type=t, resource_name=n,
                                                   configuration_keys=k)
                        for t, n, k in resources),
        include_synonyms=synonyms,
    )  # fmt: skip
    req = wire("DescribeConfigsRequest", version, req)
    resp = describe_configs_response(img or image(), req, settings or {})
    return wire("DescribeConfigsResponse", version, resp)


@pytest.mark.parametrize("version", [1, 2, 3, 4])
def test_topic_configs_every_kafka_config_with_overrides_first(version):
    resp = configs([(2, "alpha", None)], version, synonyms=True)
    (res,) = resp.results
    assert (res.error_code, res.error_message, res.resource_type, res.resource_name) == (
        0, "", 2, "alpha")  # fmt: skip
    by_name = {c.name: c for c in res.configs}
    assert set(by_name) == set(TOPIC_CONFIG_DEFS)
    ret = by_name["retention.ms"]
    assert (ret.value, ret.config_source, ret.read_only, ret.is_sensitive) == (
        "1000", 1, False, False)  # fmt: skip
    assert [(s.name, s.value, s.source) for s in ret.synonyms] == [("retention.ms", "1000", 1)]
    pol = by_name["cleanup.policy"]
    assert [(s.name, s.value, s.source) for s in pol.synonyms] == [
        ("cleanup.policy", "compact", 1), ("log.cleanup.policy", "delete", 5)]  # fmt: skip
    seg = by_name["segment.bytes"]
    assert (seg.value, seg.config_source) == ("1073741824", 5)
    assert [(s.name, s.source) for s in seg.synonyms] == [("log.segment.bytes", 5)]
    assert by_name["segment.ms"].synonyms == ()  # log.roll.ms has no default: none, as Kafka
    if version >= 3:
        assert (ret.config_type, pol.config_type, by_name["preallocate"].config_type) == (5, 7, 1)
        assert all(c.documentation is None for c in res.configs)  # texts are not kept
    else:
        assert ret.config_type == 0  # not on the wire


def test_configuration_keys_and_no_synonyms_unless_asked():
    (res,) = configs([(2, "beta", ("retention.bytes", "nope", "cleanup.policy"))]).results
    assert [(c.name, c.value, c.config_source, c.synonyms) for c in res.configs] == [
        ("cleanup.policy", "delete", 5, ()), ("retention.bytes", "-1", 5, ())]  # fmt: skip
    (res,) = configs([(2, "beta", ())]).results  # empty list: every config
    assert len(res.configs) == len(TOPIC_CONFIG_DEFS)


def test_static_broker_settings_are_the_topic_defaults():
    settings = {"log.retention.ms": "5000", "log.retention.bytes": "77"}
    (res,) = configs([(2, "beta", None), (2, "alpha", None)], synonyms=True,
                     settings=settings).results[:1]  # fmt: skip
    by_name = {c.name: c for c in res.configs}
    ret, size = by_name["retention.ms"], by_name["retention.bytes"]
    assert (ret.value, ret.config_source) == ("5000", 4)
    # Kafka's chain: the static log.retention.ms, then log.retention.hours' default
    assert [(s.name, s.value, s.source) for s in ret.synonyms] == [
        ("log.retention.ms", "5000", 4), ("log.retention.hours", "168", 5)]  # fmt: skip
    assert [(s.name, s.value, s.source) for s in size.synonyms] == [
        ("log.retention.bytes", "77", 4), ("log.retention.bytes", "-1", 5)]  # fmt: skip
    # a topic override still wins, with the static and default synonyms after it
    entries = describe_topic_configs({"retention.ms": "9"}, settings, ["retention.ms"], True)
    assert [(e.value, e.source, e.synonyms[0][2]) for e in entries] == [("9", 1, 1)]
    assert [s[0] for s in entries[0].synonyms] == [
        "retention.ms", "log.retention.ms", "log.retention.hours"]  # fmt: skip


def test_dynamic_broker_configs_of_the_metadata_log_come_before_static_ones():
    img = image()
    img = MetadataImage(brokers=img.brokers, topics=img.topics, topics_by_name=img.topics_by_name,
                        configs=pmap({**dict(img.configs),
                                      (4, ""): pmap({"log.retention.ms": "7000",
                                                     "message.max.bytes": "2000000"}),
                                      (4, "1"): pmap({"log.retention.bytes": "99"}),
                                      (4, "2"): pmap({"log.retention.bytes": "55"})}))  # fmt: skip
    keys = ("retention.ms", "retention.bytes", "max.message.bytes")
    resource = DC.DescribeConfigsResource(resource_type=2, resource_name="beta",
                                          configuration_keys=keys)  # fmt: skip
    req = DC.DescribeConfigsRequest(resources=(resource,), include_synonyms=True)
    settings = {"log.retention.ms": "5000"}
    (res,) = describe_configs_response(img, req, settings, node_id=1).results
    got = {c.name: (c.value, c.config_source, [(s.name, s.value, s.source) for s in c.synonyms])
           for c in res.configs}  # fmt: skip
    assert got == {
        "retention.ms": ("7000", 3, [("log.retention.ms", "7000", 3),
                                     ("log.retention.ms", "5000", 4),
                                     ("log.retention.hours", "168", 5)]),
        "retention.bytes": ("99", 2, [("log.retention.bytes", "99", 2),  # node 1's, not 2's
                                      ("log.retention.bytes", "-1", 5)]),
        "max.message.bytes": ("2000000", 3, [("message.max.bytes", "2000000", 3),
                                             ("message.max.bytes", "1048588", 5)]),
    }  # fmt: skip


def test_topic_errors_with_kafkas_messages():
    resp = configs([(2, "missing", None), (2, "bad name!", None), (2, "", None), (2, "..", None)])
    assert [(r.error_code, r.error_message, r.configs) for r in resp.results] == [
        (E.UNKNOWN_TOPIC_OR_PARTITION, "", ()),
        (E.INVALID_TOPIC_EXCEPTION, "Topic name is invalid: 'bad name!' contains one or more "
         "characters other than ASCII alphanumerics, '.', '_' and '-'", ()),
        (E.INVALID_TOPIC_EXCEPTION, "Topic name is invalid: the empty string is not allowed", ()),
        (E.INVALID_TOPIC_EXCEPTION, "Topic name is invalid: '..' is not allowed", ()),
    ]  # fmt: skip


def test_other_kafka_resource_types_unsupported_unknown_ones_fail_the_request():
    resp = configs([(4, "1", None), (2, "beta", ["preallocate"]), (32, "g", None)])
    assert [(r.resource_type, r.error_code) for r in resp.results] == [
        (4, E.INVALID_REQUEST), (2, 0), (32, E.INVALID_REQUEST)]  # fmt: skip
    assert resp.results[0].error_message == "Unsupported resource type: 4"
    req = DC.DescribeConfigsRequest(resources=(
        DC.DescribeConfigsResource(resource_type=3, resource_name="x"),
        DC.DescribeConfigsResource(resource_type=2, resource_name="beta")))  # fmt: skip
    # Kafka's handler throws: every resource INVALID_REQUEST with Kafka's text
    err = wire("DescribeConfigsResponse", 4, describe_configs_response(image(), req, {}))
    assert err == wire("DescribeConfigsResponse", 4, configs_error(req, 4, E.INVALID_REQUEST))
    assert [(r.resource_type, r.error_code) for r in err.results] == [(3, 42), (2, 42)]
    assert err.results[0].error_message.startswith("This most likely occurs because")


# ---------------------------------------------------------------------- DescribeTopicPartitions
def partitions(names=(), limit=2000, cursor=None, img=None):
    req = DT.DescribeTopicPartitionsRequest(
        topics=tuple(DT.TopicRequest(name=n) for n in names),
        response_partition_limit=limit,
        cursor=None if cursor is None else DT.Cursor(topic_name=cursor[0],
                                                     partition_index=cursor[1]),
    )  # fmt: skip
    req = wire("DescribeTopicPartitionsRequest", 0, req)
    resp = describe_topic_partitions_response(img or image(), req, PLAIN)
    return wire("DescribeTopicPartitionsResponse", 0, resp)


def pages(resp):
    return [(t.name, [p.partition_index for p in t.partitions]) for t in resp.topics]


def test_all_topics_in_name_order_with_partition_details():
    resp = partitions()
    assert pages(resp) == [("__diskless-metadata", [0]), ("alpha", [0, 1, 2]), ("beta", [0, 1])]
    assert resp.next_cursor is None
    internal, alpha, _ = resp.topics
    assert (internal.is_internal, alpha.is_internal, alpha.topic_id) == (True, False, T_A)
    assert alpha.topic_authorized_operations == ALL_TOPIC_OPS
    p0, p1, p2 = alpha.partitions
    # leader 2 is fenced, leader 3 has no PLAINTEXT endpoint: -1, and no partition error
    assert [(p.error_code, p.leader_id, p.leader_epoch) for p in alpha.partitions] == [
        (0, 1, 0), (0, -1, 1), (0, -1, 2)]  # fmt: skip
    assert (p0.replica_nodes, p0.isr_nodes, p0.offline_replicas) == ((1, 2), (1,), (2,))
    assert (p0.eligible_leader_replicas, p0.last_known_elr) == ((2,), ())
    assert p1.eligible_leader_replicas == ()


def test_paging_by_partition_limit_and_cursor():
    resp = partitions(limit=2)
    assert pages(resp) == [("__diskless-metadata", [0]), ("alpha", [0])]
    assert (resp.next_cursor.topic_name, resp.next_cursor.partition_index) == ("alpha", 1)
    resp = partitions(limit=2, cursor=("alpha", 1))
    assert pages(resp) == [("alpha", [1, 2])]
    # the limit reached exactly before a topic: the cursor names it at partition 0
    assert (resp.next_cursor.topic_name, resp.next_cursor.partition_index) == ("beta", 0)
    resp = partitions(limit=2, cursor=("beta", 0))
    assert (pages(resp), resp.next_cursor) == ([("beta", [0, 1])], None)
    assert pages(partitions(limit=0)) == [("__diskless-metadata", [0])]  # at least 1
    assert pages(partitions(limit=10**6)) == pages(partitions())


def test_named_topics_unknown_invalid_and_cursor_rules():
    resp = partitions(["beta", "nope", "bad name!", "beta"])
    assert [(t.name, t.error_code, t.partitions == ()) for t in resp.topics] == [
        ("bad name!", E.INVALID_TOPIC_EXCEPTION, True), ("beta", 0, False),
        ("nope", E.UNKNOWN_TOPIC_OR_PARTITION, True)]  # fmt: skip
    assert resp.topics[2].topic_id == uuid.UUID(int=0)
    assert pages(partitions(["alpha", "beta"], cursor=("beta", 1))) == [("beta", [1])]
    for bad in (("gamma", 0), ("beta", -1)):  # Kafka throws: every named topic INVALID_REQUEST
        resp = partitions(["alpha", "beta"], cursor=bad)
        assert [(t.name, t.error_code, t.partitions) for t in resp.topics] == [
            ("alpha", E.INVALID_REQUEST, ()), ("beta", E.INVALID_REQUEST, ())]  # fmt: skip
    req = DT.DescribeTopicPartitionsRequest(topics=(DT.TopicRequest(name="a"),) * 2)
    err = wire("DescribeTopicPartitionsResponse", 0, partitions_error(req, 0, 42))
    assert [(t.name, t.error_code) for t in err.topics] == [("a", 42)]
