"""The records a Kafka controller writes that our controller only replays (or, for
RegisterControllerRecord, writes on a ControllerRegistration): each replays as Kafka's control
manager or image delta does, round-trips through our snapshots (so a snapshot of ours hands it on
to Kafka voters unchanged), and the controller-side rules of ControllerRegistration and
DescribeCluster (KIP-919)."""

from __future__ import annotations

import uuid
from types import SimpleNamespace

import pytest

from kafka_rpc.controller import cluster
from kafka_rpc.controller.base import ControllerContext
from kafka_rpc.controller.image import EMPTY
from kafka_rpc.controller.replay import ReplayError, replay, replay_all
from kafka_rpc.controller.snapshot import image_records, load
from kafka_rpc.protocol import codec
from kafka_rpc.protocol.errors import ErrorCode

R = codec.message_class
T1 = uuid.UUID(int=0xA1, version=4)
T2 = uuid.UUID(int=0xA2, version=4)
INC = uuid.UUID(int=0xC1, version=4)


def mv(level=25):
    return R("FeatureLevelRecord")(name="metadata.version", feature_level=level)


def register_controller_record(cid=1, inc=INC, port=9093):
    m = codec.module("RegisterControllerRecord")
    return R("RegisterControllerRecord")(
        controller_id=cid, incarnation_id=inc, zk_migration_ready=False,
        end_points=(m.ControllerEndpoint(name="CONTROLLER", host="127.0.0.1", port=port,
                                         security_protocol=0),),
        features=(m.ControllerFeature(name="metadata.version", min_supported_version=7,
                                      max_supported_version=25),),
    )  # fmt: skip


def quota(user, key, value, remove=False):
    m = codec.module("ClientQuotaRecord")
    return R("ClientQuotaRecord")(entity=(m.EntityData(entity_type="user", entity_name=user),),
                                  key=key, value=value, remove=remove)  # fmt: skip


def token(tid, expiry=2000):
    return R("DelegationTokenRecord")(owner="User:alice", requester="User:alice",
                                      renewers=("User:bob",), issue_timestamp=1000,
                                      max_timestamp=9000, expiration_timestamp=expiry,
                                      token_id=tid)  # fmt: skip


def roundtrip(img):
    back = load(image_records(img), img.last_offset, img.last_epoch)
    assert back == img
    return back


def test_register_controller_record_replaces_the_previous_incarnation_and_is_snapshotted():
    img = replay_all(EMPTY, [(mv(), 0), (register_controller_record(1), 1),
                             (register_controller_record(2, port=9094), 2)])  # fmt: skip
    assert sorted(img.controllers) == [1, 2]
    c1 = img.controllers[1]
    assert c1.endpoints[0].port == 9093 and c1.features == (("metadata.version", 7, 25),)
    inc2 = uuid.UUID(int=0xC2, version=4)
    img = replay(img, register_controller_record(1, inc2, port=9999), 3)
    c1 = img.controllers[1]
    assert c1.incarnation_id == inc2 and c1.endpoints[0].port == 9999
    roundtrip(img)
    # written after the brokers, before the topics (Kafka's ClusterImage.write)
    types = [codec.decode_record(r)[0].__spec_name__ for r in image_records(img)]
    assert types == ["FeatureLevelRecord", "RegisterControllerRecord", "RegisterControllerRecord"]


def test_client_quotas_set_remove_and_snapshot():
    img = replay_all(EMPTY, [(quota("alice", "producer_byte_rate", 1024.0), 1),
                             (quota(None, "consumer_byte_rate", 5.0), 2),
                             (quota("alice", "request_percentage", 50.0), 3)])  # fmt: skip
    alice = (("user", "alice"),)
    assert dict(img.client_quotas[alice]) == {"producer_byte_rate": 1024.0,
                                              "request_percentage": 50.0}  # fmt: skip
    assert dict(img.client_quotas[(("user", None),)]) == {"consumer_byte_rate": 5.0}
    roundtrip(img)
    img = replay(img, quota("alice", "producer_byte_rate", 0.0, remove=True), 4)
    img = replay(img, quota("alice", "request_percentage", 0.0, remove=True), 5)
    assert alice not in img.client_quotas  # the entity goes with its last key
    roundtrip(img)


def test_delegation_tokens_and_their_removal():
    img = replay_all(EMPTY, [(mv(), 0), (token("t1"), 1), (token("t2"), 2), (token("t1", 5000), 3)])
    assert sorted(img.delegation_tokens) == ["t1", "t2"]
    assert img.delegation_tokens["t1"].expiration_timestamp == 5000
    roundtrip(img)
    img = replay(img, R("RemoveDelegationTokenRecord")(token_id="t1"), 4)
    img = replay(img, R("RemoveDelegationTokenRecord")(token_id="never"), 5)  # no error
    assert sorted(img.delegation_tokens) == ["t2"]


def test_remove_user_scram_credential():
    cred = R("UserScramCredentialRecord")(name="alice", mechanism=1, salt=b"s", stored_key=b"k",
                                          server_key=b"v", iterations=4096)  # fmt: skip
    img = replay(EMPTY, cred, 1)
    img = replay(img, R("RemoveUserScramCredentialRecord")(name="alice", mechanism=1), 2)
    assert (1, "alice") not in img.scram
    with pytest.raises(ReplayError, match="Unable to find credential to delete"):
        replay(img, R("RemoveUserScramCredentialRecord")(name="alice", mechanism=1), 3)


