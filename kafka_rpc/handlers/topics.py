"""CreateTopics (key 19), DeleteTopics (key 20) and CreatePartitions (key 37).

API: CreateTopics 2-7, DeleteTopics 1-6 and CreatePartitions 0-3 on both listeners.
Behavior (Kafka's ``ControllerApis`` on the controller listener, ``ForwardingManager`` on the
broker listener):

- on the node of the active controller (``ctx.services.controller.is_active``), either listener:
  ``controller.create_topics`` / ``delete_topics`` / ``create_partitions``, answered once the
  records commit;
- on the controller listener of any other node: NOT_CONTROLLER per topic;
- on the broker listener of any other node: the same request is sent again, at the version it
  came in at, to the active controller's controller listener and its answer relayed. An answer
  with NOT_CONTROLLER (or a lost connection) means the controller moved: the leader is looked up
  again and the request sent once more (:class:`kafka_rpc.broker.channel.ControllerChannel`).
  The active controller answering NOT_CONTROLLER itself (leadership lost mid-request) is
  forwarded the same way.

Errors, per topic with an ErrorMessage: NOT_CONTROLLER (41) as above; REQUEST_TIMED_OUT (7) when
no controller answers; otherwise the controller's codes (among them POLICY_VIOLATION (44) for
a DeleteTopics entry naming ``__diskless-metadata``, which is never deleted:
:func:`kafka_rpc.controller.replication.delete_topics`). A handler failure answers every topic
with the error code.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any
from uuid import UUID

from kafka_rpc.api.registry import handles
from kafka_rpc.broker.forwarding import answer_or_forward, forward_error_message
from kafka_rpc.protocol import codec

if TYPE_CHECKING:
    from kafka_rpc.api.services import NodeServices

__all__ = ["create_partitions", "create_topics", "delete_topics", "route", "topics_error_response"]


_Create = codec.module("CreateTopicsResponse")
_Delete = codec.module("DeleteTopicsResponse")
_Partitions = codec.module("CreatePartitionsResponse")
_ZERO = UUID(int=0)


def create_error_response(request: Any, version: int, code: int, message: str | None = None):
    """Every topic of a CreateTopics request answered with ``code``."""
    msg = message if message is not None else forward_error_message(code)
    seen: dict[str, None] = {}
    for t in request.topics:
        seen.setdefault(t.name)
    return _Create.CreateTopicsResponse(
        topics=tuple(
            _Create.CreatableTopicResult(name=n, error_code=code, error_message=msg) for n in seen
        )
    )


def delete_error_response(request: Any, version: int, code: int, message: str | None = None):
    """Every topic of a DeleteTopics request answered with ``code``."""
    msg = message if message is not None else forward_error_message(code)
    R = _Delete.DeletableTopicResult
    if version >= 6:
        results = tuple(
            R(name=t.name, topic_id=t.topic_id, error_code=code, error_message=msg)
            for t in request.topics
        )
    else:
        results = tuple(
            R(name=n, topic_id=_ZERO, error_code=code, error_message=msg)
            for n in request.topic_names
        )
    return _Delete.DeleteTopicsResponse(responses=results)


def partitions_error_response(request: Any, version: int, code: int, message: str | None = None):
    """Every topic of a CreatePartitions request answered with ``code``."""
    msg = message if message is not None else forward_error_message(code)
    return _Partitions.CreatePartitionsResponse(results=tuple(
        _Partitions.CreatePartitionsTopicResult(name=n, error_code=code, error_message=msg)
        for n in dict.fromkeys(t.name for t in request.topics)))  # fmt: skip


_BUILDERS = {
    "create": create_error_response,
    "delete": delete_error_response,
    "partitions": partitions_error_response,
}
_LOCAL = {"create": "create_topics", "delete": "delete_topics", "partitions": "create_partitions"}


def topics_error_response(kind: str, request: Any, version: int, code: int, message=None):
    return _BUILDERS[kind](request, version, code, message)


async def route(services: NodeServices, role: str, kind: str, request: Any, version: int) -> Any:
    """Answer a CreateTopics (``kind="create"``), DeleteTopics (``"delete"``) or
    CreatePartitions (``"partitions"``) request that came in on a listener of ``role``: at the
    active controller, NOT_CONTROLLER, or forwarded
    (:func:`~kafka_rpc.broker.channel.answer_or_forward`)."""
    return await answer_or_forward(
        services, role, request, version, _LOCAL[kind],
        lambda code: topics_error_response(kind, request, version, code),
        timeout=max(1.0, request.timeout_ms / 1000),
    )  # fmt: skip


def _create_error(request, version, code):
    return create_error_response(request, version, code)


def _delete_error(request, version, code):
    return delete_error_response(request, version, code)


@handles("CreateTopicsRequest", error_response=_create_error)
async def create_topics(ctx, request):
    return await route(ctx.services, ctx.listener.role, "create", request, ctx.api_version)


@handles("DeleteTopicsRequest", error_response=_delete_error)
async def delete_topics(ctx, request):
    return await route(ctx.services, ctx.listener.role, "delete", request, ctx.api_version)


def _partitions_error(request, version, code):
    return partitions_error_response(request, version, code)


@handles("CreatePartitionsRequest", error_response=_partitions_error)
async def create_partitions(ctx, request):
    return await route(ctx.services, ctx.listener.role, "partitions", request, ctx.api_version)
