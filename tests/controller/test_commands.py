"""Commands: the records they return, replayed, give the state their response claims; errors
per entry carry messages and add no records."""

import uuid
from dataclasses import replace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kafka_rpc.controller import producer_ids, replication
from kafka_rpc.controller.image import ProducerIdsImage
from kafka_rpc.controller.snapshot import image_records, load
from kafka_rpc.protocol.errors import ErrorCode as E

from .harness import Cluster, topic


# ------------------------------------------------------------------ brokers
def test_register_new_broker_is_fenced_with_epoch_its_offset():
    c = Cluster()
    c.now = 5
    off = c.next_offset
    res = c.register(1)
    assert res.response.error_code == 0 and res.response.broker_epoch == off
    [rec] = res.records
    assert rec.broker_epoch == off and rec.fenced
    b = c.image.brokers[1]
    assert b.epoch == off and b.fenced and b.endpoint("PLAINTEXT").host == "h1"


def test_register_inconsistent_cluster_id():
    c = Cluster()
    res = c.register(1, cluster_id="other")
    assert (
        res.response.error_code == E.INCONSISTENT_CLUSTER_ID
        and not res.records
        and 1 not in c.image.brokers
    )


def test_duplicate_registration_of_live_broker_and_takeover_after_timeout():
    c = Cluster()
    c.live(1)
    assert not c.image.brokers[1].fenced
    other = uuid.UUID(int=0xDEAD, version=4)
    res = c.register(1, incarnation=other)
    assert res.response.error_code == E.DUPLICATE_BROKER_REGISTRATION and not res.records
    c.now += c.session_timeout_ms + 1  # session expired: the new incarnation may take over
    res = c.register(1, incarnation=other)
    assert res.response.error_code == 0 and c.image.brokers[1].incarnation_id == other


def test_same_incarnation_amends_keeping_epoch_and_state():
    """ClusterControlManager.registerBroker: the same incarnation again is an amendment: the
    epoch, fenced and controlled-shutdown flags are kept, only the record is rewritten (and its
    offset becomes the registration offset the catch-up rule uses)."""
    c = Cluster()
    c.live(1)
    e1 = c.image.brokers[1].epoch
    res = c.register(1)  # same incarnation (harness remembers it)
    assert res.response.error_code == 0 and res.response.broker_epoch == e1
    [rec] = res.records
    assert (rec.broker_epoch, rec.fenced, rec.in_controlled_shutdown) == (e1, False, False)
    reg = c.image.brokers[1]
    assert reg.epoch == e1 and not reg.fenced and reg.registration_offset > e1


def test_heartbeat_errors_and_unfencing_on_catch_up():
    c = Cluster()
    assert c.heartbeat(7, epoch=0).response.error_code == E.STALE_BROKER_EPOCH  # not registered
    c.register(1)
    epoch = c.image.brokers[1].epoch
    res = c.heartbeat(1, epoch=epoch + 1)
    assert res.response.error_code == E.STALE_BROKER_EPOCH and not res.records
    res = c.heartbeat(1, offset=epoch - 1)  # behind its registration record
    r = res.response
    assert (r.error_code, r.is_caught_up, r.is_fenced, r.should_shut_down) == (
        0,
        False,
        True,
        False,
    )
    assert not res.records and c.image.brokers[1].fenced
    res = c.heartbeat(1, offset=epoch, want_fence=True)  # caught up, but wants to stay fenced
    assert res.response.is_fenced and c.image.brokers[1].fenced
    res = c.heartbeat(1, offset=epoch)
    assert res.response.is_caught_up and not res.response.is_fenced
    assert [type(x).__name__ for x in res.records] == ["BrokerRegistrationChangeRecord"]
    assert res.records[0].fenced == -1
    assert not c.image.brokers[1].fenced
    res = c.heartbeat(1, want_fence=True)
    assert res.response.is_fenced and c.image.brokers[1].fenced


def test_controlled_shutdown_moves_leadership_then_shuts_down():
    c = Cluster(seed=3)
    c.live(1, 2)
    c.create(topic("t", n=4, rf=2))
    assert c.image.leaderships(1)
    res = c.heartbeat(1, want_shut_down=True)
    r = res.response
    assert (r.is_fenced, r.should_shut_down) == (False, False)
    assert c.image.brokers[1].in_controlled_shutdown
    assert not c.image.leaderships(1)
    assert all(1 not in p.isr for p in c.image.topic_by_name("t").partitions.values())
    res = c.heartbeat(1, want_shut_down=True)
    assert (res.response.is_fenced, res.response.should_shut_down) == (True, True)
    assert c.image.brokers[1].fenced


