"""ListPartitionReassignments (key 46).

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
from kafka_rpc.protocol import codec
from kafka_rpc.server.registry import handles

__all__ = ["list_partition_reassignments"]

_Resp = codec.message_class("ListPartitionReassignmentsResponse")


@handles("ListPartitionReassignmentsRequest")
async def list_partition_reassignments(ctx, request):
    return await answer_or_forward(
        ctx.server, ctx.listener.role, request, ctx.api_version, "list_partition_reassignments",
        lambda code: _Resp(error_code=code),
        timeout=max(1.0, request.timeout_ms / 1000),
    )  # fmt: skip
