"""AlterPartitionReassignments (key 45), ListPartitionReassignments (key 46) and ElectLeaders
(key 43): admin requests about partition replica sets and leaders.

API: AlterPartitionReassignments v0-1, ListPartitionReassignments v0 and ElectLeaders v0-2 on
both listeners (``kafka-reassign-partitions`` sends the first two, ``kafka-topics --describe``
the second, ``kafka-leader-election`` the third; a Kafka broker forwards them inside an
Envelope).
Behavior: as CreateTopics' routing (:func:`~kafka_rpc.broker.channel.answer_or_forward`): the
active controller runs AlterPartitionReassignments and ElectLeaders as write events answered
after commit (:func:`~kafka_rpc.controller.partitions.alter_partition_reassignments`,
:func:`~kafka_rpc.controller.partitions.elect_leaders`) and answers ListPartitionReassignments
from its committed image (:func:`~kafka_rpc.controller.replication.
list_partition_reassignments`); a controller listener elsewhere answers NOT_CONTROLLER; a broker
listener elsewhere forwards them.
Authorization (``API_RULES``): ALTER on the cluster for AlterPartitionReassignments and
ElectLeaders, DESCRIBE for ListPartitionReassignments.
Errors: one code for the whole request (NOT_CONTROLLER (41), REQUEST_TIMED_OUT (7) when no
controller answers, CLUSTER_AUTHORIZATION_FAILED) in the shape of Kafka's ``getErrorResponse``:
the top-level code (and message) and every named partition with them for
AlterPartitionReassignments and ElectLeaders (ElectLeaders v0 has no top-level code); each named
topic listed with its partition indexes for ListPartitionReassignments.
"""

from __future__ import annotations

from typing import Any

from kafka_rpc.api.registry import handles
from kafka_rpc.broker.forwarding import FORWARD_ERROR_MESSAGES, answer_or_forward
from kafka_rpc.controller import partitions

__all__ = ["alter_partition_reassignments", "elect_leaders", "list_partition_reassignments"]


def _alter_error(request: Any, version: int, code: int) -> Any:
    return partitions.alter_partition_reassignments_error_response(
        request, code, FORWARD_ERROR_MESSAGES.get(code)
    )


def _list_error(request: Any, version: int, code: int) -> Any:
    return partitions.list_partition_reassignments_error_response(
        request, code, FORWARD_ERROR_MESSAGES.get(code)
    )


def _elect_error(request: Any, version: int, code: int) -> Any:
    return partitions.elect_leaders_error_response(request, code, FORWARD_ERROR_MESSAGES.get(code))


async def _route(ctx: Any, request: Any, method: str, error: Any) -> Any:
    return await answer_or_forward(
        ctx.services, ctx.listener.role, request, ctx.api_version, method,
        lambda code: error(request, ctx.api_version, code),
        timeout=max(1.0, request.timeout_ms / 1000),
    )  # fmt: skip


@handles("AlterPartitionReassignmentsRequest", error_response=_alter_error)
async def alter_partition_reassignments(ctx, request):
    return await _route(ctx, request, "alter_partition_reassignments", _alter_error)


@handles("ListPartitionReassignmentsRequest", error_response=_list_error)
async def list_partition_reassignments(ctx, request):
    return await _route(ctx, request, "list_partition_reassignments", _list_error)


@handles("ElectLeadersRequest", error_response=_elect_error)
async def elect_leaders(ctx, request):
    return await _route(ctx, request, "elect_leaders", _elect_error)
