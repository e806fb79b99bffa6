"""Replay per record type (Kafka's *ControlManager.replay); ReplayError on contradictions."""

import uuid

import pytest

from kafka_rpc.controller.image import EMPTY, RESOURCE_TOPIC
from kafka_rpc.controller.replay import ReplayError, replay, replay_all
from kafka_rpc.protocol import codec

R = codec.message_class
T1 = uuid.UUID(int=0xA1, version=4)
INC = uuid.UUID(int=0xB1, version=4)


def reg(bid=1, epoch=10, inc=INC, fenced=True):
    return R("RegisterBrokerRecord")(
        broker_id=bid, incarnation_id=inc, broker_epoch=epoch, fenced=fenced
    )


def with_topic(parts=1, leader=1):
    img = replay_all(
        EMPTY, [(reg(1, 0, fenced=False), 0), (R("TopicRecord")(name="t", topic_id=T1), 1)]
    )
    for i in range(parts):
        img = replay(
            img,
            R("PartitionRecord")(
                partition_id=i,
                topic_id=T1,
                replicas=(1, 2),
                isr=(1, 2),
                leader=leader,
                leader_epoch=0,
                partition_epoch=0,
            ),
            2 + i,
        )
    return img


def test_register_broker_then_newer_incarnation_replaces_it():
    img = replay(EMPTY, reg(1, 10), 10)
    assert img.brokers[1].epoch == 10 and img.brokers[1].fenced and img.last_offset == 10
    inc2 = uuid.UUID(int=0xB2, version=4)
    img = replay(img, reg(1, 20, inc2, fenced=False), 20)
    assert (
        img.brokers[1].incarnation_id == inc2
        and img.brokers[1].epoch == 20
        and not img.brokers[1].fenced
    )
    assert len(img.brokers) == 1


def test_unregister_requires_matching_epoch():
    img = replay(EMPTY, reg(1, 10), 10)
    with pytest.raises(ReplayError):
        replay(img, R("UnregisterBrokerRecord")(broker_id=1, broker_epoch=11), 11)
    with pytest.raises(ReplayError):
        replay(img, R("UnregisterBrokerRecord")(broker_id=2, broker_epoch=10), 11)
    assert (
        1 not in replay(img, R("UnregisterBrokerRecord")(broker_id=1, broker_epoch=10), 11).brokers
    )


def test_fence_unfence_and_registration_change():
    img = replay(EMPTY, reg(1, 10), 10)
    img = replay(img, R("UnfenceBrokerRecord")(id=1, epoch=10), 11)
    assert not img.brokers[1].fenced
    img = replay(
        img,
        R("BrokerRegistrationChangeRecord")(
            broker_id=1, broker_epoch=10, fenced=0, in_controlled_shutdown=1
        ),
        12,
    )
    assert img.brokers[1].in_controlled_shutdown and not img.brokers[1].fenced
    img = replay(img, R("FenceBrokerRecord")(id=1, epoch=10), 13)
    assert img.brokers[1].fenced
    img = replay(
        img, R("BrokerRegistrationChangeRecord")(broker_id=1, broker_epoch=10, fenced=-1), 14
    )
    assert not img.brokers[1].fenced
    for bad in (
        R("FenceBrokerRecord")(id=1, epoch=9),
        R("UnfenceBrokerRecord")(id=2, epoch=10),
        R("BrokerRegistrationChangeRecord")(broker_id=1, broker_epoch=10, fenced=2),
        R("BrokerRegistrationChangeRecord")(broker_id=1, broker_epoch=10, in_controlled_shutdown=3),
    ):
        with pytest.raises(ReplayError):
            replay(img, bad, 15)


def test_topic_and_partition_records():
    img = with_topic(parts=2)
    t = img.topic_by_name("t")
    assert t.topic_id == T1 and sorted(t.partitions) == [0, 1] and t.partitions[0].leader == 1
    with pytest.raises(ReplayError):  # same id again
        replay(img, R("TopicRecord")(name="u", topic_id=T1), 9)
    with pytest.raises(ReplayError):  # same name again
        replay(img, R("TopicRecord")(name="t", topic_id=uuid.uuid4()), 9)
    with pytest.raises(ReplayError):  # partition of an unknown topic
        replay(
            img,
            R("PartitionRecord")(
                partition_id=0, topic_id=uuid.uuid4(), replicas=(1,), isr=(1,), leader=1
            ),
            9,
        )


def test_partition_record_v3_start_offset_and_timestamp():
    img = with_topic(parts=0)
    img = replay(
        img,
        R("PartitionRecord")(
            partition_id=0,
            topic_id=T1,
            replicas=(1,),
            isr=(1,),
            leader=1,
            start_offset=42,
            start_timestamp=7,
        ),
        5,
    )
    p = img.topics[T1].partitions[0]
    assert (p.start_offset, p.start_timestamp) == (42, 7)
    img = replay(
        img,
        R("PartitionChangeRecord")(
            partition_id=0, topic_id=T1, start_offset=100, start_timestamp=9
        ),
        6,
    )
    p = img.topics[T1].partitions[0]
    assert (p.start_offset, p.start_timestamp, p.leader_epoch, p.partition_epoch) == (100, 9, -1, 0)


