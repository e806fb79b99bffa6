"""Partition state changes as Kafka's ``ReplicationControlManager`` and ``PartitionChangeBuilder``
make them: AlterPartition's validation order and codes (contract 3.1), elections on fencing,
unfencing, controlled shutdown and ElectLeaders, reassignments and their completion by
AlterPartition, the periodic elections; every rejected request leaves the partition as it was,
and every accepted one moves the epochs exactly as Kafka's replay does."""

from __future__ import annotations

import copy
import uuid

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kafka_rpc.controller import partitions, replication
from kafka_rpc.controller.image import NO_LEADER, PartitionRegistration
from kafka_rpc.controller.partition_change import (
    Election,
    PartitionChangeBuilder,
    complete_reassignment,
    reassignment_replicas,
    revert_reassignment,
)
from kafka_rpc.protocol import codec
from kafka_rpc.protocol.errors import ErrorCode as E

from .harness import Cluster, topic

R = codec.message_class
AP = codec.module("AlterPartitionRequest")
EL = codec.module("ElectLeadersRequest")
RA = codec.module("AlterPartitionReassignmentsRequest")
LR = codec.module("ListPartitionReassignmentsRequest")
TID = uuid.UUID(int=7 << 64 | 1)


def part(c: Cluster, name: str = "t", i: int = 0) -> PartitionRegistration:
    return c.image.topic_by_name(name).partitions[i]


def cluster(*brokers: int, seed: int = 3, mv: int | None = 25) -> Cluster:
    c = Cluster(seed=seed)
    if mv is not None:
        c.apply([R("FeatureLevelRecord")(name="metadata.version", feature_level=mv)])
    c.live(*brokers)
    return c


def alter(c: Cluster, name: str, i: int, isr, *, version: int = 3, sender=None, **kw):
    """An AlterPartition from the partition's leader (or ``sender``) with the current epochs,
    unless overridden; ``isr`` as broker ids (v3: with their registration epochs)."""
    p = part(c, name, i)
    sender = p.leader if sender is None else sender
    reg = c.image.brokers.get(sender)
    epochs = kw.pop("epochs", {})
    d = AP.PartitionData(
        partition_index=i,
        leader_epoch=kw.pop("leader_epoch", p.leader_epoch),
        partition_epoch=kw.pop("partition_epoch", p.partition_epoch),
        leader_recovery_state=kw.pop("recovery", 0),
        **(
            {
                "new_isr_with_epochs": tuple(
                    AP.BrokerState(
                        broker_id=b,
                        broker_epoch=epochs.get(
                            b, c.image.brokers[b].epoch if b in c.image.brokers else -1
                        ),
                    )
                    for b in isr
                )
            }
            if version >= 3
            else {"new_isr": tuple(isr)}
        ),
    )
    req = R("AlterPartitionRequest")(
        broker_id=sender,
        broker_epoch=kw.pop("broker_epoch", reg.epoch if reg else 0),
        topics=(
            AP.TopicData(
                topic_id=kw.pop("topic_id", c.image.topics_by_name[name]), partitions=(d,)
            ),
        ),
    )
    res = c.run(lambda img, r, ctx: partitions.alter_partition(img, r, ctx, version), req)
    return res


def code_of(res) -> int:
    if res.response.error_code:
        return res.response.error_code
    return res.response.topics[0].partitions[0].error_code


def elect(c: Cluster, election_type: int, tps=None, version: int = 2):
    req = R("ElectLeadersRequest")(
        election_type=election_type,
        topic_partitions=None
        if tps is None
        else tuple(EL.TopicPartitions(topic=t, partitions=tuple(ps)) for t, ps in tps),
    )
    return c.run(lambda img, r, ctx: partitions.elect_leaders(img, r, ctx, version), req)


def reassign(c: Cluster, name: str, i: int, replicas, *, allow_rf: bool = True, version=1):
    req = R("AlterPartitionReassignmentsRequest")(
        allow_replication_factor_change=allow_rf,
        topics=(
            RA.ReassignableTopic(
                name=name,
                partitions=(
                    RA.ReassignablePartition(
                        partition_index=i, replicas=None if replicas is None else tuple(replicas)
                    ),
                ),
            ),
        ),
    )
    res = c.run(
        lambda img, r, ctx: partitions.alter_partition_reassignments(img, r, ctx, version), req
    )
    return res, res.response.responses[0].partitions[0]


# ================================================================== the builder
def reg(replicas, isr, leader, **kw) -> PartitionRegistration:
    return PartitionRegistration(replicas=tuple(replicas), isr=tuple(isr), leader=leader, **kw)


def build(p, active=(1, 2, 3), election=Election.ONLINE, mv=25, **targets):
    b = PartitionChangeBuilder(p, TID, 0, lambda r: r in active, mv, lambda r: uuid.UUID(int=1))
    b.election = election
    for k, v in targets.items():
        setattr(b, k, v)
    return b.build()


