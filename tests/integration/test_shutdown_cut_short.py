"""A shutdown cut short (its caller's ``wait_for`` times out while the quorum is still resigning)
must still release the Batch Coordinator: its aiosqlite worker threads are not daemons, so a
leaked coordinator keeps the whole process from exiting (seen: a full test run that passed and
then never exited)."""

import asyncio
import threading

import pytest

from tests.integration.conftest import start_server


async def test_shutdown_cut_short_still_closes_the_coordinator(tmp_path):
    before = set(threading.enumerate())
    running = await start_server(tmp_path)
    server = running.server
    coordinator = server.coordinator
    assert coordinator is not None and server.raft is not None

    async def resigning_forever():
        await asyncio.sleep(3600)

    server._stop_raft = resigning_forever  # a quorum that never finishes resigning
    server.should_exit.set()
    with pytest.raises(TimeoutError):
        await asyncio.wait_for(running.task, 0.5)
    assert server.coordinator is None
    assert server.raft is None
    # this server's SQLite worker threads (not other tests') end once the coordinator closed
    ours = [t for t in set(threading.enumerate()) - before
            if "_connection_worker_thread" in t.name]  # fmt: skip
    for t in ours:
        await asyncio.to_thread(t.join, 5.0)
    assert not [t for t in ours if t.is_alive()], ours
