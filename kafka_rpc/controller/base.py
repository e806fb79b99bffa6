"""What every control manager shares (the leaf of ``kafka_rpc.controller``: it imports only the
image and the protocol).

The managers mirror Kafka's ``*ControlManager`` classes that ``QuorumController`` drives: each
module owns its commands, its records' replay rules and its part of the snapshot.

* A **command** is a pure function ``(image, request, ctx) -> ControllerResult(records,
  response)``, as a ``*ControlManager`` method run in a write event: it reads the image,
  validates, and returns the records to append (one atomic batch) and the response to send
  **once those records are committed**. It changes nothing; the caller appends the records,
  replays them into its (uncommitted) image at once so the next command sees them
  (ProducerIdControlManager depends on this), and answers after commit (as Kafka's QuorumController,
  ``handleCommit``). Every response is a generated response class; errors carry Kafka's codes and,
  where the response has an ErrorMessage field, a message. ``ctx.next_offset`` is the offset
  the first returned record will get: a RegisterBrokerRecord is always first in its batch, so
  the broker epoch it carries is its own offset (Kafka passes ``offsetControl.nextWriteOffset()``).
* A **replay rule** is ``(image, record, offset) -> image`` (the ``replay`` method of the Kafka
  class named in its docstring); each manager exports its rules as ``REPLAY`` (record type name
  -> rule) and :mod:`kafka_rpc.controller.replay` dispatches over all of them. A record that
  contradicts the image raises :class:`ReplayError`.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from kafka_rpc.controller.image import MetadataImage, evolve
from kafka_rpc.protocol.errors import ErrorCode

__all__ = [
    "ERROR_MESSAGES",
    "NO_LEADER_CHANGE",
    "ApiError",
    "Batch",
    "ControllerContext",
    "ControllerResult",
    "ReplayError",
    "ReplayRule",
    "apply_record",
]

NO_LEADER_CHANGE = -2
"""PartitionChangeRecord.Leader meaning "unchanged"."""

ERROR_MESSAGES = {
    ErrorCode.UNKNOWN_TOPIC_OR_PARTITION: "This server does not host this topic-partition.",
    ErrorCode.UNKNOWN_TOPIC_ID: "This server does not host this topic ID.",
}
"""Kafka's default message of an error code (``Errors.X.message()``), where a command uses it."""


class ReplayError(Exception):
    """A record contradicts the image (e.g. a change for an unknown broker epoch, producer ids
    going down). Kafka treats this as a fatal fault: the log and this node's state disagree."""


class ApiError(Exception):
    """A command's per-entry rejection: Kafka's ``ApiException`` with its error ``code`` and
    ``message`` (the entry's ErrorCode / ErrorMessage); the entry writes no records."""

    def __init__(self, code: int, message: str | None):
        super().__init__(message)
        self.code = code
        self.message = message


@dataclass(frozen=True)
class ControllerContext:
    """What a command may know besides the image.

    - ``now_ms``: wall clock (ms); ``next_offset``: log offset of the first record returned;
    - ``cluster_id``: this cluster's id (BrokerRegistration checks it);
    - ``rng``: randomness for topic ids and replica placement (seed it for reproducible tests);
    - ``default_replication_factor`` / ``num_partitions``: CreateTopics defaults for -1
      (Kafka's ``default.replication.factor`` / ``num.partitions``);
    - ``last_heartbeat_ms``: broker id -> ms of its last registration or heartbeat, as the active
      controller's ``BrokerHeartbeatManager`` tracks it (not in the log); ``session_timeout_ms``
      is ``broker.session.timeout.ms``;
    - ``metadata_offsets``: broker id -> the CurrentMetadataOffset of its last heartbeat;
      ``controlled_shutdown_offsets``: broker id -> the end offset of the batch that put it in
      controlled shutdown (both ``BrokerHeartbeatManager`` state, in memory only);
    - ``controller_ids``: the voters' node ids, from the Raft replica's voter set (a BROKER
      config resource may name one; UpdateFeatures needs each to have registered);
    - ``controller_id``: this controller's node id (its dynamic broker configs count for
      topic config defaults, ``ConfigurationControlManager.currentControllerConfig``);
    - ``unclean_leader_election_enable``: the controller's static
      ``unclean.leader.election.enable`` (the last fallback of a topic's config);
    - ``kraft_version``: the Raft layer's ``kraft.version`` (the metadata replica's, through
      the controller's ``KRaftVersionAccessor``; 0 for static voters), which BrokerRegistration
      checks as Kafka's controller does.
    """

    now_ms: int
    next_offset: int
    cluster_id: str
    rng: random.Random = field(default_factory=random.Random)
    default_replication_factor: int = 1
    num_partitions: int = 1
    last_heartbeat_ms: Mapping[int, int] = field(default_factory=dict)
    session_timeout_ms: int = 9000
    controller_ids: frozenset[int] = frozenset()
    metadata_offsets: Mapping[int, int] = field(default_factory=dict)
    controlled_shutdown_offsets: Mapping[int, int] = field(default_factory=dict)
    controller_id: int = -1
    unclean_leader_election_enable: bool = False
    kraft_version: int = 0


@dataclass(frozen=True)
class ControllerResult:
    """``records``: decoded metadata records to append as one atomic batch, in order (may be
    empty); ``response``: the generated response object (or, for internal operations, a plain
    value)."""

    records: list
    response: Any


ReplayRule = Callable[[MetadataImage, Any, int], MetadataImage]
"""``(image, record, offset) -> image``: one record type's replay."""


def apply_record(
    rules: Mapping[str, ReplayRule],
    image: MetadataImage,
    record: Any,
    offset: int,
    epoch: int | None = None,
) -> MetadataImage:
    """The image after replaying ``record`` at log ``offset`` (in leader ``epoch``, or the
    image's current epoch when None) with the rule ``rules`` has for its type; the image's
    provenance moves to ``offset``. Raises ReplayError, or TypeError for a type ``rules`` lacks."""
    rule = rules.get(type(record).__spec_name__)
    if rule is None:
        raise TypeError(f"no replay rule for {type(record).__spec_name__}")
    image = rule(image, record, offset)
    return evolve(
        image, last_offset=offset, last_epoch=image.last_epoch if epoch is None else epoch
    )


class Batch:
    """Records under construction, replayed on a scratch image as they are added so later
    checks in the same command see earlier records (what the batch will do once applied).
    ``rules`` must cover every record type the command adds (the manager's own ``REPLAY`` plus
    those of the managers whose records it writes)."""

    def __init__(self, image: MetadataImage, next_offset: int, rules: Mapping[str, ReplayRule]):
        self.image = image
        self.next_offset = next_offset
        self.rules = rules
        self.records: list = []

    def add(self, record: Any) -> None:
        self.image = apply_record(
            self.rules, self.image, record, self.next_offset + len(self.records)
        )
        self.records.append(record)