def test_builder_keeps_a_valid_leader_and_writes_nothing_without_change():
    assert build(reg([1, 2, 3], [1, 2, 3], 2)) is None
    rec = build(reg([1, 2, 3], [1, 2, 3], 2), target_isr=(2, 3))
    assert rec.isr == (2, 3) and rec.leader == -2  # no leader change, no epoch bump (MV >= 12)


def test_builder_elects_first_acceptable_isr_member_in_replica_order():
    rec = build(reg([3, 1, 2], [1, 2, 3], 3), active=(1, 2), target_isr=(1, 2))
    assert rec.leader == 1 and rec.isr == (1, 2)
    rec = build(reg([3, 2, 1], [1, 2, 3], 3), active=(1, 2), target_isr=(1, 2))
    assert rec.leader == 2


def test_builder_never_empties_the_isr_without_elr():
    """Kafka with ELR off: the last member stays in the ISR, the partition loses its leader."""
    rec = build(reg([1, 2], [1], 1), active=(2,), target_isr=())
    assert rec.leader == NO_LEADER and rec.isr is None


def test_builder_unclean_election_takes_a_replica_outside_the_isr_and_marks_it_recovering():
    p = reg([1, 2, 3], [1], NO_LEADER)
    assert build(p, active=(2, 3)) is None  # a clean election finds nobody
    rec = build(p, active=(2, 3), election=Election.UNCLEAN)
    assert (rec.leader, rec.isr, rec.leader_recovery_state) == (2, (2,), 1)


def test_builder_preferred_election():
    p = reg([1, 2, 3], [1, 2, 3], 2)
    assert build(p, election=Election.PREFERRED).leader == 1
    assert build(p, active=(2, 3), election=Election.PREFERRED) is None  # 1 down: 2 stays
    rec = build(reg([1, 2, 3], [1, 3], NO_LEADER), active=(3,), election=Election.PREFERRED)
    assert rec.leader == 3


def test_builder_epoch_bumps_on_shrink_below_mv_12_and_on_removed_replicas():
    p = reg([1, 2, 3], [1, 2, 3], 1)
    assert build(p, mv=11, target_isr=(1, 2)).leader == 1  # same id: a leader-epoch bump
    assert build(p, mv=12, target_isr=(1, 2)).leader == -2
    assert build(p, mv=11, target_isr=(1, 2, 3)) is None
    rec = build(p, target_replicas=(1, 2), target_isr=(1, 2))
    assert rec.replicas == (1, 2) and rec.leader == 1  # a replica went: bump


def test_builder_directories_from_metadata_version_17():
    d = uuid.UUID(int=5 << 64)
    p = reg([1, 2], [1, 2], 1, directories=(d, d))
    rec = build(p, target_replicas=(1, 2, 3))
    assert rec.directories == (d, d, uuid.UUID(int=1)) and rec.replicas == (1, 2, 3)
    assert build(p, mv=16, target_replicas=(1, 2, 3)).directories is None


def test_reassignment_arithmetic():
    assert reassignment_replicas((1, 2, 3), (3, 4, 5)) == ((3, 4, 5, 1, 2), (1, 2), (4, 5))
    assert reassignment_replicas((1, 2, 3), (3, 2, 1)) == ((3, 2, 1), (), ())
    assert complete_reassignment((3, 4, 1), (1,), (4,), (1, 3)) is None
    assert complete_reassignment((3, 4, 1), (1,), (4,), (1, 3, 4)) == ((3, 4), (3, 4))
    assert complete_reassignment((1, 2), (), (), (1, 2)) is None  # nothing in progress
    p = reg([1, 2, 3, 4], [1, 4], 1, adding_replicas=(4,), removing_replicas=(3,))
    assert revert_reassignment(p) == ((1, 2, 3), (1,), False)
    p = reg([1, 4], [4], 4, adding_replicas=(4,), removing_replicas=(1,))
    assert revert_reassignment(p) == ((1,), (1,), True)


# ================================================================== AlterPartition
@pytest.fixture
def c3():
    c = cluster(1, 2, 3)
    c.create(topic("t", assignments=[(0, [1, 2, 3])], n=-1, rf=-1))
    return c


