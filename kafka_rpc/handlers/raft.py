"""The metadata quorum's RPCs: Vote (52), BeginQuorumEpoch (53), EndQuorumEpoch (54), Fetch (1),
FetchSnapshot (59), DescribeQuorum (55).

API: the versions of our specs, on the listeners each spec names: Vote, BeginQuorumEpoch,
EndQuorumEpoch and FetchSnapshot on the controller listener; Fetch and DescribeQuorum on both.
Behavior: each handler passes the decoded request to the node's Raft driver
(``ctx.server.raft``, :class:`kafka_rpc.raft.driver.RaftDriver`), which answers as Kafka's
``KafkaRaftClient`` does (``reference/kraft.md`` 1.4-1.13) at the request's version. A node in
the broker role only runs its replica as an observer; its DescribeQuorum is answered by that
replica (NOT_LEADER_OR_FOLLOWER with the known leader and epoch, as a non-leader controller).

Fetch on the broker listener: this server holds no classic partition data (diskless topics are
read through the Batch Coordinator), so a Fetch there is passed to the Raft driver only when every
topic it names is the metadata topic (by id from v13, by name ``__cluster_metadata`` before);
otherwise every requested partition is answered UNKNOWN_TOPIC_ID (v13+) or
UNKNOWN_TOPIC_OR_PARTITION (v12 and below) with HighWatermark -1 and no records, the metadata
topic's partitions included when a request mixes it with others (a KRaft fetcher never does).
On the controller listener every Fetch goes to the driver, which answers a topic that is not the
metadata log with a top-level INVALID_REQUEST (kraft.md 1.9).

Errors: NOT_CONTROLLER (41) in every ErrorCode field when the node runs no quorum
(``ctx.server.raft`` is None); otherwise the driver's codes.
"""

from __future__ import annotations

from kafka_rpc.protocol import codec
from kafka_rpc.protocol.errors import ErrorCode, KafkaError
from kafka_rpc.raft.api import METADATA_TOPIC_ID, METADATA_TOPIC_NAME
from kafka_rpc.server.registry import default_registry, handles

_Fetch = codec.module("FetchResponse")


async def _to_raft(ctx, request):
    raft = getattr(ctx.server, "raft", None)
    if raft is None:
        raise KafkaError(ErrorCode.NOT_CONTROLLER, "this node runs no metadata quorum")
    return await raft.handle(ctx.api_key, ctx.api_version, request)


# Every Raft RPC of the controller listener goes to the replica as it is (Fetch is below: the
# broker listener also serves it).
for _name in ("VoteRequest", "BeginQuorumEpochRequest", "EndQuorumEpochRequest",
              "FetchSnapshotRequest", "DescribeQuorumRequest"):  # fmt: skip
    default_registry.register(_name, _to_raft)


def _is_metadata_topic(topic, version: int) -> bool:
    if version >= 13:
        return topic.topic_id == METADATA_TOPIC_ID
    return topic.topic == METADATA_TOPIC_NAME


@handles("FetchRequest")
async def fetch(ctx, request):
    version = ctx.api_version
    if ctx.listener.role == "controller" or (
        request.topics and all(_is_metadata_topic(t, version) for t in request.topics)
    ):
        return await _to_raft(ctx, request)
    code = ErrorCode.UNKNOWN_TOPIC_ID if version >= 13 else ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    return _Fetch.FetchResponse(
        responses=tuple(
            _Fetch.FetchableTopicResponse(
                topic=t.topic,
                topic_id=t.topic_id,
                partitions=tuple(
                    _Fetch.PartitionData(
                        partition_index=p.partition, error_code=code, high_watermark=-1
                    )
                    for p in t.partitions
                ),
            )
            for t in request.topics
        ),
    )
