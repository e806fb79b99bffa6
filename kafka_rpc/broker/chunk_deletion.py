"""Automatic chunk deletion (KIP-1114 "Automatic chunk deletion").

The KIP's ReplicaManager "should detect the case that full chunk data was deleted due to TTL,
partition size limit ..., and send a AlterChunkAssignmentsRequest to controller to remove current
broker from replica list", and "the controller should detect that all of replicas in a given
chunk was removed and then remove the chunk". On this server a diskless partition's data lives
in the Batch Coordinator, so the node whose coordinator call moved a partition's log start offset
(the retention task's ``enforce_retention``, a DeleteDisklessRecords request's ``delete_records``)
is the one that sees it: every inactive chunk whose end offset (inclusive) is below the new log
start offset holds no readable record any more, and is removed with one AlterChunkAssignments
entry with no replicas (and the chunk epoch the node's image has, so a concurrent reassignment
is not overwritten: that answers INVALID_UPDATE_VERSION and the next move of the log start offset
tries again). The request goes to the active controller as the broker listener sends it
(:func:`~kafka_rpc.broker.channel.answer_or_forward`).

Failures are logged, never raised into the caller: the data path does not depend on the
metadata change.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterable
from typing import TYPE_CHECKING
from uuid import UUID

from kafka_rpc.controller.chunks import alter_chunk_assignments_error_response
from kafka_rpc.controller.image import MetadataImage
from kafka_rpc.protocol import codec

if TYPE_CHECKING:
    from kafka_rpc.broker.services import BrokerServices

__all__ = ["expired_chunks", "remove_expired_chunks", "schedule_removal"]

log = logging.getLogger("kafka_rpc.broker.chunk_deletion")

_tasks: set[asyncio.Future] = set()


def expired_chunks(
    image: MetadataImage, moved: Iterable[tuple[UUID, int, int]]
) -> list[tuple[str, int, int, int]]:
    """``(topic name, partition, chunk start offset, chunk epoch)`` of every inactive chunk
    whose end offset is below the log start offset ``lso`` (exclusive bound: offsets < lso are
    gone) of its ``(topic id, partition, lso)`` in ``moved``; topics the image does not have and
    negative offsets (errors) are skipped."""
    out = []
    for tid, partition, lso in moved:
        t = image.topics.get(tid)
        if t is None or lso <= 0:
            continue
        for c in t.partition_chunks(partition):
            if c.end_offset < lso:
                out.append((t.name, partition, c.start_offset, c.epoch))
    return out


async def remove_expired_chunks(
    services: BrokerServices, moved: Iterable[tuple[UUID, int, int]]
) -> int:
    """Send the removals for :func:`expired_chunks` of ``services``'s committed image; returns
    how many the controller accepted."""
    ctl = services.controller
    if ctl is None:
        return 0
    expired = expired_chunks(ctl.image, moved)
    return await _send_removals(services, expired) if expired else 0


async def _send_removals(services: BrokerServices, expired: list[tuple[str, int, int, int]]) -> int:
    """One AlterChunkAssignments request with no replicas for each ``expired`` chunk, sent as
    the broker listener sends it; returns how many the controller accepted."""
    from kafka_rpc.broker.forwarding import answer_or_forward

    mod = codec.module("AlterChunkAssignmentsRequest")
    req = mod.MESSAGE(
        chunks=tuple(
            mod.AlterChunkAssignment(
                topic_name=name, partition_id=p, start_offset=start, chunk_epoch=epoch,
                broker_ids=(),
            )
            for name, p, start, epoch in expired
        )
    )  # fmt: skip
    resp = await answer_or_forward(
        services, "broker", req, 0, "alter_chunk_assignments",
        lambda code: alter_chunk_assignments_error_response(req, 0, code),
    )  # fmt: skip
    done = 0
    for r in resp.results:
        if r.error_code == 0:
            done += 1
            log.info("chunk %s-%d@%d removed: the log start offset passed its end",
                     r.topic_name, r.partition_id, r.start_offset)  # fmt: skip
        else:
            log.info("chunk %s-%d@%d not removed: error %d %s", r.topic_name, r.partition_id,
                     r.start_offset, r.error_code, r.error_message)  # fmt: skip
    return done


def schedule_removal(services: BrokerServices, moved: Iterable[tuple[UUID, int, int]]) -> None:
    """:func:`remove_expired_chunks` in the background (a request handler does not wait for the
    metadata change); does nothing when no chunk expired."""
    ctl = services.controller
    expired = [] if ctl is None else expired_chunks(ctl.image, moved)
    if not expired:
        return

    async def run() -> None:
        try:
            await _send_removals(services, expired)
        except Exception:
            log.exception("automatic chunk deletion failed")

    task = asyncio.ensure_future(run())
    _tasks.add(task)
    task.add_done_callback(_tasks.discard)
