"""KIP-1114 chunks on the controller (docs/architecture.md): CreateChunks, AlterChunkAssignments as
commands, ChunkRecord / ChunkChangeRecord replay, chunks in snapshots. Every command runs through
the harness, which frames, decodes and replays the records as the Raft log would."""

import uuid

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kafka_rpc.controller.chunks import alter_chunk_assignments, create_chunks
from kafka_rpc.controller.image import ChunkRegistration
from kafka_rpc.controller.replay import ReplayError, replay
from kafka_rpc.controller.snapshot import image_records, load
from kafka_rpc.protocol import codec
from kafka_rpc.protocol.errors import ErrorCode as E

from .harness import Cluster, topic

R = codec.message_class
CC = codec.module("CreateChunksRequest")
AC = codec.module("AlterChunkAssignmentsRequest")


def create_req(*entries):
    return R("CreateChunksRequest")(
        topic_partitions=tuple(
            CC.CreateChunksTopicPartition(
                topic_name=t,
                partition_id=p,
                broker_ids=tuple(b),
                start_offset=start,
                start_timestamp=ts,
                prev_stop_offset=stop,
            )
            for t, p, b, start, ts, stop in entries
        )
    )


def alter_req(*entries):
    return R("AlterChunkAssignmentsRequest")(
        chunks=tuple(
            AC.AlterChunkAssignment(
                topic_name=t, partition_id=p, start_offset=s, chunk_epoch=ep, broker_ids=tuple(b)
            )
            for t, p, s, ep, b in entries
        )
    )


def cluster(diskless=True, rf=1, brokers=(0, 1, 2, 3)):
    c = Cluster(seed=3)
    c.live(*brokers)
    cfg = [("diskless.enable", "true")] if diskless else []
    assign = [(0, tuple(range(rf)))]
    res = c.create(topic("t", configs=cfg, assignments=assign, n=-1, rf=-1))
    assert res.response.topics[0].error_code == 0, res.response
    return c


def part(c, index=0):
    return c.image.topic_by_name("t").partitions[index]


def chunks(c, index=0):
    return c.image.topic_by_name("t").partition_chunks(index)


def codes(res):
    return [(r.error_code, r.error_message) for r in res.response.results]


# ------------------------------------------------------------------ CreateChunks
def test_create_chunk_closes_active_chunk_and_moves_partition():
    c = cluster()
    before = part(c)
    res = c.run(create_chunks, create_req(("t", 0, [1], 10, 1234, 9)))
    assert codes(res) == [(0, None)]
    crec, pcr = res.records
    assert type(crec).__spec_name__ == "ChunkRecord"
    assert type(pcr).__spec_name__ == "PartitionChangeRecord"
    [ch] = chunks(c)
    assert ch == ChunkRegistration(
        start_offset=0,
        stop_offset=9,
        end_offset=9,
        replicas=(0,),
        isr=(0,),
        start_timestamp=-1,
        directories=before.directories,
        epoch=0,
    )
    p = part(c)
    assert (p.replicas, p.isr, p.leader) == ((1,), (1,), 1)
    assert (p.start_offset, p.start_timestamp) == (10, 1234)
    assert p.leader_epoch == before.leader_epoch + 1
    assert p.partition_epoch == before.partition_epoch + 1
    # a second chunk starts where the first active chunk ended, and inherits its timestamp
    res = c.run(create_chunks, create_req(("t", 0, [2], 25, -1, 20)))
    assert codes(res) == [(0, None)]
    first, second = chunks(c)
    assert first.start_offset == 0
    assert (second.start_offset, second.stop_offset, second.end_offset) == (10, 20, 24)
    assert (second.replicas, second.start_timestamp) == ((1,), 1234)
    p = part(c)
    assert (p.start_offset, p.start_timestamp, p.leader) == (25, -1, 2)


def test_create_chunk_on_same_replicas_keeps_leader_epoch():
    c = cluster(rf=2)
    before = part(c)
    res = c.run(create_chunks, create_req(("t", 0, [0, 1], 5, 1, 4)))
    assert codes(res) == [(0, None)]
    p = part(c)
    assert res.records[1].leader == -2 and res.records[1].replicas is None
    assert (p.leader, p.leader_epoch) == (before.leader, before.leader_epoch)
    assert p.start_offset == 5


