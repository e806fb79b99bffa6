"""Hand-driven harness for the sans-io Raft core (``kafka_rpc.raft.core.RaftCore``), in the
spirit of Kafka's ``RaftClientTestContext``: every input carries an explicit ``now`` (ms), there
is no clock, no socket and no driver; requests and responses are the generated message classes,
built here at the versions our nodes speak (Vote 3, BeginQuorumEpoch 2, EndQuorumEpoch 2,
Fetch 18, FetchSnapshot 1)."""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from kafka_rpc.protocol import codec
from kafka_rpc.protocol.record_batch import Batch, encode_batch
from kafka_rpc.raft.api import METADATA_TOPIC_ID, METADATA_TOPIC_NAME, ElectionState, OffsetAndEpoch
from kafka_rpc.raft.core import Outbound, RaftConfig, RaftCore
from kafka_rpc.raft.memory import MemoryLog, MemoryQuorumStateStore

CLUSTER_ID = "raft-core-test-cluster"
VOTE, BEGIN, END, FETCH, FETCH_SNAPSHOT = 52, 53, 54, 1, 59
V_VOTE, V_BEGIN, V_END, V_FETCH, V_SNAP = 3, 2, 2, 18, 1
LONG_MAX = (1 << 63) - 1

VoteReq = codec.module("VoteRequest")
VoteResp = codec.module("VoteResponse")
BeginReq = codec.module("BeginQuorumEpochRequest")
EndReq = codec.module("EndQuorumEpochRequest")
FetchReq = codec.module("FetchRequest")
FetchResp = codec.module("FetchResponse")
SnapReq = codec.module("FetchSnapshotRequest")
SnapResp = codec.module("FetchSnapshotResponse")


def voters(*ids: int) -> dict[int, tuple[str, int]]:
    return {i: (f"controller-{i}", 9090 + i) for i in ids}


class FakeStateMachine:
    """Records every call the core makes on its state machine."""

    def __init__(self, snapshot: Sequence[bytes] = (b"state-a", b"state-b")) -> None:
        self.commits: list[Batch] = []
        self.loads: list[OffsetAndEpoch] = []
        self.loaded_batches: list[list[Batch]] = []
        self.leader_changes: list[tuple[int, int]] = []
        self.snapshot = list(snapshot)

    def handle_commit(self, batches: Sequence[Batch]) -> None:
        self.commits.extend(batches)

    def handle_load_snapshot(self, reader: Any) -> None:
        self.loads.append(reader.snapshot_id)
        self.loaded_batches.append(list(reader.batches()))

    def snapshot_records(self) -> list[bytes]:
        return list(self.snapshot)

    def handle_leader_change(self, leader_id: int, epoch: int) -> None:
        self.leader_changes.append((leader_id, epoch))

    def committed_data(self) -> list[bytes | None]:
        return [r for b in self.commits if not b.is_control for r in b.records]


@dataclass
class Node:
    core: RaftCore
    log: MemoryLog
    store: MemoryQuorumStateStore
    sm: FakeStateMachine
    sent: list[Outbound] = field(default_factory=list)

    @property
    def id(self) -> int:
        return self.core.node_id

    def outbound(self) -> list[Outbound]:
        out = self.core.take_outbound()
        self.sent.extend(out)
        return out

    def request(self, now: int, api: int, version: int, req: Any) -> Any:
        """Hand ``req`` to the core; the response, or None when the core parked it."""
        replies: list[Any] = []
        self.core.handle_request(now, api, version, req, replies.append)
        assert len(replies) <= 1
        return replies[0] if replies else None

    def park(self, now: int, api: int, version: int, req: Any) -> list[Any]:
        """Like :meth:`request` but returns the reply list, to watch a parked Fetch."""
        replies: list[Any] = []
        self.core.handle_request(now, api, version, req, replies.append)
        return replies

    def flush(self, now: int) -> None:
        self.log.flush()
        self.core.handle_flushed(now)


def make_node(
    node_id: int,
    voter_ids: Sequence[int] = (1, 2, 3),
    *,
    now: int = 0,
    state: ElectionState | None = None,
    log: MemoryLog | None = None,
    sm: FakeStateMachine | None = None,
    seed: int = 0,
    **cfg: Any,
) -> Node:
    log = log if log is not None else MemoryLog()
    store = MemoryQuorumStateStore()
    if state is not None:
        store.write(state)
        store.writes = 0
    sm = sm if sm is not None else FakeStateMachine()
    config = RaftConfig(node_id=node_id, voters=voters(*voter_ids), cluster_id=CLUSTER_ID, **cfg)
    core = RaftCore(config, log, store, sm, random.Random(seed), now)
    return Node(core, log, store, sm)


def data_batch(base: int, epoch: int, n: int, ts: int = 0) -> Batch:
    return encode_batch(base, epoch, [b"v%d" % (base + i) for i in range(n)], ts)


