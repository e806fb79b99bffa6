"""Upstream versions stay Kafka's: our specs against the JSON specs inside Kafka's own jars.

For every spec we share with Apache Kafka (``tests/kafka/test_codec_oracle.py``'s ``SHARED``) and
each pinned release (newest and oldest), every version both define has exactly the schema
Kafka's generator built that release from. Per version and per field (recursively):

- *wire facts, strict*: the fields present and their order, names, types (struct type names
  included), nullability, tag (or untagged), default (normalized: ``""`` is the type's default,
  integers compared as numbers), the field-level flexible override, and the message's flexible
  versions;
- *behaviour, strict*: ``ignorable`` (whether encoding a non-default value at a version without
  the field fails or drops it) and ``latestVersionUnstable``;
- *not wire, loose*: ``mapKey``, ``entityType`` and ``zeroCopy`` (Kafka's generated
  collections, ACL tooling and buffers; nothing on the wire) are compared too and agree today;
  a deliberate difference is listed in ``LOOSE`` (per spec and field) instead of failing.
  ``listeners`` are compared in ``test_listeners`` (the removed APIs are served nowhere);
  ``deprecatedVersions`` is not compared; ``about`` texts must be our own words
  (``test_about_texts_are_ours``).

Versions above a release's maximum are ours only where this file says so (``ABOVE_KAFKA``):
KIP-516's TopicId versions of Vote / BeginQuorumEpoch / EndQuorumEpoch, KIP-1114's Metadata v14
and PartitionRecord / PartitionChangeRecord v3, KIP-1164's FindCoordinator v7; for the oldest
release also versions a newer release has since defined (they are checked against that one).
"""

from __future__ import annotations

import re
from typing import Any

import pytest

from tests.kafka import kafka_specs
from tests.kafka.test_codec_oracle import ROOT, SHARED

pytestmark = pytest.mark.kafka

SPEC_DIR = ROOT / "message_specs"
RELEASES = ("newest", "oldest")

#: our versions above every pinned release's maximum (the proposals' additions)
ABOVE_KAFKA = {
    "VoteRequest": {3}, "VoteResponse": {3},
    "BeginQuorumEpochRequest": {2}, "BeginQuorumEpochResponse": {2},
    "EndQuorumEpochRequest": {2}, "EndQuorumEpochResponse": {2},
    "MetadataRequest": {14}, "MetadataResponse": {14},
    "PartitionRecord": {3}, "PartitionChangeRecord": {3},
    "FindCoordinatorRequest": {7}, "FindCoordinatorResponse": {7},
}  # fmt: skip
#: (spec, dotted field path) -> the non-wire keys allowed to differ from Kafka
LOOSE: dict[tuple[str, str], set[str]] = {}
#: APIs Kafka 4.0 removed (validVersions none upstream) whose 3.x codecs we keep for tests and
#: tools; compared by api key and type only
REMOVED_UPSTREAM = {"LeaderAndIsr", "StopReplica", "UpdateMetadata"}


def release_version(request, release: str) -> str:
    return request.getfixturevalue(f"kafka_{release}")


def load_ours(name: str) -> dict[str, Any]:
    return kafka_specs.parse_spec((SPEC_DIR / f"{name}.json").read_text())


def versions(text: Any) -> set[int]:
    rng = kafka_specs.version_range(None if text is None else str(text))
    return set() if rng is None else set(range(rng[0], min(rng[1], 200) + 1))


_INT = re.compile(r"^-?(0x[0-9a-fA-F]+|\d+)$")


