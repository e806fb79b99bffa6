"""Registration, heartbeat and directory rules of Kafka 4.x's ``ClusterControlManager``,
``BrokerHeartbeatManager`` and ``ReplicationControlManager`` (the pitfalls a
foreign controller must avoid; docs/kafka-brokers.md, 'What works'), on the pure commands."""

from __future__ import annotations

import uuid

from kafka_rpc.controller import cluster, replication
from kafka_rpc.controller.features import default_feature_levels
from kafka_rpc.protocol import codec
from kafka_rpc.protocol.errors import ErrorCode as E
from tests.controller.harness import BR, CLUSTER, Cluster, broker_features, topic

R = codec.message_class
ATR = codec.module("AssignReplicasToDirsRequest")


def dir_of(n: int) -> uuid.UUID:
    return uuid.UUID(int=(n + 1) << 64)


def at_mv(level: int = 25) -> Cluster:
    return Cluster(seed=3, levels=default_feature_levels(level))


def request(broker_id: int, incarnation: uuid.UUID, dirs=None, **kw):
    return R("BrokerRegistrationRequest")(
        broker_id=broker_id,
        cluster_id=kw.pop("cluster_id", CLUSTER),
        incarnation_id=incarnation,
        listeners=(BR.Listener(name="PLAINTEXT", host="h", port=9092, security_protocol=0),),
        features=broker_features(),
        rack=None,
        log_dirs=(dir_of(broker_id),) if dirs is None else tuple(dirs),
        **kw,
    )


def register(c: Cluster, broker_id: int, incarnation: uuid.UUID, dirs=None, **kw):
    res = c.run(
        lambda img, req, ctx: cluster.register_broker(
            img, req, ctx, replication.broker_shutdown_records
        ),
        request(broker_id, incarnation, dirs, **kw),
    )
    if res.response.error_code == 0:
        c.heartbeats[broker_id] = c.now
        c.incarnations[broker_id] = incarnation
    return res


def test_log_dirs_rules_at_directory_assignment_versions():
    c = at_mv()
    a = uuid.uuid4()
    # empty, reserved (MIGRATING, UNASSIGNED, LOST, anything below 100), duplicated: refused
    for dirs, message in (
        ((), "No directories"),
        ((cluster.DIR_UNASSIGNED,), "Reserved"),
        ((uuid.UUID(int=99),), "Reserved"),
        ((dir_of(1), dir_of(1)), "Duplicate"),
    ):
        res = register(c, 1, a, dirs)
        assert res.response.error_code == E.INVALID_REGISTRATION, (dirs, message)
        assert not res.records and 1 not in c.image.brokers
    assert register(c, 1, a).response.error_code == 0
    # a directory another broker registered
    res = register(c, 2, uuid.uuid4(), (dir_of(2), dir_of(1)))
    assert res.response.error_code == E.INVALID_REGISTRATION and not res.records
    # the record keeps the LogDirs; below 3.7-IV2 none are required nor kept
    assert c.image.brokers[1].log_dirs == (dir_of(1),)
    old = at_mv(16)
    res = register(old, 1, a, ())
    assert res.response.error_code == 0 and old.image.brokers[1].log_dirs == ()


def test_zk_broker_and_wrong_cluster_are_refused():
    c = at_mv()
    res = register(c, 1, uuid.uuid4(), is_migrating_zk_broker=True)
    assert res.response.error_code == E.BROKER_ID_NOT_REGISTERED and not res.records
    res = register(c, 1, uuid.uuid4(), cluster_id="other")
    assert res.response.error_code == E.INCONSISTENT_CLUSTER_ID and not res.records


