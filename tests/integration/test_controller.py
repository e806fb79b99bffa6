"""The controller listener of a running single-node server, over real sockets: BrokerRegistration
(broker epoch = the RegisterBrokerRecord's offset), BrokerHeartbeat (fenced until caught up to
it), AllocateProducerIds (consecutive blocks, STALE_BROKER_EPOCH), and blocks that continue
across a restart (log replay and snapshot load) instead of repeating."""

from __future__ import annotations

import asyncio
import uuid

import pytest

from kafka_rpc.broker.lifecycle import registration_features
from kafka_rpc.client import KafkaRpcClient
from kafka_rpc.protocol import codec
from kafka_rpc.protocol.errors import ErrorCode
from tests.integration.conftest import start_server
from tests.raft.test_driver_single import CLUSTER_ID, free_port, start_single
from tests.waiting import until

pytestmark = pytest.mark.integration

TIMEOUT = 5.0
R = codec.message_class
BR = codec.module("BrokerRegistrationRequest")
INCARNATION = uuid.uuid4()
#: not the node's own id: its broker role registers itself as broker 1
BROKER = 100


def registration(broker_id: int = BROKER):
    return R("BrokerRegistrationRequest")(
        broker_id=broker_id,
        cluster_id=CLUSTER_ID,
        incarnation_id=INCARNATION,
        log_dirs=(uuid.UUID(int=(broker_id + 1) << 64),),
        listeners=(
            BR.Listener(name="PLAINTEXT", host="127.0.0.1", port=9092, security_protocol=0),
        ),
        # a kafka-rpc broker (one without our feature is a Kafka broker: classic topics would
        # be placed on it alone, kafka_rpc.controller.placement)
        features=registration_features(),
        rack=None,
    )


async def until_active(client: KafkaRpcClient):
    """Register once the node has become the active controller (NOT_CONTROLLER before)."""

    async def answered():
        resp = await client.request(registration(), timeout=TIMEOUT)
        return None if resp.error_code == ErrorCode.NOT_CONTROLLER else resp

    return await until(answered, "the active controller", timeout=TIMEOUT)


async def allocate(client: KafkaRpcClient, epoch: int, broker_id: int = BROKER):
    req = R("AllocateProducerIdsRequest")(broker_id=broker_id, broker_epoch=epoch)
    return await client.request(req, timeout=TIMEOUT)


async def heartbeat(client: KafkaRpcClient, epoch: int, offset: int):
    req = R("BrokerHeartbeatRequest")(
        broker_id=BROKER, broker_epoch=epoch, current_metadata_offset=offset
    )
    return await client.request(req, timeout=TIMEOUT)


@pytest.fixture
def restartable(tmp_path):  # the test calls restartable.stop() in its finally
    """start() -> (running, client) on the same data directory; everything stopped at the end."""
    live: list = []

    async def start(**extra):
        running, port = await start_single(tmp_path, **extra)
        client = await KafkaRpcClient.connect(f"127.0.0.1:{port}", connect_timeout=TIMEOUT)
        live.append((running, client))
        return running, client

    async def stop():
        while live:
            running, client = live.pop()
            await client.close()
            await running.stop()

    start.stop = stop
    return start


async def test_register_heartbeat_allocate_and_continue_after_restart(restartable):
    try:
        running, client = await restartable(**{"controller.snapshot.minimum.records": "1"})
        reg = await asyncio.wait_for(until_active(client), TIMEOUT * 2)
        assert reg.error_code == 0
        epoch = reg.broker_epoch
        # the broker epoch is the offset of its RegisterBrokerRecord in the metadata log
        raft_log = running.server.raft.log
        (batch,) = list(raft_log.batches(epoch, epoch + 1))
        rec, _ = codec.decode_record(batch.records[epoch - batch.base_offset])
        assert type(rec).__spec_name__ == "RegisterBrokerRecord"
        assert (rec.broker_id, rec.broker_epoch, rec.fenced) == (BROKER, epoch, True)
        assert running.server.controller.image.brokers[BROKER].epoch == epoch

        # fenced until its metadata offset reaches the registration, then unfenced
        hb = await heartbeat(client, epoch, epoch - 1)
        assert (hb.error_code, hb.is_caught_up, hb.is_fenced) == (0, False, True)
        hb = await heartbeat(client, epoch, epoch)
        assert (hb.error_code, hb.is_caught_up, hb.is_fenced) == (0, True, False)
        assert not running.server.controller.image.brokers[BROKER].fenced
        hb = await heartbeat(client, epoch + 1, epoch)
        assert hb.error_code == ErrorCode.STALE_BROKER_EPOCH

        a = await allocate(client, epoch)
        b = await allocate(client, epoch)
        assert (a.error_code, a.producer_id_start, a.producer_id_len) == (0, 0, 1000)
        assert (b.error_code, b.producer_id_start, b.producer_id_len) == (0, 1000, 1000)
        stale = await allocate(client, epoch + 1)
        assert stale.error_code == ErrorCode.STALE_BROKER_EPOCH
        assert running.server.controller.image.producer_ids.next_producer_id == 2000
        await restartable.stop()

        # restart: the image is rebuilt (from a snapshot and the log tail) and blocks go on
        running, client = await restartable()
        reg2 = await asyncio.wait_for(until_active(client), TIMEOUT * 2)
        # the same incarnation again amends its registration: the epoch stays (Kafka's
        # ClusterControlManager.registerBroker), read back from the snapshot and the log
        assert reg2.error_code == 0 and reg2.broker_epoch == epoch
        c = await allocate(client, reg2.broker_epoch)
        # never a block handed out before (2000, unless another broker took one meanwhile)
        assert c.error_code == 0 and c.producer_id_start >= 2000, c
        assert running.server.raft.log.latest_snapshot_id() is not None
    finally:
        await restartable.stop()


async def test_a_controller_that_is_not_active_answers_not_controller(tmp_path):
    """Voter 1 of two, voter 2 never started: no leader, so no active controller."""
    port, other = free_port(), free_port()
    running = await start_server(
        tmp_path,
        **{
            # controller only: a broker role would not open its listener without a leader
            "listeners": f"CONTROLLER://127.0.0.1:{port}",
            "process.roles": "controller",
            "controller.quorum.voters": f"1@127.0.0.1:{port},2@127.0.0.1:{other}",
            "cluster.id": CLUSTER_ID,
        },
    )
    try:
        client = await KafkaRpcClient.connect(f"127.0.0.1:{port}", connect_timeout=TIMEOUT)
        try:
            resp = await client.request(registration(), timeout=TIMEOUT)
            assert resp.error_code == ErrorCode.NOT_CONTROLLER
            resp = await allocate(client, 0)
            assert resp.error_code == ErrorCode.NOT_CONTROLLER
            resp = await heartbeat(client, 0, 0)
            assert resp.error_code == ErrorCode.NOT_CONTROLLER
        finally:
            await client.close()
    finally:
        await running.stop()