def _topic(name, tid, elr):
    return [
        (R("TopicRecord")(name=name, topic_id=tid), 1),
        (R("PartitionRecord")(partition_id=0, topic_id=tid, replicas=(1, 2, 3), isr=(1,),
                              leader=1, leader_epoch=0, partition_epoch=0,
                              eligible_leader_replicas=elr,
                              last_known_elr=(3,) if elr else ()), 2),
        (R("PartitionRecord")(partition_id=1, topic_id=tid, replicas=(1, 2), isr=(1, 2),
                              leader=1, leader_epoch=0, partition_epoch=0), 3),
    ]  # fmt: skip


def test_clear_elr_of_one_topic_or_of_all():
    img = replay_all(EMPTY, [*_topic("a", T1, (2,)), *_topic("b", T2, (2, 3))])
    one = replay(img, R("ClearElrRecord")(topic_name="a"), 10)
    pa, pb = one.topics[T1].partitions[0], one.topics[T2].partitions[0]
    assert (pa.elr, pa.last_known_elr) == ((), ()) and pa.partition_epoch == 1
    assert pb.elr == (2, 3)
    assert one.topics[T1].partitions[1].partition_epoch == 0  # had no ELR: untouched
    every = replay(img, R("ClearElrRecord")(topic_name=""), 10)
    assert all(not p.elr and not p.last_known_elr
               for t in every.topics.values() for p in t.partitions.values())  # fmt: skip
    with pytest.raises(ReplayError, match="Unable to find a topic named"):
        replay(img, R("ClearElrRecord")(topic_name="nope"), 10)


def test_zk_migration_state_is_a_no_op():
    img = replay(EMPTY, R("ZkMigrationStateRecord")(zk_migration_state=3), 7)
    assert img.last_offset == 7 and img.controllers == EMPTY.controllers


def _registration_request(cid=3):
    m = codec.module("ControllerRegistrationRequest")
    return R("ControllerRegistrationRequest")(
        controller_id=cid, incarnation_id=INC, zk_migration_ready=True,
        listeners=(m.Listener(name="CONTROLLER", host="h3", port=9095, security_protocol=0),),
        features=(m.Feature(name="metadata.version", min_supported_version=7,
                            max_supported_version=25),),
    )  # fmt: skip


def _ctx():
    return ControllerContext(now_ms=0, next_offset=10, cluster_id="c")


def test_controller_registration_writes_one_record_from_3_7_iv0_on():
    img = replay(EMPTY, mv(15), 0)
    res = cluster.register_controller(img, _registration_request(), _ctx())
    assert res.response.error_code == 0 and len(res.records) == 1
    rec = res.records[0]
    assert rec.controller_id == 3 and rec.zk_migration_ready is False  # Kafka writes false
    assert rec.end_points[0].host == "h3" and rec.features[0].max_supported_version == 25
    img = replay(img, rec, 10)
    assert img.controllers[3].endpoints[0].port == 9095
    old = replay(EMPTY, mv(14), 0)
    res = cluster.register_controller(old, _registration_request(), _ctx())
    assert res.records == [] and res.response.error_code == ErrorCode.UNSUPPORTED_VERSION


def test_describe_cluster_lists_registered_controllers():
    from kafka_rpc.handlers.cluster import describe_cluster_response

    img = replay_all(EMPTY, [(mv(), 0), (register_controller_record(1), 1),
                             (register_controller_record(2, port=9094), 2)])  # fmt: skip
    server = SimpleNamespace(
        controller=SimpleNamespace(image=img, active_controller_id=2), cluster_id="c",
        node_id=1, quorum_voters=lambda: {1: ("x", 1), 2: ("y", 2), 3: ("z", 3)},
        bound={},
    )  # fmt: skip
    req = R("DescribeClusterRequest")(endpoint_type=2)
    listener = SimpleNamespace(name="CONTROLLER", role="controller")
    resp = describe_cluster_response(server, req, 2, listener)
    assert [(b.broker_id, b.port) for b in resp.brokers] == [(1, 9093), (2, 9094)]
    assert resp.controller_id == 2
    server.controller.active_controller_id = 3  # the leader has not registered: -1
    assert describe_cluster_response(server, req, 2, listener).controller_id == -1


def test_describe_cluster_controllers_before_any_registered_are_the_quorums_voters():
    """No RegisterControllerRecord yet: the voters of the Raft replica's voter set (a dynamic
    quorum's), at their address; this node at its bound listener."""
    from kafka_rpc.handlers.cluster import describe_cluster_response

    img = replay_all(EMPTY, [(mv(), 0)])
    server = SimpleNamespace(
        controller=SimpleNamespace(image=img, active_controller_id=4), cluster_id="c",
        node_id=1, quorum_voters=lambda: {1: ("x", 1), 4: ("h4", 9094)},
        bound={"CONTROLLER": ("127.0.0.1", 19093)},
    )  # fmt: skip
    req = R("DescribeClusterRequest")(endpoint_type=2)
    listener = SimpleNamespace(name="CONTROLLER", role="controller")
    resp = describe_cluster_response(server, req, 2, listener)
    assert [(b.broker_id, b.host, b.port) for b in resp.brokers] == [
        (1, "127.0.0.1", 19093), (4, "h4", 9094)]  # fmt: skip
    assert resp.controller_id == 4
