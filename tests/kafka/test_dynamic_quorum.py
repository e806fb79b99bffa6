"""Dynamic KRaft quorums (KIP-853, kraft.version 1) grown, shrunk and repaired with Apache Kafka's
own ``kafka-metadata-quorum`` (docs/operations.md "Changing the controllers",
docs/mixed-quorum.md).

* ``test_grow_1_to_3_then_shrink_to_2_under_a_kafka_broker``: our node 1 is formatted
  ``--standalone``, nodes 2 and 3 ``--no-initial-controllers``; a Kafka 4.4 broker on the
  quorum creates topics all along. Kafka's ``add-controller`` adds 2 (asked through the
  controller), then 3 (through the Kafka broker, which forwards it in an Envelope); the leader
  is SIGKILLed at each size (1 and 2: the survivors are no majority, so it is restarted and a
  leader of a higher epoch is elected; 3: the other two elect one first); Kafka's
  ``remove-controller`` removes one. Every topic whose creation the broker acknowledged exists
  at the end, and the voters' batches are byte-identical below the high watermark.
* ``test_replace_a_lost_controller``: a voter's disk is wiped and formatted again (a new
  directory id); the old key is removed and the new one added, with Kafka's tool.
* ``test_kafka_answers_for_a_duplicate_add_and_a_wrong_directory_id``: Kafka's tool prints
  Kafka's DuplicateVoterException and VoterNotFoundException texts for our leader's answers.
* ``test_kafka_controller_joins_our_standalone_quorum`` and
  ``test_our_node_joins_a_kafka_standalone_quorum``: mixed dynamic quorums, both ways, with a
  leader kill after the join.

CI bound: each test under ~2 minutes on the 2-core machine; every process is killed by the
``procs`` fixture, also on failure.
"""

from __future__ import annotations

import json
import re
import threading
import time

import pytest

from tests.kafka import peer
from tests.kafka.cluster import BROKER_PROPS
from tests.kafka.dynamic import DynamicQuorum
from tests.kafka.mixed import MixedQuorum, compare_logs

pytestmark = pytest.mark.kafka


class TopicCreator:
    """Creates topics ``t0, t1, ...`` through a Kafka broker from a thread (confluent-kafka's
    AdminClient, one at a time); :attr:`created` lists those whose creation was acknowledged."""

    def __init__(self, bootstrap: str) -> None:
        from confluent_kafka.admin import AdminClient

        self.admin = AdminClient({"bootstrap.servers": bootstrap, "socket.timeout.ms": 10000})
        self.created: list[str] = []
        self.failed: list[tuple[str, str]] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True, name="topic-creator")

    def start(self) -> TopicCreator:
        self._thread.start()
        return self

    def _run(self) -> None:
        from confluent_kafka.admin import NewTopic

        n = 0
        while not self._stop.is_set():
            name = f"t{n}"
            n += 1
            fut = self.admin.create_topics([NewTopic(name, 1, 1)], request_timeout=15)[name]
            try:
                fut.result(timeout=30)
                self.created.append(name)
            except Exception as exc:  # noqa: BLE001 - a failed creation is recorded, not fatal
                self.failed.append((name, str(exc)))
            time.sleep(0.2)

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=60)

    def existing(self) -> set[str]:
        return set(self.admin.list_topics(timeout=30).topics)


def _broker(q: DynamicQuorum, tmp_path) -> tuple[peer.KafkaNode, str]:
    port = peer.free_port()
    b = peer.KafkaNode("broker11", q.version, tmp_path / "b11", {
        "process.roles": "broker", "node.id": 11,
        "controller.quorum.bootstrap.servers": q.bootstrap,
        "controller.listener.names": "CONTROLLER",
        "listeners": f"PLAINTEXT://127.0.0.1:{port}",
        "inter.broker.listener.name": "PLAINTEXT",
        "log.dirs": tmp_path / "b11" / "data",
        **BROKER_PROPS,
    })  # fmt: skip
    b.format(q.cluster_id)
    return b, f"127.0.0.1:{port}"


def _kill_leader_and_wait(q: DynamicQuorum, voters: set[int]) -> int:
    """SIGKILL the leader. With three voters the other two elect a new leader before the killed
    node is started again; with one or two the survivors are no majority, so the killed node is
    restarted first. Then wait for a leader of a higher epoch and until ``voters`` are all caught
    up; returns the new leader."""
    leader, epoch = q.leader()
    q.kill(leader)
    if len(voters) >= 3:
        new, new_epoch = q.leader(timeout=60, among=tuple(sorted(voters - {leader})))
        assert new != leader and new_epoch > epoch
    q.start(leader)
    q.wait_listening(leader)
    new, new_epoch = q.leader(timeout=120, among=tuple(sorted(voters)))
    assert new_epoch > epoch
    new, _ = q.wait_voters(voters)
    return new


