"""The follower side of KIP-853 in the core: auto-join (Kafka ``KafkaRaftClientAutoJoinTest``)
and a voter's UpdateRaftVoter (``KafkaRaftClientReconfigTest.testFollowerSendsUpdateVoter*``),
driven through the core's inputs with the memory log."""

from __future__ import annotations

import uuid
from typing import Any

from kafka_rpc.protocol import codec
from kafka_rpc.protocol.errors import ErrorCode as E
from kafka_rpc.raft.api import ElectionState
from kafka_rpc.raft.voters import encode_voters_control_batch

from .conftest import FETCH, Node, fetch_response, make_node
from .test_core_reconfig import (
    ADD,
    API_VERSIONS,
    REMOVE,
    UPDATE,
    api_versions,
    dir_of,
    dyn_leader,
    dyn_node,
    vset,
)

AddResp = codec.module("AddRaftVoterResponse")
RemoveResp = codec.module("RemoveRaftVoterResponse")
UpdateResp = codec.module("UpdateRaftVoterResponse")
LISTENERS = {"CONTROLLER": ("controller-4", 9094)}
T = 2000  # fetch.timeout.ms, the update-voter timer


def observer(node_id: int = 4, **kw: Any) -> Node:
    """Node ``node_id``, an observer of the dynamic quorum {1, 2, 3} following leader 1."""
    kw.setdefault("auto_join", True)
    kw.setdefault("local_listeners", LISTENERS)
    return dyn_node(node_id, state=ElectionState(epoch=1, leader_id=1), **kw)


def run_to(n: Node, now: int) -> list:
    """Poll at ``now`` answering every Fetch to the leader with an empty response (which
    keeps the fetch timer from running out); the other requests sent."""
    others = []
    for _ in range(5):
        n.core.poll(now)
        out = n.outbound()
        fetches = [o for o in out if o.api_key == FETCH]
        others += [o for o in out if o.api_key != FETCH]
        if not fetches:
            break
        for f in fetches:
            n.core.handle_response(now, f.destination, f.correlation, fetch_response(1, 1))
    return others


def voter_requests(out: list) -> list:
    return [o for o in out if o.api_key in (ADD, REMOVE, UPDATE)]


# ====================================================================== auto-join
def test_auto_add_new_voter():
    n = observer()
    assert voter_requests(run_to(n, T - 1)) == []
    (add,) = voter_requests(run_to(n, T))
    assert add.api_key == ADD and add.destination == 1
    r = add.request
    assert (r.cluster_id, r.voter_id, r.voter_directory_id) == (n.core.config.cluster_id, 4,
                                                               dir_of(4))  # fmt: skip
    assert r.timeout_ms == n.core.config.request_timeout_ms
    assert [(x.name, x.host, x.port) for x in r.listeners] == [("CONTROLLER", "controller-4",
                                                                9094)]  # fmt: skip
    assert r.ack_when_committed is False
    # no Fetch while the AddRaftVoter is in flight to the leader
    n.core.poll(T + 1)
    assert [o for o in n.outbound() if o.destination == 1] == []
    n.core.handle_response(T + 1, 1, add.correlation, AddResp.AddRaftVoterResponse())
    # NONE restarts the update-voter timer
    assert voter_requests(run_to(n, 2 * T)) == []
    assert [o.api_key for o in voter_requests(run_to(n, 2 * T + 1))] == [ADD]


def test_auto_add_new_voter_timer_restart_codes_and_backoff():
    for code in (E.REQUEST_TIMED_OUT, E.DUPLICATE_VOTER):
        n = observer()
        (add,) = voter_requests(run_to(n, T))
        n.core.handle_response(T, 1, add.correlation, AddResp.AddRaftVoterResponse(error_code=code))
        assert voter_requests(run_to(n, T + 100)) == []
    n = observer()
    (add,) = voter_requests(run_to(n, T))
    resp = AddResp.AddRaftVoterResponse(error_code=int(E.INVALID_REQUEST), error_message="x")
    n.core.handle_response(T, 1, add.correlation, resp)
    n.core.poll(T + 1)
    assert n.outbound() == []  # backing off
    # then Fetches again, and asks again once the timer (restarted by the send) runs out
    back = T + n.core.config.retry_backoff_ms
    assert voter_requests(run_to(n, back)) == []
    assert voter_requests(run_to(n, 2 * T - 1)) == []
    assert [o.api_key for o in voter_requests(run_to(n, 2 * T))] == [ADD]


def test_auto_remove_old_voter():
    n = observer(3, directory_id=uuid.UUID(int=999))
    assert not n.core.is_voter
    (rm,) = voter_requests(run_to(n, T))
    assert rm.api_key == REMOVE and rm.destination == 1
    assert (rm.request.voter_id, rm.request.voter_directory_id) == (3, dir_of(3))
    resp = RemoveResp.RemoveRaftVoterResponse(error_code=int(E.VOTER_NOT_FOUND))
    n.core.handle_response(T, 1, rm.correlation, resp)
    assert voter_requests(run_to(n, 2 * T - 1)) == []