def log_with(*batches: Batch, flushed: bool = True) -> MemoryLog:
    log = MemoryLog()
    log.append(list(batches))
    if flushed:
        log.flush()
    return log


# ---------------------------------------------------------------------------- requests


def vote_request(
    candidate: int,
    epoch: int,
    last_epoch: int,
    last_offset: int,
    *,
    pre_vote: bool = False,
    cluster_id: str | None = CLUSTER_ID,
    topic_id=METADATA_TOPIC_ID,
    voter_id: int = -1,
) -> Any:
    return VoteReq.VoteRequest(
        cluster_id=cluster_id,
        voter_id=voter_id,
        topics=(
            VoteReq.TopicData(
                topic_name=METADATA_TOPIC_NAME,
                topic_id=topic_id,
                partitions=(
                    VoteReq.PartitionData(
                        partition_index=0,
                        replica_epoch=epoch,
                        replica_id=candidate,
                        last_offset_epoch=last_epoch,
                        last_offset=last_offset,
                        pre_vote=pre_vote,
                    ),
                ),
            ),
        ),
    )


def begin_request(leader: int, epoch: int, *, cluster_id: str | None = CLUSTER_ID) -> Any:
    return BeginReq.BeginQuorumEpochRequest(
        cluster_id=cluster_id,
        topics=(
            BeginReq.TopicData(
                topic_name=METADATA_TOPIC_NAME,
                topic_id=METADATA_TOPIC_ID,
                partitions=(
                    BeginReq.PartitionData(partition_index=0, leader_id=leader, leader_epoch=epoch),
                ),
            ),
        ),
    )


def end_request(
    leader: int, epoch: int, preferred: Sequence[int], *, cluster_id: str | None = CLUSTER_ID
) -> Any:
    return EndReq.EndQuorumEpochRequest(
        cluster_id=cluster_id,
        topics=(
            EndReq.TopicData(
                topic_name=METADATA_TOPIC_NAME,
                topic_id=METADATA_TOPIC_ID,
                partitions=(
                    EndReq.PartitionData(
                        partition_index=0,
                        leader_id=leader,
                        leader_epoch=epoch,
                        preferred_successors=tuple(preferred),
                        preferred_candidates=tuple(
                            EndReq.ReplicaInfo(candidate_id=c) for c in preferred
                        ),
                    ),
                ),
            ),
        ),
    )


def fetch_request(
    replica: int,
    epoch: int,
    offset: int,
    last_epoch: int,
    *,
    max_wait_ms: int = 0,
    cluster_id: str | None = CLUSTER_ID,
    topic_id=METADATA_TOPIC_ID,
    high_watermark: int = LONG_MAX,
) -> Any:
    return FetchReq.FetchRequest(
        cluster_id=cluster_id,
        replica_id=replica,
        replica_state=FetchReq.ReplicaState(replica_id=replica),
        max_wait_ms=max_wait_ms,
        min_bytes=0,
        max_bytes=8 << 20,
        topics=(
            FetchReq.FetchTopic(
                topic=METADATA_TOPIC_NAME,
                topic_id=topic_id,
                partitions=(
                    FetchReq.FetchPartition(
                        partition=0,
                        current_leader_epoch=epoch,
                        fetch_offset=offset,
                        last_fetched_epoch=last_epoch,
                        partition_max_bytes=8 << 20,
                        high_watermark=high_watermark,
                    ),
                ),
            ),
        ),
    )


def fetch_snapshot_request(
    replica: int,
    epoch: int,
    snapshot_id: OffsetAndEpoch,
    position: int,
    *,
    max_bytes: int = 1 << 20,
    cluster_id: str | None = CLUSTER_ID,
) -> Any:
    return SnapReq.FetchSnapshotRequest(
        cluster_id=cluster_id,
        replica_id=replica,
        max_bytes=max_bytes,
        topics=(
            SnapReq.TopicSnapshot(
                name=METADATA_TOPIC_NAME,
                partitions=(
                    SnapReq.PartitionSnapshot(
                        partition=0,
                        current_leader_epoch=epoch,
                        snapshot_id=SnapReq.SnapshotId(
                            end_offset=snapshot_id.offset, epoch=snapshot_id.epoch
                        ),
                        position=position,
                    ),
                ),
            ),
        ),
    )


# ---------------------------------------------------------------------------- responses


def partition_invalid_requests(resp: Any) -> list[tuple[str, int]]:
    """Every partition of a Raft response (Vote, BeginQuorumEpoch, EndQuorumEpoch, Fetch,
    FetchSnapshot, DescribeQuorum) that carries INVALID_REQUEST, as (topic, partition). A Kafka
    node halts on one (``KafkaRaftClient.maybeHandleCommonResponse``), so it must stay empty."""
    out = []
    for t in getattr(resp, "topics", None) or getattr(resp, "responses", None) or ():
        name = getattr(t, "topic_name", None) or getattr(t, "name", None) or str(t.topic_id)
        for p in t.partitions:
            if p.error_code == 42:  # INVALID_REQUEST
                index = getattr(p, "partition_index", None)
                out.append((name, getattr(p, "index", 0) if index is None else index))
    return out


