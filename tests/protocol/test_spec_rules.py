"""Our message specs must carry the same wire facts as Apache Kafka's.

For every spec in ``message_specs/`` whose file name also exists in the upstream
corpus (``../shared/kafka-specs/{message,metadata,raft}``) this compares the wire
facts (apiKey, type, validVersions, flexibleVersions, listeners and, per field,
name/type/versions/nullableVersions/default/ignorable/tag/taggedVersions/mapKey/
entityType/...) and checks that every ``about`` text is our own wording.

Version ranges are compared as sets of versions *within upstream's validVersions*,
so our specs may extend past upstream's newest version. Every deliberate
deviation is listed in ``ALLOWED_DEVIATIONS``; anything else that differs fails.
Standard library + pytest only.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest

from codegen.model import FIELD_KEYS, TOP_KEYS  # the keys Kafka's generator accepts

SPEC_DIR = Path(__file__).resolve().parents[2] / "message_specs"
UPSTREAM_ROOT = Path(__file__).resolve().parents[3] / "shared" / "kafka-specs"
UPSTREAM_SUBDIRS = ("message", "metadata", "raft")
MAX_VERSION = 32767

# Every deliberate difference from upstream, in one place.
ALLOWED_DEVIATIONS: dict[str, Any] = {
    # validVersions we extend beyond upstream's (ours must be a superset).
    "validVersions": {
        "MetadataRequest": "0-14",
        "MetadataResponse": "0-14",
        "FindCoordinatorRequest": "0-7",
        "FindCoordinatorResponse": "0-7",
        "VoteRequest": "0-3",
        "VoteResponse": "0-3",
        "BeginQuorumEpochRequest": "0-2",
        "BeginQuorumEpochResponse": "0-2",
        "EndQuorumEpochRequest": "0-2",
        "EndQuorumEpochResponse": "0-2",
        "PartitionRecord": "0-3",
        "PartitionChangeRecord": "0-3",
    },
    # Fields (dotted path of field names) that exist only in versions above
    # upstream's max validVersions; they must not exist in any upstream version.
    "fields_above_upstream_max": {
        "MetadataResponse": ["Topics.Partitions.StartOffset", "Topics.Partitions.Chunks"],
        "VoteRequest": ["Topics.TopicId"],
        "VoteResponse": ["Topics.TopicId"],
        "BeginQuorumEpochRequest": ["Topics.TopicId"],
        "BeginQuorumEpochResponse": ["Topics.TopicId"],
        "EndQuorumEpochRequest": ["Topics.TopicId"],
        "EndQuorumEpochResponse": ["Topics.TopicId"],
        "PartitionRecord": ["StartOffset", "StartTimestamp"],
        "PartitionChangeRecord": ["StartOffset", "StartTimestamp"],
    },
    # APIs removed in Kafka 4.0: the corpus has them as validVersions "none", ours
    # carry the Kafka 3.x (K24) definitions. Only apiKey/type/name are compared.
    "k24_compare_api_key_only": {
        "LeaderAndIsrRequest",
        "LeaderAndIsrResponse",
        "StopReplicaRequest",
        "StopReplicaResponse",
        "UpdateMetadataRequest",
        "UpdateMetadataResponse",
    },
    # Listeners that differ from upstream (codec-only requests are served nowhere).
    "listeners": {
        "LeaderAndIsrRequest": [],
        "StopReplicaRequest": [],
        "UpdateMetadataRequest": [],
    },
    # (spec name, dotted field path) whose about text may equal upstream's.
    "identical_about": set(),
}



# ---------------------------------------------------------------- helpers

_COMMENT_LINE = re.compile(r"^\s*//")


def load_spec(path: Path) -> dict[str, Any]:
    """Parse a Kafka spec file: JSON with whole-line ``//`` comments."""
    text = path.read_text(encoding="utf-8")
    kept = ["" if _COMMENT_LINE.match(line) else line for line in text.splitlines()]
    return json.loads("\n".join(kept))


def parse_versions(text: str | None) -> frozenset[int]:
    if text is None:
        return frozenset()
    text = str(text).strip()
    if text in ("", "none"):
        return frozenset()
    if text.endswith("+"):
        return frozenset(range(int(text[:-1]), MAX_VERSION + 1))
    if "-" in text:
        lo, hi = text.split("-", 1)
        return frozenset(range(int(lo), int(hi) + 1))
    return frozenset({int(text)})


