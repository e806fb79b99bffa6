"""`kafka-rpc metadata-quorum add-controller / remove-controller / describe`: what Kafka's
MetadataQuorumCommand reads from the new controller's properties file, its refusals, and its
output lines (tests/integration/test_metadata_quorum_cli.py sends the RPCs to a server)."""

from __future__ import annotations

import subprocess
import sys
import uuid
from types import SimpleNamespace as NS

import pytest

from kafka_rpc.cli.metadata_quorum import (
    NewController,
    TerseFailure,
    _quorum_replication_lines,
    _quorum_status_lines,
    added_line,
    error_text,
    read_new_controller,
    removed_line,
)
from kafka_rpc.protocol.uuids import parse_uuid_text
from kafka_rpc.protocol.uuids import uuid_from_kafka_string as kafka_uuid
from kafka_rpc.storage import meta_properties

DIR_ID = "ukQq6BGlRFu4HJt6cG3Obg"


def _controller(tmp_path, with_meta=True, **props) -> str:
    meta = tmp_path / "meta"
    base = {"process.roles": "controller", "node.id": "2", "log.dirs": f"{meta},{tmp_path}/b",
            "controller.listener.names": "CONTROLLER",
            "listeners": "CONTROLLER://127.0.0.1:19094"}  # fmt: skip
    base.update(props)
    base = {k: v for k, v in base.items() if v is not None}
    if with_meta:
        meta_properties.write(meta, meta_properties.MetaProperties(1, "c", 2, DIR_ID))
    path = tmp_path / "controller.properties"
    path.write_text("".join(f"{k}={v}\n" for k, v in base.items()))
    return str(path)


def test_reads_the_new_controller_as_kafka(tmp_path):
    c = read_new_controller(_controller(tmp_path))
    assert c == NewController(2, parse_uuid_text(DIR_ID), (("CONTROLLER", "127.0.0.1", 19094),))
    assert added_line(c, False) == (f"Added controller 2 with directory id {DIR_ID} and "
                                    "endpoints: CONTROLLER://127.0.0.1:19094")  # fmt: skip
    assert added_line(c, True).startswith("DRY RUN of adding controller 2 with directory id")


def test_endpoints_advertised_override_localhost_ipv6_and_order(tmp_path):
    path = _controller(
        tmp_path,
        **{"controller.listener.names": "c2,CONTROLLER",
           "listeners": "CONTROLLER://:19094,C2://[::1]:19095,PLAINTEXT://:9092",
           "advertised.listeners": "CONTROLLER://ctl.example:29094"},
    )  # fmt: skip
    c = read_new_controller(path)
    assert c.endpoints == (("C2", "::1", 19095), ("CONTROLLER", "ctl.example", 29094))
    assert added_line(c, False).endswith(
        "endpoints: C2://[::1]:19095, CONTROLLER://ctl.example:29094"
    )
    empty = read_new_controller(_controller(tmp_path, listeners="CONTROLLER://:19094"))
    assert empty.endpoints == (("CONTROLLER", "localhost", 19094),)


def test_metadata_log_dir_wins_and_log_dir_is_not_read(tmp_path):
    other = tmp_path / "other"
    meta_properties.write(
        other, meta_properties.MetaProperties(1, "c", 2, "L1puKPfrRc6kkNmYSz0nnQ")
    )
    c = read_new_controller(_controller(tmp_path, **{"metadata.log.dir": str(other)}))
    assert c.directory_id == parse_uuid_text("L1puKPfrRc6kkNmYSz0nnQ")
    with pytest.raises(TerseFailure) as e:
        read_new_controller(_controller(tmp_path, **{"log.dirs": None, "log.dir": str(other)}))
    assert str(e.value) == ("Neither metadata.log.dir nor log.dirs were found. Is this a valid "
                            "controller configuration file?")  # fmt: skip


