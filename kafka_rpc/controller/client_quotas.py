"""Client quotas in the metadata log (Kafka's ``ClientQuotaControlManager``).

* Command: :func:`alter_client_quotas` (AlterClientQuotas, 49).
* Replay: ClientQuotaRecord (:data:`REPLAY`) into the image's ``client_quotas``.
* Snapshot part: :func:`client_quota_records` (``ClientQuotasImage.write``), after the configs.

An entity is a set of (type, name) parts: ``user`` and / or ``client-id``, or ``ip`` alone; a
null name is that type's default entity. In the image an entity is the tuple of its parts
sorted by type.
"""

from __future__ import annotations

import ipaddress
import math
from typing import Any

from pyrsistent import pmap

from kafka_rpc.controller.base import ControllerContext, ControllerResult
from kafka_rpc.controller.image import MetadataImage, evolve
from kafka_rpc.protocol import codec
from kafka_rpc.protocol.errors import ErrorCode

__all__ = [
    "REPLAY",
    "SNAPSHOT",
    "alter_client_quotas",
    "alter_client_quotas_error_response",
    "client_quota_records",
    "replay_client_quota",
]

_R = codec.message_class
USER, CLIENT_ID, IP = "user", "client-id", "ip"
_LONG_MAX = float(2**63 - 1)
_INT_MAX = float(2**31 - 1)
USER_CLIENT_KEYS = {
    "producer_byte_rate": "LONG",
    "consumer_byte_rate": "LONG",
    "request_percentage": "DOUBLE",
    "controller_mutation_rate": "DOUBLE",
}
"""Kafka's ``QuotaConfig.userAndClientQuotaConfigs`` keys and their types."""
IP_KEYS = {"connection_creation_rate": "INT"}
"""Kafka's ``QuotaConfig.ipConfigs`` keys and their types."""


def _entity_text(parts: list[tuple[str, str | None]]) -> str:
    """Kafka's ``ClientQuotaEntity.toString``."""
    inner = ", ".join(f"{t}={n}" for t, n in parts)
    return f"ClientQuotaEntity(entries={{{inner}}})"


def _valid_ip(name: str | None) -> bool:
    """``isValidIpEntity``: null (the default) or an IP address. (Kafka also accepts a host
    name it can resolve; the controller here does not resolve names.)"""
    if name is None:
        return True
    try:
        ipaddress.ip_address(name)
    except ValueError:
        return False
    return True


def _check_entity(parts: list[tuple[str, str | None]]) -> tuple[dict | None, str | None]:
    """validateEntity + configKeysForEntityType: (valid keys, None) or (None, message)."""
    if not parts:
        return None, "Invalid empty client quota entity"
    seen: dict[str, str | None] = {}
    for etype, name in parts:
        if etype in seen:
            return None, f"Invalid client quota entity, duplicate entity entry {etype}"
        if etype not in (USER, CLIENT_ID, IP):
            return None, f"Unhandled client quota entity type: {etype}"
        seen[etype] = name
        if name is not None and name == "":
            return None, f"Empty {etype} not supported"
    if IP in seen:
        if len(seen) > 1:
            return None, (
                "Invalid quota entity combination, IP entity shouldnot be combined with User "
                "or ClientId"
            )
        if not _valid_ip(seen[IP]):
            return None, f"{seen[IP]} is not a valid IP or resolvable host."
        return IP_KEYS, None
    return USER_CLIENT_KEYS, None


def _check_value(keys: dict, key: str, value: float) -> str | None:
    """validateQuotaKeyValue: None or the INVALID_REQUEST message."""
    kind = keys.get(key)
    if kind is None:
        return f"Invalid configuration key {key}"
    if not value > 0.0:
        return f"Quota {key} must be greater than 0"
    if kind == "DOUBLE":
        return None
    limit, article = (_INT_MAX, "an INT") if kind == "INT" else (_LONG_MAX, "a LONG")
    if value > limit:
        return f"Proposed value for {key} is too large for {article}."
    if abs(math.fmod(value, 1.0)) > 1e-6:
        return f"{key} cannot be a fractional value."
    return None


