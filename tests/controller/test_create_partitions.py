"""CreatePartitions (37) on the controller (Kafka's ``ReplicationControlManager.createPartitions``
and ``ControllerApis.createPartitions``), and where new partitions may be placed
(``kafka_rpc.controller.placement``: ``__diskless-metadata`` on kafka-rpc brokers only, classic
topics on Kafka brokers while any is registered)."""

from __future__ import annotations

from kafka_rpc.controller import coordinator_mapping as M
from kafka_rpc.controller import replication
from kafka_rpc.controller.placement import coordinator_hosts, runs_batch_coordinator
from kafka_rpc.protocol import codec
from kafka_rpc.protocol.errors import ErrorCode as E

from .harness import Cluster, topic

CP = codec.module("CreatePartitionsRequest")


def grow(name, count, assignments=None):
    return CP.CreatePartitionsTopic(
        name=name,
        count=count,
        assignments=None if assignments is None else tuple(
            CP.CreatePartitionsAssignment(broker_ids=tuple(a)) for a in assignments),
    )  # fmt: skip


def run(c: Cluster, *topics, validate_only=False, **ctx):
    req = CP.CreatePartitionsRequest(topics=tuple(topics), timeout_ms=5000,
                                     validate_only=validate_only)  # fmt: skip
    before = len(c.log)
    res = c.run(replication.create_partitions, req, **ctx)
    got = [(r.name, r.error_code, r.error_message) for r in res.response.results]
    return got, c.log[before:]


def partitions(c: Cluster, name: str):
    t = c.image.topic_by_name(name)
    return {i: (p.replicas, p.isr, p.leader, p.leader_epoch) for i, p in t.partitions.items()}


def test_grows_topics_in_one_batch_placed_with_the_topics_replication_factor():
    c = Cluster(seed=1)
    c.live(1, 2, 3)
    c.create(topic("a", n=2, rf=2), topic("b", n=1, rf=3))
    got, log = run(c, grow("a", 5), grow("b", 2))
    assert got == [("a", 0, None), ("b", 0, None)]
    assert len(log) == 4  # 3 + 1 PartitionRecords, one atomic batch
    a = partitions(c, "a")
    assert sorted(a) == [0, 1, 2, 3, 4]
    for i in (2, 3, 4):
        replicas, isr, leader, epoch = a[i]
        assert len(replicas) == 2 == len(set(replicas)) and isr == replicas
        assert leader == replicas[0] and epoch == 0
    assert sorted(partitions(c, "b")[1][0]) == [1, 2, 3]


def test_errors_in_kafkas_order_with_its_messages():
    c = Cluster(seed=2)
    c.live(1, 2)
    c.register(3)  # registered, fenced
    c.create(topic("a", n=2, rf=2))
    got, log = run(
        c,
        grow("nope", 3),
        grow("a", 2),
        grow("a", 1),
    )
    # "a" twice: one INVALID_REQUEST result first, the topic not run at all
    assert got == [
        ("a", E.INVALID_REQUEST, "Duplicate topic name."),
        ("nope", E.UNKNOWN_TOPIC_OR_PARTITION, None),
    ]
    assert log == []
    cases = [
        (grow("a", 2), E.INVALID_PARTITIONS, "Topic already has 2 partition(s)."),
        (grow("a", 1), E.INVALID_PARTITIONS,
         "The topic a currently has 2 partition(s); 1 would not be an increase."),
        (grow("a", 4, [[1, 2]]), E.INVALID_REPLICA_ASSIGNMENT,
         "Attempted to add 2 additional partition(s), but only 1 assignment(s) were specified."),
        (grow("a", 3, [[]]), E.INVALID_REPLICA_ASSIGNMENT,
         "The manual partition assignment includes an empty replica list."),
        (grow("a", 3, [[1, 9]]), E.INVALID_REPLICA_ASSIGNMENT,
         "The manual partition assignment includes broker 9, but no such broker is registered."),
        (grow("a", 3, [[2, 2]]), E.INVALID_REPLICA_ASSIGNMENT,
         "The manual partition assignment includes the broker 2 more than once."),
        (grow("a", 3, [[1]]), E.INVALID_REPLICA_ASSIGNMENT,
         "The manual partition assignment includes a partition with 1 replica(s), but this is "
         "not consistent with previous partitions, which have 2 replica(s)."),
        (grow("a", 3, [[3, 3]]), E.INVALID_REPLICA_ASSIGNMENT,
         "The manual partition assignment includes the broker 3 more than once."),
    ]  # fmt: skip
    for req, code, msg in cases:
        got, log = run(c, req)
        assert got == [("a", code, msg)] and log == [], req
    c.register(4)
    got, _ = run(c, grow("a", 3, [[3, 4]]))  # both fenced
    assert got == [("a", E.INVALID_REPLICA_ASSIGNMENT, "All brokers specified in the manual "
                    "partition assignment for partition 2 are fenced or in controlled shutdown.")]
    c.create(topic("wide", n=1, rf=2))
    got, _ = run(c, grow("a", 3), grow("wide", 4, [[1, 2], [2, 1], [1, 3]]))
    assert got == [("a", 0, None), ("wide", 0, None)]
    # the fenced broker 3 is a replica, not in the ISR
    assert partitions(c, "wide")[3][:3] == ((1, 3), (1,), 1)