def test_alter_partition_shrinks_and_expands_the_isr_with_the_epoch_after(c3):
    before = part(c3)
    res = alter(c3, "t", 0, [1, 2])
    assert code_of(res) == 0
    [rec] = res.records
    assert rec.isr == (1, 2) and rec.leader == -2
    after = part(c3)
    r = res.response.topics[0].partitions[0]
    assert (r.leader_id, r.isr, r.leader_epoch, r.partition_epoch) == (
        1, (1, 2), before.leader_epoch, before.partition_epoch + 1,
    )  # fmt: skip
    assert after.partition_epoch == before.partition_epoch + 1
    assert after.leader_epoch == before.leader_epoch  # an ISR change is not a leader change
    res = alter(c3, "t", 0, [1, 2, 3], version=2)  # v2: NewIsr, no epochs
    assert code_of(res) == 0 and part(c3).isr == (1, 2, 3)
    assert part(c3).partition_epoch == before.partition_epoch + 2
    # the same ISR again: no record, the current state answered
    res = alter(c3, "t", 0, [1, 2, 3])
    assert code_of(res) == 0 and not res.records
    assert res.response.topics[0].partitions[0].partition_epoch == part(c3).partition_epoch


def _bump_leader_epoch(c: Cluster) -> dict:
    c.apply([R("PartitionChangeRecord")(partition_id=0, topic_id=c.image.topics_by_name["t"],
                                        leader=1)])  # fmt: skip
    return {"leader_epoch": part(c).leader_epoch - 1}


def _unregister(c: Cluster, b: int) -> None:
    res = c.run(replication.unregister_broker, R("UnregisterBrokerRequest")(broker_id=b))
    assert res.response.error_code == 0


def _in_controlled_shutdown(c: Cluster, b: int) -> None:
    c.create(topic("x", assignments=[(0, [b])], n=-1, rf=-1))
    c.heartbeat(b, want_shut_down=True)  # it leads x-0: controlled shutdown, still unfenced
    reg = c.image.brokers[b]
    assert reg.in_controlled_shutdown and not reg.fenced


# case -> (proposed ISR, setup(c) -> extra AlterPartition arguments, expected code)
_REFUSALS = {
    "stale broker epoch": ([1, 2], lambda c: {"broker_epoch": c.image.brokers[1].epoch + 1},
                           E.STALE_BROKER_EPOCH),
    "unknown topic id": ([1, 2], lambda c: {"topic_id": uuid.UUID(int=99)}, E.UNKNOWN_TOPIC_ID),
    "zero topic id": ([1, 2], lambda c: {"topic_id": uuid.UUID(int=0)}, E.UNKNOWN_TOPIC_ID),
    "leader epoch from the future": (
        [1, 2], lambda c: {"leader_epoch": part(c).leader_epoch + 1}, E.NOT_CONTROLLER),
    "partition epoch from the future": (
        [1, 2], lambda c: {"partition_epoch": part(c).partition_epoch + 1}, E.NOT_CONTROLLER),
    "old leader epoch": ([1, 2], _bump_leader_epoch, E.FENCED_LEADER_EPOCH),
    "not the leader": ([1, 2], lambda c: {"sender": 2}, E.INVALID_REQUEST),
    "stale partition epoch": (
        [1, 2], lambda c: {"partition_epoch": part(c).partition_epoch - 1},
        E.INVALID_UPDATE_VERSION),
    "non-replica in isr": ([1, 4], lambda c: {}, E.INVALID_REQUEST),
    "duplicate in isr": ([1, 2, 2], lambda c: {}, E.INVALID_REQUEST),
    "isr without the leader": ([2, 3], lambda c: {}, E.INVALID_REQUEST),
    "recovering with two members": ([1, 2], lambda c: {"recovery": 1}, E.INVALID_REQUEST),
    "recovered to recovering": ([1], lambda c: {"recovery": 1}, E.INVALID_REQUEST),
    "fenced broker in isr": (
        [1, 2, 3], lambda c: c.heartbeat(3, want_fence=True) and {}, E.INELIGIBLE_REPLICA),
    "unregistered broker in isr": (
        [1, 2, 3], lambda c: _unregister(c, 3) or {}, E.INELIGIBLE_REPLICA),
    "broker in controlled shutdown in isr": (
        [1, 2, 3], lambda c: _in_controlled_shutdown(c, 3) or {}, E.INELIGIBLE_REPLICA),
    "member epoch mismatch": (
        [1, 2, 3], lambda c: {"epochs": {3: c.image.brokers[3].epoch + 5}},
        E.INELIGIBLE_REPLICA),
}  # fmt: skip


@pytest.mark.parametrize("case", sorted(_REFUSALS))
def test_alter_partition_refusals_change_nothing(case):
    """Each of Kafka's refusals (contract 3.1), in its order: the code, no record, and the
    partition exactly as before."""
    c = cluster(1, 2, 3, 4)
    c.create(topic("t", assignments=[(0, [1, 2, 3])], n=-1, rf=-1))
    assert code_of(alter(c, "t", 0, [1, 2])) == 0  # partition epoch 1 now
    isr, setup, code = _REFUSALS[case]
    kw = setup(c)
    before = part(c)
    res = alter(c, "t", 0, isr, **kw)
    assert code_of(res) == code, res.response
    assert not res.records and part(c) == before


