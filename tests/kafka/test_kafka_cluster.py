"""Three Apache Kafka 4.4 brokers on a quorum of three kafka-rpc controllers
(docs/kafka-brokers.md, 'Three brokers on three controllers'): an RF=3,
``min.insync.replicas=2`` topic under a continuous idempotent ``acks=all`` producer while nodes
die and return. One cluster for the module and one test, a single scenario whose steps run in
sequence (each a helper that leaves the cluster whole again, its duration printed as it ends)
while the writer acknowledges records across all of them:

1. SIGKILL of the broker leading partition 0: leadership moves and the ISR shrinks; after its
   restart the partition leader grows the ISR back through AlterPartition;
2. SIGKILL of the active controller: another is elected and the brokers follow it; topics
   created before and after keep their ids;
3. controlled shutdown (SIGTERM) of a broker that leads partitions: it leads nothing when it
   exits (the controller moved its leaderships before answering ShouldShutDown), and it comes
   back;
4. the writer stops; a consumer reads every record acknowledged during steps 1-3 exactly once at
   its offset, each key in order, and ``kafka-topics --describe`` shows every ISR whole.

Throughout, DescribeQuorum on every controller never shows two leaders in one epoch (and the
failover of step 2 shows as a second leader), and no partition's leader epoch goes back on any
broker (their Metadata answers).
"""

from __future__ import annotations

import re
import time

import pytest

from tests.kafka import peer
from tests.kafka.cluster import AckedWriter, BrokerCluster, MetadataWatch, check_read_back
from tests.kafka.mixed import QuorumWatch
from tests.waiting import wait_until

pytestmark = pytest.mark.kafka

STEP = 90.0  # s: the bound of every wait
TOPIC = "orders"
PARTITIONS = 6
SESSION_MS = 6000  # broker.session.timeout.ms on our controllers (Kafka's default is 9000)


def _partitions(c: BrokerCluster, via: int) -> dict[int, tuple[int, int, tuple[int, ...]]]:
    """index -> (leader, leader epoch, ISR) of TOPIC as broker ``via`` reports it."""
    md = c.metadata(via, [TOPIC])
    if md is None or not md.topics or md.topics[0].error_code:
        return {}
    return {p.partition_index: (p.leader_id, p.leader_epoch, tuple(p.isr_nodes))
            for p in md.topics[0].partitions}  # fmt: skip


def _topic_ids(c: BrokerCluster, via: int, names: list[str]) -> dict[str, str]:
    md = c.metadata(via, names)
    return {} if md is None else {t.name: str(t.topic_id) for t in md.topics if not t.error_code}


def _admin(c: BrokerCluster):
    from confluent_kafka.admin import AdminClient

    return AdminClient({"bootstrap.servers": c.bootstrap})


def _create(c: BrokerCluster, name: str, partitions: int = 3, **configs: str) -> None:
    from confluent_kafka.admin import NewTopic

    admin = _admin(c)  # kept alive until the answer is in (its futures die with it)
    config = {k.replace("_", "."): v for k, v in configs.items()}
    fut = admin.create_topics([NewTopic(name, partitions, 3, config=config)], request_timeout=30)
    fut[name].result(timeout=STEP)


def _alter_partitions(c: BrokerCluster) -> float:
    """AlterPartition requests our controllers served (their request metrics, summed)."""
    import urllib.request

    total = 0.0
    for port in c.metrics_ports.values():
        try:
            text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read()
        except OSError:
            continue
        total += sum(float(v) for v in re.findall(
            r'^kafka_rpc_requests_total\{api="AlterPartition",listener="CONTROLLER",'
            r'version="\d+"\} (\S+)$', text.decode(), re.M))  # fmt: skip
    return total