@pytest.mark.parametrize(
    "entry, code, words",
    [
        (("nope", 0, [1], 10, 1, 9), E.UNKNOWN_TOPIC_OR_PARTITION, "nope:0"),
        (("t", 3, [1], 10, 1, 9), E.UNKNOWN_TOPIC_OR_PARTITION, "t:3"),
        (("t", 0, [1, 2], 10, 1, 9), E.INVALID_REPLICATION_FACTOR, "2 replica"),
        (("t", 0, [], 10, 1, 9), E.INVALID_REPLICATION_FACTOR, "0 replica"),
        (("t", 0, [7], 10, 1, 9), E.INVALID_REPLICA_ASSIGNMENT, "broker 7"),
        (("t", 0, [1], -1, -1, -1), E.INVALID_REQUEST, "filled in"),
        (("t", 0, [1], 10, 1, -1), E.INVALID_REQUEST, "filled in"),
        (("t", 0, [1], 0, 1, 0), E.INVALID_REQUEST, "beyond"),
        (("t", 0, [1], 10, 1, 10), E.INVALID_REQUEST, "PrevStopOffset 10"),
    ],
)
def test_create_chunk_errors_change_nothing(entry, code, words):
    c = cluster()
    img = c.image
    res = c.run(create_chunks, create_req(entry))
    [(got, msg)] = codes(res)
    assert got == code and words in msg
    assert not res.records and c.image == img


def test_create_chunk_rejects_repeated_and_fenced_brokers():
    c = cluster(rf=2)
    res = c.run(create_chunks, create_req(("t", 0, [1, 1], 10, 1, 9)))
    assert codes(res)[0][0] == E.INVALID_REPLICA_ASSIGNMENT and "more than once" in codes(res)[0][1]
    c.register(9)  # registered, still fenced
    c.register(8)
    res = c.run(create_chunks, create_req(("t", 0, [8, 9], 10, 1, 9)))
    assert codes(res)[0][0] == E.INVALID_REPLICA_ASSIGNMENT and "fenced" in codes(res)[0][1]
    assert not chunks(c)


def test_create_chunk_offsets_going_backwards_or_overlapping_active_chunk():
    c = cluster()
    assert codes(c.run(create_chunks, create_req(("t", 0, [1], 10, 1, 9))))[0][0] == 0
    img = c.image
    for start, stop in [(10, 9), (5, 4), (12, 8), (12, 12)]:
        res = c.run(create_chunks, create_req(("t", 0, [2], start, 1, stop)))
        assert codes(res)[0][0] == E.INVALID_REQUEST, (start, stop)
        assert c.image == img
    # stop = start of the active chunk - 1: the closed chunk has nothing readable, but is valid
    assert codes(c.run(create_chunks, create_req(("t", 0, [2], 12, 1, 9))))[0][0] == 0


def test_create_chunks_per_entry_errors_and_later_entries_see_earlier_ones():
    c = cluster()
    res = c.run(
        create_chunks,
        create_req(
            ("t", 0, [1], 10, 1, 9),
            ("x", 0, [1], 10, 1, 9),
            ("t", 0, [2], 10, 1, 9),  # backwards now: the first entry moved the start to 10
            ("t", 0, [2], 20, 2, 19),
        ),
    )
    assert [code for code, _ in codes(res)] == [
        0,
        E.UNKNOWN_TOPIC_OR_PARTITION,
        E.INVALID_REQUEST,
        0,
    ]
    assert [ch.start_offset for ch in chunks(c)] == [0, 10]
    assert len(res.records) == 4 and part(c).leader == 2


# ------------------------------------------------------------------ AlterChunkAssignments
def with_chunk(diskless=True, rf=1):
    c = cluster(diskless=diskless, rf=rf)
    target = [1] if rf == 1 else [2, 3]
    assert codes(c.run(create_chunks, create_req(("t", 0, target, 10, 1, 9))))[0][0] == 0
    return c


def test_alter_moves_diskless_chunk_at_once():
    c = with_chunk()
    res = c.run(alter_chunk_assignments, alter_req(("t", 0, 0, 0, [2])))
    assert [r.error_code for r in res.response.results] == [0]
    assert res.response.results[0].start_offset == 0
    [rec] = res.records
    assert (rec.replicas, rec.isr, rec.removing_replicas, rec.adding_replicas, rec.epoch) == (
        (2,), (2,), (), (), 1,
    )  # fmt: skip
    [ch] = chunks(c)
    assert (ch.replicas, ch.isr, ch.epoch, ch.removing_replicas, ch.adding_replicas) == (
        (2,), (2,), 1, (), (),
    )  # fmt: skip
    assert (ch.start_offset, ch.stop_offset, ch.end_offset) == (0, 9, 9)
    assert part(c).replicas == (1,)  # the active chunk is untouched