def test_validate_only_answers_the_same_and_writes_nothing():
    c = Cluster(seed=3)
    c.live(1, 2)
    c.create(topic("a", n=1, rf=1))
    got, log = run(c, grow("a", 4), grow("zz", 2), validate_only=True)
    assert got == [("a", 0, None), ("zz", E.UNKNOWN_TOPIC_OR_PARTITION, None)] and log == []
    assert len(c.image.topic_by_name("a").partitions) == 1


def test_too_many_partitions_in_one_request_is_a_policy_violation():
    c = Cluster(seed=4)
    c.live(1)
    c.create(topic("a"), topic("b"))
    got, log = run(c, grow("a", replication.MAX_RECORDS_PER_USER_OP), grow("b", 3))
    msg = "Unable to perform excessively large batch operation."
    assert got == [("a", 0, None), ("b", E.POLICY_VIOLATION, msg)]
    assert len(log) == replication.MAX_RECORDS_PER_USER_OP - 1
    got, log = run(c, grow("b", 2**31 - 1))  # no 2 billion records, no hang
    assert got == [("b", E.POLICY_VIOLATION, msg)] and log == []


def test_growing_the_coordinator_topic_places_on_kafka_rpc_brokers_only():
    c = Cluster(seed=5, kafka_compatible=True)  # a Kafka broker may register
    c.live(1, 2)
    c.register(7, kafka=True)  # an Apache Kafka broker: no feature of ours
    c.heartbeat(7)
    assert [runs_batch_coordinator(c.image.brokers[b]) for b in (1, 2, 7)] == [True, True, False]
    # rf 3: our 2 brokers are too few (the Kafka broker does not count); rf 2 places on both
    assert M.create_diskless_metadata_topic(c.image, c.ctx(), 1, 3).records == []
    c.apply(M.create_diskless_metadata_topic(c.image, c.ctx(), 1, 2).records)
    meta = c.image.topic_by_name(M.DISKLESS_METADATA_TOPIC)
    assert sorted(meta.partitions[0].replicas) == [1, 2]
    got, _ = run(c, grow(M.DISKLESS_METADATA_TOPIC, 6))
    assert got == [(M.DISKLESS_METADATA_TOPIC, 0, None)]
    for p in partitions(c, M.DISKLESS_METADATA_TOPIC).values():
        assert sorted(p[0]) == [1, 2]
    # a manual assignment naming the Kafka broker is refused
    got, _ = run(c, grow(M.DISKLESS_METADATA_TOPIC, 7, [[1, 7]]))
    assert got == [(M.DISKLESS_METADATA_TOPIC, E.INVALID_REPLICA_ASSIGNMENT,
                    f"The manual partition assignment of {M.DISKLESS_METADATA_TOPIC}-6 includes "
                    "broker 7, which does not run the Batch Coordinator.")]  # fmt: skip
    assert coordinator_hosts(c.image) == [1, 2]


