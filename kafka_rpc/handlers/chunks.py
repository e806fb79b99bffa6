"""CreateChunks (key 10100) and AlterChunkAssignments (key 10101), KIP-1114
(docs/architecture.md, 'The controller').

API: version 0 of each, on both listeners (AlterChunkAssignments on the broker listener is our
erratum to the seed, see message_specs/README.md: the seed's tool sends it to a broker).

Behavior:

- **Controller listener** (Kafka's ``ControllerApis``): the active controller runs
  :meth:`~kafka_rpc.controller.quorum_controller.QuorumController.create_chunks` /
  ``alter_chunk_assignments`` as a write event and answers once the records are committed; any
  other controller answers NOT_CONTROLLER (41) on every entry.
- **Broker listener**, CreateChunks (KIP-1114 "the leader broker should process the request"):
  for each entry with StartOffset, PrevStopOffset or StartTimestamp left at -1, this node fills
  them in from its Batch Coordinator, the authority on a diskless partition's offsets: HW = the
  high watermark (``list_offsets`` LATEST), PrevStopOffset = HW - 1 (the last stable offset:
  diskless partitions commit whole batches, so it equals HW - 1), StartOffset = HW,
  StartTimestamp = the effective timestamp (ms) of the last committed batch (the one holding
  offset HW - 1, ``find_batches``): the latest timestamp known at the boundary. Values the
  client did set are kept. The filled request, without the entries that failed here, is then
  forwarded to the active controller (:func:`~kafka_rpc.broker.channel.answer_or_forward`) and
  the answers merged back in request order.
- **Broker listener**, AlterChunkAssignments: forwarded to the active controller unchanged, as
  CreateTopics is (answered by the local controller when it is the active one).

Errors per entry, with an ErrorMessage: filled in here, UNKNOWN_TOPIC_OR_PARTITION (3) for a
topic or partition the node's image does not have, NOT_LEADER_OR_FOLLOWER (6) when this node
does not lead the partition, INVALID_REQUEST (42) when it cannot fill the entry (the topic is not
diskless, no Batch Coordinator runs here, the coordinator does not know the partition, or the
partition holds no record yet so the active chunk cannot be closed, or a coordinator call
failed); REQUEST_TIMED_OUT (7) when no controller answers; otherwise the controller's codes
(:func:`~kafka_rpc.controller.chunks.create_chunks`,
:func:`~kafka_rpc.controller.chunks.alter_chunk_assignments`).
"""

from __future__ import annotations

import dataclasses
import logging
from typing import TYPE_CHECKING, Any

from kafka_rpc.api.registry import handles
from kafka_rpc.broker.forwarding import answer_or_forward
from kafka_rpc.controller.chunks import (
    alter_chunk_assignments_error_response,
    create_chunks_error_response,
)
from kafka_rpc.protocol import codec
from kafka_rpc.protocol.errors import ErrorCode

if TYPE_CHECKING:
    from kafka_rpc.api.services import NodeServices

__all__ = [
    "alter_chunk_assignments",
    "alter_error_response",
    "create_chunks",
    "create_error_response",
    "fill_from_coordinator",
]

log = logging.getLogger("kafka_rpc.handlers.chunks")

_Create = codec.module("CreateChunksResponse")
_TIMEOUT_S = 30.0


#: every entry answered with one code (the code's name as message unless one is given)
create_error_response = create_chunks_error_response
alter_error_response = alter_chunk_assignments_error_response


class _Unfillable(Exception):
    def __init__(self, code: int, message: str):
        super().__init__(message)
        self.code = code
        self.message = message


def _needs_fill(e: Any) -> bool:
    return e.start_offset == -1 or e.prev_stop_offset == -1 or e.start_timestamp == -1


