"""The node's ``/metrics`` endpoint (``metrics.port``) carries the Batch Coordinator replicas'
starts (:mod:`kafka_rpc.coordinator.replica_starts`, registered by ``Node.start``): a real
in-process combined node with the default coordinator, scraped over HTTP."""

from __future__ import annotations

import asyncio

from tests.coordinator.test_replica_start_retry import PREFIX, _scrape
from tests.integration.conftest import start_server


async def test_the_node_s_metrics_endpoint_has_the_replica_starts(tmp_path):
    """A combined node with the default coordinator (from the metadata log): its replica of
    partition 0 started at the first attempt, as its ``/metrics`` says."""
    running = await start_server(tmp_path, **{"metrics.port": "0"})
    try:
        port = running.server.metrics_port
        got = await asyncio.to_thread(_scrape, port)
        assert got[f'{PREFIX}replica_start_attempts_total{{partition="0"}}'] == 1
        assert got[f'{PREFIX}replica_start_failures_total{{partition="0"}}'] == 0
        assert got[f"{PREFIX}replicas_running"] == 1
    finally:
        await running.stop()
