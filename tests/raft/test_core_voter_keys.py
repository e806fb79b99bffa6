"""Voter keys in the election RPCs (KIP-853): the Vote, BeginQuorumEpoch and EndQuorumEpoch a
replica sends name the receiver's directory id from the latest voter set, and the receiver's
INVALID_VOTER_KEY check (Kafka ``KafkaRaftClient.isValidVoterKey``)."""

from __future__ import annotations

import dataclasses
import uuid

from kafka_rpc.protocol.errors import ErrorCode as E
from kafka_rpc.raft.api import ElectionState

from .conftest import (
    BEGIN,
    END,
    V_BEGIN,
    V_VOTE,
    VOTE,
    begin_request,
    elect,
    make_node,
    one,
    vote_partition,
    vote_request,
)
from .test_core_reconfig import dir_of, dyn_leader, dyn_node

ZERO = uuid.UUID(int=0)


def with_voter_dir(req, voter_id: int, d: uuid.UUID):
    t = req.topics[0]
    p = dataclasses.replace(t.partitions[0], voter_directory_id=d)
    return dataclasses.replace(
        req, voter_id=voter_id, topics=(dataclasses.replace(t, partitions=(p,)),)
    )


def test_vote_requests_carry_the_voter_directory_ids():
    n = dyn_node(2, state=ElectionState(epoch=1, voted_id=2))
    assert n.core.state == "Candidate"
    n.core.poll(0)
    out = n.outbound()
    for dest in (1, 3):
        v = one(out, VOTE, dest)
        p = v.request.topics[0].partitions[0]
        assert v.request.voter_id == dest
        assert p.voter_directory_id == dir_of(dest)
        assert p.replica_directory_id == dir_of(2)


def test_static_quorum_vote_requests_have_zero_voter_directory_ids():
    n = make_node(2, state=ElectionState(epoch=1, voted_id=2), directory_id=dir_of(2))
    n.core.poll(0)
    v = one(n.outbound(), VOTE, 1)
    assert v.request.topics[0].partitions[0].voter_directory_id == ZERO


def test_begin_quorum_epoch_carries_the_voter_directory_id_and_no_endpoints():
    n = dyn_leader(local_listeners={"CONTROLLER": ("controller-1", 9091)})
    n.core.poll(0)
    out = n.outbound()
    for dest in (2, 3):
        b = one(out, BEGIN, dest)
        assert b.request.voter_id == dest
        assert b.request.topics[0].partitions[0].voter_directory_id == dir_of(dest)
        assert b.request.leader_endpoints == ()


def test_end_quorum_epoch_preferred_candidates_carry_directory_ids():
    n = dyn_leader()
    n.core.begin_shutdown(0, 10_000)
    n.core.poll(0)
    assert n.core.state == "Resigned"
    e = one(n.outbound(), END, 2)
    p = e.request.topics[0].partitions[0]
    got = sorted((c.candidate_id, c.candidate_directory_id) for c in p.preferred_candidates)
    assert got == [(2, dir_of(2)), (3, dir_of(3))]
    assert e.request.leader_endpoints == ()


def test_vote_with_zero_voter_directory_id_passes_the_voter_key_check():
    n = dyn_node(2)
    req = with_voter_dir(vote_request(1, 1, 0, 0), 2, ZERO)
    p = vote_partition(n.request(0, VOTE, V_VOTE, req))
    assert p.error_code == 0 and p.vote_granted


def test_vote_with_another_voter_directory_id_is_an_invalid_voter_key():
    n = dyn_node(2)
    req = with_voter_dir(vote_request(1, 1, 0, 0), 2, uuid.UUID(int=5))
    p = vote_partition(n.request(0, VOTE, V_VOTE, req))
    assert p.error_code == E.INVALID_VOTER_KEY and not p.vote_granted
    req = with_voter_dir(vote_request(1, 1, 0, 0), 3, ZERO)
    assert vote_partition(n.request(0, VOTE, V_VOTE, req)).error_code == E.INVALID_VOTER_KEY


def test_begin_quorum_epoch_voter_key():
    n = dyn_node(2)
    ok = with_voter_dir(begin_request(1, 1), 2, ZERO)
    resp = n.request(0, BEGIN, V_BEGIN, ok)
    assert resp.topics[0].partitions[0].error_code == 0
    assert (n.core.state, n.core.leader_id) == ("Follower", 1)
    m = dyn_node(2)
    bad = with_voter_dir(begin_request(1, 1), 2, uuid.UUID(int=5))
    resp = m.request(0, BEGIN, V_BEGIN, bad)
    assert resp.topics[0].partitions[0].error_code == E.INVALID_VOTER_KEY


def test_elected_leader_of_a_dynamic_quorum_sends_begin_with_directory_ids():
    n = dyn_node(1, state=ElectionState(epoch=1, voted_id=1))
    elect(n, 0)
    n.core.poll(0)
    b = one(n.outbound(), BEGIN, 3)
    assert b.request.topics[0].partitions[0].voter_directory_id == dir_of(3)
