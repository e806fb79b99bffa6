"""ImageDraft (Kafka's MetadataDelta): replaying a run of records into a draft gives the same
image as replaying them one by one on frozen images, and a rejected record leaves it unchanged."""

import uuid

import pytest

from kafka_rpc.controller.image import EMPTY, ImageDraft, MetadataImage, evolve
from kafka_rpc.controller.quorum_controller import QuorumController
from kafka_rpc.controller.replay import ReplayError, replay, replay_all
from kafka_rpc.protocol import codec
from kafka_rpc.protocol.record_batch import decode_batches, encode_batch

R = codec.message_class
T1 = uuid.UUID(int=0xA1, version=4)
INC = uuid.UUID(int=0xB1, version=4)

RECORDS = [
    R("FeatureLevelRecord")(name="metadata.version", feature_level=21),
    R("RegisterBrokerRecord")(broker_id=1, incarnation_id=INC, broker_epoch=1, fenced=True),
    R("UnfenceBrokerRecord")(id=1, epoch=1),
    R("TopicRecord")(name="t", topic_id=T1),
    R("PartitionRecord")(
        partition_id=0, topic_id=T1, replicas=(1,), isr=(1,), leader=1, leader_epoch=0
    ),
    R("PartitionChangeRecord")(partition_id=0, topic_id=T1, leader=1),
    R("ConfigRecord")(resource_type=2, resource_name="t", name="retention.ms", value="1"),
    R("ProducerIdsRecord")(broker_id=1, broker_epoch=1, next_producer_id=1000),
    R("NoOpRecord")(),
    R("FenceBrokerRecord")(id=1, epoch=1),
    R("RemoveTopicRecord")(topic_id=T1),
]


def test_a_draft_replays_to_the_same_image_as_frozen_replay():
    for n in range(len(RECORDS) + 1):
        pairs = [(r, i) for i, r in enumerate(RECORDS[:n])]
        draft = ImageDraft(EMPTY)
        for r, off in pairs:
            assert replay(draft, r, off, 7) is draft
        frozen = replay_all(EMPTY, pairs, 7)
        assert type(draft.freeze()) is MetadataImage
        assert draft.freeze() == frozen


def test_a_rejected_record_leaves_the_draft_unchanged():
    img = replay_all(EMPTY, [(r, i) for i, r in enumerate(RECORDS[:5])])
    draft = ImageDraft(img)
    replay(draft, R("ProducerIdsRecord")(broker_id=1, broker_epoch=1, next_producer_id=1000), 5)
    before = draft.freeze()
    for r in [
        R("TopicRecord")(name="t", topic_id=uuid.UUID(int=9, version=4)),  # name taken
        R("UnfenceBrokerRecord")(id=1, epoch=99),  # wrong broker epoch
        R("ProducerIdsRecord")(broker_id=1, broker_epoch=1, next_producer_id=1000),  # not up
    ]:
        with pytest.raises(ReplayError):
            replay(draft, r, 6)
        assert draft.freeze() == before


def test_evolve_rejects_unknown_fields_on_both():
    with pytest.raises(TypeError):
        evolve(EMPTY, bogus=1)
    with pytest.raises(TypeError):
        evolve(ImageDraft(EMPTY), bogus=1)
    assert evolve(EMPTY, last_offset=3) == MetadataImage(last_offset=3)


def test_handle_commit_of_many_batches_equals_frozen_replay_and_skips_redelivery():
    values = [codec.encode_record(r) for r in RECORDS]
    batches = decode_batches(
        b"".join(
            encode_batch(base, 4, values[base : base + 3], 0).data
            for base in range(0, len(values), 3)
        )
    )
    qc = QuorumController(node_id=1, cluster_id="AAAAAAAAAAAAAAAAAAAAAQ")
    published = []
    qc.publishers.append(lambda old, new: published.append((old, new)))
    qc.handle_commit(batches[:2])
    qc.handle_commit(batches)  # the first two again: a redelivery, then the rest
    want = replay_all(EMPTY, [(r, i) for i, r in enumerate(RECORDS)], 4)
    assert qc.image == want and qc.committed_offset == len(RECORDS) - 1
    assert len(published) == 2 and published[1][0] is published[0][1]
    qc.handle_commit(batches)  # all redelivered: nothing new is published
    assert len(published) == 2


def test_a_map_draft_behaves_as_the_pmap_it_changes():
    from pyrsistent import PMap, pmap

    from kafka_rpc.controller.image import MapDraft

    base = pmap({i: str(i) for i in range(20)})
    d = MapDraft(base)
    want = dict(base)
    assert d.set(3, "x") is d and d.remove(4) is d and d.discard(99) is d and d.discard(5) is d
    want[3] = "x"
    del want[4], want[5]
    d.set(100, "y")
    want[100] = "y"
    with pytest.raises(KeyError):
        d.remove(4)
    assert d.get(4) is None and d.get(4, "-") == "-" and d[3] == "x" and 100 in d
    assert len(d) == len(want) and dict(d.items()) == want and sorted(d) == sorted(want)
    frozen = d.persistent()
    assert isinstance(frozen, PMap) and frozen == pmap(want)
    assert base == pmap({i: str(i) for i in range(20)})  # the original is untouched
    img = ImageDraft(replay(EMPTY, RECORDS[0], 0)).freeze()
    assert all(isinstance(getattr(img, f), PMap) for f in ("features", "brokers", "topics"))
