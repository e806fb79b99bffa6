"""FileQuorumStateStore: Kafka's quorum-state file (one line of JSON, tmp + fsync + rename)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from kafka_rpc.raft.api import ElectionState
from kafka_rpc.raft.quorum_state import FileQuorumStateStore, QuorumStateError


def test_missing_file_reads_none(tmp_path: Path) -> None:
    assert FileQuorumStateStore(tmp_path / "quorum-state").read() is None


def test_round_trip_in_kafka_v0_layout(tmp_path: Path) -> None:
    store = FileQuorumStateStore(tmp_path / "quorum-state")
    state = ElectionState(epoch=2, leader_id=1, voted_id=-1, voters=(1, 2, 3))
    store.write(state)
    assert store.read() == state
    text = (tmp_path / "quorum-state").read_text()
    assert "\n" not in text
    assert text == (
        '{"clusterId":"","leaderId":1,"leaderEpoch":2,"votedId":-1,"appliedOffset":0,'
        '"currentVoters":[{"voterId":1},{"voterId":2},{"voterId":3}],"data_version":0}'
    )
    assert not (tmp_path / "quorum-state.tmp").exists()
    store.write(ElectionState(epoch=3, voted_id=2, voters=(1, 2, 3)))
    assert FileQuorumStateStore(tmp_path).read() == ElectionState(3, -1, 2, (1, 2, 3))


def test_reads_kafka_v1_layout(tmp_path: Path) -> None:
    p = tmp_path / "quorum-state"
    p.write_text(
        '{"leaderId":-1,"leaderEpoch":2,"votedId":1,'
        '"votedDirectoryId":"J8aAPcfLQt2bqs1JT_rMgQ","data_version":1}'
    )
    got = FileQuorumStateStore(p).read()
    assert got is not None and got.voted_directory_id is not None
    assert got == ElectionState(
        epoch=2, leader_id=-1, voted_id=1, voted_directory_id=got.voted_directory_id, data_version=1
    )
    from kafka_rpc.protocol.uuids import uuid_text

    assert uuid_text(got.voted_directory_id) == "J8aAPcfLQt2bqs1JT_rMgQ"


def test_writes_kafka_v1_layout(tmp_path: Path) -> None:
    import uuid

    store = FileQuorumStateStore(tmp_path / "quorum-state")
    state = ElectionState(
        epoch=2, leader_id=-1, voted_id=3, voted_directory_id=uuid.UUID(int=1), data_version=1
    )
    store.write(state)
    assert (tmp_path / "quorum-state").read_text() == (
        '{"leaderId":-1,"leaderEpoch":2,"votedId":3,'
        '"votedDirectoryId":"AAAAAAAAAAAAAAAAAAAAAQ","data_version":1}'
    )
    assert store.read() == state
    store.write(ElectionState(epoch=3, leader_id=1, data_version=1))
    assert '"votedDirectoryId":"AAAAAAAAAAAAAAAAAAAAAA"' in (tmp_path / "quorum-state").read_text()
    assert store.read() == ElectionState(epoch=3, leader_id=1, data_version=1)


@pytest.mark.parametrize(
    "content",
    [
        "{not json",
        "",
        "[1, 2]",
        '{"leaderId":1,"leaderEpoch":2,"votedId":-1}',  # no data_version
        '{"leaderId":1,"leaderEpoch":2,"votedId":-1,"data_version":2}',
        '{"leaderId":1,"leaderEpoch":2,"votedId":-1,"data_version":-1}',
        '{"leaderId":1,"votedId":-1,"data_version":0}',  # no epoch
        '{"leaderId":"x","leaderEpoch":2,"data_version":0}',
    ],
)
def test_bad_file_raises_naming_it(tmp_path: Path, content: str) -> None:
    p = tmp_path / "quorum-state"
    p.write_text(content)
    with pytest.raises(QuorumStateError, match="quorum-state"):
        FileQuorumStateStore(p).read()


def test_failed_write_keeps_old_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    p = tmp_path / "quorum-state"
    store = FileQuorumStateStore(p)
    old = ElectionState(epoch=5, leader_id=2, voters=(1, 2))
    store.write(old)
    before = p.read_bytes()

    def boom(fd: int) -> None:
        raise OSError("disk on fire")

    monkeypatch.setattr(os, "fsync", boom)
    with pytest.raises(OSError, match="disk on fire"):
        store.write(ElectionState(epoch=6, leader_id=1, voters=(1, 2)))
    monkeypatch.undo()
    assert p.read_bytes() == before
    assert store.read() == old
    assert not (tmp_path / "quorum-state.tmp").exists()


def test_write_goes_through_tmp_then_rename(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    p = tmp_path / "quorum-state"
    calls: list[tuple[str, str]] = []
    real_replace = os.replace

    def spy(src: str, dst: str) -> None:
        calls.append((str(src), str(dst)))
        assert json.loads(Path(src).read_text())["leaderEpoch"] == 7  # complete before rename
        real_replace(src, dst)

    monkeypatch.setattr(os, "replace", spy)
    FileQuorumStateStore(p).write(ElectionState(epoch=7))
    assert calls == [(str(p) + ".tmp", str(p))]
