"""Metadata transactions (KIP-868), as Kafka's ``OffsetControlManager`` replays them.

A ``BeginTransactionRecord`` (23) opens a transaction, an ``EndTransactionRecord`` (24) closes
it, its records standing; an ``AbortTransactionRecord`` (25) reverts the image to what it was
just before the transaction began. Kafka's active controller wraps the bootstrap records of an
empty log in one (``ActivationRecordsGenerator.recordsForEmptyLog``, from metadata.version
3.6-IV1), and a new active controller whose log ends inside a transaction first writes an
``AbortTransactionRecord`` with the reason ``"Controller failover"``
(``recordsForNonEmptyLog``). No snapshot is taken inside a transaction (Kafka snapshots at the
last stable offset), and none holds these records.

The image itself knows nothing of transactions: the state is an :class:`OpenTransaction` that
the replaying code (``QuorumController``) keeps beside its image, because an abort needs the
image from before the transaction. :data:`REPLAY`'s rules only move an image's offset; they
serve code that replays without that state (they never revert anything).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from kafka_rpc.controller.base import ReplayError
from kafka_rpc.controller.image import MetadataImage

__all__ = [
    "ABORT",
    "BEGIN",
    "END",
    "FAILOVER_REASON",
    "REPLAY",
    "OpenTransaction",
    "abort",
    "begin",
    "end",
]

BEGIN = "BeginTransactionRecord"
END = "EndTransactionRecord"
ABORT = "AbortTransactionRecord"
#: the reason Kafka's new active controller gives when it aborts a transaction it found open
FAILOVER_REASON = "Controller failover"


@dataclass(frozen=True)
class OpenTransaction:
    """A transaction begun at ``start_offset`` (the BeginTransactionRecord's offset), not yet
    ended; ``before`` is the image as of ``start_offset - 1``."""

    start_offset: int
    before: MetadataImage


def begin(txn: OpenTransaction | None, before: MetadataImage, offset: int) -> OpenTransaction:
    """The transaction a BeginTransactionRecord at ``offset`` opens over image ``before``.
    ReplayError when ``txn`` is still open (Kafka: "the transaction at ... was never closed")."""
    if txn is not None:
        raise ReplayError(f"BeginTransactionRecord at {offset}: the transaction begun at "
                          f"{txn.start_offset} was never closed")  # fmt: skip
    return OpenTransaction(offset, before)


def end(txn: OpenTransaction | None, offset: int) -> None:
    """Check an EndTransactionRecord at ``offset``: ReplayError when no transaction is open."""
    if txn is None:
        raise ReplayError(f"EndTransactionRecord at {offset}: no transaction is open")


def abort(txn: OpenTransaction | None, offset: int) -> MetadataImage:
    """The image an AbortTransactionRecord at ``offset`` reverts to (the one from before the
    transaction began); ReplayError when no transaction is open."""
    if txn is None:
        raise ReplayError(f"AbortTransactionRecord at {offset}: no transaction is open")
    return txn.before


def _offset_only(img: Any, r: Any, offset: int) -> Any:
    return img


REPLAY = {BEGIN: _offset_only, END: _offset_only, ABORT: _offset_only}
"""Record type name -> rule for replays that keep no transaction state: the offset moves."""
