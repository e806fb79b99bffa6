"""No snapshot of a ``__diskless-metadata`` partition cuts an import in two.

An import (the upgrade from the standalone SQLite coordinator,
``ReplicatedBatchCoordinator._import``) is a run of ``DisklessSnapshotChunkRecord`` records in
the log that replaces the state once its last one is applied; until then the applied offset
stays before its first chunk. A snapshot at a committed offset inside that run would hold the old
state under an id past some of the chunks, and a replica rebuilt from it would skip the rest
and never hold the import. The state machine's ``in_transaction`` holds the Raft core's snapshot
back until the import is applied. Real single-voter replica, real log, real SQLite files."""

from __future__ import annotations

import asyncio

from kafka_rpc.coordinator import replicated, replicated_state
from kafka_rpc.coordinator.api import FindBatchRequest
from kafka_rpc.raft.driver import monotonic_ms
from tests.contract.conftest import Clock
from tests.contract.test_replicated import _lose_database, _standalone, _started, _without_applied
from tests.waiting import until


async def test_a_replica_rebuilt_after_a_snapshot_during_an_import_holds_the_import(
    tmp_path, monkeypatch
):
    monkeypatch.setattr(replicated_state, "SNAPSHOT_CHUNK_BYTES", 4096)
    clock = Clock()
    source = tmp_path / "coordinator.db"
    t, (found, marked, _) = await _standalone(source, clock)
    image = await asyncio.to_thread(replicated._read_source_image, source)
    chunks = replicated_state.chunk_records(image)
    assert len(chunks) > 3
    logs = tmp_path / "logs"
    reads = [FindBatchRequest(t.tp(p), 0, 1 << 20) for p in (0, 1)]
    c = await _started(logs, clock)
    try:
        # the import's records as _import appends them, in two appends: the first is committed
        # and delivered before the second exists
        first = c.driver.append(chunks[:3])
        await until(lambda: c._seen > first, "the first chunks delivered", interval=0.01)
        assert c.imports_applied == 0 and c.applied_offset < first
        assert c.in_transaction  # the import is partially applied
        held = c.core.create_snapshot(monotonic_ms())  # a snapshot due now
        last = c.driver.append(chunks[3:])
        await c.wait_applied(last + 1, 10.0)
        assert c.imports_applied == 1 and not c.in_transaction
        assert await c.find_batches(reads, 1 << 20) == found
        rows = c.state_rows()
        assert len(rows["raft_imports"]) == 1
        db = c.db_path
    finally:
        await c.close()
    _lose_database(db)
    c = await _started(logs, clock)
    try:  # rebuilt (from the latest snapshot, if any, and the log): the import is there
        assert _without_applied(c.state_rows()) == _without_applied(rows)
        # because the snapshot was held back (the state machine's in_transaction): none exists
        assert held is None and c.snapshots_loaded == 0 and c.imports_applied == 1
        # the snapshot held back is taken now that the import is applied, and holds it
        sid = c.core.create_snapshot(monotonic_ms())
        assert sid is not None and sid.offset == c.applied_offset
    finally:
        await c.close()
    _lose_database(db)
    c = await _started(logs, clock)
    try:  # rebuilt from that snapshot
        assert c.snapshots_loaded == 1 and c.imports_applied == 0
        assert _without_applied(c.state_rows()) == _without_applied(rows)
        assert await c.find_batches(reads, 1 << 20) == found
        assert await c.get_files_to_delete() == marked
    finally:
        await c.close()