def test_fenced_broker_wanting_shutdown_shuts_down_now():
    c = Cluster()
    c.register(1)
    res = c.heartbeat(1, want_shut_down=True)
    assert res.response.should_shut_down and res.response.is_fenced and not res.records


def test_fence_stale_brokers_moves_leaders_and_keeps_last_isr_member():
    c = Cluster(seed=1)
    c.live(1, 2)
    c.create(topic("two", n=2, rf=2), topic("one", assignments=[(0, [1])], n=-1, rf=-1))
    c.now = 5000
    c.heartbeat(2)
    c.now = 9500  # broker 1 last heard at 0: stale; broker 2 at 5000: fine
    res = c.fence_stale()
    assert res.response == [1]
    assert type(res.records[-1]).__name__ == "BrokerRegistrationChangeRecord"
    assert res.records[-1].fenced == 1
    assert c.image.brokers[1].fenced and not c.image.brokers[2].fenced
    for p in c.image.topic_by_name("two").partitions.values():
        assert p.isr == (2,) and p.leader == 2
    p = c.image.topic_by_name("one").partitions[0]
    assert p.isr == (1,) and p.leader == -1  # the last ISR member stays, without leadership
    assert c.fence_stale().records == []  # nothing more to fence
    # Broker 1 comes back: unfenced, and it leads its leaderless partition again.
    res = c.heartbeat(1)
    assert not res.response.is_fenced
    p = c.image.topic_by_name("one").partitions[0]
    assert p.leader == 1 and p.leader_epoch == 2


# ------------------------------------------------------------------ create topics
def test_create_topics_records_match_response():
    c = Cluster(seed=2)
    c.live(1, 2, 3)
    res = c.create(
        topic("a", n=3, rf=2, configs=[("retention.ms", "1000"), ("cleanup.policy", "compact")])
    )
    [r] = res.response.topics
    assert r.error_code == 0 and r.num_partitions == 3 and r.replication_factor == 2
    assert r.topic_id.version == 4 and r.topic_id.int not in (0, 1)
    names = [type(x).__name__ for x in res.records]
    assert names == ["TopicRecord", "ConfigRecord", "ConfigRecord"] + ["PartitionRecord"] * 3
    t = c.image.topic_by_name("a")
    assert t.topic_id == r.topic_id and len(t.partitions) == 3
    for p in t.partitions.values():
        assert len(p.replicas) == 2 and len(set(p.replicas)) == 2 and p.isr == p.replicas
        assert p.leader == p.replicas[0] and p.leader_epoch == 0 and p.partition_epoch == 0
    assert dict(c.image.topic_configs("a")) == {"retention.ms": "1000", "cleanup.policy": "compact"}
    assert {x.name: x.value for x in r.configs} == {
        "retention.ms": "1000",
        "cleanup.policy": "compact",
    }
    # Leaders spread over all brokers (round-robin placement).
    assert {p.leader for p in t.partitions.values()} == {1, 2, 3}


@pytest.mark.parametrize(
    "t, code",
    [
        (topic(""), E.INVALID_TOPIC_EXCEPTION),
        (topic("."), E.INVALID_TOPIC_EXCEPTION),
        (topic(".."), E.INVALID_TOPIC_EXCEPTION),
        (topic("x" * 250), E.INVALID_TOPIC_EXCEPTION),
        (topic("bad name"), E.INVALID_TOPIC_EXCEPTION),
        (topic("exists"), E.TOPIC_ALREADY_EXISTS),
        (topic("ex_ists"), E.INVALID_TOPIC_EXCEPTION),  # collides with ex.ists
        (topic("p", n=0), E.INVALID_PARTITIONS),
        (topic("p", n=-5), E.INVALID_PARTITIONS),
        (topic("p", rf=0), E.INVALID_REPLICATION_FACTOR),
        # 3 registered brokers (one fenced, usable as a follower as in Kafka's placer)
        (topic("p", rf=4), E.INVALID_REPLICATION_FACTOR),
        (topic("p", configs=[("no.such.config", "1")]), E.INVALID_CONFIG),
        (topic("p", configs=[("retention.ms", "soon")]), E.INVALID_CONFIG),
        (topic("p", n=-1, rf=-1, assignments=[(0, [1, 1])]), E.INVALID_REPLICA_ASSIGNMENT),
        (topic("p", n=-1, rf=-1, assignments=[(0, [9])]), E.INVALID_REPLICA_ASSIGNMENT),
        (
            topic("p", n=-1, rf=-1, assignments=[(0, [1]), (1, [1, 2])]),
            E.INVALID_REPLICA_ASSIGNMENT,
        ),
        (topic("p", n=-1, rf=-1, assignments=[(1, [1])]), E.INVALID_REPLICA_ASSIGNMENT),
        (topic("p", n=-1, rf=-1, assignments=[(0, [3])]), E.INVALID_REPLICA_ASSIGNMENT),  # fenced
        (topic("p", n=2, rf=-1, assignments=[(0, [1])]), E.INVALID_REQUEST),
    ],
)
def test_create_topics_errors_have_messages_and_no_records(t, code):
    c = Cluster()
    c.live(1, 2)
    c.register(3)  # registered, fenced
    c.create(topic("exists"), topic("ex.ists"))
    before = c.image
    res = c.create(t, topic("good"))
    bad, good = res.response.topics
    assert bad.error_code == code and bad.error_message and bad.topic_id.int == 0
    assert good.error_code == 0
    # Only the good topic's records were written, as one batch.
    assert {getattr(r, "name", None) for r in res.records if type(r).__name__ == "TopicRecord"} == {
        "good"
    }
    assert set(c.image.topics_by_name) == set(before.topics_by_name) | {"good"}


