"""kafka_rpc.raft.wire.for_version: each Raft message encodes at every version of its spec."""

from uuid import UUID

import pytest

from kafka_rpc.protocol import codec
from kafka_rpc.protocol.errors import UnsupportedVersionError
from kafka_rpc.raft.api import METADATA_TOPIC_ID, METADATA_TOPIC_NAME
from kafka_rpc.raft.wire import for_version

ZERO = UUID(int=0)


def _both(name):
    """A message of spec ``name`` whose one topic has both the name and the id set."""
    mod = codec.module(name)
    topic = mod.TopicData(topic_name=METADATA_TOPIC_NAME, topic_id=METADATA_TOPIC_ID,
                          partitions=(mod.PartitionData(partition_index=0),))  # fmt: skip
    return codec.message_class(name)(topics=(topic,))


@pytest.mark.parametrize(
    ("name", "first_id"),
    [
        ("VoteRequest", 3),
        ("VoteResponse", 3),
        ("BeginQuorumEpochRequest", 2),
        ("BeginQuorumEpochResponse", 2),
        ("EndQuorumEpochRequest", 2),
        ("EndQuorumEpochResponse", 2),
    ],
)
def test_for_version_keeps_the_field_the_version_has(name, first_id):
    msg = _both(name)
    key = type(msg).__api_key__
    lo, hi = codec.valid_versions(name)
    with pytest.raises(UnsupportedVersionError):
        codec.encode(msg, hi)  # both set: no version can write it
    for v in range(lo, hi + 1):
        fixed = for_version(key, v, msg)
        (t,) = fixed.topics
        if v >= first_id:
            assert (t.topic_name, t.topic_id) == ("", METADATA_TOPIC_ID)
        else:
            assert (t.topic_name, t.topic_id) == (METADATA_TOPIC_NAME, ZERO)
        assert t.partitions == msg.topics[0].partitions
        back = codec.decode(name, v, codec.encode(fixed, v))
        assert back.topics[0].topic_name == t.topic_name
        assert back.topics[0].topic_id == t.topic_id
        assert for_version(key, v, fixed) is fixed  # already right: unchanged


def test_fetch_keeps_the_replica_id_field_the_version_has():
    m = codec.module("FetchRequest")
    topic = m.FetchTopic(topic=METADATA_TOPIC_NAME, topic_id=METADATA_TOPIC_ID,
                         partitions=(m.FetchPartition(partition=0, fetch_offset=5),))  # fmt: skip
    req = m.FetchRequest(cluster_id="c", replica_id=2, replica_state=m.ReplicaState(replica_id=2),
                         topics=(topic,))  # fmt: skip
    lo, hi = codec.valid_versions("FetchRequest")
    for v in range(lo, hi + 1):
        fixed = for_version(1, v, req)
        back = codec.decode("FetchRequest", v, codec.encode(fixed, v))
        got = back.replica_state.replica_id if v >= 15 else back.replica_id
        assert got == 2
        assert back.topics[0].partitions[0].fetch_offset == 5
        assert for_version(1, v, fixed) is fixed
    resp = codec.message_class("FetchResponse")()
    assert for_version(1, 17, resp) is resp


def test_other_messages_pass_through():
    req = codec.message_class("DescribeQuorumRequest")()
    assert for_version(55, 2, req) is req
    fetch = codec.message_class("FetchRequest")()
    assert for_version(1, 17, fetch) is fetch
    assert for_version(1, 10, fetch) is fetch
    empty = codec.message_class("VoteRequest")()
    assert for_version(52, 0, empty) is empty
