"""`kafka-rpc storage random-uuid | format` (Kafka's kafka-storage.sh) as subprocesses."""

import base64
import re
import subprocess
import sys

import pytest

from tests.integration.test_cli import ServeProcess

pytestmark = pytest.mark.integration

TIMEOUT = 15


def cli(*args):
    return subprocess.run([sys.executable, "-m", "kafka_rpc.cli", *args],
                          capture_output=True, text=True, timeout=TIMEOUT)  # fmt: skip


def test_random_uuid():
    ids = {cli("storage", "random-uuid").stdout.strip() for _ in range(2)}
    assert len(ids) == 2
    for cid in ids:
        assert re.fullmatch(r"[A-Za-z0-9_-]{22}", cid)
        assert len(base64.urlsafe_b64decode(cid + "==")) == 16


def test_format_then_already_formatted(tmp_path):
    cfg = tmp_path / "server.properties"
    cfg.write_text(f"node.id=1\nlog.dirs={tmp_path / 'a'},{tmp_path / 'b'}\n"
                   f"metadata.log.dir={tmp_path / 'meta'}\n")  # fmt: skip
    cid = cli("storage", "random-uuid").stdout.strip()
    r = cli("storage", "format", "--cluster-id", cid, "--config", str(cfg))
    assert r.returncode == 0, r.stderr
    assert f"Formatting metadata directory {tmp_path / 'meta'}" in r.stdout
    assert f"Formatting data directory {tmp_path / 'a'}" in r.stdout
    dir_ids = set()
    for d in ("a", "b", "meta"):
        props = dict(line.split("=", 1) for line in
                     (tmp_path / d / "meta.properties").read_text().splitlines()
                     if "=" in line)  # fmt: skip
        assert (props["version"], props["cluster.id"], props["node.id"]) == ("1", cid, "1")
        dir_ids.add(props["directory.id"])
    assert len(dir_ids) == 3  # one directory id per directory
    assert (tmp_path / "meta" / "__cluster_metadata-0").is_dir()

    again = cli("storage", "format", "--cluster-id", cid, "--config", str(cfg))
    assert again.returncode == 1
    assert f"Log directory {tmp_path / 'a'} is already formatted. Use --ignore-formatted" in (
        again.stderr
    )
    ignored = cli("storage", "format", "--cluster-id", cid, "--config", str(cfg),
                  "--ignore-formatted")  # fmt: skip
    assert ignored.returncode == 0
    assert "All of the log directories are already formatted." in ignored.stdout


def test_format_with_override_and_bad_cluster_id(tmp_path):
    cfg = tmp_path / "server.properties"
    cfg.write_text("")
    r = cli("storage", "format", "--cluster-id", "not-a-uuid", "--config", str(cfg))
    assert r.returncode == 2
    assert "--cluster-id" in r.stderr
    cid = cli("storage", "random-uuid").stdout.strip()
    r = cli("storage", "format", "-t", cid, "-c", str(cfg),
            "--override", f"log.dirs={tmp_path / 'x'}")  # fmt: skip
    assert r.returncode == 0, r.stderr
    assert f"cluster.id={cid}" in (tmp_path / "x" / "meta.properties").read_text()


def test_serve_uses_the_formatted_cluster_id(tmp_path):
    cfg = tmp_path / "server.properties"
    cfg.write_text(f"log.dirs={tmp_path / 'data'}\n")
    cid = cli("storage", "random-uuid").stdout.strip()
    assert cli("storage", "format", "-t", cid, "-c", str(cfg)).returncode == 0
    srv = ServeProcess(tmp_path)
    try:
        assert any(line.startswith(f"cluster id {cid},") for line in srv.lines), srv.lines
    finally:
        assert srv.stop() == 0


def test_serve_formats_an_empty_directory(tmp_path):
    srv = ServeProcess(tmp_path)
    try:
        meta = (tmp_path / "data" / "meta.properties").read_text()
        assert "directory.id=" in meta
        assert (tmp_path / "data" / "__cluster_metadata-0").is_dir()
    finally:
        assert srv.stop() == 0


def test_random_uuid_never_starts_with_a_dash(monkeypatch):
    """Kafka's Uuid.randomUuid never yields an id whose text starts with '-' (a CLI would read
    it as an option; seen: `storage format -t -dBoGn...` failing)."""
    import uuid as uuid_mod

    from kafka_rpc.protocol import uuids as uuids_mod

    assert all(not uuids_mod.random_uuid_text().startswith("-") for _ in range(2000))
    # 0xf8 << 120 encodes to '-' first; the generator must skip it and take the next draw
    draws = iter([uuid_mod.UUID(int=0xF8 << 120), uuid_mod.UUID(int=0x12 << 120)])
    monkeypatch.setattr(uuids_mod.uuid, "uuid4", lambda: next(draws))
    text = uuids_mod.random_uuid_text()
    assert text == "EgAAAAAAAAAAAAAAAAAAAA", text