def alter_client_quotas(
    image: MetadataImage, request: Any, ctx: ControllerContext
) -> ControllerResult:
    """AlterClientQuotas v0-1 (ClientQuotaControlManager.alterClientQuotas), per entity:

    - INVALID_REQUEST for: an empty entity; a type named twice; a type other than user,
      client-id, ip; an empty name; ip combined with user / client-id; an ip name that is not an
      IP address; a key named twice ("Duplicate quota key ..."), an entity named twice
      ("Ignoring duplicate entity ..."); an unknown key for the entity's kind, a value <= 0, a
      fractional or too large value for an integer key (Kafka's messages);
    - otherwise a ClientQuotaRecord per key whose value changes, and a removing one per removed
      key that is set; a failing entity writes nothing, the others apply. Nothing with
      ValidateOnly. Results in request order."""
    mod = codec.module("AlterClientQuotasResponse")
    rec_mod = codec.module("ClientQuotaRecord")
    out = []
    records: list = []
    done: set = set()
    for entry in request.entries:
        parts = [(e.entity_type, e.entity_name) for e in entry.entity]
        key = tuple(sorted(parts, key=lambda p: p[0]))
        ent = tuple(mod.EntityData(entity_type=t, entity_name=n) for t, n in parts)

        def result(code: int, message: str | None, ent: tuple = ent) -> Any:
            return mod.EntryData(error_code=code, error_message=message, entity=ent)

        ops: dict[str, float | None] = {}
        dup_key = None
        for op in entry.ops:
            if op.key in ops and dup_key is None:
                dup_key = op.key
            ops.setdefault(op.key, None if op.remove else op.value)
        if key in done:
            out.append(result(ErrorCode.INVALID_REQUEST,
                              f"Ignoring duplicate entity {_entity_text(parts)}"))  # fmt: skip
            continue
        done.add(key)
        if dup_key is not None:
            out.append(result(ErrorCode.INVALID_REQUEST,
                              f"Duplicate quota key {dup_key} not updating quota for this entity "
                              f"{_entity_text(parts)}"))  # fmt: skip
            continue
        keys, problem = _check_entity(parts)
        current = image.client_quotas.get(key, pmap())
        new: list = []
        if problem is None:
            assert keys is not None  # _check_entity gives the keys when it finds no problem
            for k, v in ops.items():
                if v is None:
                    if k in current:
                        new.append((k, 0.0, True))
                    continue
                problem = _check_value(keys, k, v)
                if problem is not None:
                    break
                if current.get(k) != v:
                    new.append((k, v, False))
        if problem is not None:
            out.append(result(ErrorCode.INVALID_REQUEST, problem))
            continue
        rec_entity = tuple(rec_mod.EntityData(entity_type=t, entity_name=n) for t, n in key)
        for k, v, remove in new:
            records.append(_R("ClientQuotaRecord")(entity=rec_entity, key=k, value=v,
                                                   remove=remove))  # fmt: skip
        out.append(result(0, None))
    if request.validate_only:
        records = []
    return ControllerResult(records, mod.AlterClientQuotasResponse(entries=tuple(out)))


def alter_client_quotas_error_response(request: Any, code: int, message: str | None) -> Any:
    """Every entity of the request answered ``code`` (NOT_CONTROLLER ...)."""
    mod = codec.module("AlterClientQuotasResponse")
    return mod.AlterClientQuotasResponse(entries=tuple(
        mod.EntryData(error_code=code, error_message=message, entity=tuple(
            mod.EntityData(entity_type=e.entity_type, entity_name=e.entity_name)
            for e in entry.entity))
        for entry in request.entries))  # fmt: skip


# ============================================================================ replay
def replay_client_quota(img: MetadataImage, r: Any, offset: int) -> MetadataImage:
    """ClientQuotaControlManager.replay(ClientQuotaRecord): set the key, or remove it; an entity
    left with no keys disappears."""
    key = tuple(sorted(((e.entity_type, e.entity_name) for e in r.entity), key=lambda p: p[0]))
    cur = img.client_quotas.get(key, pmap())
    cur = cur.discard(r.key) if r.remove else cur.set(r.key, r.value)
    quotas = img.client_quotas.set(key, cur) if cur else img.client_quotas.discard(key)
    return evolve(img, client_quotas=quotas)


REPLAY = {"ClientQuotaRecord": replay_client_quota}


# ============================================================================ snapshot
def client_quota_records(image: MetadataImage) -> list:
    """One ClientQuotaRecord per set key, by entity then key."""
    mod = codec.module("ClientQuotaRecord")
    out = []
    for ent in sorted(image.client_quotas, key=lambda k: [(t, n or "") for t, n in k]):
        quotas = image.client_quotas[ent]
        for k in sorted(quotas):
            out.append(_R("ClientQuotaRecord")(
                entity=tuple(mod.EntityData(entity_type=t, entity_name=n) for t, n in ent),
                key=k, value=quotas[k], remove=False))  # fmt: skip
    return out


SNAPSHOT = (client_quota_records,)
"""This manager's part of a snapshot (``kafka_rpc.controller.snapshot``), in order."""
