"""``diskless.metadata.topic.replication.factor``: its default follows the static controller
voters (3, or fewer voters: a node alone gets 1, so ``kafka-rpc serve`` with no setting still gets
a Batch Coordinator now that the topic is never created with fewer replicas than the setting);
a value given is kept as given."""

from __future__ import annotations

import pytest

from kafka_rpc.config import ConfigError, load_config

KEY = "diskless.metadata.topic.replication.factor"


def voters(n: int) -> str:
    return ",".join(f"{i}@127.0.0.1:{19190 + i}" for i in range(1, n + 1))


def test_default_is_three_or_the_number_of_static_voters():
    assert load_config().diskless_metadata_topic_replication_factor == 1  # the default node
    for n, want in ((1, 1), (2, 2), (3, 3), (5, 3)):
        cfg = load_config(overrides={"controller.quorum.voters": voters(n)})
        assert cfg.diskless_metadata_topic_replication_factor == want, n
    dynamic = load_config(overrides={"controller.quorum.bootstrap.servers": "127.0.0.1:9093"})
    assert dynamic.diskless_metadata_topic_replication_factor == 3


def test_a_value_given_is_kept_even_above_the_voters():
    assert load_config(overrides={KEY: "3"}).diskless_metadata_topic_replication_factor == 3
    cfg = load_config(overrides={KEY: "2", "controller.quorum.voters": voters(5)})
    assert cfg.diskless_metadata_topic_replication_factor == 2
    with pytest.raises(ConfigError, match=KEY):
        load_config(overrides={KEY: "0"})
