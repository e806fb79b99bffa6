"""Three replicas of one ``__diskless-metadata`` partition in this process: each a
ReplicatedBatchCoordinator whose Raft RPCs reach it through a real server's controller listener
(routed by topic id, ``kafka_rpc.raft.routing.RaftPartitions``), on loopback.

Used by ``tests/integration/test_diskless_metadata_raft.py`` and, as :class:`LeaderOfThree`, by
the coordinator contract suite (``tests/contract/conftest.py``, implementation "replicated-3")."""

from __future__ import annotations

import contextlib
import uuid
from pathlib import Path
from typing import Any

from kafka_rpc.coordinator._rules import DEFAULT_PRODUCER_ID_EXPIRATION_MS
from kafka_rpc.coordinator.api import BatchCoordinator
from kafka_rpc.coordinator.replicated import (
    DISKLESS_METADATA_TOPIC_NAME,
    ReplicatedBatchCoordinator,
)
from tests.contract.conftest import Clock
from tests.integration.conftest import start_server
from tests.waiting import until

TIMEOUT = 15.0
RAFT = {"election_timeout_ms": 300, "fetch_timeout_ms": 600, "fetch_max_wait_ms": 100}


class Cluster:
    """Three servers (each its own single-voter metadata quorum) and three replicas of one
    ``__diskless-metadata`` partition whose voters are the servers' controller listeners."""

    def __init__(self, root: Path, clock: Clock | None = None,
                 coordinator_options: dict | None = None, **options) -> None:  # fmt: skip
        self.root = root
        self.options = options  # RaftConfig fields
        self.coordinator_options = {"producer_id_expiration_ms": 4000, "shutdown_timeout_ms": 1000,
                                    **(coordinator_options or {})}  # fmt: skip
        self.topic_id = uuid.uuid4()
        self.servers: dict[int, object] = {}
        self.coords: dict[int, ReplicatedBatchCoordinator] = {}
        self.voters: dict[int, tuple[str, int]] = {}
        self.clock = clock or Clock()

    async def start(self) -> None:
        for i in (1, 2, 3):
            running = await start_server(self.root / f"s{i}")
            self.servers[i] = running
            self.voters[i] = ("127.0.0.1", running.port("CONTROLLER"))
        for i in (1, 2, 3):
            await self.start_replica(i)

    async def start_replica(self, i: int) -> ReplicatedBatchCoordinator:
        c = ReplicatedBatchCoordinator(
            self.root / f"r{i}",
            node_id=i,
            voters=self.voters,
            topic_id=self.topic_id,
            cluster_id="diskless-test",
            time_ms=self.clock,
            **self.coordinator_options,
            raft_options={**RAFT, **self.options},
        )
        await c.start()
        self.servers[i].server.raft_partitions.register(
            self.topic_id, DISKLESS_METADATA_TOPIC_NAME, 0, c.driver
        )
        self.coords[i] = c
        return c

    async def stop_replica(self, i: int) -> None:
        c = self.coords.pop(i)
        self.servers[i].server.raft_partitions.unregister(
            self.topic_id, DISKLESS_METADATA_TOPIC_NAME, 0
        )
        await c.close()

    async def leader(self) -> ReplicatedBatchCoordinator:
        def find():
            leaders = [c for c in self.coords.values() if c.is_writable]
            return leaders[0] if len(leaders) == 1 else None

        return await until(find, "one writable leader", timeout=TIMEOUT)

    async def caught_up(self) -> None:
        def done():
            lead = [c for c in self.coords.values() if c.is_leader]
            if len(lead) != 1:
                return False
            end = lead[0].applied_offset
            return all(c.applied_offset == end for c in self.coords.values())

        await until(done, "every replica to apply the leader's log", timeout=TIMEOUT)

    async def close(self) -> None:
        for i in list(self.coords):
            with contextlib.suppress(Exception):
                await self.stop_replica(i)
        for running in self.servers.values():
            with contextlib.suppress(Exception):
                await running.stop()


@contextlib.asynccontextmanager
async def cluster(root: Path, **options):
    c = Cluster(root, **options)
    try:
        await c.start()
        yield c
    finally:
        await c.close()


class LeaderOfThree(BatchCoordinator):
    """A :class:`Cluster` seen as one BatchCoordinator: every call goes to the replica that is
    the writable leader now (reads too: a follower may not have applied the last write yet, and
    the contract reads its own writes). :meth:`close` first waits until every replica applied the
    leader's log and checks that the three SQLite states are equal row by row."""

    def __init__(self, root: Path, clock: Clock, **coordinator_options: Any) -> None:
        options = {
            "producer_id_expiration_ms": DEFAULT_PRODUCER_ID_EXPIRATION_MS,
            "shutdown_timeout_ms": 200,  # the last replica standing has no successor to wait for
            **coordinator_options,
        }
        self.cluster = Cluster(root, clock=clock, coordinator_options=options)

    async def start(self) -> None:
        try:
            await self.cluster.start()
            await self.cluster.leader()
        except BaseException:
            await self.cluster.close()
            raise

    async def close(self) -> None:
        try:
            await self.cluster.caught_up()
            lead = await self.cluster.leader()
            for c in self.cluster.coords.values():
                assert c.state_rows() == lead.state_rows(), "a follower's state differs"
        finally:
            await self.cluster.close()

    async def _lead(self) -> ReplicatedBatchCoordinator:
        return await self.cluster.leader()

    async def create_topic_and_partitions(self, *a: Any) -> Any:
        return await (await self._lead()).create_topic_and_partitions(*a)

    async def commit_file(self, *a: Any) -> Any:
        return await (await self._lead()).commit_file(*a)

    async def find_batches(self, *a: Any) -> Any:
        return await (await self._lead()).find_batches(*a)

    async def list_offsets(self, *a: Any) -> Any:
        return await (await self._lead()).list_offsets(*a)

    async def delete_records(self, *a: Any) -> Any:
        return await (await self._lead()).delete_records(*a)

    async def delete_topics(self, *a: Any) -> Any:
        return await (await self._lead()).delete_topics(*a)

    async def get_files_to_delete(self, *a: Any, **k: Any) -> Any:
        return await (await self._lead()).get_files_to_delete(*a, **k)

    async def delete_files(self, *a: Any) -> Any:
        return await (await self._lead()).delete_files(*a)

    async def is_safe_to_delete_file(self, *a: Any) -> Any:
        return await (await self._lead()).is_safe_to_delete_file(*a)

    async def list_partitions(self) -> Any:
        return await (await self._lead()).list_partitions()

    async def enforce_retention(self, *a: Any, **k: Any) -> Any:
        return await (await self._lead()).enforce_retention(*a, **k)