@pytest.fixture(scope="module")
def cluster(tmp_path_factory, kafka_newest):
    metrics = {i: peer.free_port() for i in (1, 2, 3)}
    c = BrokerCluster(
        tmp_path_factory.mktemp("kafka-cluster"),
        "ours",
        version=kafka_newest,
        controller_props={"broker.session.timeout.ms": SESSION_MS},
    )
    for i, port in metrics.items():  # each controller its own metrics port
        n = c.quorum.nodes[i]
        n.props["metrics.port"] = port
        peer.write_properties(n.properties_path, n.props)
    c.metrics_ports = metrics
    try:
        c.start()
        _create(c, TOPIC, PARTITIONS, min_insync_replicas="2")
        c.quorum_watch = QuorumWatch(c.quorum).start()
        c.md_watch = MetadataWatch(c, [TOPIC]).start()
        c.writer = AckedWriter(c.bootstrap, TOPIC).start()
        wait_until(lambda: len(c.writer.acked) > 200, "the first acknowledged records",
                   timeout=STEP, interval=0.3)
        yield c
    except BaseException:
        for n in [*c.brokers.values(), *c.quorum.nodes.values()]:
            print(f"\n----- {n.name} -----\n{n.tail(40)}")
        raise
    finally:
        for w in ("writer", "md_watch", "quorum_watch"):
            obj = getattr(c, w, None)
            if obj is not None:
                obj.stop() if w != "writer" else obj.stop(flush_s=1)
        c.close()


def _progress(c: BrokerCluster, what: str, n: int = 100) -> None:
    """The writer gets ``n`` more acknowledgements (the cluster serves writes)."""
    t = time.monotonic()
    wait_until(lambda: c.writer.acked_since(t) >= n, f"{n} acknowledged records {what}",
               timeout=STEP, interval=0.3)


def _isr_whole(c: BrokerCluster, via: int):
    parts = _partitions(c, via)
    full = set(c.broker_ids)
    return len(parts) == PARTITIONS and all(set(isr) == full for _, _, isr in parts.values())


def _leader_broker_killed_then_back_through_alter_partition(c: BrokerCluster) -> None:
    parts = _partitions(c, c.broker_ids[0])
    victim, epoch, _ = parts[0]
    others = [b for b in c.broker_ids if b != victim]
    before = _alter_partitions(c)
    c.kill_broker(victim)
    moved = wait_until(
        lambda: (p := _partitions(c, others[0]).get(0)) and p[0] not in (victim, -1)
        and victim not in p[2] and p,
        "partition 0's leadership to move off the killed broker and its ISR to shrink",
        timeout=STEP, interval=0.3,
    )  # fmt: skip
    assert moved[1] > epoch  # a new leader epoch
    _progress(c, "with a broker down (ISR of 2 = min.insync.replicas)")
    c.restart_broker(victim)
    wait_until(lambda: _isr_whole(c, others[0]), "every ISR whole again after the restart",
               timeout=STEP, interval=0.3)
    assert _alter_partitions(c) > before, "the ISR grew without AlterPartition"
    _progress(c, "after the broker's return")


def _active_controller_killed_brokers_follow_the_new_one(c: BrokerCluster) -> None:
    _create(c, "before-failover")
    leader, epoch = c.active_controller()
    c.quorum.kill(leader)
    new, new_epoch = c.active_controller(exclude=(leader,))
    assert new != leader and new_epoch > epoch
    _create(c, "after-failover")  # through a broker: forwarded to the new active controller
    _progress(c, "after the controller failover")
    ids = wait_until(
        lambda: (ids := _topic_ids(c, c.broker_ids[1], ["before-failover", "after-failover"]))
        and len(ids) == 2 and ids,
        "both topics on the brokers",
        timeout=STEP, interval=0.3,
    )  # fmt: skip
    c.quorum.start(leader)  # back as a follower; the topics keep their ids everywhere
    c.quorum.wait_listening(leader)
    wait_until(lambda: c.quorum.nodes[leader].alive(), "the old controller running",
               timeout=STEP, interval=0.3)
    for b in c.broker_ids:
        got = wait_until(lambda b=b: _topic_ids(c, b, list(ids)), f"topics on broker {b}",
                         timeout=STEP, interval=0.3)
        assert got == ids


