"""`kafka-rpc storage format` as Kafka's `kafka-storage format`: --release-version, --feature,
--kafka-compatible, --add-scram, and bootstrap.checkpoint in Kafka's snapshot format in every
formatted directory (docs/features.md, 'Formatting a cluster')."""

from __future__ import annotations

import subprocess
import sys

import pytest

from kafka_rpc.controller.features import CHUNKS_VERSION, DISKLESS_VERSION
from kafka_rpc.protocol import codec
from kafka_rpc.protocol.record_batch import (
    CONTROL_SNAPSHOT_FOOTER,
    CONTROL_SNAPSHOT_HEADER,
    control_type,
    decode_batches,
)
from kafka_rpc.storage.bootstrap import BOOTSTRAP_FILE, read_bootstrap

pytestmark = pytest.mark.integration

CID = "q1Sh-9_ISia_zwGINzRvyQ"


def storage(tmp_path, *args):
    cfg = tmp_path / "server.properties"
    if not cfg.exists():
        cfg.write_text(f"node.id=1\nlog.dirs={tmp_path / 'a'},{tmp_path / 'b'}\n"
                       f"metadata.log.dir={tmp_path / 'meta'}\n")  # fmt: skip
    return subprocess.run(
        [sys.executable, "-m", "kafka_rpc.cli", "storage", "format", "-t", CID, "-c", str(cfg),
         *args], capture_output=True, text=True, timeout=30,
    )  # fmt: skip


def _levels(path) -> list[tuple[str, int]]:
    return [(r.name, r.feature_level) for r in read_bootstrap(path).records
            if type(r).__spec_name__ == "FeatureLevelRecord"]  # fmt: skip


def test_default_format_writes_kafkas_bootstrap_checkpoint_everywhere(tmp_path):
    r = storage(tmp_path, "--add-scram", "SCRAM-SHA-256=[name=alice,password=alice-secret]")
    assert r.returncode == 0, r.stderr
    assert f"Formatting metadata directory {tmp_path / 'meta'} with metadata.version 4.2-IV1." in (
        r.stdout)
    files = [tmp_path / d / BOOTSTRAP_FILE for d in ("a", "b", "meta")]
    assert len({tuple(read_bootstrap(f.parent).records) for f in files}) == 1
    assert not any((tmp_path / d / (BOOTSTRAP_FILE + ".tmp")).exists() for d in ("a", "b", "meta"))
    batches = decode_batches((tmp_path / "meta" / BOOTSTRAP_FILE).read_bytes())
    # header control batch, one data batch, footer control batch; epoch 0, offsets from 0
    assert [b.is_control for b in batches] == [True, False, True]
    assert control_type(batches[0].keys[0]) == CONTROL_SNAPSHOT_HEADER
    head = codec.decode("SnapshotHeaderRecord", 0, batches[0].records[0])
    assert (head.version, head.last_contained_log_timestamp) == (0, 0)
    assert control_type(batches[2].keys[0]) == CONTROL_SNAPSHOT_FOOTER
    assert [b.base_offset for b in batches] == [0, 1, 1 + len(batches[1].records)]
    assert all(b.epoch == 0 for b in batches)
    recs = [codec.decode_record(v) for v in batches[1].records]
    assert all(version == 0 for _, version in recs)
    assert [(r.name, r.feature_level) for r, _ in recs[:-1]] == [
        ("metadata.version", 29), ("group.version", 1), (CHUNKS_VERSION, 1),
        (DISKLESS_VERSION, 1), ("share.version", 1), ("streams.version", 1),
        ("transaction.version", 2),
    ]  # fmt: skip
    assert type(recs[-1][0]).__spec_name__ == "UserScramCredentialRecord"


def test_release_version_feature_and_kafka_compatible(tmp_path):
    r = storage(tmp_path, "--release-version", "3.9", "--feature", "group.version=1",
                "--kafka-compatible")  # fmt: skip
    assert r.returncode == 0, r.stderr
    assert "with metadata.version 3.9-IV0." in r.stdout
    assert _levels(tmp_path / "meta") == [("metadata.version", 21), ("group.version", 1)]


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("--release-version", "4.4-IV2"), "Unknown metadata.version '4.4-IV2'. Supported "
         "metadata.version are: 3.3-IV3"),
        (("--feature", "foo.version=1"), "Unsupported feature: foo.version. Supported features "
         "are: eligible.leader.replicas.version"),
        (("--feature", "group.version=x"), "Can't parse feature=level string group.version=x: "
         "unable to parse x as a short."),
        (("--feature", "metadata.version=25"), "Use --release-version instead of --feature "
         "metadata.version=X to avoid ambiguity."),
        (("--release-version", "3.4", "--add-scram", "SCRAM-SHA-256=[name=a,password=b]"),
         "SCRAM is only supported in metadata.version 3.5-IV2 or later."),
    ],
)  # fmt: skip
def test_format_refusals_leave_nothing_behind(tmp_path, args, message):
    r = storage(tmp_path, *args)
    assert r.returncode == 1 and message in r.stderr, (r.stdout, r.stderr)
    assert not (tmp_path / "meta").exists() and not (tmp_path / "a").exists()
