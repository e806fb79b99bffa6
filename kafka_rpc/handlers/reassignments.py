"""ListPartitionReassignments (key 46) and ElectLeaders (key 43).

ElectLeaders: v0-2 on both listeners, routed as CreateTopics; at the active controller a write
event (:func:`~kafka_rpc.controller.replication.elect_leaders`) answered once its
PartitionChangeRecords commit; NOT_CONTROLLER / REQUEST_TIMED_OUT at the top and per partition.


API: v0 on both listeners (``kafka-topics --describe`` and ``kafka-reassign-partitions
--list`` send it; a Kafka broker forwards it inside an Envelope).
Behavior: as CreateTopics' routing (:func:`~kafka_rpc.broker.channel.answer_or_forward`): the
active controller answers from its committed image
(:func:`~kafka_rpc.controller.replication.list_partition_reassignments`); a controller listener
elsewhere answers NOT_CONTROLLER; a broker listener elsewhere forwards it.
Errors (top-level ErrorCode): NOT_CONTROLLER (41), REQUEST_TIMED_OUT (7) when no controller
answers.
"""

from __future__ import annotations

from kafka_rpc.broker.channel import answer_or_forward
from kafka_rpc.controller.replication import elect_leaders_error_response
from kafka_rpc.protocol import codec
from kafka_rpc.server.registry import handles

__all__ = ["elect_leaders", "list_partition_reassignments"]

_Resp = codec.message_class("ListPartitionReassignmentsResponse")


@handles("ListPartitionReassignmentsRequest")
async def list_partition_reassignments(ctx, request):
    return await answer_or_forward(
        ctx.server, ctx.listener.role, request, ctx.api_version, "list_partition_reassignments",
        lambda code: _Resp(error_code=code),
        timeout=max(1.0, request.timeout_ms / 1000),
    )  # fmt: skip


def _elect_error(request, version, code):
    return elect_leaders_error_response(request, code, None)


@handles("ElectLeadersRequest", error_response=_elect_error)
async def elect_leaders(ctx, request):
    return await answer_or_forward(
        ctx.server, ctx.listener.role, request, ctx.api_version, "elect_leaders",
        lambda code: elect_leaders_error_response(request, code, None),
        timeout=max(1.0, request.timeout_ms / 1000),
    )  # fmt: skip