async def fill_from_coordinator(services: NodeServices, entry: Any) -> Any:
    """``entry`` (a CreateChunksTopicPartition) with its -1 offsets / timestamp filled in by this
    node as the partition's leader (see the module docstring); raises ``_Unfillable``."""
    from kafka_rpc.broker.metadata_publisher import is_diskless
    from kafka_rpc.coordinator.api import (
        LATEST_TIMESTAMP,
        FindBatchRequest,
        ListOffsetsRequest,
        TopicIdPartition,
    )

    ctl = services.controller
    image = getattr(ctl, "image", None)
    t = None if image is None else image.topic_by_name(entry.topic_name)
    p = None if t is None else t.partitions.get(entry.partition_id)
    name = f"{entry.topic_name}-{entry.partition_id}"
    if p is None:
        raise _Unfillable(
            ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
            f"Unable to find partition {entry.topic_name}:{entry.partition_id}.",
        )
    assert image is not None and t is not None  # p was found in a topic t of image
    if p.leader != services.node_id:
        raise _Unfillable(
            ErrorCode.NOT_LEADER_OR_FOLLOWER,
            f"Broker {services.node_id} is not the leader of {name} (the leader is {p.leader}); "
            "only the leader fills in the chunk offsets.",
        )
    if not is_diskless(image, t):
        raise _Unfillable(
            ErrorCode.INVALID_REQUEST,
            f"{name} is not a diskless partition: this server cannot fill in its chunk offsets.",
        )
    coordinator = getattr(services, "coordinator", None)
    if coordinator is None:
        raise _Unfillable(
            ErrorCode.INVALID_REQUEST, f"No Batch Coordinator runs on broker {services.node_id}."
        )
    tp = TopicIdPartition(t.topic_id, entry.partition_id)
    [lo] = await coordinator.list_offsets([ListOffsetsRequest(tp, LATEST_TIMESTAMP)])
    if lo.error != 0:
        raise _Unfillable(
            ErrorCode.INVALID_REQUEST,
            f"The Batch Coordinator cannot tell the high watermark of {name} (error {lo.error}).",
        )
    hw = lo.offset
    if hw <= max(p.start_offset, 0):
        raise _Unfillable(
            ErrorCode.INVALID_REQUEST,
            f"The active chunk of {name} holds no record yet (high watermark {hw}): there is "
            "nothing to close.",
        )
    timestamp = entry.start_timestamp
    if timestamp == -1:
        [found] = await coordinator.find_batches([FindBatchRequest(tp, hw - 1, 1)], 1)
        if found.error == 0 and found.batches:
            timestamp = found.batches[0].timestamp
    return dataclasses.replace(
        entry,
        start_offset=hw if entry.start_offset == -1 else entry.start_offset,
        prev_stop_offset=hw - 1 if entry.prev_stop_offset == -1 else entry.prev_stop_offset,
        start_timestamp=timestamp,
    )


async def _broker_create(services: NodeServices, request: Any, version: int) -> Any:
    results: list[Any] = [None] * len(request.topic_partitions)
    forward: list[tuple[int, Any]] = []
    for i, e in enumerate(request.topic_partitions):
        if not _needs_fill(e):
            forward.append((i, e))
            continue
        try:
            try:
                forward.append((i, await fill_from_coordinator(services, e)))
            except _Unfillable:
                raise
            except Exception as exc:  # the coordinator failed: this entry only
                log.exception("CreateChunks: filling %s-%d failed", e.topic_name, e.partition_id)
                raise _Unfillable(
                    ErrorCode.INVALID_REQUEST, f"The Batch Coordinator failed: {exc!r}"
                ) from exc
        except _Unfillable as err:
            results[i] = _Create.CreateChunksTopicPartitionResult(
                topic_name=e.topic_name, partition_id=e.partition_id, error_code=err.code,
                error_message=err.message,
            )  # fmt: skip
    if forward:
        sub = dataclasses.replace(request, topic_partitions=tuple(e for _, e in forward))
        resp = await answer_or_forward(
            services, "broker", sub, version, "create_chunks",
            lambda code: create_error_response(sub, version, code),
            timeout=_TIMEOUT_S,
        )  # fmt: skip
        answers = list(resp.results)
        if len(answers) != len(forward):
            log.error("CreateChunks: %d answers for %d entries", len(answers), len(forward))
            answers = list(
                create_error_response(sub, version, ErrorCode.UNKNOWN_SERVER_ERROR).results
            )
        for (i, _), a in zip(forward, answers, strict=True):
            results[i] = a
    return _Create.CreateChunksResponse(results=tuple(results))


@handles("CreateChunksRequest", error_response=create_error_response)
async def create_chunks(ctx, request):
    services = ctx.services
    if ctx.listener.role == "broker":
        return await _broker_create(services, request, ctx.api_version)
    return await answer_or_forward(
        services, "controller", request, ctx.api_version, "create_chunks",
        lambda code: create_error_response(request, ctx.api_version, code),
    )  # fmt: skip


@handles("AlterChunkAssignmentsRequest", error_response=alter_error_response)
async def alter_chunk_assignments(ctx, request):
    return await answer_or_forward(
        ctx.services, ctx.listener.role, request, ctx.api_version, "alter_chunk_assignments",
        lambda code: alter_error_response(request, ctx.api_version, code),
    )  # fmt: skip