def _controlled_shutdown_leaves_the_broker_leading_nothing(c: BrokerCluster) -> None:
    parts = wait_until(lambda: _partitions(c, c.broker_ids[0]), "the partitions",
                       timeout=STEP, interval=0.3)
    victim = max(c.broker_ids, key=lambda b: sum(1 for p in parts.values() if p[0] == b))
    assert any(p[0] == victim for p in parts.values())
    others = [b for b in c.broker_ids if b != victim]
    t0 = time.monotonic()
    c.stop_broker(victim, timeout=STEP)
    took = time.monotonic() - t0
    print(f"controlled shutdown of broker {victim}: {took:.1f} s")
    log = c.brokers[victim].log_text()
    assert "The controller has asked us to exit controlled shutdown" in log, log[-3000:]
    assert "Timed out waiting for the controller to approve controlled shutdown" not in log
    # right after its exit it leads nothing: the controller moved its leaderships when it asked
    # to shut down (the log lines above), not when its session expired later (the time it took
    # is printed, not asserted: a loaded machine may take longer than the session)
    parts = _partitions(c, others[0])
    assert parts and all(p[0] != victim for p in parts.values()), (parts, took)
    _progress(c, "with a broker shut down")
    c.restart_broker(victim)
    wait_until(lambda: _isr_whole(c, others[0]), "every ISR whole again after the restart",
               timeout=STEP, interval=0.3)


def _everything_acknowledged_read_back_once_in_order(c: BrokerCluster) -> None:
    _progress(c, "before the end")
    assert c.writer.stop() == 0, "records still undelivered after the flush"
    assert not c.writer.failed, c.writer.failed[:5]
    res = check_read_back(c.bootstrap, TOPIC, c.writer.acked)
    print({k: v if isinstance(v, int | bool) else len(v) for k, v in res.items()})
    assert res["complete"] and res["acked"] > 1000, res
    assert not res["missing"], res["missing"][:10]
    assert not res["duplicates"] and not res["out_of_order"], res
    out = peer.run_tool(c.version, "kafka-topics", "--bootstrap-server", c.bootstrap,
                        "--describe", "--topic", TOPIC, timeout=STEP).stdout  # fmt: skip
    rows = re.findall(r"Partition: (\d+)\s+Leader: (\d+)\s+Replicas: ([\d,]+)\s+Isr: ([\d,]+)", out)
    assert len(rows) == PARTITIONS, out
    for _p, _leader, replicas, isr in rows:
        assert sorted(isr.split(",")) == sorted(replicas.split(",")), out
    # election safety over the whole run
    c.md_watch.stop()
    c.quorum_watch.stop()
    assert not c.quorum_watch.two_leaders(), c.quorum_watch.two_leaders()
    assert len(c.quorum_watch.leaders()) >= 2  # the failover was seen
    assert not c.md_watch.regressions(), c.md_watch.regressions()[:5]
    assert len(c.md_watch.views) > 100


STEPS = (
    _leader_broker_killed_then_back_through_alter_partition,
    _active_controller_killed_brokers_follow_the_new_one,
    _controlled_shutdown_leaves_the_broker_leading_nothing,
    _everything_acknowledged_read_back_once_in_order,
)


def test_acked_records_survive_broker_and_controller_kills(cluster):
    """The scenario of the module docstring, its steps in order (the last stops the writer and
    reads back what was acknowledged during all of them)."""
    for n, step in enumerate(STEPS, 1):
        t0 = time.monotonic()
        step(cluster)
        print(f"step {n}, {step.__name__.strip('_').replace('_', ' ')}: "
              f"{time.monotonic() - t0:.1f} s", flush=True)  # fmt: skip
