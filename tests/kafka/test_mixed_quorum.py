"""A mixed KRaft quorum: Apache Kafka controllers and a kafka-rpc node vote in one static metadata
quorum (``controller.quorum.voters``, kraft.version 0; docs/mixed-quorum.md).

``test_ours_follows_a_kafka_leader_then_leads_kafka_followers`` (Kafka 4.4 and 4.0): two Kafka
controllers elect a leader, our node joins, registers (ControllerRegistration) and replicates its
batches (`kafka-metadata-quorum describe --replication`, asked through our node, shows every
voter caught up); Kafka leaders are SIGKILLed (and restarted) until our node wins an election;
then the Kafka followers replicate our leader's batches without halting (the same tool, asked
through a Kafka controller, finds our leader among the registered controllers). Throughout,
DescribeQuorum is polled on every voter: no epoch ever has two leaders. At the end every batch
the voters share below the high watermark is byte-identical on all of them (compared from the
segment files).

Who wins after a leader dies: under Kafka 4.x's pre-vote rules the follower whose fetch timer
expires first is refused (the other follower has fetched from the leader) and goes back to
following; the one that expires last then wins (``prospectiveTransitionAfterElectionLoss``,
``FollowerState.canGrantVote``). With equal ``controller.quorum.fetch.timeout.ms`` our node's
timer fires some ms before a loaded JVM's, so a Kafka controller wins nearly every time; our
node runs with a longer fetch timeout here (``OUR_FETCH_TIMEOUT_MS``) so that it is the last.

CI bound: two runs of about a minute each, at most ``MAX_KILLS`` SIGKILLs per run (usually one);
``tests/kafka/test_mixed_quorum_failover.py`` makes the long runs (SIGKILLs of whichever node
leads, with a Kafka broker attached).
"""

from __future__ import annotations

import pytest

from tests.kafka import peer
from tests.kafka.mixed import (
    MixedQuorum,
    QuorumWatch,
    caught_up,
    compare_logs,
    describe_all,
    describe_partition,
    fatal_lines,
    replay_problems,
    replication_caught_up,
)
from tests.waiting import wait_until

pytestmark = pytest.mark.kafka

MAX_KILLS = 4
OUR_FETCH_TIMEOUT_MS = 3000  # Kafka's default is 2000: ours expires last and wins

# Raft versions a Kafka release negotiates with us (its maxima; ours are above them for Vote,
# BeginQuorumEpoch and EndQuorumEpoch, whose newer versions carry a TopicId: KIP-516's proposal)
KAFKA_RAFT_MAX = {"4.4.0": {52: 2, 53: 1, 54: 1, 1: 18, 59: 1, 55: 2, 82: 0},
                  "4.0.2": {52: 2, 53: 1, 54: 1, 1: 17, 59: 1, 55: 2, 82: 0}}  # fmt: skip


