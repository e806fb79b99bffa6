"""``kafka-rpc acls``: Kafka's ``kafka-acls.sh`` for the cluster and topic ACLs.

    kafka-rpc acls --bootstrap-server HOST:PORT [--command-config client.properties]
        (--add | --remove | --list)
        [--cluster | --topic NAME] [--resource-pattern-type literal|prefixed|any|match]
        [--allow-principal User:x ...] [--deny-principal User:y ...]
        [--allow-host H ...] [--deny-host H ...] [--operation Read ...]

``--add`` sends CreateAcls (every principal x host x operation), ``--remove`` DeleteAcls with
one filter per combination (all of the resource's ACLs without principals), ``--list``
DescribeAcls; output lines as Kafka's ``AclCommand``. ``--command-config`` takes the client
keys ``security.protocol`` (PLAINTEXT, SSL, SASL_PLAINTEXT, SASL_SSL), ``ssl.truststore.location``,
``ssl.keystore.location``, ``ssl.key.password``, ``ssl.endpoint.identification.algorithm``,
``sasl.mechanism`` and ``sasl.jaas.config`` (username/password). Exit status 1 with Kafka's
"Error while executing ACL command" on any failure.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from collections.abc import Sequence
from typing import IO, Any

from kafka_rpc.protocol import codec
from kafka_rpc.security.authorizer import (
    CLUSTER_NAME,
    AclOperation,
    AclPermissionType,
    PatternType,
    ResourceType,
)

__all__ = ["add_arguments", "run", "run_sync"]


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--bootstrap-server", required=True, metavar="HOST:PORT")
    p.add_argument("--command-config", metavar="FILE", help="client security properties")
    act = p.add_mutually_exclusive_group(required=True)
    act.add_argument("--add", action="store_true")
    act.add_argument("--remove", action="store_true")
    act.add_argument("--list", action="store_true")
    res = p.add_mutually_exclusive_group()
    res.add_argument("--cluster", action="store_true")
    res.add_argument("--topic")
    p.add_argument("--resource-pattern-type", default=None,
                   choices=("literal", "prefixed", "any", "match"))  # fmt: skip
    p.add_argument("--allow-principal", action="append", default=[])
    p.add_argument("--deny-principal", action="append", default=[])
    p.add_argument("--allow-host", action="append", default=[])
    p.add_argument("--deny-host", action="append", default=[])
    p.add_argument("--operation", action="append", default=[])
    p.add_argument("--principal", action="append", default=[], help="--list: only these")
    p.add_argument("--timeout", type=float, default=10.0)


_OP_ALIASES = {
    "CLUSTERACTION": "CLUSTER_ACTION",
    "DESCRIBECONFIGS": "DESCRIBE_CONFIGS",
    "ALTERCONFIGS": "ALTER_CONFIGS",
    "IDEMPOTENTWRITE": "IDEMPOTENT_WRITE",
}


def _op(name: str) -> int:
    """Kafka's operation names (``ClusterAction``, ``Read`` ...) -> AclOperation."""
    key = name.strip().upper().replace("-", "_")
    key = _OP_ALIASES.get(key, key)
    try:
        return AclOperation[key]
    except KeyError:
        raise ValueError(f"unknown operation {name!r}") from None


def _resource(args: argparse.Namespace) -> tuple[int, str]:
    if args.topic:
        return ResourceType.TOPIC, args.topic
    return ResourceType.CLUSTER, CLUSTER_NAME


def _pattern(args: argparse.Namespace, default: str) -> int:
    return PatternType[(args.resource_pattern_type or default).upper()]


def _entries(args: argparse.Namespace) -> list[tuple[str, str, int, int]]:
    """(principal, host, operation, permission) for every combination asked for."""
    ops = [_op(o) for o in args.operation] or [AclOperation.ALL]
    out: list[tuple[str, str, int, int]] = []
    for principals, hosts, perm in (
        (args.allow_principal, args.allow_host or ["*"], AclPermissionType.ALLOW),
        (args.deny_principal, args.deny_host or ["*"], AclPermissionType.DENY),
    ):
        out += [(p, h, o, perm) for p in principals for h in hosts for o in ops]
    return out


def _error_text(r: Any) -> str:
    from kafka_rpc.protocol.errors import ErrorCode

    name = ErrorCode.for_code(r.error_code).name
    return f"{name}: {r.error_message}" if r.error_message else name