def norm_default(field: dict[str, Any]) -> Any:
    """Kafka's default of a field as a comparable value (FieldSpec.fieldDefault's rules)."""
    t = field["type"]
    d = field.get("default", "")
    d = str(d).lower() if isinstance(d, bool) else str(d)
    if t.startswith("[]"):
        return "null" if d == "null" else "[]"
    if t in ("int8", "int16", "uint16", "int32", "uint32", "int64"):
        return int(d, 0) if _INT.match(d) else (0 if d == "" else d)
    if t == "float64":
        return float(d or 0)
    if t == "bool":
        return d.lower() == "true"
    if t == "uuid":
        return d or "AAAAAAAAAAAAAAAAAAAAAA"
    if t in ("string", "bytes", "records"):
        return d
    return "null" if d == "null" else ""  # struct


def struct_fields(spec: dict[str, Any], field: dict[str, Any]) -> list[dict[str, Any]] | None:
    if "fields" in field:
        return field["fields"]
    name = field["type"].removeprefix("[]")
    for common in spec.get("commonStructs", []):
        if common["name"] == name:
            return common["fields"]
    return None


def schema_at(spec: dict[str, Any], fields: list[dict[str, Any]], v: int, flexible: bool,
              path: str = "") -> list[tuple[str, dict[str, Any], list | None]]:  # fmt: skip
    """The fields present at ``v`` in wire-declaration order: ``(path, facts, children)``."""
    out = []
    for f in fields:
        tagged = versions(f.get("taggedVersions"))
        present = versions(f.get("versions", f.get("taggedVersions")))
        if v not in present:
            continue
        p = f"{path}{f['name']}"
        flex_override = f.get("flexibleVersions")
        facts = {
            "type": f["type"],
            "nullable": v in versions(f.get("nullableVersions")),
            "tag": int(f["tag"]) if v in tagged else None,  # 4.0 writes some tags as strings
            "default": norm_default(f),
            "compact": flexible if flex_override is None else v in versions(flex_override),
            "ignorable": bool(f.get("ignorable", False)),
            "mapKey": bool(f.get("mapKey", False)),
            "entityType": f.get("entityType"),
            "zeroCopy": bool(f.get("zeroCopy", False)),
        }
        sub = struct_fields(spec, f)
        children = None if sub is None else schema_at(spec, sub, v, flexible, p + ".")
        out.append((p, facts, children))
    return out


def schema_diff(name: str, ours: list, theirs: list, v: int) -> list[str]:
    diffs = []
    our_names = [p for p, _, _ in ours]
    their_names = [p for p, _, _ in theirs]
    if our_names != their_names:
        return [f"v{v}: fields {our_names} != Kafka's {their_names}"]
    for (p, a, ac), (_, b, bc) in zip(ours, theirs):
        loose = LOOSE.get((name, p), set())
        for key in a:
            if a[key] != b[key] and key not in loose:
                diffs.append(f"v{v} {p}: {key} ours={a[key]!r} Kafka={b[key]!r}")
        if (ac is None) != (bc is None):
            diffs.append(f"v{v} {p}: struct on one side only")
        elif ac is not None:
            diffs += schema_diff(name, ac, bc, v)
    return diffs


