"""Bad input from peers (issue: "nothing a peer sends can crash the node or roll back its
epoch"): hypothesis-generated Raft requests, valid and not, to a core in every role.

For every request: the core never raises; its epoch never goes down; and a request answered
with an error code (top-level or partition-level) changes nothing: not the epoch, the state,
the leader, the vote, the log or the quorum-state file. The one exception is Kafka's
INVALID_VOTER_KEY, which Kafka returns after adopting a higher epoch
(``handleVoteRequest``, ``handleBeginQuorumEpochRequest``).
No response, at once or parked, carries a partition-level INVALID_REQUEST: a Kafka node halts
on one (``KafkaRaftClient.maybeHandleCommonResponse``).
"""

from __future__ import annotations

import uuid

from hypothesis import given, settings
from hypothesis import strategies as st

from kafka_rpc.protocol import codec
from kafka_rpc.protocol.errors import ErrorCode
from kafka_rpc.raft.api import METADATA_TOPIC_ID, ElectionState, OffsetAndEpoch
from tests.raft.conftest import (
    BEGIN,
    CLUSTER_ID,
    END,
    FETCH,
    FETCH_SNAPSHOT,
    V_BEGIN,
    V_END,
    V_FETCH,
    V_SNAP,
    V_VOTE,
    VOTE,
    begin_request,
    data_batch,
    end_request,
    fetch_request,
    fetch_snapshot_request,
    leader_node,
    log_with,
    make_node,
    partition_invalid_requests,
    vote_request,
)

ids = st.integers(-2, 5)
epochs = st.integers(-1, 6)
offsets = st.integers(-2, 40)
clusters = st.sampled_from([CLUSTER_ID, None, "", "another-cluster"])
topic_ids = st.sampled_from([METADATA_TOPIC_ID, uuid.UUID(int=0), uuid.UUID(int=7)])
DESCRIBE = 55
_Desc = codec.module("DescribeQuorumRequest")


@st.composite
def requests(draw):
    api = draw(st.sampled_from([VOTE, BEGIN, END, FETCH, FETCH_SNAPSHOT, DESCRIBE]))
    cid = draw(clusters)
    if api == VOTE:
        req = vote_request(draw(ids), draw(epochs), draw(epochs), draw(offsets),
                           pre_vote=draw(st.booleans()), cluster_id=cid,
                           topic_id=draw(topic_ids))  # fmt: skip
        return api, V_VOTE, req
    if api == BEGIN:
        return api, V_BEGIN, begin_request(draw(ids), draw(epochs), cluster_id=cid)
    if api == END:
        pref = draw(st.lists(ids, max_size=3))
        return api, V_END, end_request(draw(ids), draw(epochs), pref, cluster_id=cid)
    if api == FETCH:
        req = fetch_request(draw(ids), draw(epochs), draw(offsets), draw(epochs),
                            max_wait_ms=draw(st.sampled_from([-1, 0, 0, 500])),
                            cluster_id=cid, topic_id=draw(topic_ids))  # fmt: skip
        return api, V_FETCH, req
    if api == DESCRIBE:
        names = st.sampled_from(["__cluster_metadata", "other"])
        topics = draw(st.lists(st.tuples(names, st.lists(st.integers(-1, 2), max_size=2)),
                               max_size=2))  # fmt: skip
        req = _Desc.DescribeQuorumRequest(topics=tuple(
            _Desc.TopicData(topic_name=n, partitions=tuple(
                _Desc.PartitionData(partition_index=i) for i in parts))
            for n, parts in topics))  # fmt: skip
        return api, draw(st.integers(0, 2)), req
    sid = OffsetAndEpoch(draw(offsets), draw(epochs))
    req = fetch_snapshot_request(draw(ids), draw(epochs), sid, draw(st.integers(-5, 5000)),
                                 max_bytes=draw(st.sampled_from([-1, 0, 1, 100, 1 << 20])),
                                 cluster_id=cid)  # fmt: skip
    return api, V_SNAP, req


def _codes(resp) -> list[int]:
    out = [getattr(resp, "error_code", 0)]
    for t in getattr(resp, "topics", None) or getattr(resp, "responses", ()) or ():
        out.extend(p.error_code for p in t.partitions)
    return out


def _node(role: str):
    if role == "leader":
        n = leader_node(epoch=2, log=log_with(data_batch(0, 1, 5)))
        sid = n.core.create_snapshot(0)
        assert sid is None or sid.offset >= 0
        return n
    if role == "follower":
        return make_node(2, state=ElectionState(epoch=2, leader_id=1),
                         log=log_with(data_batch(0, 1, 5)))  # fmt: skip
    if role == "voted":
        return make_node(3, state=ElectionState(epoch=2, voted_id=1))
    if role == "candidate":
        return make_node(2, state=ElectionState(epoch=3, voted_id=2))
    return make_node(3)  # unattached, empty


def _snapshot(n):
    c = n.core
    return (c.epoch, c.state, c.leader_id, c.voted_id, n.log.end_offset, n.log.start_offset,
            n.store.writes)  # fmt: skip


@settings(max_examples=150, deadline=None)
@given(
    role=st.sampled_from(["leader", "follower", "voted", "candidate", "unattached"]),
    reqs=st.lists(requests(), min_size=1, max_size=6),
)
def test_peer_requests_never_crash_or_roll_back(role, reqs):
    n = _node(role)
    now = 10
    every_reply = []
    for api, version, req in reqs:
        before = _snapshot(n)
        replies = n.park(now, api, version, req)
        every_reply.append(replies)
        assert n.core.epoch >= before[0], "epoch went back"
        assert len(replies) <= 1
        if not replies:
            assert api == FETCH  # only a long-polling Fetch may be parked
            continue
        codes = [c for c in _codes(replies[0]) if c]
        if codes and ErrorCode.INVALID_VOTER_KEY not in codes:
            assert _snapshot(n) == before, (codes, api, req)
        now += 7
        n.core.poll(now)
        n.outbound()
    n.core.poll(now + 5_000)  # parked Fetches are answered by now (max wait 500 ms)
    for replies in every_reply:
        for resp in replies:
            assert not partition_invalid_requests(resp), resp