def test_observer_removes_old_voter_and_auto_joins():
    n = observer(3, directory_id=uuid.UUID(int=999))
    (rm,) = voter_requests(run_to(n, T))
    n.core.handle_response(T, 1, rm.correlation, RemoveResp.RemoveRaftVoterResponse())
    # the leader's VotersRecord without 3 arrives
    n.core.poll(T + 1)
    (f,) = [o for o in n.outbound() if o.api_key == FETCH]
    b = encode_voters_control_batch(0, 1, vset(1, 2), 5)
    n.core.handle_response(T + 1, 1, f.correlation, fetch_response(1, 1, records=b.data))
    n.flush(T + 1)
    assert sorted(n.core.voter_set) == [1, 2]
    (add,) = voter_requests(run_to(n, 2 * T))
    assert add.api_key == ADD
    assert (add.request.voter_id, add.request.voter_directory_id) == (3, uuid.UUID(int=999))


def test_observers_do_not_auto_join():
    n = observer(can_become_voter=False)  # a broker
    assert voter_requests(run_to(n, 3 * T)) == []


def test_observer_does_not_add_itself_when_auto_join_disabled():
    n = observer(auto_join=False)
    assert voter_requests(run_to(n, 3 * T)) == []


def test_observer_does_not_auto_join_with_kraft_version_0():
    n = make_node(4, (1, 2, 3), auto_join=True, state=ElectionState(epoch=1, leader_id=1))
    assert n.core.state == "Follower" and not n.core.is_voter
    assert voter_requests(run_to(n, 3 * T)) == []


def test_unattached_observer_does_not_auto_join():
    n = dyn_node(4, auto_join=True, bootstrap_servers=(("boot", 1),))
    assert n.core.state == "Unattached"
    for t in (0, T, 2 * T):
        n.core.poll(t)
        assert voter_requests(n.outbound()) == []


def test_auto_join_against_a_leader():
    """An observer that has caught up with leader 1 of {1} adds itself; once the VotersRecord
    reaches it, it is a voter."""
    leader = dyn_leader(ids=(1,))
    n = dyn_node(2, ids=(1,), auto_join=True, state=ElectionState(epoch=1, leader_id=1),
                 fetch_max_wait_ms=0, local_listeners={"CONTROLLER": ("c2", 2)})  # fmt: skip
    assert not n.core.is_voter

    def exchange(now: int) -> list:
        n.core.poll(now)
        rest = []
        for o in n.outbound():
            if o.api_key != FETCH:
                rest.append(o)
                continue
            replies: list = []
            leader.core.handle_request(now, FETCH, 18, o.request, replies.append)
            leader.core.poll(now)
            leader.flush(now)
            n.core.handle_response(now, o.destination, o.correlation, replies[0])
            n.flush(now)
        return rest

    for t in range(0, T, 100):
        assert voter_requests(exchange(t)) == []
    (add,) = voter_requests(exchange(T))
    replies: list = []
    leader.core.handle_request(T, ADD, 1, add.request, replies.append)
    assert replies == []
    (probe,) = [o for o in leader.outbound() if o.api_key == API_VERSIONS]
    leader.core.handle_response(T, probe.destination, probe.correlation, api_versions())
    assert [r.error_code for r in replies] == [0]  # AckWhenCommitted false: at the append
    assert sorted(leader.core.voter_set) == [1, 2]
    n.core.handle_response(T, 1, add.correlation, replies[0])
    for t in range(T, T + 500, 100):
        exchange(t)
    assert n.core.is_voter and sorted(n.core.voter_set) == [1, 2]
    assert leader.core.high_watermark == leader.log.end_offset


# ====================================================================== UpdateRaftVoter
def follower(node_id: int = 2, **kw: Any) -> Node:
    return dyn_node(node_id, state=ElectionState(epoch=1, leader_id=1), **kw)


def test_follower_sends_update_voter_when_different():
    new = {"CONTROLLER": ("moved-2", 7)}
    n = follower(local_listeners=new)
    assert voter_requests(run_to(n, T - 1)) == []
    (up,) = voter_requests(run_to(n, T))
    r = up.request
    assert up.api_key == UPDATE and up.destination == 1
    assert (r.current_leader_epoch, r.voter_id, r.voter_directory_id) == (1, 2, dir_of(2))
    assert [(x.name, x.host, x.port) for x in r.listeners] == [("CONTROLLER", "moved-2", 7)]
    feat = r.kraft_version_feature
    assert (feat.min_supported_version, feat.max_supported_version) == (0, 1)
    n.core.poll(T + 1)
    assert [o for o in n.outbound() if o.destination == 1] == []  # no Fetch meanwhile
    n.core.handle_response(T + 1, 1, up.correlation, UpdateResp.UpdateRaftVoterResponse(
        current_leader=UpdateResp.CurrentLeader(leader_id=1, leader_epoch=1)))  # fmt: skip
    assert voter_requests(run_to(n, 2 * T)) == []


