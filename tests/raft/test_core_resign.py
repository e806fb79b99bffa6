"""``RaftCore.resign(now, epoch)`` (Kafka's ``KafkaRaftClient.resign``): the leader of that epoch
steps down (Resigned, EndQuorumEpoch to the other voters, which elect a successor); an older
epoch or a node that does not lead it is ignored; a future epoch is an error. The active
controller calls it when it renounces on a fault (``kafka_rpc.controller.quorum_controller``)."""

from __future__ import annotations

import pytest

from tests.raft.conftest import END, follower_node, leader_node


def test_the_leader_of_the_epoch_resigns_and_tells_the_voters():
    node = leader_node(epoch=3)
    node.outbound()
    assert node.core.resign(10, 3) is True
    assert node.core.state == "Resigned" and not node.core.is_leader
    ends = sorted(ob.destination for ob in node.outbound() if ob.api_key == END)
    assert ends == [2, 3]
    assert node.core.resign(20, 3) is False  # resigned already: nothing more


def test_an_older_epoch_or_a_follower_is_ignored_and_a_future_epoch_refused():
    node = leader_node(epoch=3)
    assert node.core.resign(10, 2) is False and node.core.is_leader
    with pytest.raises(ValueError, match="larger than the current epoch 3"):
        node.core.resign(10, 4)
    assert node.core.is_leader
    follower = follower_node(2, leader=1, epoch=3)
    assert follower.core.resign(10, 3) is False and follower.core.state == "Follower"
