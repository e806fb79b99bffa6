"""Delegation tokens in the metadata log (Kafka's ``DelegationTokenControlManager`` and
``DelegationTokenImage``).

We do not issue tokens (CreateDelegationToken is not served), but every node replays the records a
Kafka controller wrote, keeps the tokens in its image and writes them into its snapshots, so a
snapshot of ours carries them on to Kafka voters.

* Replay (:data:`REPLAY`): DelegationTokenRecord sets the token (a later record replaces it),
  RemoveDelegationTokenRecord drops it (an unknown id is no error, as Kafka's
  ``DelegationTokenDelta``).
* Snapshot part (:func:`delegation_token_records`), as ``DelegationTokenImage.write``.
"""

from __future__ import annotations

from typing import Any

from kafka_rpc.controller.image import DelegationToken, MetadataImage, evolve
from kafka_rpc.protocol import codec

__all__ = ["REPLAY", "SNAPSHOT", "delegation_token_records"]


def _token(img: MetadataImage, r: Any, offset: int) -> MetadataImage:
    tok = DelegationToken(r.token_id, r.owner, r.requester, tuple(r.renewers),
                          r.issue_timestamp, r.max_timestamp, r.expiration_timestamp)  # fmt: skip
    return evolve(img, delegation_tokens=img.delegation_tokens.set(r.token_id, tok))


def _remove(img: MetadataImage, r: Any, offset: int) -> MetadataImage:
    return evolve(img, delegation_tokens=img.delegation_tokens.discard(r.token_id))


REPLAY = {"DelegationTokenRecord": _token, "RemoveDelegationTokenRecord": _remove}


def delegation_token_records(image: MetadataImage) -> list:
    """The DelegationTokenRecords that rebuild ``image.delegation_tokens`` (by token id)."""
    rec = codec.message_class("DelegationTokenRecord")
    return [
        rec(owner=t.owner, requester=t.requester, renewers=t.renewers,
            issue_timestamp=t.issue_timestamp, max_timestamp=t.max_timestamp,
            expiration_timestamp=t.expiration_timestamp, token_id=t.token_id)
        for _, t in sorted(image.delegation_tokens.items())
    ]  # fmt: skip


SNAPSHOT = (delegation_token_records,)
"""This manager's part of a snapshot (``kafka_rpc.controller.snapshot``), in order."""
