"""Controller command sequences give equal images from the log, from a snapshot plus the
tail, and on followers.

Already covered elsewhere: each record type's replay rule (test_replay.py), a command's records
replayed give the state its response claims (test_commands.py, on the harness's single image),
the image written as a snapshot and loaded back is equal, and a snapshot midway plus the tail
equals the whole replay on the harness log (test_snapshot.py, hypothesis), one write answered
after commit and a snapshot loaded into another controller (test_quorum_controller.py, one
hand-driven core).

Here the sequences run through a real 3-voter quorum (``tests/controller/quorum_sim.py``: RaftCores
on MemoryLogs in the seeded simulator, a QuorumController on each node, codec-encoded messages with
delays, drops and duplicates), with failovers (the leader cut off mid-sequence: its uncommitted
writes are truncated and answered NOT_CONTROLLER, which the client retries; or the leader crashed),
a follower cut off until the leader's log start passes it (it catches up through FetchSnapshot)
and follower restarts (snapshot + log). After every simulator event each node's committed image
must equal the replay of the committed log up to its offset, and every speculative image of the
active controller the replay up to its last write; at the end the leader's image, each
follower's, the whole log replayed, a snapshot of a mid image plus the tail and every snapshot the
cores wrote plus the tail must all be equal, and every command answered successfully must be
committed (already when answered) and in the final image. Mutation tests show that a follower with
one broken replay rule, or an active controller whose speculative image diverges, is caught.

Images are compared exactly, provenance included: every batch, a LeaderChange control batch too,
moves an image's ``last_offset`` / ``last_epoch``, as Kafka's ``MetadataBatchLoader`` does, so a
snapshot loaded right after a leader change equals the replayed log (this test found the bug).
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from contextlib import contextmanager
from dataclasses import replace

import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from kafka_rpc.controller import replay as replay_mod
from kafka_rpc.controller.image import evolve
from kafka_rpc.controller.quorum_controller import QuorumController
from kafka_rpc.protocol import codec
from kafka_rpc.protocol.record_batch import (
    CONTROL_LEADER_CHANGE,
    decode_batches,
    encode_batch,
    encode_control_batch,
)
from kafka_rpc.raft.api import OffsetAndEpoch
from kafka_rpc.raft.memory import MemorySnapshotReader
from tests.controller.quorum_sim import (
    Allocate,
    AlterChunk,
    Assign,
    ControllerCluster,
    CrashLeader,
    Create,
    CreateChunk,
    Delete,
    Heartbeat,
    IsolateFollower,
    IsolateLeader,
    Register,
    RestartFollower,
    TopicSpec,
    Wait,
    check_final,
)
from tests.raft.simulation import InvariantViolation

NOT_CONTROLLER = 41
R = codec.message_class


@contextmanager
def quiet():
    """The cores log every resignation and election; keep the run's output readable."""
    logging.disable(logging.WARNING)
    try:
        yield
    finally:
        logging.disable(logging.NOTSET)


def run(script, seed: int = 0, **kw):
    c = ControllerCluster(seed, **kw)
    with quiet():
        asyncio.run(c.run_script(script))
    return c, check_final(c)


# ================================================================== strategies
def rarely(p_true: int = 1, p_false: int = 9):
    return st.sampled_from([True] * p_true + [False] * p_false)


BROKER = st.integers(0, 3)
EPOCH = st.sampled_from(["current"] * 6 + ["stale", "unknown"])
VALID_NAMES = ["a", "b", "c.d", "t-1"]
#: "c_d" collides with "c.d"; the rest break Kafka's name rules
ODD_NAMES = ["c_d", "", ".", "bad name", "x" * 250]
NAMES = st.one_of(*[st.sampled_from(VALID_NAMES)] * 3, st.sampled_from(ODD_NAMES))
CONFIGS = st.one_of(
    st.just(()),
    st.just(()),
    st.lists(
        st.sampled_from(
            [
                ("retention.ms", "1000"),
                ("cleanup.policy", "compact"),
                ("min.insync.replicas", "2"),
                ("retention.ms", "soon"),
                ("no.such.config", "1"),
                ("segment.bytes", None),
            ]
        ),
        min_size=1,
        max_size=2,
    ).map(tuple),
)


def _ring(n: int, rf: int, start: int, ids: tuple[int, ...]) -> tuple[tuple[int, ...], ...]:
    """A manual assignment of ``n`` partitions x ``rf`` replicas, round-robin over ``ids``."""
    return tuple(tuple(ids[(start + p + j) % len(ids)] for j in range(rf)) for p in range(n))


