"""The routing half of the diskless wire handlers (``kafka_rpc.handlers.diskless``): which
entries of a request this node's Batch Coordinator answers, what the others answer, and how one
coordinator call answers a request's entries.

* **Owner routing** (KIP-1164 with several Batch Coordinators; the decision is
  :mod:`kafka_rpc.coordinator.ownership`'s): :func:`owner_check` asks it for the node's owner
  check of one kind of call (reads or writes); an entry it rejects answers
  :meth:`~kafka_rpc.coordinator.ownership.Owns.refusal` -- NOT_COORDINATOR (16), or
  COORDINATOR_LOAD_IN_PROGRESS (14, retriable) for a coordinator partition this node is still
  loading -- with the fields of a rejected entry, and the other entries are served
  (:func:`owned_only`). A topic-level write (InitDisklessTopics, DeleteDisklessTopics) belongs
  to the owner of the topic's partition 0 (:func:`topic_owned`).
* **Per-entry fan-out**: one coordinator call answers a list of entries, one answer per entry
  in order (:func:`checked` raises otherwise, a bug); a call that raises fails only its own
  entries, with the code :func:`failure_code` maps
  (:func:`kafka_rpc.coordinator.errors.error_code_of`) and logs (:func:`per_entry`).
  ``asyncio.CancelledError`` is never caught.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Sequence
from typing import Any

from kafka_rpc.coordinator import ownership
from kafka_rpc.coordinator.api import ZERO_UUID
from kafka_rpc.coordinator.errors import error_code_of
from kafka_rpc.coordinator.ownership import Owns
from kafka_rpc.protocol.errors import ErrorCode

__all__ = [
    "checked",
    "failure_code",
    "owned_only",
    "owner_check",
    "per_entry",
    "refusal",
    "topic_owned",
]

#: the diskless handlers' logger (their failure lines keep its name)
logger = logging.getLogger("kafka_rpc.handlers.diskless")

_NOT_COORDINATOR = int(ErrorCode.NOT_COORDINATOR)
_STORAGE_ERROR = int(ErrorCode.KAFKA_STORAGE_ERROR)
_UNKNOWN_SERVER_ERROR = int(ErrorCode.UNKNOWN_SERVER_ERROR)


def owner_check(server: Any, write: bool) -> Owns | None:
    """KIP-1164 with several Batch Coordinators: the node's owner check for one kind of call
    (:func:`kafka_rpc.coordinator.ownership.owner_check`: the mapping of ``server``'s committed
    metadata image, ``server.controller.image``, against
    ``server.batch_coordinator_partitions(write)``, the coordinator partitions this node serves
    for writes or reads, and ``server.batch_coordinator_loading(write)``, those it will serve
    once loaded; see :class:`~kafka_rpc.coordinator.ownership.Owns`). None when no check
    applies (no metadata image or no such method on the server, or every partition is
    coordinator 0's and this node serves 0), so every entry goes to the local coordinator."""
    controller = getattr(server, "controller", None)
    served_fn = getattr(server, "batch_coordinator_partitions", None)
    if controller is None or served_fn is None:
        return None
    loading_fn = getattr(server, "batch_coordinator_loading", None)
    return ownership.owner_check(
        controller.image, served_fn(write),
        (lambda: loading_fn(write)) if loading_fn is not None else frozenset,
    )  # fmt: skip


def refusal(owns: Owns | None, topic_id: uuid.UUID, partition: int) -> int:
    """The error code of an entry ``owns`` rejects (:meth:`Owns.refusal`)."""
    return owns.refusal(topic_id, partition) if owns is not None else _NOT_COORDINATOR


async def owned_only(reqs: list[Any], owns: Owns | None, call: Any, error_entry: Any) -> Any:
    """``call`` on the requests whose ``topic_id_partition`` ``owns`` accepts; the others
    answer ``error_entry(owns.refusal(...), request)`` (NOT_COORDINATOR or
    COORDINATOR_LOAD_IN_PROGRESS), in request order."""
    if owns is None:
        return await call(reqs)
    mine = [r for r in reqs if owns(r.topic_id_partition.topic_id, r.topic_id_partition.partition)]
    if len(mine) == len(reqs):
        return await call(reqs)
    it = iter(checked(await call(mine), len(mine), "coordinator") if mine else ())
    keep = {id(r) for r in mine}
    return [
        next(it) if id(r) in keep
        else error_entry(owns.refusal(r.topic_id_partition.topic_id,
                                      r.topic_id_partition.partition), r)
        for r in reqs
    ]  # fmt: skip


def failure_code(exc: Exception, api: str, broker_id: int | None) -> int:
    """The Kafka error code of an exception raised by a coordinator call
    (:func:`kafka_rpc.coordinator.errors.error_code_of`), logged: an exception that names its
    own code and a timeout (REQUEST_TIMED_OUT) at INFO, a storage failure
    (KAFKA_STORAGE_ERROR) and anything else (UNKNOWN_SERVER_ERROR) at ERROR with the
    traceback. ``api`` and ``broker_id`` (the caller,
    when known) are only for the log line."""
    code = error_code_of(exc)
    if code == _UNKNOWN_SERVER_ERROR:
        logger.error("%s (broker %s): unexpected coordinator failure", api, broker_id, exc_info=exc)
    elif code == _STORAGE_ERROR and getattr(exc, "error_code", None) != code:
        logger.error("%s (broker %s): storage failure: %r", api, broker_id, exc, exc_info=exc)
    else:
        logger.info("%s (broker %s): %s: %s", api, broker_id, type(exc).__name__, exc)
    return code


def checked(results: Sequence[Any], expected: int, api: str) -> Sequence[Any]:
    """A coordinator must answer one result per request; anything else is a bug (raised)."""
    if len(results) != expected:
        raise RuntimeError(f"{api}: coordinator answered {len(results)} results for {expected}")
    return results


async def per_entry(
    api: str,
    broker_id: int | None,
    reqs: list[Any],
    call: Any,
    error_entry: Any,
) -> Sequence[Any]:
    """One coordinator call answering ``reqs`` entry for entry; if it raises, every entry gets
    ``error_entry(code, request)`` with the code ``failure_code`` maps (and logs)."""
    if not reqs:
        return []
    try:
        out = await call(reqs)
    except Exception as exc:  # noqa: BLE001 - mapped and logged by failure_code
        code = failure_code(exc, api, broker_id)
        out = [error_entry(code, r) for r in reqs]
    return checked(out, len(reqs), api)


def topic_owned(owns: Owns | None, topic_id: uuid.UUID) -> bool:
    """A topic-level write (InitDisklessTopics, DeleteDisklessTopics) belongs to the Batch
    Coordinator that owns the topic's partition 0 (the one ``FindCoordinator write:<id>:0``
    names); a node that does not lead it is a read-only coordinator for this call. The zero id
    is everyone's (answered UNKNOWN_TOPIC_OR_PARTITION)."""
    return owns is None or topic_id == ZERO_UUID or owns.owns_topic(topic_id)