def test_the_coordinator_topic_grows_onto_broker_only_nodes():
    """Whatever their roles: a broker that runs the Batch Coordinator but is no controller voter
    (ids 11, 12 here; the controller is not a broker at all) holds replicas."""
    c = Cluster(seed=9)
    c.live(11, 12)
    c.apply(M.create_diskless_metadata_topic(c.image, c.ctx(controller_ids=frozenset({1})),
                                             1, 2).records)  # fmt: skip
    got, _ = run(c, grow(M.DISKLESS_METADATA_TOPIC, 3), controller_ids=frozenset({1}))
    assert got == [(M.DISKLESS_METADATA_TOPIC, 0, None)]
    for p in partitions(c, M.DISKLESS_METADATA_TOPIC).values():
        assert sorted(p[0]) == [11, 12]


def test_the_coordinator_topic_never_shrinks():
    """A lower (or equal) count on __diskless-metadata is refused as Kafka refuses it on any
    topic: INVALID_PARTITIONS, nothing written (a Batch Coordinator's log is never dropped)."""
    c = Cluster(seed=8)
    c.live(1, 2)
    c.apply(M.create_diskless_metadata_topic(c.image, c.ctx(), 3, 2).records)
    name = M.DISKLESS_METADATA_TOPIC
    got, log = run(c, grow(name, 2))
    assert got == [(name, E.INVALID_PARTITIONS,
                    f"The topic {name} currently has 3 partition(s); 2 would not be an increase.")]
    assert log == []
    got, log = run(c, grow(name, 3))
    assert got == [(name, E.INVALID_PARTITIONS, "Topic already has 3 partition(s).")] and not log
    assert sorted(partitions(c, name)) == [0, 1, 2]


def test_classic_topics_go_to_kafka_brokers_while_any_is_registered():
    c = Cluster(seed=6, kafka_compatible=True)  # a Kafka broker may register
    c.live(1, 2)
    c.create(topic("before", n=4, rf=2))  # kafka-rpc brokers alone: placed on them
    assert {b for p in partitions(c, "before").values() for b in p[0]} == {1, 2}
    c.register(7, kafka=True)
    c.register(8, kafka=True)
    c.heartbeat(7)  # 8 stays fenced
    res = c.create(topic("classic", n=4, rf=1),
                   topic("diskless", n=4, rf=1, configs=[("diskless.enable", "true")]))
    assert [t.error_code for t in res.response.topics] == [0, 0]
    assert {p[0] for p in partitions(c, "classic").values()} == {(7,)}
    # a diskless topic's data is in object storage: any broker
    got = c.create(topic("wide", n=1, rf=3, configs=[("diskless.enable", "true")]))
    assert got.response.topics[0].error_code == 0
    got, _ = run(c, grow("classic", 6))
    assert got == [("classic", 0, None)]
    assert {p[0] for p in partitions(c, "classic").values()} == {(7,)}
    # the fenced Kafka broker counts (Kafka's usable brokers), the kafka-rpc ones do not
    res = c.create(topic("two", n=1, rf=2), topic("three", n=1, rf=3))
    assert res.response.topics[0].error_code == 0
    assert {p[0] for p in partitions(c, "two").values()} == {(7, 8)}
    assert res.response.topics[1].error_code == E.INVALID_REPLICATION_FACTOR
    assert "only 2 Kafka broker(s)" in res.response.topics[1].error_message


def test_the_coordinator_topic_waits_for_brokers_that_can_host_it():
    c = Cluster(seed=7, kafka_compatible=True)  # a Kafka broker may register
    c.register(5, kafka=True)
    c.heartbeat(5)
    # only a Kafka broker: nothing to place the coordinators on
    assert not M.metadata_topic_due(c.image, 1)
    res = M.create_diskless_metadata_topic(c.image, c.ctx(), 1, 1)
    assert res.records == []
    c.live(1)
    assert M.metadata_topic_due(c.image, 1)
    res = M.create_diskless_metadata_topic(c.image, c.ctx(), 2, 1)
    c.apply(res.records)
    meta = c.image.topic_by_name(M.DISKLESS_METADATA_TOPIC)
    assert [p.replicas for p in meta.partitions.values()] == [(1,), (1,)]
