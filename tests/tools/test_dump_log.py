"""``kafka-rpc dump-log`` (Kafka's kafka-dump-log.sh) on files written by FileLog and by a real
single-node ``kafka-rpc serve``."""

from __future__ import annotations

import io
import json
import re
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

from kafka_rpc.protocol import codec
from kafka_rpc.protocol.record_batch import (
    CONTROL_LEADER_CHANGE,
    CONTROL_SNAPSHOT_FOOTER,
    CONTROL_SNAPSHOT_HEADER,
    encode_batch,
    encode_control_batch,
)
from kafka_rpc.raft.api import OffsetAndEpoch
from kafka_rpc.raft.file_log import FileLog, segment_path, snapshot_path
from kafka_rpc.tools.dump_log import dump_files
from tests.waiting import wait_until

TS = 1_700_000_000_000
TOPIC_ID = uuid.UUID("6f0e8e2f-6bb4-4c57-9b5e-2f1a3c1f9a10")


def rec(spec: str, **fields) -> bytes:
    return codec.encode_record(codec.message_class(spec)(**fields))


def leader_change(leader: int = 1) -> bytes:
    mod = codec.module("LeaderChangeMessage")
    msg = mod.MESSAGE(leader_id=leader, voters=(mod.Voter(voter_id=1),),
                      granting_voters=(mod.Voter(voter_id=1),))  # fmt: skip
    return codec.encode(msg, 0)


def write_log(d: Path) -> FileLog:
    log = FileLog(d)
    log.append([encode_control_batch(0, 1, [(CONTROL_LEADER_CHANGE, leader_change())], TS)])
    log.append([encode_batch(1, 1, [rec("FeatureLevelRecord", name="metadata.version",
                                        feature_level=25)], TS + 1)])  # fmt: skip
    log.append([encode_batch(2, 1, [rec("TopicRecord", name="t1", topic_id=TOPIC_ID),
                                    rec("NoOpRecord")], TS + 2)])  # fmt: skip
    log.flush()
    return log


def run(files, **kw) -> tuple[int, list[str]]:
    out = io.StringIO()
    rc = dump_files([str(f) for f in files], out=out, **kw)
    return rc, out.getvalue().splitlines()


def test_segment_batches_only(tmp_path):
    log = write_log(tmp_path)
    seg = segment_path(tmp_path, 0)
    rc, lines = run([seg])
    assert rc == 0
    assert lines[0] == f"Dumping {seg}"
    assert lines[1] == "Log starting offset: 0"
    assert len(lines) == 5  # three batches, no records
    first = lines[2]
    crc = int.from_bytes(log.read(0, 1 << 20)[17:21], "big")
    size0 = next(iter(log.batches(0, 1))).size
    assert first == (
        "baseOffset: 0 lastOffset: 0 count: 1 baseSequence: -1 lastSequence: -1 producerId: -1 "
        "producerEpoch: -1 partitionLeaderEpoch: 1 isTransactional: false isControl: true "
        f"deleteHorizonMs: OptionalLong.empty position: 0 CreateTime: {TS} size: {size0} "
        f"magic: 2 compresscodec: none crc: {crc} isvalid: true"
    )
    assert lines[3].startswith("baseOffset: 1 lastOffset: 1 count: 1 ")
    assert f" position: {size0} " in lines[3]
    assert "isControl: false" in lines[3]
    assert lines[4].startswith("baseOffset: 2 lastOffset: 3 count: 2 ")
    log.close()


def test_segment_with_cluster_metadata_decoder(tmp_path):
    write_log(tmp_path).close()
    rc, lines = run([segment_path(tmp_path, 0)], metadata_decoder=True)
    assert rc == 0
    records = [ln for ln in lines if ln.startswith("| ")]
    assert len(records) == 4
    lc = records[0]
    assert lc.startswith(f"| offset: 0 CreateTime: {TS} keySize: 4 valueSize: ")
    assert " sequence: -1 headerKeys: [] LeaderChange: " in lc
    body = json.loads(lc.split("LeaderChange: ", 1)[1])
    assert body == {"version": 0, "leaderId": 1, "voters": [{"voterId": 1}],
                    "grantingVoters": [{"voterId": 1}]}  # fmt: skip
    fl = records[1]
    assert fl.startswith(f"| offset: 1 CreateTime: {TS + 1} keySize: -1 valueSize: ")
    payload = fl.split(" payload: ", 1)[1]
    assert payload == ('{"type":"FEATURE_LEVEL_RECORD","version":0,'
                       '"data":{"name":"metadata.version","featureLevel":25}}')  # fmt: skip
    topic = json.loads(records[2].split(" payload: ", 1)[1])
    assert topic == {"type": "TOPIC_RECORD", "version": 0,
                     "data": {"name": "t1", "topicId": "bw6OL2u0TFebXi8aPB-aEA"}}  # fmt: skip
    assert records[3].startswith(f"| offset: 3 CreateTime: {TS + 2} ")
    assert records[3].endswith('payload: {"type":"NO_OP_RECORD","version":0,"data":{}}')


def test_print_data_log_prints_raw_payloads(tmp_path):
    log = FileLog(tmp_path)
    log.append([encode_batch(0, 3, [b"hello", None], TS, keys=[b"k", None])])
    log.close()
    rc, lines = run([segment_path(tmp_path, 0)], print_data_log=True)
    assert rc == 0
    assert lines[3] == ("| offset: 0 CreateTime: 1700000000000 keySize: 1 valueSize: 5 "
                        "sequence: -1 headerKeys: [] key: k payload: hello")  # fmt: skip
    assert lines[4] == ("| offset: 1 CreateTime: 1700000000000 keySize: -1 valueSize: -1 "
                        "sequence: -1 headerKeys: []")  # fmt: skip