def vote_response(epoch: int, granted: bool, *, leader: int = -1, code: int = 0) -> Any:
    return VoteResp.VoteResponse(
        topics=(
            VoteResp.TopicData(
                topic_id=METADATA_TOPIC_ID,
                partitions=(
                    VoteResp.PartitionData(
                        partition_index=0,
                        error_code=code,
                        leader_id=leader,
                        leader_epoch=epoch,
                        vote_granted=granted,
                    ),
                ),
            ),
        )
    )


def fetch_response(
    leader: int,
    epoch: int,
    *,
    records: bytes | None = None,
    high_watermark: int = -1,
    code: int = 0,
    log_start_offset: int = 0,
) -> Any:
    p = FetchResp.PartitionData(
        partition_index=0,
        error_code=code,
        high_watermark=high_watermark,
        log_start_offset=log_start_offset,
        current_leader=FetchResp.LeaderIdAndEpoch(leader_id=leader, leader_epoch=epoch),
        records=records,
    )
    return FetchResp.FetchResponse(
        responses=(FetchResp.FetchableTopicResponse(topic_id=METADATA_TOPIC_ID, partitions=(p,)),)
    )


def snapshot_error_response(leader: int, epoch: int, code: int) -> Any:
    p = SnapResp.PartitionSnapshot(
        index=0,
        error_code=code,
        current_leader=SnapResp.LeaderIdAndEpoch(leader_id=leader, leader_epoch=epoch),
    )
    return SnapResp.FetchSnapshotResponse(
        topics=(SnapResp.TopicSnapshot(name=METADATA_TOPIC_NAME, partitions=(p,)),)
    )


# ---------------------------------------------------------------------------- reading responses


def vote_partition(resp: Any) -> Any:
    assert resp.error_code == 0, resp
    assert len(resp.topics) == 1 and len(resp.topics[0].partitions) == 1
    return resp.topics[0].partitions[0]


partition = vote_partition  # Vote, BeginQuorumEpoch and EndQuorumEpoch share the shape


def fetch_partition(resp: Any) -> Any:
    assert resp is not None
    assert resp.error_code == 0, resp
    assert len(resp.responses) == 1 and len(resp.responses[0].partitions) == 1
    return resp.responses[0].partitions[0]


def snapshot_partition(resp: Any) -> Any:
    assert resp.error_code == 0, resp
    assert len(resp.topics) == 1 and len(resp.topics[0].partitions) == 1
    return resp.topics[0].partitions[0]


# ---------------------------------------------------------------------------- scenarios


def one(out: list[Outbound], api: int, dest: int | None = None) -> Outbound:
    got = [o for o in out if o.api_key == api and (dest is None or o.destination == dest)]
    assert len(got) == 1, (api, dest, out)
    return got[0]


def elect(node: Node, now: int, grant_from: int = 2) -> None:
    """Make a Candidate leader: poll so it sends its Vote requests, then grant one."""
    assert node.core.state == "Candidate", node.core.state_name
    node.core.poll(now)
    out = node.outbound()
    v = one(out, VOTE, grant_from)
    node.core.handle_response(now, grant_from, v.correlation, vote_response(node.core.epoch, True))
    assert node.core.state == "Leader"


def leader_node(
    epoch: int = 1, voter_ids: Sequence[int] = (1, 2, 3), *, now: int = 0, **kw: Any
) -> Node:
    """Node 1, leader of ``epoch`` (restarted as a Candidate that voted for itself, then
    granted by node 2); its LeaderChange batch is flushed."""
    node = make_node(1, voter_ids, now=now, state=ElectionState(epoch=epoch, voted_id=1), **kw)
    elect(node, now)
    node.flush(now)
    return node


def follower_node(
    node_id: int = 2, leader: int = 1, epoch: int = 1, *, now: int = 0, **kw: Any
) -> Node:
    """A voter restarted as the Follower of ``leader`` in ``epoch``."""
    node = make_node(node_id, now=now, state=ElectionState(epoch=epoch, leader_id=leader), **kw)
    assert node.core.state == "Follower"
    return node


def deliver(src: Node, dst: Node, now: int, ob: Outbound) -> Any:
    """Send ``ob`` (from ``src``) to ``dst`` and feed the response back to ``src``."""
    versions = {VOTE: V_VOTE, BEGIN: V_BEGIN, END: V_END, FETCH: V_FETCH, FETCH_SNAPSHOT: V_SNAP,
                80: 1, 81: 0, 82: 0}  # fmt: skip
    resp = dst.request(now, ob.api_key, versions[ob.api_key], ob.request)
    assert resp is not None, "parked"
    src.core.handle_response(now, ob.destination, ob.correlation, resp)
    return resp
