"""``kafka-rpc cluster``: Kafka's ``kafka-cluster.sh`` (``org.apache.kafka.tools.ClusterTool``)
over :class:`~kafka_rpc.client.KafkaRpcClient`.

    kafka-rpc cluster cluster-id (--bootstrap-server H:P | --bootstrap-controller H:P)
    kafka-rpc cluster unregister (--bootstrap-server H:P | --bootstrap-controller H:P) --id N

``cluster-id`` sends DescribeCluster (EndpointType 1 on a broker listener, 2 on a controller
listener) and prints ``Cluster ID: <id>``; a broker listener without DescribeCluster is asked
with Metadata instead (as Kafka's admin client falls back), and a missing id prints ``No cluster
ID found. The Kafka version is probably too old.``

``unregister`` sends UnregisterBroker{BrokerId = N} and prints ``Broker N is no longer
registered.`` once the controller has committed the removal. With ``--bootstrap-server`` the
broker forwards it to the active controller; with ``--bootstrap-controller`` the tool first asks
that controller for the controller id and endpoints (DescribeCluster, EndpointType 2, KIP-919)
and sends it to the active controller, looking it up again after NOT_CONTROLLER (at most
``_ATTEMPTS`` times, 100 ms apart, within ``--timeout``). A server that does not serve
UnregisterBroker prints ``The target cluster does not support the broker unregistration API.``
and exits 0, as Kafka does.

Any other failure (an error code such as BROKER_ID_NOT_REGISTERED, a connection failure) prints
``Error: <message> (<ERROR_NAME>)`` or ``Error: <message>`` on stderr and exits 1 (Kafka prints
the exception and its stack trace there); argument errors exit 2 (argparse).
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from collections.abc import Awaitable, Callable
from typing import IO, Any

from kafka_rpc.protocol import codec
from kafka_rpc.protocol.errors import ErrorCode
from kafka_rpc.tools import add_command_config, secured

__all__ = ["ClusterCommandError", "add_arguments", "run", "run_sync"]

_METADATA, _DESCRIBE_CLUSTER, _UNREGISTER_BROKER = 3, 60, 64
_ENDPOINT_BROKER, _ENDPOINT_CONTROLLER = 1, 2
_ATTEMPTS = 5
_RETRY_BACKOFF_S = 0.1
_UNSUPPORTED = "The target cluster does not support the broker unregistration API."
#: Kafka's ``Errors`` default messages, used when a response carries no ErrorMessage.
_DEFAULT_MESSAGES = {
    ErrorCode.BROKER_ID_NOT_REGISTERED: "The given broker ID was not registered.",
    ErrorCode.NOT_CONTROLLER: "This is not the correct controller for this cluster.",
    ErrorCode.REQUEST_TIMED_OUT: "The request timed out.",
    ErrorCode.UNSUPPORTED_ENDPOINT_TYPE: "This endpoint type is not supported yet.",
    ErrorCode.MISMATCHED_ENDPOINT_TYPE: "The request was sent to an endpoint of the wrong type.",
}


class ClusterCommandError(Exception):
    """A failure the tool reports on stderr with exit status 1."""


def _error(code: int, message: str | None) -> ClusterCommandError:
    ec = ErrorCode.for_code(code)
    return ClusterCommandError(f"{message or _DEFAULT_MESSAGES.get(ec, ec.name)} ({ec.name})")


def add_arguments(p: argparse.ArgumentParser) -> None:
    """The ``cluster-id`` and ``unregister`` subcommands of ``kafka-cluster.sh``."""
    sub = p.add_subparsers(dest="cluster_command", required=True)
    cid = sub.add_parser("cluster-id", help="print the cluster id")
    unreg = sub.add_parser("unregister", help="remove a broker's registration")
    for s in (cid, unreg):
        where = s.add_mutually_exclusive_group(required=True)
        where.add_argument("--bootstrap-server", metavar="HOST:PORT",
                           help="a broker listener to connect to")  # fmt: skip
        where.add_argument("--bootstrap-controller", metavar="HOST:PORT",
                           help="a controller listener to connect to")  # fmt: skip
        s.add_argument("--timeout", type=float, default=30.0, help="request timeout, seconds")
        add_command_config(s)
    unreg.add_argument("--id", "-i", type=int, required=True, dest="id",
                       help="the id of the broker to unregister")  # fmt: skip


Connect = Callable[..., Awaitable[Any]]


class ClusterCommand:
    """The two actions; ``connect(address, **kw)`` opens a client (anything with
    ``request(msg, version=, timeout=)``, ``versions`` and ``close()``)."""

    def __init__(self, args: argparse.Namespace, connect: Connect, out: IO[str]) -> None:
        self.args = args
        self.connect = connect
        self.out = out
        self.timeout = args.timeout
        self.controller = args.bootstrap_controller is not None
        self.bootstrap = args.bootstrap_controller or args.bootstrap_server
        self._clients: list[Any] = []

    async def _open(self, address: str) -> Any:
        client = await self.connect(
            address, client_id="kafka-rpc-cluster",
            connect_timeout=self.timeout, request_timeout=self.timeout,
        )  # fmt: skip
        self._clients.append(client)
        return client

    async def close(self) -> None:
        while self._clients:
            await self._clients.pop().close()

    async def _describe(self, client: Any) -> Any:
        """DescribeCluster for this endpoint's type (v1+ on a controller listener)."""
        mod = codec.module("DescribeClusterRequest")
        req = mod.DescribeClusterRequest(
            endpoint_type=_ENDPOINT_CONTROLLER if self.controller else _ENDPOINT_BROKER
        )
        resp = await client.request(req, timeout=self.timeout)
        if resp.error_code:
            raise _error(resp.error_code, resp.error_message)
        return resp

    async def cluster_id(self) -> None:
        """ClusterTool.clusterIdCommand."""
        client = await self._open(self.bootstrap)
        if _DESCRIBE_CLUSTER in client.versions:
            cluster_id = (await self._describe(client)).cluster_id
        elif not self.controller and _METADATA in client.versions:
            md = await client.request(
                codec.message_class("MetadataRequest")(topics=()), timeout=self.timeout
            )
            cluster_id = md.cluster_id
        else:
            cluster_id = None
        if cluster_id:
            print(f"Cluster ID: {cluster_id}", file=self.out)
        else:
            print("No cluster ID found. The Kafka version is probably too old.", file=self.out)

    async def _active_controller(self) -> Any:
        """A client on the active controller's listener, found with DescribeCluster on the
        bootstrap controller (the bootstrap client itself while the leader is unknown)."""
        boot = await self._open(self.bootstrap)
        if _DESCRIBE_CLUSTER not in boot.versions:
            return boot
        resp = await self._describe(boot)
        node = next((b for b in resp.brokers if b.broker_id == resp.controller_id), None)
        if node is None or (node.host, node.port) == getattr(boot, "connected_to", None):
            return boot
        return await self._open(f"{node.host}:{node.port}")

    async def unregister(self) -> None:
        """ClusterTool.unregisterCommand."""
        req = codec.message_class("UnregisterBrokerRequest")(broker_id=self.args.id)
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.timeout
        for attempt in range(_ATTEMPTS):
            client = await (self._active_controller() if self.controller
                            else self._open(self.bootstrap))  # fmt: skip
            if _UNREGISTER_BROKER not in client.versions:
                print(_UNSUPPORTED, file=self.out)
                return
            resp = await client.request(req, timeout=self.timeout)
            retry = (
                resp.error_code == ErrorCode.NOT_CONTROLLER
                and self.controller
                and attempt + 1 < _ATTEMPTS
                and loop.time() + _RETRY_BACKOFF_S < deadline
            )
            if not retry:
                break
            await self.close()
            await asyncio.sleep(_RETRY_BACKOFF_S)
        if resp.error_code:
            raise _error(resp.error_code, resp.error_message)
        print(f"Broker {self.args.id} is no longer registered.", file=self.out)


async def run(
    args: argparse.Namespace,
    *,
    connect: Connect | None = None,
    out: IO[str] | None = None,
    err: IO[str] | None = None,
) -> int:
    """Run the command; returns the exit status (0, or 1 after printing the error on ``err``).
    ``connect(address, **kw)`` defaults to :meth:`KafkaRpcClient.connect`."""
    out = sys.stdout if out is None else out
    err = sys.stderr if err is None else err
    if connect is None:
        from kafka_rpc.client import KafkaRpcClient

        connect = KafkaRpcClient.connect
    cmd = ClusterCommand(args, secured(connect, args), out)
    try:
        if args.cluster_command == "cluster-id":
            await cmd.cluster_id()
        else:
            await cmd.unregister()
        return 0
    except Exception as e:  # noqa: BLE001 - Kafka's ClusterTool prints any failure and exits 1
        print(f"Error: {str(e) or type(e).__name__}", file=err)
        return 1
    finally:
        await cmd.close()


def run_sync(args: argparse.Namespace) -> int:
    return asyncio.run(run(args))
