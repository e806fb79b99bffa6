"""Checks of the message specs that come from the seed proposals (KIP-1164, KIP-1114) and of our own
keys 10102/10103, against the API-key table of message_specs/README.md.

The files are read as Kafka reads them (whole-line `//` comments allowed)."""

import json
import re
from pathlib import Path

import pytest

from codegen.model import FIELD_KEYS, TOP_KEYS  # the keys Kafka's generator accepts

SPEC_DIR = Path(__file__).resolve().parents[2] / "message_specs"

# name -> (apiKey, listeners); listeners only for requests.
APIS = {
    "InitDisklessTopics": (10093, ["broker"]),
    "CommitBatches": (10094, ["broker"]),
    "DeleteDisklessTopics": (10095, ["broker"]),
    "DeleteDisklessRecords": (10096, ["broker"]),
    "FindDisklessBatches": (10097, ["broker"]),
    "ListDisklessOffsets": (10098, ["broker"]),
    "AssignPartitionToBatchCoordinator": (10099, ["controller"]),
    "CreateChunks": (10100, ["broker", "controller"]),
    "AlterChunkAssignments": (10101, ["broker", "controller"]),  # errata: the tool goes to a broker
    "ListDisklessFilesToDelete": (10102, ["broker"]),
    "DeleteDisklessFiles": (10103, ["broker"]),
}

RECORDS = {
    "TopicPartitionToBatchCoordinatorMapping": 10029,
    "ChunkRecord": 10030,
    "ChunkChangeRecord": 10031,
}

FILES = sorted([f"{api}{kind}" for api in APIS for kind in ("Request", "Response")] + list(RECORDS))

PRIMITIVES = {
    "bool",
    "int8",
    "int16",
    "uint16",
    "int32",
    "uint32",
    "int64",
    "float64",
    "uuid",
    "string",
    "bytes",
    "records",
}
COMMENT = re.compile(r"^\s*//")


def load(name: str) -> dict:
    path = SPEC_DIR / f"{name}.json"
    text = path.read_text(encoding="utf-8")
    lines = text.splitlines()
    assert lines and COMMENT.match(lines[0]), f"{path.name}: must start with a // comment"
    return json.loads("\n".join(line for line in lines if not COMMENT.match(line)))


def walk(fields, path=()):
    """Yield (struct_path, fields_list) for the top level and every nested struct."""
    yield path, fields
    for field in fields:
        if "fields" in field:
            yield from walk(field["fields"], (*path, field["name"]))


def all_fields(spec):
    for _, fields in walk(spec.get("fields", [])):
        yield from fields


def struct_type_name(field):
    t = field["type"]
    t = t[2:] if t.startswith("[]") else t
    return None if t in PRIMITIVES else t


@pytest.fixture(scope="module")
def specs():
    return {name: load(name) for name in FILES}


def test_every_expected_file_exists():
    missing = [n for n in FILES if not (SPEC_DIR / f"{n}.json").is_file()]
    assert not missing


@pytest.mark.parametrize("name", FILES)
def test_file_name_is_spec_name(specs, name):
    assert specs[name]["name"] == name


@pytest.mark.parametrize("name", FILES)
def test_only_known_keys(specs, name):
    spec = specs[name]
    assert set(spec) <= TOP_KEYS, set(spec) - TOP_KEYS
    for field in all_fields(spec):
        assert set(field) <= FIELD_KEYS, (field["name"], set(field) - FIELD_KEYS)


@pytest.mark.parametrize("api", sorted(APIS))
def test_request_response_pair(specs, api):
    key, listeners = APIS[api]
    req, resp = specs[f"{api}Request"], specs[f"{api}Response"]
    assert req["type"] == "request" and req["name"].endswith("Request")
    assert resp["type"] == "response" and resp["name"].endswith("Response")
    assert req["apiKey"] == resp["apiKey"] == key
    assert req["listeners"] == listeners
    assert "listeners" not in resp
    for spec in (req, resp):
        assert spec["validVersions"] == "0"
        assert spec["flexibleVersions"] == "0+"


def test_api_keys_unique(specs):
    keys = [specs[f"{api}Request"]["apiKey"] for api in APIS]
    assert len(keys) == len(set(keys))


@pytest.mark.parametrize("name", sorted(RECORDS))
def test_metadata_records(specs, name):
    spec = specs[name]
    assert spec["type"] == "metadata"
    assert spec["apiKey"] == RECORDS[name]
    assert spec["flexibleVersions"] == "0+"
    assert "listeners" not in spec


@pytest.mark.parametrize("name", FILES)
def test_every_field_has_about(specs, name):
    for field in all_fields(specs[name]):
        assert isinstance(field.get("about"), str) and field["about"].strip(), field["name"]


@pytest.mark.parametrize("name", FILES)
def test_field_names_unique_per_struct(specs, name):
    for path, fields in walk(specs[name].get("fields", [])):
        names = [f["name"] for f in fields]
        assert len(names) == len(set(names)), (path, names)


@pytest.mark.parametrize("name", FILES)
def test_tags_unique_and_contiguous(specs, name):
    for path, fields in walk(specs[name].get("fields", [])):
        tags = [f["tag"] for f in fields if "tag" in f]
        assert sorted(tags) == list(range(len(tags))), (path, tags)
        for f in fields:
            assert ("tag" in f) == ("taggedVersions" in f), f["name"]


@pytest.mark.parametrize("name", FILES)
def test_struct_names_unique(specs, name):
    seen = [struct_type_name(f) for f in all_fields(specs[name]) if "fields" in f]
    assert None not in seen
    assert len(seen) == len(set(seen)), seen


@pytest.mark.parametrize("name", FILES)
def test_nullable_only_where_allowed(specs, name):
    for field in all_fields(specs[name]):
        if "nullableVersions" in field:
            t = field["type"]
            assert (
                t.startswith("[]") or t in {"string", "bytes", "records"} or struct_type_name(field)
            )


def test_throttle_time_first_in_our_responses(specs):
    for api in (
        "CreateChunks",
        "AlterChunkAssignments",
        "ListDisklessFilesToDelete",
        "DeleteDisklessFiles",
    ):
        assert specs[f"{api}Response"]["fields"][0]["name"] == "ThrottleTimeMs"


def test_no_map_key_on_chunk_topic_names(specs):
    for name in ("CreateChunksRequest", "AlterChunkAssignmentsRequest"):
        assert not any(f.get("mapKey") for f in all_fields(specs[name]))


def test_assign_result_struct_not_reusing_list_offsets_name(specs):
    names = {
        struct_type_name(f) for f in all_fields(specs["AssignPartitionToBatchCoordinatorResponse"])
    }
    assert "ListDisklessOffsetsTopicPartitionResult" not in names
