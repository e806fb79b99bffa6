"""Metadata answered from a hand-built MetadataImage, through the wire codec at several versions."""

from __future__ import annotations

import uuid
from types import SimpleNamespace

import pytest
from pyrsistent import pmap

from kafka_rpc.config import Endpoint as CfgEndpoint
from kafka_rpc.controller.image import (
    BrokerRegistration,
    Endpoint,
    MetadataImage,
    PartitionRegistration,
    TopicImage,
)
from kafka_rpc.handlers import metadata as md
from kafka_rpc.protocol import codec
from kafka_rpc.protocol.errors import ErrorCode as E
from tests.waiting import until

Req = codec.module("MetadataRequest")
ZERO = uuid.UUID(int=0)
T_A = uuid.UUID("11111111-1111-4111-8111-111111111111")
T_B = uuid.UUID("22222222-2222-4222-8222-222222222222")
PLAIN, CTL, OTHER = "PLAINTEXT", "CONTROLLER", "EXTERNAL"


def _broker(bid, fenced=False, listeners=(PLAIN,), rack=None, shutdown=False):
    return BrokerRegistration(
        broker_id=bid,
        incarnation_id=uuid.uuid4(),
        epoch=10 + bid,
        endpoints=tuple(Endpoint(n, f"h{bid}", 9000 + bid, 0) for n in listeners),
        rack=rack,
        fenced=fenced,
        in_controlled_shutdown=shutdown,
    )


def image() -> MetadataImage:
    brokers = {
        1: _broker(1, rack="r1"),
        2: _broker(2, fenced=True),
        3: _broker(3, listeners=(OTHER,)),  # registered, unfenced, no PLAINTEXT endpoint
        4: _broker(4, shutdown=True),  # in controlled shutdown: still listed (not fenced)
    }
    a = TopicImage(
        "alpha",
        T_A,
        pmap(
            {
                0: PartitionRegistration(replicas=(1, 2), isr=(1,), leader=1, leader_epoch=3),
                1: PartitionRegistration(replicas=(2, 5), isr=(2,), leader=-1, leader_epoch=4),
                2: PartitionRegistration(replicas=(3, 1), isr=(3, 1), leader=3, leader_epoch=1),
            }
        ),
    )
    b = TopicImage(
        "beta",
        T_B,
        pmap({0: PartitionRegistration(replicas=(1,), isr=(1,), leader=1, start_offset=42)}),
    )
    return MetadataImage(
        brokers=pmap(brokers),
        topics=pmap({T_A: a, T_B: b}),
        topics_by_name=pmap({"alpha": T_A, "beta": T_B}),
        last_offset=99,
        last_epoch=1,
    )


def roundtrip(request, version, img=None, **kw):
    """Encode the request and the response at ``version`` and decode both again (what a client
    sees), plus the names to auto-create."""
    req = codec.decode("MetadataRequest", version, codec.encode(request, version))
    kw.setdefault("cluster_id", "cid")
    kw.setdefault("node_id", 1)
    resp, create = md.metadata_response(img or image(), req, version, PLAIN, **kw)
    return codec.decode("MetadataResponse", version, codec.encode(resp, version)), create


def parts(topic):
    return [
        (p.partition_index, p.error_code, p.leader_id, p.replica_nodes, p.isr_nodes)
        for p in topic.partitions
    ]


@pytest.mark.parametrize("version", [1, 4, 9, 10, 12, 13, 14])
def test_all_topics_brokers_and_partitions(version):
    resp, create = roundtrip(Req.MetadataRequest(topics=None), version, active_controller_id=1)
    assert create == []
    # fenced broker 2 hidden; broker 3 has no endpoint on this listener; 4 (controlled
    # shutdown) still listed as Kafka does
    assert [(b.node_id, b.host, b.port) for b in resp.brokers] == [
        (1, "h1", 9001),
        (4, "h4", 9004),
    ]
    assert resp.brokers[0].rack == "r1"
    assert resp.controller_id == 1
    assert [t.name for t in resp.topics] == ["alpha", "beta"]
    alpha, beta = resp.topics
    assert alpha.error_code == 0 and alpha.is_internal is False
    assert parts(alpha) == [
        (0, 0, 1, (1, 2), (1,)),
        (1, E.LEADER_NOT_AVAILABLE, -1, (2, 5), (2,)),
        (2, E.LISTENER_NOT_FOUND, -1, (3, 1), (3, 1)),
    ]
    if version >= 2:
        assert resp.cluster_id == "cid"
    if version >= 5:
        # offline: fenced (2), not registered (5), registered without the listener (3)
        assert [p.offline_replicas for p in alpha.partitions] == [(2,), (2, 5), (3,)]
    if version >= 7:
        assert [p.leader_epoch for p in alpha.partitions] == [3, 4, 1]
    if version >= 10:
        assert (alpha.topic_id, beta.topic_id) == (T_A, T_B)
    else:
        assert alpha.topic_id == ZERO  # not on the wire
    if version >= 14:
        assert beta.partitions[0].start_offset == 42
        assert alpha.partitions[0].start_offset == -1
        assert beta.partitions[0].chunks == ()
    else:
        assert beta.partitions[0].start_offset == -1