@pytest.mark.parametrize("version", [peer.NEWEST, peer.OLDEST])
def test_ours_follows_a_kafka_leader_then_leads_kafka_followers(version, tmp_path, procs,
                                                                request):  # fmt: skip
    request.getfixturevalue("kafka_newest" if version == peer.NEWEST else "kafka_oldest")
    q = MixedQuorum(tmp_path, ["kafka", "kafka", "ours"], version=version,
                    our_props={"controller.quorum.fetch.timeout.ms": OUR_FETCH_TIMEOUT_MS})
    procs.extend(q.nodes.values())
    q.format()
    ours = 3
    with QuorumWatch(q) as watch:
        # the two Kafka controllers are a majority: one of them leads before our node starts
        q.start(1, 2)
        q.wait_listening(1, 2)
        leader, epoch = q.leader(timeout=120)
        assert q.kind[leader] == "kafka"
        q.start(ours)
        q.wait_listening(ours)
        end = caught_up(q, leader)
        # asked through our node: its DescribeCluster lists the registered controllers (theirs
        # and ours, KIP-919), the tool then asks the Kafka leader
        rows = replication_caught_up(q, ours)
        assert rows[leader]["Status"] == "Leader", rows
        assert rows[ours]["Status"] == "Follower", rows
        assert int(rows[ours]["LogEndOffset"]) >= end

        kills = 0
        while q.kind[leader] != "ours":
            assert kills < MAX_KILLS, f"our node never won in {kills} elections"
            q.kill(leader)
            kills += 1
            killed = leader
            leader, epoch = q.leader(timeout=90, exclude=(killed,))
            q.start(killed)
            q.wait_listening(killed)
        # our leader's batches reach the Kafka followers: it appends a NoOp every 500 ms
        # (metadata.max.idle.interval.ms); five of its epoch committed, then every voter there
        def hw() -> int:
            p = describe_partition(q.address(leader))
            return p.high_watermark if p is not None and p.error_code == 0 else -1

        since = wait_until(lambda: max(hw(), 0), "our leader's high watermark", timeout=90)
        wait_until(lambda: hw() >= since + 5, "five batches of our leader committed", timeout=90)
        end = caught_up(q, leader)
        assert end > 0
        obs = describe_all({i: q.address(i) for i in q.ids})
        assert [(o.node, o.epoch) for o in obs if o.leading] == [(ours, epoch)]
        # asked through a Kafka controller: it finds our leader among the registered controllers
        kafka_node = next(i for i in q.ids if q.kind[i] == "kafka")
        rows = replication_caught_up(q, kafka_node)
        assert rows[ours]["Status"] == "Leader", rows
    assert watch.two_leaders() == {}, watch.two_leaders()
    assert ours in watch.leaders().values()
    for i in q.ids:
        assert not fatal_lines(q.nodes[i]), (i, fatal_lines(q.nodes[i])[:5])
    # our controller replayed every record the Kafka leaders wrote (their bootstrap transaction)
    assert not replay_problems(q.nodes[ours]), replay_problems(q.nodes[ours])[:5]
    c = compare_logs({i: q.metadata_dir(i) for i in q.ids}, end)
    assert not c.mismatches, c.mismatches[:5]
    # nearly the whole log is on all three voters (the restarted ones too)
    assert c.batches > 10 and c.pairs >= 2 * c.batches - 2, c


def test_our_raft_versions_stay_above_kafkas(kafka_newest, kafka_oldest):
    """Our private Vote v3 / BeginQuorumEpoch v2 / EndQuorumEpoch v2 (TopicId) are above the
    maxima of both pinned Kafka releases (read from the specs inside their kafka-clients jars),
    so a Kafka peer and our node negotiate Kafka's version; and we serve every Raft version
    Kafka sends, UpdateRaftVoter included."""
    import json
    import re
    import zipfile

    from kafka_rpc.handlers import raft as _raft  # noqa: F401 - registers the Raft handlers
    from kafka_rpc.node import handlers_registry
    from kafka_rpc.raft.wire import TOPIC_ID_FROM_VERSION

    names = {52: "Vote", 53: "BeginQuorumEpoch", 54: "EndQuorumEpoch", 1: "Fetch",
             59: "FetchSnapshot", 55: "DescribeQuorum", 82: "UpdateRaftVoter"}  # fmt: skip
    table = {e[0]: (e[1], e[2]) for e in handlers_registry().api_versions("controller")}
    for version in (kafka_newest, kafka_oldest):
        jar = next(peer.resolve(version).glob(f"kafka-clients-{version}.jar"))
        with zipfile.ZipFile(jar) as z:
            for key, name in names.items():
                text = z.read(f"common/message/{name}Request.json").decode()
                spec = json.loads(re.sub(r"^\s*//.*$", "", text, flags=re.M))
                kmax = int(spec["validVersions"].split("-")[-1])
                assert kmax == KAFKA_RAFT_MAX[version][key], (version, name, kmax)
                lo, hi = table[key]
                assert lo <= kmax <= hi, (name, (lo, hi), kmax)
                if key in TOPIC_ID_FROM_VERSION:
                    assert TOPIC_ID_FROM_VERSION[key] == kmax + 1 == hi, (name, hi, kmax)


SNAPSHOTS_KAFKA = {"metadata.log.max.snapshot.interval.ms": 1000}
SNAPSHOTS_OURS = {
    "metadata.log.max.snapshot.interval.ms": 1000,
    "metadata.max.retention.bytes": 1,  # every check moves the log start to the newest snapshot
    "metadata.log.retention.check.interval.ms": 500,
    "max.replication.lag.ms": 2000,  # a voter down that long may be sent a snapshot
    "controller.quorum.fetch.timeout.ms": OUR_FETCH_TIMEOUT_MS,
}


