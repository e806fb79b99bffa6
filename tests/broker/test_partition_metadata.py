"""``partition.metadata`` in Kafka's exact format (PartitionMetadataFile,
PartitionMetadataReadBuffer): the bytes written, what a read accepts and refuses (with Kafka's
messages), the atomic write, and UnifiedLog.initializeTopicId's rule for a log opened with an
expected id."""

from __future__ import annotations

import os
import subprocess
import sys
from uuid import UUID

import pytest

from kafka_rpc.config import ConfigError, load_config
from kafka_rpc.raft.api import METADATA_TOPIC_ID
from kafka_rpc.storage import partition_metadata as pm
from kafka_rpc.storage.formatter import format_storage

#: bytes chosen so that the URL-safe alphabet's '-' and '_' both appear
ODD = UUID(bytes=b"\xfb\xff\xbf" * 5 + b"\x01")


def test_write_is_kafkas_exact_text(tmp_path):
    pm.write(tmp_path, METADATA_TOPIC_ID)
    assert (tmp_path / "partition.metadata").read_bytes() == (
        b"version: 0\ntopic_id: AAAAAAAAAAAAAAAAAAAAAQ"
    )  # no final newline: PartitionMetadata.encode
    assert pm.read(tmp_path) == pm.PartitionMetadata(0, METADATA_TOPIC_ID)
    pm.write(tmp_path, ODD)  # replaced atomically, no temp file left behind
    assert (tmp_path / "partition.metadata").read_text() == (
        "version: 0\ntopic_id: -_-_-_-_-_-_-_-_-_-_AQ"
    )
    assert sorted(os.listdir(tmp_path)) == ["partition.metadata"]
    with pytest.raises(ValueError):
        pm.write(tmp_path, UUID(int=0))


@pytest.mark.parametrize(
    "text,version",
    [
        ("version: 0\ntopic_id: AAAAAAAAAAAAAAAAAAAAAQ\n", 0),  # a final newline
        ("version: 0\r\ntopic_id: AAAAAAAAAAAAAAAAAAAAAQ\r\n", 0),  # CRLF (Java readLine)
        ("version: 0\rtopic_id: AAAAAAAAAAAAAAAAAAAAAQ", 0),  # CR
        ("version:\t 0\ntopic_id:   AAAAAAAAAAAAAAAAAAAAAQ", 0),  # ":\\s+"
        ("version: 0\ntopic_id: AAAAAAAAAAAAAAAAAAAAAQ\nwhatever: x", 0),  # line 3 ignored
        ("version: 3\ntopic_id: AAAAAAAAAAAAAAAAAAAAAQ", 3),  # newer: accepted (downgrade)
        ("version: +0\ntopic_id: AAAAAAAAAAAAAAAAAAAAAQ==", 0),  # Integer.parseInt, padded id
    ],
)
def test_read_accepts_what_kafka_accepts(tmp_path, text, version):
    (tmp_path / "partition.metadata").write_bytes(text.encode())
    assert pm.read(tmp_path) == pm.PartitionMetadata(version, METADATA_TOPIC_ID)


