"""Version fix-ups the driver applies before a Raft message is encoded (sans-io).

The core builds each Vote, BeginQuorumEpoch and EndQuorumEpoch message (request or response) with
BOTH the topic's name and its id set, because it does not know the version the message will be
written at: the connection negotiates that with ApiVersions. Both fields are non-ignorable, so the
codec refuses to write a non-default value the version lacks. :func:`for_version` blanks the one
the version does not carry (name -> ``""``, id -> the zero UUID), per KIP-516 as our specs adopt it:

==================  =====================  ==================
API (key)           TopicName in versions  TopicId in versions
==================  =====================  ==================
Vote (52)           0-2                    3+
BeginQuorumEpoch    0-1                    2+
EndQuorumEpoch      0-1                    2+
==================  =====================  ==================

A FetchRequest carries the fetching replica's id in ``ReplicaId`` up to v14 and in the tagged
``ReplicaState.ReplicaId`` from v15, neither ignorable; the core sets both, so the one the version
lacks is reset to its default (``ReplicaId`` -1, an empty ``ReplicaState``). Its topic fields
(``Topic`` 0-12, ``TopicId`` 13+) are ignorable and need nothing. An AddRaftVoter (auto-join sends
``AckWhenCommitted`` false, a v1 field that is not ignorable) written at v0 gets the default
(true: a v0 leader answers after the commit). Any other message (FetchSnapshot and
DescribeQuorum name topics only) is returned unchanged.
"""

from __future__ import annotations

import dataclasses
from typing import Any
from uuid import UUID

__all__ = ["TOPIC_ID_FROM_VERSION", "for_version"]

#: api key -> first version whose TopicData carries TopicId instead of TopicName.
TOPIC_ID_FROM_VERSION: dict[int, int] = {52: 3, 53: 2, 54: 2}
#: FetchRequest: the first version with ``ReplicaState`` (and without ``ReplicaId``).
FETCH_REPLICA_STATE_FROM_VERSION = 15

_ZERO = UUID(int=0)
_FETCH = 1
_ADD_RAFT_VOTER = 80


def _fetch_for_version(version: int, message: Any) -> Any:
    fields = getattr(type(message), "__dataclass_fields__", {})
    if "replica_state" not in fields or "replica_id" not in fields:
        return message  # a FetchResponse
    if version >= FETCH_REPLICA_STATE_FROM_VERSION:
        default = fields["replica_id"].default
        if message.replica_id == default:
            return message
        return dataclasses.replace(message, replica_id=default)
    blank = type(message.replica_state)()
    if message.replica_state == blank:
        return message
    return dataclasses.replace(message, replica_state=blank)


def for_version(api_key: int, version: int, message: Any) -> Any:
    """``message`` holding only the fields ``version`` has where the core set two alternatives
    (the other one reset to its default); the same object when nothing needs to change."""
    if api_key == _FETCH:
        return _fetch_for_version(version, message)
    if api_key == _ADD_RAFT_VOTER:
        if version < 1 and getattr(message, "ack_when_committed", True) is False:
            return dataclasses.replace(message, ack_when_committed=True)
        return message
    first_id = TOPIC_ID_FROM_VERSION.get(api_key)
    if first_id is None:
        return message
    topics = getattr(message, "topics", None)
    if not topics:
        return message
    blank: dict[str, Any]
    if version >= first_id:
        blank = {"topic_name": ""}
    else:
        blank = {"topic_id": _ZERO}
    (field,) = blank
    if all(getattr(t, field) == blank[field] for t in topics):
        return message
    return dataclasses.replace(
        message, topics=tuple(dataclasses.replace(t, **blank) for t in topics)
    )