def test_follower_does_not_send_update_voter_when_equal():
    n = follower()  # its entry already has its listener and range 0..1
    assert voter_requests(run_to(n, 3 * T)) == []


def test_follower_sends_update_voter_with_kraft_version_0():
    n = make_node(2, (1, 2, 3), directory_id=dir_of(2), state=ElectionState(epoch=1, leader_id=1))
    assert voter_requests(run_to(n, T - 1)) == []
    (up,) = voter_requests(run_to(n, T))
    assert up.request.voter_directory_id == dir_of(2)
    assert [(x.host, x.port) for x in up.request.listeners] == [("controller-2", 9092)]
    resp = UpdateResp.UpdateRaftVoterResponse(error_code=int(E.UNSUPPORTED_VERSION))
    n.core.handle_response(T, 1, up.correlation, resp)
    # done for this leader
    assert voter_requests(run_to(n, 4 * T)) == []


def test_follower_sends_update_voter_after_election_with_kraft_version_0():
    n = make_node(2, (1, 2, 3), directory_id=dir_of(2), state=ElectionState(epoch=1, leader_id=1))
    assert voter_requests(run_to(n, T - 1)) == []
    (up,) = voter_requests(run_to(n, T))
    n.core.handle_response(T, 1, up.correlation, UpdateResp.UpdateRaftVoterResponse(
        current_leader=UpdateResp.CurrentLeader(leader_id=1, leader_epoch=1)))  # fmt: skip
    assert voter_requests(run_to(n, 3 * T)) == []
    # leader 3 of epoch 2
    from .conftest import BEGIN, V_BEGIN, begin_request

    n.request(3 * T, BEGIN, V_BEGIN, begin_request(3, 2))
    assert (n.core.state, n.core.leader_id) == ("Follower", 3)
    n.core.poll(3 * T)
    out = n.outbound()
    assert voter_requests(out) == []
    (f,) = [o for o in out if o.api_key == FETCH and o.destination == 3]
    n.core.handle_response(4 * T - 1, 3, f.correlation, fetch_response(3, 2))
    n.core.poll(4 * T)
    (up2,) = voter_requests(n.outbound())
    assert up2.destination == 3 and up2.request.current_leader_epoch == 2


def test_update_voter_response_causes_epoch_change():
    n = follower(local_listeners={"CONTROLLER": ("moved-2", 7)})
    assert voter_requests(run_to(n, T - 1)) == []
    (up,) = voter_requests(run_to(n, T))
    resp = UpdateResp.UpdateRaftVoterResponse(
        error_code=int(E.NOT_LEADER_OR_FOLLOWER),
        current_leader=UpdateResp.CurrentLeader(leader_id=3, leader_epoch=2, host="h", port=1),
    )
    n.core.handle_response(T, 1, up.correlation, resp)
    assert (n.core.state, n.core.leader_id, n.core.epoch) == ("Follower", 3, 2)


def test_update_voter_not_sent_by_observers():
    n = observer(auto_join=False, local_listeners={"CONTROLLER": ("x", 1)})
    assert [o for o in voter_requests(run_to(n, 3 * T)) if o.api_key == UPDATE] == []


# ====================================================================== 0 -> 1 upgrade
VERSIONS = {1: 18, 52: 3, 53: 2, 54: 2, 55: 2, 59: 1, 80: 1, 81: 0, 82: 0}


class MemoryCluster:
    """Cores exchanging every request at once (no loss, no delay); the AddRaftVoter
    ApiVersions probes are answered with kraft.version 0..1."""

    def __init__(self, nodes: dict[int, Node]) -> None:
        self.nodes = nodes
        self.replies: list = []

    def run(self, start: int, end: int, step: int = 10) -> None:
        for t in range(start, end, step):
            for _ in range(10):
                busy = False
                for n in self.nodes.values():
                    n.core.poll(t)
                    if n.core.needs_flush:
                        n.flush(t)
                    for o in n.outbound():
                        busy = True
                        self._deliver(t, n, o)
                while self.replies:
                    busy = True
                    src, o, resp = self.replies.pop(0)
                    src.core.handle_response(t, o.destination, o.correlation, resp)
                if not busy:
                    break

    def _deliver(self, now: int, src: Node, o: Any) -> None:
        if o.api_key == API_VERSIONS:
            self.replies.append((src, o, api_versions()))
            return
        dst = self.nodes.get(o.destination)
        if dst is None:
            return

        def reply(resp: Any) -> None:
            self.replies.append((src, o, resp))

        dst.core.handle_request(now, o.api_key, VERSIONS[o.api_key], o.request, reply)

    def leader(self) -> Node:
        (lead,) = [n for n in self.nodes.values() if n.core.state == "Leader"]
        return lead