def test_alter_non_diskless_chunk_stays_in_progress_as_kafka_reassignment():
    c = with_chunk(diskless=False, rf=2)  # chunk [0, 1], active chunk on [2, 3]
    res = c.run(alter_chunk_assignments, alter_req(("t", 0, 0, -1, [1, 3])))
    assert [r.error_code for r in res.response.results] == [0]
    [ch] = chunks(c)
    # replicas = target ++ removing; adding/removing as Kafka's PartitionReassignmentReplicas
    assert (ch.replicas, ch.isr, ch.adding_replicas, ch.removing_replicas, ch.epoch) == (
        (1, 3, 0), (0, 1), (3,), (0,), 1,
    )  # fmt: skip
    # a pure shrink inside the ISR completes at once (ISR - removing covers the target);
    # an in-progress reassignment is reverted first (current = replicas - adding = [1, 0])
    res = c.run(alter_chunk_assignments, alter_req(("t", 0, 0, 1, [1])))
    assert [r.error_code for r in res.response.results] == [0]
    [ch] = chunks(c)
    assert (ch.replicas, ch.isr, ch.adding_replicas, ch.removing_replicas, ch.epoch) == (
        (1,), (1,), (), (), 2,
    )  # fmt: skip


def test_alter_reorder_completes_and_identical_target_writes_nothing():
    c = with_chunk(diskless=False, rf=2)
    res = c.run(alter_chunk_assignments, alter_req(("t", 0, 0, -1, [1, 0])))
    [ch] = chunks(c)
    assert (ch.replicas, ch.isr, ch.epoch) == ((1, 0), (0, 1), 1)
    img = c.image
    res = c.run(alter_chunk_assignments, alter_req(("t", 0, 0, 1, [1, 0])))
    assert [r.error_code for r in res.response.results] == [0]
    assert not res.records and c.image == img


def test_alter_empty_target_removes_chunk():
    c = with_chunk()
    res = c.run(alter_chunk_assignments, alter_req(("t", 0, 0, 0, [])))
    assert [r.error_code for r in res.response.results] == [0]
    [rec] = res.records
    assert rec.removing_replicas == (0,) and rec.epoch == 1
    assert chunks(c) == [] and c.image.topic_by_name("t").chunks.get(0) is None


def test_alter_replica_dropping_itself_then_last_one_removes_chunk():
    c = with_chunk(diskless=False, rf=2)
    res = c.run(alter_chunk_assignments, alter_req(("t", 0, 0, -1, [1])))  # broker 0 leaves
    assert [r.error_code for r in res.response.results] == [0]
    assert chunks(c)[0].replicas == (1,)
    res = c.run(alter_chunk_assignments, alter_req(("t", 0, 0, -1, [])))  # and broker 1
    assert [r.error_code for r in res.response.results] == [0] and chunks(c) == []


@pytest.mark.parametrize(
    "entry, code, words",
    [
        (("nope", 0, 0, -1, [2]), E.UNKNOWN_TOPIC_OR_PARTITION, "nope:0"),
        (("t", 5, 0, -1, [2]), E.UNKNOWN_TOPIC_OR_PARTITION, "t:5"),
        (("t", 0, 3, -1, [2]), E.INVALID_REQUEST, "no inactive chunk starting at offset 3"),
        (("t", 0, 10, -1, [2]), E.INVALID_REQUEST, "offset 10"),  # the active chunk's start
        (("t", 0, 0, 7, [2]), E.INVALID_UPDATE_VERSION, "stale"),
        (("t", 0, 0, -1, [9]), E.INVALID_REPLICA_ASSIGNMENT, "broker 9"),
        (("t", 0, 0, -1, [2, 3]), E.INVALID_REPLICA_ASSIGNMENT, "2 replica"),
    ],
)
def test_alter_errors_change_nothing(entry, code, words):
    c = with_chunk()
    img = c.image
    res = c.run(alter_chunk_assignments, alter_req(entry))
    [r] = res.response.results
    assert r.error_code == code and words in r.error_message
    assert (r.topic_name, r.partition_id, r.start_offset) == entry[:3]
    assert not res.records and c.image == img


