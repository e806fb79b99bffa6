"""IncrementalAlterConfigs (key 44) and AlterConfigs (key 33).

API: IncrementalAlterConfigs 0-1 and AlterConfigs 0-2 on both listeners.
Behavior (Kafka's ``ControllerApis.handleIncrementalAlterConfigs`` / ``handleLegacyAlterConfigs``
on the controller listener, ``ForwardingManager`` on the broker listener), as CreateTopics: at the
active controller the request runs as a write event
(:func:`~kafka_rpc.controller.configuration.incremental_alter_configs` /
:func:`~kafka_rpc.controller.configuration.legacy_alter_configs`) and is answered once its
ConfigRecords commit; a controller listener elsewhere answers NOT_CONTROLLER per resource; a
broker listener elsewhere forwards it to the active controller
(:func:`~kafka_rpc.broker.channel.answer_or_forward`). A Kafka broker sends them inside an
Envelope (:mod:`kafka_rpc.handlers.envelope`).
Errors per resource with an ErrorMessage: NOT_CONTROLLER (41), REQUEST_TIMED_OUT (7) when no
controller answers, and the command's codes (INVALID_CONFIG, INVALID_REQUEST,
UNKNOWN_TOPIC_OR_PARTITION, BROKER_ID_NOT_REGISTERED, INVALID_TOPIC_EXCEPTION,
UNSUPPORTED_VERSION for an unknown resource type).
"""

from __future__ import annotations

from typing import Any

from kafka_rpc.api.registry import handles
from kafka_rpc.broker.forwarding import answer_or_forward
from kafka_rpc.controller.configuration import alter_configs_error_response

__all__ = ["alter_configs", "incremental_alter_configs"]


def _error(request: Any, version: int, code: int) -> Any:
    return alter_configs_error_response(request, code, None)


async def _route(ctx: Any, request: Any, local: str) -> Any:
    return await answer_or_forward(
        ctx.services, ctx.listener.role, request, ctx.api_version, local,
        lambda code: alter_configs_error_response(request, code, None),
    )  # fmt: skip


@handles("IncrementalAlterConfigsRequest", error_response=_error)
async def incremental_alter_configs(ctx, request):
    return await _route(ctx, request, "incremental_alter_configs")


@handles("AlterConfigsRequest", error_response=_error)
async def alter_configs(ctx, request):
    return await _route(ctx, request, "legacy_alter_configs")
