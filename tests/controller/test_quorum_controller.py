"""QuorumController over a real RaftCore + MemoryLog driven by hand (no driver task, no clock):
writes are replayed into the uncommitted image at once and answered only after commit; producer-id
blocks in a row never overlap; non-active nodes and lost leadership answer NOT_CONTROLLER and the
uncommitted image falls back to the committed one."""

from __future__ import annotations

import asyncio
import dataclasses
import uuid

from kafka_rpc.controller.features import BOOTSTRAP_METADATA_VERSION
from kafka_rpc.controller.quorum_controller import QuorumController
from kafka_rpc.protocol import codec
from kafka_rpc.protocol.errors import ErrorCode
from tests.controller.harness import BR, CLUSTER, broker_features, topic
from tests.raft.conftest import (
    FETCH,
    V_FETCH,
    V_VOTE,
    VOTE,
    fetch_partition,
    fetch_request,
    follower_node,
    leader_node,
    vote_request,
)

R = codec.message_class


class HandDriver:
    """What the controller needs of RaftDriver: ``append`` and ``core``."""

    def __init__(self, node, clock):
        self.node, self.core, self.clock = node, node.core, clock

    def append(self, records):
        return self.core.append(self.clock[0], records)


class Setup:
    def __init__(self, **kw):
        self.clock = [0]
        self.qc = QuorumController(1, CLUSTER, clock_ms=lambda: self.clock[0], **kw)
        self.node = leader_node(epoch=1, sm=self.qc)
        self.qc.attach(HandDriver(self.node, self.clock))

    def commit(self, follower: int = 3) -> None:
        """Linger, fsync, and let a follower fetch up to the log end: everything commits."""
        n = self.node
        self.clock[0] += 25
        n.core.poll(self.clock[0])
        n.flush(self.clock[0])
        end = n.log.end_offset
        req = fetch_request(follower, n.core.epoch, end, n.core.epoch)
        fetch_partition(n.request(self.clock[0], FETCH, V_FETCH, req))
        assert n.core.high_watermark == end

    def activate(self) -> None:
        self.commit()  # past the epoch start: the core names us leader
        assert self.qc.is_active and self.qc.active_controller_id == 1
        self.commit()  # the bootstrap records, written on activation
        assert self.qc.image.features["metadata.version"] == BOOTSTRAP_METADATA_VERSION


def registration(broker_id: int = 1, cluster_id: str = CLUSTER):
    return R("BrokerRegistrationRequest")(
        broker_id=broker_id,
        cluster_id=cluster_id,
        incarnation_id=uuid.uuid4(),
        log_dirs=(uuid.UUID(int=(broker_id + 1) << 64),),
        listeners=(BR.Listener(name="PLAINTEXT", host="h", port=9092, security_protocol=0),),
        features=broker_features(),
        rack=None,
    )


def allocate(broker_id: int, epoch: int):
    return R("AllocateProducerIdsRequest")(broker_id=broker_id, broker_epoch=epoch)


async def pending(coro):
    task = asyncio.ensure_future(coro)
    for _ in range(3):
        await asyncio.sleep(0)
    return task


async def register(s: Setup, broker_id: int = 1) -> int:
    t = await pending(s.qc.register_broker(registration(broker_id), 4))
    s.commit()
    resp = await t
    assert resp.error_code == 0
    return resp.broker_epoch