def test_snapshot_checkpoint(tmp_path):
    log = write_log(tmp_path)
    sid = OffsetAndEpoch(4, 1)
    w = log.create_snapshot(sid)
    hdr = codec.encode(codec.message_class("SnapshotHeaderRecord")(
        version=0, last_contained_log_timestamp=TS + 2), 0)  # fmt: skip
    ftr = codec.encode(codec.message_class("SnapshotFooterRecord")(version=0), 0)
    w.append(encode_control_batch(0, 1, [(CONTROL_SNAPSHOT_HEADER, hdr)], TS + 5).data)
    w.append(encode_batch(1, 1, [rec("FeatureLevelRecord", name="metadata.version",
                                     feature_level=25)], TS + 5).data)  # fmt: skip
    w.append(encode_control_batch(2, 1, [(CONTROL_SNAPSHOT_FOOTER, ftr)], TS + 5).data)
    w.freeze()
    log.close()
    path = snapshot_path(tmp_path, sid)
    rc, lines = run([path], metadata_decoder=True)
    assert rc == 0
    assert lines[:2] == [f"Dumping {path}", "Snapshot end offset: 4, epoch: 1"]
    recs = [ln for ln in lines if ln.startswith("| ")]
    assert recs[0].endswith(f'SnapshotHeader {{"version":0,"lastContainedLogTimestamp":{TS + 2}}}')
    assert '"type":"FEATURE_LEVEL_RECORD"' in recs[1]
    assert recs[2].endswith('SnapshotFooter {"version":0}')


def test_corrupt_batch_stops_that_file_and_exits_1(tmp_path):
    a, b = tmp_path / "a", tmp_path / "b"
    write_log(a).close()
    write_log(b).close()
    seg = segment_path(a, 0)
    data = bytearray(seg.read_bytes())
    first = int.from_bytes(data[8:12], "big") + 12
    data[first + 70] ^= 0xFF  # inside the second batch's records: its CRC no longer matches
    seg.write_bytes(bytes(data))
    rc, lines = run([seg, segment_path(b, 0)], metadata_decoder=True)
    assert rc == 1
    err = [ln for ln in lines if ln.startswith("Error:")]
    assert err == [f"Error: corrupt batch at position {first} in {seg.name}: "
                   f"CRC mismatch in the batch at offset 1"]  # fmt: skip
    i = lines.index(err[0])
    assert lines[i - 1].startswith("| offset: 0 ")  # the first batch was printed in full
    assert lines[i + 1] == f"Dumping {segment_path(b, 0)}"  # the next file is still dumped
    assert sum(ln.startswith("baseOffset: ") for ln in lines[i:]) == 3


def test_torn_tail_is_reported_not_an_error(tmp_path):
    write_log(tmp_path).close()
    seg = segment_path(tmp_path, 0)
    with open(seg, "ab") as f:
        f.write(b"\x00" * 30)
    rc, lines = run([seg])
    assert rc == 0
    assert lines[-1] == f"Found 30 invalid bytes at the end of {seg.name}"


def test_missing_and_unknown_files(tmp_path):
    other = tmp_path / "quorum-state"
    other.write_text("{}")
    rc, lines = run([tmp_path / "00000000000000000000.log", other])
    assert rc == 1
    assert lines[2].startswith("Error: cannot read ")
    assert lines[-1] == f"Ignoring unknown file {other}"


def test_cli_subcommand(tmp_path):
    write_log(tmp_path).close()
    seg = segment_path(tmp_path, 0)
    out = subprocess.run(
        [sys.executable, "-m", "kafka_rpc.cli", "dump-log", "--files", f"{seg},{seg}",
         "--cluster-metadata-decoder"],
        capture_output=True, text=True, timeout=30,
    )  # fmt: skip
    assert out.returncode == 0, out.stderr
    assert out.stdout.count(f"Dumping {seg}") == 2
    assert out.stdout.count('"type":"TOPIC_RECORD"') == 2


@pytest.mark.integration
def test_dump_a_running_servers_metadata_log(tmp_path):
    from tests.integration.test_cli import ServeProcess

    srv = ServeProcess(tmp_path, "--override", "metadata.max.idle.interval.ms=50")
    try:
        d = tmp_path / "data" / "__cluster_metadata-0"

        def two_noops():  # (rc, lines) of a dump of the live log once it holds two NoOps
            rc, lines = run(sorted(str(p) for p in d.glob("*.log")), metadata_decoder=True)
            return (rc, lines) if sum('"type":"NO_OP_RECORD"' in ln for ln in lines) >= 2 else None

        rc, lines = wait_until(two_noops, "two NoOps in the dumped log", timeout=15, interval=0.1)
    finally:
        srv.stop()
    assert rc == 0
    assert any(" LeaderChange: " in ln and '"leaderId":1' in ln for ln in lines)
    fl = [ln for ln in lines if '"type":"FEATURE_LEVEL_RECORD"' in ln]
    assert fl and '"name":"metadata.version"' in fl[0]
    assert all(re.match(r"(Dumping |Log starting offset: |baseOffset: |\| offset: )", ln)
               for ln in lines), lines  # fmt: skip
