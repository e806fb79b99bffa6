"""A dynamic KRaft quorum (KIP-853, kraft.version 1) on loopback, grown and shrunk with Apache
Kafka's own ``kafka-metadata-quorum``, for ``tests/kafka/test_dynamic_quorum.py`` and
``bench/quorum_membership.py``.

* :class:`DynamicQuorum` has controllers ``1..n`` of kinds ``kinds`` ("kafka" or "ours"), every
  one with ``controller.quorum.bootstrap.servers`` naming all of them and no
  ``controller.quorum.voters``. :meth:`DynamicQuorum.format` formats one node
  ``--standalone``, ``--no-initial-controllers`` or ``--initial-controllers`` with Kafka's
  StorageTool (Kafka nodes) or ``kafka-rpc storage format`` (ours), with the flag names the
  two share. A node can be wiped and formatted again (a lost disk: a new directory id).
* :meth:`DynamicQuorum.quorum_tool` runs ``kafka-metadata-quorum --bootstrap-controller`` (one
  tool JVM); :meth:`add_controller` / :meth:`remove_controller` / :meth:`status` wrap its
  ``add-controller`` / ``remove-controller`` / ``describe --status`` and parse the answer
  (``CurrentVoters`` is JSON, as Kafka's system tests read it).
* :meth:`DynamicQuorum.wait_voters` polls DescribeQuorum (our client, no JVM) until the leader
  lists exactly the wanted voters with every one caught up to the high watermark.

Every process is killed by the caller's ``procs`` fixture (or :meth:`DynamicQuorum.close`),
also on failure; every wait is bounded.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

from tests.kafka import peer
from tests.kafka.mixed import START_S, describe_all, describe_partition

__all__ = ["DynamicQuorum", "VoterView"]


@dataclass(frozen=True)
class VoterView:
    """One voter as the leader's DescribeQuorum v2 lists it."""

    node: int
    directory_id: str  # Kafka's base64 text
    log_end_offset: int


