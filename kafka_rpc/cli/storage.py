"""``kafka-rpc storage random-uuid`` and ``kafka-rpc storage format``: Kafka's
``kafka-storage.sh``."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from kafka_rpc.config import ConfigError, load_config


def _cmd_storage(args: argparse.Namespace, argv: list[str]) -> int:
    """Kafka's ``kafka-storage.sh``: ``random-uuid`` prints a new cluster id; ``format`` writes
    ``bootstrap.checkpoint`` and ``meta.properties`` into every log directory and the metadata
    log directory (``kafka_rpc.storage.formatter.format_storage``). The bootstrap's feature levels
    are Kafka's ``Formatter`` rules (``--release-version`` parsed as Kafka's
    ``MetadataVersion.fromVersionString``, ``--feature NAME=LEVEL`` repeatable, every other
    feature at its default for that version) with our features (``kafka_rpc.*``) at their max,
    or at 0 with ``--kafka-compatible``; ``--add-scram`` credentials follow them
    (docs/features.md). Exit 1 with Kafka's message when a directory is already formatted
    (unless ``--ignore-formatted``) or a feature setting is refused, 2 on a configuration
    error."""
    from kafka_rpc.controller.features import (
        BOOTSTRAP_METADATA_VERSION,
        FeatureError,
        default_feature_levels,
        metadata_version,
        parse_release_version,
    )
    from kafka_rpc.protocol.uuids import random_uuid_text
    from kafka_rpc.storage.bootstrap import bootstrap_from
    from kafka_rpc.storage.errors import StorageFormattedError
    from kafka_rpc.storage.formatter import format_storage

    if args.storage_command == "random-uuid":
        print(random_uuid_text())
        return 0
    try:
        config = load_config(args.config, args.override or ())
        kafka_compatible = args.kafka_compatible or config.kafka_compatible
        mv = BOOTSTRAP_METADATA_VERSION
        if args.release_version is not None:
            mv = parse_release_version(args.release_version).level
        overrides = _feature_levels(args.feature or ())
        levels = default_feature_levels(mv, overrides, kafka_compatible)
        scram = _scram_credentials(args.add_scram or ())
        if scram is not None:
            from kafka_rpc.controller.scram import scram_records

            scram = scram_records(scram)
        bootstrap = bootstrap_from(levels, scram or ())
    except ConfigError as e:
        print(f"kafka-rpc: configuration error: {e}", file=sys.stderr)
        return 2
    except (FeatureError, ValueError) as e:
        print(e, file=sys.stderr)
        return 1
    try:
        formatted = format_storage(config, args.cluster_id, args.ignore_formatted, bootstrap)
    except StorageFormattedError as e:
        print(e, file=sys.stderr)
        return 1
    except ConfigError as e:
        print(f"kafka-rpc: configuration error: {e}", file=sys.stderr)
        return 2
    except OSError as e:
        print(f"kafka-rpc: cannot format: {e}", file=sys.stderr)
        return 1
    if not formatted:
        print("All of the log directories are already formatted.")
        return 0
    print("Bootstrap metadata: " + ", ".join(f"{k}={v}" for k, v in sorted(levels.items())))
    name = metadata_version(mv).name
    meta_dir = Path(config.metadata_log_dir).resolve()
    for d in formatted:
        kind = "metadata" if d.resolve() == meta_dir else "data"
        print(f"Formatting {kind} directory {d} with metadata.version {name}.")
    return 0


def _feature_levels(items) -> dict[str, int]:
    """``--feature NAME=LEVEL`` arguments (Kafka's ``StorageTool.parseNameAndLevel``: the name
    and level trimmed, the level a short); ValueError with Kafka's message otherwise."""
    out: dict[str, int] = {}
    for item in items:
        name, sep, text = item.partition("=")
        if not sep:
            raise ValueError(f"Can't parse feature=level string {item}: equals sign not found.")
        try:
            lvl = int(text.strip())
            if not -32768 <= lvl <= 32767:
                raise ValueError
        except ValueError:
            raise ValueError(f"Can't parse feature=level string {item}: unable to parse "
                             f"{text.strip()} as a short.") from None  # fmt: skip
        out[name.strip()] = lvl
    return out


def _scram_credentials(items) -> Any:
    """``--add-scram`` arguments (Kafka's syntax) salted into a ``ScramCredentials`` store, or
    None without any (ConfigError on a malformed one)."""
    if not items:
        return None
    from kafka_rpc.security.sasl import ScramCredentials, parse_add_scram

    store = ScramCredentials()
    for item in items:
        mech, name, password, iterations, salt = parse_add_scram(item)
        store.add(mech, name, password, iterations, salt)
    return store
