"""The node's retention task (``Node._retention_loop``) on a node whose coordinator cannot apply
retention: quiet (DEBUG) when no coordinator replica runs here -- a broker-only node's
``AssignedBatchCoordinator``, whose calls raise COORDINATOR_NOT_AVAILABLE (15) -- and one
traceback, not one per interval, for a real failure, forgotten once a pass succeeds.

The node is a real ``Node`` (not started: only its retention task runs, every 20 ms) with a real
coordinator object."""

from __future__ import annotations

import asyncio
import logging

from kafka_rpc.coordinator.assigned import AssignedBatchCoordinator, CoordinatorNotAvailableError
from kafka_rpc.coordinator.replicated import ReplicatedBatchCoordinator
from kafka_rpc.node import Node
from tests.integration.conftest import make_config
from tests.waiting import until

LOGGER = "kafka_rpc.node"


def _node(tmp_path, coordinator) -> Node:
    node = Node(make_config(tmp_path, **{"log.retention.check.interval.ms": "20"}))
    node.coordinator = coordinator
    return node


def _lines(caplog, text: str, level: int | None = None) -> list[logging.LogRecord]:
    return [r for r in caplog.records
            if r.name == LOGGER and text in r.getMessage()
            and (level is None or r.levelno == level)]  # fmt: skip


async def _stop(node: Node, task: asyncio.Task) -> None:
    node.should_exit.set()
    await asyncio.wait_for(task, 10)


async def test_no_replica_here_skips_retention_quietly(tmp_path, caplog):
    c = AssignedBatchCoordinator(tmp_path / "coord")  # no image attached: no replica runs
    try:
        await c.list_partitions()
        raise AssertionError("list_partitions answered without a replica")
    except CoordinatorNotAvailableError:
        pass
    node = _node(tmp_path, c)
    caplog.set_level(logging.DEBUG, logger=LOGGER)
    task = asyncio.ensure_future(node._retention_loop())
    try:
        await until(lambda: len(_lines(caplog, "retention")) >= 3, "three passes",
                    interval=0.01)  # fmt: skip
    finally:
        await _stop(node, task)
    loud = [r for r in caplog.records if r.name == LOGGER and r.levelno >= logging.WARNING]
    assert loud == []
    assert all(r.exc_info is None for r in _lines(caplog, "retention"))
    assert all(r.levelno == logging.DEBUG for r in _lines(caplog, "retention: skipped"))


async def test_a_real_failure_is_logged_once_until_a_pass_succeeds(tmp_path, caplog):
    # a replica that is not started: its reads raise RuntimeError (a real failure, not "no
    # replica here"); started, the next pass succeeds
    c = ReplicatedBatchCoordinator(tmp_path / "coord")
    node = _node(tmp_path, c)
    caplog.set_level(logging.DEBUG, logger=LOGGER)
    task = asyncio.ensure_future(node._retention_loop())
    try:
        await until(lambda: len(_lines(caplog, "retention")) >= 4, "the failure to repeat",
                    interval=0.01)  # fmt: skip
        (first,) = _lines(caplog, "retention task failed", logging.ERROR)
        assert len(_lines(caplog, "retention: failed again", logging.DEBUG)) >= 3
        assert first.exc_info is not None and "not started" in str(first.exc_info[1])
        await c.start()
        await until(lambda: _lines(caplog, "a pass succeeded", logging.INFO), "a good pass",
                    interval=0.01)  # fmt: skip
        await c.close()  # fails again: reported again, once
        await until(lambda: len(_lines(caplog, "retention task failed", logging.ERROR)) == 2,
                    "the new failure", interval=0.01)  # fmt: skip
    finally:
        await _stop(node, task)
        await c.close()
    assert len(_lines(caplog, "retention task failed", logging.ERROR)) == 2
