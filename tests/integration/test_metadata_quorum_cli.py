"""`kafka-rpc metadata-quorum add-controller / remove-controller` against a real server socket:
the AddRaftVoter (v1, AckWhenCommitted true) and RemoveRaftVoter requests it sends, Kafka's
output lines, an error answer printed as Kafka's tool prints it, and the hop from a controller
that is not the leader to the one its DescribeQuorum names. The server answers with handlers of
a private registry (the quorum's own handlers are tested with the Raft core)."""

from __future__ import annotations

import asyncio
import subprocess
import sys

import pytest

from kafka_rpc.api.registry import Registry
from kafka_rpc.handlers import api_versions as av_mod
from kafka_rpc.protocol import codec
from kafka_rpc.protocol.uuids import parse_uuid_text
from kafka_rpc.storage import meta_properties

from .conftest import start_server

DIR_ID = "ukQq6BGlRFu4HJt6cG3Obg"
_Add = codec.module("AddRaftVoterResponse")
_Remove = codec.module("RemoveRaftVoterResponse")
_DQ = codec.module("DescribeQuorumResponse")


def _registry(state: dict) -> Registry:
    reg = Registry()
    reg.register("ApiVersionsRequest", av_mod.api_versions)

    def add(ctx, request):
        state["add"].append((ctx.api_version, request))
        code, msg = state.get("answer", (0, None))
        return _Add.AddRaftVoterResponse(error_code=code, error_message=msg)

    def remove(ctx, request):
        state["remove"].append((ctx.api_version, request))
        code, msg = state.get("answer", (0, None))
        return _Remove.RemoveRaftVoterResponse(error_code=code, error_message=msg)

    def describe(ctx, request):
        leader_port = state["leader_port"]
        part = _DQ.PartitionData(partition_index=0, leader_id=7, leader_epoch=3)
        node = _DQ.Node(node_id=7, listeners=(
            _DQ.Listener(name="CONTROLLER", host="127.0.0.1", port=leader_port),))  # fmt: skip
        return _DQ.DescribeQuorumResponse(
            topics=(_DQ.TopicData(topic_name="__cluster_metadata", partitions=(part,)),),
            nodes=(node,))  # fmt: skip

    reg.register("AddRaftVoterRequest", add)
    reg.register("RemoveRaftVoterRequest", remove)
    reg.register("DescribeQuorumRequest", describe)
    return reg


async def cli(*args):
    def run():
        return subprocess.run([sys.executable, "-m", "kafka_rpc.cli", "metadata-quorum", *args],
                              capture_output=True, text=True, timeout=60)  # fmt: skip

    return await asyncio.to_thread(run)


@pytest.fixture
async def servers(tmp_path):
    """Two servers: ``follower`` answers NOT_LEADER_OR_FOLLOWER and names ``leader``."""
    leader_state = {"add": [], "remove": []}
    follower_state = {"add": [], "remove": [], "answer": (6, None)}
    leader = await start_server(tmp_path / "l", _registry(leader_state))
    follower = await start_server(tmp_path / "f", _registry(follower_state))
    leader_state["leader_port"] = follower_state["leader_port"] = leader.port("CONTROLLER")
    yield leader, leader_state, follower, follower_state
    await follower.stop()
    await leader.stop()


def _controller_properties(tmp_path) -> str:
    meta = tmp_path / "new-meta"
    meta_properties.write(meta, meta_properties.MetaProperties(1, "c", 4, DIR_ID))
    path = tmp_path / "new.properties"
    path.write_text("process.roles=controller\nnode.id=4\ncontroller.listener.names=CONTROLLER\n"
                    f"listeners=CONTROLLER://127.0.0.1:19097\nlog.dirs={meta}\n")  # fmt: skip
    return str(path)


async def test_add_and_remove_controller(servers, tmp_path):
    leader, state, _follower, _fstate = servers
    where = ("--bootstrap-controller", f"127.0.0.1:{leader.port('CONTROLLER')}")
    r = await cli(*where, "--command-config", _controller_properties(tmp_path), "add-controller")
    assert r.returncode == 0, r.stderr
    assert r.stdout == (f"Added controller 4 with directory id {DIR_ID} and endpoints: "
                        "CONTROLLER://127.0.0.1:19097\n")  # fmt: skip
    ((version, req),) = state["add"]
    assert version == 1 and req.ack_when_committed is True
    assert (req.voter_id, req.voter_directory_id, req.cluster_id) == (
        4, parse_uuid_text(DIR_ID), None)  # fmt: skip
    assert [(li.name, li.host, li.port) for li in req.listeners] == [
        ("CONTROLLER", "127.0.0.1", 19097)]  # fmt: skip
    assert req.timeout_ms == 10_000

    r = await cli(*where, "remove-controller", "--controller-id", "4",
                  "--controller-directory-id", DIR_ID)  # fmt: skip
    assert r.returncode == 0, r.stderr
    assert r.stdout == f"Removed KRaft controller 4 with directory id {DIR_ID}\n"
    ((version, req),) = state["remove"]
    assert version == 0 and (req.voter_id, req.voter_directory_id) == (4, parse_uuid_text(DIR_ID))

    # the error answers, as Kafka's tool prints the admin client's exception
    state["answer"] = (126, "The voter id for ReplicaKey(id=4) is already part of the set")
    r = await cli(*where, "--command-config", _controller_properties(tmp_path), "add-controller")
    assert r.returncode == 1 and r.stdout == ""
    assert r.stderr == ("org.apache.kafka.common.errors.DuplicateVoterException: The voter id for "
                        "ReplicaKey(id=4) is already part of the set\n")  # fmt: skip
    state["answer"] = (127, None)
    r = await cli(*where, "remove-controller", "-i", "4", "-d", DIR_ID)
    assert r.returncode == 1
    assert r.stderr == ("org.apache.kafka.common.errors.VoterNotFoundException: The voter is not "
                        "part of the set of voters.\n")  # fmt: skip


async def test_a_follower_controller_hands_over_to_the_leader(servers, tmp_path):
    _leader, state, follower, fstate = servers
    where = ("--bootstrap-controller", f"127.0.0.1:{follower.port('CONTROLLER')}")
    r = await cli(*where, "remove-controller", "-i", "4", "-d", DIR_ID)
    assert r.returncode == 0, r.stderr
    assert len(fstate["remove"]) == 1 and len(state["remove"]) == 1
    r = await cli(*where, "--command-config", _controller_properties(tmp_path), "add-controller")
    assert r.returncode == 0, r.stderr
    assert len(fstate["add"]) == 1 and len(state["add"]) == 1