def test_alter_stale_epoch_after_a_change_and_repeated_broker():
    c = with_chunk()
    assert c.run(alter_chunk_assignments, alter_req(("t", 0, 0, 0, [2]))).records
    img = c.image
    res = c.run(alter_chunk_assignments, alter_req(("t", 0, 0, 0, [3]), ("t", 0, 0, 1, [3, 3])))
    assert [r.error_code for r in res.response.results] == [
        E.INVALID_UPDATE_VERSION,
        E.INVALID_REPLICA_ASSIGNMENT,
    ]
    assert c.image == img


def test_delete_topic_drops_its_chunks_and_recreate_has_none():
    c = with_chunk()
    c.delete(names=["t"])
    assert c.image.topic_by_name("t") is None
    c.create(topic("t", configs=[("diskless.enable", "true")]))
    assert chunks(c) == []


# ------------------------------------------------------------------ replay
def test_replay_rejects_inconsistent_chunk_records():
    c = with_chunk()
    tid = c.image.topic_by_name("t").topic_id
    img = c.image
    bad = [
        R("ChunkRecord")(partition_id=0, topic_id=uuid.uuid4(), start_offset=0, end_offset=1),
        R("ChunkRecord")(partition_id=4, topic_id=tid, start_offset=0, stop_offset=1, end_offset=1),
        R("ChunkRecord")(partition_id=0, topic_id=tid, start_offset=5, stop_offset=6, end_offset=5),
        R("ChunkChangeRecord")(partition_id=0, topic_id=tid, start_offset=4, epoch=1),
        R("ChunkChangeRecord")(partition_id=0, topic_id=tid, start_offset=0, epoch=5),
    ]
    for rec in bad:
        with pytest.raises(ReplayError):
            replay(img, rec, 100)


def test_replay_chunk_change_keeps_unsent_fields_and_directories():
    c = with_chunk()
    t = c.image.topic_by_name("t")
    d0, d1 = uuid.UUID(int=10), uuid.UUID(int=11)
    img = replay(
        c.image,
        R("ChunkRecord")(
            partition_id=0, topic_id=t.topic_id, start_offset=0, stop_offset=9, end_offset=9,
            replicas=(0, 1), directories=(d0, d1), isr=(0, 1), epoch=4, chunk_epoch=4,
        ),
        50,
    )  # fmt: skip
    img = replay(
        img,
        R("ChunkChangeRecord")(
            partition_id=0, topic_id=t.topic_id, start_offset=0, replicas=(1, 2), epoch=5
        ),
        51,
    )
    ch = img.topics[t.topic_id].chunks[0][0]
    assert (ch.replicas, ch.directories, ch.isr, ch.epoch) == (
        (1, 2),
        (d1, uuid.UUID(int=0)),
        (0, 1),
        5,
    )
    assert img.last_offset == 51


def test_partition_record_replaces_partition_but_keeps_chunks():
    c = with_chunk()
    t = c.image.topic_by_name("t")
    img = replay(
        c.image,
        R("PartitionRecord")(
            partition_id=0, topic_id=t.topic_id, replicas=(3,), isr=(3,), leader=3
        ),
        80,
    )
    assert img.topics[t.topic_id].partition_chunks(0) == t.partition_chunks(0)


# ------------------------------------------------------------------ snapshots
def test_snapshot_with_chunks_reloads_equal():
    c = with_chunk(diskless=False, rf=2)
    c.run(create_chunks, create_req(("t", 0, [0, 1], 30, 77, 25)))
    c.run(alter_chunk_assignments, alter_req(("t", 0, 0, -1, [1, 3])))  # in progress
    assert len(chunks(c)) == 2 and chunks(c)[0].adding_replicas == (3,)
    img = c.image
    recs = image_records(img)
    names = [type(codec.decode_record(r)[0]).__spec_name__ for r in recs]
    assert names.count("ChunkRecord") == 2
    loaded = load(recs, img.last_offset, img.last_epoch)
    assert loaded == img
    # and the loaded image goes on exactly as the original
    req = alter_req(("t", 0, 10, 0, [0, 1]))
    assert (
        alter_chunk_assignments(img, req, c.ctx()).records
        == alter_chunk_assignments(loaded, req, c.ctx()).records
    )


CHUNK_OPS = st.one_of(
    st.tuples(st.just("create"), st.integers(0, 3), st.integers(0, 3), st.integers(0, 3)),
    st.tuples(
        st.just("alter"),
        st.integers(0, 40),
        st.lists(st.integers(0, 3), max_size=2, unique=True),
        st.booleans(),
    ),
    st.tuples(st.just("delete")),
)