def test_create_topics_duplicate_name_in_request():
    c = Cluster()
    c.live(1)
    res = c.create(topic("d"), topic("d"))
    assert [(r.name, r.error_code, r.error_message) for r in res.response.topics] == [
        ("d", E.INVALID_REQUEST, "Duplicate topic name.")
    ]
    assert not res.records


def test_create_topics_defaults_and_manual_assignment():
    c = Cluster()
    c.live(1, 2, 3)
    res = c.run(
        replication.create_topics,
        C_req := __import__("tests.controller.harness", fromlist=["R"]).R("CreateTopicsRequest")(
            topics=(
                topic("dflt", n=-1, rf=-1),
                topic("man", n=-1, rf=-1, assignments=[(0, [3, 1]), (1, [2, 3])]),
            )
        ),
        num_partitions=4,
        default_replication_factor=3,
    )
    del C_req
    d, m = res.response.topics
    assert (d.num_partitions, d.replication_factor) == (4, 3)
    assert (m.num_partitions, m.replication_factor) == (2, 2)
    parts = c.image.topic_by_name("man").partitions
    assert parts[0].replicas == (3, 1) and parts[0].leader == 3 and parts[1].replicas == (2, 3)


def test_validate_only_writes_nothing():
    c = Cluster()
    c.live(1)
    before = c.image
    res = c.create(topic("v", n=2), topic("bad/"), validate_only=True)
    v, bad = res.response.topics
    assert (
        v.error_code == 0 and v.num_partitions == 2 and bad.error_code == E.INVALID_TOPIC_EXCEPTION
    )
    assert res.records == [] and c.image == before


# ------------------------------------------------------------------ delete topics
def test_delete_by_name_and_id_then_recreate_gets_new_id():
    c = Cluster()
    c.live(1)
    c.create(topic("a", configs=[("retention.ms", "5")]), topic("b"))
    a_id, b_id = c.image.topics_by_name["a"], c.image.topics_by_name["b"]
    res = c.delete(names=["a"], ids=[b_id])
    assert sorted((r.name, r.topic_id, r.error_code) for r in res.response.responses) == [
        ("a", a_id, 0),
        ("b", b_id, 0),
    ]
    assert [type(r).__name__ for r in res.records] == ["RemoveTopicRecord"] * 2
    assert not c.image.topics and not c.image.topics_by_name and not c.image.configs
    res = c.create(topic("a"))
    new_id = res.response.topics[0].topic_id
    assert new_id != a_id and c.image.topics_by_name["a"] == new_id and a_id not in c.image.topics
    res = c.delete(ids=[a_id])
    assert res.response.responses[0].error_code == E.UNKNOWN_TOPIC_ID and not res.records


def test_delete_errors():
    c = Cluster()
    c.live(1)
    c.create(topic("a"))
    a_id = c.image.topics_by_name["a"]
    from .harness import DT, R

    req = R("DeleteTopicsRequest")(
        topics=(
            DT.DeleteTopicState(name="nope"),
            DT.DeleteTopicState(name=None, topic_id=uuid.uuid4()),
            DT.DeleteTopicState(name=None),
            DT.DeleteTopicState(name="a", topic_id=a_id),
            DT.DeleteTopicState(name=None, topic_id=a_id),
            DT.DeleteTopicState(name=None, topic_id=a_id),
        )
    )
    res = c.run(replication.delete_topics, req)
    codes = sorted(r.error_code for r in res.response.responses)
    assert codes == sorted(
        [
            E.UNKNOWN_TOPIC_OR_PARTITION,
            E.UNKNOWN_TOPIC_ID,
            E.INVALID_REQUEST,
            E.INVALID_REQUEST,
            E.INVALID_REQUEST,
        ]
    )
    assert all(r.error_message for r in res.response.responses)
    assert not res.records and "a" in c.image.topics_by_name


