"""The metadata quorum's RPCs: Vote (52), BeginQuorumEpoch (53), EndQuorumEpoch (54), Fetch (1),
FetchSnapshot (59), DescribeQuorum (55), AddRaftVoter (80), RemoveRaftVoter (81),
UpdateRaftVoter (82).

API: the versions of our specs, on the listeners each spec names: Vote, BeginQuorumEpoch,
EndQuorumEpoch, FetchSnapshot and UpdateRaftVoter on the controller listener; Fetch,
DescribeQuorum, AddRaftVoter (v0-1) and RemoveRaftVoter (v0) on both. AddRaftVoter,
RemoveRaftVoter and UpdateRaftVoter name no partition: they always go to the metadata log's
replica.
Behavior: on the controller listener each handler passes the decoded request to the node's Raft
driver (``ctx.services.raft``, :class:`kafka_rpc.raft.driver.RaftDriver`), which answers as
Kafka's ``KafkaRaftClient`` does (its ``handle*Request`` methods) at the request's version
(Kafka's ``ControllerApis.handleRaftRequest``).

The quorum administration RPCs on the broker listener (DescribeQuorum of the metadata log,
AddRaftVoter, RemoveRaftVoter) are forwarded to the active controller, as Kafka's ``KafkaApis``
does (``forwardToControllerOrFail``): on the node of the active controller its own driver
answers; elsewhere the request goes, at the same version, through ``services.
controller_channel`` to the active controller's controller listener and its answer is relayed.
An answer carrying NOT_CONTROLLER or NOT_LEADER_OR_FOLLOWER (the Raft core's "not the leader":
the leader moved, or the channel guessed a voter that does not lead) is tried on the next
candidate (Kafka lifts DescribeQuorum's NOT_LEADER_OR_FOLLOWER to NOT_CONTROLLER for its
forwarding thread, ``RequestChannel.Request.shouldReturnNotController``; ours does the same for
the two voter changes, whose leader a broker also only guesses); when no controller answers:
REQUEST_TIMED_OUT (DescribeQuorum: top-level ErrorCode; the voter changes: ErrorCode and
ErrorMessage "No active controller could be reached."). A DescribeQuorum of another Raft
partition (below) is answered by that partition's replica on either listener.

Authorization (``kafka_rpc.security.authorizer.API_RULES``, Kafka's ``ControllerApis``):
DESCRIBE on the cluster for DescribeQuorum, ALTER for AddRaftVoter and RemoveRaftVoter,
CLUSTER_ACTION for UpdateRaftVoter and the replication RPCs; a forwarded request is checked on
the broker that received it (and, inside an Envelope from a Kafka broker, as the forwarded
principal on the controller).

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
(``ctx.services.raft`` is None) and the request names no registered partition; REQUEST_TIMED_OUT
(7) as above when forwarding reaches no controller; otherwise the driver's codes.
"""

from __future__ import annotations

import logging
from typing import Any

from kafka_rpc.api.registry import default_registry, handles
from kafka_rpc.broker.channel import ControllerUnavailableError, error_codes
from kafka_rpc.broker.forwarding import forward_error_message
from kafka_rpc.protocol import codec
from kafka_rpc.protocol.errors import ErrorCode, KafkaError
from kafka_rpc.raft.api import METADATA_TOPIC_ID, METADATA_TOPIC_NAME
from kafka_rpc.raft.base import CONTROLLER_ONLY_REPLICATION_RPCS

__all__ = ["FORWARD_MOVED", "forward_raft_request", "raft_voter_error_response"]

log = logging.getLogger("kafka_rpc.broker.channel")

_Fetch = codec.module("FetchResponse")

#: the answers that send a forwarded quorum request on to the next candidate controller
FORWARD_MOVED: frozenset[int] = frozenset({ErrorCode.NOT_CONTROLLER,
                                           ErrorCode.NOT_LEADER_OR_FOLLOWER})  # fmt: skip


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


