"""AddRaftVoter (80), RemoveRaftVoter (81), UpdateRaftVoter (82) and DescribeQuorum (55): which
listener serves them, where they go (the metadata log's driver on the controller listener, the
active controller from the broker listener, as Kafka's ControllerApis and KafkaApis), and the
cluster operation each needs (ControllerApis' authorization)."""

from __future__ import annotations

import uuid
from types import SimpleNamespace

import pytest

import kafka_rpc.handlers  # noqa: F401 - fills the default registry
from kafka_rpc.api.registry import default_registry
from kafka_rpc.broker.channel import ControllerUnavailableError
from kafka_rpc.handlers.raft import FORWARD_MOVED
from kafka_rpc.protocol import codec
from kafka_rpc.protocol.errors import ErrorCode as E
from kafka_rpc.raft.api import METADATA_TOPIC_NAME
from kafka_rpc.raft.routing import RaftPartitions
from kafka_rpc.security.authorizer import (
    AclBinding,
    AclOperation,
    AclPermissionType,
    PatternType,
    ResourceType,
    StandardAuthorizer,
)

R = codec.message_class
DIR = uuid.UUID("33333333-3333-4333-8333-333333333333")


def add_voter(voter_id: int = 4):
    m = codec.module("AddRaftVoterRequest")
    return m.AddRaftVoterRequest(
        cluster_id="c", timeout_ms=30_000, voter_id=voter_id, voter_directory_id=DIR,
        listeners=(m.Listener(name="CONTROLLER", host="h4", port=9093),),
    )  # fmt: skip


def remove_voter(voter_id: int = 4):
    return R("RemoveRaftVoterRequest")(cluster_id="c", voter_id=voter_id, voter_directory_id=DIR)


def describe_quorum(topic: str = METADATA_TOPIC_NAME):
    m = codec.module("DescribeQuorumRequest")
    part = m.PartitionData(partition_index=0)
    return m.DescribeQuorumRequest(topics=(m.TopicData(topic_name=topic, partitions=(part,)),))


class _Driver:
    """A Raft driver that answers every request with ``answers[api_key]`` and records calls."""

    def __init__(self, answers):
        self.answers = answers
        self.calls: list[tuple[int, int, object]] = []

    async def handle(self, api_key, version, request):
        self.calls.append((api_key, version, request))
        return self.answers[api_key]


class _Channel:
    def __init__(self, answer):
        self.answer = answer
        self.sent: list[tuple[object, int, frozenset]] = []

    async def send(self, request, version=None, timeout=None, attempts=2,
                   moved=frozenset()):  # fmt: skip
        self.sent.append((request, version, moved))
        if self.answer is None:
            raise ControllerUnavailableError("nobody")
        return 1, self.answer


def _ctx(role, api_key, version, *, raft=None, active=False, channel=None, partitions=None):
    services = SimpleNamespace(
        raft=raft,
        controller=SimpleNamespace(is_active=active),
        controller_channel=channel,
        raft_partitions=partitions or RaftPartitions(),
        coordinator=None,
    )
    return SimpleNamespace(
        api_key=api_key, api_version=version, services=services,
        listener=SimpleNamespace(role=role),
    )  # fmt: skip


def _handler(name):
    return default_registry._handlers[name]


def test_listeners_and_versions():
    ctl = {e.api_key: (e.min_version, e.max_version) for e in
           default_registry.table("controller").values()}  # fmt: skip
    brk = {e.api_key: (e.min_version, e.max_version) for e in
           default_registry.table("broker").values()}  # fmt: skip
    assert ctl[80] == brk[80] == (0, 1)
    assert ctl[81] == brk[81] == (0, 0)
    assert ctl[82] == (0, 0) and 82 not in brk  # UpdateRaftVoter: controllers only
    assert 55 in ctl and 55 in brk
    # the replication RPCs are served on the broker listener (coordinator partitions' groups)
    # but not advertised there, as a Kafka broker lists none of them
    advertised = {k for k, _lo, _hi in default_registry.api_versions("broker")}
    for key in (52, 53, 54, 59):
        assert key in brk and key not in advertised, key
        assert key in {k for k, _lo, _hi in default_registry.api_versions("controller")}


@pytest.mark.parametrize(
    ("name", "key", "version", "request_"),
    [("AddRaftVoterRequest", 80, 1, add_voter()), ("AddRaftVoterRequest", 80, 0, add_voter()),
     ("RemoveRaftVoterRequest", 81, 0, remove_voter()),
     ("UpdateRaftVoterRequest", 82, 0, R("UpdateRaftVoterRequest")(cluster_id="c")),
     ("DescribeQuorumRequest", 55, 2, describe_quorum())],
)  # fmt: skip
async def test_controller_listener_hands_the_request_to_the_metadata_driver(
    name, key, version, request_
):
    answer = R(name[: -len("Request")] + "Response")(error_code=E.NOT_LEADER_OR_FOLLOWER)
    driver = _Driver({key: answer})
    channel = _Channel(None)
    # whatever the driver answers is the answer, leader or not; nothing is forwarded
    for active in (True, False):
        ctx = _ctx("controller", key, version, raft=driver, active=active, channel=channel)
        assert await _handler(name)(ctx, request_) is answer
    assert driver.calls == [(key, version, request_)] * 2 and channel.sent == []


