"""The Batch Coordinators' errors: exception -> Kafka error code for a failed coordinator call,
the one rule the wire handlers (``kafka_rpc.handlers.diskless``) and the routing coordinator
(``kafka_rpc.coordinator.assigned``, a part of a split call) both answer by, and the replicated
coordinator's NOT_COORDINATOR."""

from __future__ import annotations

import sqlite3

from .api import Errors

__all__ = ["NOT_COORDINATOR", "NotCoordinatorError", "error_code_of"]

#: Kafka ``Errors.NOT_COORDINATOR``.
NOT_COORDINATOR = 16


class NotCoordinatorError(Exception):
    """This replica is not (or stopped being) the leader of its ``__diskless-metadata``
    partition: Kafka's NOT_COORDINATOR (16)."""

    error_code = NOT_COORDINATOR


def error_code_of(exc: BaseException) -> int:
    """The Kafka error code (``org.apache.kafka.common.protocol.Errors`` numbering) that the
    entries of a coordinator call which raised ``exc`` answer:

    * the exception's own code when it names one (an ``int`` attribute ``error_code`` > 0: the
      replicated coordinator's ``NotCoordinatorError``, 16, or ``CoordinatorNotAvailableError``,
      15);
    * KAFKA_STORAGE_ERROR (56, retriable) for a storage failure: ``sqlite3.Error`` or
      ``OSError`` (PostgreSQL's ``CoordinatorUnavailableError`` is one);
    * UNKNOWN_SERVER_ERROR (-1) for anything else (a probable bug).

    Never raises; ``asyncio.CancelledError`` is the caller's to let through, not to map."""
    own = getattr(exc, "error_code", None)
    if isinstance(own, int) and own > 0:
        return int(own)
    if isinstance(exc, sqlite3.Error | OSError):
        return int(Errors.KAFKA_STORAGE_ERROR)
    return int(Errors.UNKNOWN_SERVER_ERROR)
