"""Topic configs as Apache Kafka 4.4 defines them, and a topic's effective configuration.

:data:`TOPIC_CONFIG_DEFS` lists every non-internal config of Kafka's ``LogConfig`` (4.4) with
its ``ConfigDef`` type, the value a Kafka broker with a default ``server.properties`` reports
for a topic that does not override it, and its broker synonyms
(``ServerTopicConfigSynonyms.TOPIC_CONFIG_SYNONYMS`` and ``DynamicBrokerConfig
.brokerConfigSynonyms``), plus Inkless's ``diskless.enable`` (KIP-1164). The values were read
from a Kafka 4.4.0 broker's DescribeConfigs answer; ``tests/kafka/test_kafka_tools.py`` compares
this module's answer with a running Kafka broker's, config by config.

:func:`describe_topic_configs` is Kafka's ``ConfigHelper.createTopicConfigEntry`` over one
topic: the effective value of each config with its source and, when asked for, its synonyms
(highest precedence first):

1. a topic override (a ConfigRecord of the topic in the image): source TOPIC_CONFIG (1);
2. a broker synonym set in the metadata log for this node (a ConfigRecord of resource
   ``(4, "<node id>")``, IncrementalAlterConfigs): DYNAMIC_BROKER_CONFIG (2), or for every
   broker (``(4, "")``): DYNAMIC_DEFAULT_BROKER_CONFIG (3);
3. the broker synonym set in this node's ``server.properties``: STATIC_BROKER_CONFIG (4). Only
   ``log.retention.ms`` and ``log.retention.bytes`` are broker settings here (the diskless
   retention defaults, ``kafka_rpc.broker.retention``); every other broker synonym is at
   Kafka's default;
4. the default: DEFAULT_CONFIG (5), listed as a synonym under the broker key whose default
   Kafka reports (as Kafka, a synonym chain whose first key has no default, such as
   ``log.retention.ms`` behind ``log.retention.hours``, lists no default synonym unless a
   higher source precedes it: Kafka's ``configSynonyms`` ``dropWhile``).

Nothing here is sensitive (no topic config is a PASSWORD) and nothing is read-only, as in Kafka.
Documentation texts are not kept (IncludeDocumentation answers null).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass

from kafka_rpc.controller.image import DISKLESS_ENABLE_CONFIG

__all__ = [
    "BROKER_SETTINGS",
    "CONFIG_TYPES",
    "SOURCE_DEFAULT",
    "SOURCE_DYNAMIC_BROKER",
    "SOURCE_DYNAMIC_DEFAULT",
    "SOURCE_STATIC_BROKER",
    "SOURCE_TOPIC",
    "TOPIC_CONFIG_DEFS",
    "ConfigEntry",
    "TopicConfigDef",
    "describe_topic_configs",
    "list_configs",
    "value_check",
]

#: ``DescribeConfigsResponse.ConfigType`` ids of Kafka's ``ConfigDef.Type`` names.
CONFIG_TYPES = {
    "BOOLEAN": 1,
    "STRING": 2,
    "INT": 3,
    "SHORT": 4,
    "LONG": 5,
    "DOUBLE": 6,
    "LIST": 7,
    "CLASS": 8,
    "PASSWORD": 9,
}

#: ``DescribeConfigsResponse.ConfigSource`` ids used here.
SOURCE_TOPIC = 1
SOURCE_DYNAMIC_BROKER = 2
SOURCE_DYNAMIC_DEFAULT = 3
SOURCE_STATIC_BROKER = 4
SOURCE_DEFAULT = 5

#: The broker settings of this server that are Kafka broker synonyms of a topic config.
BROKER_SETTINGS = ("log.retention.ms", "log.retention.bytes")


@dataclass(frozen=True, slots=True)
class TopicConfigDef:
    """One topic config: ``type`` a ``ConfigDef.Type`` name; ``default`` the value reported for
    a topic without an override; ``synonyms`` the broker keys that set its default, in Kafka's
    precedence order (empty: none); ``default_synonym`` the broker key whose built-in default
    Kafka reports as the DEFAULT_CONFIG synonym (None: none)."""

    name: str
    type: str
    default: str
    synonyms: tuple[str, ...] = ()
    default_synonym: str | None = None
    valid: Callable[[str], bool] | None = None


def _c(
    name: str,
    type_: str,
    default: str,
    *synonyms: str,
    default_synonym: str | None = None,
    valid: Callable[[str], bool] | None = None,
) -> TopicConfigDef:
    """A table row; the default synonym is the first synonym unless ``default_synonym=`` says;
    ``valid``: the ``ConfigDef.Validator`` a value of the right type must also pass."""
    if default_synonym is None and synonyms:
        default_synonym = synonyms[0]
    return TopicConfigDef(name, type_, default, synonyms, default_synonym, valid)


def _one_of(*allowed: str) -> Callable[[str], bool]:
    """``ConfigDef.ValidString.in``: the trimmed value is one of ``allowed``."""
    return lambda v: v.strip() in allowed


def _list_of(*allowed: str) -> Callable[[str], bool]:
    """``ConfigDef.ValidList.in``: every comma-separated item is one of ``allowed`` (the empty
    list too)."""
    return lambda v: all(p.strip() in allowed for p in v.split(",")) or v.strip() == ""


def _ratio(v: str) -> bool:
    """``ConfigDef.Range.between(0, 1)`` of a DOUBLE."""
    try:
        return 0.0 <= float(v) <= 1.0
    except ValueError:
        return False


_MAX_LONG = "9223372036854775807"

TOPIC_CONFIG_DEFS: dict[str, TopicConfigDef] = {
    d.name: d
    for d in (
        _c(
            "cleanup.policy",
            "LIST",
            "delete",
            "log.cleanup.policy",
            valid=_list_of("compact", "delete"),
        ),
        _c("compression.gzip.level", "INT", "-1", "compression.gzip.level"),
        _c("compression.lz4.level", "INT", "9", "compression.lz4.level"),
        _c(
            "compression.type",
            "STRING",
            "producer",
            "compression.type",
            valid=_one_of("uncompressed", "zstd", "lz4", "snappy", "gzip", "producer"),
        ),
        _c("compression.zstd.level", "INT", "3", "compression.zstd.level"),
        _c("delete.retention.ms", "LONG", "86400000", "log.cleaner.delete.retention.ms"),
        _c(DISKLESS_ENABLE_CONFIG, "BOOLEAN", "false"),
        _c("errors.deadletterqueue.group.enable", "BOOLEAN", "false"),
        _c("file.delete.delay.ms", "LONG", "60000", "log.segment.delete.delay.ms"),
        _c("flush.messages", "LONG", _MAX_LONG, "log.flush.interval.messages"),
        _c(
            "flush.ms",
            "LONG",
            _MAX_LONG,
            "log.flush.interval.ms",
            "log.flush.scheduler.interval.ms",
            default_synonym="log.flush.scheduler.interval.ms",
        ),
        _c("follower.replication.throttled.replicas", "LIST", ""),
        _c("index.interval.bytes", "INT", "4096", "log.index.interval.bytes"),
        _c("leader.replication.throttled.replicas", "LIST", ""),
        _c("local.retention.bytes", "LONG", "-2", "log.local.retention.bytes"),
        _c("local.retention.ms", "LONG", "-2", "log.local.retention.ms"),
        _c("max.compaction.lag.ms", "LONG", _MAX_LONG, "log.cleaner.max.compaction.lag.ms"),
        _c("max.decompressed.message.bytes", "INT", "2147483639", "max.decompressed.message.bytes"),
        _c("max.message.bytes", "INT", "1048588", "message.max.bytes"),
        _c(
            "message.timestamp.after.max.ms",
            "LONG",
            "3600000",
            "log.message.timestamp.after.max.ms",
        ),
        _c(
            "message.timestamp.before.max.ms",
            "LONG",
            _MAX_LONG,
            "log.message.timestamp.before.max.ms",
        ),
        _c(
            "message.timestamp.type",
            "STRING",
            "CreateTime",
            "log.message.timestamp.type",
            valid=_one_of("CreateTime", "LogAppendTime"),
        ),
        _c(
            "min.cleanable.dirty.ratio",
            "DOUBLE",
            "0.5",
            "log.cleaner.min.cleanable.ratio",
            valid=_ratio,
        ),
        _c("min.compaction.lag.ms", "LONG", "0", "log.cleaner.min.compaction.lag.ms"),
        _c("min.insync.replicas", "INT", "1", "min.insync.replicas"),
        _c("preallocate", "BOOLEAN", "false", "log.preallocate"),
        _c("remote.copy.lag.bytes", "LONG", "-1", "log.remote.copy.lag.bytes"),
        _c("remote.copy.lag.ms", "LONG", "0", "log.remote.copy.lag.ms"),
        _c("remote.log.copy.disable", "BOOLEAN", "false"),
        _c("remote.log.delete.on.disable", "BOOLEAN", "false"),
        _c("remote.storage.enable", "BOOLEAN", "false"),
        _c("retention.bytes", "LONG", "-1", "log.retention.bytes"),
        _c(
            "retention.ms",
            "LONG",
            "604800000",
            "log.retention.ms",
            "log.retention.minutes",
            "log.retention.hours",
            default_synonym="log.retention.hours",
        ),
        _c("segment.bytes", "INT", "1073741824", "log.segment.bytes"),
        _c("segment.index.bytes", "INT", "10485760", "log.index.size.max.bytes"),
        _c(
            "segment.jitter.ms",
            "LONG",
            "0",
            "log.roll.jitter.ms",
            "log.roll.jitter.hours",
            default_synonym="log.roll.jitter.hours",
        ),
        _c(
            "segment.ms",
            "LONG",
            "604800000",
            "log.roll.ms",
            "log.roll.hours",
            default_synonym="log.roll.hours",
        ),
        _c("unclean.leader.election.enable", "BOOLEAN", "false", "unclean.leader.election.enable"),
    )
}

#: Built-in defaults of the broker keys that are a default synonym but not the config's own
#: value (``retention.ms`` = 604800000 ms is ``log.retention.hours`` = 168).
_BROKER_DEFAULTS = {
    "log.retention.hours": "168",
    "log.roll.hours": "168",
    "log.roll.jitter.hours": "0",
    "log.flush.scheduler.interval.ms": _MAX_LONG,
}


@dataclass(frozen=True, slots=True)
class ConfigEntry:
    """One config of a DescribeConfigs answer: ``synonyms`` as ``(name, value, source)``."""

    name: str
    value: str | None
    source: int
    config_type: int
    synonyms: tuple[tuple[str, str | None, int], ...] = ()
    read_only: bool = False
    is_sensitive: bool = False


def _broker_chain(
    d: TopicConfigDef, sources: list[tuple[int, Mapping[str, str]]]
) -> list[tuple[str, str | None, int]]:
    """Kafka's ``configSynonyms``: the broker keys of ``d`` set in each source (highest
    precedence first, keys in chain order), then the default, dropped up to the first entry
    named as the chain's first key."""
    chain: list[tuple[str, str | None, int]] = [
        (k, values[k], source) for source, values in sources for k in d.synonyms if k in values
    ]
    if d.default_synonym is not None:
        value = _BROKER_DEFAULTS.get(d.default_synonym, d.default)
        chain.append((d.default_synonym, value, SOURCE_DEFAULT))
    lead = d.synonyms[0] if d.synonyms else None
    while chain and chain[0][0] != lead:
        chain.pop(0)
    return chain