async def test_controller_listener_without_a_quorum_answers_not_controller():
    from kafka_rpc.api.context import error_response

    for name, req in (("AddRaftVoterRequest", add_voter()),
                      ("RemoveRaftVoterRequest", remove_voter())):  # fmt: skip
        ctx = _ctx("controller", 80, 0)
        with pytest.raises(Exception) as info:
            await _handler(name)(ctx, req)
        assert info.value.code == E.NOT_CONTROLLER
        entry = next(e for e in default_registry.table("controller").values() if e.name == name)
        resp = error_response(entry, req, 0, E.NOT_CONTROLLER)
        assert (resp.error_code, resp.error_message) == (
            E.NOT_CONTROLLER,
            "This is not the correct controller for this cluster.",
        )


@pytest.mark.parametrize(
    ("name", "key", "version", "request_"),
    [("AddRaftVoterRequest", 80, 1, add_voter()),
     ("RemoveRaftVoterRequest", 81, 0, remove_voter()),
     ("DescribeQuorumRequest", 55, 1, describe_quorum())],
)  # fmt: skip
async def test_broker_listener_forwards_to_the_active_controller(name, key, version, request_):
    resp_cls = R(name[: -len("Request")] + "Response")
    relayed = resp_cls(error_code=0)
    # not the active controller here: sent on at the request's version, its answer relayed,
    # and an answer saying "not the leader" moves on to the next candidate
    driver = _Driver({key: resp_cls(error_code=0)})
    channel = _Channel(relayed)
    ctx = _ctx("broker", key, version, raft=driver, active=False, channel=channel)
    assert await _handler(name)(ctx, request_) is relayed
    assert channel.sent == [(request_, version, FORWARD_MOVED)] and driver.calls == []
    assert {E.NOT_CONTROLLER, E.NOT_LEADER_OR_FOLLOWER} <= FORWARD_MOVED
    # the active controller's node answers itself
    mine = resp_cls(error_code=E.DUPLICATE_VOTER)
    driver = _Driver({key: mine})
    channel = _Channel(relayed)
    ctx = _ctx("broker", key, version, raft=driver, active=True, channel=channel)
    assert await _handler(name)(ctx, request_) is mine and channel.sent == []
    # ... unless its replica says it no longer leads: then forwarded
    driver = _Driver({key: resp_cls(error_code=E.NOT_LEADER_OR_FOLLOWER)})
    ctx = _ctx("broker", key, version, raft=driver, active=True, channel=channel)
    assert await _handler(name)(ctx, request_) is relayed and len(channel.sent) == 1
    # nobody answers: REQUEST_TIMED_OUT for the whole request, with Kafka's forwarding text
    ctx = _ctx("broker", key, version, raft=None, channel=_Channel(None))
    resp = await _handler(name)(ctx, request_)
    assert resp.error_code == E.REQUEST_TIMED_OUT
    if key != 55 or version >= 2:
        assert resp.error_message == "No active controller could be reached."
    if key == 55:
        assert resp.topics == ()


async def test_broker_listener_answers_another_raft_partitions_describe_quorum_itself():
    answer = R("DescribeQuorumResponse")(error_code=0)
    partitions = RaftPartitions()
    driver = _Driver({55: answer})
    tid = uuid.uuid4()
    partitions.register(tid, "__diskless-metadata", 0, driver)
    channel = _Channel(None)
    ctx = _ctx("broker", 55, 1, raft=_Driver({}), channel=channel, partitions=partitions)
    assert await _handler("DescribeQuorumRequest")(ctx, describe_quorum("__diskless-metadata")) \
        is answer  # fmt: skip
    assert channel.sent == []


def test_authorization_is_kafkas_controller_apis():
    """ALTER on the cluster for AddRaftVoter / RemoveRaftVoter, CLUSTER_ACTION for
    UpdateRaftVoter, DESCRIBE for DescribeQuorum (``ControllerApis.handle*``)."""
    auth = StandardAuthorizer(allow_everyone_if_no_acl=False)
    peer = ("10.0.0.1", 1)

    def grant(op):
        auth.add_acl(op, AclBinding(ResourceType.CLUSTER, "kafka-cluster", PatternType.LITERAL,
                                    "User:alice", "*", op, AclPermissionType.ALLOW))  # fmt: skip

    def allowed(key):
        return auth.authorize_request("User:alice", peer, key, None) == 0

    assert not any(allowed(k) for k in (55, 80, 81, 82))
    grant(AclOperation.CLUSTER_ACTION)
    assert allowed(82) and not allowed(80) and not allowed(81) and not allowed(55)
    auth.remove_acl(AclOperation.CLUSTER_ACTION)
    grant(AclOperation.ALTER)  # ALTER implies DESCRIBE
    assert allowed(80) and allowed(81) and allowed(55) and not allowed(82)
    auth.remove_acl(AclOperation.ALTER)
    assert auth.authorize_request("User:alice", peer, 81, None) == E.CLUSTER_AUTHORIZATION_FAILED
