"""A mixed KRaft quorum under repeated leader failure, with a Kafka broker attached
(docs/mixed-quorum.md): two Apache Kafka 4.4 controllers and
one kafka-rpc node, then one Kafka controller and two kafka-rpc nodes, each quorum with one
Apache Kafka broker creating topics through it (CreateTopics forwarded in an Envelope to the
active controller, whichever kind it is).

Each round creates a topic through the broker, waits until every voter (the one restarted last
round too) is at the leader's log end, SIGKILLs the leader, waits for the next one (a higher
epoch) and starts the killed node again.
Who wins follows Kafka 4.x's pre-vote rules (docs/mixed-quorum.md, "Who wins"): the follower
whose fetch timer expires last. With two Kafka controllers our node runs with a longer fetch
timeout (3000 ms against Kafka's 2000) and wins whenever a Kafka leader dies; with two of ours,
all run with Kafka's 2000 ms and ours win when the Kafka leader dies, mostly Kafka when one of
ours does. So the kinds mostly take turns (20 kills: 11/10 and 9/12 leaders, Kafka/ours).

At the end: every topic is on the broker with its id; `kafka-metadata-quorum describe
--replication` shows every voter with Lag 0; every batch below the high watermark is on every
voter and byte-identical (the segment files, read with our decoder); no Kafka node (controllers,
broker) halted; our controllers replayed every record (the Kafka leaders' bootstrap transaction
too); and DescribeQuorum, polled on every voter throughout, never showed two leaders in one
epoch.

Kills per configuration: ``KILLS``, 20 each, so that each kind leads several times (the two
configurations run in different lanes of a parallel run, tests/conftest.py);
``KAFKA_RPC_MIXED_KILLS=N`` sets both (fewer for a quick local run).
"""

from __future__ import annotations

import os
import time

import pytest

from tests.kafka.cluster import BrokerCluster
from tests.kafka.mixed import (
    QuorumWatch,
    caught_up,
    compare_logs,
    fatal_lines,
    replay_problems,
    replication_caught_up,
)

pytestmark = pytest.mark.kafka

CONFIGS = {
    "2kafka-1ours": (["kafka", "kafka", "ours"], {"controller.quorum.fetch.timeout.ms": 3000}),
    "1kafka-2ours": (["kafka", "ours", "ours"], {}),
}
KILLS = {"2kafka-1ours": 20, "1kafka-2ours": 20}
STEP_S = 90.0  # the bound of every wait
BROKER = {
    "offsets.topic.replication.factor": 1,
    "transaction.state.log.replication.factor": 1,
    "transaction.state.log.min.isr": 1,
}


def _kills(config: str) -> int:
    env = os.environ.get("KAFKA_RPC_MIXED_KILLS")
    return int(env) if env else KILLS[config]


def _create(c: BrokerCluster, name: str, timeout: float = STEP_S) -> None:
    """CreateTopics through the broker (1 partition, RF 1), again on a retriable error (the
    broker between controllers, or fenced a moment) until created; bounded by ``timeout`` s."""
    from confluent_kafka import KafkaError, KafkaException
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": c.bootstrap})
    deadline = time.monotonic() + timeout
    while True:
        try:
            admin.create_topics([NewTopic(name, 1, 1)], request_timeout=20)[name].result(30)
            return
        except KafkaException as exc:
            err = exc.args[0]
            if err.code() == KafkaError.TOPIC_ALREADY_EXISTS:
                return  # an earlier attempt's answer was lost, its topic was created
            if time.monotonic() > deadline:
                raise AssertionError(f"topic {name} not created in {timeout}s: {err}") from exc
        time.sleep(0.5)


def _topic_ids(c: BrokerCluster) -> dict[str, str]:
    md = c.metadata(c.broker_ids[0], None)
    return {} if md is None else {t.name: str(t.topic_id) for t in md.topics if not t.error_code}


