"""AlterPartition (56), ElectLeaders (43) and the partition reassignment APIs (45, 46) on the
controller listener of a running node, over a real socket: three brokers registered and
unfenced by hand, one RF=3 topic; bad AlterPartition requests (stale partition epoch, a leader
epoch from the future, an ISR naming a fenced or an unknown broker, an unknown topic id) get
Kafka's codes and leave the partition as it was; a good one changes the ISR and answers the
partition epoch after the change."""

from __future__ import annotations

import uuid

import pytest

from kafka_rpc.broker.lifecycle import registration_features
from kafka_rpc.client import KafkaRpcClient
from kafka_rpc.protocol import codec
from kafka_rpc.protocol.errors import ErrorCode as E
from tests.raft.test_driver_single import CLUSTER_ID, start_single
from tests.waiting import until

pytestmark = pytest.mark.integration

TIMEOUT = 5.0
R = codec.message_class
BR = codec.module("BrokerRegistrationRequest")
AP = codec.module("AlterPartitionRequest")
CT = codec.module("CreateTopicsRequest")
BROKERS = (100, 101, 102)


async def _call(client: KafkaRpcClient, req, version: int | None = None):
    kw = {} if version is None else {"version": version}
    return await client.request(req, timeout=TIMEOUT, **kw)


async def _register(client: KafkaRpcClient, bid: int) -> int:
    req = R("BrokerRegistrationRequest")(
        broker_id=bid, cluster_id=CLUSTER_ID, incarnation_id=uuid.uuid4(),
        log_dirs=(uuid.UUID(int=(bid + 1) << 64),),
        listeners=(BR.Listener(name="PLAINTEXT", host="127.0.0.1", port=bid, security_protocol=0),),
        features=registration_features(),  # a kafka-rpc broker's: ours are finalized
        rack=None,
    )  # fmt: skip

    async def answered():  # NOT_CONTROLLER until the node is the active controller
        resp = await _call(client, req)
        return None if resp.error_code == E.NOT_CONTROLLER else resp

    resp = await until(answered, "the active controller", timeout=2 * TIMEOUT)
    assert resp.error_code == 0, resp
    return resp.broker_epoch


async def _heartbeat(client, bid, epoch, *, fence=False):
    req = R("BrokerHeartbeatRequest")(
        broker_id=bid, broker_epoch=epoch, current_metadata_offset=1 << 40, want_fence=fence
    )
    resp = await _call(client, req)
    assert resp.error_code == 0 and resp.is_fenced == fence, resp
    return resp


def _alter(bid, epoch, topic_id, *, leader_epoch, partition_epoch, isr):
    d = AP.PartitionData(
        partition_index=0,
        leader_epoch=leader_epoch,
        partition_epoch=partition_epoch,
        new_isr_with_epochs=tuple(AP.BrokerState(broker_id=b, broker_epoch=-1) for b in isr),
    )
    return R("AlterPartitionRequest")(
        broker_id=bid,
        broker_epoch=epoch,
        topics=(AP.TopicData(topic_id=topic_id, partitions=(d,)),),
    )