async def _replication(ctx, request):
    """Vote, BeginQuorumEpoch, EndQuorumEpoch, FetchSnapshot: on the controller listener to the
    replica as it is; on the broker listener (served there unadvertised) only for a registered
    partition that is not the metadata log (a ``__diskless-metadata`` partition's group, whose
    replicas talk over the inter-broker listener), else INVALID_REQUEST."""
    if ctx.listener.role == "controller":
        return await _to_raft(ctx, request)
    driver = _partition_driver(ctx, request)
    if driver is None:
        raise KafkaError(ErrorCode.INVALID_REQUEST,
                         "the broker listener serves the Raft RPCs of coordinator partitions only")
    return await driver.handle(ctx.api_key, ctx.api_version, request)


# The replication RPCs of the controller listener, also served unadvertised on the broker
# listener for the coordinator partitions (Fetch and the quorum administration RPCs are below:
# the broker listener serves them by their specs). UpdateRaftVoter names no partition: it is
# always the metadata log's, on the controller listener only.
for _key in sorted(CONTROLLER_ONLY_REPLICATION_RPCS):
    default_registry.register(codec.REQUESTS_BY_KEY[_key], _replication,
                              unadvertised_on=frozenset({"broker"}))  # fmt: skip
default_registry.register("UpdateRaftVoterRequest", _to_raft)


def raft_voter_error_response(request: Any, version: int, code: int) -> Any:
    """AddRaftVoter's / RemoveRaftVoter's answer with ``code`` for the whole request and its
    message (Kafka's ``AddRaftVoterRequest.getErrorResponse``: ErrorCode and ErrorMessage)."""
    name = type(request).__spec_name__[: -len("Request")] + "Response"
    return codec.message_class(name)(error_code=code, error_message=forward_error_message(code))


def _describe_quorum_error_response(request: Any, version: int, code: int) -> Any:
    """DescribeQuorum answered with ``code`` at the top level (Kafka's ``DescribeQuorumRequest.
    getErrorResponse`` -> ``getTopLevelErrorResponse``; v2 carries the ErrorMessage)."""
    return codec.message_class("DescribeQuorumResponse")(
        error_code=code, error_message=forward_error_message(code) if version >= 2 else None
    )


_ERROR_RESPONSES = {
    "AddRaftVoterRequest": raft_voter_error_response,
    "RemoveRaftVoterRequest": raft_voter_error_response,
    "DescribeQuorumRequest": _describe_quorum_error_response,
}


async def forward_raft_request(ctx: Any, request: Any) -> Any:
    """A quorum administration request (DescribeQuorum, AddRaftVoter, RemoveRaftVoter) on the
    broker listener (module docstring): the local driver's answer when this node's controller
    is active and its answer does not say the leader moved; else the active controller's,
    through the controller channel; REQUEST_TIMED_OUT when no controller answers."""
    services = ctx.services
    version = ctx.api_version
    raft = services.raft
    ctl = services.controller
    if raft is not None and ctl is not None and ctl.is_active:
        resp = await raft.handle(ctx.api_key, version, request)
        if not any(c in FORWARD_MOVED for c in error_codes(resp)):
            return resp
    try:
        _node, resp = await services.controller_channel.send(
            request, version=version, moved=FORWARD_MOVED
        )
    except ControllerUnavailableError as e:
        log.warning("%s: %s", type(request).__name__, e)
        return _ERROR_RESPONSES[type(request).__spec_name__](
            request, version, ErrorCode.REQUEST_TIMED_OUT
        )
    return resp


async def _quorum_admin(ctx, request):
    """DescribeQuorum, AddRaftVoter, RemoveRaftVoter: another Raft partition's replica answers
    its DescribeQuorum on either listener; the metadata log's requests go to this node's driver
    on the controller listener and are forwarded on the broker listener."""
    if ctx.listener.role == "controller":
        return await _to_raft(ctx, request)
    driver = _partition_driver(ctx, request)
    if driver is not None:
        return await driver.handle(ctx.api_key, ctx.api_version, request)
    return await forward_raft_request(ctx, request)


for _name, _error in _ERROR_RESPONSES.items():
    default_registry.register(_name, _quorum_admin, error_response=_error)


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
    driver = _partition_driver(ctx, request)
    if driver is not None:  # a coordinator partition's replica fetching over the broker listener
        return await driver.handle(ctx.api_key, version, request)
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
