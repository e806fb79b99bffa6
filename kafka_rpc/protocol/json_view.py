"""Render a message as Apache Kafka's generated JSON converter does (sans-io).

Kafka's generator emits a ``<Name>JsonConverter`` per message whose ``write(message, version)``
is what Kafka's request logging, ``kafka-dump-log --cluster-metadata-decoder`` and the metadata
shell print. :func:`to_kafka_json` produces the same tree for one of our messages, so the two can
be compared field by field (``tests/kafka/test_codec_oracle.py`` does, against Kafka's own
converter). Kafka's rules (``generator/.../JsonConverterGenerator.java``):

- one JSON object per struct, keys are the spec's field names with the first letter lower-cased
  (``ThrottleTimeMs`` -> ``throttleTimeMs``), in spec order;
- only the fields present at ``version``; a *tagged* field only when it differs from its
  default (absent fields and tagged fields at their default are not written at all);
- bool as true/false; int8 ... int64, uint16, uint32 as JSON numbers; float64 as a number;
- uuid as ``Uuid.toString()``: URL-safe base64 of the 16 bytes without padding (22 characters);
- string as a string; bytes as standard base64 with padding (Jackson's ``BinaryNode``);
- records: ``write(message, version)`` writes an *empty* binary (``""``) whatever the batch holds
  (``records="empty"``, the default); ``records="base64"`` writes the bytes as base64 instead,
  which is what the converter's ``read`` accepts;
- a null string / bytes / records / array / struct as ``null``.

The field layout comes from the generated modules' ``PROGRAMS`` (the per-version field tables
the native decoder runs), so the view follows the specs exactly as the codec does.
"""

from __future__ import annotations

import base64
import dataclasses
from typing import Any

from kafka_rpc.protocol import codec
from kafka_rpc.protocol.errors import UnsupportedVersionError
from kafka_rpc.protocol.uuids import uuid_text

__all__ = ["to_kafka_json"]

# Field kinds and flags of a decoder program (kafka_rpc/protocol/_cdecode.c, codegen/emit.py).
_BOOL, _INT8, _INT16, _UINT16, _INT32, _UINT32, _INT64, _FLOAT64 = range(1, 9)
_UUID, _STRING, _BYTES, _STRUCT = range(9, 13)
_ARRAY = 4
_RECORDS = 13  # not a decoder kind: bytes whose spec type is ``records``
_ABSENT = object()


def _camel(what: str) -> str:
    name = what.rsplit(".", 1)[1]
    return name[:1].lower() + name[1:]


#: id(program) -> ((json name, attr, kind, is_array, sub plan, tagged default or _ABSENT), ...)
_PLANS: dict[int, tuple] = {}


def _plan(program: tuple) -> tuple:
    plan = _PLANS.get(id(program))
    if plan is not None:
        return plan
    cls, _version, _flexible, regular, tagged, _other, defaults = program
    defaults = dict(defaults)
    spec_types = {f.name: f.metadata.get("kafka_type") for f in dataclasses.fields(cls)}
    entries: dict[str, tuple] = {}
    for attr, kind, flags, sub, what in regular:
        entries[attr] = (attr, kind, flags, sub, what, _ABSENT)
    for _tag, attr, kind, flags, sub, what in tagged:
        entries[attr] = (attr, kind, flags, sub, what, defaults[attr])
    out = []
    for f in dataclasses.fields(cls):  # spec order
        e = entries.get(f.name)
        if e is None:
            continue
        attr, kind, flags, sub, what, default = e
        if kind == _BYTES and spec_types.get(attr) == "records":
            kind = _RECORDS
        out.append((_camel(what), attr, kind, bool(flags & _ARRAY),
                    None if sub is None else _plan(sub), default))  # fmt: skip
    plan = tuple(out)
    _PLANS[id(program)] = plan
    return plan


def _value(x: Any, kind: int, sub: tuple | None, records: str) -> Any:
    if x is None:
        return None
    if kind == _STRUCT:
        assert sub is not None  # a struct field has its plan
        return _struct(x, sub, records)
    if kind == _UUID:
        return uuid_text(x)
    if kind == _BYTES:
        return base64.b64encode(x).decode()
    if kind == _RECORDS:
        return base64.b64encode(x).decode() if records == "base64" else ""
    if kind == _FLOAT64:
        return float(x)
    return x  # bool, integers, string


def _struct(obj: Any, plan: tuple, records: str) -> dict[str, Any]:
    node: dict[str, Any] = {}
    for name, attr, kind, is_array, sub, default in plan:
        x = getattr(obj, attr)
        if default is not _ABSENT and x == default:
            continue  # a tagged field at its default is not written
        if is_array and x is not None:
            node[name] = [_value(y, kind, sub, records) for y in x]
        else:
            node[name] = _value(x, kind, sub, records)
    return node


def to_kafka_json(
    msg: Any, version: int, *, name: str | None = None, records: str = "empty"
) -> dict[str, Any]:
    """``msg`` (a full message object of spec ``name``, default its own) at ``version`` as the
    JSON tree Kafka's ``<Name>JsonConverter.write(message, version)`` builds (module docstring).

    ``records`` is ``"empty"`` (Kafka's write: ``""`` for any non-null records) or ``"base64"``
    (the bytes, for Kafka's ``read``). Raises UnsupportedVersionError for a version the spec
    does not have; fields the version lacks are left out, not checked (``codec.encode`` checks
    them)."""
    if records not in ("empty", "base64"):
        raise ValueError(f"records must be 'empty' or 'base64', not {records!r}")
    name = name or type(msg).__spec_name__
    valid = codec.valid_versions(name)
    if valid is None or not valid[0] <= version <= valid[1]:
        raise UnsupportedVersionError(f"{name} has no version {version} (valid: {valid})")
    return _struct(msg, _plan(codec.module(name).PROGRAMS[version]), records)