def test_alter_partition_unknown_partition(c3):
    tid = c3.image.topics_by_name["t"]
    req = R("AlterPartitionRequest")(
        broker_id=1, broker_epoch=c3.image.brokers[1].epoch,
        topics=(AP.TopicData(topic_id=tid, partitions=(AP.PartitionData(
            partition_index=9, leader_epoch=0, partition_epoch=0),)),),
    )  # fmt: skip
    res = c3.run(partitions.alter_partition, req)
    assert code_of(res) == E.UNKNOWN_TOPIC_OR_PARTITION and not res.records


def test_alter_partition_unknown_topic_answers_every_partition(c3):
    req = R("AlterPartitionRequest")(
        broker_id=1, broker_epoch=c3.image.brokers[1].epoch,
        topics=(AP.TopicData(topic_id=uuid.UUID(int=99), partitions=(
            AP.PartitionData(partition_index=0), AP.PartitionData(partition_index=1))),),
    )  # fmt: skip
    res = c3.run(partitions.alter_partition, req)
    codes = [p.error_code for p in res.response.topics[0].partitions]
    assert codes == [E.UNKNOWN_TOPIC_ID] * 2 and not res.records


# ================================================================== AlterPartition: Raft leaders
META = "__diskless-metadata"


def meta_cluster(*brokers: int) -> Cluster:
    """``brokers`` live and ``__diskless-metadata`` with one partition on brokers 1, 2, 3 (leader
    1), as the controller creates it."""
    from kafka_rpc.controller import coordinator_mapping as M

    c = cluster(*brokers)
    res = M.create_diskless_metadata_topic(c.image, c.ctx(), 1, 3)
    recs = [r if r.__spec_name__ != "PartitionRecord" else
            R("PartitionRecord")(partition_id=0, topic_id=r.topic_id, replicas=(1, 2, 3),
                                 isr=(1, 2, 3), leader=1, leader_epoch=0, partition_epoch=0)
            for r in res.records]  # fmt: skip
    c.apply(recs)
    return c


def test_the_raft_leader_of_a_coordinator_partition_takes_over_through_alter_partition():
    """Ours: on __diskless-metadata a replica that is not the image's leader (the leader its
    Raft group elected) becomes the leader, leader epoch + 1, with its new ISR."""
    c = meta_cluster(1, 2, 3)
    before = part(c, META)
    res = alter(c, META, 0, [2, 3], sender=2)
    assert code_of(res) == 0, res.response
    [rec] = res.records
    assert (rec.leader, rec.isr) == (2, (2, 3))
    after = part(c, META)
    assert (after.leader, after.isr) == (2, (2, 3))
    assert after.leader_epoch == before.leader_epoch + 1
    assert after.partition_epoch == before.partition_epoch + 1
    r = res.response.topics[0].partitions[0]
    assert (r.leader_id, r.isr, r.leader_epoch, r.partition_epoch) == (
        2, (2, 3), after.leader_epoch, after.partition_epoch)  # fmt: skip
    # from the image's leader now: Kafka's path (an ISR change, no leader change)
    res = alter(c, META, 0, [1, 2, 3])
    assert code_of(res) == 0 and res.records[0].leader == -2
    assert (part(c, META).leader, part(c, META).isr) == (2, (1, 2, 3))
    # the same ISR from another replica: a takeover alone
    res = alter(c, META, 0, [1, 2, 3], sender=3)
    assert code_of(res) == 0 and part(c, META).leader == 3
    assert part(c, META).leader_epoch == before.leader_epoch + 2


def test_the_periodic_rebalance_leaves_the_raft_leader_of_a_coordinator_partition_alone():
    c = meta_cluster(1, 2, 3)
    c.create(topic("t", assignments=[(0, [1, 2, 3])], n=-1, rf=-1))
    assert code_of(alter(c, META, 0, [1, 2, 3], sender=2)) == 0  # the Raft leader: 2
    assert code_of(alter(c, "t", 0, [1, 2, 3])) == 0
    c.apply([R("PartitionChangeRecord")(partition_id=0, topic_id=c.image.topics_by_name["t"],
                                        leader=3)])  # fmt: skip
    res = c.run(lambda img, r, ctx: partitions.balance_partition_leaders(img, ctx), None)
    assert part(c).leader == 1  # a classic topic: back to its first replica
    assert part(c, META).leader == 2 and len(res.records) == 1


def test_any_other_topic_still_takes_alter_partition_from_its_leader_only():
    c = meta_cluster(1, 2, 3)
    c.create(topic("t", assignments=[(0, [1, 2, 3])], n=-1, rf=-1))
    before = part(c)
    res = alter(c, "t", 0, [2, 3], sender=2)
    assert code_of(res) == E.INVALID_REQUEST and not res.records and part(c) == before


