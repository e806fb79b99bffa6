"""The metadata quorum's RPCs: Vote (52), BeginQuorumEpoch (53), EndQuorumEpoch (54), Fetch (1),
FetchSnapshot (59), DescribeQuorum (55), UpdateRaftVoter (82).

API: the versions of our specs, on the listeners each spec names: Vote, BeginQuorumEpoch,
EndQuorumEpoch, FetchSnapshot and UpdateRaftVoter on the controller listener; Fetch and
DescribeQuorum on both. UpdateRaftVoter names no partition: it always goes to the metadata log's
replica, which answers it as a static quorum's leader does (``RaftCore._on_update_voter``).
Behavior: each handler passes the decoded request to the node's Raft driver
(``ctx.services.raft``, :class:`kafka_rpc.raft.driver.RaftDriver`), which answers as Kafka's
``KafkaRaftClient`` does (its ``handle*Request`` methods) at the request's version. A node in
the broker role only runs its replica as an observer; its DescribeQuorum is answered by that
replica (NOT_LEADER_OR_FOLLOWER with the known leader and epoch, as a non-leader controller).

Fetch on the broker listener: this server holds no classic partition data (diskless topics are
read through the Batch Coordinator), so a Fetch there is passed to the Raft driver only when every
topic it names is the metadata topic (by id from v13, by name ``__cluster_metadata`` before);
otherwise every requested partition is answered UNKNOWN_TOPIC_ID (v13+) or
UNKNOWN_TOPIC_OR_PARTITION (v12 and below) with HighWatermark -1 and no records, the metadata
topic's partitions included when a request mixes it with others (a KRaft fetcher never does).
On the controller listener every Fetch goes to the driver, which answers a topic that is not the
metadata log with a top-level INVALID_REQUEST (``KafkaRaftClient.handleFetchRequest``).

Other Raft partitions (docs/batch-coordinator.md): a ``__diskless-metadata`` partition's
replica registers its driver with ``RaftPartitions.register`` (``kafka_rpc.raft.routing``)
under the partition's topic id, its topic name and its partition index. A request whose first
topic/partition names a registered partition, by topic id (Vote v3, BeginQuorumEpoch v2,
EndQuorumEpoch v2, Fetch v13+) or by name
(older versions, FetchSnapshot and DescribeQuorum, which carry no id), goes to that driver; so
does one naming the partition of the server's own Batch Coordinator when that is a
``ReplicatedBatchCoordinator`` (``diskless.coordinator.url=raft://...``: its
``raft_driver_for``); any other request goes to the metadata log's driver, which keeps the
sentinel topic id. (A Raft
request names one partition: Kafka's ``KafkaRaftClient`` rejects more.)

Errors: NOT_CONTROLLER (41) in every ErrorCode field when the node runs no quorum
(``ctx.services.raft`` is None) and the request names no registered partition; otherwise the
driver's codes.
"""

from __future__ import annotations

from kafka_rpc.api.registry import default_registry, handles
from kafka_rpc.protocol import codec
from kafka_rpc.protocol.errors import ErrorCode, KafkaError
from kafka_rpc.raft.api import METADATA_TOPIC_ID, METADATA_TOPIC_NAME

_Fetch = codec.module("FetchResponse")


def _partition_driver(ctx, request):
    """The driver of the request's first topic/partition when it is a registered partition, or
    one the server's Batch Coordinator replicates (its ``raft_driver_for(key)``); else None."""
    topics = getattr(request, "topics", None)
    if not topics or not topics[0].partitions:
        return None
    t, p = topics[0], topics[0].partitions[0]
    index = getattr(p, "partition_index", None)
    if index is None:
        index = getattr(p, "partition", 0)
    topic_id = getattr(t, "topic_id", None)
    if topic_id is not None and topic_id.int != 0:
        key = (topic_id, index)
    else:
        name = getattr(t, "topic_name", None) or getattr(t, "name", None)
        name = name or getattr(t, "topic", None)
        if not name:
            return None
        key = (name, index)
    services = ctx.services
    driver = services.raft_partitions.get(key)
    if driver is None:
        route = getattr(services.coordinator, "raft_driver_for", None)
        driver = route(key) if route is not None else None
    return driver


async def _to_raft(ctx, request):
    raft = _partition_driver(ctx, request) or ctx.services.raft
    if raft is None:
        raise KafkaError(ErrorCode.NOT_CONTROLLER, "this node runs no metadata quorum")
    return await raft.handle(ctx.api_key, ctx.api_version, request)


# Every Raft RPC of the controller listener goes to the replica as it is (Fetch is below: the
# broker listener also serves it).
for _name in ("VoteRequest", "BeginQuorumEpochRequest", "EndQuorumEpochRequest",
              "FetchSnapshotRequest", "DescribeQuorumRequest",
              "UpdateRaftVoterRequest"):  # fmt: skip
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