def test_grow_1_to_3_then_shrink_to_2_under_a_kafka_broker(tmp_path, procs, kafka_newest):
    q = DynamicQuorum(tmp_path, ["ours", "ours", "ours"])
    procs.extend(q.nodes.values())
    q.format(1, "standalone")
    q.format(2, "none")
    q.format(3, "none")
    q.start(1)
    q.wait_listening(1)
    q.wait_voters({1})
    broker, bootstrap = _broker(q, tmp_path)
    procs.append(broker)
    broker.start()
    broker.wait_for_log(r"Transitioning from RECOVERY to RUNNING", 120)
    creator = TopicCreator(bootstrap).start()
    try:
        _kill_leader_and_wait(q, {1})  # size 1: restarted in place
        for new in (2, 3):
            q.start(new)
            q.wait_listening(new)
            # node 2 through the controller, node 3 through the Kafka broker (Envelope)
            out = q.add_controller(new, via=1 if new == 2 else bootstrap).stdout
            assert f"Added controller {new} with directory id {q.directory_id(new)}" in out
            q.wait_voters(set(range(1, new + 1)))
        status = q.status(via=2)
        assert sorted(v["id"] for v in status["CurrentVoters"]) == [1, 2, 3]
        assert {v["id"]: v["directoryId"] for v in status["CurrentVoters"]} == {
            i: q.directory_id(i) for i in (1, 2, 3)
        }
        _kill_leader_and_wait(q, {1, 2, 3})  # size 3
        gone = q.leader()[0] % 3 + 1  # a follower
        out = q.remove_controller(gone, q.directory_id(gone), via=1).stdout
        assert f"Removed KRaft controller {gone} with directory id" in out
        rest = {1, 2, 3} - {gone}
        q.wait_voters(rest)
        _kill_leader_and_wait(q, rest)  # size 2
        time.sleep(2)
    finally:
        creator.stop()
    assert creator.created, creator.failed
    missing = set(creator.created) - creator.existing()
    assert not missing, f"acknowledged topics lost: {sorted(missing)}"
    leader, voters = q.wait_voters(rest)
    hwm = q.voters(leader)[1]
    cmp = compare_logs({i: q.data_dir(i) / "__cluster_metadata-0" for i in rest}, hwm)
    assert not cmp.mismatches, cmp.mismatches
    assert cmp.batches > 0


def test_replace_a_lost_controller(tmp_path, procs, kafka_newest):
    q = DynamicQuorum(tmp_path, ["ours", "ours", "ours"])
    procs.extend(q.nodes.values())
    q.format(1, "standalone")
    q.format(2, "none")
    q.format(3, "none")
    q.start(1, 2, 3)
    q.wait_listening(1, 2, 3)
    q.wait_voters({1})
    for new in (2, 3):
        q.add_controller(new, via=1)
        q.wait_voters(set(range(1, new + 1)))
    lost = q.leader()[0] % 3 + 1
    old_dir = q.directory_id(lost)
    q.kill(lost)
    q.wipe(lost)
    q.format(lost, "none")
    assert q.directory_id(lost) != old_dir
    q.start(lost)
    q.wait_listening(lost)
    via = lost % 3 + 1
    q.remove_controller(lost, old_dir, via=via)
    q.wait_voters({1, 2, 3} - {lost})
    q.add_controller(lost, via=via)
    _, views = q.wait_voters({1, 2, 3})
    assert {v.node: v.directory_id for v in views}[lost] == q.directory_id(lost)


@pytest.mark.parametrize("kind", ["ours", "kafka"])
def test_kafka_answers_for_a_duplicate_add_and_a_wrong_directory_id(kind, tmp_path, procs,
                                                                     kafka_newest):  # fmt: skip
    """The same texts from our leader as from Kafka's (the "kafka" case is the oracle run)."""
    q = DynamicQuorum(tmp_path, [kind, kind])
    procs.extend(q.nodes.values())
    q.format(1, "standalone")
    q.format(2, "none")
    q.start(1, 2)
    q.wait_listening(1, 2)
    q.wait_voters({1})
    q.add_controller(2, via=1)
    q.wait_voters({1, 2})
    d1, d2 = q.directory_id(1), q.directory_id(2)
    keys = {f"ReplicaKey(id=1, directoryId={d1})", f"ReplicaKey(id=2, directoryId={d2})"}
    dup = q.add_controller(2, via=1, check=False, caught_up=False)
    assert dup.returncode == 1
    said = re.search(
        r"org\.apache\.kafka\.common\.errors\.DuplicateVoterException: The voter id for "
        r"(ReplicaKey\([^)]*\)) is already part of the set of voters \[(.*)\]\.\n",
        dup.stderr,
    )
    assert said, dup.stderr
    assert said.group(1) == f"ReplicaKey(id=2, directoryId={d2})"
    assert (
        set(re.findall(r"ReplicaKey\([^)]*\)", said.group(2))) == keys
    )  # Kafka prints a HashSet: any order
    wrong = q.remove_controller(2, "AAAAAAAAAAAAAAAAAAAAAQ", via=1, check=False)
    assert wrong.returncode == 1
    said = re.search(
        r"org\.apache\.kafka\.common\.errors\.VoterNotFoundException: Cannot remove voter "
        r"ReplicaKey\(id=2, directoryId=AAAAAAAAAAAAAAAAAAAAAQ\) from the set of voters "
        r"\[(.*)\]\n",
        wrong.stderr,
    )
    assert said, wrong.stderr
    assert set(re.findall(r"ReplicaKey\([^)]*\)", said.group(1))) == keys
    _, views = q.wait_voters({1, 2})  # neither answer changed anything
    assert {v.node: v.directory_id for v in views} == {1: d1, 2: d2}