# case -> (proposed ISR, sender, setup(c) -> extra AlterPartition arguments, expected code)
_TAKEOVER_REFUSALS = {
    "stale partition epoch": ([2, 3], 2, lambda c: {"partition_epoch":
                              part(c, META).partition_epoch - 1}, E.INVALID_UPDATE_VERSION),
    "old leader epoch": ([2, 3], 2, lambda c: {"leader_epoch": part(c, META).leader_epoch - 1},
                         E.FENCED_LEADER_EPOCH),
    "leader epoch from the future": ([2, 3], 2, lambda c: {"leader_epoch":
                                     part(c, META).leader_epoch + 1}, E.NOT_CONTROLLER),
    "partition epoch from the future": ([2, 3], 2, lambda c: {"partition_epoch":
                                        part(c, META).partition_epoch + 1}, E.NOT_CONTROLLER),
    "isr without the sender": ([1, 3], 2, lambda c: {}, E.INVALID_REQUEST),
    "non-replica in isr": ([2, 4], 2, lambda c: {}, E.INVALID_REQUEST),
    "not a replica": ([1, 2, 3], 4, lambda c: {}, E.INVALID_REQUEST),
    "fenced sender": ([2, 3], 2, lambda c: c.heartbeat(2, want_fence=True) and {},
                      E.INELIGIBLE_REPLICA),
    "sender in controlled shutdown": ([2, 3], 2, lambda c: c.heartbeat(2, want_shut_down=True)
                                      and {}, E.INELIGIBLE_REPLICA),
    "stale broker epoch": ([2, 3], 2, lambda c: {"broker_epoch": c.image.brokers[2].epoch + 1},
                           E.STALE_BROKER_EPOCH),
}  # fmt: skip


@pytest.mark.parametrize("case", sorted(_TAKEOVER_REFUSALS))
def test_a_coordinator_partition_takeover_is_refused_with_kafkas_codes(case):
    c = meta_cluster(1, 2, 3, 4)
    # epochs past 0, so that an older one exists
    c.apply([R("PartitionChangeRecord")(partition_id=0, topic_id=c.image.topics_by_name[META],
                                        isr=(1, 2))])  # fmt: skip
    c.apply([R("PartitionChangeRecord")(partition_id=0, topic_id=c.image.topics_by_name[META],
                                        isr=(1, 2, 3), leader=1)])  # fmt: skip
    isr, sender, setup, code = _TAKEOVER_REFUSALS[case]
    kw = setup(c)
    before = part(c, META)
    res = alter(c, META, 0, isr, sender=sender, **kw)
    assert code_of(res) == code, res.response
    assert not res.records and part(c, META) == before


def test_a_takeover_completes_a_reassignment_as_from_the_leader():
    c = meta_cluster(1, 2, 3, 4)
    res, r = reassign(c, META, 0, [4, 2, 3])
    assert r.error_code == 0
    assert part(c, META).replicas == (4, 2, 3, 1) and part(c, META).leader == 1
    # 2 (the Raft leader now) with 4 caught up: the ISR covers the targets, 1 leaves
    res = alter(c, META, 0, [1, 2, 3, 4], sender=2)
    assert code_of(res) == 0, res.response
    p = part(c, META)
    assert (p.replicas, p.isr, p.leader) == ((4, 2, 3), (2, 3, 4), 2)
    assert (p.adding_replicas, p.removing_replicas) == ((), ())
    # a takeover by a replica the completed reassignment removes (3): the reassignment completes
    # as it would from the leader, the leader stays 2, and the answer is NEW_LEADER_ELECTED
    res, r = reassign(c, META, 0, [4, 2, 1])
    assert r.error_code == 0 and part(c, META).replicas == (4, 2, 1, 3)
    res = alter(c, META, 0, [1, 2, 3, 4], sender=3)
    assert code_of(res) == E.NEW_LEADER_ELECTED and len(res.records) == 1
    p = part(c, META)
    assert (p.replicas, p.leader) == ((4, 2, 1), 2) and 3 not in p.isr


# ================================================================== fencing and friends
def test_fencing_the_leader_moves_leadership_and_shrinks_the_isr(c3):
    p0 = part(c3)
    c3.now = 20_000
    for b in (2, 3):
        c3.heartbeat(b)
    assert c3.fence_stale().response == [1]
    p = part(c3)
    assert (p.leader, p.isr) == (2, (2, 3))
    assert (p.leader_epoch, p.partition_epoch) == (p0.leader_epoch + 1, p0.partition_epoch + 1)
    # broker 1 back: unfenced; the leader (2) grows the ISR back through AlterPartition
    c3.heartbeat(1)
    assert part(c3).isr == (2, 3)  # unfencing does not add to ISRs
    assert code_of(alter(c3, "t", 0, [2, 3, 1])) == 0
    assert part(c3).isr == (2, 3, 1)
    # and the periodic rebalance gives leadership back to the first replica
    res = c3.run(lambda img, r, ctx: partitions.balance_partition_leaders(img, ctx), None)
    assert part(c3).leader == 1 and res.response is False


