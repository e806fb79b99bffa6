"""Which Raft replica a Raft RPC on the controller listener is for, when a node runs more than
the metadata quorum: each ``__diskless-metadata`` partition's replica is registered here under
the partition's topic id and its topic name (Raft RPCs name one or the other, by version)."""

from __future__ import annotations

import uuid
from typing import Any

__all__ = ["RaftPartitions"]


class RaftPartitions:
    """Topic id or topic name, partition -> the partition's ``RaftDriver``."""

    def __init__(self) -> None:
        self._drivers: dict[tuple[uuid.UUID | str, int], Any] = {}

    def register(self, topic_id: uuid.UUID, topic_name: str, partition: int, driver: Any) -> None:
        """Route the Raft RPCs naming ``topic_id`` or ``topic_name`` / ``partition`` to
        ``driver`` (a :class:`~kafka_rpc.raft.driver.RaftDriver`)."""
        self._drivers[(topic_id, partition)] = driver
        self._drivers[(topic_name, partition)] = driver

    def unregister(self, topic_id: uuid.UUID, topic_name: str, partition: int) -> None:
        """Stop routing a partition registered by :meth:`register` (no-op if absent)."""
        self._drivers.pop((topic_id, partition), None)
        self._drivers.pop((topic_name, partition), None)

    def get(self, key: tuple[uuid.UUID | str, int]) -> Any:
        """The driver of ``(topic id or name, partition)``, None if none is registered."""
        return self._drivers.get(key)

    def __bool__(self) -> bool:
        return bool(self._drivers)