async def test_write_is_speculative_then_answered_after_commit():
    s = Setup()
    s.activate()
    next_offset = s.node.log.end_offset
    task = await pending(s.qc.register_broker(registration(7), 4))
    assert not task.done()  # not committed yet
    assert 7 in s.qc.uncommitted_image.brokers  # the next command sees it
    assert 7 not in s.qc.image.brokers  # readers do not
    s.commit()
    resp = await task
    assert resp.error_code == 0
    assert resp.broker_epoch == next_offset  # the broker epoch is the record's own offset
    (batch,) = list(s.node.log.batches(next_offset, next_offset + 1))
    rec, _ = codec.decode_record(batch.records[next_offset - batch.base_offset])
    assert type(rec).__spec_name__ == "RegisterBrokerRecord" and rec.broker_epoch == next_offset
    assert s.qc.image.brokers[7].epoch == next_offset and s.qc.image.brokers[7].fenced
    assert s.qc.uncommitted_image == s.qc.image

    # fenced until caught up to its registration offset, then unfenced
    hb = R("BrokerHeartbeatRequest")
    behind = hb(broker_id=7, broker_epoch=next_offset, current_metadata_offset=next_offset - 1)
    t = await pending(s.qc.broker_heartbeat(behind, 1))
    s.commit()
    r = await t
    assert (r.error_code, r.is_caught_up, r.is_fenced) == (0, False, True)
    caught_up = hb(broker_id=7, broker_epoch=next_offset, current_metadata_offset=next_offset)
    t = await pending(s.qc.broker_heartbeat(caught_up, 1))
    s.commit()
    r = await t
    assert (r.error_code, r.is_caught_up, r.is_fenced) == (0, True, False)
    assert not s.qc.image.brokers[7].fenced


async def test_two_allocations_in_a_row_get_consecutive_blocks():
    s = Setup()
    s.activate()
    epoch = await register(s)
    t1 = await pending(s.qc.allocate_producer_ids(allocate(1, epoch), 0))
    t2 = await pending(s.qc.allocate_producer_ids(allocate(1, epoch), 0))
    assert not t1.done() and not t2.done()
    assert s.qc.uncommitted_image.producer_ids.next_producer_id == 2000
    assert s.qc.image.producer_ids.next_producer_id == -1
    s.commit()
    r1, r2 = await t1, await t2
    assert (r1.error_code, r1.producer_id_start, r1.producer_id_len) == (0, 0, 1000)
    assert (r2.error_code, r2.producer_id_start, r2.producer_id_len) == (0, 1000, 1000)
    assert s.qc.image.producer_ids.next_producer_id == 2000
    stale = await s.qc.allocate_producer_ids(allocate(1, epoch + 1), 0)
    assert stale.error_code == ErrorCode.STALE_BROKER_EPOCH


async def test_a_command_without_records_waits_for_earlier_writes():
    s = Setup()
    s.activate()
    t1 = await pending(s.qc.register_broker(registration(1), 4))
    # rejected (no records) but answered only once the registration before it commits
    t2 = await pending(s.qc.register_broker(registration(2, cluster_id="other"), 4))
    assert not t2.done()
    s.commit()
    assert (await t1).error_code == 0
    assert (await t2).error_code == ErrorCode.INCONSISTENT_CLUSTER_ID
    # nothing pending: at once
    r = await s.qc.register_broker(registration(2, cluster_id="other"), 4)
    assert r.error_code == ErrorCode.INCONSISTENT_CLUSTER_ID


async def test_non_active_node_answers_not_controller():
    qc = QuorumController(2, CLUSTER)
    node = follower_node(2, leader=1, epoch=1, sm=qc)
    qc.attach(HandDriver(node, [0]))
    assert not qc.is_active
    nc = ErrorCode.NOT_CONTROLLER
    assert (await qc.register_broker(registration(1), 4)).error_code == nc
    hb = R("BrokerHeartbeatRequest")(broker_id=1, broker_epoch=5)
    assert (await qc.broker_heartbeat(hb, 1)).error_code == nc
    assert (await qc.allocate_producer_ids(allocate(1, 5), 0)).error_code == nc
    ct = await qc.create_topics(R("CreateTopicsRequest")(topics=(topic("a"), topic("b"))), 7)
    assert [(t.name, t.error_code) for t in ct.topics] == [("a", nc), ("b", nc)]
    dt = await qc.delete_topics(R("DeleteTopicsRequest")(topic_names=("a",)), 5)
    assert [(t.name, t.error_code) for t in dt.responses] == [("a", nc)]