def describe_topic_configs(
    overrides: Mapping[str, str],
    broker_settings: Mapping[str, str],
    keys: Iterable[str] | None = None,
    include_synonyms: bool = False,
    dynamic_broker: Mapping[str, str] | None = None,
    dynamic_default: Mapping[str, str] | None = None,
) -> list[ConfigEntry]:
    """The effective configs of one topic, by name, as Kafka's ``ConfigHelper.describeConfigs``
    reports a TOPIC resource. ``overrides``: the topic's ConfigRecords (name -> value);
    ``broker_settings``: the keys of :data:`BROKER_SETTINGS` this node's ``server.properties``
    sets (name -> value as written); ``dynamic_broker`` / ``dynamic_default``: the broker
    configs of the metadata log for this node (ConfigRecords of resource ``(4, "<node id>")``,
    DYNAMIC_BROKER_CONFIG) and for every broker (``(4, "")``, DYNAMIC_DEFAULT_BROKER_CONFIG);
    ``keys``: only these names (None or empty: all). Without an override a config's value and
    source are those of the first synonym named as its chain's first broker key (Kafka's
    ``log.retention.ms``, not ``log.retention.hours``: a value set only under a later key of
    the chain is not converted), else its default. A topic override of a name Kafka does not
    define is listed too, with type 0 (unknown) and its value, as Kafka lists a topic property
    outside ``LogConfig``."""
    static = {k: v.strip() for k, v in broker_settings.items() if k in BROKER_SETTINGS}
    sources: list[tuple[int, Mapping[str, str]]] = [
        (SOURCE_DYNAMIC_BROKER, dynamic_broker or {}),
        (SOURCE_DYNAMIC_DEFAULT, dynamic_default or {}),
        (SOURCE_STATIC_BROKER, static),
    ]
    wanted = set(keys) if keys else None
    out: list[ConfigEntry] = []
    names = sorted(set(TOPIC_CONFIG_DEFS) | set(overrides))
    for name in names:
        if wanted is not None and name not in wanted:
            continue
        override = overrides.get(name)
        d = TOPIC_CONFIG_DEFS.get(name)
        if d is None:  # a config outside Kafka's LogConfig (only ever an override here)
            syn = ((name, override, SOURCE_TOPIC),) if include_synonyms else ()
            out.append(ConfigEntry(name, override, SOURCE_TOPIC, 0, syn))
            continue
        chain = _broker_chain(d, sources)
        value: str | None
        if override is not None:
            value, source = override, SOURCE_TOPIC
            chain.insert(0, (d.name, override, SOURCE_TOPIC))
        elif chain and chain[0][2] != SOURCE_DEFAULT:
            value, source = chain[0][1], chain[0][2]
        else:
            value, source = d.default, SOURCE_DEFAULT
        out.append(
            ConfigEntry(
                name,
                value,
                source,
                CONFIG_TYPES[d.type],
                tuple(chain) if include_synonyms else (),
            )
        )
    return out


