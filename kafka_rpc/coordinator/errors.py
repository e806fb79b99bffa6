"""The Batch Coordinators' errors: exception -> Kafka error code for a failed coordinator call,
the one rule the wire handlers (``kafka_rpc.handlers.diskless``) and the routing coordinator
(``kafka_rpc.coordinator.assigned``, a part of a split call) both answer by, and the replicated
coordinator's NOT_COORDINATOR."""

from __future__ import annotations

import sqlite3

from .api import Errors

__all__ = ["NOT_COORDINATOR", "REQUEST_TIMED_OUT", "NotCoordinatorError", "error_code_of"]

#: Kafka ``Errors.NOT_COORDINATOR``.
NOT_COORDINATOR = 16
#: Kafka ``Errors.REQUEST_TIMED_OUT`` (retriable).
REQUEST_TIMED_OUT = 7


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
    * REQUEST_TIMED_OUT (7, retriable) for a ``TimeoutError`` (``asyncio.TimeoutError`` is
      one): the replicated coordinator's write not committed and applied within
      ``write_timeout_ms``, as Kafka answers a request whose replication timed out. Checked
      before the storage rule: ``TimeoutError`` is an ``OSError`` subclass;
    * KAFKA_STORAGE_ERROR (56, retriable) for a storage failure: ``sqlite3.Error`` or any
      other ``OSError`` (PostgreSQL's ``CoordinatorUnavailableError`` is one);
    * UNKNOWN_SERVER_ERROR (-1) for anything else (a probable bug).

    Never raises; ``asyncio.CancelledError`` is the caller's to let through, not to map."""
    own = getattr(exc, "error_code", None)
    if isinstance(own, int) and own > 0:
        return int(own)
    if isinstance(exc, TimeoutError):
        return REQUEST_TIMED_OUT
    if isinstance(exc, sqlite3.Error | OSError):
        return int(Errors.KAFKA_STORAGE_ERROR)
    return int(Errors.UNKNOWN_SERVER_ERROR)
