"""Apache Kafka's own JSON message specs, read out of a release's jars.

``kafka-clients`` carries ``common/message/*.json`` (requests, responses, headers, Raft control
records), ``kafka-metadata`` ``common/metadata/*.json`` (metadata records) and ``kafka-raft``
``common/message/QuorumStateData.json``. These are the files Kafka's generator built that
release's classes from, so they are the authoritative wire facts of the release."""

from __future__ import annotations

import json
import re
import zipfile
from functools import cache
from pathlib import PurePosixPath
from typing import Any

from tests.kafka import peer

JARS = (
    ("kafka-clients", "common/message/"),
    ("kafka-metadata", "common/metadata/"),
    ("kafka-raft", "common/message/"),
)
_COMMENT = re.compile(r"^\s*//")


def parse_spec(text: str) -> dict[str, Any]:
    """A Kafka spec file: JSON with whole-line ``//`` comments."""
    return json.loads("\n".join("" if _COMMENT.match(line) else line
                                for line in text.splitlines()))  # fmt: skip


@cache
def jar_specs(version: str) -> dict[str, dict[str, Any]]:
    """``{spec name: parsed spec}`` of every message spec in Kafka ``version``'s jars."""
    libs = peer.resolve(version)
    specs: dict[str, dict[str, Any]] = {}
    for artifact, prefix in JARS:
        with zipfile.ZipFile(libs / f"{artifact}-{version}.jar") as jar:
            for name in jar.namelist():
                if name.startswith(prefix) and name.endswith(".json") and name.count("/") == 2:
                    spec = parse_spec(jar.read(name).decode())
                    specs[spec.get("name", PurePosixPath(name).stem)] = spec
    return specs


def version_range(text: str | None) -> tuple[int, int] | None:
    """``(lowest, highest)`` of a validVersions string, None for ``none``."""
    if text is None or str(text).strip() in ("", "none"):
        return None
    text = str(text).strip()
    if text.endswith("+"):
        return int(text[:-1]), 32767
    lo, _, hi = text.partition("-")
    return int(lo), int(hi or lo)
