"""Metadata transactions (KIP-868): BeginTransactionRecord, EndTransactionRecord and
AbortTransactionRecord, as Kafka's ``OffsetControlManager`` (controller) and
``MetadataBatchLoader`` (image) handle them (the module is named after the first).

The records between a Begin and its End take effect together at the End; an Abort drops them
(the image returns to where it was before the Begin). Only one transaction is open at a time: a
Begin inside one, or an End / Abort outside one, is a ReplayError (Kafka's ``RuntimeException``,
fatal there). They never appear in a snapshot (:func:`~kafka_rpc.controller.snapshot.load`
refuses them), and no snapshot is taken while one is open (the state machine's ``in_transaction``
is true: :attr:`~kafka_rpc.controller.quorum_controller.QuorumController.in_transaction`), as
Kafka's snapshots follow the published image, which never stops inside a transaction.

* :class:`TransactionState` keeps the committed side: the open transaction's start offset and the
  image before it (:meth:`TransactionState.mark` applies one marker record to a replay in
  progress).
* :data:`REPLAY`: the markers leave an image unchanged when replayed one by one (the active
  controller's uncommitted image, where Kafka's controller also applies a transaction's records
  as it writes them and only an Abort reverts).
* Writing them: the first active controller of an empty log wraps the bootstrap records in one,
  and a controller that finds the log ending inside one aborts it
  (:func:`~kafka_rpc.controller.features.activation_records`).
"""

from __future__ import annotations

from typing import Any

from kafka_rpc.controller.base import ReplayError
from kafka_rpc.controller.image import ImageDraft, MetadataImage, evolve

__all__ = ["MARKERS", "REPLAY", "SNAPSHOT", "TransactionState"]

MARKERS = frozenset({"BeginTransactionRecord", "EndTransactionRecord", "AbortTransactionRecord"})
"""The transaction marker record types."""


def _marker(img: MetadataImage, r: Any, offset: int) -> MetadataImage:
    """A marker replayed one record at a time: no change to the image (see the module
    docstring)."""
    return img


REPLAY = dict.fromkeys(MARKERS, _marker)

SNAPSHOT = ()
"""Nothing: a snapshot never holds a transaction marker (``snapshot.load`` refuses one)."""


class TransactionState:
    """The committed side of metadata transactions (Kafka's ``OffsetControlManager.
    transactionStartOffset`` and the ``MetadataBatchLoader`` states).

    ``start`` is the offset of the open transaction's BeginTransactionRecord (-1: none);
    ``base`` the image as of the offset before it (what readers see while it is open)."""

    __slots__ = ("base", "start")

    def __init__(self) -> None:
        self.start = -1
        self.base: MetadataImage | None = None

    @property
    def open(self) -> bool:
        return self.start != -1

    def reset(self) -> None:
        """Forget any open transaction (a snapshot was loaded: Kafka's ``endLoadSnapshot``)."""
        self.start = -1
        self.base = None

    def mark(self, draft: ImageDraft, record: Any, offset: int) -> ImageDraft:
        """Apply marker ``record`` at ``offset`` to ``draft`` (the committed replay in
        progress) and return the draft to go on with: a Begin remembers the image so far (as of
        ``offset - 1``); an End forgets it (the records already in the draft stay); an Abort
        returns a fresh draft of that image. ReplayError for a marker out of place (the draft is
        unchanged)."""
        name = type(record).__spec_name__
        if name == "BeginTransactionRecord":
            if self.open:
                raise ReplayError(f"Can't replay a BeginTransactionRecord at {offset} because "
                                  f"the transaction at {self.start} was never closed.")  # fmt: skip
            self.base = evolve(draft.freeze(), last_offset=offset - 1)
            self.start = offset
            return ImageDraft(self.base)
        if not self.open:
            raise ReplayError(f"Can't replay an {name} at {offset} because there is no open "
                              "transaction.")  # fmt: skip
        if name == "AbortTransactionRecord":
            base = self.base
            self.reset()
            assert base is not None
            return ImageDraft(base)
        self.reset()  # EndTransactionRecord
        return draft
