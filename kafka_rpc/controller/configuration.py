"""Dynamic configs in the metadata log (Kafka's ``ConfigurationControlManager``).

* Validation of the topic configs CreateTopics sets (:func:`check_topic_configs`, against the
  one table of topic configs, :data:`kafka_rpc.controller.topic_configs.TOPIC_CONFIG_DEFS`);
  their ConfigRecords are written by :func:`~kafka_rpc.controller.replication.create_topics`.
* Commands: :func:`incremental_alter_configs` (IncrementalAlterConfigs, 44) and
  :func:`legacy_alter_configs` (AlterConfigs, 33) for TOPIC and BROKER resources, with
  ``ControllerConfigurationValidator`` and ``ConfigResourceExistenceChecker``'s rules.
* Replay: ConfigRecord (:data:`REPLAY`); a deleted topic's configs go with it
  (:func:`delete_topic_configs`, ``deleteTopicConfigs``).
* Snapshot part: :func:`config_records` (``ConfigurationsImage.write``).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from pyrsistent import pmap

from kafka_rpc.controller.base import ApiError, ControllerContext, ControllerResult
from kafka_rpc.controller.image import RESOURCE_BROKER, RESOURCE_TOPIC, MetadataImage, evolve
from kafka_rpc.controller.topic_configs import list_configs, value_check
from kafka_rpc.protocol import codec
from kafka_rpc.protocol.errors import ErrorCode

__all__ = [
    "REPLAY",
    "SNAPSHOT",
    "alter_configs_error_response",
    "check_topic_configs",
    "config_records",
    "delete_topic_configs",
    "incremental_alter_configs",
    "legacy_alter_configs",
]

_R = codec.message_class


def check_topic_configs(topic: Any) -> dict[str, str]:
    """ConfigurationControlManager validation of a CreateTopics entry's ``configs`` (KRaft
    rejects null values and unknown names, and values of the wrong type): name -> value, or
    ApiError INVALID_REQUEST (a null value) / INVALID_CONFIG (unknown name, bad value)."""
    out: dict[str, str] = {}
    for c in topic.configs:
        if c.value is None:
            raise ApiError(
                ErrorCode.INVALID_REQUEST, f"Null value not supported for topic configs: {c.name}"
            )
        check = value_check(c.name)
        if check is None:
            raise ApiError(ErrorCode.INVALID_CONFIG, f"Unknown topic config name: {c.name}")
        if not check(c.value):
            raise ApiError(
                ErrorCode.INVALID_CONFIG,
                f"Invalid value {c.value} for configuration {c.name}",
            )
        out[c.name] = c.value
    return out


# ============================================================================ alter configs
RESOURCE_TYPES = {2: "TOPIC", 4: "BROKER", 8: "BROKER_LOGGER", 16: "CLIENT_METRICS", 32: "GROUP"}
"""Kafka's ``ConfigResource.Type`` ids; any other id is UNKNOWN."""
OP_SET, OP_DELETE, OP_APPEND, OP_SUBTRACT = 0, 1, 2, 3
_OPS = {OP_SET: "SET", OP_DELETE: "DELETE", OP_APPEND: "APPEND", OP_SUBTRACT: "SUBTRACT"}

LIST_CONFIGS = {
    RESOURCE_TOPIC: list_configs(),
    RESOURCE_BROKER: frozenset(
        {
            "advertised.listeners",
            "listeners",
            "log.dirs",
            "metric.reporters",
            "sasl.enabled.mechanisms",
            "ssl.cipher.suites",
            "ssl.enabled.protocols",
            "super.users",
        }
    ),
}
"""Keys of type LIST (``ConfigDef.Type.LIST``) that APPEND / SUBTRACT may change
(``KafkaConfigSchema.isSplittable``): for topics, the LIST rows of the topic config table; for
brokers, the list-typed keys of ``KafkaConfig`` that are dynamically updatable or commonly set."""


def _broker_name_error(name: str) -> str | None:
    """ControllerConfigurationValidator.validateBrokerName."""
    if name == "":
        return None
    try:
        bid = int(name, 10)
    except ValueError:
        return "Unable to parse broker name as a base 10 number."
    if bid < 0:
        return "Invalid negative broker ID."
    return None