@pytest.mark.parametrize(
    "text,message",
    [
        ("", "Malformed line in partition metadata file [{p}]: null"),
        ("version: 0", "Malformed line in partition metadata file [{p}]: null"),
        ("version: 0\n", "Malformed line in partition metadata file [{p}]: null"),
        ("version: 0\n\ntopic_id: AAAAAAAAAAAAAAAAAAAAAQ", "Malformed line in partition "
         "metadata file [{p}]: "),
        ("topic_id: AAAAAAAAAAAAAAAAAAAAAQ\nversion: 0", "Malformed line in partition metadata "
         "file [{p}]: topic_id: AAAAAAAAAAAAAAAAAAAAAQ"),
        ("version:0\ntopic_id: AAAAAAAAAAAAAAAAAAAAAQ", "Malformed line in partition metadata "
         "file [{p}]: version:0"),
        ("Version: 0\ntopic_id: AAAAAAAAAAAAAAAAAAAAAQ", "Malformed line in partition metadata "
         "file [{p}]: Version: 0"),
        ("version: zero\ntopic_id: AAAAAAAAAAAAAAAAAAAAAQ", "Malformed line in partition "
         "metadata file [{p}]: version: zero"),
        ("version: 0 \ntopic_id: AAAAAAAAAAAAAAAAAAAAAQ", "Malformed line in partition "
         "metadata file [{p}]: version: 0 "),
        ("version: 2147483648\ntopic_id: AAAAAAAAAAAAAAAAAAAAAQ", "Malformed line in partition "
         "metadata file [{p}]: version: 2147483648"),
        ("version: -1\ntopic_id: AAAAAAAAAAAAAAAAAAAAAQ", "Unrecognized version of partition "
         "metadata file ({p}): -1"),
        ("version: 0\ntopic_id: 6f2a4b1e-9c3d-4e5f-8a7b-1c2d3e4f5a6b", "Malformed line in "
         "partition metadata file [{p}]: topic_id: 6f2a4b1e-9c3d-4e5f-8a7b-1c2d3e4f5a6b"),
        ("version: 0\ntopic_id: AAAAAAAAAAAAAAAAAAAAAA", "Invalid topic ID in partition "
         "metadata file ({p})"),
        ("version: 0\ntopic_id:AAAAAAAAAAAAAAAAAAAAAQ", "Malformed line in partition metadata "
         "file [{p}]: topic_id:AAAAAAAAAAAAAAAAAAAAAQ"),
    ],
)  # fmt: skip
def test_read_refuses_what_kafka_refuses(tmp_path, text, message):
    path = tmp_path / "partition.metadata"
    path.write_bytes(text.encode())
    with pytest.raises(pm.PartitionMetadataError) as e:
        pm.read(tmp_path)
    assert str(e.value) == message.format(p=path)


def test_read_missing_and_not_utf8(tmp_path):
    with pytest.raises(FileNotFoundError):
        pm.read(tmp_path)
    assert pm.read_topic_id(tmp_path) is None
    (tmp_path / "partition.metadata").write_bytes(b"version: 0\ntopic_id: \xff\xfe")
    with pytest.raises(pm.PartitionMetadataError, match="not UTF-8"):
        pm.read_topic_id(tmp_path)


def test_ensure_writes_once_and_refuses_another_id(tmp_path):
    d = tmp_path / "__cluster_metadata-0"
    d.mkdir()
    assert pm.ensure(d, METADATA_TOPIC_ID) is True
    before = (d / "partition.metadata").stat().st_mtime_ns
    assert pm.ensure(d, METADATA_TOPIC_ID) is False
    assert (d / "partition.metadata").stat().st_mtime_ns == before
    with pytest.raises(pm.InconsistentTopicIdError) as e:
        pm.ensure(d, ODD)
    assert str(e.value).startswith(
        "Tried to assign topic ID -_-_-_-_-_-_-_-_-_-_AQ to log for topic partition "
        "__cluster_metadata-0, but log already contained topic ID AAAAAAAAAAAAAAAAAAAAAQ"
    )
    assert isinstance(e.value, ConfigError)  # a start-up error, as a meta.properties mismatch
    assert pm.read(d).topic_id == METADATA_TOPIC_ID  # untouched


def test_storage_format_writes_the_metadata_topic_id(tmp_path):
    config = load_config(overrides={"log.dirs": str(tmp_path / "data")})
    format_storage(config, "AAAAAAAAAAAAAAAAAAAAAQ")
    path = tmp_path / "data" / "__cluster_metadata-0" / "partition.metadata"
    assert path.read_text() == "version: 0\ntopic_id: AAAAAAAAAAAAAAAAAAAAAQ"


def test_serve_refuses_a_metadata_log_of_another_topic_id(tmp_path):
    """`kafka-rpc serve` stops at start-up with Kafka's message and exit code 2."""
    meta = tmp_path / "data" / "__cluster_metadata-0"
    meta.mkdir(parents=True)
    pm.write(meta, ODD)
    r = subprocess.run(
        [sys.executable, "-m", "kafka_rpc.cli", "serve",
         "--override", "listeners=PLAINTEXT://127.0.0.1:0,CONTROLLER://127.0.0.1:0",
         "--override", f"log.dirs={tmp_path / 'data'}"],
        capture_output=True, text=True, timeout=60, cwd=tmp_path,
    )  # fmt: skip
    assert r.returncode == 2, (r.stdout, r.stderr)
    assert "Tried to assign topic ID AAAAAAAAAAAAAAAAAAAAAQ to log for topic partition " \
           "__cluster_metadata-0, but log already contained topic ID -_-_-_-_-_-_-_-_-_-_AQ" \
           in r.stderr  # fmt: skip
    assert pm.read(meta).topic_id == ODD