@pytest.mark.parametrize(
    ("props", "with_meta", "message"),
    [
        ({"node.id": None}, True,
         "node.id not found in configuration file. Is this a valid controller configuration file?"),
        ({"node.id": "-3"}, True,
         "node.id was negative in configuration file. Is this a valid controller configuration "
         "file?"),
        ({"node.id": "two"}, True, 'For input string: "two"'),
        ({"process.roles": "broker"}, True,
         "process.roles did not contain 'controller' in configuration file. Is this a valid "
         "controller configuration file?"),
        ({}, False, "Unable to read meta.properties from "),
        ({"controller.listener.names": None}, True,
         "controller.listener.names was not found. Is this a valid controller configuration "
         "file?"),
        ({"controller.listener.names": "CTL"}, True,
         "Cannot find information about controller listener name: CTL"),
    ],
)  # fmt: skip
def test_refusals_are_kafkas(tmp_path, props, with_meta, message):
    with pytest.raises((TerseFailure, ValueError)) as e:
        read_new_controller(_controller(tmp_path, with_meta, **props))
    assert str(e.value).startswith(message)


def test_a_directory_without_a_directory_id(tmp_path):
    path = _controller(tmp_path, with_meta=False)
    meta_properties.write(tmp_path / "meta", meta_properties.MetaProperties(1, "c", 2, None))
    with pytest.raises(TerseFailure) as e:
        read_new_controller(path)
    assert str(e.value) == f"No directory id found in {tmp_path / 'meta'}"


def test_removed_line_is_kafka_4_4s():
    d = parse_uuid_text(DIR_ID)
    assert removed_line(3, d, False) == f"Removed KRaft controller 3 with directory id {DIR_ID}"
    assert removed_line(3, d, True) == (f"DRY RUN of removing KRaft controller 3 with directory "
                                        f"id {DIR_ID}")  # fmt: skip


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("A" * 25, "Input string with prefix `" + "A" * 24 + "` is too long to be decoded as a "
         "base64 UUID"),
        ("AAAA", "Input string `AAAA` decoded as 3 bytes, which is not equal to the expected 16 "
         "bytes of a base64-encoded UUID"),
        ("ukQq6BGlRFu4HJt6cG3Ob.", "Illegal base64 character 2e"),
    ],
)  # fmt: skip
def test_kafka_uuid_messages(text, message):
    with pytest.raises(ValueError) as e:
        kafka_uuid(text)
    assert str(e.value) == message
    assert kafka_uuid(DIR_ID) == parse_uuid_text(DIR_ID)


def test_error_text_is_the_exception_kafkas_tool_prints():
    assert error_text(126, "The voter id for ReplicaKey(id=2) is already part of the set") == (
        "org.apache.kafka.common.errors.DuplicateVoterException: The voter id for "
        "ReplicaKey(id=2) is already part of the set")  # fmt: skip
    assert error_text(127, None) == ("org.apache.kafka.common.errors.VoterNotFoundException: "
                                     "The voter is not part of the set of voters.")  # fmt: skip
    assert (
        error_text(7, None) == "org.apache.kafka.common.errors.TimeoutException: The request "
        "timed out."
    )


def _replica(rid, dir_id, leo, fetch=-1, caught=-1):
    return NS(replica_id=rid, replica_directory_id=dir_id, log_end_offset=leo,
              last_fetch_timestamp=fetch, last_caught_up_timestamp=caught)  # fmt: skip


def test_status_lines_omit_zero_directory_ids_and_missing_endpoints():
    d1, d4 = parse_uuid_text(DIR_ID), uuid.UUID(int=0)
    p = NS(leader_id=1, leader_epoch=5, high_watermark=90,
           current_voters=(_replica(1, d1, 100, 5, 1000), _replica(2, d4, 95, 5, 700)),
           observers=(_replica(4, d1, 10),))  # fmt: skip
    nodes = (NS(node_id=1, listeners=(NS(name="CONTROLLER", host="::1", port=9093),)),)
    lines = _quorum_status_lines("cid", p, nodes)
    assert lines == [
        "ClusterId:              cid",
        "LeaderId:               1",
        "LeaderEpoch:            5",
        "HighWatermark:          90",
        "MaxFollowerLag:         5",  # the leader's log end offset, not the high watermark
        "MaxFollowerLagTimeMs:   300",
        f'CurrentVoters:          [{{"id": 1, "directoryId": "{DIR_ID}", "endpoints": '
        '["CONTROLLER://[::1]:9093"]}, {"id": 2}]',
        f'CurrentObservers:       [{{"id": 4, "directoryId": "{DIR_ID}"}}]',
    ]