def test_amend_keeps_epoch_and_state_new_incarnation_cleans_up_first():
    c = at_mv()
    a, b = uuid.uuid4(), uuid.uuid4()
    for bid in (1, 2):
        register(c, bid, uuid.uuid4() if bid == 2 else a)
        c.heartbeat(bid)
    c.create(topic("t", n=2, rf=2))
    epoch = c.image.brokers[1].epoch
    assert c.image.leaderships(1)
    # the same incarnation again: amended, still unfenced, same epoch; the record's own offset
    # is the new catch-up point
    res = register(c, 1, a)
    assert [type(r).__name__ for r in res.records] == ["RegisterBrokerRecord"]
    reg = c.image.brokers[1]
    assert (reg.epoch, reg.fenced, reg.registration_offset) == (epoch, False, c.next_offset - 1)
    # another incarnation while the session is valid: DUPLICATE
    assert register(c, 1, b).response.error_code == E.DUPLICATE_BROKER_REGISTRATION
    c.now += c.session_timeout_ms + 1
    start = c.next_offset
    res = register(c, 1, b)
    assert res.response.error_code == 0 and res.response.broker_epoch == start
    names = [type(r).__name__ for r in res.records]
    assert names[-1] == "RegisterBrokerRecord" and set(names[:-1]) == {"PartitionChangeRecord"}
    reg = c.image.brokers[1]
    assert reg.epoch == start and reg.registration_offset == start + len(names) - 1
    assert reg.fenced and all(1 not in p.isr for t in c.image.topics.values()
                              for p in t.partitions.values())  # fmt: skip
    # caught up only at the RegisterBrokerRecord's offset, not at the epoch
    hb = c.heartbeat(1, offset=start)
    assert not hb.response.is_caught_up and hb.response.is_fenced
    hb = c.heartbeat(1, offset=reg.registration_offset)
    assert hb.response.is_caught_up and not hb.response.is_fenced


def test_a_fenced_broker_with_a_valid_session_is_not_replaced():
    """Kafka 4.x's session counts fenced brokers too (BrokerHeartbeatTracker)."""
    c = at_mv()
    a = uuid.uuid4()
    register(c, 1, a)
    c.heartbeat(1, want_fence=True)
    assert c.image.brokers[1].fenced
    assert register(c, 1, uuid.uuid4()).response.error_code == E.DUPLICATE_BROKER_REGISTRATION
    c.now += c.session_timeout_ms + 1
    assert register(c, 1, uuid.uuid4()).response.error_code == 0


def test_controlled_shutdown_waits_for_the_lowest_active_offset():
    c = at_mv()
    for bid in (1, 2):
        register(c, bid, uuid.uuid4())
        c.heartbeat(bid)
    c.create(topic("t", n=-1, rf=-1, assignments=[(0, [1, 2])]), topic("u", n=1))
    req = R("BrokerHeartbeatRequest")
    epoch1 = c.image.brokers[1].epoch
    res = replication.broker_heartbeat(c.image, req(
        broker_id=1, broker_epoch=epoch1, current_metadata_offset=c.next_offset - 1,
        want_shut_down=True), c.ctx())  # fmt: skip
    c.apply(res.records)
    shutdown_offset = c.next_offset - 1
    assert c.image.brokers[1].in_controlled_shutdown and not res.response.should_shut_down
    assert res.records[0].in_controlled_shutdown == 1 and res.records[0].fenced == 0
    assert not c.image.leaderships(1)
    # broker 2 (the only active broker) has not reported past the shutdown offset yet
    offsets = {1: shutdown_offset, 2: shutdown_offset - 1}
    again = req(broker_id=1, broker_epoch=epoch1, current_metadata_offset=shutdown_offset,
                want_shut_down=True)  # fmt: skip
    res = replication.broker_heartbeat(c.image, again, c.ctx(
        metadata_offsets=offsets, controlled_shutdown_offsets={1: shutdown_offset}))
    assert not res.response.should_shut_down and not res.records
    offsets[2] = shutdown_offset
    res = replication.broker_heartbeat(c.image, again, c.ctx(
        metadata_offsets=offsets, controlled_shutdown_offsets={1: shutdown_offset}))
    assert res.response.should_shut_down and res.response.is_fenced
    assert [type(r).__name__ for r in res.records] == ["BrokerRegistrationChangeRecord"]
    assert res.records[0].fenced == 1