async def test_losing_leadership_fails_pending_and_reverts_the_uncommitted_image():
    s = Setup()
    s.activate()
    epoch = await register(s)
    committed = s.qc.image
    task = await pending(s.qc.allocate_producer_ids(allocate(1, epoch), 0))
    ct = await pending(s.qc.create_topics(R("CreateTopicsRequest")(topics=(topic("t"),)), 7))
    assert s.qc.uncommitted_image.producer_ids.next_producer_id == 1000
    # a candidate of a higher epoch: the leader steps down before the records commit
    s.node.request(s.clock[0], VOTE, V_VOTE, vote_request(2, 5, 1, s.node.log.end_offset))
    assert not s.node.core.is_leader
    assert not s.qc.is_active
    resp = await task
    assert resp.error_code == ErrorCode.NOT_CONTROLLER
    assert (await ct).topics[0].error_code == ErrorCode.NOT_CONTROLLER
    assert s.qc.uncommitted_image is s.qc.image == committed
    assert s.qc.image.producer_ids.next_producer_id == -1
    again = await s.qc.allocate_producer_ids(allocate(1, epoch), 0)
    assert again.error_code == ErrorCode.NOT_CONTROLLER


async def test_allocation_rate_limit_answers_throttle_time():
    s = Setup(producer_ids_max_per_second=2)
    s.activate()
    epoch = await register(s)
    for start in (0, 1000):
        t = await pending(s.qc.allocate_producer_ids(allocate(1, epoch), 0))
        s.commit()
        assert (await t).producer_id_start == start
    over = await s.qc.allocate_producer_ids(allocate(1, epoch), 0)
    assert over.error_code == ErrorCode.THROTTLING_QUOTA_EXCEEDED
    assert 0 < over.throttle_time_ms <= 1000
    assert over.producer_id_len == 0
    s.clock[0] += over.throttle_time_ms
    t = await pending(s.qc.allocate_producer_ids(allocate(1, epoch), 0))
    s.commit()
    ok = await t
    assert (ok.error_code, ok.throttle_time_ms, ok.producer_id_start) == (0, 0, 2000)


async def test_timers_noop_when_idle_and_fence_silent_brokers():
    s = Setup(idle_interval_ms=500, session_timeout_ms=9000)
    s.activate()
    epoch = await register(s, 3)
    hb = R("BrokerHeartbeatRequest")(broker_id=3, broker_epoch=epoch,
                                     current_metadata_offset=epoch)  # fmt: skip
    t = await pending(s.qc.broker_heartbeat(hb, 1))
    s.commit()
    assert not (await t).is_fenced
    end = s.node.log.end_offset
    s.qc.tick()  # nothing owed yet
    s.commit()
    assert s.node.log.end_offset == end
    s.clock[0] += 500
    noops = s.qc.record_counts["NoOpRecord"]
    s.qc.tick()
    s.commit()
    assert s.qc.record_counts["NoOpRecord"] == noops + 1
    for _ in range(8):  # 8.2 s more, in steps with follower fetches (the leader keeps its quorum)
        s.clock[0] += 1000
        s.qc.tick()
        s.commit()
    assert not s.qc.image.brokers[3].fenced
    s.clock[0] += 1000
    s.qc.tick()
    s.commit()
    assert s.qc.image.brokers[3].fenced


async def test_snapshot_of_the_committed_image_loads_into_another_controller():
    s = Setup()
    s.activate()
    epoch = await register(s)
    t = await pending(s.qc.allocate_producer_ids(allocate(1, epoch), 0))
    s.commit()
    await t
    sid = s.node.core.create_snapshot(s.clock[0])
    other = QuorumController(2, CLUSTER)
    other.handle_load_snapshot(s.node.log.read_snapshot(sid))
    assert other.image == s.qc.image
    assert other.committed_offset == sid.offset - 1


