"""Kafka's ``Uuid`` text form: the one place that formats, parses and draws it.

Kafka writes a ``Uuid`` (topic ids, cluster ids, directory ids, incarnation ids) as the URL-safe
base64 of its 16 bytes without padding, 22 characters (``Uuid.toString``), and reads that form
or the one padded with ``==`` (``Uuid.fromString``, Java's strict URL-safe decoder).
``Uuid.randomUuid`` never returns the zero id, the metadata topic's id (``Uuid.METADATA_TOPIC_ID``,
``AAAAAAAAAAAAAAAAAAAAAQ``) or one whose text starts with ``-``, which a command line would take
for an option.
"""

from __future__ import annotations

import base64
import binascii
import re
import uuid

__all__ = ["parse_uuid_text", "random_uuid_text", "uuid_from_kafka_string", "uuid_text"]

_TEXT = re.compile(r"[A-Za-z0-9_-]{22}(==)?")


def uuid_text(u: uuid.UUID) -> str:
    """Kafka's ``Uuid.toString``: the URL-safe base64 of ``u``'s 16 bytes, no padding
    (22 characters)."""
    return base64.urlsafe_b64encode(u.bytes).decode("ascii").rstrip("=")


def parse_uuid_text(text: str) -> uuid.UUID:
    """Kafka's ``Uuid.fromString``: 22 URL-safe base64 characters, or 24 ending in ``==``, for
    16 bytes. ``ValueError`` naming the text otherwise."""
    if not _TEXT.fullmatch(text):
        raise ValueError(f"{text!r} is not a base64-encoded UUID (22 URL-safe base64 chars)")
    return uuid_from_kafka_string(text)


def uuid_from_kafka_string(text: str) -> uuid.UUID:
    """Kafka's ``Uuid.fromString`` with its messages (ValueError, as a Kafka tool prints them):
    at most 24 characters of URL-safe base64 decoding to 16 bytes."""
    if len(text) > 24:
        raise ValueError(f"Input string with prefix `{text[:24]}` is too long to be decoded as "
                         "a base64 UUID")  # fmt: skip
    bad = next((c for c in text.rstrip("=") if not (c.isascii() and (c.isalnum() or c in "-_"))),
               None)  # fmt: skip
    if bad is not None:
        raise ValueError(f"Illegal base64 character {ord(bad):x}")
    body = text.rstrip("=")
    if len(body) % 4 == 1:
        raise ValueError("Last unit does not have enough valid bits")
    try:
        raw = base64.urlsafe_b64decode(body + "=" * (-len(body) % 4))
    except (binascii.Error, ValueError) as e:
        raise ValueError(str(e)) from None
    if len(raw) != 16:
        raise ValueError(f"Input string `{text}` decoded as {len(raw)} bytes, which is not equal "
                         "to the expected 16 bytes of a base64-encoded UUID")  # fmt: skip
    return uuid.UUID(bytes=raw)


def random_uuid_text() -> str:
    """Kafka's ``Uuid.randomUuid().toString()``: a random (version 4) id as text, never the zero
    or metadata-topic id and never one starting with ``-``."""
    while True:
        u = uuid.uuid4()
        text = uuid_text(u)
        if u.int not in (0, 1) and not text.startswith("-"):
            return text