def test_v0_empty_list_is_all_topics_and_filters_unavailable_replicas():
    resp, _ = roundtrip(Req.MetadataRequest(topics=()), 0)
    assert [t.name for t in resp.topics] == ["alpha", "beta"]
    alpha = resp.topics[0]
    assert parts(alpha) == [
        (0, E.REPLICA_NOT_AVAILABLE, 1, (1,), (1,)),
        (1, E.LEADER_NOT_AVAILABLE, -1, (), ()),
        (2, E.LISTENER_NOT_FOUND, -1, (1,), (1,)),
    ]
    assert parts(resp.topics[1]) == [(0, 0, 1, (1,), (1,))]
    # v1+: an empty list is no topics
    resp, _ = roundtrip(Req.MetadataRequest(topics=()), 1)
    assert resp.topics == ()


@pytest.mark.parametrize("version", [1, 3, 4, 9, 11])
def test_named_topics_and_missing_names(version):
    T = Req.MetadataRequestTopic
    req = Req.MetadataRequest(
        topics=(T(name="beta"), T(name="nope"), T(name="bad/name"), T(name="beta")),
        allow_auto_topic_creation=version < 4,  # not on the wire below v4
    )
    resp, create = roundtrip(req, version)
    got = [(t.name, t.error_code) for t in resp.topics]
    # auto-creation is off in the broker config here (auto_create_enabled defaults to False)
    assert got == [("beta", 0), ("nope", E.UNKNOWN_TOPIC_OR_PARTITION),
                   ("bad/name", E.INVALID_TOPIC_EXCEPTION)]  # fmt: skip
    assert create == []


@pytest.mark.parametrize("version", [1, 4, 12])
def test_auto_creation(version):
    T = Req.MetadataRequestTopic
    req = Req.MetadataRequest(
        topics=(T(name="beta"), T(name="new1"), T(name="new2"), T(name="x y"))
    )
    resp, create = roundtrip(req, version, auto_create_enabled=True)
    assert [(t.name, t.error_code) for t in resp.topics] == [
        ("beta", 0),
        ("new1", E.LEADER_NOT_AVAILABLE),
        ("new2", E.LEADER_NOT_AVAILABLE),
        ("x y", E.INVALID_TOPIC_EXCEPTION),
    ]
    assert create == ["new1", "new2"]
    if version >= 4:  # the client may refuse it
        req = Req.MetadataRequest(topics=(T(name="new1"),), allow_auto_topic_creation=False)
        resp, create = roundtrip(req, version, auto_create_enabled=True)
        assert [t.error_code for t in resp.topics] == [E.UNKNOWN_TOPIC_OR_PARTITION]
        assert create == []
    # all topics never auto-creates
    _resp, create = roundtrip(Req.MetadataRequest(topics=None), version, auto_create_enabled=True)
    assert create == []


@pytest.mark.parametrize("version", [12, 13, 14])
def test_topics_by_id(version):
    T = Req.MetadataRequestTopic
    unknown = uuid.uuid4()
    req = Req.MetadataRequest(
        topics=(T(topic_id=T_B, name=None), T(topic_id=unknown, name=None), T(name="alpha"))
    )
    resp, create = roundtrip(req, version, auto_create_enabled=True)
    assert [(t.name, t.topic_id, t.error_code) for t in resp.topics] == [
        ("beta", T_B, 0),
        (None, unknown, E.UNKNOWN_TOPIC_ID),
        ("alpha", T_A, 0),
    ]
    assert create == []


def test_empty_image_falls_back_to_this_node():
    resp, _ = roundtrip(
        Req.MetadataRequest(topics=None),
        12,
        img=MetadataImage(),
        node_id=7,
        fallback_endpoint=("me", 1234),
        active_controller_id=3,
    )
    assert [(b.node_id, b.host, b.port) for b in resp.brokers] == [(7, "me", 1234)]
    assert resp.controller_id == 7  # the active controller (3) is not a listed broker
    assert resp.topics == ()


def test_controller_id_choice():
    req = Req.MetadataRequest(topics=())
    assert roundtrip(req, 12, active_controller_id=4)[0].controller_id == 4
    assert roundtrip(req, 12, active_controller_id=2)[0].controller_id == 1  # 2 is fenced
    assert roundtrip(req, 12, node_id=9, active_controller_id=-1)[0].controller_id == 1