async def test_a_silent_broker_is_fenced_when_its_session_expires_not_at_a_periodic_check():
    """The session check runs when the first unfenced broker's session expires (Kafka's
    rescheduleMaybeFenceStaleBrokers), even with the periodic check a minute away."""
    s = Setup(session_timeout_ms=3000, fence_check_interval_ms=60_000)
    s.activate()
    epoch = await register(s, 3)
    hb = R("BrokerHeartbeatRequest")(broker_id=3, broker_epoch=epoch,
                                     current_metadata_offset=epoch)  # fmt: skip
    t = await pending(s.qc.broker_heartbeat(hb, 1))
    s.commit()
    assert not (await t).is_fenced
    last = s.qc._heartbeats[3]
    assert s.qc._next_session_expiry_ms() == last + 3001  # older than the timeout: fenced
    while s.clock[0] + 1000 <= last + 3000:  # steps with follower fetches (the quorum holds)
        s.clock[0] += 1000
        s.qc.tick()
        s.commit()
        assert not s.qc.image.brokers[3].fenced
    s.clock[0] = last + 3001
    s.qc.tick()
    s.commit()
    assert s.qc.image.brokers[3].fenced
    # a fenced broker has no session left to expire: no wake-up owed for it
    assert s.qc._next_session_expiry_ms() > s.clock[0] + 50_000


class _KRaft:
    """The controller's KRaftVersionAccessor collaborator with a scripted answer (the Raft
    core's own rules are tested in tests/raft): an accepted upgrade makes the level the
    pending one at once, as Kafka's leader does (``RaftClient.kraftVersion``)."""

    def __init__(self, level: int = 0, answer=(0, None)):
        self.level, self.answer = level, answer
        self.calls: list[tuple[int, int, bool]] = []

    def kraft_version(self) -> int:
        return self.level

    def upgrade_kraft_version(self, epoch, level, validate_only):
        self.calls.append((epoch, level, validate_only))
        if self.answer[0] == 0 and not validate_only:
            self.level = level
        return self.answer


async def test_update_features_of_kraft_version_goes_to_the_raft_layer_with_the_active_epoch():
    from tests.controller.test_features import update_features_request

    kraft = _KRaft()
    s = Setup(kraft=kraft, voter_ids=lambda: (1,))
    s.activate()
    await register(s, 1)
    assert s.qc.kraft_version == 0
    t = await pending(s.qc.update_features(update_features_request(("kraft.version", 1, 1)), 1))
    s.commit()  # the NoOpRecord commits: then the answer
    resp = await t
    assert resp.error_code == 0 and [(r.feature, r.error_code) for r in resp.results] == [
        ("kraft.version", 0)]  # fmt: skip
    assert kraft.calls == [(s.node.core.epoch, 1, False)] and s.qc.kraft_version == 1
    # the registration check reads the live level: a broker that only supports 0 is refused
    req = dataclasses.replace(registration(9), features=broker_features(kraft__version=(0, 0)))
    t = await pending(s.qc.register_broker(req, 4))
    s.commit()
    assert (await t).error_code == ErrorCode.UNSUPPORTED_VERSION
    # a refusal of the Raft layer is the answer, nothing is written
    kraft.answer = (ErrorCode.INVALID_UPDATE_VERSION, "not all of the voters support it")
    kraft.level = 0
    end = s.node.log.end_offset
    t = await pending(s.qc.update_features(update_features_request(("kraft.version", 1, 1)), 2))
    resp = await t
    assert resp.error_code == ErrorCode.INVALID_UPDATE_VERSION
    assert resp.error_message.endswith("not all of the voters support it")
    assert s.node.log.end_offset == end


def test_raft_core_kraft_version_reads_the_core_it_is_given():
    from types import SimpleNamespace

    from kafka_rpc.controller.quorum_controller import RaftCoreKRaftVersion

    calls = []
    def upgrade(*args):
        calls.append(args)
        return (0, None)

    core = SimpleNamespace(kraft_version=1, upgrade_kraft_version=upgrade)
    acc = RaftCoreKRaftVersion(lambda: core, lambda: 1234)
    assert acc.kraft_version() == 1
    assert acc.upgrade_kraft_version(5, 1, True) == (0, None) and calls == [(1234, 5, 1, True)]



