"""Command-line tools with Kafka's syntax and output (``kafka-dump-log.sh``,
``kafka-topics.sh``); ``kafka_rpc.cli`` registers them as subcommands."""

from __future__ import annotations

import argparse
import functools
from typing import Any


def add_command_config(p: argparse.ArgumentParser) -> None:
    """``--command-config FILE``: the client properties for a secure listener (Kafka's tools'
    option; :func:`kafka_rpc.security.client.client_security_from_properties`)."""
    p.add_argument("--command-config", metavar="FILE",
                   help="client properties (security.protocol, ssl.*, sasl.*) for a secure "
                   "listener")  # fmt: skip


def secured(connect: Any, args: argparse.Namespace) -> Any:
    """``connect`` with the ``security`` of ``args.command_config`` bound, when there is one."""
    from kafka_rpc.security.client import client_security_from_properties

    security = client_security_from_properties(getattr(args, "command_config", None))
    return connect if security is None else functools.partial(connect, security=security)
