"""Replica placement as Kafka's StripedReplicaPlacer (rack striping, fenced brokers as
followers, the leader unfenced, controlled shutdown excluded) and the classic-topic rule for
kafka-rpc brokers (docs/kafka-brokers.md, 'What works')."""

from __future__ import annotations

import random
from collections import Counter
from dataclasses import replace

import pytest

from kafka_rpc.controller.base import ApiError
from kafka_rpc.controller.image import EMPTY, BrokerRegistration, evolve
from kafka_rpc.controller.placement import classic_brokers, place_replicas
from kafka_rpc.protocol.errors import ErrorCode as E
from tests.controller.harness import Cluster, topic


def image_of(*brokers: BrokerRegistration):
    img = EMPTY
    for b in brokers:
        img = evolve(img, brokers=img.brokers.set(b.broker_id, b))
    return img


def reg(bid, rack=None, fenced=False, shutdown=False, features=()):
    import uuid

    return BrokerRegistration(broker_id=bid, incarnation_id=uuid.UUID(int=bid), epoch=bid,
                              rack=rack, fenced=fenced, in_controlled_shutdown=shutdown,
                              features=features)  # fmt: skip


@pytest.mark.parametrize("seed", range(20))
def test_racks_striped_and_leaders_spread(seed):
    img = image_of(*(reg(b, rack=f"r{b % 3}") for b in range(6)))
    parts = place_replicas(img, 6, 3, random.Random(seed))
    for replicas in parts:
        assert len(set(replicas)) == 3
        assert len({img.brokers[b].rack for b in replicas}) == 3  # one replica per rack
    assert sorted(p[0] for p in parts) == list(range(6))  # every broker leads once


@pytest.mark.parametrize("seed", range(20))
def test_fenced_brokers_are_followers_never_leaders(seed):
    img = image_of(reg(1), reg(2, fenced=True), reg(3), reg(4, shutdown=True))
    parts = place_replicas(img, 4, 3, random.Random(seed))
    for replicas in parts:
        assert set(replicas) == {1, 2, 3} and replicas[0] != 2  # 4 is in controlled shutdown
    with pytest.raises(ApiError) as e:
        place_replicas(img, 1, 4, random.Random(seed))
    assert e.value.code == E.INVALID_REPLICATION_FACTOR and "only 3 broker(s)" in e.value.message
    with pytest.raises(ApiError) as e:
        place_replicas(image_of(reg(1, fenced=True)), 1, 1, random.Random(seed))
    assert "All brokers are currently fenced" in e.value.message


def test_classic_topics_go_to_kafka_brokers_while_any_is_registered():
    ours = ("kafka_rpc.diskless.version", 0, 1)
    alone = image_of(reg(1, features=(ours,)), reg(2, features=(ours,)))
    assert classic_brokers(alone) == [1, 2]  # kafka-rpc nodes alone: everywhere, as before
    mixed = evolve(alone, brokers=alone.brokers.set(3, reg(3)))
    assert classic_brokers(mixed) == [3]
    for seed in range(10):
        assert place_replicas(mixed, 3, 1, random.Random(seed), classic_brokers(mixed)) == [
            (3,)
        ] * 3


def test_create_topics_places_classic_partitions_on_kafka_brokers_and_rf3_with_one_fenced():
    c = Cluster(seed=7)
    c.live(1, 2, 3)
    c.image = evolve(c.image, brokers=c.image.brokers.set(2, replace(c.image.brokers[2],
                                                                        fenced=True)))  # fmt: skip
    res = c.create(topic("t", n=3, rf=3))
    [r] = res.response.topics
    assert r.error_code == 0, r
    for p in c.image.topics[r.topic_id].partitions.values():
        assert set(p.replicas) == {1, 2, 3} and p.leader != 2 and 2 not in p.isr
    counts = Counter(p.leader for p in c.image.topics[r.topic_id].partitions.values())
    assert set(counts) <= {1, 3}
