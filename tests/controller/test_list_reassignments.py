"""ListPartitionReassignments on the pure read (ReplicationControlManager.
listPartitionReassignments): only partitions with adding or removing replicas are listed."""

from __future__ import annotations

from kafka_rpc.controller import replication
from kafka_rpc.protocol import codec
from tests.controller.harness import Cluster, topic

R = codec.message_class
LPR = codec.module("ListPartitionReassignmentsRequest")


def listed(image, topics=None):
    resp = replication.list_partition_reassignments(
        image, R("ListPartitionReassignmentsRequest")(topics=topics)
    )
    assert resp.error_code == 0
    return [(t.name, [(p.partition_index, p.replicas, p.adding_replicas, p.removing_replicas)
                      for p in t.partitions]) for t in resp.topics]  # fmt: skip


def test_only_moving_partitions_are_listed():
    c = Cluster()
    c.live(1, 2, 3)
    c.create(topic("a", n=-1, rf=-1, assignments=[(0, [1]), (1, [2])]), topic("b", n=2))
    assert listed(c.image) == []
    tid = c.image.topics_by_name["a"]
    c.apply([R("PartitionChangeRecord")(partition_id=1, topic_id=tid, replicas=(2, 3),
                                        adding_replicas=(3,), removing_replicas=(2,))])  # fmt: skip
    assert listed(c.image) == [("a", [(1, (2, 3), (3,), (2,))])]
    asked = (LPR.ListPartitionReassignmentsTopics(name="a", partition_indexes=(0, 1, 7)),
             LPR.ListPartitionReassignmentsTopics(name="nope", partition_indexes=(0,)),
             LPR.ListPartitionReassignmentsTopics(name="b", partition_indexes=(0,)))  # fmt: skip
    assert listed(c.image, asked) == [("a", [(1, (2, 3), (3,), (2,))])]