def test_unclean_topic_elects_outside_the_isr_when_the_last_member_goes():
    c = cluster(1, 2)
    c.create(
        topic("u", assignments=[(0, [1, 2])], n=-1, rf=-1,
              configs=[("unclean.leader.election.enable", "true")]),
        topic("c", assignments=[(0, [1, 2])], n=-1, rf=-1),
    )  # fmt: skip
    for name in ("u", "c"):
        assert code_of(alter(c, name, 0, [1])) == 0  # 2 fell behind
    c.now = 20_000
    c.heartbeat(2)
    assert c.fence_stale().response == [1]
    u, cl = part(c, "u"), part(c, "c")
    assert (u.leader, u.isr, u.leader_recovery_state) == (2, (2,), 1)
    assert (cl.leader, cl.isr) == (NO_LEADER, (1,))  # clean: waits for broker 1
    # the recovered leader clears RECOVERING through AlterPartition
    assert code_of(alter(c, "u", 0, [2], recovery=0)) == 0
    assert part(c, "u").leader_recovery_state == 0


def test_controlled_shutdown_leaves_the_broker_leading_nothing(c3):
    c3.create(topic("many", n=6, rf=3))
    c3.heartbeat(2, want_shut_down=True)
    assert not c3.image.leaderships(2)
    for t in ("t", "many"):
        for p in c3.image.topic_by_name(t).partitions.values():
            assert 2 not in p.isr and p.leader in (1, 3)
    res = c3.heartbeat(2, want_shut_down=True)
    assert res.response.should_shut_down


def test_new_incarnation_takes_the_old_one_out_of_isrs(c3):
    c3.now = 20_000  # broker 2's session expired: a new incarnation may register
    for b in (1, 3):
        c3.heartbeat(b)
    res = c3.register(2, incarnation=uuid.UUID(int=0xBEEF, version=4))
    assert res.response.error_code == 0
    assert [type(r).__name__ for r in res.records][-1] == "RegisterBrokerRecord"
    assert part(c3).isr == (1, 3)


def test_restart_after_a_controlled_shutdown_with_its_previous_broker_epoch(c3):
    """The broker's clean-shutdown state survives its restart: a controlled shutdown leaves it
    fenced, in no ISR and leading nothing; the new incarnation registering with
    PreviousBrokerEpoch = the old epoch (Kafka's clean-shutdown signal) finds nothing to clean
    up. Without ELR, Kafka's ``handleBrokerShutdown`` treats a clean and an unclean restart
    alike, and so do we: the same records either way."""
    c3.heartbeat(2, want_shut_down=True)
    assert c3.heartbeat(2, want_shut_down=True).response.should_shut_down
    old = c3.image.brokers[2]
    assert old.fenced and not c3.image.leaderships(2)
    assert all(2 not in p.isr for p in c3.image.topic_by_name("t").partitions.values())
    c3.now = 20_000  # the old incarnation's session is over
    for b in (1, 3):
        c3.heartbeat(b)
    unclean = copy.deepcopy(c3)
    inc = uuid.UUID(int=0xC1EA, version=4)
    clean = c3.register(2, incarnation=inc, previous_broker_epoch=old.epoch)
    other = unclean.register(2, incarnation=inc, previous_broker_epoch=-1)
    assert clean.response.error_code == other.response.error_code == 0
    assert [type(r).__name__ for r in clean.records] == ["RegisterBrokerRecord"]
    assert clean.records == other.records and c3.image == unclean.image
    new = c3.image.brokers[2]
    assert new.fenced and new.epoch > old.epoch and not new.in_controlled_shutdown
    assert part(c3).isr == (1, 3)


# ================================================================== ElectLeaders
def test_elect_leaders_preferred(c3):
    c3.heartbeat(1, want_fence=True)  # 1 fenced: 2 leads
    c3.heartbeat(1)
    assert part(c3).leader == 2
    assert code_of(alter(c3, "t", 0, [2, 3, 1])) == 0
    res = elect(c3, 0, [("t", [0, 5]), ("nope", [0])])
    r = res.response.replica_election_results
    assert [(x.partition_id, x.error_code, x.error_message) for x in r[0].partition_result] == [
        (0, 0, None),
        (5, E.UNKNOWN_TOPIC_OR_PARTITION, "No such partition as t-5"),
    ]
    assert r[1].partition_result[0].error_message == "No such topic as nope"
    assert part(c3).leader == 1
    res = elect(c3, 0, [("t", [0])])
    assert res.response.replica_election_results[0].partition_result[0].error_code == (
        E.ELECTION_NOT_NEEDED
    )
    # null TopicPartitions: every partition, those needing nothing left out
    res = elect(c3, 0, None)
    assert [x.partition_result for x in res.response.replica_election_results] == [()]


