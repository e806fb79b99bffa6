"""RaftCore against Kafka's KRaft rules (``KafkaRaftClient``, ``QuorumState``), in the spirit of
Kafka's ``KafkaRaftClientTest`` and ``QuorumStateTest``: each test drives one or two cores by
hand with explicit times, and checks exact error codes, states and what was persisted."""

from __future__ import annotations

import uuid

import pytest

from kafka_rpc.protocol import codec
from kafka_rpc.protocol.errors import ErrorCode as E
from kafka_rpc.protocol.record_batch import CONTROL_LEADER_CHANGE, control_type, decode_batches
from kafka_rpc.raft.api import ElectionState
from kafka_rpc.raft.core import NotLeaderError
from tests.raft.conftest import (
    BEGIN,
    END,
    FETCH,
    V_BEGIN,
    V_END,
    V_FETCH,
    V_VOTE,
    VOTE,
    begin_request,
    data_batch,
    deliver,
    elect,
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

# =============================================================================== Vote (1.5)


def test_vote_granted_to_up_to_date_candidate_with_higher_epoch():
    n = make_node(2)
    assert (n.core.state, n.core.epoch) == ("Unattached", 0)
    p = partition(n.request(0, VOTE, V_VOTE, vote_request(1, 1, 0, 0)))
    assert p.error_code == 0 and p.vote_granted is True
    assert (p.leader_epoch, p.leader_id) == (1, -1)
    assert n.core.state == "Unattached" and n.core.state_name == "Unattached (voted)"
    assert (n.core.epoch, n.core.voted_id, n.core.leader_id) == (1, 1, -1)
    st = n.store.read()
    assert (st.epoch, st.voted_id, st.leader_id) == (1, 1, -1)


def test_vote_not_granted_to_candidate_whose_log_is_behind_but_epoch_adopted():
    # local log: epoch 2 ends at offset 3; the candidate's last epoch is 1 (behind)
    n = make_node(2, state=ElectionState(epoch=2), log=log_with(data_batch(0, 2, 3)))
    p = partition(n.request(0, VOTE, V_VOTE, vote_request(1, 3, 1, 10)))
    assert p.error_code == 0 and p.vote_granted is False and p.leader_epoch == 3
    assert (n.core.state, n.core.epoch, n.core.voted_id) == ("Unattached", 3, -1)
    st = n.store.read()
    assert (st.epoch, st.voted_id) == (3, -1)
    # same last epoch but a shorter log is behind too (epoch first, then offset)
    p = partition(n.request(0, VOTE, V_VOTE, vote_request(3, 4, 2, 2)))
    assert p.vote_granted is False and n.core.epoch == 4 and n.core.voted_id == -1
    # equal (epoch, offset) is up to date
    p = partition(n.request(0, VOTE, V_VOTE, vote_request(3, 5, 2, 3)))
    assert p.vote_granted is True and n.core.voted_id == 3


def test_vote_second_candidate_in_same_epoch_rejected():
    n = make_node(2)
    assert partition(n.request(0, VOTE, V_VOTE, vote_request(1, 1, 0, 0))).vote_granted
    writes = n.store.writes
    p = partition(n.request(1, VOTE, V_VOTE, vote_request(3, 1, 0, 0)))
    assert p.error_code == 0 and p.vote_granted is False
    assert (n.core.epoch, n.core.voted_id) == (1, 1)
    assert n.store.writes == writes and n.store.read().voted_id == 1


def test_vote_idempotent_regrant_to_same_candidate():
    n = make_node(2)
    assert partition(n.request(0, VOTE, V_VOTE, vote_request(1, 1, 0, 0))).vote_granted
    p = partition(n.request(5, VOTE, V_VOTE, vote_request(1, 1, 0, 0)))
    assert p.error_code == 0 and p.vote_granted is True
    assert (n.core.epoch, n.core.voted_id) == (1, 1)


@pytest.mark.parametrize("local_epoch, cand_epoch", [(0, 2), (5, 2)])
def test_vote_last_offset_epoch_not_below_candidate_epoch_is_invalid_request(
    local_epoch, cand_epoch
):
    # checked before epoch fencing: even at a stale epoch (5 > 2) the answer is INVALID_REQUEST,
    # at the top level (a partition-level one halts a Kafka voter)
    n = make_node(2, state=ElectionState(epoch=local_epoch))
    resp = n.request(0, VOTE, V_VOTE, vote_request(1, cand_epoch, cand_epoch, 0))
    assert resp.error_code == E.INVALID_REQUEST and resp.topics == ()
    assert (n.core.state, n.core.epoch, n.core.voted_id) == ("Unattached", local_epoch, -1)
    assert n.store.writes == 0


def test_vote_negative_last_offset_is_invalid_request():
    n = make_node(2)
    resp = n.request(0, VOTE, V_VOTE, vote_request(1, 1, 0, -1))
    assert resp.error_code == E.INVALID_REQUEST and resp.topics == ()
    assert n.core.epoch == 0 and n.store.writes == 0


def test_vote_stale_epoch_fenced():
    n = make_node(2, state=ElectionState(epoch=3))
    p = partition(n.request(0, VOTE, V_VOTE, vote_request(1, 2, 1, 0)))
    assert p.error_code == E.FENCED_LEADER_EPOCH and p.vote_granted is False
    assert p.leader_epoch == 3
    assert (n.core.epoch, n.core.voted_id) == (3, -1) and n.store.writes == 0


def test_vote_wrong_cluster_id_top_level_error():
    n = make_node(2)
    resp = n.request(0, VOTE, V_VOTE, vote_request(1, 1, 0, 0, cluster_id="other"))
    assert resp.error_code == E.INCONSISTENT_CLUSTER_ID and resp.topics == ()
    assert (n.core.epoch, n.core.voted_id) == (0, -1) and n.store.writes == 0


def test_vote_null_cluster_id_accepted():
    n = make_node(2)
    p = partition(n.request(0, VOTE, V_VOTE, vote_request(1, 1, 0, 0, cluster_id=None)))
    assert p.vote_granted is True


def test_vote_wrong_topic_id_top_level_invalid_request():
    n = make_node(2)
    resp = n.request(0, VOTE, V_VOTE, vote_request(1, 1, 0, 0, topic_id=uuid.UUID(int=7)))
    assert resp.error_code == E.INVALID_REQUEST and resp.topics == ()
    assert (n.core.epoch, n.core.voted_id) == (0, -1) and n.store.writes == 0


def test_vote_from_non_voter_is_answered_like_any_other():
    """Kafka 4.x ``validateVoterOnlyRequest`` does not check membership: no
    INCONSISTENT_VOTER_SET; the higher epoch is adopted and an up-to-date candidate granted."""
    n = make_node(2)
    p = partition(n.request(0, VOTE, V_VOTE, vote_request(7, 4, 0, 0)))
    assert p.error_code == 0 and p.vote_granted is True
    assert (n.core.state, n.core.epoch, n.core.voted_id) == ("Unattached", 4, 7)


def test_observer_grants_vote_and_never_stands():
    n = make_node(9)  # not in the static voters {1, 2, 3}
    assert not n.core.is_voter
    p = partition(n.request(0, VOTE, V_VOTE, vote_request(1, 2, 0, 0)))
    assert p.error_code == 0 and p.vote_granted is True
    for t in (0, 5_000, 50_000):
        n.core.poll(t)
        assert n.core.state == "Unattached"
        assert [o for o in n.outbound() if o.api_key == VOTE] == []


def test_vote_response_inconsistent_voter_set_is_a_rejection():
    """A 3.x peer may still answer INCONSISTENT_VOTER_SET: taken as a vote not granted."""
    n = make_node(1, state=ElectionState(epoch=4, voted_id=1))
    n.core.poll(0)
    v = one(n.outbound(), VOTE, 2)
    n.core.handle_response(0, 2, v.correlation,
                           vote_response(4, False, code=int(E.INCONSISTENT_VOTER_SET)))  # fmt: skip
    assert n.core.state == "Candidate" and 2 in n.core._rejected


def test_leader_steps_down_on_vote_with_higher_epoch():
    n = leader_node(epoch=1)
    assert n.log.end_offset == 1  # the LeaderChange batch
    p = partition(n.request(10, VOTE, V_VOTE, vote_request(2, 2, 1, 1)))
    assert p.error_code == 0 and p.vote_granted is True
    assert (n.core.state, n.core.epoch, n.core.voted_id, n.core.leader_id) == (
        "Unattached", 2, 2, -1,
    )  # fmt: skip
    st = n.store.read()
    assert (st.epoch, st.voted_id, st.leader_id) == (2, 2, -1)
    with pytest.raises(NotLeaderError):
        n.core.append(10, [b"x"])


def test_leader_and_candidate_reject_vote_in_their_own_epoch():
    n = leader_node(epoch=3)
    p = partition(n.request(0, VOTE, V_VOTE, vote_request(2, 3, 2, 100)))
    assert p.vote_granted is False and n.core.state == "Leader"
    c = make_node(1, state=ElectionState(epoch=3, voted_id=1))
    p = partition(c.request(0, VOTE, V_VOTE, vote_request(2, 3, 2, 100)))
    assert p.vote_granted is False and c.core.state == "Candidate" and c.core.voted_id == 1


# =============================================================================== pre-vote (1.16)


def test_pre_vote_granted_without_epoch_change_or_persistence():
    n = make_node(2, state=ElectionState(epoch=4))
    # a pre-vote's last epoch may equal the replica epoch
    p = partition(n.request(0, VOTE, V_VOTE, vote_request(1, 4, 4, 0, pre_vote=True)))
    assert p.error_code == 0 and p.vote_granted is True and p.leader_epoch == 4
    assert (n.core.state, n.core.epoch, n.core.voted_id) == ("Unattached", 4, -1)
    assert n.store.writes == 0
    # a pre-vote at a higher epoch makes the receiver adopt that epoch (Kafka 4.x
    # ``handleVoteRequest`` bumps before it looks at PreVote): Unattached, persisted, no vote
    p = partition(n.request(0, VOTE, V_VOTE, vote_request(1, 6, 4, 0, pre_vote=True)))
    assert p.vote_granted is True and p.leader_epoch == 6
    assert (n.core.state, n.core.epoch, n.core.voted_id) == ("Unattached", 6, -1)
    assert n.store.writes == 1 and n.store.read().epoch == 6


def test_pre_vote_last_epoch_above_replica_epoch_is_invalid_request():
    n = make_node(2)
    resp = n.request(0, VOTE, V_VOTE, vote_request(1, 1, 2, 0, pre_vote=True))
    assert resp.error_code == E.INVALID_REQUEST and resp.topics == ()


def test_pre_vote_rejected_by_follower_that_has_fetched_from_its_leader():
    n = follower_node(2, leader=1, epoch=1)
    # not fetched yet: a follower may grant a pre-vote
    p = partition(n.request(0, VOTE, V_VOTE, vote_request(3, 1, 0, 0, pre_vote=True)))
    assert p.vote_granted is True and n.core.state == "Follower"
    n.core.poll(0)
    f = one(n.outbound(), FETCH, 1)
    n.core.handle_response(1, 1, f.correlation, fetch_response(1, 1, records=b""))
    p = partition(n.request(2, VOTE, V_VOTE, vote_request(3, 1, 0, 0, pre_vote=True)))
    assert p.error_code == 0 and p.vote_granted is False
    assert (n.core.state, n.core.epoch, n.core.leader_id) == ("Follower", 1, 1)


def test_election_timeout_prospective_then_candidate_then_leader():
    n = make_node(1)
    assert n.core.state == "Unattached"
    n.core.poll(999)
    assert n.core.state == "Unattached" and n.outbound() == []
    # the election timer is drawn from [1000, 2000)
    n.core.poll(2000)
    assert n.core.state == "Prospective" and n.core.epoch == 0 and n.store.writes == 0
    out = n.outbound()
    assert sorted(o.destination for o in out if o.api_key == VOTE) == [2, 3]
    for o in out:
        pd = o.request.topics[0].partitions[0]
        assert pd.pre_vote is True and pd.replica_epoch == 0 and pd.replica_id == 1
    v2 = one(out, VOTE, 2)
    n.core.handle_response(2001, 2, v2.correlation, vote_response(0, True))
    assert (n.core.state, n.core.epoch, n.core.voted_id) == ("Candidate", 1, 1)
    st = n.store.read()
    assert (st.epoch, st.voted_id, st.leader_id) == (1, 1, -1)
    n.core.poll(2001)
    out = n.outbound()
    assert sorted(o.destination for o in out if o.api_key == VOTE) == [2, 3]
    for o in out:
        pd = o.request.topics[0].partitions[0]
        assert pd.pre_vote is False and pd.replica_epoch == 1
        assert (pd.last_offset_epoch, pd.last_offset) == (0, 0)
    v3 = one(out, VOTE, 3)
    n.core.handle_response(2002, 3, v3.correlation, vote_response(1, True))
    assert (n.core.state, n.core.epoch, n.core.leader_id) == ("Leader", 1, 1)
    assert n.store.read().leader_id == 1
    assert n.core.high_watermark == -1
    # the LeaderChangeMessage control batch at the epoch start offset
    batches = list(n.log.batches(0, n.log.end_offset))
    assert len(batches) == 1 and batches[0].is_control and batches[0].epoch == 1
    assert control_type(batches[0].keys[0]) == CONTROL_LEADER_CHANGE
    msg = codec.decode("LeaderChangeMessage", 0, batches[0].records[0])
    assert msg.leader_id == 1
    assert sorted(v.voter_id for v in msg.voters) == [1, 2, 3]
    assert sorted(v.voter_id for v in msg.granting_voters) == [1, 3]
    # BeginQuorumEpoch to every other voter
    n.core.poll(2002)
    out = n.outbound()
    begins = sorted(o.destination for o in out if o.api_key == BEGIN)
    assert begins == [2, 3]
    bp = one(out, BEGIN, 2).request.topics[0].partitions[0]
    assert (bp.leader_id, bp.leader_epoch) == (1, 1)


def test_lost_pre_vote_does_not_bump_epoch():
    n = make_node(1)
    n.core.poll(2000)
    assert n.core.state == "Prospective"
    out = n.outbound()
    for o in out:
        n.core.handle_response(2001, o.destination, o.correlation, vote_response(0, False))
    # no leader known: Unattached at the same epoch (durable, as Kafka's transitionToUnattached)
    assert n.core.state == "Unattached" and n.core.epoch == 0 and n.core.voted_id == -1
    assert n.store.read().epoch == 0


def test_single_voter_is_leader_right_after_construction():
    n = make_node(1, voter_ids=(1,))
    assert (n.core.state, n.core.epoch, n.core.leader_id) == ("Leader", 1, 1)
    st = n.store.read()
    assert (st.epoch, st.leader_id) == (1, 1)
    assert n.log.end_offset == 1 and n.core.high_watermark == -1
    n.flush(0)
    assert n.core.high_watermark == 1
    assert n.sm.leader_changes[-1] == (1, 1)


# =============================================================================== restart (1.1)


def test_restart_of_leader_comes_back_resigned_and_does_not_vote_in_that_epoch():
    n = make_node(1, state=ElectionState(epoch=5, leader_id=1))
    assert (n.core.state, n.core.epoch, n.core.leader_id) == ("Resigned", 5, 1)
    assert n.store.writes == 0  # Resigned is not persisted
    p = partition(n.request(0, VOTE, V_VOTE, vote_request(2, 5, 4, 100)))
    assert p.error_code == 0 and p.vote_granted is False
    assert (n.core.state, n.core.epoch, n.core.voted_id) == ("Resigned", 5, -1)
    # ... but it does vote in a higher epoch
    p = partition(n.request(0, VOTE, V_VOTE, vote_request(2, 6, 4, 100)))
    assert p.vote_granted is True and (n.core.epoch, n.core.voted_id) == (6, 2)


def test_restart_of_self_voted_node_comes_back_candidate():
    n = make_node(1, state=ElectionState(epoch=4, voted_id=1))
    assert (n.core.state, n.core.epoch, n.core.voted_id) == ("Candidate", 4, 1)


def test_restart_with_vote_for_other_stays_voted():
    n = make_node(1, state=ElectionState(epoch=4, voted_id=3))
    assert (n.core.state_name, n.core.epoch, n.core.voted_id) == ("Unattached (voted)", 4, 3)
    p = partition(n.request(0, VOTE, V_VOTE, vote_request(2, 4, 0, 0)))
    assert p.vote_granted is False


def test_restart_with_log_epoch_above_persisted_epoch_is_unattached_at_log_epoch():
    n = make_node(2, state=ElectionState(epoch=1, leader_id=1), log=log_with(data_batch(0, 3, 2)))
    assert (n.core.state, n.core.epoch, n.core.leader_id) == ("Unattached", 3, -1)


# =============================================================================== BeginQuorumEpoch


def test_begin_quorum_epoch_makes_unattached_voter_follower():
    n = make_node(2)
    p = partition(n.request(0, BEGIN, V_BEGIN, begin_request(1, 2)))
    assert p.error_code == 0 and (p.leader_id, p.leader_epoch) == (1, 2)
    assert (n.core.state, n.core.epoch, n.core.leader_id) == ("Follower", 2, 1)
    st = n.store.read()
    assert (st.epoch, st.leader_id) == (2, 1)
    n.core.poll(0)
    f = one(n.outbound(), FETCH, 1)
    fp = f.request.topics[0].partitions[0]
    assert (fp.current_leader_epoch, fp.fetch_offset, fp.last_fetched_epoch) == (2, 0, 0)
    assert f.request.replica_state.replica_id == 2


def test_begin_quorum_epoch_same_epoch_voted_node_follows():
    n = make_node(2)
    partition(n.request(0, VOTE, V_VOTE, vote_request(1, 1, 0, 0)))
    p = partition(n.request(1, BEGIN, V_BEGIN, begin_request(1, 1)))
    assert p.error_code == 0
    assert (n.core.state, n.core.epoch, n.core.leader_id) == ("Follower", 1, 1)


def test_begin_quorum_epoch_stale_epoch_fenced():
    n = make_node(2, state=ElectionState(epoch=3))
    p = partition(n.request(0, BEGIN, V_BEGIN, begin_request(1, 2)))
    assert p.error_code == E.FENCED_LEADER_EPOCH and p.leader_epoch == 3
    assert (n.core.state, n.core.epoch, n.core.leader_id) == ("Unattached", 3, -1)
    assert n.store.writes == 0


def test_begin_quorum_epoch_wrong_cluster_id():
    n = make_node(2)
    resp = n.request(0, BEGIN, V_BEGIN, begin_request(1, 2, cluster_id="nope"))
    assert resp.error_code == E.INCONSISTENT_CLUSTER_ID and resp.topics == ()
    assert (n.core.state, n.core.epoch) == ("Unattached", 0) and n.store.writes == 0


# =============================================================================== EndQuorumEpoch


def test_end_quorum_epoch_first_preferred_candidate_times_out_at_once():
    n = follower_node(2, leader=1, epoch=1, now=100)
    p = partition(n.request(100, END, V_END, end_request(1, 1, [2, 3])))
    assert p.error_code == 0
    assert n.core.state == "Follower"
    n.core.poll(100)
    assert n.core.state == "Prospective"
    out = n.outbound()
    assert sorted(o.destination for o in out if o.api_key == VOTE) == [1, 3]


def test_end_quorum_epoch_unattached_same_epoch_follows_then_times_out():
    n = make_node(2, state=ElectionState(epoch=1), now=100)
    partition(n.request(100, END, V_END, end_request(1, 1, [2, 3])))
    assert (n.core.state, n.core.leader_id) == ("Follower", 1)
    n.core.poll(100)
    assert n.core.state == "Prospective"


def test_end_quorum_epoch_second_of_three_waits_strict_backoff():
    # election.backoff.max 1000 ms, 3 preferred candidates: positions wait 0, 250, 500 ms
    n = make_node(2, voter_ids=(1, 2, 3, 4), state=ElectionState(epoch=1, leader_id=1), now=100)
    partition(n.request(100, END, V_END, end_request(1, 1, [3, 2, 4])))
    n.core.poll(100)
    n.core.poll(349)
    assert n.core.state == "Follower"
    n.core.poll(350)
    assert n.core.state == "Prospective"


def test_end_quorum_epoch_stale_epoch_fenced_without_timer_change():
    n = follower_node(2, leader=1, epoch=3, now=0)
    p = partition(n.request(0, END, V_END, end_request(1, 2, [2, 3])))
    assert p.error_code == E.FENCED_LEADER_EPOCH
    n.core.poll(1)
    assert (n.core.state, n.core.epoch) == ("Follower", 3)


# =============================================================================== high watermark


def test_leader_high_watermark_needs_majority_past_epoch_start():
    n = make_node(1, state=ElectionState(epoch=1, voted_id=1))
    elect(n, 0)
    assert n.core.high_watermark == -1
    assert n.log.end_offset == 1 and n.log.flushed_offset == 0
    # a follower past the epoch start does not help while the leader's own append is unflushed
    fetch_partition(n.request(1, FETCH, V_FETCH, fetch_request(2, 1, 1, 1)))
    assert n.core.high_watermark == -1
    n.flush(2)
    assert n.core.high_watermark == 1
    assert n.sm.leader_changes[-1] == (1, 1)


def test_leader_high_watermark_not_from_leader_alone_nor_from_epoch_start():
    n = leader_node(epoch=1)  # flushed: leader end 1
    assert n.core.high_watermark == -1
    # replica 2 at offset 0 == epoch start: not past it
    fp = fetch_partition(n.request(1, FETCH, V_FETCH, fetch_request(2, 1, 0, 0)))
    assert fp.error_code == 0 and fp.high_watermark == -1
    assert n.core.high_watermark == -1
    # replica 2 at offset 1: majority (1 and 2) past the epoch start
    fp = fetch_partition(n.request(2, FETCH, V_FETCH, fetch_request(2, 1, 1, 1)))
    assert n.core.high_watermark == 1 and fp.high_watermark == 1


def test_leader_high_watermark_never_goes_down():
    n = leader_node(epoch=1)
    fetch_partition(n.request(1, FETCH, V_FETCH, fetch_request(2, 1, 1, 1)))
    assert n.core.high_watermark == 1
    fetch_partition(n.request(2, FETCH, V_FETCH, fetch_request(2, 1, 0, 0)))
    assert n.core.high_watermark == 1
    fetch_partition(n.request(3, FETCH, V_FETCH, fetch_request(3, 1, 0, 0)))
    assert n.core.high_watermark == 1


def test_follower_high_watermark_is_min_of_leader_hwm_and_local_end():
    n = follower_node(2, leader=1, epoch=1)
    n.core.poll(0)
    f = one(n.outbound(), FETCH, 1)
    recs = data_batch(0, 1, 2).data  # offsets 0..1
    n.core.handle_response(
        1, 1, f.correlation, fetch_response(1, 1, records=recs, high_watermark=10)
    )
    assert n.log.end_offset == 2
    assert n.core.high_watermark == 2
    assert n.core.state == "Follower"
    # the next Fetch waits for the flush, then asks from the new end
    n.core.poll(2)
    assert n.outbound() == []
    n.flush(2)
    n.core.poll(2)
    f = one(n.outbound(), FETCH, 1)
    fp = f.request.topics[0].partitions[0]
    assert (fp.fetch_offset, fp.last_fetched_epoch) == (2, 1)
    recs = data_batch(2, 1, 3).data  # offsets 2..4
    n.core.handle_response(
        3, 1, f.correlation, fetch_response(1, 1, records=recs, high_watermark=3)
    )
    assert n.log.end_offset == 5 and n.core.high_watermark == 3
    # only whole batches below the HWM are delivered: [2, 5) straddles it
    assert n.sm.committed_data() == [b"v0", b"v1"]


# =============================================================================== Fetch, leader side


def test_fetch_wrong_topic_id_top_level_invalid_request():
    n = leader_node()
    resp = n.request(0, FETCH, V_FETCH, fetch_request(2, 1, 0, 0, topic_id=uuid.UUID(int=9)))
    assert resp.error_code == E.INVALID_REQUEST and resp.responses == ()


def test_fetch_wrong_cluster_id_top_level_error():
    n = leader_node()
    resp = n.request(0, FETCH, V_FETCH, fetch_request(2, 1, 0, 0, cluster_id="x"))
    assert resp.error_code == E.INCONSISTENT_CLUSTER_ID and resp.responses == ()


def test_fetch_last_fetched_epoch_above_leader_epoch_invalid_request():
    n = leader_node(epoch=1)
    resp = n.request(0, FETCH, V_FETCH, fetch_request(2, 1, 1, 2))
    assert resp.error_code == E.INVALID_REQUEST and resp.responses == ()


@pytest.mark.parametrize(
    "req_epoch, code",
    [(1, E.FENCED_LEADER_EPOCH), (3, E.UNKNOWN_LEADER_EPOCH)],
)
def test_fetch_epoch_validation(req_epoch, code):
    n = leader_node(epoch=2)
    fp = fetch_partition(n.request(0, FETCH, V_FETCH, fetch_request(2, req_epoch, 0, 0)))
    assert fp.error_code == code
    assert (fp.current_leader.leader_id, fp.current_leader.leader_epoch) == (1, 2)
    assert fp.high_watermark == -1 and not fp.records
    assert n.core.state == "Leader"


def test_fetch_on_non_leader_not_leader_or_follower():
    n = follower_node(2, leader=1, epoch=1)
    fp = fetch_partition(n.request(0, FETCH, V_FETCH, fetch_request(3, 1, 0, 0)))
    assert fp.error_code == E.NOT_LEADER_OR_FOLLOWER
    assert (fp.current_leader.leader_id, fp.current_leader.leader_epoch) == (1, 1)


def test_fetch_on_resigned_ex_leader_not_leader_or_follower():
    n = make_node(1, state=ElectionState(epoch=5, leader_id=1))
    fp = fetch_partition(n.request(0, FETCH, V_FETCH, fetch_request(2, 5, 0, 0)))
    assert fp.error_code == E.NOT_LEADER_OR_FOLLOWER
    assert (fp.current_leader.leader_id, fp.current_leader.leader_epoch) == (1, 5)


def test_divergent_follower_gets_diverging_epoch_and_truncates():
    # leader: epoch 1 at [0, 2), then its own epoch 3 from offset 2
    leader = make_node(
        1, state=ElectionState(epoch=3, voted_id=1), log=log_with(data_batch(0, 1, 2))
    )
    elect(leader, 0)
    leader.flush(0)
    assert leader.log.end_offset == 3
    # follower: the same epoch 1, then an uncommitted epoch-2 tail [2, 5)
    fl = follower_node(2, leader=1, epoch=3,
                       log=log_with(data_batch(0, 1, 2), data_batch(2, 2, 3)))  # fmt: skip
    fl.core.poll(1)
    f = one(fl.outbound(), FETCH, 1)
    fp = f.request.topics[0].partitions[0]
    assert (fp.fetch_offset, fp.last_fetched_epoch) == (5, 2)
    resp = deliver(fl, leader, 1, f)
    rp = fetch_partition(resp)
    assert rp.error_code == 0 and not rp.records
    assert (rp.diverging_epoch.epoch, rp.diverging_epoch.end_offset) == (1, 2)
    # no replica-state update for a diverging fetch: no HWM
    assert leader.core.high_watermark == -1
    assert fl.log.end_offset == 2 and fl.log.last_fetched_epoch() == 1
    fl.core.poll(2)
    f = one(fl.outbound(), FETCH, 1)
    fp = f.request.topics[0].partitions[0]
    assert (fp.fetch_offset, fp.last_fetched_epoch) == (2, 1)
    rp = fetch_partition(deliver(fl, leader, 2, f))
    assert rp.diverging_epoch.epoch == -1 and rp.records
    assert fl.log.end_offset == 3 and fl.log.last_fetched_epoch() == 3


def test_caught_up_fetch_parked_then_completed_by_append_after_linger():
    n = leader_node(epoch=1)
    replies = n.park(10, FETCH, V_FETCH, fetch_request(2, 1, 1, 1, max_wait_ms=500))
    assert replies == []
    n.core.append(20, [b"a", b"b"])
    n.core.poll(44)
    assert replies == [] and n.log.end_offset == 1
    n.core.poll(45)  # 20 + append.linger.ms 25
    assert n.log.end_offset == 3
    assert len(replies) == 1
    fp = fetch_partition(replies[0])
    assert fp.error_code == 0
    bs = decode_batches(fp.records)
    assert [(b.base_offset, b.records) for b in bs] == [(1, (b"a", b"b"))]


def test_caught_up_fetch_parked_then_answered_empty_at_max_wait():
    n = leader_node(epoch=1)
    replies = n.park(10, FETCH, V_FETCH, fetch_request(2, 1, 1, 1, max_wait_ms=500))
    assert replies == []
    assert n.core.next_deadline_ms() <= 510
    n.core.poll(509)
    assert replies == []
    n.core.poll(510)
    assert len(replies) == 1
    fp = fetch_partition(replies[0])
    assert fp.error_code == 0 and not fp.records


def test_parked_fetch_answered_not_leader_when_leadership_lost():
    n = leader_node(epoch=1)
    replies = n.park(10, FETCH, V_FETCH, fetch_request(2, 1, 1, 1, max_wait_ms=500))
    partition(n.request(11, BEGIN, V_BEGIN, begin_request(3, 2)))
    assert n.core.state == "Follower"
    assert len(replies) == 1
    assert fetch_partition(replies[0]).error_code == E.NOT_LEADER_OR_FOLLOWER


# =============================================================================== check quorum


def test_leader_without_fetches_resigns_after_check_quorum_timeout():
    n = leader_node(epoch=1, now=0)
    n.core.poll(0)
    n.outbound()
    n.core.poll(2999)
    assert n.core.state == "Leader"
    n.outbound()
    n.core.poll(3000)  # 1.5 x fetch.timeout.ms 2000
    assert (n.core.state, n.core.epoch, n.core.leader_id) == ("Resigned", 1, 1)
    out = n.outbound()
    ends = sorted(o.destination for o in out if o.api_key == END)
    assert ends == [2, 3]
    ep = one(out, END, 2).request.topics[0].partitions[0]
    assert (ep.leader_id, ep.leader_epoch) == (1, 1)
    assert sorted(c.candidate_id for c in ep.preferred_candidates) == [2, 3]


def test_leader_with_majority_fetching_keeps_leadership():
    n = leader_node(epoch=1, now=0)
    for t in (1000, 2000, 3000, 4000):
        fetch_partition(n.request(t, FETCH, V_FETCH, fetch_request(2, 1, 1, 1)))
        n.core.poll(t)
    assert n.core.state == "Leader"


# =============================================================================== records


def test_append_on_non_leader_raises():
    n = follower_node(2, leader=1, epoch=1)
    with pytest.raises(NotLeaderError):
        n.core.append(0, [b"x"])
    c = make_node(1, state=ElectionState(epoch=1, voted_id=1))
    with pytest.raises(NotLeaderError):
        c.core.append(0, [b"x"])


def test_appended_records_become_one_batch_and_are_committed():
    n = leader_node(epoch=1)
    fetch_partition(n.request(1, FETCH, V_FETCH, fetch_request(2, 1, 1, 1)))
    assert n.core.high_watermark == 1
    last = n.core.append(100, [b"r1", b"r2"])
    assert last == 2
    assert n.core.append(110, [b"r3"]) == 3
    n.core.poll(124)
    assert n.log.end_offset == 1
    n.core.poll(125)
    assert n.log.end_offset == 4
    bs = list(n.log.batches(1, 4))
    assert len(bs) == 1 and bs[0].epoch == 1 and bs[0].records == (b"r1", b"r2", b"r3")
    assert n.sm.committed_data() == []
    n.flush(126)
    assert n.core.high_watermark == 1  # the follower has not fetched them yet
    fetch_partition(n.request(127, FETCH, V_FETCH, fetch_request(3, 1, 4, 1)))
    assert n.core.high_watermark == 4
    assert n.sm.committed_data() == [b"r1", b"r2", b"r3"]
    assert n.core.committed_offset == 4


def test_deferred_delivery_waits_for_deliver_committed():
    """With ``defer_delivery`` (what RaftDriver sets) a commit only marks ``delivery_due``;
    ``deliver_committed`` hands the batches over, once."""
    n = leader_node(epoch=1)
    n.core.defer_delivery = True
    fetch_partition(n.request(1, FETCH, V_FETCH, fetch_request(2, 1, 1, 1)))
    n.core.deliver_committed(1)
    n.core.append(100, [b"r1", b"r2"])
    n.core.poll(125)
    n.flush(126)
    fetch_partition(n.request(127, FETCH, V_FETCH, fetch_request(3, 1, 3, 1)))
    assert n.core.high_watermark == 3 and n.core.delivery_due
    assert n.sm.committed_data() == [] and n.core.committed_offset == 1
    n.core.deliver_committed(128)
    assert n.sm.committed_data() == [b"r1", b"r2"] and not n.core.delivery_due
    n.core.deliver_committed(129)  # nothing due: no second delivery
    assert n.sm.committed_data() == [b"r1", b"r2"] and n.core.committed_offset == 3


def test_deferred_delivery_comes_before_a_new_leader_is_announced():
    """The state machine sees what was committed before it hears of the next leader, as it
    would with inline delivery (Kafka's listener gets both in log order)."""
    fl = follower_node(2, leader=1, epoch=1, fetch_max_wait_ms=0)
    fl.core.defer_delivery = True
    leader = leader_node(epoch=1)
    leader.core.append(1, [b"x"])
    leader.core.poll(26)
    leader.flush(26)
    for t in range(30, 40):
        fl.core.poll(t)
        for ob in fl.outbound():
            deliver(fl, leader, t, ob)
        fl.flush(t)
    assert fl.core.high_watermark == 2 and fl.core.delivery_due and fl.sm.committed_data() == []
    changes = len(fl.sm.leader_changes)
    partition(fl.request(50, BEGIN, V_BEGIN, begin_request(3, 2)))
    assert fl.sm.leader_changes[changes:] == [(3, 2)]
    assert fl.sm.committed_data() == [b"x"] and not fl.core.delivery_due


def test_records_replicate_between_two_cores():
    leader = leader_node(epoch=1)
    fl = follower_node(2, leader=1, epoch=1, fetch_max_wait_ms=0)
    t = 1
    leader.core.append(t, [b"x", b"y"])
    leader.core.poll(t + 25)
    leader.flush(t + 25)
    for t in range(30, 40):
        fl.core.poll(t)
        for ob in fl.outbound():
            deliver(fl, leader, t, ob)
        fl.flush(t)
    assert fl.log.end_offset == 3 and leader.core.high_watermark == 3
    assert fl.core.high_watermark == 3
    assert fl.sm.committed_data() == [b"x", b"y"]


def test_follower_learning_leader_by_begin_quorum_epoch_tells_state_machine():
    n = make_node(2)
    partition(n.request(0, BEGIN, V_BEGIN, begin_request(1, 2)))
    assert n.sm.leader_changes[-1] == (1, 2)


def test_restart_as_follower_tells_state_machine_the_leader():
    n = follower_node(2, leader=1, epoch=1)
    n.core.poll(0)
    assert n.sm.leader_changes == [(1, 1)]


# =============================================================================== more rules


def test_vote_voter_key_mismatch_after_epoch_bump():
    n = make_node(2)
    p = partition(n.request(0, VOTE, V_VOTE, vote_request(1, 3, 0, 0, voter_id=3)))
    assert p.error_code == E.INVALID_VOTER_KEY and p.vote_granted is False
    assert (n.core.epoch, n.core.voted_id) == (3, -1)  # the epoch bump stays


def test_granting_a_vote_resets_the_election_timer():
    n = make_node(2)
    first = n.core.next_deadline_ms()
    assert 1000 <= first < 2000
    partition(n.request(first - 1, VOTE, V_VOTE, vote_request(1, 1, 0, 0)))
    n.core.poll(first + 1)
    assert n.core.state == "Unattached" and n.core.voted_id == 1
    n.core.poll(first - 1 + 999)
    assert n.core.state == "Unattached"
    n.core.poll(first - 1 + 2000)
    assert n.core.state == "Prospective"


def test_follower_fetch_timeout_goes_prospective():
    n = follower_node(2, leader=1, epoch=1, now=0)
    n.core.poll(0)
    f = one(n.outbound(), FETCH, 1)
    n.core.handle_response(1500, 1, f.correlation, fetch_response(1, 1, records=b""))
    n.core.poll(3499)
    assert n.core.state == "Follower"
    n.core.poll(3500)  # fetch.timeout.ms 2000 after the last successful response
    assert n.core.state == "Prospective" and n.core.epoch == 1 and n.store.writes == 0


def test_candidate_follows_leader_announced_in_its_epoch():
    n = make_node(1, state=ElectionState(epoch=4, voted_id=1))
    p = partition(n.request(0, BEGIN, V_BEGIN, begin_request(2, 4)))
    assert p.error_code == 0
    assert (n.core.state, n.core.epoch, n.core.leader_id) == ("Follower", 4, 2)


def test_candidate_loses_election_waits_its_timer_then_pre_votes_at_the_same_epoch():
    """Kafka 4.x ``pollCandidate``/``maybeHandleElectionLoss``: a rejected Candidate waits out
    its election timeout and goes back to Prospective at the same epoch; it never stands again
    at epoch + 1 without winning a pre-election first."""
    n = make_node(1, state=ElectionState(epoch=4, voted_id=1))
    deadline = n.core.next_deadline_ms()
    n.core.poll(0)
    out = n.outbound()
    for o in out:
        n.core.handle_response(1, o.destination, o.correlation, vote_response(4, False))
    assert n.core.state == "Candidate" and n.core.epoch == 4
    n.core.poll(deadline - 1)
    assert n.core.state == "Candidate" and n.outbound() == []  # no more votes: it has lost
    n.core.poll(deadline)
    assert (n.core.state, n.core.epoch, n.core.voted_id) == ("Prospective", 4, 1)
    out = n.outbound()
    assert sorted(o.destination for o in out) == [2, 3]
    assert all(o.request.topics[0].partitions[0].pre_vote for o in out)
    assert n.store.read().epoch == 4


def test_follower_moves_on_fetch_response_naming_new_leader():
    n = follower_node(2, leader=1, epoch=1)
    n.core.poll(0)
    f = one(n.outbound(), FETCH, 1)
    resp = fetch_response(3, 2, code=E.FENCED_LEADER_EPOCH)
    n.core.handle_response(1, 1, f.correlation, resp)
    assert (n.core.state, n.core.epoch, n.core.leader_id) == ("Follower", 2, 3)
    assert n.store.read().leader_id == 3
    n.core.poll(2)
    assert one(n.outbound(), FETCH).destination == 3


def test_stale_fetch_response_ignored():
    n = follower_node(2, leader=1, epoch=3)
    n.core.poll(0)
    f = one(n.outbound(), FETCH, 1)
    recs = data_batch(0, 1, 2).data
    n.core.handle_response(1, 1, f.correlation, fetch_response(1, 2, records=recs))
    assert n.log.end_offset == 0 and (n.core.epoch, n.core.leader_id) == (3, 1)


def test_observer_fetch_does_not_move_high_watermark():
    n = leader_node(epoch=1)
    fp = fetch_partition(n.request(1, FETCH, V_FETCH, fetch_request(7, 1, 1, 1)))
    assert fp.error_code == 0
    assert n.core.high_watermark == -1


def test_resigning_leader_prefers_successors_by_fetch_offset():
    n = leader_node(epoch=1)
    n.core.append(1, [b"a"])
    n.core.poll(26)
    n.flush(26)
    fetch_partition(n.request(27, FETCH, V_FETCH, fetch_request(3, 1, 2, 1)))
    fetch_partition(n.request(28, FETCH, V_FETCH, fetch_request(2, 1, 1, 1)))
    n.core.begin_shutdown(30, 5000)
    assert n.core.state == "Resigned"
    with pytest.raises(NotLeaderError):
        n.core.append(30, [b"b"])
    n.core.poll(30)
    out = n.outbound()
    ep = one(out, END, 2).request.topics[0].partitions[0]
    assert [c.candidate_id for c in ep.preferred_candidates] == [3, 2]
    # EndQuorumEpoch NONE from 2: only 3 is asked again
    n.core.handle_response(31, 2, one(out, END, 2).correlation, _end_ok(1, 1))
    n.core.handle_response(31, 3, one(out, END, 3).correlation, None)
    n.core.poll(31 + 1000)
    assert sorted(o.destination for o in n.outbound() if o.api_key == END) == [3]
    # a resigned (even shutting-down) node grants votes in a higher epoch
    p = partition(n.request(40, VOTE, V_VOTE, vote_request(3, 2, 1, 2)))
    assert p.vote_granted is True and (n.core.epoch, n.core.voted_id) == (2, 3)


def _end_ok(leader: int, epoch: int):
    m = codec.module("EndQuorumEpochResponse")
    p = m.PartitionData(partition_index=0, error_code=0, leader_id=leader, leader_epoch=epoch)
    return m.EndQuorumEpochResponse(topics=(m.TopicData(partitions=(p,)),))


def test_end_quorum_epoch_non_preferred_waits_backoff_max():
    n = make_node(2, voter_ids=(1, 2, 3, 4), state=ElectionState(epoch=1, leader_id=1), now=0)
    partition(n.request(0, END, V_END, end_request(1, 1, [3, 4])))
    n.core.poll(999)
    assert n.core.state == "Follower"
    n.core.poll(1000)
    assert n.core.state == "Prospective"


def test_leader_answers_its_own_begin_quorum_epoch():
    n = leader_node(epoch=2)
    p = partition(n.request(0, BEGIN, V_BEGIN, begin_request(1, 2)))
    assert p.error_code == 0 and n.core.state == "Leader"


def test_begin_quorum_epoch_from_non_voter_is_followed():
    """Kafka 4.x: no membership check; the replica follows the leader it is told of."""
    n = make_node(2)
    p = partition(n.request(0, BEGIN, V_BEGIN, begin_request(9, 2)))
    assert p.error_code == 0
    assert (n.core.state, n.core.epoch, n.core.leader_id) == ("Follower", 2, 9)


def test_observer_follows_begin_quorum_epoch():
    n = make_node(9)
    p = partition(n.request(0, BEGIN, V_BEGIN, begin_request(1, 2)))
    assert p.error_code == 0
    assert (n.core.state, n.core.epoch, n.core.leader_id) == ("Follower", 2, 1)


def test_candidate_vote_response_with_higher_epoch_makes_it_unattached():
    n = make_node(1, state=ElectionState(epoch=4, voted_id=1))
    n.core.poll(0)
    v = one(n.outbound(), VOTE, 2)
    n.core.handle_response(1, 2, v.correlation, vote_response(6, False))
    assert (n.core.state, n.core.epoch, n.core.voted_id) == ("Unattached", 6, -1)
    assert n.store.read().epoch == 6


def test_candidate_vote_response_naming_leader_in_its_epoch_makes_it_follower():
    n = make_node(1, state=ElectionState(epoch=4, voted_id=1))
    n.core.poll(0)
    v = one(n.outbound(), VOTE, 2)
    n.core.handle_response(1, 2, v.correlation, vote_response(4, False, leader=3))
    assert (n.core.state, n.core.epoch, n.core.leader_id) == ("Follower", 4, 3)


def test_record_timestamps_are_wall_clock_while_timers_stay_monotonic():
    """Kafka stamps batches with wall-clock ms; the driver's ``now`` is monotonic, so the core
    adds ``wall_offset_ms`` to it for timestamps (LeaderChange, data, snapshots)."""
    import random as _random

    from kafka_rpc.raft.core import RaftConfig, RaftCore
    from kafka_rpc.raft.memory import MemoryLog, MemoryQuorumStateStore
    from tests.raft.conftest import FakeStateMachine, voters

    wall = 1_795_000_000_000
    log = MemoryLog()
    core = RaftCore(RaftConfig(node_id=1, voters=voters(1), cluster_id="c", append_linger_ms=0),
                    log, MemoryQuorumStateStore(), FakeStateMachine(), _random.Random(0), 5_000,
                    wall_offset_ms=wall - 5_000)  # fmt: skip
    assert core.is_leader
    core.append(5_010, [b"x"])
    core.poll(5_010)  # linger 0: the poll right after the append writes it
    stamps = [b.max_timestamp for b in log.batches(0, log.end_offset)]
    assert stamps == [wall, wall + 10]
    assert core.next_deadline_ms() < wall  # timers are still on the monotonic clock
    (me,) = core.describe_quorum_partition(5_020).current_voters
    assert (me.last_fetch_timestamp, me.last_caught_up_timestamp) == (wall + 20, wall + 20)
    assert core.next_offset == log.end_offset  # nothing waits for the linger


# ================================================ no partition-level INVALID_REQUEST (Kafka halts)


@pytest.mark.parametrize("api, req_fn", [
    (BEGIN, lambda leader, epoch: begin_request(leader, epoch)),
    (END, lambda leader, epoch: end_request(leader, epoch, [2])),
])  # fmt: skip
@pytest.mark.parametrize("case", ["other leader known", "names us, not leading", "we lead"])
def test_contradictory_leader_claim_is_top_level_and_changes_nothing(api, req_fn, case):
    # Kafka's receiver throws in maybeTransition; its sender would halt on a partition-level
    # INVALID_REQUEST and throw on FENCED/NOT_LEADER naming another leader: top level only
    if case == "other leader known":
        n, claim = follower_node(2, leader=1, epoch=3), (3, 3)
    elif case == "names us, not leading":
        n, claim = follower_node(2, leader=1, epoch=3), (2, 3)
    else:
        n, claim = leader_node(epoch=3), (3, 3)
    before = (n.core.state, n.core.epoch, n.core.leader_id, n.store.writes)
    resp = n.request(0, api, V_BEGIN if api == BEGIN else V_END, req_fn(*claim))
    assert resp.error_code == E.UNKNOWN_SERVER_ERROR and resp.topics == ()
    assert (n.core.state, n.core.epoch, n.core.leader_id, n.store.writes) == before


def test_begin_quorum_epoch_negative_leader_id_top_level_invalid_request():
    n = make_node(2)
    resp = n.request(0, BEGIN, V_BEGIN, begin_request(-1, 2))
    assert resp.error_code == E.INVALID_REQUEST and resp.topics == ()
    assert (n.core.state, n.core.epoch) == ("Unattached", 0) and n.store.writes == 0


@pytest.mark.parametrize("offset, last_epoch, max_wait", [(-1, 0, 500), (0, -1, 500), (0, 0, -1)])
def test_fetch_malformed_offsets_top_level_invalid_request(offset, last_epoch, max_wait):
    n = leader_node(epoch=1)
    req = fetch_request(2, 1, offset, last_epoch, max_wait_ms=max_wait)
    resp = n.request(0, FETCH, V_FETCH, req)
    assert resp.error_code == E.INVALID_REQUEST and resp.responses == ()


# =============================================================================== DescribeQuorum

DescReq = codec.module("DescribeQuorumRequest")


def _describe(topics):
    return DescReq.DescribeQuorumRequest(topics=tuple(
        DescReq.TopicData(topic_name=name, partitions=tuple(
            DescReq.PartitionData(partition_index=i) for i in parts))
        for name, parts in topics
    ))  # fmt: skip


@pytest.mark.parametrize("version", [0, 1, 2])
@pytest.mark.parametrize("topics", [
    [("__cluster_metadata", [1])],
    [("other", [0])],
    [("__cluster_metadata", [0, 1])],
    [("__cluster_metadata", [0]), ("other", [0, 3])],
])  # fmt: skip
def test_describe_quorum_other_partition_unknown_topic_or_partition(version, topics):
    # Kafka handleDescribeQuorumRequest: getPartitionLevelErrorResponse over what was named
    n = leader_node()
    resp = n.request(0, 55, version, _describe(topics))
    assert resp.error_code == 0
    got = [(t.topic_name, [(p.partition_index, p.error_code) for p in t.partitions])
           for t in resp.topics]  # fmt: skip
    assert got == [(name, [(i, E.UNKNOWN_TOPIC_OR_PARTITION) for i in parts])
                   for name, parts in topics]  # fmt: skip
    # the same answer survives encoding at that version (ErrorMessage only from v2)
    wire = codec.decode("DescribeQuorumResponse", version,
                        codec.encode(resp, version))  # fmt: skip
    assert wire.topics[0].partitions[0].error_code == E.UNKNOWN_TOPIC_OR_PARTITION
    if version >= 2:
        assert wire.topics[0].partitions[0].error_message


def test_describe_quorum_names_our_partition():
    n = leader_node()
    resp = n.request(0, 55, 2, _describe([("__cluster_metadata", [0])]))
    (p,) = resp.topics[0].partitions
    assert (p.error_code, p.leader_id) == (0, 1)
