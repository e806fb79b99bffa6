"""The replicated Batch Coordinator as the metadata log assigns it (issue 14, DESIGN.md section 9).

``diskless.coordinator.url=raft:///dir`` with none of ``node_id``, ``voters`` or ``topic_id`` in
the URL selects :class:`AssignedBatchCoordinator` ("from the metadata log"): instead of static
voters and topic id, the server's committed metadata image says which replicas the
``__diskless-metadata`` partition has (the topic the active controller creates,
``kafka_rpc.controller.coordinator_mapping``; KIP-1164 "Batch Coordinator implemented with an
internal topic"). The server attaches it (:meth:`AssignedBatchCoordinator.attach_server`) once
its metadata log runs; from then on every committed image is looked at, and once it has
``__diskless-metadata`` partition 0 with this node among its replicas, a
:class:`~kafka_rpc.coordinator.replicated.ReplicatedBatchCoordinator` starts with:

* ``topic_id``: the image's id of ``__diskless-metadata`` (written to
  ``<dir>/__diskless-metadata-0/partition.metadata``; a directory naming another id stops the
  start, Kafka's InconsistentTopicIdException, logged once);
* ``voters``: the partition's replicas, each at its controller listener address from
  ``controller.quorum.voters`` (combined broker+controller nodes: broker id = voter id). A
  replica that is not a voter has no known address: logged once as an error, and the
  coordinator stays unavailable;
* ``node_id``: this node; ``cluster_id``: the server's cluster id unless the URL names one.

Only partition 0 is served: one coordinator object serves one ``__diskless-metadata`` partition
(partitions mapped elsewhere are answered NOT_COORDINATOR by the diskless handlers and named by
FindCoordinator from the image). A later image with other replicas for the partition is logged
and the coordinator keeps running with the voters it started with: reassignment of a coordinator
partition is not done here (nor a re-created topic's new id: logged, the replica keeps its id).

Until the replica runs, every call (reads and writes alike) raises
:class:`CoordinatorNotAvailableError`, whose ``error_code`` 15 (Kafka's
COORDINATOR_NOT_AVAILABLE) the diskless handlers answer, and :meth:`served_partitions` is empty
(so the handlers' owner check answers NOT_COORDINATOR, 16, for entries of partition 0 before a
call is made). Once it runs, every call goes to the replica (its own answers: NOT_COORDINATOR
off the Raft leader).
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from .api import (
    BatchCoordinator,
    CommitBatchRequest,
    CommitBatchResponse,
    CreateTopicAndPartitionsRequest,
    DeleteRecordsRequest,
    DeleteRecordsResponse,
    EnforceRetentionRequest,
    EnforceRetentionResponse,
    FileToDelete,
    FindBatchRequest,
    FindBatchResponse,
    ListOffsetsRequest,
    ListOffsetsResponse,
    TopicIdPartition,
)
from .replicated import DISKLESS_METADATA_TOPIC_NAME, ReplicatedBatchCoordinator

__all__ = ["COORDINATOR_NOT_AVAILABLE", "AssignedBatchCoordinator", "CoordinatorNotAvailableError"]

log = logging.getLogger("kafka_rpc.coordinator.assigned")

#: Kafka ``Errors.COORDINATOR_NOT_AVAILABLE``.
COORDINATOR_NOT_AVAILABLE = 15
#: The one ``__diskless-metadata`` partition an assigned coordinator serves.
PARTITION = 0
_NONE: frozenset[int] = frozenset()


class CoordinatorNotAvailableError(Exception):
    """The ``__diskless-metadata`` replica of this node is not running (yet): Kafka's
    COORDINATOR_NOT_AVAILABLE (15)."""

    error_code = COORDINATOR_NOT_AVAILABLE


class AssignedBatchCoordinator(BatchCoordinator):
    """A ``BatchCoordinator`` whose ``__diskless-metadata`` partition 0 replica is configured by
    the committed metadata image (module docstring).

    * ``log_dir``: the directory of ``<log_dir>/__diskless-metadata-0/`` (as
      ``ReplicatedBatchCoordinator``'s).
    * ``options``: passed to ``ReplicatedBatchCoordinator`` (``synchronous``,
      ``write_timeout_ms``, ``raft_options``, ``cluster_id``, ``import_path``...); ``node_id``,
      ``voters`` and ``topic_id`` come from the server and the image, ``partition`` must be 0.
      Raises ``ValueError`` otherwise.
    """

    def __init__(self, log_dir: str | Path, **options: Any) -> None:
        for key in ("node_id", "voters", "topic_id"):
            if key in options:
                raise ValueError(f"{key} comes from the metadata log here")
        if options.pop("partition", PARTITION) != PARTITION:
            raise ValueError("a coordinator from the metadata log serves partition 0 only")
        self.log_dir = Path(log_dir)
        self.partition = PARTITION
        self._options = options
        self.inner: ReplicatedBatchCoordinator | None = None
        #: the replicas the running (or starting) replica was built with
        self.replicas: tuple[int, ...] | None = None
        self._topic_id: uuid.UUID | None = None  # the image's id the replica started with
        self.node_id = -1
        self._voters: dict[int, tuple[str, int]] = {}
        self._cluster_id: str | None = None
        self._client_security: Any = None
        self._controller: Any = None
        self._task: asyncio.Task | None = None
        self._closed = False
        self._reported: set[str] = set()
        self.started = asyncio.Event()

    # ------------------------------------------------------------------ lifecycle
    async def start(self) -> None:
        """Nothing to open: the replica starts once an image assigns it (:meth:`attach_server`)."""

    def attach_server(self, server: Any) -> None:
        """Follow ``server``'s committed metadata image (``server.controller``, a
        ``QuorumController`` whose ``publishers`` are called on every change): this node's id,
        ``controller.quorum.voters`` addresses, cluster id and controller-listener client
        security. Call once the server's metadata log runs."""
        cfg = server.config
        self.node_id = server.node_id
        self._voters = cfg.voters()
        self._cluster_id = server.cluster_id
        names = cfg.controller_listener_names
        self._client_security = server.client_security(names[0]) if names else None
        self._controller = server.controller
        self._controller.publishers.append(self.on_metadata_update)
        self.on_metadata_update(None, self._controller.image)

    async def close(self) -> None:
        """Stop following the image; wait for a replica being started (bounded by its own
        ``wait_for_leader_ms``) and close the replica."""
        self._closed = True
        controller, self._controller = self._controller, None
        if controller is not None and self.on_metadata_update in controller.publishers:
            controller.publishers.remove(self.on_metadata_update)
        task, self._task = self._task, None
        if task is not None:
            await asyncio.wait({task})
        inner, self.inner = self.inner, None
        if inner is not None:
            await inner.close()

    def _report(self, key: str, level: int, msg: str, *args: Any) -> None:
        if key not in self._reported:
            self._reported.add(key)
            log.log(level, msg, *args)

    def on_metadata_update(self, old: Any, new: Any) -> None:
        """The ``QuorumController`` publisher callback (event loop, synchronous, never raises):
        start the replica once ``new`` assigns one to this node (module docstring)."""
        if self._closed:
            return
        t = new.topic_by_name(DISKLESS_METADATA_TOPIC_NAME)
        p = None if t is None else t.partitions.get(PARTITION)
        if p is None:
            return
        replicas = tuple(p.replicas)
        if self.replicas is not None:
            running_id = self._topic_id
            if t.topic_id != running_id:
                self._report(f"id {t.topic_id}", logging.WARNING,
                             "%s now has topic id %s; this replica keeps running with %s",
                             DISKLESS_METADATA_TOPIC_NAME, t.topic_id, running_id)  # fmt: skip
            if set(replicas) != set(self.replicas):
                self._report(f"moved {sorted(replicas)}", logging.WARNING,
                             "%s-%d: the image now names replicas %s; this replica keeps running "
                             "with voters %s (reassignment is not supported)",
                             DISKLESS_METADATA_TOPIC_NAME, PARTITION, sorted(replicas),
                             sorted(self.replicas))  # fmt: skip
            return
        if self.node_id not in replicas:
            self._report(f"not a replica {sorted(replicas)}", logging.INFO,
                         "%s-%d: node %d is not one of its replicas %s; no coordinator here",
                         DISKLESS_METADATA_TOPIC_NAME, PARTITION, self.node_id,
                         sorted(replicas))  # fmt: skip
            return
        unknown = [r for r in replicas if r not in self._voters]
        if unknown:
            self._report(f"unknown {sorted(replicas)}", logging.ERROR,
                         "%s-%d: replicas %s have no controller listener address in "
                         "controller.quorum.voters; the coordinator stays unavailable",
                         DISKLESS_METADATA_TOPIC_NAME, PARTITION, unknown)  # fmt: skip
            return
        self.replicas = replicas
        self._topic_id = t.topic_id
        voters = {r: self._voters[r] for r in replicas}
        log.info("%s-%d: starting the replica of node %d, topic id %s, voters %s",
                 DISKLESS_METADATA_TOPIC_NAME, PARTITION, self.node_id, t.topic_id,
                 voters)  # fmt: skip
        self._task = asyncio.ensure_future(self._start_inner(t.topic_id, voters))

    async def _start_inner(self, topic_id: uuid.UUID, voters: dict[int, tuple[str, int]]) -> None:
        options = dict(self._options)
        if self._cluster_id is not None:
            options.setdefault("cluster_id", self._cluster_id)
        options.setdefault("client_security", self._client_security)
        inner = ReplicatedBatchCoordinator(
            self.log_dir, node_id=self.node_id, voters=voters, partition=PARTITION,
            topic_id=topic_id, **options,
        )  # fmt: skip
        try:
            await inner.start()
        except Exception as e:  # noqa: BLE001 - e.g. InconsistentTopicIdError: logged
            log.error("%s-%d: the replica did not start: %r; the coordinator stays unavailable",
                      DISKLESS_METADATA_TOPIC_NAME, PARTITION, e)  # fmt: skip
            await inner.close()
            return
        if self._closed:
            await inner.close()
            return
        self.inner = inner
        self.started.set()

    # ------------------------------------------------------------------ state
    def _running(self) -> ReplicatedBatchCoordinator:
        inner = self.inner
        if inner is None:
            raise CoordinatorNotAvailableError(
                f"the {DISKLESS_METADATA_TOPIC_NAME}-{PARTITION} replica of node {self.node_id} "
                "is not running"
            )
        return inner

    @property
    def topic_id(self) -> uuid.UUID | None:
        """The running replica's topic id (the image's ``__diskless-metadata``), else None."""
        return self.inner.topic_id if self.inner is not None else None

    @property
    def leader_id(self) -> int:
        """The Raft leader of the partition as the running replica knows it; -1 when unknown
        or not running."""
        return self.inner.leader_id if self.inner is not None else -1

    @property
    def is_writable(self) -> bool:
        return self.inner is not None and self.inner.is_writable

    def served_partitions(self, write: bool) -> frozenset[int]:
        """The running replica's (``ReplicatedBatchCoordinator.served_partitions``); empty
        before it runs."""
        return self.inner.served_partitions(write) if self.inner is not None else _NONE

    def raft_driver_for(self, key: tuple[Any, int]) -> Any:
        """The running replica's driver for a Raft RPC naming its partition (by topic id or
        name), else None (``kafka_rpc.handlers.raft`` routing)."""
        return self.inner.raft_driver_for(key) if self.inner is not None else None

    # ------------------------------------------------------------------ the BatchCoordinator
    async def create_topic_and_partitions(
        self, requests: Sequence[CreateTopicAndPartitionsRequest]
    ) -> list[int]:
        return await self._running().create_topic_and_partitions(requests)

    async def commit_file(
        self,
        object_key: str,
        uploader_broker_id: int,
        file_size: int,
        requests: Sequence[CommitBatchRequest],
    ) -> list[CommitBatchResponse]:
        return await self._running().commit_file(
            object_key, uploader_broker_id, file_size, requests
        )

    async def find_batches(
        self, requests: Sequence[FindBatchRequest], fetch_max_bytes: int
    ) -> list[FindBatchResponse]:
        return await self._running().find_batches(requests, fetch_max_bytes)

    async def list_offsets(
        self, requests: Sequence[ListOffsetsRequest]
    ) -> list[ListOffsetsResponse]:
        return await self._running().list_offsets(requests)

    async def delete_records(
        self, requests: Sequence[DeleteRecordsRequest]
    ) -> list[DeleteRecordsResponse]:
        return await self._running().delete_records(requests)

    async def delete_topics(self, topic_ids: Sequence[uuid.UUID]) -> list[int]:
        return await self._running().delete_topics(topic_ids)

    async def get_files_to_delete(
        self,
        marked_before_ms: int | None = None,
        limit: int = 0,
        after_object_key: str | None = None,
    ) -> list[FileToDelete]:
        return await self._running().get_files_to_delete(marked_before_ms, limit, after_object_key)

    async def delete_files(self, object_keys: Sequence[str]) -> list[int]:
        return await self._running().delete_files(object_keys)

    async def is_safe_to_delete_file(self, object_key: str) -> bool:
        return await self._running().is_safe_to_delete_file(object_key)

    async def list_partitions(self) -> list[TopicIdPartition]:
        return await self._running().list_partitions()

    async def enforce_retention(
        self, requests: Sequence[EnforceRetentionRequest], max_batches_per_request: int = 0
    ) -> list[EnforceRetentionResponse]:
        return await self._running().enforce_retention(requests, max_batches_per_request)
