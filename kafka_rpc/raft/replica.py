"""Opening one Raft replica of a partition log: the one place that puts a directory's
:class:`~kafka_rpc.raft.file_log.FileLog`, its ``quorum-state`` file
(:class:`~kafka_rpc.raft.quorum_state.FileQuorumStateStore`), a
:class:`~kafka_rpc.raft.core.RaftCore` and its :class:`~kafka_rpc.raft.driver.RaftDriver`
together (Kafka's ``KafkaRaftManager.buildRaftClient``: the log, the quorum state store and the
client of one topic-partition). Used by the metadata quorum (``__cluster_metadata-0``) and by
every ``__diskless-metadata`` partition's Batch Coordinator replica."""

from __future__ import annotations

import random
import time
from pathlib import Path
from typing import Any, NamedTuple

from kafka_rpc.raft.core import RaftConfig, RaftCore
from kafka_rpc.raft.driver import RaftDriver, monotonic_ms
from kafka_rpc.raft.file_log import FileLog
from kafka_rpc.raft.quorum_state import DEFAULT_FILE_NAME, FileQuorumStateStore

__all__ = ["RaftReplica", "open_raft_replica"]


class RaftReplica(NamedTuple):
    """An opened Raft replica: its log, its core and its (not yet started) driver."""

    log: FileLog
    core: RaftCore
    driver: RaftDriver


def open_raft_replica(
    directory: Path,
    config: RaftConfig,
    state_machine: Any,
    *,
    segment_bytes: int | None = None,
    **driver_options: Any,
) -> RaftReplica:
    """Open the Raft replica of the partition log in ``directory`` (which must exist).

    * the log: ``FileLog(directory)`` (``segment_bytes``: its segment size in bytes, the
      FileLog default when None), recovered as the FileLog recovers it;
    * the quorum state: ``<directory>/quorum-state``;
    * the core: ``RaftCore(config, log, quorum state, state_machine, random.Random(), now)``
      with the driver's monotonic clock (ms) and ``wall_offset_ms`` the wall clock minus it;
      ``state_machine`` is a :class:`~kafka_rpc.raft.api.StateMachine`;
    * the driver: ``RaftDriver(core, log, config.node_id, **driver_options)``
      (``request_timeout_ms``, ``shutdown_timeout_ms``, ``retry_backoff_ms``, ``client_id``,
      ``client_security``, ``thread_flush_alone``, ``background_snapshots``).

    The driver is returned unstarted (the caller attaches its state machine, then calls
    ``driver.start()``; once started, ``await driver.stop()`` closes the log). If building the
    core or the driver raises, the log is closed and the exception propagates (the FileLog's
    errors, ``QuorumStateError``, ``ValueError`` for a bad configuration)."""
    raft_log = (
        FileLog(directory) if segment_bytes is None
        else FileLog(directory, segment_bytes=segment_bytes)
    )  # fmt: skip
    try:
        now = monotonic_ms()
        core = RaftCore(config, raft_log, FileQuorumStateStore(directory / DEFAULT_FILE_NAME),
                        state_machine, random.Random(), now,
                        wall_offset_ms=int(time.time() * 1000) - now)  # fmt: skip
        driver = RaftDriver(core, raft_log, config.node_id, **driver_options)
    except BaseException:
        raft_log.close()
        raise
    return RaftReplica(raft_log, core, driver)