@settings(max_examples=60, deadline=None)
@given(st.lists(CHUNK_OPS, max_size=20), st.booleans())
def test_snapshot_round_trip_and_midway_load_with_chunks(ops, diskless):
    c = cluster(diskless=diskless, rf=2)
    images = []
    end = 0
    for op in ops:
        if op[0] == "create":
            end += op[1] * 3
            p = c.image.topic_by_name("t")
            n = len(p.partitions[0].replicas) if p else 2
            brokers = sorted({op[2], op[3], 0, 1})[:n]
            c.run(create_chunks, create_req(("t", 0, brokers, end + 1, end, end - op[1])))
        elif op[0] == "alter":  # op[1]: an index into the chunks (else an unknown offset)
            existing = chunks(c)
            start = existing[op[1] % len(existing)].start_offset if existing else op[1]
            epoch = -1 if op[3] else 0
            c.run(alter_chunk_assignments, alter_req(("t", 0, start, epoch, op[2])))
        else:
            c.delete(names=["t"])
            c.create(topic("t", configs=[("diskless.enable", "true")] if diskless else [], rf=2))
            end = 0
        images.append((c.image, len(c.log)))
        img = c.image
        assert load(image_records(img), img.last_offset, img.last_epoch) == img
    # a snapshot taken midway plus the log tail equals the whole log
    if images:
        mid, n = images[len(images) // 2]
        img = load(image_records(mid), mid.last_offset, mid.last_epoch)
        for off in range(n, len(c.log)):
            img = replay(img, codec.decode_record(c.log[off])[0], off, 1)
        assert img == c.image


# ------------------------------------------------------------------ through QuorumController
async def test_quorum_controller_answers_after_commit_and_not_controller_when_inactive():
    from kafka_rpc.controller.quorum_controller import QuorumController
    from tests.controller.harness import CLUSTER
    from tests.controller.test_quorum_controller import (
        HandDriver,
        Setup,
        follower_node,
        pending,
        register,
    )

    s = Setup()
    s.activate()
    for b in (1, 2):
        await register(s, b)
    epoch = s.qc.image.brokers[1].epoch
    hb = await pending(s.qc.broker_heartbeat(R("BrokerHeartbeatRequest")(
        broker_id=1, broker_epoch=epoch, current_metadata_offset=epoch), 1))  # fmt: skip
    s.commit()
    assert not (await hb).is_fenced
    ct = await pending(s.qc.create_topics(R("CreateTopicsRequest")(topics=(topic("t"),)), 7))
    s.commit()
    assert (await ct).topics[0].error_code == 0
    # broker 2 is registered but fenced (no heartbeat): the new chunk would have no leader
    res = await s.qc.create_chunks(create_req(("t", 0, [2], 5, 1, 4)), 0)
    assert res.results[0].error_code == E.INVALID_REPLICA_ASSIGNMENT
    task = await pending(s.qc.create_chunks(create_req(("t", 0, [1], 5, 1, 4)), 0))
    assert not task.done()  # answered once the records commit
    assert s.qc.uncommitted_image.topic_by_name("t").chunks
    assert not s.qc.image.topic_by_name("t").chunks
    s.commit()
    assert [(r.error_code, r.error_message) for r in (await task).results] == [(0, None)]
    [ch] = s.qc.image.topic_by_name("t").partition_chunks(0)
    assert (ch.start_offset, ch.end_offset) == (0, 4)
    task = await pending(s.qc.alter_chunk_assignments(alter_req(("t", 0, 0, 0, [])), 0))
    s.commit()
    assert [r.error_code for r in (await task).results] == [0]
    assert not s.qc.image.topic_by_name("t").chunks

    qc = QuorumController(2, CLUSTER)
    qc.attach(HandDriver(follower_node(2, leader=1, epoch=1, sm=qc), [0]))
    nc = E.NOT_CONTROLLER
    res = await qc.create_chunks(create_req(("t", 0, [1], 5, 1, 4), ("u", 2, [1], 5, 1, 4)), 0)
    assert [(r.topic_name, r.partition_id, r.error_code) for r in res.results] == [
        ("t", 0, nc), ("u", 2, nc)]  # fmt: skip
    res = await qc.alter_chunk_assignments(alter_req(("t", 0, 7, -1, [1])), 0)
    assert [(r.start_offset, r.error_code) for r in res.results] == [(7, nc)]