async def test_handler_reads_the_controller_image_and_auto_creates(monkeypatch):
    created = []

    class FakeController:
        def __init__(self):
            self.image = image()
            self.is_active = True
            self.active_controller_id = 1

        async def create_topics(self, request, version):
            created.append([(t.name, t.num_partitions, t.replication_factor)
                            for t in request.topics])  # fmt: skip
            mod = codec.module("CreateTopicsResponse")
            return mod.CreateTopicsResponse(
                topics=tuple(mod.CreatableTopicResult(name=t.name) for t in request.topics)
            )

    config = SimpleNamespace(
        auto_create_topics_enable=True,
        num_partitions=3,
        default_replication_factor=1,
        quorum_request_timeout_ms=2000,
    )
    server = SimpleNamespace(
        controller=FakeController(),
        config=config,
        cluster_id="cid",
        node_id=1,
        advertised=lambda name: CfgEndpoint(name, "me", 1),
    )
    ctx = SimpleNamespace(services=server, listener=SimpleNamespace(name=PLAIN), api_version=12)
    T = Req.MetadataRequestTopic
    resp = md.metadata(ctx, Req.MetadataRequest(topics=(T(name="fresh"), T(name="alpha"))))
    assert [(t.name, t.error_code) for t in resp.topics] == [
        ("fresh", E.LEADER_NOT_AVAILABLE),
        ("alpha", 0),
    ]
    await until(lambda: created, "the auto-creation request")
    assert created == [[("fresh", 3, 1)]]
    # no controller object: no topics, this node alone, nothing created
    server.controller = None
    resp = md.metadata(ctx, Req.MetadataRequest(topics=(T(name="fresh"),)))
    assert [(t.name, t.error_code) for t in resp.topics] == [
        ("fresh", E.UNKNOWN_TOPIC_OR_PARTITION)
    ]
    assert [(b.node_id, b.host) for b in resp.brokers] == [(1, "me")]


# ------------------------------------------------------ CreateTopics / DeleteTopics routing
class _Ctl:
    def __init__(self, active, answer_code=0):
        self.is_active = active
        self.active_controller_id = 1
        self.image = image()
        self.calls = 0
        self.answer_code = answer_code

    async def create_topics(self, request, version):
        self.calls += 1
        mod = codec.module("CreateTopicsResponse")
        return mod.CreateTopicsResponse(
            topics=tuple(
                mod.CreatableTopicResult(name=t.name, error_code=self.answer_code)
                for t in request.topics
            )
        )


class _Channel:
    def __init__(self, outcome):
        self.outcome = outcome
        self.sent = []

    async def send(self, request, version=None, timeout=None, attempts=2):
        from kafka_rpc.broker.channel import ControllerUnavailableError

        self.sent.append(version)
        if self.outcome is None:
            raise ControllerUnavailableError("nobody")
        return 1, self.outcome


def _server(ctl, channel=None):
    return SimpleNamespace(controller=ctl, controller_channel=channel)


def _ct(*names):
    mod = codec.module("CreateTopicsRequest")
    return mod.CreateTopicsRequest(topics=tuple(mod.CreatableTopic(name=n) for n in names))


async def test_topics_routing():
    from kafka_rpc.handlers.topics import route

    # the active controller's node: the controller answers on either listener
    ctl = _Ctl(active=True)
    for role in ("broker", "controller"):
        resp = await route(_server(ctl), role, "create", _ct("a"), 7)
        assert [(t.name, t.error_code) for t in resp.topics] == [("a", 0)]
    assert ctl.calls == 2
    # another controller's controller listener: NOT_CONTROLLER per topic, with a message
    resp = await route(_server(_Ctl(active=False)), "controller", "create", _ct("a", "b"), 7)
    assert [(t.name, t.error_code) for t in resp.topics] == [
        ("a", E.NOT_CONTROLLER),
        ("b", E.NOT_CONTROLLER),
    ]
    assert all(t.error_message for t in resp.topics)
    # a broker listener elsewhere forwards at the request's version and relays the answer
    relayed = await _Ctl(active=True).create_topics(_ct("a"), 7)
    channel = _Channel(relayed)
    resp = await route(_server(_Ctl(active=False), channel), "broker", "create", _ct("a"), 5)
    assert resp is relayed and channel.sent == [5]
    # the active controller lost leadership mid-request: the broker side forwards it
    channel = _Channel(relayed)
    lost = _Ctl(active=True, answer_code=E.NOT_CONTROLLER)
    resp = await route(_server(lost, channel), "broker", "create", _ct("a"), 7)
    assert resp is relayed and channel.sent == [7]
    # nobody reachable: REQUEST_TIMED_OUT per entry (DeleteTopics by name and by id)
    resp = await route(_server(None, _Channel(None)), "broker", "create", _ct("a"), 7)
    assert [(t.name, t.error_code) for t in resp.topics] == [("a", E.REQUEST_TIMED_OUT)]
    dmod = codec.module("DeleteTopicsRequest")
    req = dmod.DeleteTopicsRequest(
        topics=(dmod.DeleteTopicState(name=None, topic_id=T_A), dmod.DeleteTopicState(name="x"))
    )
    resp = await route(_server(None, _Channel(None)), "broker", "delete", req, 6)
    assert [(r.name, r.topic_id, r.error_code) for r in resp.responses] == [
        (None, T_A, E.REQUEST_TIMED_OUT),
        ("x", ZERO, E.REQUEST_TIMED_OUT),
    ]
    req = dmod.DeleteTopicsRequest(topic_names=("y",))
    resp = await route(_server(None, _Channel(None)), "broker", "delete", req, 5)
    assert [(r.name, r.error_code, r.error_message is not None) for r in resp.responses] == [
        ("y", E.REQUEST_TIMED_OUT, True)
    ]