def norm_default(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return str(value)
    value = str(value)
    return value.lower() if value.lower() in ("true", "false") else value


def norm_bool(value: Any) -> bool:
    if isinstance(value, str):
        return value.strip().lower() == "true"
    return bool(value)


def norm_about(text: Any) -> str:
    return " ".join(str(text or "").split()).strip().rstrip(".").lower()


def field_facts(field: dict[str, Any], window: frozenset[int]) -> dict[str, Any]:
    """Wire facts of one field, version ranges restricted to ``window``."""
    tagged = field.get("taggedVersions")
    versions = field.get("versions", tagged)
    return {
        "type": field.get("type"),
        "versions": parse_versions(versions) & window,
        "nullableVersions": parse_versions(field.get("nullableVersions")) & window,
        "default": norm_default(field.get("default")),
        "ignorable": norm_bool(field.get("ignorable", False)),
        "tag": field.get("tag"),
        "taggedVersions": parse_versions(tagged) & window,
        "mapKey": norm_bool(field.get("mapKey", False)),
        "entityType": field.get("entityType"),
        "flexibleVersions": parse_versions(field.get("flexibleVersions")) & window
        if "flexibleVersions" in field
        else None,
        "zeroCopy": norm_bool(field.get("zeroCopy", False)),
    }


def _mismatch(what: str, ours: Any, theirs: Any) -> str:
    return f"{what}: ours={ours!r} upstream={theirs!r}"


def upstream_files() -> dict[str, Path]:
    found: dict[str, Path] = {}
    for sub in UPSTREAM_SUBDIRS:
        directory = UPSTREAM_ROOT / sub
        if directory.is_dir():
            for path in directory.glob("*.json"):
                found[path.stem] = path
    return found


def our_files() -> list[Path]:
    return sorted(SPEC_DIR.glob("*.json"))


def compared_names() -> list[str]:
    if not UPSTREAM_ROOT.is_dir():
        return []
    upstream = upstream_files()
    return [p.stem for p in our_files() if p.stem in upstream]


def compare_fields(
    spec: str,
    ours: list[dict[str, Any]],
    theirs: list[dict[str, Any]],
    window: frozenset[int],
    prefix: str,
    errors: list[str],
    about_pairs: list[tuple[str, str, str]],
) -> None:
    allowed_extra = set(ALLOWED_DEVIATIONS["fields_above_upstream_max"].get(spec, []))
    their_names = [f["name"] for f in theirs]
    our_by_name = {f["name"]: f for f in ours}
    if len(our_by_name) != len(ours):
        errors.append(f"{prefix or '<top>'}: duplicate field names in ours")

    # Extra fields: only the listed ones, and only above upstream's max version.
    for field in ours:
        path = prefix + field["name"]
        if field["name"] in their_names:
            continue
        if path not in allowed_extra:
            errors.append(f"{path}: field not in upstream and not listed as an allowed deviation")
            continue
        present = parse_versions(field.get("versions", field.get("taggedVersions"))) & window
        if present:
            errors.append(f"{path}: extra field exists in upstream versions {sorted(present)}")

    # Upstream fields: all present, same relative order, same facts.
    our_order = [f["name"] for f in ours if f["name"] in their_names]
    if our_order != their_names:
        errors.append(_mismatch(f"{prefix or '<top>'}: field order", our_order, their_names))
    for their in theirs:
        path = prefix + their["name"]
        our = our_by_name.get(their["name"])
        if our is None:
            continue
        unknown = set(our) - FIELD_KEYS
        if unknown:
            errors.append(f"{path}: unknown keys {sorted(unknown)}")
        a, b = field_facts(our, window), field_facts(their, window)
        for key in a:
            if a[key] != b[key]:
                show_a = sorted(a[key]) if isinstance(a[key], frozenset) else a[key]
                show_b = sorted(b[key]) if isinstance(b[key], frozenset) else b[key]
                errors.append(f"{path}: {key} ours={show_a!r} upstream={show_b!r}")
        about_pairs.append((path, str(our.get("about", "")), str(their.get("about", ""))))
        if ("fields" in our) != ("fields" in their):
            errors.append(f"{path}: inline struct definition present in only one side")
        if "fields" in their and "fields" in our:
            compare_fields(
                spec, our["fields"], their["fields"], window, path + ".", errors, about_pairs
            )


def walk_fields(fields: list[dict[str, Any]], prefix: str = ""):
    for field in fields:
        path = prefix + field["name"]
        yield path, field
        yield from walk_fields(field.get("fields", []), path + ".")


# ---------------------------------------------------------------- tests


@pytest.mark.parametrize("path", our_files(), ids=lambda p: p.stem)
def test_spec_parses_and_is_ours(path: Path) -> None:
    text = path.read_text(encoding="utf-8")
    assert "Licensed to the Apache Software Foundation" not in text, "no Apache header in our specs"
    assert text.lstrip().startswith("//"), "each spec starts with our own // comment"
    spec = load_spec(path)
    assert spec["name"] == path.stem
    assert set(spec) <= TOP_KEYS, f"unknown top-level keys {sorted(set(spec) - TOP_KEYS)}"
    for path_name, field in walk_fields(spec.get("fields", [])):
        assert str(field.get("about", "")).strip(), f"{path_name}: missing about"
    for struct in spec.get("commonStructs", []):
        for path_name, field in walk_fields(struct["fields"], struct["name"] + "."):
            assert str(field.get("about", "")).strip(), f"{path_name}: missing about"


def _skip_if_no_upstream() -> None:
    if not UPSTREAM_ROOT.is_dir():
        pytest.skip(f"upstream Kafka spec corpus not found at {UPSTREAM_ROOT}")


def test_upstream_corpus_present_and_overlaps() -> None:
    _skip_if_no_upstream()
    assert compared_names(), "no spec in message_specs/ has an upstream counterpart"


def test_allowed_deviations_refer_to_existing_specs() -> None:
    _skip_if_no_upstream()
    names = set(compared_names())
    listed = (
        set(ALLOWED_DEVIATIONS["validVersions"])
        | set(ALLOWED_DEVIATIONS["fields_above_upstream_max"])
        | set(ALLOWED_DEVIATIONS["k24_compare_api_key_only"])
        | set(ALLOWED_DEVIATIONS["listeners"])
    )
    assert listed <= names, (
        f"deviations listed for specs we do not compare: {sorted(listed - names)}"
    )


@pytest.mark.parametrize("name", compared_names() or ["<none>"])
def test_wire_facts_equal_upstream(name: str) -> None:
    _skip_if_no_upstream()
    if name == "<none>":
        pytest.skip("no overlapping specs")
    ours = load_spec(SPEC_DIR / f"{name}.json")
    theirs = load_spec(upstream_files()[name])
    errors: list[str] = []

    for key in ("apiKey", "type", "name"):
        if ours.get(key) != theirs.get(key):
            errors.append(f"{key}: ours={ours.get(key)!r} upstream={theirs.get(key)!r}")

    allowed_listeners = ALLOWED_DEVIATIONS["listeners"].get(name)
    if name in ALLOWED_DEVIATIONS["listeners"] and ours.get("listeners") != allowed_listeners:
        errors.append(
            _mismatch("listeners (allowed deviation)", ours.get("listeners"), allowed_listeners)
        )
    if name in ALLOWED_DEVIATIONS["k24_compare_api_key_only"]:
        assert theirs.get("validVersions") == "none", (
            "upstream now defines this API; compare it fully"
        )
        assert not errors, "\n".join(errors)
        return

    our_valid = parse_versions(ours.get("validVersions"))
    their_valid = parse_versions(theirs.get("validVersions"))
    allowed_valid = ALLOWED_DEVIATIONS["validVersions"].get(name)
    if allowed_valid is None:
        if ours.get("validVersions") != theirs.get("validVersions"):
            errors.append(
                _mismatch("validVersions", ours.get("validVersions"), theirs.get("validVersions"))
            )
    else:
        if ours.get("validVersions") != allowed_valid:
            errors.append(
                _mismatch(
                    "validVersions (allowed deviation)", ours.get("validVersions"), allowed_valid
                )
            )
        if not their_valid <= our_valid or min(our_valid) != min(their_valid):
            errors.append("validVersions: ours must extend upstream's range upwards only")

    if parse_versions(ours.get("flexibleVersions")) != parse_versions(
        theirs.get("flexibleVersions")
    ):
        errors.append(
            _mismatch(
                "flexibleVersions", ours.get("flexibleVersions"), theirs.get("flexibleVersions")
            )
        )
    if name not in ALLOWED_DEVIATIONS["listeners"] and ours.get("listeners") != theirs.get(
        "listeners"
    ):
        errors.append(
            f"listeners: ours={ours.get('listeners')!r} upstream={theirs.get('listeners')!r}"
        )
    for key in ("latestVersionUnstable", "deprecatedVersions"):
        if ours.get(key) != theirs.get(key):
            errors.append(f"{key}: ours={ours.get(key)!r} upstream={theirs.get(key)!r}")

    about_pairs: list[tuple[str, str, str]] = []
    compare_fields(
        name, ours.get("fields", []), theirs.get("fields", []), their_valid, "", errors, about_pairs
    )

    our_structs = ours.get("commonStructs", [])
    their_structs = theirs.get("commonStructs", [])
    if [s["name"] for s in our_structs] != [s["name"] for s in their_structs]:
        errors.append(
            _mismatch(
                "commonStructs",
                [s["name"] for s in our_structs],
                [s["name"] for s in their_structs],
            )
        )
    else:
        for our_s, their_s in zip(our_structs, their_structs):
            if (
                parse_versions(our_s.get("versions")) & their_valid
                != parse_versions(their_s.get("versions")) & their_valid
            ):
                errors.append(f"commonStructs.{our_s['name']}: versions differ")
            compare_fields(
                name,
                our_s["fields"],
                their_s["fields"],
                their_valid,
                f"{our_s['name']}.",
                errors,
                about_pairs,
            )

    assert not errors, f"{name} differs from upstream:\n  " + "\n  ".join(errors)

    same = [
        path
        for path, our_about, their_about in about_pairs
        if norm_about(our_about) == norm_about(their_about)
        and (name, path) not in ALLOWED_DEVIATIONS["identical_about"]
    ]
    assert not same, f"{name}: about text copied from upstream for {same}"


def test_identical_abouts_stay_rare() -> None:
    """At most 5% of compared fields may keep upstream's wording, and only if listed."""
    _skip_if_no_upstream()
    total = 0
    for name in compared_names():
        if name in ALLOWED_DEVIATIONS["k24_compare_api_key_only"]:
            continue
        spec = load_spec(SPEC_DIR / f"{name}.json")
        total += sum(1 for _ in walk_fields(spec.get("fields", [])))
        for struct in spec.get("commonStructs", []):
            total += sum(1 for _ in walk_fields(struct["fields"]))
    assert len(ALLOWED_DEVIATIONS["identical_about"]) <= 0.05 * max(total, 1)


def test_above_max_fields_are_really_above_max() -> None:
    """Each listed extra field must start above upstream's newest version."""
    _skip_if_no_upstream()
    upstream = upstream_files()
    for name, paths in ALLOWED_DEVIATIONS["fields_above_upstream_max"].items():
        ours = load_spec(SPEC_DIR / f"{name}.json")
        their_max = max(parse_versions(load_spec(upstream[name])["validVersions"]))
        by_path = dict(walk_fields(ours.get("fields", [])))
        for path in paths:
            assert path in by_path, f"{name}: listed field {path} does not exist"
            field = by_path[path]
            versions = parse_versions(field.get("versions", field.get("taggedVersions")))
            assert versions and min(versions) > their_max, (
                f"{name}.{path}: must exist only above v{their_max}"
            )
            assert max(parse_versions(ours["validVersions"])) in versions, (
                f"{name}.{path}: unused in our versions"
            )


def _structs(fields: list[dict[str, Any]], prefix: str):
    yield prefix or "<top>", fields
    for field in fields:
        if "fields" in field:
            yield from _structs(field["fields"], prefix + field["name"] + ".")


@pytest.mark.parametrize("path", our_files(), ids=lambda p: p.stem)
def test_tags_unique_and_contiguous(path: Path) -> None:
    """Covers our own additions too (they have no upstream counterpart to compare with)."""
    spec = load_spec(path)
    groups = list(_structs(spec.get("fields", []), ""))
    for struct in spec.get("commonStructs", []):
        groups += list(_structs(struct["fields"], struct["name"] + "."))
    for where, fields in groups:
        tags = sorted(f["tag"] for f in fields if "tag" in f)
        assert tags == list(range(len(tags))), (
            f"{path.stem} {where}: tags {tags} not unique/contiguous from 0"
        )