@pytest.mark.parametrize("config", list(CONFIGS))
def test_leader_killed_again_and_again_with_a_broker_attached(config, kafka_newest, tmp_path,
                                                              procs):  # fmt: skip
    kinds, our_props = CONFIGS[config]
    kills = _kills(config)
    c = BrokerCluster(tmp_path, kinds, n_brokers=1, version=kafka_newest,
                      our_controller_props=our_props, broker_props=BROKER)  # fmt: skip
    q = c.quorum
    procs.extend([*q.nodes.values(), *c.brokers.values()])
    c.start()
    watch = QuorumWatch(q).start()
    led: list[tuple[int, int]] = []  # (epoch, leader) of every leader seen
    topics: list[str] = []
    took: list[float] = []  # s from a SIGKILL to the next leader
    rounds: list[float] = []  # s per round (create, restart and catch up, kill, elect)
    try:
        leader, epoch = c.active_controller(STEP_S)
        led.append((epoch, leader))
        for k in range(kills):
            t_round = time.monotonic()
            topics.append(f"t{k}-{q.kind[leader]}{leader}-e{epoch}")
            _create(c, topics[-1])
            t_created = time.monotonic()
            caught_up(q, leader, STEP_S)  # the node killed last round is back and caught up
            t_caught = time.monotonic()
            q.kill(leader)
            t_kill = time.monotonic()
            new, new_epoch = c.active_controller(STEP_S, exclude=(leader,))
            took.append(time.monotonic() - t_kill)
            assert new != leader and new_epoch > epoch, (leader, epoch, new, new_epoch)
            q.start(leader)  # it starts while the next round's topic is created
            rounds.append(time.monotonic() - t_round)
            print(f"round {k}: killed {q.kind[leader]} {leader}, next leader {q.kind[new]} {new} "
                  f"(epoch {new_epoch}) after {took[-1]:.1f} s; round {rounds[-1]:.1f} s "
                  f"(create {t_created - t_round:.1f}, restart and catch up "
                  f"{t_caught - t_created:.1f})", flush=True)  # fmt: skip
            leader, epoch = new, new_epoch
            led.append((epoch, leader))
        topics.append(f"last-{q.kind[leader]}{leader}-e{epoch}")
        _create(c, topics[-1])
        end = caught_up(q, leader, STEP_S)
        # asked through a voter of the other kind than the leader's: the tool finds the leader
        # through that voter's DescribeCluster (the registered controllers)
        via = next(i for i in q.ids if q.kind[i] != q.kind[leader])
        rows = replication_caught_up(q, via)
        assert rows[leader]["Status"] == "Leader", rows
    finally:
        watch.stop()

    per_kind = {kind: sum(1 for _, n in led if q.kind[n] == kind) for kind in ("kafka", "ours")}
    print(f"\n{config}: {kills} kills, leaders per kind {per_kind}, kill -> leader "
          f"{min(took, default=0):.1f}-{max(took, default=0):.1f} s (mean "
          f"{sum(took) / max(len(took), 1):.1f}), round {sum(rounds) / max(len(rounds), 1):.1f} s")
    assert watch.two_leaders() == {}, watch.two_leaders()
    assert len({e for e, _ in led}) == len(led), led  # one leader per epoch, epochs distinct
    if kills >= 4:  # each kind leads several times
        assert min(per_kind.values()) >= kills // 4, (per_kind, led)
    ids = _topic_ids(c)
    assert set(topics) <= set(ids), sorted(set(topics) - set(ids))
    assert len({ids[t] for t in topics}) == len(topics), ids  # every topic its own id
    for node in [*q.nodes.values(), *c.brokers.values()]:
        assert not fatal_lines(node), (node.name, fatal_lines(node)[:5])
    for i in q.ids:  # our controllers replayed every record the Kafka leaders wrote
        if q.kind[i] == "ours":
            assert not replay_problems(q.nodes[i]), replay_problems(q.nodes[i])[:5]
    cmp = compare_logs({i: q.metadata_dir(i) for i in q.ids}, end)
    print(f"{config}: {cmp.batches} batches ({cmp.bytes} bytes) below offset {end} compared "
          f"on {len(q.ids)} voters")
    assert not cmp.mismatches, cmp.mismatches[:5]
    assert not cmp.partial, cmp.partial[:5]
    assert cmp.batches >= 2 * kills, cmp