async def test_alter_partition_over_the_wire(tmp_path):
    running, port = await start_single(tmp_path)
    client = await KafkaRpcClient.connect(f"127.0.0.1:{port}", connect_timeout=TIMEOUT)
    try:
        epochs = {b: await _register(client, b) for b in BROKERS}
        for b in BROKERS:
            await _heartbeat(client, b, epochs[b])
        created = await _call(
            client,
            R("CreateTopicsRequest")(
                topics=(CT.CreatableTopic(
                    name="isr", num_partitions=-1, replication_factor=-1,
                    assignments=(CT.CreatableReplicaAssignment(partition_index=0,
                                                               broker_ids=BROKERS),),
                ),),
                timeout_ms=5000,
            ),
        )  # fmt: skip
        [t] = created.topics
        assert t.error_code == 0, t
        tid = t.topic_id
        image = lambda: running.server.controller.image  # noqa: E731

        def partition():
            return image().topics[tid].partitions[0]

        p = partition()
        assert (p.leader, p.isr, p.leader_epoch, p.partition_epoch) == (100, BROKERS, 0, 0)
        await _heartbeat(client, 102, epochs[102], fence=True)  # 102 fenced: leaves the ISR
        p = partition()
        assert p.isr == (100, 101) and p.partition_epoch == 1

        bad = {
            "stale partition epoch": (
                _alter(100, epochs[100], tid, leader_epoch=0, partition_epoch=0, isr=(100,)),
                E.INVALID_UPDATE_VERSION,
            ),
            "leader epoch from the future": (
                _alter(100, epochs[100], tid, leader_epoch=1, partition_epoch=1, isr=(100,)),
                E.NOT_CONTROLLER,
            ),
            "fenced broker in the ISR": (
                _alter(100, epochs[100], tid, leader_epoch=0, partition_epoch=1,
                       isr=(100, 101, 102)),
                E.INELIGIBLE_REPLICA,
            ),
            "unknown broker in the ISR": (
                _alter(100, epochs[100], tid, leader_epoch=0, partition_epoch=1, isr=(100, 7)),
                E.INVALID_REQUEST,  # not a replica: Replicas.validateIsr comes first
            ),
            "unknown topic id": (
                _alter(100, epochs[100], uuid.uuid4(), leader_epoch=0, partition_epoch=1,
                       isr=(100,)),
                E.UNKNOWN_TOPIC_ID,
            ),
            "stale broker epoch": (
                _alter(100, epochs[100] + 1, tid, leader_epoch=0, partition_epoch=1, isr=(100,)),
                E.STALE_BROKER_EPOCH,
            ),
        }  # fmt: skip
        for what, (req, code) in bad.items():
            before = partition()
            resp = await _call(client, req)
            got = resp.error_code or resp.topics[0].partitions[0].error_code
            assert got == code, (what, resp)
            assert partition() == before, what

        # the wire's v2 (NewIsr) and v3 (NewIsrWithEpochs) both change the ISR
        resp = await _call(
            client, _alter(100, epochs[100], tid, leader_epoch=0, partition_epoch=1, isr=(100,))
        )
        r = resp.topics[0].partitions[0]
        assert (r.error_code, r.isr, r.partition_epoch, r.leader_id) == (0, (100,), 2, 100)
        v2 = R("AlterPartitionRequest")(
            broker_id=100, broker_epoch=epochs[100],
            topics=(AP.TopicData(topic_id=tid, partitions=(AP.PartitionData(
                partition_index=0, leader_epoch=0, partition_epoch=2, new_isr=(100, 101)),)),),
        )  # fmt: skip
        r = (await _call(client, v2, version=2)).topics[0].partitions[0]
        assert (r.error_code, r.isr, r.partition_epoch) == (0, (100, 101), 3)
        assert partition().isr == (100, 101)

        # ElectLeaders: the preferred leader already leads; a reassignment is listed
        el = await _call(
            client,
            R("ElectLeadersRequest")(
                election_type=0,
                topic_partitions=(codec.module("ElectLeadersRequest").TopicPartitions(
                    topic="isr", partitions=(0,)),),
            ),
        )  # fmt: skip
        assert el.replica_election_results[0].partition_result[0].error_code == (
            E.ELECTION_NOT_NEEDED
        )
        RA = codec.module("AlterPartitionReassignmentsRequest")
        ra = await _call(
            client,
            R("AlterPartitionReassignmentsRequest")(topics=(RA.ReassignableTopic(
                name="isr", partitions=(RA.ReassignablePartition(
                    partition_index=0, replicas=(101, 100, 102)),)),)),
        )  # fmt: skip
        assert ra.error_code == 0 and ra.responses[0].partitions[0].error_code == 0
        assert partition().replicas == (101, 100, 102)  # a reordering completes at once
        ls = await _call(client, R("ListPartitionReassignmentsRequest")(topics=None))
        assert ls.error_code == 0 and ls.topics == ()
    finally:
        await client.close()
        await running.stop()
