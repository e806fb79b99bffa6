"""The errors of :mod:`kafka_rpc.storage`."""

from __future__ import annotations

from kafka_rpc.config import ConfigError

__all__ = ["StorageError", "StorageFormattedError"]


class StorageError(ConfigError):
    """A data directory that cannot be used: a bad ``meta.properties`` or ``partition.metadata``,
    one that does not match the configuration (cluster id, node id, topic id), a directory lock
    another process holds. A :class:`~kafka_rpc.config.ConfigError`, so that start-up stops with
    its message as for a bad setting (``kafka-rpc serve`` exits 2), as Kafka's
    ``KafkaRaftServer.initializeLogDirs`` fails the start."""


class StorageFormattedError(StorageError):
    """``kafka-rpc storage format`` found a directory already formatted (Kafka's
    ``Formatter``: "Log directory ... is already formatted"; the CLI exits 1)."""
