"""A ``__diskless-metadata`` replica that fails to start is tried again with backoff
(``AssignedBatchCoordinator._start_slot``, :mod:`kafka_rpc.coordinator.replica_starts`): its
directory's ``partition.metadata`` names another topic id (Kafka's InconsistentTopicIdException),
each start fails, logged at ERROR once; the operator fixes the file and the next retry starts the
replica. The attempts and failures are on a real Prometheus ``/metrics`` endpoint (the collector
the node registers, served by prometheus-client's HTTP server on an ephemeral port).

Real pieces: the coordinator and its single-voter Raft replica on a tmp dir, the image of
tests/coordinator/test_assigned_routing.py; the backoff is shortened (50 ms doubling to 200 ms)
so that the retries come quickly."""

from __future__ import annotations

import asyncio
import logging
import re
import urllib.request
import uuid

import prometheus_client as prom

from kafka_rpc.coordinator.assigned import AssignedBatchCoordinator
from kafka_rpc.coordinator.replica_starts import ReplicaStarts, register_metrics
from kafka_rpc.coordinator.replicated import partition_dir_name
from kafka_rpc.storage import partition_metadata as pm
from tests.coordinator.test_assigned_routing import META_ID, image, server
from tests.waiting import until

LOGGER = "kafka_rpc.coordinator.assigned"
PREFIX = "kafka_rpc_diskless_metadata_"


def _coordinator(tmp_path) -> AssignedBatchCoordinator:
    c = AssignedBatchCoordinator(tmp_path / "coord", synchronous="OFF")
    c.replica_starts.initial_s, c.replica_starts.max_s = 0.05, 0.2
    return c


def _attach(c: AssignedBatchCoordinator) -> None:
    srv = server(image({0: (1,)}))
    c.attach_metadata(srv.config, srv.node_id, srv.cluster_id, srv.controller, None)


def _scrape(port: int) -> dict[str, float]:
    """``/metrics`` as ``{"<name>{<labels>}": value}`` for our coordinator metrics."""
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as r:
        text = r.read().decode()
    out = {}
    for line in text.splitlines():
        m = re.fullmatch(rf"({PREFIX}\S+) (\S+)", line)
        if m:
            out[m[1]] = float(m[2])
    return out


def test_the_backoff_doubles_to_its_cap_and_a_start_resets_it():
    s = ReplicaStarts()
    assert (s.initial_s, s.max_s) == (1.0, 30.0)
    boom = OSError(13, "Permission denied")
    waits = [s.failed(0, boom)[0] for _ in range(7)]
    assert waits == [1, 2, 4, 8, 16, 30, 30]
    assert s.failed(0, OSError(28, "No space left on device")) == (30, True)  # a new error
    assert s.failed(0, boom) == (30, False)  # seen since the last start: quiet
    assert s.succeeded(0) == 9 and s.failures[0] == 9
    assert s.failed(0, boom) == (1, True)  # reset by the start


async def test_a_failed_start_is_retried_until_its_cause_is_fixed(tmp_path, caplog):
    pdir = tmp_path / "coord" / partition_dir_name(0)
    pdir.mkdir(parents=True)
    pm.ensure(pdir, uuid.uuid4())  # not the image's id of __diskless-metadata
    c = _coordinator(tmp_path)
    registry = prom.CollectorRegistry()
    assert register_metrics(registry, c)
    httpd, thread = prom.start_http_server(0, "127.0.0.1", registry=registry)
    port = httpd.server_port
    caplog.set_level(logging.DEBUG, logger=LOGGER)
    try:
        _attach(c)
        await until(lambda: c.replica_starts.failures[0] >= 3, "three failed starts",
                    interval=0.01)  # fmt: skip
        assert c.start_failed.is_set() and not c.started.is_set()
        assert c.inner is None and c.served_partitions(False) == frozenset()
        # between attempts the partition is not "loading": its entries answer NOT_COORDINATOR
        await until(lambda: c.loading_partitions(True) == frozenset(), "between two attempts",
                    interval=0.005)  # fmt: skip
        tried = [r for r in caplog.records if r.name == LOGGER and "did not start" in r.message]
        assert [r.levelno for r in tried[:3]] == [logging.ERROR, logging.DEBUG, logging.DEBUG]
        assert "InconsistentTopicIdError" in tried[0].message
        got = await asyncio.to_thread(_scrape, port)
        assert got[f'{PREFIX}replica_start_failures_total{{partition="0"}}'] >= 3
        assert got[f"{PREFIX}replicas_running"] == 0

        pm.write(pdir, META_ID)  # the operator's fix: the image's id
        await until(lambda: c.served_partitions(True) == {0}, "the replica started by a retry",
                    timeout=10.0)  # fmt: skip
        assert c.started.is_set()
        failures = c.replica_starts.failures[0]
        assert c.replica_starts.attempts[0] == failures + 1
        assert any(r.levelno == logging.INFO and "started at attempt" in r.message
                   for r in caplog.records)  # fmt: skip
        got = await asyncio.to_thread(_scrape, port)
        assert got[f'{PREFIX}replica_start_failures_total{{partition="0"}}'] == failures
        assert got[f'{PREFIX}replica_start_attempts_total{{partition="0"}}'] == failures + 1
        assert got[f"{PREFIX}replicas_running"] == 1
        assert await c.list_partitions() == []  # it serves
    finally:
        await c.close()
        httpd.shutdown()
        thread.join(5)


async def test_no_retry_after_close(tmp_path):
    pdir = tmp_path / "coord" / partition_dir_name(0)
    pdir.mkdir(parents=True)
    pm.ensure(pdir, uuid.uuid4())
    c = _coordinator(tmp_path)
    _attach(c)
    await until(lambda: c.replica_starts.failures[0] >= 2, "two failed starts", interval=0.01)
    await asyncio.wait_for(c.close(), 5)  # not held by the backoff
    attempts = c.replica_starts.attempts[0]
    await asyncio.sleep(3 * c.replica_starts.max_s)
    assert c.replica_starts.attempts[0] == attempts