@pytest.mark.parametrize("release", RELEASES)
@pytest.mark.parametrize("name", SHARED)
def test_upstream_versions_are_kafkas(request, release, name):
    version = release_version(request, release)
    theirs = kafka_specs.jar_specs(version).get(name)
    assert theirs is not None, f"{name} is not in Kafka {version} (see test_codec_oracle)"
    ours = load_ours(name)
    assert (ours.get("apiKey"), ours["type"]) == (theirs.get("apiKey"), theirs["type"])
    base = name.removesuffix("Request").removesuffix("Response")
    if base in REMOVED_UPSTREAM:
        assert theirs["validVersions"] == "none", f"Kafka {version} defines {name} again"
        return
    our_v, their_v = versions(ours["validVersions"]), versions(theirs["validVersions"])
    assert min(our_v) >= min(their_v), (
        f"{name}: we define v{min(our_v)}, below Kafka {version}'s lowest v{min(their_v)}"
    )
    above = our_v - their_v
    newest = kafka_specs.jar_specs(request.getfixturevalue("kafka_newest")).get(name)
    newer = versions(newest["validVersions"]) if newest else set()
    assert ABOVE_KAFKA.get(name, set()) <= our_v, f"{name}: ABOVE_KAFKA names versions we lack"
    unexplained = above - ABOVE_KAFKA.get(name, set()) - newer
    assert not unexplained, f"{name}: v{sorted(unexplained)} above Kafka {version}'s maximum"
    assert not ABOVE_KAFKA.get(name, set()) & newer, (
        f"{name}: Kafka {version} has claimed our version(s) "
        f"{sorted(ABOVE_KAFKA[name] & newer)}: move ours above its maximum"
    )
    diffs = []
    for v in sorted(our_v & their_v):
        our_flex = v in versions(ours.get("flexibleVersions", "none"))
        their_flex = v in versions(theirs.get("flexibleVersions", "none"))
        if our_flex != their_flex:
            diffs.append(f"v{v}: flexible ours={our_flex} Kafka={their_flex}")
        diffs += schema_diff(name, schema_at(ours, ours.get("fields", []), v, our_flex),
                             schema_at(theirs, theirs.get("fields", []), v, their_flex),
                             v)  # fmt: skip
    if max(their_v) in our_v:
        unstable = "latestVersionUnstable"
        assert ours.get(unstable, False) == theirs.get(unstable, False)
    assert not diffs, f"{name} differs from Kafka {version}:\n  " + "\n  ".join(diffs)


@pytest.mark.parametrize("name", SHARED)
def test_listeners(kafka_newest, name):
    ours, theirs = load_ours(name), kafka_specs.jar_specs(kafka_newest)[name]
    if name.removesuffix("Request").removesuffix("Response") in REMOVED_UPSTREAM:
        assert ours.get("listeners", []) == []  # served nowhere: codec only
    else:
        assert ours.get("listeners") == theirs.get("listeners")


def _abouts(fields, path=""):
    for f in fields:
        yield path + f["name"], f.get("about", "")
        yield from _abouts(f.get("fields", []), path + f["name"] + ".")


def _norm_about(text: str) -> str:
    return " ".join(str(text).split()).strip().rstrip(".").lower()


@pytest.mark.parametrize("name", SHARED)
def test_about_texts_are_ours(kafka_newest, name):
    """Our specs describe every field in our own words, not Kafka's (no text copied)."""
    theirs = kafka_specs.jar_specs(kafka_newest)[name]
    ours = load_ours(name)
    their_abouts = {p: _norm_about(a) for p, a in _abouts(theirs.get("fields", []))}
    for common in theirs.get("commonStructs", []):
        prefix = common["name"] + "."
        their_abouts.update({p: _norm_about(a) for p, a in _abouts(common["fields"], prefix)})
    ours_all = list(_abouts(ours.get("fields", [])))
    for common in ours.get("commonStructs", []):
        ours_all += list(_abouts(common["fields"], common["name"] + "."))
    copied = [p for p, a in ours_all if their_abouts.get(p) == _norm_about(a) and a.strip()]
    assert not copied, f"{name}: about text copied from Kafka for {copied}"


def test_jar_specs_are_the_releases(kafka_newest, kafka_oldest):
    """The jars hold what their ApiMessageType / MetadataRecordType say (a sanity check of the
    loader: 4.4 claims api keys 93, 94 and metadata record 29)."""
    new, old = kafka_specs.jar_specs(kafka_newest), kafka_specs.jar_specs(kafka_oldest)
    assert new["UnregisterControllerRecord"]["apiKey"] == 29
    assert new["StreamsGroupTopologyDescriptionUpdateRequest"]["apiKey"] == 93
    assert new["UnregisterControllerRequest"]["apiKey"] == 94
    assert "UnregisterControllerRecord" not in old
    assert new["FetchRequest"]["apiKey"] == 1 and len(new) > len(old) > 200