@pytest.mark.parametrize(
    "kinds", [["ours", "kafka"], ["kafka", "ours"]], ids=["kafka-joins-ours", "ours-joins-kafka"]
)
def test_mixed_dynamic_quorum(kinds, tmp_path, procs, kafka_newest):
    """Node 1 (standalone) leads; node 2 of the other kind joins with Kafka's add-controller,
    catches up and votes; the leader is SIGKILLed and restarted; both agree on the voter set
    and hold byte-identical batches."""
    q = DynamicQuorum(tmp_path, kinds)
    procs.extend(q.nodes.values())
    q.format(1, "standalone")
    q.format(2, "none")
    q.start(1, 2)
    q.wait_listening(1, 2)
    q.wait_voters({1})
    out = q.add_controller(2, via=2).stdout
    assert f"Added controller 2 with directory id {q.directory_id(2)}" in out
    q.wait_voters({1, 2})
    _kill_leader_and_wait(q, {1, 2})
    seen = {via: sorted((v["id"], v["directoryId"]) for v in q.status(via)["CurrentVoters"])
            for via in (1, 2)}  # fmt: skip
    assert seen[1] == seen[2] == sorted((i, q.directory_id(i)) for i in (1, 2)), seen
    leader, _ = q.wait_voters({1, 2})
    hwm = q.voters(leader)[1]
    cmp = compare_logs({i: q.data_dir(i) / "__cluster_metadata-0" for i in (1, 2)}, hwm)
    assert not cmp.mismatches, cmp.mismatches
    assert cmp.batches > 0


@pytest.mark.parametrize("kind", ["ours", "kafka"])
def test_kafka_features_upgrades_a_static_quorum_to_kraft_version_1(kind, tmp_path, procs,
                                                                    kafka_newest):  # fmt: skip
    """Three static voters (``controller.quorum.voters``, kraft.version 0) move to a dynamic
    quorum with Kafka's ``kafka-features upgrade --feature kraft.version=1`` (Kafka 4.1+): the
    voter set, with each voter's directory id, goes into the log; there is no way back. The
    "kafka" case is the oracle run of the same steps."""
    q = MixedQuorum(tmp_path, [kind] * 3)
    procs.extend(q.nodes.values())
    q.format()
    q.start()
    q.wait_listening()
    leader, _ = q.leader(timeout=120)

    def features(*args: str, check: bool = True):
        return peer.run_tool(q.version, "kafka-features", "--bootstrap-controller",
                             q.address(leader), *args, check=check)  # fmt: skip

    line = next(x for x in features("describe").stdout.splitlines() if "kraft.version" in x)
    assert line.split() == ["Feature:", "kraft.version", "SupportedMinVersion:", "0",
                            "SupportedMaxVersion:", "1", "FinalizedVersionLevel:", "0", "Epoch:",
                            line.split()[-1]]  # fmt: skip
    # every voter tells each leader its directory id and endpoints (UpdateRaftVoter at level 0)
    deadline = time.monotonic() + 60
    while True:
        out = features("upgrade", "--feature", "kraft.version=1", check=False)
        if out.returncode == 0 or time.monotonic() > deadline:
            break
        time.sleep(1)
    assert out.stdout.strip() == "kraft.version was upgraded to 1.", (out.stdout, out.stderr)
    line = next(x for x in features("describe").stdout.splitlines() if "kraft.version" in x)
    assert line.split()[7] == "1", line
    dirs = {i: next(x.split("=", 1)[1] for x in
                    (q.data_dir(i) / "meta.properties").read_text().splitlines()
                    if x.startswith("directory.id=")) for i in q.ids}  # fmt: skip
    out = peer.run_tool(q.version, "kafka-metadata-quorum", "--bootstrap-controller",
                        q.address(leader), "describe", "--status").stdout  # fmt: skip
    voters = json.loads(next(x for x in out.splitlines()
                             if x.startswith("CurrentVoters:")).split(":", 1)[1])  # fmt: skip
    assert {v["id"]: v["directoryId"] for v in voters} == dirs
    down = features("downgrade", "--feature", "kraft.version=0", check=False)
    assert down.returncode == 1
    assert ("Invalid update version 0 for feature kraft.version. Can't downgrade the version of "
            "this feature.") in down.stdout, down.stdout  # fmt: skip
