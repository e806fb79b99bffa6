"""Snapshots (KIP-630): the image written as records rebuilds the same image, and loading a
snapshot taken midway then replaying the tail equals replaying the whole log."""

from hypothesis import given, settings
from hypothesis import strategies as st

from kafka_rpc.controller.image import EMPTY
from kafka_rpc.controller.replay import replay
from kafka_rpc.controller.snapshot import image_records, load
from kafka_rpc.protocol import codec

from .harness import Cluster, topic

BROKERS = st.integers(0, 3)
OPS = st.one_of(
    st.tuples(st.just("register"), BROKERS),
    st.tuples(st.just("heartbeat"), BROKERS, st.booleans(), st.booleans()),
    st.tuples(
        st.just("create"), st.sampled_from(["a", "b", "c.d"]), st.integers(1, 4), st.integers(1, 3)
    ),
    st.tuples(st.just("delete"), st.sampled_from(["a", "b", "c.d"])),
    st.tuples(st.just("allocate"), BROKERS),
    st.tuples(st.just("tick"), st.integers(0, 6000)),
    st.tuples(st.just("fence_stale")),
)


def run_ops(ops, seed):
    c = Cluster(seed=seed)
    c.apply([codec.message_class("FeatureLevelRecord")(name="metadata.version", feature_level=21)])
    images = [c.image]
    for op in ops:
        kind = op[0]
        if kind == "register":
            c.register(op[1])
        elif kind == "heartbeat":
            c.heartbeat(op[1], want_fence=op[2] and op[3], want_shut_down=op[3] and not op[2])
        elif kind == "create":
            c.create(topic(op[1], n=op[2], rf=op[3], configs=[("retention.ms", str(op[2]))]))
        elif kind == "delete":
            c.delete(names=[op[1]])
        elif kind == "allocate":
            c.allocate(op[1])
        elif kind == "tick":
            c.now += op[1]
        else:
            c.fence_stale()
        images.append(c.image)
    return c


@settings(max_examples=40)
@given(st.lists(OPS, max_size=30), st.integers(0, 5))
def test_snapshot_round_trip(ops, seed):
    c = run_ops(ops, seed)
    img = c.image
    assert load(image_records(img), img.last_offset, img.last_epoch) == img


@settings(max_examples=30)
@given(st.lists(OPS, max_size=30), st.integers(0, 5), st.floats(0, 1))
def test_snapshot_midway_plus_tail_equals_full_replay(ops, seed, frac):
    c = run_ops(ops, seed)
    log = c.log
    full = EMPTY
    for off, data in enumerate(log):
        full = replay(full, codec.decode_record(data)[0], off, 1)
    assert full == c.image
    k = int(frac * len(log))  # snapshot covers offsets [0, k)
    mid = EMPTY
    for off, data in enumerate(log[:k]):
        mid = replay(mid, codec.decode_record(data)[0], off, 1)
    img = load(image_records(mid), k - 1, 1 if k else -1)
    for off in range(k, len(log)):
        img = replay(img, codec.decode_record(log[off])[0], off, 1)
    assert img == full


def test_snapshot_of_empty_image_is_empty():
    assert image_records(EMPTY) == [] and load([]) == EMPTY


def test_snapshot_keeps_fencing_epochs_and_producer_ids():
    c = Cluster(seed=4)
    c.live(1, 2)
    c.register(3)
    c.create(topic("t", n=2, rf=2))
    c.heartbeat(1, want_shut_down=True)
    c.allocate(2)
    img = c.image
    back = load(image_records(img), img.last_offset, img.last_epoch)
    assert back == img
    assert back.brokers[3].fenced and back.brokers[1].in_controlled_shutdown
    assert back.producer_ids.next_producer_id == 1000
    assert {p.leader_epoch for p in back.topic_by_name("t").partitions.values()} == {
        p.leader_epoch for p in img.topic_by_name("t").partitions.values()
    }
