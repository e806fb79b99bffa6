"""A coordinator write that is not committed in time answers REQUEST_TIMED_OUT (7), as Kafka
answers a request whose replication timed out, not KAFKA_STORAGE_ERROR (56): ``TimeoutError`` is
an ``OSError`` subclass, and ``kafka_rpc.coordinator.errors.error_code_of`` checks it first.

The wire case is real: two replicas of one ``__diskless-metadata`` partition whose Raft RPCs go
through two in-process servers' controller listeners (``tests.replicated_cluster``); once the
leader is elected its follower stops, so the leader can append but never commit, and its
CommitBatches handler answers each entry of the object 7 after ``write_timeout_ms``."""

from __future__ import annotations

import asyncio
import sqlite3
import uuid

from kafka_rpc.coordinator.api import CreateTopicAndPartitionsRequest
from kafka_rpc.coordinator.errors import REQUEST_TIMED_OUT, error_code_of
from kafka_rpc.coordinator.postgres import CoordinatorUnavailableError
from kafka_rpc.handlers import diskless as h
from kafka_rpc.protocol import codec
from tests.integration.conftest import start_server
from tests.replicated_cluster import Cluster

CB = codec.module("CommitBatchesRequest")
STORAGE_ERROR = 56


def test_the_error_code_of_a_timeout():
    assert REQUEST_TIMED_OUT == 7
    assert error_code_of(TimeoutError("record 5 not applied within 0.3 s")) == 7
    assert asyncio.TimeoutError is TimeoutError  # noqa: UP041 - Python >= 3.11
    assert issubclass(TimeoutError, OSError)  # why the order of the rules matters
    # a storage failure is still one
    assert error_code_of(OSError(28, "No space left on device")) == STORAGE_ERROR
    assert error_code_of(sqlite3.OperationalError("disk I/O error")) == STORAGE_ERROR
    assert error_code_of(CoordinatorUnavailableError("connection lost")) == STORAGE_ERROR
    assert error_code_of(RuntimeError("bug")) == -1


def _entry(p: int, byte_offset: int):
    return CB.CommitBatchesTopicPartition(
        partition_index=p, object_key="obj", byte_offset=byte_offset, size=50, base_offset=0,
        last_offset=1, batch_max_timestamp=1000, message_timestamp_type=0, producer_id=-1,
        producer_epoch=-1, base_sequence=-1, last_sequence=-1,
    )  # fmt: skip


async def test_a_write_its_leader_cannot_commit_answers_request_timed_out(tmp_path):
    # the leader keeps its leadership (fetch.timeout.ms: 20 s) while its write times out (0.3 s)
    cl = Cluster(tmp_path, coordinator_options={"write_timeout_ms": 300},
                 fetch_timeout_ms=20_000)  # fmt: skip
    try:
        for i in (1, 2):
            running = await start_server(tmp_path / f"s{i}")
            cl.servers[i] = running
            cl.voters[i] = ("127.0.0.1", running.port("CONTROLLER"))
        for i in (1, 2):
            await cl.start_replica(i)
        leader = await cl.leader()
        topic = uuid.uuid4()
        req = CreateTopicAndPartitionsRequest(topic, "t", 2)
        assert await leader.create_topic_and_partitions([req]) == [0]
        (follower,) = [i for i in cl.coords if cl.coords[i] is not leader]
        await cl.stop_replica(follower)
        assert leader.is_writable  # still the leader: it appends, nothing commits
        request = CB.CommitBatchesRequest(broker_id=1, batches=(CB.Batches(topics=(
            CB.CommitBatchesTopic(topic_id=topic, partitions=(_entry(0, 0), _entry(1, 50))),
        )),))  # fmt: skip
        resp = await h.handle_commit_batches(leader, request)
        got = [(p.error_code, p.assigned_base_offset) for p in resp.topics[0].partitions]
        assert got == [(REQUEST_TIMED_OUT, -1)] * 2
        assert leader.is_leader
    finally:
        await cl.close()