def test_elect_leaders_preferred_not_available_and_unclean():
    c = cluster(1, 2, 3)
    c.create(topic("t", assignments=[(0, [1, 2, 3])], n=-1, rf=-1))
    assert code_of(alter(c, "t", 0, [1])) == 0
    c.heartbeat(1, want_fence=True)  # the only ISR member fenced: leaderless
    assert part(c).leader == NO_LEADER
    res = elect(c, 0, [("t", [0])])
    assert res.response.replica_election_results[0].partition_result[0].error_code == (
        E.PREFERRED_LEADER_NOT_AVAILABLE
    )
    assert not res.records
    res = elect(c, 1, [("t", [0])])  # an admin's unclean election needs no topic config
    assert res.response.replica_election_results[0].partition_result[0].error_code == 0
    p = part(c)
    assert (p.leader, p.isr, p.leader_recovery_state) == (2, (2,), 1)
    res = elect(c, 1, [("t", [0])])
    assert res.response.replica_election_results[0].partition_result[0].error_code == (
        E.ELECTION_NOT_NEEDED
    )


def test_elect_leaders_unknown_type_fails_the_request(c3):
    res = elect(c3, 5, [("t", [0])])
    r = res.response
    assert r.error_code == E.INVALID_REQUEST and not res.records
    assert r.replica_election_results[0].partition_result[0].error_message == (
        "Unknown election type 5"
    )


# ================================================================== reassignments
def test_reassignment_adds_then_completes_through_alter_partition():
    c = cluster(1, 2, 3, 4)
    c.create(topic("t", assignments=[(0, [1, 2, 3])], n=-1, rf=-1))
    p0 = part(c)
    res, r = reassign(c, "t", 0, [4, 2, 3])
    assert (r.error_code, r.error_message) == (0, None)
    p = part(c)
    assert (p.replicas, p.adding_replicas, p.removing_replicas) == ((4, 2, 3, 1), (4,), (1,))
    assert p.leader == 1 and p.leader_epoch == p0.leader_epoch  # nothing removed yet
    listed = replication.list_partition_reassignments(
        c.image, R("ListPartitionReassignmentsRequest")(topics=None)
    )
    [lt] = listed.topics
    assert (lt.name, lt.partitions[0].adding_replicas, lt.partitions[0].removing_replicas) == (
        "t", (4,), (1,),
    )  # fmt: skip
    # the leader (1) adds 4 to the ISR: the reassignment completes, 1 leaves, 4 leads
    res = alter(c, "t", 0, [1, 2, 3, 4])
    assert code_of(res) == E.NEW_LEADER_ELECTED
    p = part(c)
    assert (p.replicas, p.isr, p.leader) == ((4, 2, 3), (2, 3, 4), 4)
    assert (p.adding_replicas, p.removing_replicas) == ((), ())
    assert p.leader_epoch == p0.leader_epoch + 1
    empty = replication.list_partition_reassignments(
        c.image, R("ListPartitionReassignmentsRequest")(topics=None)
    )
    assert empty.topics == ()


def test_reassignment_reorder_completes_at_once_and_rf_guard():
    c = cluster(1, 2, 3, 4)
    c.create(topic("t", assignments=[(0, [1, 2, 3])], n=-1, rf=-1))
    res, r = reassign(c, "t", 0, [3, 2, 1])
    assert r.error_code == 0 and part(c).replicas == (3, 2, 1) and part(c).leader == 1
    res, r = reassign(c, "t", 0, [1, 2], allow_rf=False)
    assert (r.error_code, r.error_message) == (
        E.INVALID_REPLICATION_FACTOR, "The replication factor is changed from 3 to 2",
    )  # fmt: skip
    assert res.response.allow_replication_factor_change is False and not res.records
    for bad, msg in (
        ([], "empty replica list"),
        ([1, 9], "broker 9, but no such broker"),
        ([1, 1, 2], "the broker 1 more than once"),
    ):
        res, r = reassign(c, "t", 0, bad)
        assert r.error_code == E.INVALID_REPLICA_ASSIGNMENT and msg in r.error_message
    res, r = reassign(c, "nope", 0, [1])
    assert (r.error_code, r.error_message) == (
        E.UNKNOWN_TOPIC_OR_PARTITION, "Unable to find a topic named nope.",
    )  # fmt: skip
    # shrinking the replica set: the ISR covers the target, so it completes at once
    res, r = reassign(c, "t", 0, [3, 2])
    p = part(c)
    assert r.error_code == 0 and (p.replicas, p.isr, p.leader) == ((3, 2), (2, 3), 3)


