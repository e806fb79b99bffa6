"""`kafka-rpc storage format` for a dynamic quorum (KIP-853): --standalone, --initial-controllers,
--no-initial-controllers with Kafka's StorageTool rules, messages and exit codes, the listed
voter's directory id in meta.properties, and the bootstrap snapshot
`__cluster_metadata-0/00000000000000000000-0000000000.checkpoint` laid out as Kafka 4.4's
Formatter writes it (tests/kafka/test_storage_interop.py compares the bytes with Kafka's)."""

from __future__ import annotations

import stat
import subprocess
import sys
import uuid

import pytest

from kafka_rpc.config import load_config
from kafka_rpc.protocol import codec
from kafka_rpc.protocol.record_batch import control_type, decode_batches
from kafka_rpc.protocol.uuids import parse_uuid_text
from kafka_rpc.raft.voters import KRAFT_VERSION, KRAFT_VOTERS, SNAPSHOT_FOOTER, SNAPSHOT_HEADER
from kafka_rpc.storage import meta_properties
from kafka_rpc.storage.bootstrap import BOOTSTRAP_SNAPSHOT, read_bootstrap
from kafka_rpc.storage.formatter import ensure_cluster_id
from kafka_rpc.storage.initial_controllers import (
    java_host_string,
    parse_dynamic_voter,
    parse_dynamic_voters,
)

pytestmark = pytest.mark.integration

CID = "q1Sh-9_ISia_zwGINzRvyQ"
D1, D2, D3 = "ukQq6BGlRFu4HJt6cG3Obg", "L1puKPfrRc6kkNmYSz0nnQ", "JEXY6aqzQY-32P5TStzaFg"

CONTROLLER = {
    "process.roles": "controller",
    "node.id": "1",
    "controller.quorum.bootstrap.servers": "127.0.0.1:19093",
    "controller.listener.names": "CONTROLLER",
    "listeners": "CONTROLLER://127.0.0.1:19093",
}


def _config(tmp_path, props: dict) -> str:
    props = {"log.dirs": f"{tmp_path / 'a'},{tmp_path / 'meta'}",
             "metadata.log.dir": str(tmp_path / "meta"), **props}  # fmt: skip
    cfg = tmp_path / "server.properties"
    cfg.write_text("".join(f"{k}={v}\n" for k, v in props.items()))
    return str(cfg)


def storage(tmp_path, props: dict, *args):
    return subprocess.run(
        [sys.executable, "-m", "kafka_rpc.cli", "storage", "format", "-t", CID, "-c",
         _config(tmp_path, props), *args], capture_output=True, text=True, timeout=60,
    )  # fmt: skip


def _snapshot(tmp_path):
    """(header controls [(type, decoded)], data record values, footer batch) of the bootstrap
    snapshot in the metadata directory, after checking the layout every snapshot has."""
    path = tmp_path / "meta" / BOOTSTRAP_SNAPSHOT
    assert not stat.S_IMODE(path.stat().st_mode) & 0o222  # frozen: read-only
    batches = decode_batches(path.read_bytes())
    assert all(b.epoch == 0 for b in batches)
    head, *data, foot = batches
    assert head.is_control and foot.is_control and not any(b.is_control for b in data)
    names = {KRAFT_VERSION: "KRaftVersionRecord", KRAFT_VOTERS: "VotersRecord",
             SNAPSHOT_HEADER: "SnapshotHeaderRecord"}  # fmt: skip
    controls = [(control_type(k), codec.decode(names[control_type(k)], 0, v))
                for k, v in zip(head.keys, head.records, strict=True)]  # fmt: skip
    assert controls[0][0] == SNAPSHOT_HEADER and controls[0][1].version == 0
    assert controls[0][1].last_contained_log_timestamp > 0  # the wall clock at format
    offset = head.base_offset + len(head.records)
    values = []
    for b in data:
        assert b.base_offset == offset
        offset += len(b.records)
        values += b.records
    assert foot.base_offset == offset and control_type(foot.keys[0]) == SNAPSHOT_FOOTER
    return controls, values, foot


def _bootstrap_values(tmp_path) -> list[bytes]:
    batches = decode_batches((tmp_path / "meta" / "bootstrap.checkpoint").read_bytes())
    return [v for b in batches if not b.is_control for v in b.records]