def test_partition_directories_and_assign_replicas_to_dirs():
    c = at_mv()
    d2 = (dir_of(2), uuid.uuid4())
    register(c, 1, uuid.uuid4())
    register(c, 2, uuid.uuid4(), d2)
    for bid in (1, 2):
        c.heartbeat(bid)
    c.create(topic("t", n=-1, rf=-1, assignments=[(0, [1, 2])]))
    tid = c.image.topics_by_name["t"]
    p = c.image.topics[tid].partitions[0]
    # ClusterControlManager.defaultDir: the single dir, UNASSIGNED with several
    assert p.directories == (dir_of(1), cluster.DIR_UNASSIGNED)

    def assign(broker_id, directory, parts, epoch=None):
        reg = c.image.brokers[broker_id]
        req = R("AssignReplicasToDirsRequest")(
            broker_id=broker_id, broker_epoch=reg.epoch if epoch is None else epoch,
            directories=(ATR.DirectoryData(id=directory, topics=tuple(
                ATR.TopicData(topic_id=t, partitions=tuple(
                    ATR.PartitionData(partition_index=i) for i in idx)) for t, idx in parts)),),
        )  # fmt: skip
        return c.run(replication.assign_replicas_to_dirs, req)

    res = assign(2, d2[1], [(tid, [0, 5]), (uuid.uuid4(), [0])])
    [d] = res.response.directories
    codes = [[q.error_code for q in t.partitions] for t in d.topics]
    assert codes == [[0, E.UNKNOWN_TOPIC_OR_PARTITION], [E.UNKNOWN_TOPIC_ID]]
    assert [type(r).__name__ for r in res.records] == ["PartitionChangeRecord"]
    assert c.image.topics[tid].partitions[0].directories == (dir_of(1), d2[1])
    assert c.image.topics[tid].partitions[0].isr == (1, 2)
    assert not assign(2, d2[1], [(tid, [0])]).records  # already there: no record
    assert assign(2, d2[1], [(tid, [0])], epoch=12345).response.error_code == (
        E.STALE_BROKER_EPOCH
    )
    c.create(topic("only1", n=-1, rf=-1, assignments=[(0, [1])]))
    res = assign(2, d2[1], [(c.image.topics_by_name["only1"], [0])])
    assert res.response.directories[0].topics[0].partitions[0].error_code == (
        E.NOT_LEADER_OR_FOLLOWER
    )
    # a directory the broker does not list as online: it also leaves the ISR
    lost = uuid.uuid4()
    assign(2, lost, [(tid, [0])])
    assert c.image.topics[tid].partitions[0].isr == (1,)
    # below 3.7-IV2 the RPC is refused
    old = at_mv(16)
    req = R("AssignReplicasToDirsRequest")(broker_id=1, broker_epoch=0, directories=())
    assert old.run(replication.assign_replicas_to_dirs, req).response.error_code == (
        E.UNSUPPORTED_VERSION
    )


def test_offline_log_dirs_move_leaderships_and_shrink_log_dirs():
    c = at_mv()
    d1 = (dir_of(1), uuid.uuid4())
    register(c, 1, uuid.uuid4(), d1)
    register(c, 2, uuid.uuid4())
    for bid in (1, 2):
        c.heartbeat(bid)
    c.create(topic("t", n=-1, rf=-1, assignments=[(0, [1, 2])]))
    tid = c.image.topics_by_name["t"]
    c.run(replication.assign_replicas_to_dirs, R("AssignReplicasToDirsRequest")(
        broker_id=1, broker_epoch=c.image.brokers[1].epoch, directories=(ATR.DirectoryData(
            id=d1[0], topics=(ATR.TopicData(topic_id=tid, partitions=(
                ATR.PartitionData(partition_index=0),)),)),)))  # fmt: skip
    assert c.image.topics[tid].partitions[0].leader == 1
    reg = c.image.brokers[1]
    res = c.run(replication.broker_heartbeat, R("BrokerHeartbeatRequest")(
        broker_id=1, broker_epoch=reg.epoch, current_metadata_offset=c.next_offset,
        offline_log_dirs=(d1[0],)))  # fmt: skip
    assert res.response.error_code == 0 and not res.response.is_fenced
    p = c.image.topics[tid].partitions[0]
    assert (p.leader, p.isr) == (2, (2,))
    assert c.image.brokers[1].log_dirs == (d1[1],)
    assert res.records[-1].log_dirs == (d1[1],)