def _line(principal: str, host: str, op: int, perm: int) -> str:
    return (f"\t(principal={principal}, host={host}, operation={AclOperation(op).name}, "
            f"permissionType={AclPermissionType(perm).name})")  # fmt: skip


async def _list(client: Any, args: argparse.Namespace, out: IO[str]) -> None:
    has_resource = args.cluster or args.topic
    rtype, name = _resource(args) if has_resource else (ResourceType.ANY, None)
    req = codec.message_class("DescribeAclsRequest")(
        resource_type_filter=rtype, resource_name_filter=name,
        pattern_type_filter=_pattern(args, "any"), principal_filter=None, host_filter=None,
        operation=AclOperation.ANY, permission_type=AclPermissionType.ANY,
    )  # fmt: skip
    resp = await client.request(req, raise_on_error=True)
    for r in resp.resources:
        acls = [a for a in r.acls if not args.principal or a.principal in args.principal]
        if not acls:
            continue
        print(f"Current ACLs for resource `ResourcePattern(resourceType="
              f"{ResourceType(r.resource_type).name}, name={r.resource_name}, "
              f"patternType={PatternType(r.pattern_type).name})`: ", file=out)  # fmt: skip
        for a in acls:
            print(_line(a.principal, a.host, a.operation, a.permission_type), file=out)
        print(file=out)


async def _add(client: Any, args: argparse.Namespace, out: IO[str]) -> None:
    rtype, name = _resource(args)
    entries = _entries(args)
    if not entries:
        raise ValueError("--add needs --allow-principal or --deny-principal")
    mod = codec.module("CreateAclsRequest")
    creations = tuple(
        mod.AclCreation(
            resource_type=rtype,
            resource_name=name,
            resource_pattern_type=_pattern(args, "literal"),
            principal=p,
            host=h,
            operation=o,
            permission_type=perm,
        )
        for p, h, o, perm in entries
    )
    resp = await client.request(mod.CreateAclsRequest(creations=creations))
    print(f"Adding ACLs for resource `ResourcePattern(resourceType={ResourceType(rtype).name}, "
          f"name={name}, patternType={PatternType(_pattern(args, 'literal')).name})`: ",
          file=out)  # fmt: skip
    for (p, h, o, perm), r in zip(entries, resp.results):
        if r.error_code:
            raise RuntimeError(_error_text(r))
        print(_line(p, h, o, perm), file=out)
    print(file=out)


async def _remove(client: Any, args: argparse.Namespace, out: IO[str]) -> None:
    rtype, name = _resource(args)
    mod = codec.module("DeleteAclsRequest")
    entries: Sequence[tuple[str | None, str | None, int, int]] = _entries(args) or [
        (None, None, AclOperation.ANY, AclPermissionType.ANY)
    ]
    filters = tuple(
        mod.DeleteAclsFilter(
            resource_type_filter=rtype,
            resource_name_filter=name,
            pattern_type_filter=_pattern(args, "literal"),
            principal_filter=p,
            host_filter=h,
            operation=o,
            permission_type=perm,
        )
        for p, h, o, perm in entries
    )
    resp = await client.request(mod.DeleteAclsRequest(filters=filters))
    for r in resp.filter_results:
        if r.error_code:
            raise RuntimeError(_error_text(r))
        for m in r.matching_acls:
            print("Removed" + _line(m.principal, m.host, m.operation, m.permission_type),
                  file=out)  # fmt: skip


async def run(args: argparse.Namespace, *, out: IO[str] | None = None) -> int:
    """Run the command; returns the exit status."""
    out = sys.stdout if out is None else out
    from kafka_rpc.client import KafkaRpcClient

    client = None
    try:
        from kafka_rpc.security.client import client_security_from_properties

        security = client_security_from_properties(args.command_config)
        client = await KafkaRpcClient.connect(
            args.bootstrap_server, client_id="kafka-rpc-acls", connect_timeout=args.timeout,
            request_timeout=args.timeout, security=security,
        )  # fmt: skip
        action = _add if args.add else _remove if args.remove else _list
        await action(client, args, out)
        return 0
    except Exception as e:  # noqa: BLE001 - Kafka prints any failure this way (AclCommand)
        print(f"Error while executing ACL command: {str(e) or type(e).__name__}", file=out)
        return 1
    finally:
        if client is not None:
            await client.close()


def run_sync(args: argparse.Namespace) -> int:
    return asyncio.run(run(args))
