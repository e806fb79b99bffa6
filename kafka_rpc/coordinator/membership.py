"""Membership of a ``__diskless-metadata`` partition's Raft group: its voters follow the
partition's replica assignment in the metadata image (docs/batch-coordinator.md, "Replicas
follow the assignment").

A group is *dynamic* (KIP-853 kraft.version 1): its voter set lives in its own log as
VotersRecord control records, changed one voter at a time by AddRaftVoter / RemoveRaftVoter on
its leader, exactly as the metadata quorum's (``kafka_rpc.raft.reconfig``). What this module
adds is the rule that decides those changes from the image, and how a replica's directory
starts:

* **Start** (:func:`prepare_directory`): a partition directory that holds no Raft data yet gets
  a bootstrap checkpoint ``00000000000000000000-0000000000.checkpoint`` and the marker file
  ``raft-membership``. A replica that is one of the partition's replicas, not an adding one
  (``PartitionRecord.AddingReplicas``), and whose log directory id is the one the record assigns
  it (``PartitionRecord.Directories``), writes kraft.version 1 with the voter set of every such
  replica (the group at its creation, Kafka's ``kafka-storage format --initial-controllers``);
  any other (an adding replica, or a node whose disk was replaced: its new directory id is not
  the record's) writes kraft.version 1 with no voters (``--no-initial-controllers``) and joins
  as an observer, finding the leader through its peers' addresses (Kafka's
  ``controller.quorum.bootstrap.servers``). A directory with Raft data and no marker was made by
  an earlier version: its group keeps static voters (kraft.version 0) and follows nothing.
* **The leader's rule** (:func:`next_change`), one change at a time, each only when the last
  one is committed (the Raft core refuses otherwise):

  1. a voter id that is also a replica but under another directory id than a caught-up
     observer of the same id (a replaced disk) is removed first (Kafka's auto-join order);
  2. a replica of the image that is not a voter is added once it is a caught-up observer;
  3. a voter that is no longer a replica of the image is removed (during a reassignment the
     image's replicas are target + removing, so removals come after the reassignment completed,
     which needs the adding replicas in the ISR, hence voters).

* **The ISR** (:func:`in_sync_replicas`): the leader and every voter that is a replica and
  reached the leader's log end offset within ``replica.lag.time.max.ms`` (Kafka's
  ``Partition.isFollowerInSync`` on ``DescribeQuorum``'s LastCaughtUpTimestamp), in the order of
  the image's replicas. The leader reports it with AlterPartition as a Kafka partition leader
  does; the controller accepts it from the Raft leader of a ``__diskless-metadata`` partition
  even when the image names another leader, and makes the sender the leader
  (``kafka_rpc.controller.partitions``).

Units: times in wall-clock ms since the Unix epoch, as DescribeQuorum reports them.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NamedTuple
from uuid import UUID

from kafka_rpc.raft.api import OffsetAndEpoch
from kafka_rpc.raft.file_log import snapshot_path
from kafka_rpc.raft.voters import VoterNode, VoterSet, bootstrap_checkpoint_bytes
from kafka_rpc.storage.durable import atomic_write

__all__ = [
    "MEMBERSHIP_MARKER",
    "Change",
    "Membership",
    "bootstrap_voters",
    "in_sync_replicas",
    "next_change",
    "prepare_directory",
]

log = logging.getLogger("kafka_rpc.coordinator.membership")

#: the file that marks a partition directory whose Raft group is dynamic (kraft.version 1)
MEMBERSHIP_MARKER = "raft-membership"
_ZERO = UUID(int=0)
#: the kraft.version range a coordinator replica supports
KRAFT_VERSIONS = (0, 1)


@dataclass(frozen=True)
class Membership:
    """How one replica of a dynamic group starts (module docstring).

    * ``directory_id``: this replica's directory id in the group (its log directory's
      ``directory.id``, Kafka's ``meta.properties``);
    * ``listener_name``: the listener the group's Raft RPCs use (every voter's endpoint on it);
    * ``bootstrap``: the voter set the bootstrap checkpoint holds (None: no voters, this replica
      joins as an observer);
    * ``bootstrap_servers``: (host, port) of the other replicas, where an observer fetches from
      until it learns the leader."""

    directory_id: UUID
    listener_name: str
    bootstrap: VoterSet | None
    bootstrap_servers: tuple[tuple[str, int], ...] = ()


def bootstrap_voters(
    replicas: Sequence[int],
    directories: Sequence[UUID],
    adding: Sequence[int],
    addresses: Mapping[int, tuple[str, int]],
    listener_name: str,
    node_id: int,
    directory_id: UUID,
) -> VoterSet | None:
    """The voter set a new replica of ``node_id`` bootstraps with, or None to join as an
    observer (module docstring, "Start"): the replicas that are not ``adding``, each with its
    directory from ``directories`` (the partition record's, index-aligned with ``replicas``) and
    its address on ``listener_name``; None when ``node_id`` is adding, has another directory id
    in the record than ``directory_id``, or some initial replica has no known address or a zero
    directory id (then nobody could verify it)."""
    dirs = dict(zip(replicas, directories, strict=False))
    if node_id in adding or node_id not in replicas:
        return None
    if dirs.get(node_id, _ZERO) != directory_id or directory_id.int == 0:
        return None
    nodes = []
    for r in replicas:
        if r in adding:
            continue
        d, addr = dirs.get(r, _ZERO), addresses.get(r)
        if d.int == 0 or addr is None:
            return None
        nodes.append(VoterNode(r, d, {listener_name: addr}, *KRAFT_VERSIONS))
    return VoterSet(nodes)


def _has_raft_data(directory: Path) -> bool:
    for p in directory.iterdir():
        if p.suffix == ".checkpoint" or (p.suffix == ".log" and p.stat().st_size > 0):
            return True
    return False


def prepare_directory(directory: Path, membership: Membership, timestamp_ms: int) -> bool:
    """Make ``directory`` (existing) ready for a dynamic group; True when the group is dynamic.

    A directory with the marker: True, unchanged. One with no Raft data: writes the bootstrap
    checkpoint (``membership.bootstrap``'s voters or none, kraft.version 1, every timestamp
    ``timestamp_ms``; :func:`~kafka_rpc.raft.voters.bootstrap_checkpoint_bytes`), then the
    marker, each with :func:`~kafka_rpc.storage.durable.atomic_write`: True. One with Raft data
    but no marker (made by an earlier version): False, unchanged (static voters). Raises
    ``OSError``."""
    marker = directory / MEMBERSHIP_MARKER
    if marker.exists():
        return True
    if _has_raft_data(directory):
        return False
    checkpoint = bootstrap_checkpoint_bytes(membership.bootstrap, 1, timestamp_ms)
    atomic_write(snapshot_path(directory, OffsetAndEpoch(0, 0)), checkpoint, ".part")
    atomic_write(marker, "kraft.version=1\n")
    return True


class Change(NamedTuple):
    """One voter change for the leader to make: ``kind`` "add" or "remove", the voter's id and
    directory id."""

    kind: str
    voter_id: int
    directory_id: UUID


def _caught_up(state: Any, now_ms: int, lag_ms: int) -> bool:
    t = state.last_caught_up_timestamp
    return t >= 0 and now_ms - t <= lag_ms


def next_change(
    quorum: Any, replicas: Sequence[int], now_ms: int, lag_ms: int
) -> Change | None:
    """The next voter change the leader makes (module docstring, "The leader's rule"), or None.
    ``quorum``: the leader's DescribeQuorum ``PartitionData`` (``current_voters``,
    ``observers``, each with ``replica_id``, ``replica_directory_id`` and
    ``last_caught_up_timestamp``, wall-clock ms); ``replicas``: the image's replicas of the
    partition; ``lag_ms``: how recently an observer must have reached the log end offset."""
    voters = {v.replica_id: v for v in quorum.current_voters}
    caught = [o for o in quorum.observers if _caught_up(o, now_ms, lag_ms)]
    for o in caught:  # 1. a replaced directory: the old key goes first
        v = voters.get(o.replica_id)
        if (v is not None and o.replica_id in replicas
                and v.replica_directory_id != o.replica_directory_id):  # fmt: skip
            return Change("remove", v.replica_id, v.replica_directory_id)
    for r in replicas:  # 2. a new replica, once caught up
        if r in voters:
            continue
        o = next((o for o in caught if o.replica_id == r), None)
        if o is not None and o.replica_directory_id.int != 0:
            return Change("add", r, o.replica_directory_id)
    for v in quorum.current_voters:  # 3. a replica no more
        if v.replica_id not in replicas:
            return Change("remove", v.replica_id, v.replica_directory_id)
    return None


def in_sync_replicas(
    quorum: Any, replicas: Sequence[int], leader_id: int, now_ms: int, lag_ms: int
) -> tuple[int, ...]:
    """The ISR the leader reports (module docstring, "The ISR"): ``leader_id`` and the voters of
    ``quorum`` (DescribeQuorum ``PartitionData``) that are in ``replicas`` and caught up within
    ``lag_ms``, in ``replicas`` order."""
    ok = {leader_id}
    for v in quorum.current_voters:
        if _caught_up(v, now_ms, lag_ms):
            ok.add(v.replica_id)
    return tuple(r for r in replicas if r in ok)
