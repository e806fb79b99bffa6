"""Data directories as Kafka keeps them (``kafka_rpc.storage.meta_properties``): directory ids, the
start-up checks of ``KafkaRaftServer.initializeLogDirs`` / ``MetaPropertiesEnsemble.verify``, and
the ``.lock`` held with a POSIX lock (another process, as a Kafka JVM would, is refused)."""

from __future__ import annotations

import subprocess
import sys
import uuid

import pytest

from kafka_rpc.config import ConfigError, load_config
from kafka_rpc.protocol.uuids import parse_uuid_text
from kafka_rpc.storage import meta_properties as mp
from kafka_rpc.storage.formatter import ensure_cluster_id


def _meta(d, cluster="Q2mw2yNDQz2B6x2ZyHqhTA", node=1, directory=None, version=1):
    directory = directory if directory is not None else mp.random_directory_id()
    mp.write(d, mp.MetaProperties(version, cluster, node, directory))


def test_reserved_directory_ids_are_kafkas_first_hundred():
    assert mp.is_reserved(uuid.UUID(int=0)) and mp.is_reserved(uuid.UUID(int=1))
    assert mp.is_reserved(uuid.UUID(int=99)) and not mp.is_reserved(uuid.UUID(int=100))
    assert not mp.is_reserved(uuid.UUID(int=(1 << 64) | 5))
    for _ in range(500):
        text = mp.random_directory_id()
        assert not text.startswith("-") and not mp.is_reserved(parse_uuid_text(text))


def test_written_meta_properties_read_back(tmp_path):
    _meta(tmp_path, directory="AAAAAAAAAAAAAAAAAAAAZA")
    m = mp.read(tmp_path)
    assert m == mp.MetaProperties(1, "Q2mw2yNDQz2B6x2ZyHqhTA", 1, "AAAAAAAAAAAAAAAAAAAAZA")
    text = (tmp_path / "meta.properties").read_text()
    assert text.startswith("#\n") and "version=1\n" in text


def test_kafka_written_file_is_read(tmp_path):
    # Java's Properties.store: a comment, a date comment, keys in any order
    (tmp_path / "meta.properties").write_text(
        "#\n#Fri Nov 27 16:53:38 UTC 2026\ncluster.id=CTKHUte7TqWVc9LCdqhSAg\n"
        "directory.id=PL5xdZe7tGs3yVCpmufPAw\nnode.id=2\nversion=1\n"
    )
    m = mp.read(tmp_path)
    assert (m.cluster_id, m.node_id, m.directory_id, m.version) == (
        "CTKHUte7TqWVc9LCdqhSAg", 2, "PL5xdZe7tGs3yVCpmufPAw", 1,
    )  # fmt: skip


def test_verify_checks_cluster_node_and_directory_ids(tmp_path):
    a, b = tmp_path / "a", tmp_path / "b"
    _meta(a)
    _meta(b, cluster="other_cluster_id_xxxxx")
    with pytest.raises(ConfigError, match="Invalid cluster.id"):
        mp.verify([a, b], a, 1)
    _meta(b)
    with pytest.raises(ConfigError, match="Stored node id 1 doesn't match"):
        mp.verify([a, b], a, 2)
    with pytest.raises(ConfigError, match="Invalid cluster.id"):
        mp.verify([a, b], a, 1, cluster_id="configured_but_otherxx")
    same = mp.read(a).directory_id
    _meta(b, directory=same)
    with pytest.raises(ConfigError, match="Duplicate directory ID"):
        mp.verify([a, b], a, 1)
    _meta(b, directory="AAAAAAAAAAAAAAAAAAAAAQ")  # reserved (1)
    with pytest.raises(ConfigError, match="Invalid reserved directory ID"):
        mp.verify([a, b], a, 1)
    (tmp_path / "c").mkdir()
    with pytest.raises(ConfigError, match="No `meta.properties` found"):
        mp.verify([a, tmp_path / "c"], a, 1)


def test_verify_writes_back_a_missing_directory_id(tmp_path):
    (tmp_path / "meta.properties").write_text(
        "version=1\ncluster.id=Q2mw2yNDQz2B6x2ZyHqhTA\nnode.id=1\n"
    )
    metas = mp.verify([tmp_path], tmp_path, 1)
    written = mp.read(tmp_path).directory_id
    assert written is not None and metas[tmp_path].directory_id == written


def test_metadata_partition_outside_the_metadata_dir_is_refused(tmp_path):
    a, b = tmp_path / "a", tmp_path / "b"
    _meta(a)
    _meta(b)
    (b / "__cluster_metadata-0").mkdir()
    with pytest.raises(ConfigError, match="Found unexpected metadata location"):
        mp.verify([a, b], a, 1)


def test_config_start_up_formats_checks_and_names_the_raft_directory_id(tmp_path):
    voters = "1@127.0.0.1:9093"
    cfg = load_config(overrides={
        "process.roles": "controller", "node.id": "1", "controller.quorum.voters": voters,
        "listeners": "CONTROLLER://127.0.0.1:9093", "controller.listener.names": "CONTROLLER",
        "log.dirs": str(tmp_path / "logs"), "metadata.log.dir": str(tmp_path / "meta"),
    })  # fmt: skip
    cid = ensure_cluster_id(cfg)
    a, m = mp.read(tmp_path / "logs"), mp.read(tmp_path / "meta")
    assert a.cluster_id == m.cluster_id == cid and a.directory_id != m.directory_id
    directory_id = mp.metadata_directory_id(cfg.metadata_log_dir)
    assert cfg.raft_config(cid, directory_id).directory_id == parse_uuid_text(m.directory_id)
    assert ensure_cluster_id(cfg) == cid  # idempotent
    wrong = load_config(overrides={**cfg.raw, "node.id": "2", "controller.quorum.voters":
                                   "2@127.0.0.1:9093"})  # fmt: skip
    with pytest.raises(ConfigError, match="node.id"):
        ensure_cluster_id(wrong)


_HOLD = """
import fcntl, os, sys, time
fd = os.open(sys.argv[1], os.O_RDWR | os.O_CREAT)
try:
    fcntl.lockf(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
except OSError:
    print("busy", flush=True)
    sys.exit(3)
print("held", flush=True)
sys.stdin.read()
"""


def test_directory_lock_excludes_another_process(tmp_path):
    lock = mp.DirectoryLock(tmp_path).acquire()
    try:
        other = subprocess.run([sys.executable, "-c", _HOLD, str(tmp_path / ".lock")],
                               capture_output=True, text=True, timeout=30, input="")  # fmt: skip
        assert other.returncode == 3 and "busy" in other.stdout
    finally:
        lock.release()
    holder = subprocess.Popen([sys.executable, "-c", _HOLD, str(tmp_path / ".lock")],
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)  # fmt: skip
    try:
        assert holder.stdout.readline().strip() == "held"
        with pytest.raises(ConfigError, match="Failed to acquire lock on file .lock"):
            mp.DirectoryLock(tmp_path).acquire()
    finally:
        holder.stdin.close()
        holder.wait(timeout=30)
    mp.DirectoryLock(tmp_path).acquire().release()
