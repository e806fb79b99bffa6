"""AddRaftVoter / RemoveRaftVoter / DescribeQuorum over real sockets on one in-process node
(combined mode, the active controller): the controller listener hands them to the metadata
log's Raft replica, the broker listener forwards them (here: its own active controller), and
both listeners give the same answer at every version."""

from __future__ import annotations

import dataclasses

import pytest

from kafka_rpc.client import KafkaRpcClient
from kafka_rpc.protocol import codec
from kafka_rpc.protocol.errors import ErrorCode
from tests.handlers.test_raft_voters import add_voter, describe_quorum, remove_voter
from tests.integration.conftest import TIMEOUT, start_server
from tests.waiting import until

pytestmark = pytest.mark.integration


def _codes(resp) -> tuple:
    return (resp.error_code, resp.error_message)


async def test_voter_changes_and_describe_quorum_on_both_listeners(tmp_path):
    running = await start_server(tmp_path)
    ctl = running.server.controller
    controller = broker = None
    try:
        await until(lambda: ctl.is_active or None, "the controller to activate", timeout=TIMEOUT)
        controller = await KafkaRpcClient.connect(f"127.0.0.1:{running.port('CONTROLLER')}")
        broker = await KafkaRpcClient.connect(f"127.0.0.1:{running.port('PLAINTEXT')}")
        av = codec.message_class("ApiVersionsRequest")(
            client_software_name="t", client_software_version="1"
        )
        for c in (controller, broker):
            keys = {k.api_key: (k.min_version, k.max_version)
                    for k in (await c.request(av, version=3)).api_keys}  # fmt: skip
            assert keys[80] == (0, 1) and keys[81] == (0, 0)
            assert (82 in keys) == (c is controller)  # UpdateRaftVoter: controllers only
        # the Raft layer's answers (a wrong cluster id is its first check; this static quorum
        # is at kraft.version 0, so a change is UNSUPPORTED_VERSION), relayed as they are by
        # the broker listener
        anon = dataclasses.replace(remove_voter(), cluster_id=None)
        cases = ((add_voter(), (0, 1), ErrorCode.INCONSISTENT_CLUSTER_ID),
                 (remove_voter(), (0,), ErrorCode.INCONSISTENT_CLUSTER_ID),
                 (anon, (0,), ErrorCode.UNSUPPORTED_VERSION))  # fmt: skip
        for req, versions, code in cases:
            for v in versions:
                direct = await controller.request(req, version=v, timeout=TIMEOUT)
                relayed = await broker.request(req, version=v, timeout=TIMEOUT)
                assert type(direct).__name__.endswith("RaftVoterResponse")
                assert direct.error_code == code, direct
                assert _codes(relayed) == _codes(direct)
        # DescribeQuorum: the leader answers on both listeners, so the broker's view is the
        # active controller's (no NOT_LEADER_OR_FOLLOWER from an observer's view)
        for v in (0, 1, 2):
            d = await controller.request(describe_quorum(), version=v, timeout=TIMEOUT)
            b = await broker.request(describe_quorum(), version=v, timeout=TIMEOUT)
            for r in (d, b):
                (p,) = r.topics[0].partitions
                assert (r.error_code, p.error_code, p.leader_id) == (0, 0, 1), r
    finally:
        for c in (controller, broker):
            if c is not None:
                await c.close()
        await running.stop()