def _int_in(lo: int, hi: int) -> Callable[[str], bool]:
    def check(v: str) -> bool:
        try:
            return lo <= int(v.strip()) <= hi
        except ValueError:
            return False

    return check


def _double(v: str) -> bool:
    try:
        float(v)
    except ValueError:
        return False
    return True


_TYPE_CHECKS: dict[str, Callable[[str], bool]] = {
    "BOOLEAN": lambda v: v.strip().lower() in ("true", "false"),
    "INT": _int_in(-(1 << 31), (1 << 31) - 1),
    "LONG": _int_in(-(1 << 63), (1 << 63) - 1),
    "DOUBLE": _double,
    "LIST": lambda v: True,
    "STRING": lambda v: True,
}


def value_check(name: str) -> Callable[[str], bool] | None:
    """A check that a text is a valid value of topic config ``name``: a value of its type
    (Kafka's ``ConfigDef.parseType``) that passes the row's validator (``ValidString``,
    ``ValidList``, the ratio's range); None for a name Kafka does not define. The numeric
    ``atLeast`` bounds of Kafka's ``LogConfig`` are not checked."""
    d = TOPIC_CONFIG_DEFS.get(name)
    if d is None:
        return None
    parses, valid = _TYPE_CHECKS[d.type], d.valid
    if valid is None:
        return parses
    return lambda v: parses(v) and valid(v)


def list_configs() -> frozenset[str]:
    """The topic configs of type LIST, which IncrementalAlterConfigs may APPEND to / SUBTRACT
    from (``KafkaConfigSchema.isSplittable``)."""
    return frozenset(n for n, d in TOPIC_CONFIG_DEFS.items() if d.type == "LIST")
