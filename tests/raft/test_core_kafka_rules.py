"""RaftCore against the rules Apache Kafka 4.x's ``KafkaRaftClient`` follows where an older
reading of KIP-595 differs, each rule a test with the Kafka method it comes from
(docs/mixed-quorum.md, 'The Raft rules we follow as Kafka 4.x does'): partial
batches at the end of a Fetch answer, the leader's read size, empty LeaderEndpoints, pre-vote
and candidate transitions, directory ids as a kraft.version-0 voter sends and checks them,
BeginQuorumEpoch re-sent only to voters that do not fetch, and UpdateRaftVoter."""

from __future__ import annotations

import uuid

from kafka_rpc.protocol import codec
from kafka_rpc.protocol.errors import ErrorCode as E
from kafka_rpc.protocol.record_batch import decode_batches
from kafka_rpc.raft.api import ElectionState
from tests.raft.conftest import (
    BEGIN,
    CLUSTER_ID,
    END,
    FETCH,
    V_BEGIN,
    V_END,
    V_FETCH,
    V_VOTE,
    VOTE,
    begin_request,
    data_batch,
    end_request,
    fetch_partition,
    fetch_request,
    fetch_response,
    follower_node,
    leader_node,
    log_with,
    make_node,
    one,
    partition,
    vote_request,
    vote_response,
)

DIR_A = uuid.UUID("5a1b2c3d-0000-4000-8000-00000000000a")
DIR_B = uuid.UUID("5a1b2c3d-0000-4000-8000-00000000000b")
UpdateVoterReq = codec.module("UpdateRaftVoterRequest")


def _with_dirs(req, *, replica_dir=None, voter_dir=None):
    """``req`` (a VoteRequest or BeginQuorumEpochRequest) with directory ids set."""
    import dataclasses

    t = req.topics[0]
    p = t.partitions[0]
    kw = {}
    if replica_dir is not None:
        kw["replica_directory_id"] = replica_dir
    if voter_dir is not None:
        kw["voter_directory_id"] = voter_dir
    p = dataclasses.replace(p, **kw)
    return dataclasses.replace(req, topics=(dataclasses.replace(t, partitions=(p,)),))


# ============================================================================ Fetch (F2, F5)