def _snapshots(q: MixedQuorum, node: int) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in q.metadata_dir(node).glob("*.checkpoint")
            if not p.name.startswith("00000000000000000000-")}  # fmt: skip


def test_snapshots_both_ways(kafka_newest, tmp_path, procs):
    """KIP-630 across kinds: our node, joining with an empty log, installs the snapshot a Kafka
    leader wrote (byte-identical file; Kafka answers a Fetch at offset 0 with its latest
    snapshot); then our node leads, a Kafka voter is kept down while our leader's log start moves
    past its log end, and on restart it installs our snapshot (``Fully truncated the log ...
    after downloading snapshot``), loads it in its controller and catches up, without halting;
    Kafka's dump tool reads our snapshot without a decoding error."""
    q = MixedQuorum(tmp_path, ["kafka", "kafka", "ours"], version=kafka_newest,
                    kafka_props=SNAPSHOTS_KAFKA, our_props=SNAPSHOTS_OURS)  # fmt: skip
    procs.extend(q.nodes.values())
    q.format()
    ours = 3
    q.start(1, 2)
    q.wait_listening(1, 2)
    leader, _ = q.leader(timeout=120)
    wait_until(lambda: _snapshots(q, leader), "a Kafka snapshot", timeout=60.0, interval=0.5)
    q.start(ours)
    q.wait_listening(ours)
    m = q.nodes[ours].wait_for_log(r"snapshot OffsetAndEpoch\(offset=(\d+), epoch=(\d+)\) "
                                   rf"fetched from {leader}", 90)  # fmt: skip
    name = f"{int(m.group(1)):020d}-{int(m.group(2)):010d}.checkpoint"
    fetched = _snapshots(q, ours)
    assert fetched[name] == (q.metadata_dir(leader) / name).read_bytes()
    caught_up(q, leader)

    # our node leads; a Kafka voter stays down while our log start moves past its log end
    for _ in range(MAX_KILLS):
        if q.kind[leader] == "ours":
            break
        q.kill(leader)
        killed = leader
        leader, _ = q.leader(timeout=90, exclude=(killed,))
        if q.kind[leader] != "ours":
            q.start(killed)
            q.wait_listening(killed)
    assert leader == ours
    down = next(i for i in q.ids if q.kind[i] == "kafka" and not q.alive(i))
    kafka_end = max((int(p.stem) for p in q.metadata_dir(down).glob("*.log")), default=0)
    start = q.nodes[ours].wait_for_log(r"log start offset moved to (\d+)", 60)
    wait_until(lambda: int(start.group(1)) > kafka_end and _snapshots(q, ours),
               "our log start past the Kafka voter's log", timeout=60.0, interval=0.5)  # fmt: skip
    q.start(down)
    q.wait_listening(down)
    m = q.nodes[down].wait_for_log(r"after downloading snapshot OffsetAndEpoch\[offset=(\d+), "
                                   rf"epoch=(\d+)\] from leader {ours}", 90)  # fmt: skip
    name = f"{int(m.group(1)):020d}-{int(m.group(2)):010d}.checkpoint"
    q.nodes[down].wait_for_log(rf"Successfully loaded snapshot {name[:-11]}", 60)
    ours_copy = q.metadata_dir(ours) / name
    if ours_copy.exists():  # (retention may have moved our log start on since)
        assert (q.metadata_dir(down) / name).read_bytes() == ours_copy.read_bytes()
    caught_up(q, ours)
    for i in q.ids:
        assert not fatal_lines(q.nodes[i]), (i, fatal_lines(q.nodes[i])[:5])
    # a copy (our retention deletes older snapshots meanwhile; Kafka's tools want a copy too)
    name, data = max(_snapshots(q, ours).items())
    (tmp_path / "copy").mkdir()
    snap = tmp_path / "copy" / name
    snap.write_bytes(data)
    dump = peer.run_tool(kafka_newest, "kafka-dump-log", "--cluster-metadata-decoder",
                         "--files", str(snap), timeout=90).stdout  # fmt: skip
    assert "Error" not in dump and "SnapshotHeader" in dump and "SnapshotFooter" in dump, dump
