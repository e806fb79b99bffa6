"""Dynamic configs in the metadata log (Kafka's ``ConfigurationControlManager``).

* Validation of the topic configs CreateTopics sets (:data:`TOPIC_CONFIGS`,
  :func:`check_topic_configs`); their ConfigRecords are written by
  :func:`~kafka_rpc.controller.replication.create_topics`.
* Replay: ConfigRecord (:data:`REPLAY`); a deleted topic's configs go with it
  (:func:`delete_topic_configs`, ``deleteTopicConfigs``).
* Snapshot part: :func:`config_records` (``ConfigurationsImage.write``).
"""

from __future__ import annotations

from typing import Any

from pyrsistent import pmap

from kafka_rpc.controller.base import ApiError
from kafka_rpc.controller.image import RESOURCE_TOPIC, MetadataImage, evolve
from kafka_rpc.protocol import codec
from kafka_rpc.protocol.errors import ErrorCode

__all__ = [
    "REPLAY",
    "TOPIC_CONFIGS",
    "check_topic_configs",
    "config_records",
    "delete_topic_configs",
]

_R = codec.message_class


def _int_cfg(v: str) -> bool:
    try:
        int(v)
    except ValueError:
        return False
    return True


def _bool_cfg(v: str) -> bool:
    return v.lower() in ("true", "false")


def _policy_cfg(v: str) -> bool:
    parts = [p.strip() for p in v.split(",")]
    return all(p in ("delete", "compact") for p in parts) or v == ""


TOPIC_CONFIGS = {
    "cleanup.policy": _policy_cfg,
    "compression.type": lambda v: (
        v in ("uncompressed", "zstd", "lz4", "snappy", "gzip", "producer")
    ),
    "delete.retention.ms": _int_cfg,
    "diskless.enable": _bool_cfg,
    "file.delete.delay.ms": _int_cfg,
    "flush.messages": _int_cfg,
    "flush.ms": _int_cfg,
    "index.interval.bytes": _int_cfg,
    "local.retention.bytes": _int_cfg,
    "local.retention.ms": _int_cfg,
    "max.compaction.lag.ms": _int_cfg,
    "max.message.bytes": _int_cfg,
    "message.timestamp.after.max.ms": _int_cfg,
    "message.timestamp.before.max.ms": _int_cfg,
    "message.timestamp.type": lambda v: v in ("CreateTime", "LogAppendTime"),
    "min.cleanable.dirty.ratio": lambda v: _float(v),
    "min.compaction.lag.ms": _int_cfg,
    "min.insync.replicas": _int_cfg,
    "preallocate": _bool_cfg,
    "remote.storage.enable": _bool_cfg,
    "retention.bytes": _int_cfg,
    "retention.ms": _int_cfg,
    "segment.bytes": _int_cfg,
    "segment.index.bytes": _int_cfg,
    "segment.jitter.ms": _int_cfg,
    "segment.ms": _int_cfg,
    "unclean.leader.election.enable": _bool_cfg,
}
"""Topic configs CreateTopics accepts (Kafka's ``LogConfig`` names plus Inkless's
``diskless.enable``), each with a value check; anything else is INVALID_CONFIG."""


def _float(v: str) -> bool:
    try:
        float(v)
    except ValueError:
        return False
    return True


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
        check = TOPIC_CONFIGS.get(c.name)
        if check is None:
            raise ApiError(ErrorCode.INVALID_CONFIG, f"Unknown topic config name: {c.name}")
        if not check(c.value):
            raise ApiError(
                ErrorCode.INVALID_CONFIG,
                f"Invalid value {c.value} for configuration {c.name}",
            )
        out[c.name] = c.value
    return out


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
