"""ElectLeaders on the pure command (ReplicationControlManager.electLeaders,
PartitionChangeBuilder's PREFERRED and UNCLEAN elections)."""

from __future__ import annotations

from kafka_rpc.controller import partitions
from kafka_rpc.protocol import codec
from kafka_rpc.protocol.errors import ErrorCode as E
from tests.controller.harness import Cluster, topic

R = codec.message_class
EL = codec.module("ElectLeadersRequest")


def elect(c: Cluster, election: int, parts=None, version: int = 2):
    req = R("ElectLeadersRequest")(
        election_type=election,
        topic_partitions=None if parts is None else tuple(
            EL.TopicPartitions(topic=t, partitions=tuple(ps)) for t, ps in parts),
    )  # fmt: skip
    return c.run(lambda img, r, ctx: partitions.elect_leaders(img, r, ctx, version), req)


def results(res):
    return {(t.topic, p.partition_id): p.error_code
            for t in res.response.replica_election_results for p in t.partition_result}  # fmt: skip


def test_preferred_election_moves_leadership_back():
    c = Cluster()
    c.live(1, 2)
    c.create(topic("t", n=-1, rf=-1, assignments=[(0, [1, 2]), (1, [2, 1])]))
    tid = c.image.topics_by_name["t"]
    c.heartbeat(1, want_fence=True)  # 1 fenced: leaves the ISR; p0 moves to 2
    assert c.image.topics[tid].partitions[0].leader == 2
    res = elect(c, 0, [("t", [0, 1, 9]), ("nope", [0])])
    assert results(res) == {("t", 0): E.PREFERRED_LEADER_NOT_AVAILABLE,
                            ("t", 1): E.ELECTION_NOT_NEEDED,
                            ("t", 9): E.UNKNOWN_TOPIC_OR_PARTITION,
                            ("nope", 0): E.UNKNOWN_TOPIC_OR_PARTITION}  # fmt: skip
    assert not res.records
    # back in the ISR (as AlterPartition would put it) and unfenced: the election moves it
    c.apply([R("PartitionChangeRecord")(partition_id=0, topic_id=tid, isr=(2, 1))])
    c.heartbeat(1)
    epoch = c.image.topics[tid].partitions[0].leader_epoch
    res = elect(c, 0, None)  # all partitions: the ones not needing it are left out
    assert results(res) == {("t", 0): 0}
    p = c.image.topics[tid].partitions[0]
    assert (p.leader, p.leader_epoch) == (1, epoch + 1)
    # v0 (no ElectionType field) means preferred; an unknown type is refused
    assert results(elect(c, 0, [("t", [0])], version=0)) == {("t", 0): E.ELECTION_NOT_NEEDED}
    bad = elect(c, 7, [("t", [0])])
    assert bad.response.error_code == E.INVALID_REQUEST and not bad.records


def test_unclean_election_of_a_leaderless_partition():
    c = Cluster()
    c.live(1, 2)
    c.create(topic("t", n=-1, rf=-1, assignments=[(0, [1, 2])]))
    tid = c.image.topics_by_name["t"]
    c.apply([R("PartitionChangeRecord")(partition_id=0, topic_id=tid, isr=(1,))])
    c.heartbeat(1, want_fence=True)  # the last ISR member fenced: leaderless, ISR [1]
    p = c.image.topics[tid].partitions[0]
    assert (p.leader, p.isr) == (-1, (1,))
    assert results(elect(c, 0, [("t", [0])])) == {("t", 0): E.PREFERRED_LEADER_NOT_AVAILABLE}
    res = elect(c, 1, [("t", [0])])
    assert results(res) == {("t", 0): 0}
    p = c.image.topics[tid].partitions[0]
    assert (p.leader, p.isr, p.leader_recovery_state) == (2, (2,), 1)
    assert results(elect(c, 1, [("t", [0])])) == {("t", 0): E.ELECTION_NOT_NEEDED}
