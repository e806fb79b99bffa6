"""Kafka's Uuid text form (``Uuid.toString`` / ``fromString`` / ``randomUuid``):
``kafka_rpc.protocol.uuids``."""

from __future__ import annotations

from uuid import UUID

import pytest

from kafka_rpc.protocol import uuids
from kafka_rpc.protocol.primitives import METADATA_TOPIC_ID
from kafka_rpc.protocol.uuids import parse_uuid_text, random_uuid_text, uuid_text

#: bytes chosen so that the URL-safe alphabet's '-' and '_' both appear
ODD = UUID(bytes=b"\xfb\xff\xbf" * 5 + b"\x01")


def test_kafka_uuid_strings():
    assert uuid_text(METADATA_TOPIC_ID) == "AAAAAAAAAAAAAAAAAAAAAQ"
    assert uuid_text(ODD) == "-_-_-_-_-_-_-_-_-_-_AQ"
    for u in (METADATA_TOPIC_ID, ODD, UUID("6f2a4b1e-9c3d-4e5f-8a7b-1c2d3e4f5a6b")):
        assert parse_uuid_text(uuid_text(u)) == u
    assert parse_uuid_text("AAAAAAAAAAAAAAAAAAAAAQ==") == METADATA_TOPIC_ID  # padded, as Java
    for bad in ("", "AAAAAAAAAAAAAAAAAAAAA", "AAAAAAAAAAAAAAAAAAAAAQA", "+/AAAAAAAAAAAAAAAAAAAQ",
                "AAAAAAAAAAAAAAAAAAAA Q", "AAAAAAAAAAAAAAAAAAAAAQ="):  # fmt: skip
        with pytest.raises(ValueError):
            parse_uuid_text(bad)


def test_random_uuid_text_skips_kafkas_excluded_ids(monkeypatch):
    """As Kafka's ``Uuid.randomUuid``: never the zero id, the metadata topic's, or one whose
    text starts with '-'."""
    draws = iter([UUID(int=0), UUID(int=1), UUID(int=0xF8 << 120), UUID(int=0x12 << 120)])
    monkeypatch.setattr(uuids.uuid, "uuid4", lambda: next(draws))
    assert random_uuid_text() == "EgAAAAAAAAAAAAAAAAAAAA"