def test_standalone_writes_the_voter_and_its_directory_id(tmp_path):
    r = storage(tmp_path, CONTROLLER, "--standalone", "--add-scram",
                "SCRAM-SHA-256=[name=alice,password=alice-secret]")  # fmt: skip
    assert r.returncode == 0, r.stderr
    assert (f"Formatting dynamic metadata voter directory {tmp_path / 'meta'} with "
            "metadata.version 4.2-IV1.") in r.stdout  # fmt: skip
    assert f"Formatting data directory {tmp_path / 'a'} with metadata.version" in r.stdout
    assert "kraft.version=1" in r.stdout
    controls, values, _ = _snapshot(tmp_path)
    assert [t for t, _ in controls] == [SNAPSHOT_HEADER, KRAFT_VERSION, KRAFT_VOTERS]
    kv = controls[1][1]
    assert (kv.version, kv.kraft_version) == (0, 1)
    voters = controls[2][1]
    assert voters.version == 0 and len(voters.voters) == 1
    (v,) = voters.voters
    assert v.voter_id == 1 and v.voter_directory_id.int != 0
    assert [(e.name, e.host, e.port) for e in v.endpoints] == [("CONTROLLER", "127.0.0.1", 19093)]
    kf = v.kraft_version_feature
    assert (kf.min_supported_version, kf.max_supported_version) == (0, 1)
    # the metadata directory's directory.id is the voter's; the data directory has its own
    meta = meta_properties.read(tmp_path / "meta")
    data = meta_properties.read(tmp_path / "a")
    assert parse_uuid_text(meta.directory_id) == v.voter_directory_id
    assert data.directory_id != meta.directory_id
    assert (meta.cluster_id, meta.node_id, meta.version) == (CID, 1, 1)
    # the bootstrap records follow the control state, as in bootstrap.checkpoint
    assert values == _bootstrap_values(tmp_path) and len(values) >= 2
    assert not (tmp_path / "a" / BOOTSTRAP_SNAPSHOT).exists()
    # our start-up reads the same bootstrap metadata from it
    assert read_bootstrap(tmp_path / "meta").levels["metadata.version"] == 29


def test_standalone_on_a_wildcard_listener_is_localhost(tmp_path):
    props = {**CONTROLLER, "listeners": "CONTROLLER://0.0.0.0:19093"}
    assert storage(tmp_path, props, "-s").returncode == 0
    (v,) = _snapshot(tmp_path)[0][2][1].voters
    assert [(e.host, e.port) for e in v.endpoints] == [("localhost", 19093)]


def test_initial_controllers_listed_and_not_listed(tmp_path):
    voters = f"1@127.0.0.1:19093:{D1},2@[::1]:19094:{D2},3@c3.example:19095:{D3}"
    r = storage(tmp_path, CONTROLLER, "--initial-controllers", voters)
    assert r.returncode == 0, r.stderr
    assert "Formatting dynamic metadata voter directory" in r.stdout
    assert meta_properties.read(tmp_path / "meta").directory_id == D1
    vr = _snapshot(tmp_path)[0][2][1]
    assert [(v.voter_id, v.voter_directory_id, v.endpoints[0].host, v.endpoints[0].port)
            for v in vr.voters] == [
        (1, parse_uuid_text(D1), "127.0.0.1", 19093),
        (2, parse_uuid_text(D2), "0:0:0:0:0:0:0:1", 19094),  # as Java's InetSocketAddress
        (3, parse_uuid_text(D3), "c3.example", 19095),
    ]  # fmt: skip
    # node 4 is not listed: it gets the voters too, but a directory id of its own
    other = tmp_path / "n4"
    other.mkdir()
    r = storage(other, {**CONTROLLER, "node.id": "4"}, "-I", voters)
    assert r.returncode == 0, r.stderr
    assert f"Formatting dynamic metadata directory {other / 'meta'}" in r.stdout
    assert meta_properties.read(other / "meta").directory_id not in (D1, D2, D3)
    assert _snapshot(other)[0][2][1] == vr


def test_no_initial_controllers_writes_kraft_version_1_and_no_voters(tmp_path):
    r = storage(tmp_path, CONTROLLER, "--no-initial-controllers")
    assert r.returncode == 0, r.stderr
    assert f"Formatting metadata directory {tmp_path / 'meta'}" in r.stdout
    controls, values, _ = _snapshot(tmp_path)
    assert [t for t, _ in controls] == [SNAPSHOT_HEADER, KRAFT_VERSION]
    assert controls[1][1].kraft_version == 1
    assert values == _bootstrap_values(tmp_path)


def test_broker_of_a_dynamic_quorum_needs_no_flag(tmp_path):
    broker = {"process.roles": "broker", "node.id": "7", "listeners": "PLAINTEXT://:9092",
              "controller.quorum.bootstrap.servers": "127.0.0.1:19093"}  # fmt: skip
    r = storage(tmp_path, broker)
    assert r.returncode == 0, r.stderr
    assert [t for t, _ in _snapshot(tmp_path)[0]] == [SNAPSHOT_HEADER, KRAFT_VERSION]


def test_static_voters_with_no_initial_controllers_stay_kraft_version_0(tmp_path):
    static = {**CONTROLLER, "controller.quorum.voters": "1@127.0.0.1:19093"}
    r = storage(tmp_path, static, "-N")
    assert r.returncode == 0, r.stderr
    assert "kraft.version=0" in r.stdout and "Formatting metadata directory" in r.stdout
    assert not (tmp_path / "meta" / BOOTSTRAP_SNAPSHOT).exists()


STATIC = {**CONTROLLER, "controller.quorum.voters": "1@127.0.0.1:19093"}
BROKER = {"process.roles": "broker", "node.id": "7", "listeners": "PLAINTEXT://:9092",
          "controller.quorum.bootstrap.servers": "127.0.0.1:19093"}  # fmt: skip


