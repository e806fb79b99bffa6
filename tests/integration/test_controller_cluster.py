"""Issue 12 on a real 3-process quorum: producer-id blocks and topics survive SIGKILL of the
active controller, and no producer-id block is ever handed out twice across failovers (KIP-730:
a block is answered only after its ProducerIdsRecord commits, and the next active controller
continues from the committed record).

Each round: two AllocateProducerIds and one CreateTopics on the active controller, then SIGKILL
of its process, a new election, and a restart of the killed node. Six rounds keep the test
within its budget on a 2-core runner; `bench/raft.py` (c) measures the failover time itself.
"""

from __future__ import annotations

import dataclasses

import pytest

from kafka_rpc.client import KafkaConnectionError
from kafka_rpc.protocol import codec
from kafka_rpc.protocol.errors import ErrorCode
from tests.integration.test_controller import registration
from tests.integration.test_raft_cluster import running_cluster, until

pytestmark = [pytest.mark.integration, pytest.mark.slow]

ROUNDS = 6
BROKER = 100  # a broker of the test's own (the nodes' brokers are 1-3)
NOT_CONTROLLER = int(ErrorCode.NOT_CONTROLLER)
RETRY_CREATE = (NOT_CONTROLLER, int(ErrorCode.INVALID_REPLICATION_FACTOR))


def _create(name: str, validate_only: bool = False):
    m = codec.module("CreateTopicsRequest")
    return m.CreateTopicsRequest(
        topics=(m.CreatableTopic(name=name, num_partitions=2, replication_factor=1),),
        timeout_ms=5000,
        validate_only=validate_only,
    )


def _allocate(epoch: int):
    return codec.message_class("AllocateProducerIdsRequest")(broker_id=BROKER, broker_epoch=epoch)


async def on_active_controller(cluster, request, code_of, retry=(NOT_CONTROLLER,)):
    """Send ``request`` to whichever node is the active controller, following elections:
    retried on a connection error, a timeout or a code in ``retry``; returns the response."""

    async def attempt():
        lead = await cluster.agreed_leader()
        if lead is None:
            return None
        try:
            client = await cluster.client(lead.leader_id)
            resp = await client.request(request, timeout=5.0)
        except (OSError, TimeoutError, KafkaConnectionError):
            await cluster.drop_client(lead.leader_id)
            return None
        return None if code_of(resp) in retry else resp

    return await until(attempt, f"an answer to {type(request).__name__} from the controller")


async def test_blocks_and_topics_survive_controller_sigkills(tmp_path):
    async with running_cluster(tmp_path) as cluster:
        request = dataclasses.replace(registration(BROKER), cluster_id=cluster.cluster_id)
        reg = await on_active_controller(cluster, request, lambda r: r.error_code)
        assert reg.error_code == 0, reg
        epoch = reg.broker_epoch
        blocks: list[tuple[int, int]] = []
        topics: list[str] = []
        for k in range(ROUNDS):
            for _ in range(2):
                r = await on_active_controller(cluster, _allocate(epoch), lambda r: r.error_code)
                assert r.error_code == 0, r
                blocks.append((r.producer_id_start, r.producer_id_len))
            name = f"survivor-{k}"
            # until the nodes' brokers are unfenced no replica can be placed (Kafka answers so)
            r = await on_active_controller(
                cluster, _create(name), lambda r: r.topics[0].error_code, retry=RETRY_CREATE
            )
            assert r.topics[0].error_code == 0, r
            topics.append(name)
            lead = await until(cluster.agreed_leader, "a leader before the kill")
            victim = lead.leader_id
            cluster.kill(victim)
            await cluster.drop_client(victim)
            await until(lambda v=victim, e=lead.leader_epoch: _new_leader(cluster, v, e),
                        "a new leader after the SIGKILL")  # fmt: skip
            await cluster.restart(victim)

        # never the same id twice: the blocks are disjoint and in increasing order
        assert all(n == 1000 for _, n in blocks), blocks
        starts = [s for s, _ in blocks]
        assert starts == sorted(starts) and len(set(starts)) == len(starts), starts
        assert all(b - a >= 1000 for a, b in zip(starts, starts[1:])), starts
        # every topic created before a kill is still there: creating it again is refused
        for name in topics:
            r = await on_active_controller(
                cluster, _create(name, validate_only=True), lambda r: r.topics[0].error_code
            )
            assert r.topics[0].error_code == ErrorCode.TOPIC_ALREADY_EXISTS, (name, r)
        # and the next block continues after the last one handed out
        r = await on_active_controller(cluster, _allocate(epoch), lambda r: r.error_code)
        assert r.error_code == 0 and r.producer_id_start >= starts[-1] + 1000, r


async def _new_leader(cluster, old: int, old_epoch: int):
    lead = await cluster.agreed_leader(among=[i for i in cluster.live() if i != old])
    return lead if lead is not None and lead.leader_epoch > old_epoch else None