def test_partition_change_epoch_rules():
    img = with_topic()
    PCR = R("PartitionChangeRecord")
    # Leader -2 (default): leader and leader epoch unchanged, partition epoch +1.
    img = replay(img, PCR(partition_id=0, topic_id=T1, isr=(1,)), 10)
    p = img.topics[T1].partitions[0]
    assert (p.leader, p.leader_epoch, p.partition_epoch, p.isr) == (1, 0, 1, (1,))
    # Same leader id set explicitly: leader epoch still +1.
    img = replay(img, PCR(partition_id=0, topic_id=T1, leader=1), 11)
    p = img.topics[T1].partitions[0]
    assert (p.leader, p.leader_epoch, p.partition_epoch, p.isr) == (1, 1, 2, (1,))
    # Leader -1: no leader, leader epoch +1.
    img = replay(img, PCR(partition_id=0, topic_id=T1, leader=-1), 12)
    p = img.topics[T1].partitions[0]
    assert (p.leader, p.leader_epoch, p.partition_epoch) == (-1, 2, 3)
    # Replicas/removing/adding change; null fields stay.
    img = replay(
        img,
        PCR(
            partition_id=0,
            topic_id=T1,
            replicas=(2, 3, 1),
            adding_replicas=(3,),
            removing_replicas=(1,),
        ),
        13,
    )
    p = img.topics[T1].partitions[0]
    assert (
        p.replicas == (2, 3, 1)
        and p.adding_replicas == (3,)
        and p.removing_replicas == (1,)
        and p.isr == (1,)
    )
    assert p.leader_epoch == 2 and p.partition_epoch == 4
    with pytest.raises(ReplayError):
        replay(img, PCR(partition_id=5, topic_id=T1), 14)
    with pytest.raises(ReplayError):
        replay(img, PCR(partition_id=0, topic_id=uuid.uuid4()), 14)


def test_remove_topic_drops_partitions_configs_and_name():
    img = with_topic(parts=2)
    img = replay(
        img,
        R("ConfigRecord")(
            resource_type=RESOURCE_TOPIC, resource_name="t", name="retention.ms", value="1"
        ),
        8,
    )
    img = replay(
        img,
        R("ConfigRecord")(
            resource_type=RESOURCE_TOPIC, resource_name="u", name="retention.ms", value="2"
        ),
        9,
    )
    img = replay(img, R("RemoveTopicRecord")(topic_id=T1), 10)
    assert T1 not in img.topics and "t" not in img.topics_by_name
    assert (RESOURCE_TOPIC, "t") not in img.configs and (RESOURCE_TOPIC, "u") in img.configs
    with pytest.raises(ReplayError):
        replay(img, R("RemoveTopicRecord")(topic_id=T1), 11)
    # The name is free again.
    img = replay(img, R("TopicRecord")(name="t", topic_id=uuid.UUID(int=0xC1, version=4)), 12)
    assert img.topics_by_name["t"] != T1


def test_config_set_and_delete():
    C = R("ConfigRecord")
    img = replay(EMPTY, C(resource_type=4, resource_name="", name="a", value="1"), 0)
    img = replay(img, C(resource_type=4, resource_name="", name="b", value="2"), 1)
    assert dict(img.configs[(4, "")]) == {"a": "1", "b": "2"}
    img = replay(img, C(resource_type=4, resource_name="", name="a", value=None), 2)
    assert dict(img.configs[(4, "")]) == {"b": "2"}
    img = replay(img, C(resource_type=4, resource_name="", name="b", value=None), 3)
    assert (4, "") not in img.configs


def test_feature_level_and_noop():
    F = R("FeatureLevelRecord")
    img = replay(EMPTY, F(name="metadata.version", feature_level=21), 0, epoch=3)
    assert dict(img.features) == {"metadata.version": 21} and (img.last_offset, img.last_epoch) == (
        0,
        3,
    )
    img2 = replay(img, R("NoOpRecord")(), 1, epoch=4)
    assert img2.features == img.features and (img2.last_offset, img2.last_epoch) == (1, 4)
    img3 = replay(img2, F(name="group.version", feature_level=1), 2)
    assert img3.features["group.version"] == 1
    assert "group.version" not in replay(img3, F(name="group.version", feature_level=0), 3).features
    # FeatureControlManager.replay: a level outside what this node supports stops Kafka's
    # controller (metadata.version 0, 30 = 4.3-IV0, a feature we do not know at 1)
    for name, lvl in (("metadata.version", 0), ("metadata.version", 30), ("x.version", 1),
                      ("eligible.leader.replicas.version", 1)):  # fmt: skip
        with pytest.raises(ReplayError):
            replay(img2, F(name=name, feature_level=lvl), 2)
    # kraft.version lives in the Raft layer: a FeatureLevelRecord for it is ignored (KAFKA-18979)
    assert replay(img2, F(name="kraft.version", feature_level=1), 2).features == img2.features


def test_producer_ids_only_go_up():
    P = R("ProducerIdsRecord")
    img = replay(EMPTY, P(broker_id=1, broker_epoch=5, next_producer_id=1000), 0)
    assert img.producer_ids.next_producer_id == 1000
    for bad in (1000, 999, 0):
        with pytest.raises(ReplayError):
            replay(img, P(broker_id=2, broker_epoch=6, next_producer_id=bad), 1)
    img = replay(img, P(broker_id=2, broker_epoch=6, next_producer_id=5000), 1)  # gaps are fine
    assert (img.producer_ids.broker_id, img.producer_ids.next_producer_id) == (2, 5000)


def test_images_compare_structurally():
    recs = [(reg(1, 0), 0), (R("TopicRecord")(name="t", topic_id=T1), 1)]
    assert replay_all(EMPTY, recs) == replay_all(EMPTY, recs)
    assert replay_all(EMPTY, recs) != replay_all(EMPTY, recs[:1])
