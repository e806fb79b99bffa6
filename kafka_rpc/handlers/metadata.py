"""Metadata (key 3).

API: versions 0-14 on the broker listener.
Behavior: Brokers = this node at the advertised endpoint of the listener the request came in on;
ClusterId = the persisted cluster id; ControllerId = this node's id. There is no controller
state yet, so the cluster has no topics: a null topic list (all topics; an empty list at v0)
answers no topics, and each requested topic is answered with an error.
Errors: UNKNOWN_TOPIC_OR_PARTITION (3) per requested topic name; UNKNOWN_TOPIC_ID (100) per
topic requested by id only.
"""

from __future__ import annotations

from uuid import UUID

from kafka_rpc.protocol import codec
from kafka_rpc.protocol.errors import ErrorCode
from kafka_rpc.server.registry import handles

_mod = codec.module("MetadataResponse")
MetadataResponse = _mod.MetadataResponse
Broker = _mod.MetadataResponseBroker
Topic = _mod.MetadataResponseTopic
_ZERO = UUID(int=0)


@handles("MetadataRequest")
def metadata(ctx, request):
    ep = ctx.server.advertised(ctx.listener.name)
    topics = ()
    if request.topics:
        topics = tuple(
            Topic(
                error_code=(
                    ErrorCode.UNKNOWN_TOPIC_ID
                    if t.name is None and t.topic_id != _ZERO
                    else ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
                ),
                name=t.name if t.name is not None or ctx.api_version >= 12 else "",
                topic_id=t.topic_id,
            )
            for t in request.topics
        )
    return MetadataResponse(
        brokers=(Broker(node_id=ctx.server.node_id, host=ep.host, port=ep.port),),
        cluster_id=ctx.server.cluster_id,
        controller_id=ctx.server.node_id,
        topics=topics,
    )