#: manual assignments, mostly over the warm-up's brokers; broker 4 is never registered
ASSIGNMENT = st.builds(
    _ring,
    st.integers(1, 3),
    st.integers(1, 3),
    st.integers(0, 4),
    st.sampled_from([(0, 1, 2)] * 3 + [(0, 1, 2, 3, 4)]),
)
TOPIC = st.builds(
    TopicSpec,
    name=NAMES,
    partitions=st.sampled_from([1, 1, 2, 3, -1, 0]),
    rf=st.sampled_from([1, 2, 2, 3, -1, 0, 4]),
    configs=CONFIGS,
    assignment=st.one_of(*[st.just(())] * 4, ASSIGNMENT),
)
DELETE_NAMES = st.sampled_from([*VALID_NAMES, "c_d", "nope"])
REF = st.one_of(
    st.tuples(st.just("name"), DELETE_NAMES),
    st.tuples(st.just("name"), DELETE_NAMES),
    st.tuples(st.just("id"), DELETE_NAMES),
    st.tuples(st.just("id"), DELETE_NAMES),
    st.tuples(st.just("old_id"), DELETE_NAMES),
    st.tuples(st.just("unknown_id"), st.just("")),
)
CREATE = st.builds(
    Create, st.lists(TOPIC, min_size=1, max_size=2).map(tuple), validate_only=rarely(1, 5)
)
COMMAND = st.one_of(
    st.builds(Register, BROKER, st.integers(0, 2), cluster_ok=rarely(9, 1), mv_ok=rarely(9, 1)),
    st.builds(
        Heartbeat,
        BROKER,
        EPOCH,
        caught_up=rarely(4, 1),
        want_fence=rarely(1, 9),
        want_shut_down=rarely(1, 6),
    ),
    CREATE,
    CREATE,
    st.builds(Delete, st.lists(REF, min_size=1, max_size=2).map(tuple)),
    st.builds(Allocate, BROKER, EPOCH),
    # KIP-1114: chunk starts on a grid of 10 so that alters often name an existing chunk
    st.tuples(
        st.sampled_from(VALID_NAMES),
        st.integers(0, 1),
        st.lists(BROKER, min_size=1, max_size=3, unique=True).map(tuple),
        st.sampled_from([10, 20, 30, 40]),
        st.integers(0, 3),
    ).map(lambda t: CreateChunk(t[0], t[1], t[2], t[3], t[3] - 1 - t[4])),
    st.builds(
        AlterChunk,
        st.sampled_from(VALID_NAMES),
        st.integers(0, 1),
        st.sampled_from([0, 0, 10, 20, 30]),
        st.lists(BROKER, max_size=3, unique=True).map(tuple),
    ),
    # KIP-1164: coordinator partitions 0 and 1 once __diskless-metadata exists (2 invalid)
    st.builds(Assign, st.sampled_from(VALID_NAMES), st.integers(0, 2), st.integers(0, 2)),
)
FAULT = st.one_of(
    st.builds(Wait, st.integers(500, 10_000)),
    st.builds(IsolateLeader, st.integers(2_500, 6_000)),
    st.builds(IsolateFollower, st.integers(1_500, 7_000)),
    st.builds(RestartFollower, st.integers(100, 2_000)),
    st.builds(CrashLeader, st.integers(100, 2_000)),
)
GAP = st.one_of(st.just(0), st.integers(1, 50), st.integers(50, 600))
STEP = st.tuples(GAP, st.one_of(*[COMMAND] * 6, FAULT))

#: three live brokers first (registered, then heartbeats once the registrations committed), so
#: topics and producer ids are more often possible
WARM_UP = [(0, Register(b)) for b in range(3)] + [
    (gap, Heartbeat(b)) for gap in (300, 300) for b in range(3)
]


@st.composite
def scripts(draw):
    steps = draw(st.lists(STEP, min_size=5, max_size=40))
    return (WARM_UP if draw(rarely(4, 1)) else []) + steps