def static_node(i: int, **kw: Any) -> Node:
    kw.setdefault("state", ElectionState(epoch=1, voted_id=1) if i == 1 else None)
    return make_node(i, (1, 2, 3), directory_id=dir_of(i), seed=i,
                     local_listeners={"CONTROLLER": (f"controller-{i}", 9090 + i)},
                     **kw)  # fmt: skip


def test_kraft_upgrade_of_a_static_quorum_then_add_voter():
    c = MemoryCluster({i: static_node(i) for i in (1, 2, 3)})
    c.run(0, 500)
    lead = c.leader()
    assert lead.id == 1 and lead.core.kraft_version == 0
    # before every voter told the leader its directory id: refused, nothing written
    code, msg = lead.core.upgrade_kraft_version(500, 1, 1, True)
    assert code == E.INVALID_UPDATE_VERSION
    assert msg.startswith("Invalid update version 1 for feature kraft.version.")
    # each follower voter sends UpdateRaftVoter once its update-voter timer runs out
    c.run(500, 2600)
    assert {v: lead.core._volatile_voters[v].directory_id for v in (1, 2, 3)} == {
        v: dir_of(v) for v in (1, 2, 3)
    }
    assert lead.core.voter_set[2].directory_id.int == 0  # nothing written yet
    end = lead.log.end_offset
    assert lead.core.upgrade_kraft_version(2600, 1, 1, True) == (0, None)
    assert lead.log.end_offset == end
    assert lead.core.upgrade_kraft_version(2600, 1, 1, False) == (0, None)
    assert lead.core.kraft_version == 1
    c.run(2600, 3000)
    for n in c.nodes.values():
        assert n.core.kraft_version == 1
        assert {v: n.core.voter_set[v].directory_id for v in (1, 2, 3)} == {
            v: dir_of(v) for v in (1, 2, 3)
        }
        assert n.core.voter_set[2].endpoints == {"CONTROLLER": ("controller-2", 9092)}
        assert (n.core.voter_set[2].kraft_min, n.core.voter_set[2].kraft_max) == (0, 1)
    p = lead.core.describe_quorum_partition(3000)
    assert [(r.replica_id, r.replica_directory_id) for r in p.current_voters] == [
        (v, dir_of(v)) for v in (1, 2, 3)
    ]
    assert lead.core.high_watermark == lead.log.end_offset
    # a new controller observes, catches up and is added
    c.nodes[4] = make_node(4, (1, 2, 3), directory_id=dir_of(4), seed=4,
                           local_listeners={"CONTROLLER": ("controller-4", 9094)})  # fmt: skip
    c.run(3000, 3500)
    assert c.nodes[4].core.kraft_version == 1 and not c.nodes[4].core.is_voter
    replies: list = []
    from .test_core_reconfig import add_req

    lead.core.handle_request(3500, ADD, 1, add_req(4), replies.append)
    c.run(3500, 3700)
    assert [r.error_code for r in replies] == [0]
    for n in c.nodes.values():
        assert sorted(n.core.voter_set) == [1, 2, 3, 4]
    assert c.nodes[4].core.is_voter


def test_upgrade_refused_when_a_voter_does_not_support_kraft_version_1():
    c = MemoryCluster({i: static_node(i) for i in (1, 2, 3)})
    c.nodes[3] = static_node(3, kraft_version_supported=(0, 0))
    c.run(0, 2600)
    lead = c.leader()
    code, msg = lead.core.upgrade_kraft_version(2600, lead.core.epoch, 1, False)
    assert (code, msg) == (
        E.INVALID_UPDATE_VERSION,
        "Invalid update version 1 for feature kraft.version. Not all of the voters support it.",
    )
    assert lead.core.kraft_version == 0


def test_volatile_voters_are_lost_with_the_leadership_and_sent_again():
    c = MemoryCluster({i: static_node(i) for i in (1, 2, 3)})
    c.run(0, 2600)
    assert c.leader().id == 1
    c.nodes[1].core.begin_shutdown(2600, 5000)
    c.run(2600, 4000)
    lead = c.leader()
    assert lead.id != 1
    code, _ = lead.core.upgrade_kraft_version(4000, lead.core.epoch, 1, True)
    assert code == E.INVALID_UPDATE_VERSION  # the new leader has heard from nobody yet
    c.run(4000, 4000 + 2 * T)
    assert lead.core.upgrade_kraft_version(8000, lead.core.epoch, 1, True) == (0, None)
