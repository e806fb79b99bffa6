"""House rules of our message specs that need no Kafka: every file parses as Kafka's generator
reads it, starts with our own ``//`` comment, carries no Apache header, describes every field,
and numbers its tags 0, 1, 2... per struct.

Whether the upstream specs carry Kafka's wire facts is checked against the specs inside the
pinned releases' jars (``tests/kafka/test_upstream_specs.py``), and our codec against Kafka's
generated classes (``tests/kafka/test_codec_oracle.py``)."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest

from codegen.model import TOP_KEYS  # the keys Kafka's generator accepts

SPEC_DIR = Path(__file__).resolve().parents[2] / "message_specs"
_COMMENT_LINE = re.compile(r"^\s*//")


def load_spec(path: Path) -> dict[str, Any]:
    """Parse a Kafka spec file: JSON with whole-line ``//`` comments."""
    text = path.read_text(encoding="utf-8")
    kept = ["" if _COMMENT_LINE.match(line) else line for line in text.splitlines()]
    return json.loads("\n".join(kept))


def our_files() -> list[Path]:
    return sorted(SPEC_DIR.glob("*.json"))


def walk_fields(fields: list[dict[str, Any]], prefix: str = ""):
    for field in fields:
        path = prefix + field["name"]
        yield path, field
        yield from walk_fields(field.get("fields", []), path + ".")


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


def _structs(fields: list[dict[str, Any]], prefix: str):
    yield prefix or "<top>", fields
    for field in fields:
        if "fields" in field:
            yield from _structs(field["fields"], prefix + field["name"] + ".")


@pytest.mark.parametrize("path", our_files(), ids=lambda p: p.stem)
def test_tags_unique_and_contiguous(path: Path) -> None:
    spec = load_spec(path)
    groups = list(_structs(spec.get("fields", []), ""))
    for struct in spec.get("commonStructs", []):
        groups += list(_structs(struct["fields"], struct["name"] + "."))
    for where, fields in groups:
        tags = sorted(int(f["tag"]) for f in fields if "tag" in f)
        assert tags == list(range(len(tags))), (
            f"{path.stem} {where}: tags {tags} not unique/contiguous from 0"
        )