def test_fetch_answer_ending_in_a_partial_batch_appends_the_whole_batches():
    """F2: Kafka's leader slices its log by bytes, so an answer may end inside a batch; its
    followers append the whole batches and drop the tail (``UnifiedLog.trimInvalidBytes``)."""
    n = follower_node(2, leader=1, epoch=1)
    b0, b1, b2 = data_batch(0, 1, 2), data_batch(2, 1, 3), data_batch(5, 1, 1)
    records = b0.data + b1.data + b2.data[: len(b2.data) // 2]
    n.core.poll(0)
    f = one(n.outbound(), FETCH, 1)
    n.core.handle_response(1, 1, f.correlation, fetch_response(1, 1, records=records,
                                                               high_watermark=5))  # fmt: skip
    assert n.log.end_offset == 5 and n.core.high_watermark == 5
    n.flush(2)
    n.core.poll(2)
    nxt = one(n.outbound(), FETCH, 1).request.topics[0].partitions[0]
    assert nxt.fetch_offset == 5 and nxt.last_fetched_epoch == 1


def test_leader_reads_request_max_bytes_not_partition_max_bytes():
    """F5: Kafka's followers send PartitionMaxBytes 0; Kafka's leaders read MaxBytes (4.3+) or
    8 MiB (4.0, whose followers ask 8 MiB), whole batches from the fetch offset, at least one."""
    log = log_with(*(data_batch(i * 2, 1, 2) for i in range(20)))
    n = make_node(1, state=ElectionState(epoch=2, voted_id=1), log=log)
    from tests.raft.conftest import elect

    elect(n, 0)
    n.flush(0)
    req = fetch_request(2, 2, 4, 1)
    import dataclasses

    t = req.topics[0]
    pz = dataclasses.replace(t.partitions[0], partition_max_bytes=0)
    req = dataclasses.replace(req, topics=(dataclasses.replace(t, partitions=(pz,)),))
    fp = fetch_partition(n.request(1, FETCH, V_FETCH, req))
    got = decode_batches(fp.records)
    assert got[0].base_offset == 4  # exactly at the fetch offset
    assert got[-1].last_offset + 1 == n.log.end_offset  # everything, not one batch
    # MaxBytes smaller than two batches: one whole batch (at least one, never a slice)
    small = dataclasses.replace(req, max_bytes=len(got[0].data) + 1)
    one_batch = decode_batches(fetch_partition(n.request(2, FETCH, V_FETCH, small)).records)
    assert [b.base_offset for b in one_batch] == [4]
    # MaxBytes 0 (not a Kafka follower): read up to the 8 MiB cap
    zero = dataclasses.replace(req, max_bytes=0)
    all_ = decode_batches(fetch_partition(n.request(3, FETCH, V_FETCH, zero)).records)
    assert all_[-1].last_offset + 1 == n.log.end_offset


def test_follower_fetch_request_as_kafka_builds_it():
    n = follower_node(2, leader=1, epoch=3, directory_id=DIR_A)
    n.core.poll(0)
    req = one(n.outbound(), FETCH, 1).request
    p = req.topics[0].partitions[0]
    assert req.max_bytes == 8 << 20 and req.max_wait_ms == 500
    assert p.partition_max_bytes == 0 and p.replica_directory_id == DIR_A
    assert req.replica_state.replica_id == 2 and p.current_leader_epoch == 3


def test_every_fetch_answer_names_the_current_leader_and_epoch():
    n = follower_node(2, leader=1, epoch=3)
    fp = fetch_partition(n.request(0, FETCH, V_FETCH, fetch_request(3, 3, 0, 0)))
    assert fp.error_code == E.NOT_LEADER_OR_FOLLOWER
    assert (fp.current_leader.leader_id, fp.current_leader.leader_epoch) == (1, 3)
    fp = fetch_partition(n.request(0, FETCH, V_FETCH, fetch_request(3, 2, 0, 0)))
    assert fp.error_code == E.FENCED_LEADER_EPOCH
    assert (fp.current_leader.leader_id, fp.current_leader.leader_epoch) == (1, 3)


# ============================================================================ endpoints (F6)


def test_begin_and_end_quorum_epoch_carry_no_leader_endpoints():
    """F6: a Kafka voter given a non-empty LeaderEndpoints list follows the entry named by its
    own controller.listener.names[0] and halts without one; an empty list makes it use its
    static voter address."""
    n = leader_node(epoch=1, listener_name="OURS")
    n.core.poll(0)
    out = n.outbound()
    for dest in (2, 3):
        req = one(out, BEGIN, dest).request
        assert req.leader_endpoints == () and req.voter_id == dest
        assert req.topics[0].partitions[0].voter_directory_id.int == 0
    n.core.begin_shutdown(1, 5000)
    n.core.poll(1)
    for o in n.outbound():
        if o.api_key == END:
            assert o.request.leader_endpoints == ()


# ============================================================================ votes (F10-F12)


def test_resigned_grants_up_to_date_pre_votes_only():
    """F11: ``ResignedState.canGrantVote`` grants an up-to-date pre-vote; never a standard vote
    in its own epoch, never a pre-vote from a log behind its own."""
    n = make_node(1, state=ElectionState(epoch=5, leader_id=1),
                  log=log_with(data_batch(0, 5, 3)))  # fmt: skip
    assert n.core.state == "Resigned"
    ok = partition(n.request(0, VOTE, V_VOTE, vote_request(2, 5, 5, 3, pre_vote=True)))
    assert ok.vote_granted is True and n.core.state == "Resigned"
    behind = partition(n.request(0, VOTE, V_VOTE, vote_request(2, 5, 5, 2, pre_vote=True)))
    assert behind.vote_granted is False
    std = partition(n.request(0, VOTE, V_VOTE, vote_request(2, 5, 4, 3)))
    assert std.vote_granted is False and n.store.writes == 0


def test_candidate_grants_up_to_date_pre_votes():
    n = make_node(1, state=ElectionState(epoch=4, voted_id=1))
    p = partition(n.request(0, VOTE, V_VOTE, vote_request(2, 4, 0, 0, pre_vote=True)))
    assert p.vote_granted is True and n.core.state == "Candidate"
    p = partition(n.request(0, VOTE, V_VOTE, vote_request(2, 4, 0, 0)))
    assert p.vote_granted is False


def test_prospective_grants_a_standard_vote_and_persists_it():
    """F11: Kafka's ``prospectiveAddVotedState``: a Prospective with no vote and no known
    leader grants an up-to-date candidate of its epoch, durably, and stays Prospective."""
    n = make_node(2, state=ElectionState(epoch=3))
    n.core.poll(n.core.next_deadline_ms())
    assert (n.core.state, n.core.epoch) == ("Prospective", 3)
    writes = n.store.writes
    p = partition(n.request(5000, VOTE, V_VOTE, vote_request(1, 3, 2, 0)))
    assert p.vote_granted is True
    assert (n.core.state, n.core.epoch, n.core.voted_id) == ("Prospective", 3, 1)
    assert n.store.writes == writes + 1 and n.store.read().voted_id == 1
    # a second candidate of the epoch is refused; the same one is granted again
    assert partition(n.request(5001, VOTE, V_VOTE, vote_request(3, 3, 2, 0))).vote_granted is False
    assert partition(n.request(5001, VOTE, V_VOTE, vote_request(1, 3, 2, 0))).vote_granted is True


def test_prospective_with_a_known_leader_refuses_standard_votes():
    n = follower_node(2, leader=1, epoch=3)
    n.core.poll(n.core.next_deadline_ms())
    assert (n.core.state, n.core.leader_id) == ("Prospective", 1)
    assert partition(n.request(3000, VOTE, V_VOTE, vote_request(3, 3, 2, 0))).vote_granted is False


def test_lost_pre_election_returns_to_follower_of_the_known_leader():
    """F12: ``prospectiveTransitionAfterElectionLoss``: a Prospective that knew a leader goes
    back to following it (durably) and fetches again, instead of going Unattached."""
    n = follower_node(2, leader=1, epoch=3)
    t = n.core.next_deadline_ms()
    n.core.poll(t)
    assert n.core.state == "Prospective"
    out = n.outbound()
    for o in out:
        n.core.handle_response(t + 1, o.destination, o.correlation, vote_response(3, False))
    assert (n.core.state, n.core.epoch, n.core.leader_id) == ("Follower", 3, 1)
    assert n.store.read().leader_id == 1
    n.core.poll(t + 2)
    assert one(n.outbound(), FETCH, 1)


def test_pre_election_timeout_without_leader_starts_another_at_once():
    n = make_node(2, state=ElectionState(epoch=3))
    t = n.core.next_deadline_ms()
    n.core.poll(t)
    assert n.core.state == "Prospective"
    n.outbound()
    t2 = n.core.next_deadline_ms()
    n.core.poll(t2)  # no answer in time: Unattached with the expired timer, Prospective again
    assert (n.core.state, n.core.epoch) == ("Prospective", 3)
    assert n.store.read().epoch == 3 and n.core.next_deadline_ms() > t2


def test_resigned_goes_unattached_at_the_next_epoch_after_its_election_timeout():
    """F12: ``pollResigned``: after the election timeout, Unattached at epoch + 1, so that
    nobody keeps naming the resigned node as leader (then Prospective at once: its timer
    has run out)."""
    n = make_node(1, state=ElectionState(epoch=5, leader_id=1))
    t = n.core.next_deadline_ms()
    n.core.poll(t - 1)
    assert n.core.state == "Resigned"
    n.core.poll(t)
    assert n.core.epoch == 6 and n.core.leader_id == -1
    assert n.core.state in ("Unattached", "Prospective")
    assert n.store.read().epoch == 6 and n.store.read().leader_id == -1


def test_prospective_stands_at_once_when_a_voter_takes_no_pre_votes():
    """Kafka ``handleVoteResponse``: a top-level UNSUPPORTED_VERSION (a peer below Vote v2, the
    driver makes it up without sending) makes a Prospective a Candidate at once."""
    n = make_node(1, state=ElectionState(epoch=2))
    n.core.poll(n.core.next_deadline_ms())
    v = one(n.outbound(), VOTE, 2)
    resp = codec.module("VoteResponse").VoteResponse(error_code=int(E.UNSUPPORTED_VERSION))
    n.core.handle_response(5000, 2, v.correlation, resp)
    assert (n.core.state, n.core.epoch) == ("Candidate", 3)


def test_prospective_knowing_its_leader_stays_prospective_on_that_leaders_begin():
    """Kafka ``maybeTransition``: in the same epoch, a leader claim moves a node to Follower
    only when it knows no leader; a Prospective carries the leader it followed."""
    n = follower_node(2, leader=1, epoch=3)
    n.core.poll(n.core.next_deadline_ms())
    assert n.core.state == "Prospective"
    p = partition(n.request(3000, BEGIN, V_BEGIN, begin_request(1, 3)))
    assert p.error_code == 0 and (n.core.state, n.core.leader_id) == ("Prospective", 1)


# ============================================================================ directory ids


def test_vote_request_carries_our_directory_id_and_a_zero_voter_directory():
    n = make_node(1, state=ElectionState(epoch=2), directory_id=DIR_A)
    n.core.poll(n.core.next_deadline_ms())
    for o in n.outbound():
        p = o.request.topics[0].partitions[0]
        assert o.request.voter_id == o.destination
        assert p.replica_directory_id == DIR_A and p.voter_directory_id.int == 0


def test_vote_with_another_voter_directory_id_is_invalid_voter_key_after_the_bump():
    n = make_node(2, directory_id=DIR_A)
    bad = _with_dirs(vote_request(1, 3, 0, 0, voter_id=2), voter_dir=DIR_B)
    p = partition(n.request(0, VOTE, V_VOTE, bad))
    assert p.error_code == E.INVALID_VOTER_KEY and p.vote_granted is False
    assert (n.core.epoch, n.core.voted_id) == (3, -1)
    good = _with_dirs(vote_request(1, 3, 0, 0, voter_id=2), voter_dir=DIR_A)
    assert partition(n.request(0, VOTE, V_VOTE, good)).vote_granted is True


def test_begin_with_another_voter_directory_id_is_invalid_voter_key_after_the_transition():
    n = make_node(2, directory_id=DIR_A)
    req = _with_dirs(begin_request(1, 4), voter_dir=DIR_B)
    import dataclasses

    req = dataclasses.replace(req, voter_id=2)
    p = partition(n.request(0, BEGIN, V_BEGIN, req))
    assert p.error_code == E.INVALID_VOTER_KEY
    assert (n.core.state, n.core.epoch, n.core.leader_id) == ("Follower", 4, 1)


def test_a_vote_recorded_with_a_directory_is_granted_again_only_to_that_directory():
    n = make_node(2)
    first = _with_dirs(vote_request(1, 3, 0, 0), replica_dir=DIR_A)
    assert partition(n.request(0, VOTE, V_VOTE, first)).vote_granted is True
    other = _with_dirs(vote_request(1, 3, 0, 0), replica_dir=DIR_B)
    assert partition(n.request(0, VOTE, V_VOTE, other)).vote_granted is False
    assert partition(n.request(0, VOTE, V_VOTE, first)).vote_granted is True


def test_end_quorum_epoch_position_matches_our_directory_or_none():
    n = make_node(2, voter_ids=(1, 2, 3, 4), state=ElectionState(epoch=1, leader_id=1),
                  directory_id=DIR_A)  # fmt: skip
    m = codec.module("EndQuorumEpochRequest")
    req = end_request(1, 1, [2, 3, 4])
    import dataclasses

    t = req.topics[0]
    p = dataclasses.replace(t.partitions[0], preferred_candidates=(
        m.ReplicaInfo(candidate_id=2, candidate_directory_id=DIR_B),
        m.ReplicaInfo(candidate_id=3), m.ReplicaInfo(candidate_id=4)))  # fmt: skip
    req = dataclasses.replace(req, topics=(dataclasses.replace(t, partitions=(p,)),))
    partition(n.request(0, END, V_END, req))
    # another directory under our id: not us, so position 3 of 3 (Kafka: strict backoff 1000)
    assert n.core.next_deadline_ms() == 1000


# ============================================================================ leader duties


def test_begin_quorum_epoch_goes_again_only_to_voters_that_do_not_fetch():
    """Kafka ``LeaderState.needToSendBeginQuorumRequests``: every fetch.timeout/2 (1000 ms), to
    the voters without a valid Fetch in that time."""
    n = leader_node(epoch=1)
    n.core.poll(0)
    first = n.outbound()
    assert sorted(o.destination for o in first if o.api_key == BEGIN) == [2, 3]
    for o in first:
        n.core.handle_response(1, o.destination, o.correlation, None)
    fetch_partition(n.request(900, FETCH, V_FETCH, fetch_request(2, 1, 1, 1)))
    n.core.poll(1000)
    assert sorted(o.destination for o in n.outbound() if o.api_key == BEGIN) == [3]
    fetch_partition(n.request(1500, FETCH, V_FETCH, fetch_request(3, 1, 1, 1)))
    n.core.poll(2000)
    assert sorted(o.destination for o in n.outbound() if o.api_key == BEGIN) == [2]


def _update_voter(epoch: int, cluster_id: str | None = CLUSTER_ID):
    return UpdateVoterReq.UpdateRaftVoterRequest(
        cluster_id=cluster_id,
        current_leader_epoch=epoch,
        voter_id=2,
        voter_directory_id=DIR_B,
        listeners=(UpdateVoterReq.Listener(name="CONTROLLER", host="h2", port=9092),),
        kraft_version_feature=UpdateVoterReq.KRaftVersionFeature(
            min_supported_version=0, max_supported_version=1
        ),
    )


def test_update_raft_voter_on_our_static_leader_is_recorded_with_us_as_current_leader():
    """``KafkaRaftClient.shouldSendUpdateVoteRequest``: a Kafka follower voter asks every new leader
    until it gets NONE or UNSUPPORTED_VERSION naming that leader. A Kafka 4.1+ leader at
    kraft.version 0 answers REQUEST_TIMED_OUT before it has a high watermark, then records the
    entry in its volatile voters (the static voter set itself is not changed) and answers NONE."""
    n = leader_node(epoch=3)
    early = n.request(0, 82, 0, _update_voter(3))
    assert early.error_code == E.REQUEST_TIMED_OUT and early.current_leader.leader_id == 1
    fetch_partition(n.request(0, FETCH, V_FETCH, fetch_request(3, 3, 1, 3)))
    assert n.core.high_watermark == 1
    r = n.request(0, 82, 0, _update_voter(3))
    assert r.error_code == 0
    cl = r.current_leader
    assert (cl.leader_id, cl.leader_epoch, cl.host, cl.port) == (1, 3, "controller-1", 9091)
    assert n.core.voter_set[2].directory_id.int == 0 and n.core.kraft_version == 0
    assert n.request(0, 82, 0, _update_voter(2)).error_code == E.FENCED_LEADER_EPOCH
    assert n.request(0, 82, 0, _update_voter(4)).error_code == E.UNKNOWN_LEADER_EPOCH
    bad = n.request(0, 82, 0, _update_voter(3, cluster_id="other"))
    assert bad.error_code == E.INCONSISTENT_CLUSTER_ID and bad.current_leader.leader_id == 1
    # encodes at v0 with the tagged CurrentLeader, and decodes back equal
    data = codec.encode(r, 0)
    assert codec.decode("UpdateRaftVoterResponse", 0, data) == r


def test_update_raft_voter_on_a_follower_names_the_leader():
    n = follower_node(2, leader=1, epoch=3)
    r = n.request(0, 82, 0, _update_voter(3))
    assert r.error_code == E.NOT_LEADER_OR_FOLLOWER
    assert (r.current_leader.leader_id, r.current_leader.leader_epoch) == (1, 3)
    assert r.current_leader.host == "controller-1"
