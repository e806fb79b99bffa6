"""The ``quorum-state`` file (Kafka ``FileQuorumStateStore``): one line of JSON, Kafka's
``QuorumStateData`` plus ``data_version``.

Written in the v0 layout (kraft.version 0, static voters)::

    {"clusterId":"","leaderId":1,"leaderEpoch":2,"votedId":-1,"appliedOffset":0,
     "currentVoters":[{"voterId":1},...],"data_version":0}

(on one line, no trailing newline, as Kafka writes it). The v1 layout (``data_version`` 1: no
``clusterId``/``appliedOffset``/``currentVoters``, an optional ``votedDirectoryId``) is read too.
"""

from __future__ import annotations

import json
from pathlib import Path

from kafka_rpc.raft.api import ElectionState
from kafka_rpc.storage.durable import atomic_write

__all__ = ["DEFAULT_FILE_NAME", "FileQuorumStateStore", "QuorumStateError"]

DEFAULT_FILE_NAME = "quorum-state"
_LOWEST_VERSION = 0
_HIGHEST_VERSION = 1


class QuorumStateError(RuntimeError):
    """The quorum-state file cannot be read (Kafka UncheckedIOException/IllegalStateException)."""


class FileQuorumStateStore:
    """:class:`~kafka_rpc.raft.api.QuorumStateStore` on a file (Kafka ``FileQuorumStateStore``).

    ``path`` is the file; a directory means ``<directory>/quorum-state``."""

    def __init__(self, path: Path | str) -> None:
        p = Path(path)
        self.path = p / DEFAULT_FILE_NAME if p.is_dir() else p
        self.tmp_path = self.path.with_name(self.path.name + ".tmp")

    def read(self) -> ElectionState | None:
        """The persisted election state, None when the file does not exist. Raises
        :class:`QuorumStateError` naming the file when it is not one JSON object line with a
        ``data_version`` in 0..1 and integer ``leaderEpoch``/``leaderId``/``votedId``."""
        try:
            with open(self.path, encoding="utf-8") as f:
                line = f.readline()
        except FileNotFoundError:
            return None
        except OSError as e:
            raise QuorumStateError(f"error reading the quorum state file {self.path}: {e}") from e
        if not line:
            raise QuorumStateError(f"the quorum state file {self.path} is empty")
        try:
            data = json.loads(line)
        except ValueError as e:
            raise QuorumStateError(f"the quorum state file {self.path} is not JSON: {e}") from e
        if not isinstance(data, dict):
            raise QuorumStateError(f"the quorum state file {self.path} is not a JSON object")
        version = data.get("data_version")
        if type(version) is not int:
            raise QuorumStateError(f"the quorum state file {self.path} has no data_version")
        if not _LOWEST_VERSION <= version <= _HIGHEST_VERSION:
            raise QuorumStateError(
                f"the quorum state file {self.path} has data_version {version}, outside the "
                f"supported {_LOWEST_VERSION}..{_HIGHEST_VERSION}"
            )
        try:
            epoch = _int(data, "leaderEpoch")
            leader = _int(data, "leaderId", -1)
            voted = _int(data, "votedId", -1)
            voters_raw = data.get("currentVoters") or []
            if not isinstance(voters_raw, list):
                raise TypeError("currentVoters is not a list")
            voters = tuple(_int(v, "voterId") for v in voters_raw)
        except (TypeError, KeyError) as e:
            raise QuorumStateError(f"the quorum state file {self.path} is malformed: {e}") from e
        return ElectionState(epoch=epoch, leader_id=leader, voted_id=voted, voters=voters)

    def write(self, state: ElectionState) -> None:
        """Persist ``state`` durably in the v0 layout before returning: write ``<file>.tmp``,
        flush, fsync, ``os.replace`` over the file, fsync the directory (Kafka
        ``writeElectionStateToFile``). On failure the old file is untouched and the tmp file
        is removed."""
        doc = {
            "clusterId": "",
            "leaderId": state.leader_id,
            "leaderEpoch": state.epoch,
            "votedId": state.voted_id,
            "appliedOffset": 0,
            "currentVoters": [{"voterId": v} for v in state.voters],
            "data_version": 0,
        }
        atomic_write(self.path, json.dumps(doc, separators=(",", ":")))


def _int(obj: object, key: str, default: int | None = None) -> int:
    if not isinstance(obj, dict):
        raise TypeError(f"{obj!r} is not an object")
    if key not in obj:
        if default is None:
            raise KeyError(f"missing {key}")
        return default
    v = obj[key]
    if type(v) is not int:
        raise TypeError(f"{key} is not an integer: {v!r}")
    return v