def test_the_coordinator_topic_is_never_deleted_by_name_or_id():
    """Our rule (stricter than Kafka's, which deletes __consumer_offsets): POLICY_VIOLATION with
    a message saying why; the other topics of the request are deleted as usual."""
    from kafka_rpc.controller import coordinator_mapping as M

    c = Cluster(seed=3)
    c.live(1)
    c.apply(M.create_diskless_metadata_topic(c.image, c.ctx(), 1, 1).records)
    c.create(topic("a"), topic("b"))
    meta = c.image.topics_by_name[M.DISKLESS_METADATA_TOPIC]
    b_id = c.image.topics_by_name["b"]
    for names, ids in (([M.DISKLESS_METADATA_TOPIC, "a"], [b_id]), ([], [meta])):
        res = c.delete(names=names, ids=ids)
        got = {r.name: (r.topic_id, r.error_code, r.error_message) for r in res.response.responses}
        assert got[M.DISKLESS_METADATA_TOPIC] == (
            meta, E.POLICY_VIOLATION,
            "Topic __diskless-metadata holds the state of every Batch Coordinator; deleting it "
            "would lose every diskless partition's offsets, so it cannot be deleted",
        )  # fmt: skip
        assert all(code == 0 for n, (_, code, _) in got.items() if n != M.DISKLESS_METADATA_TOPIC)
        assert all(r.topic_id != meta for r in res.records)
    assert c.image.topics_by_name == {M.DISKLESS_METADATA_TOPIC: meta}
    assert c.image.topics[meta].partitions


# ------------------------------------------------------------------ producer ids
def test_allocate_producer_ids_blocks_never_overlap_even_across_snapshot():
    c = Cluster()
    c.live(1, 2)
    blocks = []
    for i in range(5):
        r = c.allocate(1 + i % 2).response
        assert r.error_code == 0 and r.producer_id_len == 1000
        blocks.append(r.producer_id_start)
    assert blocks == [0, 1000, 2000, 3000, 4000]
    c.image = load(image_records(c.image), c.image.last_offset, c.image.last_epoch)
    assert c.allocate(2).response.producer_id_start == 5000
    assert c.image.producer_ids.next_producer_id == 6000


def test_allocate_producer_ids_errors():
    c = Cluster()
    c.register(1)  # fenced, but registered: still gets a block
    assert c.allocate(1).response.error_code == 0
    res = c.allocate(1, epoch=c.image.brokers[1].epoch + 1)
    assert res.response.error_code == E.STALE_BROKER_EPOCH and not res.records
    res = c.allocate(9, epoch=0)
    assert res.response.error_code == E.STALE_BROKER_EPOCH and not res.records
    c.image = replace(c.image, producer_ids=ProducerIdsImage(1, 0, (1 << 63) - 1001))
    assert c.allocate(1).response.error_code == 0  # the last full block fits exactly
    res = c.allocate(1)
    assert res.response.error_code == E.UNKNOWN_SERVER_ERROR and not res.records


def test_allocate_without_replay_returns_same_block():
    """The state moves only on replay (ProducerIdControlManagerTest.testMonotonic)."""
    c = Cluster()
    c.register(1)
    from .harness import R

    req = R("AllocateProducerIdsRequest")(broker_id=1, broker_epoch=c.image.brokers[1].epoch)
    a = producer_ids.allocate_producer_ids(c.image, req, c.ctx())
    b = producer_ids.allocate_producer_ids(c.image, req, c.ctx())
    assert a.response.producer_id_start == b.response.producer_id_start == 0


@settings(max_examples=300, deadline=None)
@given(
    st.lists(st.text("a._", min_size=1, max_size=6), max_size=12, unique=True),
    st.text("a._", min_size=1, max_size=14),
)
def test_colliding_topic_equals_a_walk_over_every_topic(existing, name) -> None:
    """The 2^k spellings lookup (and the walk beyond k = 10) find exactly the topics a walk
    comparing '.'-to-'_' normal forms finds (Kafka's Topic.hasCollision)."""
    from pyrsistent import pmap

    from kafka_rpc.controller.replication import colliding_topic

    names = pmap({n: i for i, n in enumerate(existing)})
    norm = name.replace(".", "_")
    walk = sorted(o for o in existing if o != name and o.replace(".", "_") == norm)
    assert colliding_topic(names, name) == (walk[0] if walk else None)