def test_replication_table_is_kafkas():
    d1, z = parse_uuid_text(DIR_ID), uuid.UUID(int=0)
    p = NS(leader_id=2, high_watermark=0,
           current_voters=(_replica(1, z, 95, 900, 800), _replica(2, d1, 100, 1000, 1000)),
           observers=(_replica(14, d1, 101),))  # fmt: skip
    lines = _quorum_replication_lines(p, now_ms=1500)
    assert lines == [
        "NodeId\tDirectoryId           \tLogEndOffset\tLag\tLastFetchTimestamp\t"
        "LastCaughtUpTimestamp\tStatus  \t",
        f"2     \t{DIR_ID}\t100         \t0  \t1000              \t1000                 \t"
        "Leader  \t",
        "1     \tAAAAAAAAAAAAAAAAAAAAAA\t95          \t5  \t900               \t800       "
        "           \tFollower\t",
        f"14    \t{DIR_ID}\t101         \t-1 \t-1                \t-1                   \t"
        "Observer\t",
    ]  # fmt: skip
    human = _quorum_replication_lines(p, human_readable=True, now_ms=1500)
    assert human[1].split("\t")[4:6] == ["500 ms ago        ", "500 ms ago           "]
    with pytest.raises(ValueError, match="possible drift in system clock"):
        _quorum_replication_lines(p, human_readable=True, now_ms=950)


def cli(*args):
    return subprocess.run([sys.executable, "-m", "kafka_rpc.cli", "metadata-quorum", *args],
                          capture_output=True, text=True, timeout=60)  # fmt: skip


def test_cli_refusals_and_dry_runs_send_nothing(tmp_path):
    # port 9 (discard): nothing listens, so a request would fail; dry runs send nothing
    where = ("--bootstrap-controller", "127.0.0.1:9", "--timeout", "0.5")
    r = cli(*where, "add-controller")
    assert r.returncode == 1 and r.stderr.strip() == (
        "You must supply the configuration file of the controller you are adding when using "
        "add-controller.")  # fmt: skip
    r = cli(*where, "--command-config", str(tmp_path / "nope"), "add-controller")
    assert r.returncode == 1 and r.stderr.strip() == (
        f"Properties file {tmp_path / 'nope'} does not exist.")  # fmt: skip
    r = cli(*where, "--command-config", _controller(tmp_path), "add-controller", "--dry-run")
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == (f"DRY RUN of adding controller 2 with directory id {DIR_ID} and "
                                "endpoints: CONTROLLER://127.0.0.1:19094")  # fmt: skip
    r = cli(*where, "remove-controller", "-i", "3", "-d", DIR_ID, "--dry-run")
    assert r.returncode == 0 and r.stdout == (f"DRY RUN of removing KRaft controller 3 with "
                                              f"directory id {DIR_ID}\n")  # fmt: skip
    r = cli(*where, "remove-controller", "-i", "-1", "-d", DIR_ID)
    assert r.returncode == 1 and r.stderr.strip() == "Invalid negative --controller-id: -1"
    r = cli(*where, "remove-controller", "-i", "3", "-d", "AAAA")
    assert r.returncode == 1 and r.stderr.strip() == (
        "Failed to parse --controller-directory-id: Input string `AAAA` decoded as 3 bytes, "
        "which is not equal to the expected 16 bytes of a base64-encoded UUID")  # fmt: skip
    r = cli(*where, "remove-controller", "-d", DIR_ID)
    assert r.returncode == 1 and "--controller-id/-i" in r.stderr
    r = cli(*where, "describe")
    assert r.returncode == 1 and r.stderr.strip() == (
        "One of --status or --replication must be specified with describe sub-command"
    )
    r = cli(*where, "describe", "--status", "--replication")
    assert r.returncode == 1 and r.stderr.strip() == (
        "Only one of --status or --replication should be specified with describe sub-command"
    )
    r = cli(*where, "describe", "--status", "--human-readable")
    assert r.returncode == 1 and r.stderr.strip() == (
        "The option --human-readable is only supported along with --replication"
    )
    r = cli(*where, "remove-controller", "-i", "3", "-d", DIR_ID)
    assert r.returncode == 1 and r.stderr.startswith("kafka-rpc: RemoveRaftVoter failed")