@pytest.mark.parametrize(
    ("props", "args", "message"),
    [
        (STATIC, ("--standalone",), "You cannot specify controller.quorum.voters and format the "
         "node with --initial-controllers or --standalone. If you want to use dynamic quorum, "
         "please remove controller.quorum.voters and specify controller.quorum.bootstrap.servers "
         "instead."),
        (STATIC, ("-I", f"1@h:1:{D1}"), "You cannot specify controller.quorum.voters"),
        (CONTROLLER, (), "Because controller.quorum.voters is not set on this controller, you "
         "must specify one of the following: --standalone, --initial-controllers, or "
         "--no-initial-controllers."),
        (BROKER, ("-s",), "You can only use --standalone on a controller."),
        (CONTROLLER, ("-s", "-f", "kraft.version=0"), "Cannot set kraft.version to 0 if "
         "controller.quorum.voters is empty and one of the flags --standalone, "
         "--initial-controllers, or --no-initial-controllers is used. For dynamic controllers "
         "support, try removing the --feature flag for kraft.version."),
        (STATIC, ("-f", "kraft.version=1"), "Cannot set kraft.version to 1 unless "
         "controller.quorum.voters is empty and one of the flags --standalone, "
         "--initial-controllers, or --no-initial-controllers is used. For dynamic controllers "
         "support, try using one of --standalone, --initial-controllers, or "
         "--no-initial-controllers and removing controller.quorum.voters."),
        (CONTROLLER, ("-N", "-f", "kraft.version=2"),
         "No feature:kraft.version with feature level 2"),
        (CONTROLLER, ("-I", ""), "No voters given."),
        (CONTROLLER, ("-I", f"1@h:1:{D1},1@g:2:{D2}"), "Node id 1 was specified more than once."),
        (CONTROLLER, ("-I", "1@h:1:nope"), "Failed to parse directory ID in dynamic voter string."),
        (CONTROLLER, ("-s", "-N"),
         "argument --no-initial-controllers/-N: not allowed with argument --standalone/-s"),
        (CONTROLLER, ("-I", f"1@h:1:{D1}", "-s"),
         "argument --standalone/-s: not allowed with argument --initial-controllers/-I"),
    ],
)  # fmt: skip
def test_refusals_exit_1_with_kafkas_message_and_write_nothing(tmp_path, props, args, message):
    r = storage(tmp_path, props, *args)
    assert r.returncode == 1 and message in r.stderr, (r.stdout, r.stderr)
    assert not (tmp_path / "meta").exists() and not (tmp_path / "a").exists()


def test_with_kraft_version_1_given_explicitly(tmp_path):
    r = storage(tmp_path, CONTROLLER, "-s", "-f", "kraft.version=1")
    assert r.returncode == 0, r.stderr
    assert _snapshot(tmp_path)[0][1][1].kraft_version == 1


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("h:1:x", "No @ found in dynamic voter string."),
        ("@h:1:x", "Invalid @ at beginning of dynamic voter string."),
        ("x@h:1:x", "Failed to parse node id in dynamic voter string."),
        ("-1@h:1:x", "Invalid negative node id -1 in dynamic voter string."),
        ("1@", "No hostname found after node id."),
        ("1@[::1:1:x", "Hostname began with left bracket, but no right bracket was found."),
        ("1@h", "No colon following hostname could be found."),
        ("1@[::1]1:x", "Port section must start with a colon."),
        ("1@h:1", "No colon following port could be found."),
        ("1@h:p:x", "Failed to parse port in dynamic voter string."),
        ("1@h:65536:x", "Invalid port 65536 in dynamic voter string."),
        ("1@h:1:" + "A" * 21, "Failed to parse directory ID in dynamic voter string."),
    ],
)
def test_dynamic_voter_parse_errors_are_kafkas(text, message):
    with pytest.raises(ValueError) as e:
        parse_dynamic_voter(text)
    assert str(e.value) == message


def test_dynamic_voters_parse():
    vs = parse_dynamic_voters(f" 3@[fe80::1]:0:{D3},,1@h.example:65535:{D1} ")
    assert list(vs) == [1, 3]
    assert (vs[3].host, vs[3].port, vs[3].directory_id) == ("fe80::1", 0, parse_uuid_text(D3))
    assert str(vs[3]) == f"3@[fe80::1]:0:{D3}" and str(vs[1]) == f"1@h.example:65535:{D1}"
    assert java_host_string("::ffff:10.0.0.1") == "10.0.0.1"
    assert java_host_string("fe80::a:0:1") == "fe80:0:0:0:0:a:0:1"
    assert java_host_string("10.1.2.3") == "10.1.2.3" and java_host_string("h") == "h"


def test_serve_formats_a_dynamic_quorum_as_no_initial_controllers(tmp_path):
    cfg = load_config(_config(tmp_path, {**CONTROLLER, "node.id": "3"}))
    cid = ensure_cluster_id(cfg)
    assert meta_properties.read(tmp_path / "meta").cluster_id == cid
    assert [t for t, _ in _snapshot(tmp_path)[0]] == [SNAPSHOT_HEADER, KRAFT_VERSION]
    assert uuid.UUID(int=0) != meta_properties.metadata_directory_id(tmp_path / "meta")