def _validate(
    image: MetadataImage,
    rtype: int,
    name: str,
    all_configs: dict[str, str | None],
    ctx: ControllerContext,
    topic_name_error: Callable[[str], str | None],
) -> None:
    """ControllerConfigurationValidator.validate, then ConfigResourceExistenceChecker: raises
    ApiError. TOPIC: a name (INVALID_REQUEST when empty, INVALID_TOPIC_EXCEPTION when illegal),
    no null value and only known keys with valid values (INVALID_CONFIG, ``LogConfig.validate``),
    and the topic must exist (UNKNOWN_TOPIC_OR_PARTITION). BROKER: "" (the cluster default) or a
    broker id (INVALID_REQUEST) that is registered or a controller's (BROKER_ID_NOT_REGISTERED)."""
    if rtype == RESOURCE_TOPIC:
        if name == "":
            raise ApiError(ErrorCode.INVALID_REQUEST, "Default topic resources are not allowed.")
        msg = topic_name_error(name)
        if msg is not None:
            raise ApiError(ErrorCode.INVALID_TOPIC_EXCEPTION, msg)
        nulls = [k for k, v in all_configs.items() if v is None]
        if nulls:
            raise ApiError(
                ErrorCode.INVALID_CONFIG,
                "Null value not supported for topic configs: " + ",".join(nulls),
            )
        for k, v in all_configs.items():
            check = value_check(k)
            if check is None:
                raise ApiError(ErrorCode.INVALID_CONFIG, f"Unknown topic config name: {k}")
            assert v is not None  # null values were refused above
            if not check(v):
                raise ApiError(ErrorCode.INVALID_CONFIG, f"Invalid value {v} for configuration {k}")
        if name not in image.topics_by_name:
            raise ApiError(
                ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"The topic '{name}' does not exist."
            )
        return
    msg = _broker_name_error(name)
    if msg is not None:
        raise ApiError(ErrorCode.INVALID_REQUEST, msg)
    if name != "":
        bid = int(name)
        if bid not in image.brokers and bid not in ctx.controller_ids:
            raise ApiError(ErrorCode.BROKER_ID_NOT_REGISTERED, f"No node with id {bid} found.")


def _supported(rtype: int) -> None:
    if rtype not in (RESOURCE_TOPIC, RESOURCE_BROKER):
        raise ApiError(
            ErrorCode.INVALID_REQUEST, f"Unknown resource type {RESOURCE_TYPES.get(rtype)}"
        )


def _config_record(rtype: int, name: str, key: str, value: str | None) -> Any:
    return _R("ConfigRecord")(resource_type=rtype, resource_name=name, name=key, value=value)


def _alter(
    image: MetadataImage,
    request: Any,
    ctx: ControllerContext,
    topic_name_error: Callable[[str], str | None],
    response_name: str,
    resource_records: Callable[[Any, dict], list],
) -> ControllerResult:
    """What both AlterConfigs flavours share (ControllerApis.handle*AlterConfigs): unknown
    resource types -> UNSUPPORTED_VERSION "Unknown resource type N."; a resource named twice ->
    one INVALID_REQUEST "Duplicate resource." entry and no change to it; each other resource's
    records from ``resource_records(resource, current configs)`` (raising ApiError), all in one
    atomic batch unless ValidateOnly. One response entry per resource, in request order."""
    mod = codec.module(response_name)
    R = mod.AlterConfigsResourceResponse
    seen: dict[tuple[int, str], int] = {}
    for res in request.resources:
        key = (res.resource_type, res.resource_name)
        seen[key] = seen.get(key, 0) + 1
    out = []
    records: list = []
    done_dup: set = set()
    for res in request.resources:
        key = (res.resource_type, res.resource_name)

        def entry(code: int, message: str | None, res: Any = res) -> Any:
            return R(error_code=code, error_message=message, resource_type=res.resource_type,
                     resource_name=res.resource_name)  # fmt: skip

        if res.resource_type not in RESOURCE_TYPES:
            out.append(entry(ErrorCode.UNSUPPORTED_VERSION,
                             f"Unknown resource type {res.resource_type}."))  # fmt: skip
            continue
        if seen[key] > 1:
            if key not in done_dup:
                done_dup.add(key)
                out.append(entry(ErrorCode.INVALID_REQUEST, "Duplicate resource."))
            continue
        try:
            _supported(res.resource_type)
            current = dict(image.configs.get(key, pmap()))
            new = resource_records(res, current)
            after = dict(current)
            for r in new:
                if r.value is None:
                    after.pop(r.name, None)
                else:
                    after[r.name] = r.value
            _validate(image, res.resource_type, res.resource_name, after, ctx, topic_name_error)
        except ApiError as e:
            out.append(entry(e.code, e.message))
            continue
        records.extend(new)
        out.append(entry(0, None))
    if request.validate_only:
        records = []
    return ControllerResult(records, codec.message_class(response_name)(responses=tuple(out)))