# ================================================================== the property
@settings(
    max_examples=max(100, settings.default.max_examples),
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(script=scripts(), seed=st.integers(0, 1 << 16))
def test_images_equal_on_leader_followers_log_and_snapshots(script, seed):
    """A generated script (commands with valid and invalid arguments, waits past the session
    timeout, partitions, crashes) on simulator seed ``seed``: every check of quorum_sim holds."""
    _c, rep = run(script, seed)
    assert rep.images_checked > 0 and rep.log_end > 0
    event(f"faults: {sorted(rep.faults)}")
    if rep.snapshot_loads["fetched"]:
        event("a follower loaded a fetched snapshot")
    if rep.speculative_dropped:
        event("a deposed leader's writes were dropped")
    if any(code == NOT_CONTROLLER for _, code in rep.answers):
        event("NOT_CONTROLLER answers")


# ================================================================== one fixed run, every path
#: every record type the controller writes; UnregisterBrokerRecord is replayed (test_replay.py)
#: but no command writes it (there is no UnregisterBroker RPC yet)
#: The ACL and SCRAM records are not in this script's commands yet: their replay and
#: snapshots are checked by tests/security/test_acls.py and test_sasl_clients.py.
#: Fence/UnfenceBrokerRecord are replayed (a Kafka 3.x log has them) but Kafka 4.x, as we,
#: writes BrokerRegistrationChangeRecord instead.
#: Records a Kafka controller writes and we only replay (quotas, delegation tokens, SCRAM
#: removals, ELR clears, a 3.x migration state) and RegisterControllerRecord (written on a
#: ControllerRegistration, which this script does not send) are covered by
#: tests/controller/test_kafka_records.py; the metadata transaction records (a new cluster's
#: bootstrap; AbortTransactionRecord only on a log ending inside one) by
#: tests/controller/test_transactions.py.
WRITTEN_TYPES = set(replay_mod._HANDLERS) - {
    "AbortTransactionRecord",
    "UnregisterBrokerRecord",
    "FenceBrokerRecord",
    "UnfenceBrokerRecord",
    "AccessControlEntryRecord",
    "RemoveAccessControlEntryRecord",
    "UserScramCredentialRecord",
    "RemoveUserScramCredentialRecord",
    "ClientQuotaRecord",
    "DelegationTokenRecord",
    "RemoveDelegationTokenRecord",
    "ClearElrRecord",
    "ZkMigrationStateRecord",
    "RegisterControllerRecord",
}

SCRIPT = [
    *WARM_UP,
    (10, Create((TopicSpec("a", 2, 3, (("retention.ms", "1000"),)), TopicSpec("bad name")))),
    (10, Create((TopicSpec("v", 1, 2),), validate_only=True)),
    (10, Allocate(0)),
    (0, Allocate(1, "stale")),
    (10, IsolateFollower(6_000)),
    (100, Create((TopicSpec("b", 3, 2),))),
    (100, Heartbeat(1, want_shut_down=True)),  # controlled shutdown: leaderships move
    (300, Heartbeat(1, want_shut_down=True)),  # then fenced
    (5_000, Delete((("name", "a"), ("unknown_id", "")))),
    (100, IsolateLeader(4_000)),
    (10, Allocate(0)),  # on the cut-off leader: never committed, NOT_CONTROLLER
    (0, Create((TopicSpec("c"),))),
    (4_000, Register(3)),
    (500, Heartbeat(0)),
    (0, Heartbeat(2)),
    (6_000, Wait(0)),  # brokers 0 and 2 silent past the session timeout: fenced
    (100, RestartFollower(500)),
    (100, Register(0, incarnation=1)),  # a new incarnation takes over the fenced id
    (2_000, Heartbeat(0)),
    (0, Create((TopicSpec("a", 1, 1),))),  # the name again, a new id
    (0, CrashLeader(800)),  # maybe before the create commits: no answer, outcome unknown
    (3_000, Heartbeat(0)),
    (0, Heartbeat(3)),
    (300, Heartbeat(0)),
    (0, Heartbeat(3)),
    (10, Create((TopicSpec("e", 2, 2),))),
    (500, CreateChunk("e", 0, (3, 0), 10, 9)),  # KIP-1114: ChunkRecord + PartitionChangeRecord
    (100, CreateChunk("e", 0, (0, 3), 20, 19)),
    (100, AlterChunk("e", 0, 0, ())),  # ChunkChangeRecord: the first chunk is removed
    (100, Assign("e", 1, 1)),  # KIP-1164: TopicPartitionToBatchCoordinatorMapping
    (10, Assign("e", 2, 0)),  # no partition 2: UNKNOWN_TOPIC_OR_PARTITION, no record
]


def test_fixed_script_exercises_every_path():
    """One seeded run that must cover what the property relies on: every record type the
    controller writes, a failover with dropped writes and NOT_CONTROLLER answers, a follower
    that catches up through FetchSnapshot, a restart that loads a snapshot, core snapshots
    checked, every image comparison made."""
    c, rep = run(SCRIPT, seed=1)
    assert set(rep.record_types) == WRITTEN_TYPES, rep.record_types
    # every record type was in a write whose speculative image was compared with the replay
    assert set(rep.speculative_types) == WRITTEN_TYPES, rep.speculative_types
    assert rep.faults == {
        "isolate_follower": 1,
        "isolate_leader": 1,
        "restart": 1,
        "crash_leader": 1,
    }
    assert rep.leader_epochs >= 2
    assert rep.speculative_dropped > 0 and rep.speculative_compared > 0
    assert rep.answers[("Allocate", NOT_CONTROLLER)] >= 1
    assert rep.snapshot_loads["fetched"] >= 1 and rep.snapshot_loads["start"] >= 1
    assert rep.snapshots_checked >= 3
    final = c.leader().sm.image
    assert final.topic_by_name("e") is not None
    assert rep.answers[("Create", 0)] >= 3
    assert final.brokers[0].incarnation_id.int & 0xFFFF == 2  # incarnation 1
    assert final.brokers[2].fenced
    # KIP-1164: __diskless-metadata created once, with 3 replicas (3 brokers were unfenced)
    meta = final.topic_by_name("__diskless-metadata")
    assert meta is not None and sorted(meta.partitions) == [0, 1]
    assert all(len(p.replicas) == 3 for p in meta.partitions.values())
    created = [r for _, r in c.inv.ledger.by_type["TopicRecord"] if r.name == meta.name]
    assert [r.topic_id for r in created] == [meta.topic_id]  # once, across the failovers
    assert rep.answers[("Assign", 0)] == 1 and rep.answers[("Assign", 3)] == 1
    assert final.topic_by_name("e").batch_coordinators == {1: 1}


def test_same_seed_same_run():
    c1, r1 = run(SCRIPT[:12], seed=3)
    c2, r2 = run(SCRIPT[:12], seed=3)
    assert (c1.events, r1.log_end) == (c2.events, r2.log_end)
    assert c1.leader().sm.image == c2.leader().sm.image


# ================================================================== provenance of control batches
def test_snapshot_after_a_leader_change_has_the_logs_provenance():
    """Two controllers at the same committed offset: one replayed the log (a FeatureLevelRecord
    in epoch 1, then epoch 2's LeaderChange control batch), the other loaded the first one's
    snapshot (2, 2), as a core writes it right after a leader change. Kafka's image provenance
    counts control batches (``MetadataBatchLoader`` takes every batch's last offset and epoch;
    the snapshot id is ``provenance.snapshotId()``), so both should say (1, 2)."""
    fl = codec.encode_record(R("FeatureLevelRecord")(name="metadata.version", feature_level=25))
    lc = codec.module("LeaderChangeMessage")
    body = codec.encode(
        lc.LeaderChangeMessage(version=0, leader_id=2, voters=(), granting_voters=()), 0
    )
    log = (
        encode_batch(0, 1, [fl], 0).data
        + encode_control_batch(1, 2, [(CONTROL_LEADER_CHANGE, body)], 0).data
    )
    replayed = QuorumController(1, "c")
    replayed.handle_commit(decode_batches(log))
    snap = encode_batch(0, 2, replayed.snapshot_records(), 0).data
    loaded = QuorumController(2, "c")
    loaded.handle_load_snapshot(MemorySnapshotReader(OffsetAndEpoch(2, 2), snap))
    assert replayed.committed_offset == loaded.committed_offset == 1
    assert (loaded.image.last_offset, loaded.image.last_epoch) == (1, 2)
    assert replayed.image == loaded.image


# ================================================================== the checkers can fail
def _broken(rule: str):
    """A replay that breaks one rule, for one controller's ``_replay_value``."""

    def wrap(qc: QuorumController):
        orig = qc._replay_value

        def broken(img, value, offset, epoch):
            rec, _ = codec.decode_record(value)
            name = type(rec).__spec_name__
            fence = name == "BrokerRegistrationChangeRecord" and rec.fenced == 1
            if rule == "fence ignored" and fence:
                return img
            if rule == "producer ids ignored" and name == "ProducerIdsRecord":
                return img
            # img may be an ImageDraft that orig changes in place: read the old state first
            kept = name == "PartitionChangeRecord" and rule == "leader epoch kept"
            old = img.topics[rec.topic_id].partitions[rec.partition_id] if kept else None
            new = orig(img, value, offset, epoch)
            if kept:
                t = new.topics[rec.topic_id]
                p = t.partitions[rec.partition_id]
                t = replace(t, partitions=t.partitions.set(
                    rec.partition_id, replace(p, leader_epoch=old.leader_epoch)))  # fmt: skip
                new = evolve(new, topics=new.topics.set(rec.topic_id, t))
            return new

        qc._replay_value = broken

    return wrap


MUTATION_SCRIPT = [
    *WARM_UP,
    (10, Create((TopicSpec("a", 2, 3),))),
    (10, Allocate(0)),
    (10, Heartbeat(1, want_shut_down=True)),
    # the other active brokers pass broker 1's controlled shutdown offset (lowestActiveOffset)
    (300, Heartbeat(0)),
    (10, Heartbeat(2)),
    (300, Heartbeat(1, want_shut_down=True)),
]


@pytest.mark.parametrize("rule", ["fence ignored", "producer ids ignored", "leader epoch kept"])
@pytest.mark.parametrize("per_event", [True, False], ids=["per-event", "final"])
def test_a_follower_with_a_broken_replay_rule_is_caught(rule, per_event):
    """Node 3 (a follower: the records it breaks are replayed through ``_replay_value``) replays
    one rule wrong; the per-event check, or with it off the final comparison, must name it."""

    def hook(node_id, qc):
        if node_id == 3:
            _broken(rule)(qc)

    # the same run with a correct node 3 passes, so the failure is the broken rule's
    run(MUTATION_SCRIPT, seed=5)
    with pytest.raises(InvariantViolation, match=r"node 3: .*(image|replay)"):
        run(MUTATION_SCRIPT, seed=5, on_controller=hook, check_images=per_event)


def test_an_active_controller_whose_speculative_image_diverges_is_caught():
    """Every node's controller, once active, applies its producer-id writes wrong to its
    uncommitted image only (the committed replay is right): only the comparison of the active
    controller's images with the log's replay can see it."""

    def hook(node_id, qc):
        orig = qc._write

        def write(fn, version_image=None):
            res, wait_for = orig(fn, version_image)
            if any(type(r).__spec_name__ == "ProducerIdsRecord" for r in res.records):
                u = qc._uncommitted
                qc._uncommitted = replace(u, producer_ids=replace(u.producer_ids, broker_epoch=-7))
            return res, wait_for

        qc._write = write

    with pytest.raises(InvariantViolation, match=r"the active controller's image after writing"):
        run(MUTATION_SCRIPT, seed=5, on_controller=hook)


def test_an_active_controller_that_cannot_replay_its_own_record_resigns_and_another_takes_over():
    """The first active controller that writes a topic adds a record it cannot replay (a command
    with a bug): it appends nothing, renounces and resigns its Raft leadership (Kafka's renounce:
    raftClient.resign), another controller is elected and the retried CreateTopics succeeds there;
    every image still matches the committed log."""
    from kafka_rpc.controller.base import ControllerResult

    broken: list[int] = []

    def hook(node_id, qc):
        orig = qc._write

        def write(fn, version_image=None):
            def bad(img, ctx):
                res = fn(img, ctx)
                if not broken and any(r.__spec_name__ == "TopicRecord" for r in res.records):
                    broken.append(node_id)
                    bug = R("TopicPartitionToBatchCoordinatorMapping")(
                        partition_index=0, topic_id=uuid.UUID(int=7),
                        batch_coordinator_partition_index=0)  # fmt: skip
                    return ControllerResult([*res.records, bug], res.response)
                return res

            return orig(bad, version_image)

        qc._write = write

    script = [*WARM_UP, (10, Create((TopicSpec("a", 2, 3),)))]
    c, report = run(script, seed=7, on_controller=hook)
    assert len(broken) == 1
    assert [n for n, _ in c.resignations] == broken
    created = [a for a in c.answers if type(a.op).__name__ == "Create" and a.response is not None]
    assert created[-1].response.topics[0].error_code == 0
    assert created[-1].node != broken[0]  # answered by another controller
    assert c.leader().node_id != broken[0] or report.leader_epochs > 1
    assert report.record_types["TopicPartitionToBatchCoordinatorMapping"] == 0