async def test_update_features_of_kraft_version_reaches_the_real_core():
    """Over the real RaftCore, through RaftCoreKRaftVersion: this leader's static voters 2 and 3
    have range 0-0 (no UpdateRaftVoter told it otherwise), so the core refuses level 1 with its
    message and nothing is written; validate-only asks the same."""
    from kafka_rpc.controller.quorum_controller import RaftCoreKRaftVersion
    from tests.controller.test_features import update_features_request

    holder = {}
    s = Setup(kraft=RaftCoreKRaftVersion(lambda: holder["core"], lambda: s.clock[0]))
    holder["core"] = s.node.core
    s.activate()
    await register(s, 1)
    assert s.qc.kraft_version == 0 == s.node.core.kraft_version
    for validate_only in (False, True):
        end = s.node.log.end_offset
        req = update_features_request(("kraft.version", 1, 1), validate_only=validate_only)
        resp = await (await pending(s.qc.update_features(req, 2)))
        assert resp.error_code == ErrorCode.INVALID_UPDATE_VERSION, resp
        assert resp.error_message.endswith("Not all of the voters support it.")
        assert s.node.log.end_offset == end and s.node.core.kraft_version == 0


async def live(s: Setup, broker_id: int, epoch: int | None = None) -> None:
    """Register ``broker_id`` (unless its broker ``epoch`` is given: registered already) and
    unfence it (a heartbeat caught up to its registration)."""
    if epoch is None:
        epoch = await register(s, broker_id)
    hb = R("BrokerHeartbeatRequest")(broker_id=broker_id, broker_epoch=epoch,
                                     current_metadata_offset=epoch)  # fmt: skip
    t = await pending(s.qc.broker_heartbeat(hb, 1))
    s.commit()
    assert not (await t).is_fenced


def diskless_metadata_replicas(qc: QuorumController):
    t = qc.image.topic_by_name("__diskless-metadata")
    return None if t is None else {i: sorted(p.replicas) for i, p in t.partitions.items()}


async def test_the_coordinator_topic_goes_to_broker_only_nodes_too():
    """Replicas of __diskless-metadata go to every broker running the Batch Coordinator,
    whatever its roles: here two broker-only nodes (11, 12), the quorum's voter (1) no broker."""
    s = Setup(diskless_metadata_partitions=2, diskless_metadata_replication_factor=2)
    s.activate()
    for b in (11, 12):
        await live(s, b)
    s.qc.tick()
    s.commit()
    assert diskless_metadata_replicas(s.qc) == {0: [11, 12], 1: [11, 12]}


async def test_the_coordinator_topic_waits_for_its_replication_factor_and_says_so(caplog):
    """Kafka's rule for its internal topics: __diskless-metadata is created only once
    diskless.metadata.topic.replication.factor brokers running the Batch Coordinator are
    registered and unfenced, however long that takes; until then one WARNING per change of the
    shortfall, and the gauge kafka_rpc_diskless_metadata_missing_brokers in the registry."""
    import prometheus_client as prom

    from kafka_rpc.controller.metrics import register_controller_metrics

    s = Setup(diskless_metadata_partitions=1, diskless_metadata_replication_factor=3,
              session_timeout_ms=10**9)  # fmt: skip
    registry = prom.CollectorRegistry()
    register_controller_metrics(registry, s.qc)

    def gauge():
        return registry.get_sample_value("kafka_rpc_diskless_metadata_missing_brokers")

    def warnings():
        return [r.getMessage() for r in caplog.records
                if r.levelname == "WARNING" and "__diskless-metadata needs" in r.getMessage()]

    caplog.set_level("WARNING", logger="kafka_rpc.controller")
    assert gauge() == 0
    s.activate()
    await live(s, 1)
    for _ in range(60):  # a minute: no timer lowers the replication factor
        s.clock[0] += 1000
        s.qc.tick()
        s.commit()
    assert diskless_metadata_replicas(s.qc) is None
    assert gauge() == 2
    assert warnings() == [
        "__diskless-metadata needs 3 brokers running the Batch Coordinator, 1 are registered and "
        "unfenced; it will be created when 3 are (diskless.metadata.topic.replication.factor=3);"
        " until then diskless topics have no Batch Coordinator (FindCoordinator: "
        "COORDINATOR_NOT_AVAILABLE)"
    ]
    epoch2 = await register(s, 2)  # registered but fenced: counts for nothing
    s.qc.tick()
    s.commit()
    assert gauge() == 2 and len(warnings()) == 1
    await live(s, 3)
    s.qc.tick()
    s.commit()
    assert gauge() == 1 and len(warnings()) == 2 and ", 2 are registered" in warnings()[1]
    assert diskless_metadata_replicas(s.qc) is None
    await live(s, 2, epoch2)
    s.qc.tick()
    s.commit()
    assert diskless_metadata_replicas(s.qc) == {0: [1, 2, 3]}
    assert gauge() == 0 and len(warnings()) == 2