def incremental_alter_configs(
    image: MetadataImage,
    request: Any,
    ctx: ControllerContext,
    topic_name_error: Callable[[str], str | None],
) -> ControllerResult:
    """IncrementalAlterConfigs v0-1 (ConfigurationControlManager.incrementalAlterConfigs) on
    TOPIC and BROKER resources. Per key: SET (0) the value, DELETE (1) it, APPEND (2) /
    SUBTRACT (3) comma-separated items to / from a LIST key (else INVALID_CONFIG "Can't APPEND to
    key K because its type is not LIST."); an unknown operation is INVALID_REQUEST. A ConfigRecord
    (null value = delete) is written per key whose value changes, and for BROKER resources
    always (KAFKA-14136: brokers reload on it). The resource's resulting configs are then
    validated (:func:`_validate`); a failing resource writes nothing, the others still apply.
    BROKER_LOGGER, CLIENT_METRICS and GROUP resources get INVALID_REQUEST (not supported here;
    a Kafka broker answers BROKER_LOGGER itself before forwarding)."""

    def records(res: Any, current: dict) -> list:
        out = []
        for c in res.configs:
            old = current.get(c.name)
            op = c.config_operation
            if op == OP_SET:
                value = c.value
            elif op == OP_DELETE:
                value = None
            elif op in (OP_APPEND, OP_SUBTRACT):
                if c.name not in LIST_CONFIGS.get(res.resource_type, ()):
                    raise ApiError(
                        ErrorCode.INVALID_CONFIG,
                        f"Can't {_OPS[op]} to key {c.name} because its type is not LIST.",
                    )
                items = [x for x in (old or "").split(",") if x] if old else []
                for v in (c.value or "").split(","):
                    if op == OP_APPEND and v not in items:
                        items.append(v)
                    elif op == OP_SUBTRACT and v in items:
                        items.remove(v)
                value = ",".join(items)
            else:
                raise ApiError(ErrorCode.INVALID_REQUEST, f"Unknown config operation {op}")
            if value != old or res.resource_type == RESOURCE_BROKER:
                out.append(_config_record(res.resource_type, res.resource_name, c.name, value))
        return out

    return _alter(image, request, ctx, topic_name_error,
                  "IncrementalAlterConfigsResponse", records)  # fmt: skip


def legacy_alter_configs(
    image: MetadataImage,
    request: Any,
    ctx: ControllerContext,
    topic_name_error: Callable[[str], str | None],
) -> ControllerResult:
    """AlterConfigs v0-2 (ConfigurationControlManager.legacyAlterConfigs): the listed keys
    become the resource's whole set of dynamic configs: a ConfigRecord per listed key whose value
    changes (BROKER: every listed key), and a deleting one (null value) per current key not
    listed. Validation and per-resource errors as :func:`incremental_alter_configs`."""

    def records(res: Any, current: dict) -> list:
        out = []
        listed = {}
        for c in res.configs:
            listed[c.name] = c.value
        for k, v in listed.items():
            if current.get(k) != v or res.resource_type == RESOURCE_BROKER:
                out.append(_config_record(res.resource_type, res.resource_name, k, v))
        for k in sorted(current):
            if k not in listed:
                out.append(_config_record(res.resource_type, res.resource_name, k, None))
        return out

    return _alter(image, request, ctx, topic_name_error, "AlterConfigsResponse", records)


def alter_configs_error_response(request: Any, code: int, message: str | None) -> Any:
    """Every resource of an (Incremental)AlterConfigs request answered with ``code``."""
    name = type(request).__spec_name__[: -len("Request")] + "Response"
    mod = codec.module(name)
    return codec.message_class(name)(
        responses=tuple(
            mod.AlterConfigsResourceResponse(
                error_code=code,
                error_message=message,
                resource_type=r.resource_type,
                resource_name=r.resource_name,
            )
            for r in request.resources
        )
    )


# ============================================================================ replay
def _config(img: MetadataImage, r: Any, offset: int) -> MetadataImage:
    """ConfigurationControlManager.replay(ConfigRecord): set the key, or remove it for a null
    Value; a resource left with no keys disappears."""
    key = (r.resource_type, r.resource_name)
    cur = img.configs.get(key, pmap())
    cur = cur.discard(r.name) if r.value is None else cur.set(r.name, r.value)
    return evolve(img, configs=img.configs.set(key, cur) if cur else img.configs.discard(key))


REPLAY = {"ConfigRecord": _config}


def delete_topic_configs(img: MetadataImage, name: str) -> Any:
    """``img.configs`` without topic ``name``'s (ConfigurationControlManager.deleteTopicConfigs,
    run by the replay of RemoveTopicRecord)."""
    return img.configs.discard((RESOURCE_TOPIC, name))


# ============================================================================ snapshot
def config_records(image: MetadataImage) -> list:
    """One ConfigRecord per set key, by (resource type, resource name), then key."""
    out = []
    for rtype, rname in sorted(image.configs):
        cfg = image.configs[(rtype, rname)]
        for k in sorted(cfg):
            out.append(
                _R("ConfigRecord")(resource_type=rtype, resource_name=rname, name=k, value=cfg[k])
            )
    return out


SNAPSHOT = (config_records,)
"""This manager's part of a snapshot (``kafka_rpc.controller.snapshot``), in order."""