def test_reassignment_cancel():
    c = cluster(1, 2, 3, 4)
    c.create(topic("t", assignments=[(0, [1, 2, 3])], n=-1, rf=-1))
    res, r = reassign(c, "t", 0, None)
    assert (r.error_code, r.error_message) == (E.NO_REASSIGNMENT_IN_PROGRESS, None)
    reassign(c, "t", 0, [4, 2, 3])
    res, r = reassign(c, "t", 0, None)
    p = part(c)  # Kafka's revert drops the adding replicas from the current order
    assert r.error_code == 0 and (p.replicas, p.isr) == ((2, 3, 1), (1, 2, 3))
    assert (p.adding_replicas, p.removing_replicas) == ((), ())


def test_reassignment_cancel_that_needs_an_unclean_election_is_refused():
    c = cluster(1, 2, 3)
    c.create(topic("t", assignments=[(0, [1])], n=-1, rf=-1))
    reassign(c, "t", 0, [2])
    assert code_of(alter(c, "t", 0, [1, 2])) == E.NEW_LEADER_ELECTED  # 2 leads, 1 is gone
    reassign(c, "t", 0, [3])  # 2 -> 3 in progress; then 2 dies
    c.heartbeat(2, want_fence=True)
    p = part(c)
    assert p.isr == (2,) and p.leader == NO_LEADER
    res, r = reassign(c, "t", 0, None)  # the revert keeps 2 (not being added): clean
    p = part(c)
    assert r.error_code == 0 and (p.replicas, p.isr, p.leader) == ((2,), (2,), NO_LEADER)
    # now with the ISR made only of replicas being added: reverting needs an unclean election
    c2 = cluster(1, 2)
    c2.create(topic("t", assignments=[(0, [1])], n=-1, rf=-1))
    reassign(c2, "t", 0, [1, 2])
    c2.apply([R("PartitionChangeRecord")(partition_id=0, topic_id=c2.image.topics_by_name["t"],
                                         isr=(2,), leader=2)])  # fmt: skip
    res, r = reassign(c2, "t", 0, None)
    assert r.error_code == E.INVALID_REPLICA_ASSIGNMENT and "unclean leader election" in (
        r.error_message
    )
    assert not res.records


# ================================================================== periodic unclean election
def test_periodic_unclean_election_only_for_topics_that_allow_it():
    c = cluster(1, 2)
    c.create(topic("c", assignments=[(0, [1, 2])], n=-1, rf=-1))
    assert code_of(alter(c, "c", 0, [1])) == 0
    c.heartbeat(1, want_fence=True)
    run = lambda: c.run(lambda img, r, ctx: partitions.elect_unclean_leaders(img, ctx), None)  # noqa: E731
    assert run().records == []
    c.apply([R("ConfigRecord")(resource_type=2, resource_name="c",
                               name="unclean.leader.election.enable", value="true")])  # fmt: skip
    res = run()
    assert len(res.records) == 1 and part(c, "c").leader == 2


# ================================================================== a model check
@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.sampled_from("fhsaerc"), st.integers(1, 4)), max_size=30))
def test_invariants_hold_under_any_sequence(steps):
    """Whatever mix of fencing, heartbeats, controlled shutdowns, AlterPartition, elections,
    reassignments and cancels: the ISR is never empty and is within the replicas, the leader is
    an ISR member or -1, epochs never go back and the partition epoch moves with every
    record."""
    c = cluster(1, 2, 3, 4, seed=1)
    c.create(topic("t", n=3, rf=3))
    seen = {
        i: (p.leader_epoch, p.partition_epoch)
        for i, p in c.image.topic_by_name("t").partitions.items()
    }
    for op, b in steps:
        i = b % 3
        p = part(c, "t", i)
        if op == "f":
            c.heartbeat(b, want_fence=True)
        elif op == "h":
            c.heartbeat(b)
        elif op == "s":
            c.heartbeat(b, want_shut_down=True)
        elif op == "a" and p.leader != NO_LEADER:
            active = [r for r in p.replicas if c.image.is_active(r)]
            alter(c, "t", i, [p.leader] + [r for r in active if r != p.leader])
        elif op == "e":
            elect(c, b % 2, [("t", [i])])
        elif op == "r":
            reassign(c, "t", i, [(b + k) % 4 + 1 for k in range(3)])
        elif op == "c":
            reassign(c, "t", i, None)
        for j, q in c.image.topic_by_name("t").partitions.items():
            assert q.isr and set(q.isr) <= set(q.replicas), q
            assert q.leader == NO_LEADER or q.leader in q.isr, q
            le, pe = seen[j]
            assert (
                q.leader_epoch >= le
                and q.partition_epoch >= pe
                and q.leader_epoch <= q.partition_epoch
            )
            seen[j] = (q.leader_epoch, q.partition_epoch)
