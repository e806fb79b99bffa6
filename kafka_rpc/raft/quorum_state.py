"""The ``quorum-state`` file (Kafka ``FileQuorumStateStore``): one line of JSON, Kafka's
``QuorumStateData`` plus ``data_version``.

Written in the v0 layout (kraft.version 0, static voters)::

    {"clusterId":"","leaderId":1,"leaderEpoch":2,"votedId":-1,"appliedOffset":0,
     "currentVoters":[{"voterId":1},...],"data_version":0}

(on one line, no trailing newline, as Kafka writes it). From kraft.version 1 the v1 layout
(``ElectionState.data_version`` 1) is written: no ``clusterId``/``appliedOffset``/
``currentVoters``, and ``votedDirectoryId`` (Kafka's base64 Uuid, zero when none)::

    {"leaderId":1,"leaderEpoch":2,"votedId":-1,"votedDirectoryId":"AAAAAAAAAAAAAAAAAAAAAA",
     "data_version":1}
"""

from __future__ import annotations

import json
from pathlib import Path
from uuid import UUID

from kafka_rpc.protocol.uuids import parse_uuid_text, uuid_text
from kafka_rpc.raft.api import ElectionState
from kafka_rpc.storage.durable import atomic_write

__all__ = ["DEFAULT_FILE_NAME", "FileQuorumStateStore", "QuorumStateError"]

DEFAULT_FILE_NAME = "quorum-state"
_ZERO = UUID(int=0)
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
            voted_dir = None
            raw_dir = data.get("votedDirectoryId")
            if version >= 1 and raw_dir is not None:
                if not isinstance(raw_dir, str):
                    raise TypeError(f"votedDirectoryId is not a string: {raw_dir!r}")
                voted_dir = parse_uuid_text(raw_dir)
                if voted_dir.int == 0:
                    voted_dir = None
        except (TypeError, KeyError, ValueError) as e:
            raise QuorumStateError(f"the quorum state file {self.path} is malformed: {e}") from e
        return ElectionState(epoch=epoch, leader_id=leader, voted_id=voted, voters=voters,
                             voted_directory_id=voted_dir, data_version=version)  # fmt: skip

    def write(self, state: ElectionState) -> None:
        """Persist ``state`` durably in the layout of its ``data_version`` (0 or 1) before
        returning: write ``<file>.tmp``, flush, fsync, ``os.replace`` over the file, fsync the
        directory (Kafka ``writeElectionStateToFile``). On failure the old file is untouched
        and the tmp file is removed."""
        doc: dict[str, object]
        if state.data_version >= 1:
            voted_dir = state.voted_directory_id
            doc = {
                "leaderId": state.leader_id,
                "leaderEpoch": state.epoch,
                "votedId": state.voted_id,
                "votedDirectoryId": uuid_text(voted_dir if voted_dir is not None else _ZERO),
                "data_version": 1,
            }
        else:
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
