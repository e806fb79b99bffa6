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
import re
import uuid

__all__ = ["parse_uuid_text", "random_uuid_text", "uuid_text"]

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
    return uuid.UUID(bytes=base64.urlsafe_b64decode(text[:22] + "=="))


def random_uuid_text() -> str:
    """Kafka's ``Uuid.randomUuid().toString()``: a random (version 4) id as text, never the zero
    or metadata-topic id and never one starting with ``-``."""
    while True:
        u = uuid.uuid4()
        text = uuid_text(u)
        if u.int not in (0, 1) and not text.startswith("-"):
            return text
