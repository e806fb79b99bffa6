"""UnregisterBroker (Kafka's ReplicationControlManager.unregisterBroker): the command's records,
replayed as a follower would, remove the registration; an unknown id is BROKER_ID_NOT_REGISTERED;
and on the QuorumController it is a write event answered after commit, NOT_CONTROLLER elsewhere."""

from __future__ import annotations

import uuid

from kafka_rpc.controller import replication
from kafka_rpc.controller.image import EMPTY
from kafka_rpc.controller.quorum_controller import QuorumController
from kafka_rpc.controller.replay import replay
from kafka_rpc.controller.snapshot import image_records, load
from kafka_rpc.protocol import codec
from kafka_rpc.protocol.errors import ErrorCode as E
from tests.controller.harness import CLUSTER, Cluster, topic
from tests.controller.test_quorum_controller import (
    HandDriver,
    Setup,
    pending,
    register,
)
from tests.raft.conftest import follower_node

R = codec.message_class


def unregister(c: Cluster, broker_id: int):
    return c.run(replication.unregister_broker, R("UnregisterBrokerRequest")(broker_id=broker_id))


def names(records) -> list[str]:
    return [type(r).__spec_name__ for r in records]


# ------------------------------------------------------------------ the command
def test_unknown_id_is_broker_id_not_registered_and_writes_nothing():
    c = Cluster()
    c.live(1)
    before, log_len = c.image, len(c.log)
    res = unregister(c, 7)
    r = res.response
    assert r.error_code == E.BROKER_ID_NOT_REGISTERED
    assert r.error_message == "Broker ID 7 is not currently registered"
    assert res.records == [] and len(c.log) == log_len and c.image == before


def test_fenced_broker_one_record_with_its_registration_epoch():
    c = Cluster()
    c.register(1)
    c.register(2)
    epoch = c.image.brokers[2].epoch
    assert c.image.brokers[2].fenced
    res = unregister(c, 2)
    assert (res.response.error_code, res.response.error_message) == (0, None)
    [rec] = res.records
    assert names(res.records) == ["UnregisterBrokerRecord"]
    assert (rec.broker_id, rec.broker_epoch) == (2, epoch)
    assert 2 not in c.image.brokers and 1 in c.image.brokers
    # once gone, a second unregister of the same id is the unknown-id error
    again = unregister(c, 2)
    assert again.response.error_code == E.BROKER_ID_NOT_REGISTERED and not again.records


def test_unregister_uses_the_current_epoch_after_a_reregistration():
    c = Cluster()
    c.live(1)
    first = c.image.brokers[1].epoch
    c.now += c.session_timeout_ms + 1  # the old incarnation's session has expired
    c.register(1, incarnation=uuid.uuid4())  # a new incarnation: a new epoch
    second = c.image.brokers[1].epoch
    assert second > first
    [rec] = unregister(c, 1).records
    assert rec.broker_epoch == second  # the replay rule rejects any other epoch


def test_live_leader_leaves_isrs_and_leaderships_before_its_record():
    c = Cluster(seed=1)
    c.live(1, 2)
    c.create(topic("two", n=2, rf=2), topic("one", assignments=[(0, [1])], n=-1, rf=-1))
    assert c.image.leaderships(1) and not c.image.brokers[1].fenced
    res = unregister(c, 1)
    assert res.response.error_code == 0
    kinds = names(res.records)
    assert kinds[-1] == "UnregisterBrokerRecord" and set(kinds[:-1]) == {"PartitionChangeRecord"}
    assert 1 not in c.image.brokers
    for p in c.image.topic_by_name("two").partitions.values():
        assert p.isr == (2,) and p.leader == 2  # moved to the other ISR member
    p = c.image.topic_by_name("one").partitions[0]
    assert p.isr == (1,) and p.leader == -1  # the last ISR member stays, without a leader
    assert not c.image.leaderships(1)


def test_after_unregister_old_epoch_is_stale_and_the_id_can_register_again():
    c = Cluster()
    c.live(1)
    old = c.image.brokers[1].epoch
    unregister(c, 1)
    hb = c.heartbeat(1, epoch=old)
    assert hb.response.error_code == E.STALE_BROKER_EPOCH and not hb.records
    assert c.allocate(1, epoch=old).response.error_code == E.STALE_BROKER_EPOCH
    # any incarnation may take the id now (no DUPLICATE_BROKER_REGISTRATION: nothing registered)
    res = c.register(1, incarnation=uuid.UUID(int=0xBEEF, version=4))
    assert res.response.error_code == 0 and c.image.brokers[1].epoch > old


def test_follower_replaying_the_log_and_a_snapshot_agree():
    c = Cluster(seed=4)
    c.live(1, 2, 3)
    c.create(topic("t", n=3, rf=3))
    unregister(c, 2)
    follower = EMPTY
    for off, data in enumerate(c.log):
        rec, _ = codec.decode_record(data)
        follower = replay(follower, rec, off, 1)
    assert follower == c.image and 2 not in follower.brokers
    loaded = load(image_records(c.image), c.image.last_offset, c.image.last_epoch)
    assert loaded.brokers == c.image.brokers and 2 not in loaded.brokers


# ------------------------------------------------------------------ QuorumController
async def test_quorum_controller_answers_after_commit_and_drops_the_session():
    s = Setup()
    s.activate()
    epoch = await register(s, 5)
    assert 5 in s.qc._heartbeats
    task = await pending(s.qc.unregister_broker(R("UnregisterBrokerRequest")(broker_id=5), 0))
    assert not task.done()  # the record is not committed yet
    assert 5 not in s.qc.uncommitted_image.brokers  # the next command sees it gone
    assert 5 in s.qc.image.brokers  # readers still see the committed registration
    s.commit()
    resp = await task
    assert (resp.error_code, resp.error_message) == (0, None)
    assert 5 not in s.qc.image.brokers and 5 not in s.qc._heartbeats
    assert s.qc.record_counts["UnregisterBrokerRecord"] == 1
    # the same id again, nothing pending: answered at once
    resp = await s.qc.unregister_broker(R("UnregisterBrokerRequest")(broker_id=5), 0)
    assert resp.error_code == E.BROKER_ID_NOT_REGISTERED
    hb = R("BrokerHeartbeatRequest")(broker_id=5, broker_epoch=epoch, current_metadata_offset=0)
    assert (await s.qc.broker_heartbeat(hb, 1)).error_code == E.STALE_BROKER_EPOCH


async def test_quorum_controller_not_active_answers_not_controller():
    qc = QuorumController(2, CLUSTER)
    node = follower_node(2, leader=1, epoch=1, sm=qc)
    qc.attach(HandDriver(node, [0]))
    resp = await qc.unregister_broker(R("UnregisterBrokerRequest")(broker_id=1), 0)
    assert resp.error_code == E.NOT_CONTROLLER