class _FakeClient:
    """KafkaRpcClient stand-in: each node answers from a script."""

    def __init__(self, script, node):
        self.script, self.node = script, node

    async def request(self, msg, version=None, timeout=None):
        answer = self.script[self.node]
        if isinstance(answer, Exception):
            raise answer
        return answer

    async def close(self):
        pass


async def test_channel_follows_the_leader(tmp_path):
    from kafka_rpc.broker.channel import ControllerChannel, ControllerUnavailableError
    from kafka_rpc.client import KafkaConnectionError
    from kafka_rpc.config import load_config

    cfg = load_config(overrides={
        "process.roles": "broker", "node.id": "9", "log.dirs": str(tmp_path),
        "listeners": "PLAINTEXT://127.0.0.1:0",
        "controller.quorum.voters": "1@127.0.0.1:1,2@127.0.0.1:2,3@127.0.0.1:3",
    })  # fmt: skip
    mod = codec.module("CreateTopicsResponse")
    ok = mod.CreateTopicsResponse(topics=(mod.CreatableTopicResult(name="a"),))
    moved = mod.CreateTopicsResponse(
        topics=(mod.CreatableTopicResult(name="a", error_code=E.NOT_CONTROLLER),)
    )
    script = {1: moved, 2: ok, 3: KafkaConnectionError("down")}
    ctl = SimpleNamespace(active_controller_id=3)
    channel = ControllerChannel(cfg, 9, active_controller_id=lambda: ctl.active_controller_id)
    channel._client = lambda node: _FakeClient(script, node)  # type: ignore[method-assign]
    # the known leader (3) is down, then 1 says NOT_CONTROLLER: two attempts are not enough
    with pytest.raises(ControllerUnavailableError):
        await channel.send(_ct("a"), 7)
    node, resp = await channel.send(_ct("a"), 7, attempts=3)
    assert (node, resp) == (2, ok)
    ctl.active_controller_id = -1  # unknown: the node that last answered comes first
    assert channel.candidates() == [2, 1, 3]
    assert (await channel.send(_ct("a"), 7, attempts=1))[0] == 2


async def test_channel_follows_the_voter_set_it_is_given(tmp_path):
    """The voters come from the composition root (the Raft replica's voter set, KIP-853), not
    from controller.quorum.voters: a voter added or moved is a candidate at its new address."""
    from kafka_rpc.broker.channel import ControllerChannel
    from kafka_rpc.config import load_config

    cfg = load_config(overrides={
        "process.roles": "broker", "node.id": "9", "log.dirs": str(tmp_path),
        "listeners": "PLAINTEXT://127.0.0.1:0", "controller.quorum.voters": "1@127.0.0.1:1",
    })  # fmt: skip
    voters = {1: ("127.0.0.1", 1)}
    channel = ControllerChannel(cfg, 9, active_controller_id=lambda: 2, voters=lambda: voters)
    assert channel.candidates() == [1] and channel.active_controller_id() == -1
    first = channel._client(1)
    assert channel._client(1) is first
    voters = {1: ("127.0.0.1", 11), 2: ("127.0.0.1", 2)}  # 2 joined, 1 moved
    assert channel.candidates() == [2, 1] and channel.active_controller_id() == 2
    moved = channel._client(1)
    assert moved is not first and moved is channel._client(1)
    await channel.close()
    # without a voter set given: controller.quorum.voters
    static = ControllerChannel(cfg, 9)
    assert static.voters == {1: ("127.0.0.1", 1)}
