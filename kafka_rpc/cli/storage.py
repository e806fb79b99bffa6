"""``kafka-rpc storage random-uuid`` and ``kafka-rpc storage format``: Kafka's
``kafka-storage.sh``."""

from __future__ import annotations

import argparse
import sys
from typing import Any, NoReturn

from kafka_rpc.config import ConfigError, load_config


class KafkaExitParser(argparse.ArgumentParser):
    """An argument parser whose usage errors exit 1, as Kafka's ``StorageTool.execute`` returns
    1 after argparse4j's ``handleError`` (Python's argparse exits 2)."""

    def error(self, message: str) -> NoReturn:
        self.print_usage(sys.stderr)
        self.exit(1, f"{self.prog}: error: {message}\n")


def add_format_quorum_arguments(f: argparse.ArgumentParser) -> None:
    """``format``'s KIP-853 flags, one mutually exclusive group as Kafka's
    ``StorageTool.addFormatParser``."""
    g = f.add_mutually_exclusive_group()
    g.add_argument(
        "--standalone",
        "-s",
        action="store_true",
        help="format this controller as a single-node dynamic quorum (no "
        "controller.quorum.voters; controller.quorum.bootstrap.servers instead)",
    )
    g.add_argument(
        "--no-initial-controllers",
        "-N",
        action="store_true",
        help="format a node of a dynamic quorum without initial voters: it starts as "
        "an observer and finds the leader through controller.quorum.bootstrap.servers",
    )
    g.add_argument("--initial-controllers", "-I", metavar="ID@HOST:PORT:DIRECTORY_ID,...",
                   help="the initial voters of a dynamic quorum, the same on every node, e.g. "
                   "0@example.com:8082:JEXY6aqzQY-32P5TStzaFg,1@example.com:8083:"
                   "MvDxzVmcRsaTz33bUuRU6A (directory ids: storage random-uuid)")  # fmt: skip


def _cmd_storage(args: argparse.Namespace, argv: list[str]) -> int:
    """Kafka's ``kafka-storage.sh``: ``random-uuid`` prints a new cluster id; ``format`` writes
    ``bootstrap.checkpoint`` and ``meta.properties`` into every log directory and the metadata
    log directory (``kafka_rpc.storage.formatter.format_storage``). The bootstrap's feature levels
    are Kafka's ``Formatter`` rules (``--release-version`` parsed as Kafka's
    ``MetadataVersion.fromVersionString``, ``--feature NAME=LEVEL`` repeatable, every other
    feature at its default for that version) with our features (``kafka_rpc.*``) at their max,
    or at 0 with ``--kafka-compatible``; ``--add-scram`` credentials follow them
    (docs/features.md).

    A dynamic quorum (KIP-853: no ``controller.quorum.voters``) is formatted with
    ``--standalone``, ``--initial-controllers`` or ``--no-initial-controllers`` (Kafka's
    ``StorageTool.runFormatCommand`` rules in its order, its messages): static voters with
    ``-s``/``-I`` are refused, a controller of a dynamic quorum needs one of the three,
    ``--standalone`` needs the controller role; kraft.version is 1 for a dynamic quorum and 0
    for a static one, ``--feature kraft.version=N`` must agree (``Formatter
    .effectiveKRaftFeatureLevel``, in :func:`~kafka_rpc.controller.features
    .default_feature_levels`). The metadata directory then also gets the bootstrap
    snapshot with the voters (:mod:`kafka_rpc.storage.initial_controllers`).

    Exit 1 with Kafka's message when a directory is already formatted (unless
    ``--ignore-formatted``), a flag or feature setting is refused, or on a usage error (as
    Kafka's tool), 2 on a configuration error."""
    from kafka_rpc.controller.features import (
        BOOTSTRAP_METADATA_VERSION,
        KRAFT_VERSION,
        FeatureError,
        default_feature_levels,
        metadata_version,
        parse_release_version,
    )
    from kafka_rpc.protocol.uuids import random_uuid_text
    from kafka_rpc.storage.bootstrap import bootstrap_from
    from kafka_rpc.storage.errors import StorageFormattedError
    from kafka_rpc.storage.formatter import directory_description, format_storage
    from kafka_rpc.storage.initial_controllers import parse_dynamic_voters, standalone_voter

    if args.storage_command == "random-uuid":
        print(random_uuid_text())
        return 0
    try:
        config = load_config(args.config, args.override or ())
    except ConfigError as e:
        print(f"kafka-rpc: configuration error: {e}", file=sys.stderr)
        return 2
    try:
        kafka_compatible = args.kafka_compatible or config.kafka_compatible
        mv = BOOTSTRAP_METADATA_VERSION
        if args.release_version is not None:
            mv = parse_release_version(args.release_version).level
        overrides = _feature_levels(args.feature or ())
        initial = _initial_controllers(args, config, parse_dynamic_voters, standalone_voter)
        scram = _scram_credentials(args.add_scram or ())
        if scram is not None:
            from kafka_rpc.controller.scram import scram_records

            scram = scram_records(scram)
        levels = default_feature_levels(mv, overrides, kafka_compatible, config.dynamic_quorum)
        kraft_version = levels[KRAFT_VERSION]  # the Raft layer's: never a bootstrap record
        bootstrap = bootstrap_from(levels, scram or ())
    except ConfigError as e:
        print(f"kafka-rpc: configuration error: {e}", file=sys.stderr)
        return 2
    except (FeatureError, ValueError) as e:
        print(e, file=sys.stderr)
        return 1
    try:
        formatted = format_storage(config, args.cluster_id, args.ignore_formatted, bootstrap,
                                   initial, kraft_version)  # fmt: skip
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
    for d in formatted:
        kind = directory_description(config, d, initial)
        print(f"Formatting {kind} {d} with metadata.version {name}.")
    return 0


class FormatRefused(ValueError):
    """A ``format`` invocation Kafka refuses (its ``TerseFailure``): exit 1 with the message."""


def _initial_controllers(args, config, parse, standalone) -> Any:
    """The initial voters of ``--initial-controllers`` / ``--standalone`` (node id ->
    ``DynamicVoter``), None without either; Kafka ``StorageTool.runFormatCommand``'s checks in
    its order (FormatRefused, or ValueError from parsing ``-I``)."""
    initial_text = getattr(args, "initial_controllers", None)
    is_standalone = bool(getattr(args, "standalone", False))
    no_initial = bool(getattr(args, "no_initial_controllers", False))
    if not config.dynamic_quorum and (initial_text is not None or is_standalone):
        raise FormatRefused(
            "You cannot specify controller.quorum.voters and format the node with "
            "--initial-controllers or --standalone. If you want to use dynamic quorum, please "
            "remove controller.quorum.voters and specify controller.quorum.bootstrap.servers "
            "instead."
        )
    initial = parse(initial_text) if initial_text is not None else None
    if is_standalone:
        if not config.is_controller:
            raise FormatRefused("You can only use --standalone on a controller.")
        listeners = config.advertised_controller_listeners()
        if not listeners:
            raise FormatRefused("No controller listeners found.")
        ep = listeners[0]
        initial = {config.node_id: standalone(config.node_id, ep.host, ep.port)}
    if not no_initial and config.is_controller and config.dynamic_quorum and initial is None:
        raise FormatRefused(
            "Because controller.quorum.voters is not set on this controller, you must specify "
            "one of the following: --standalone, --initial-controllers, or "
            "--no-initial-controllers."
        )
    return initial


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