def unreplayable():
    """A record no image can replay (a mapping of a partition of a topic that does not exist):
    a command with a bug."""
    return R("TopicPartitionToBatchCoordinatorMapping")(
        partition_index=0, topic_id=uuid.uuid4(), batch_coordinator_partition_index=0
    )


async def test_a_record_the_active_controller_cannot_replay_is_never_appended():
    """Kafka's ControllerWriteEvent: replay into the uncommitted image, then append; a replay
    failure is fatal for the leadership: nothing is written, the uncommitted state is dropped
    (the committed image again), pending requests answer NOT_CONTROLLER."""
    from kafka_rpc.controller.base import ControllerResult

    s = Setup()
    s.activate()
    epoch = await register(s)
    committed = s.qc.image
    earlier = await pending(s.qc.allocate_producer_ids(allocate(1, epoch), 0))  # uncommitted
    assert s.qc.uncommitted_image.producer_ids.next_producer_id == 1000
    end = s.node.log.end_offset
    resp = await s.qc._submit(lambda img, ctx: ControllerResult([unreplayable()], None),
                              allocate(1, epoch))  # fmt: skip
    assert resp.error_code == ErrorCode.NOT_CONTROLLER
    assert s.node.log.end_offset == end  # never appended
    assert not s.qc.is_active
    assert s.qc.uncommitted_image is s.qc.image == committed
    assert (await earlier).error_code == ErrorCode.NOT_CONTROLLER
    assert (await s.qc.allocate_producer_ids(allocate(1, epoch), 0)).error_code == (
        ErrorCode.NOT_CONTROLLER
    )


async def test_renouncing_on_a_replay_failure_resigns_the_raft_leadership():
    """Kafka's renounce calls raftClient.resign(epoch): the Raft leader steps down
    (EndQuorumEpoch to the other voters) so another controller takes over."""
    from kafka_rpc.controller.base import ControllerResult

    resigned: list[int] = []

    def resign(epoch: int) -> None:
        resigned.append(epoch)
        s.node.core.resign(s.clock[0], epoch)

    s = Setup(resign=resign)
    s.activate()
    await register(s)
    assert s.node.core.is_leader
    s.node.outbound()
    resp = await s.qc._submit(lambda img, ctx: ControllerResult([unreplayable()], None),
                              R("CreateTopicsRequest")(topics=(topic("x"),)))  # fmt: skip
    assert [t.error_code for t in resp.topics] == [ErrorCode.NOT_CONTROLLER]
    assert resigned == [s.node.core.epoch]
    assert not s.node.core.is_leader and s.node.core.state == "Resigned"
    assert {ob.destination for ob in s.node.outbound() if ob.api_key == 54} == {2, 3}
    # a leadership lost to another node's election is not a fault: nothing to resign
    s2 = Setup(resign=resigned.append)
    s2.activate()
    s2.node.request(s2.clock[0], VOTE, V_VOTE, vote_request(2, 5, 1, s2.node.log.end_offset))
    assert not s2.qc.is_active and resigned == [s.node.core.epoch]