@dataclass
class DynamicQuorum:
    """Controllers ``1..len(kinds)`` under ``workdir`` (see the module docstring). ``props``:
    extra settings for every controller; ``our_props`` / ``kafka_props``: for one kind."""

    workdir: Path
    kinds: list[str]
    version: str = peer.NEWEST
    release_version: str = "4.0-IV3"
    props: dict = field(default_factory=dict)
    kafka_props: dict = field(default_factory=dict)
    our_props: dict = field(default_factory=dict)
    cluster_id: str = field(default_factory=peer.random_cluster_id)

    def __post_init__(self) -> None:
        self.workdir = Path(self.workdir)
        self.ids = list(range(1, len(self.kinds) + 1))
        self.kind = dict(zip(self.ids, self.kinds, strict=True))
        self.ports = {i: peer.free_port() for i in self.ids}
        self.nodes: dict[int, peer.ManagedProcess] = {}
        for i in self.ids:
            self.nodes[i] = self._make(i)

    def _make(self, i: int) -> peer.ManagedProcess:
        props = {
            "process.roles": "controller",
            "node.id": i,
            "controller.quorum.bootstrap.servers": self.bootstrap,
            "controller.listener.names": "CONTROLLER",
            "listeners": f"CONTROLLER://127.0.0.1:{self.ports[i]}",
            "log.dirs": str(self.data_dir(i)),
            **self.props,
        }
        if self.kind[i] == "kafka":
            props.update(self.kafka_props)
            return peer.KafkaNode(f"kafka{i}", self.version, self.workdir / f"n{i}", props)
        props.update(self.our_props)
        return peer.RpcNode(f"ours{i}", self.workdir / f"n{i}", props)

    # ------------------------------------------------------------------ addresses and files
    def data_dir(self, node: int) -> Path:
        return self.workdir / f"n{node}" / "data"

    def address(self, node: int) -> str:
        return f"127.0.0.1:{self.ports[node]}"

    @property
    def bootstrap(self) -> str:
        return ",".join(self.address(i) for i in self.ids)

    def properties_path(self, node: int) -> Path:
        return self.nodes[node].properties_path  # type: ignore[attr-defined]

    def directory_id(self, node: int) -> str:
        """``directory.id`` of the node's metadata directory's ``meta.properties``."""
        for line in (self.data_dir(node) / "meta.properties").read_text().splitlines():
            if line.startswith("directory.id="):
                return line.split("=", 1)[1].strip()
        raise AssertionError(f"no directory.id in node {node}'s meta.properties")

    # ------------------------------------------------------------------ processes
    def format(self, node: int, mode: str, initial: str | None = None):
        """Format ``node``: ``mode`` is "standalone", "none" (``--no-initial-controllers``) or
        "initial" (``--initial-controllers initial``); returns the tool's CompletedProcess."""
        extra = {"standalone": ["--standalone"], "none": ["--no-initial-controllers"],
                 "initial": ["--initial-controllers", initial or ""]}[mode]  # fmt: skip
        # one metadata.version both kinds replay (as MixedQuorum): ours writes Kafka's records
        extra += ["--release-version", self.release_version]
        if self.kind[node] == "ours":
            extra.append("--kafka-compatible")
        return self.nodes[node].format(self.cluster_id, *extra)  # type: ignore[attr-defined]

    def wipe(self, node: int) -> None:
        """Delete the node's whole data directory (a lost disk); the node must be stopped."""
        assert not self.nodes[node].alive()
        shutil.rmtree(self.data_dir(node), ignore_errors=True)

    def start(self, *nodes: int) -> None:
        for i in nodes:
            self.nodes[i].start()

    def wait_listening(self, *nodes: int, timeout: float = START_S) -> None:
        for i in nodes:
            self.nodes[i].wait_for_port("127.0.0.1", self.ports[i], timeout)

    def kill(self, node: int) -> None:
        self.nodes[node].kill()

    def alive(self, node: int) -> bool:
        return self.nodes[node].alive()

    def close(self) -> None:
        for n in self.nodes.values():
            n.kill()

    # ------------------------------------------------------------------ Kafka's tool
    def quorum_tool(self, via: int | str, *args: str, config: Path | None = None,
                    check: bool = True) -> subprocess.CompletedProcess:  # fmt: skip
        """``kafka-metadata-quorum --bootstrap-controller <via> [--command-config config]
        args...`` (Kafka ``version``'s jars; ``--command-config`` is a global option). A
        ``via`` that is a ``host:port`` string is a broker: ``--bootstrap-server`` (the broker
        forwards the request to the active controller, in an Envelope on a Kafka broker)."""
        glob = (["--bootstrap-server", via] if isinstance(via, str)
                else ["--bootstrap-controller", self.address(via)])  # fmt: skip
        if config is not None:
            glob += ["--command-config", str(config)]
        return peer.run_tool(self.version, "kafka-metadata-quorum", *glob, *args, timeout=120,
                             check=check)  # fmt: skip

    def add_controller(self, node: int, via: int | str, check: bool = True,
                       caught_up: bool = True):  # fmt: skip
        """Kafka's ``add-controller`` for ``node`` (its own properties file as the command
        config: its id, directory id and controller endpoint), asked through ``via``. With
        ``caught_up``, first wait until the leader lists ``node`` as an observer at the high
        watermark, as an operator checks ``describe --replication`` first: a leader refuses
        (REQUEST_TIMED_OUT) a voter that has not caught up (Kafka ``isReplicaCaughtUp``)."""
        if caught_up:
            self.wait_observer(node)
        return self.quorum_tool(via, "add-controller", config=self.properties_path(node),
                                check=check)  # fmt: skip

    def remove_controller(self, node: int, directory_id: str, via: int, check: bool = True):
        return self.quorum_tool(via, "remove-controller", "--controller-id", str(node),
                                "--controller-directory-id", directory_id,
                                check=check)  # fmt: skip

    def status(self, via: int) -> dict:
        """``describe --status`` asked through ``via``: label -> value, with ``CurrentVoters``
        and ``CurrentObservers`` parsed as JSON."""
        out = self.quorum_tool(via, "describe", "--status").stdout
        rows = {}
        for line in out.strip().splitlines():
            label, _, value = line.partition(":")
            value = value.strip()
            rows[label] = json.loads(value) if label.startswith("Current") else value
        return rows

    # ------------------------------------------------------------------ waiting (no JVM)
    def leader(self, timeout: float = 60.0, among: tuple[int, ...] | None = None
               ) -> tuple[int, int]:  # fmt: skip
        """(leader id, epoch): a live node (of ``among``, default all) answering DescribeQuorum
        as leader of the highest epoch, seen in two polls in a row (TimeoutError)."""
        ids = among or tuple(self.ids)
        deadline = time.monotonic() + timeout
        last = None
        while True:
            obs = describe_all({i: self.address(i) for i in ids if self.alive(i)})
            now = max(((o.epoch, o.node) for o in obs if o.leading), default=None)
            if now is not None and now == last:
                return now[1], now[0]
            last = now
            if time.monotonic() > deadline:
                raise TimeoutError(f"no leader within {timeout}s: {obs}")
            time.sleep(0.3)

    def voters(self, leader: int) -> tuple[list[VoterView], int] | None:
        """The leader's current voters (DescribeQuorum v2) and its high watermark."""
        p = describe_partition(self.address(leader))
        if p is None or p.error_code != 0:
            return None
        from kafka_rpc.protocol.uuids import uuid_text

        views = [VoterView(v.replica_id, uuid_text(v.replica_directory_id), v.log_end_offset)
                 for v in p.current_voters]  # fmt: skip
        return views, p.high_watermark

    def wait_observer(self, node: int, timeout: float = START_S) -> None:
        """Until the leader's DescribeQuorum lists ``node`` (its current directory id) as an
        observer at the leader's high watermark (TimeoutError with the last answer)."""
        from kafka_rpc.protocol.uuids import uuid_text

        deadline = time.monotonic() + timeout
        p = None
        while True:
            try:
                leader, _ = self.leader(timeout=max(1.0, deadline - time.monotonic()))
                p = describe_partition(self.address(leader))
            except TimeoutError:
                p = None
            if p is not None and p.error_code == 0:
                want = self.directory_id(node)
                if any(
                    o.replica_id == node
                    and uuid_text(o.replica_directory_id) == want
                    and o.log_end_offset >= p.high_watermark
                    for o in p.observers
                ):
                    return
            if time.monotonic() > deadline:
                raise TimeoutError(f"node {node} never a caught-up observer: {p}")
            time.sleep(0.3)

    def wait_voters(
        self, wanted: set[int], timeout: float = START_S
    ) -> tuple[int, list[VoterView]]:
        """Until some leader lists exactly ``wanted`` as voters, each at its log end offset =
        the high watermark (all caught up); (leader, voters). TimeoutError with the last view."""
        deadline = time.monotonic() + timeout
        seen = None
        while True:
            try:
                leader, _ = self.leader(timeout=max(1.0, deadline - time.monotonic()))
                seen = self.voters(leader)
            except TimeoutError:
                seen = None
                leader = -1
            if seen is not None:
                views, hwm = seen
                if {v.node for v in views} == wanted and all(
                    v.log_end_offset == hwm for v in views
                ):
                    return leader, views
            if time.monotonic() > deadline:
                raise TimeoutError(f"voters {sorted(wanted)} not all caught up: {seen}")
            time.sleep(0.5)
