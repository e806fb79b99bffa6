"""``kafka-rpc metadata-quorum describe (--status | --replication [--human-readable])``,
``add-controller --command-config FILE [--dry-run]`` and ``remove-controller --controller-id N
--controller-directory-id UUID [--dry-run]``: Kafka's ``kafka-metadata-quorum.sh``
(``MetadataQuorumCommand``), its output line for line.

``add-controller`` reads the new controller's own properties file (``--command-config``, which
also carries the client security): ``node.id`` (required, at least 0) with ``controller`` in
``process.roles``; its metadata directory (``metadata.log.dir``, else the first of ``log.dirs``;
never ``log.dir``) and that directory's ``meta.properties`` ``directory.id``; one endpoint per
``controller.listener.names`` entry from ``listeners`` overridden by ``advertised.listeners``
(an empty host is ``localhost``). It sends AddRaftVoter (v1, AckWhenCommitted true: the answer
comes once the VotersRecord is committed) and prints ``Added controller <id> with directory id
<uuid> and endpoints: <NAME>://<host>:<port>, ...``. ``remove-controller`` sends RemoveRaftVoter
and prints ``Removed KRaft controller <id> with directory id <uuid>`` (Kafka 4.4's line; 4.2
printed two spaces there). ``--dry-run`` checks and prints ``DRY RUN of adding ...`` / ``DRY RUN
of removing KRaft controller ...`` without sending. Both go to the active controller as Kafka's
admin client does: a controller that is not the leader (NOT_LEADER_OR_FOLLOWER, NOT_CONTROLLER)
is left for the leader its DescribeQuorum names; a broker forwards. An error answer prints the
line Kafka's tool prints first, ``<Java exception class>: <the answer's ErrorMessage, else
Kafka's default message>``, and exits 1, as every refusal does (Kafka's messages).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kafka_rpc.protocol.uuids import uuid_from_kafka_string, uuid_text
from kafka_rpc.tools import secured


def _endpoint_text(name: str, host: str, port: int) -> str:
    """Kafka's ``RaftVoterEndpoint.toString``: ``NAME://host:port``, an IPv6 host bracketed."""
    return f"{name}://[{host}]:{port}" if ":" in host else f"{name}://{host}:{port}"


def _quorum_status_lines(cluster_id: str, p, nodes) -> list[str]:
    """Kafka's ``kafka-metadata-quorum describe --status`` lines for DescribeQuorum partition
    data ``p`` and its ``Nodes`` (``MetadataQuorumCommand.handleDescribeStatus``):
    MaxFollowerLag = the leader's log end offset - the smallest voter log end offset, and
    MaxFollowerLagTimeMs the leader's last caught-up time - that voter's (0 when it is the
    leader, -1 when either is unknown). CurrentVoters and CurrentObservers as Kafka's
    ``Node.toString`` writes them: ``{"id": N, "directoryId": "<uuid>", "endpoints":
    ["NAME://host:port", ...]}``, the directory id left out when zero and the endpoints (from
    ``Nodes``) when there are none."""
    endpoints = {n.node_id: [_endpoint_text(li.name, li.host, li.port) for li in n.listeners]
                 for n in nodes}  # fmt: skip

    def replicas(states) -> str:
        out = []
        for r in states:
            d: dict[str, Any] = {"id": r.replica_id}
            if r.replica_directory_id.int != 0:
                d["directoryId"] = uuid_text(r.replica_directory_id)
            if endpoints.get(r.replica_id):
                d["endpoints"] = endpoints[r.replica_id]
            out.append(json.dumps(d))
        return "[" + ", ".join(out) + "]"

    leader = next((r for r in p.current_voters if r.replica_id == p.leader_id), None)
    laggard = min(p.current_voters, key=lambda r: r.log_end_offset, default=None)
    top = leader.log_end_offset if leader is not None else p.high_watermark
    lag = top - laggard.log_end_offset if laggard is not None else 0
    if laggard is None or laggard is leader:
        lag_ms = 0
    elif leader is not None and leader.last_caught_up_timestamp >= 0 <= (
        laggard.last_caught_up_timestamp
    ):
        lag_ms = leader.last_caught_up_timestamp - laggard.last_caught_up_timestamp
    else:
        lag_ms = -1
    rows = [
        ("ClusterId:", cluster_id),
        ("LeaderId:", p.leader_id),
        ("LeaderEpoch:", p.leader_epoch),
        ("HighWatermark:", p.high_watermark),
        ("MaxFollowerLag:", lag),
        ("MaxFollowerLagTimeMs:", lag_ms),
        ("CurrentVoters:", replicas(p.current_voters)),
        ("CurrentObservers:", replicas(p.observers)),
    ]
    return [f"{k:<24}{v}" for k, v in rows]


def _quorum_replication_lines(p, human_readable: bool = False, now_ms: int | None = None):
    """Kafka's ``describe --replication`` table (``handleDescribeReplication``,
    ``ToolsUtils.prettyPrintTable``): the leader's row, the other voters' ("Follower"), then the
    observers'; DirectoryId as the raw Uuid text (zero: ``AAAAAAAAAAAAAAAAAAAAAA``); Lag = the
    leader's log end offset - the replica's; each cell padded to its column's width and
    followed by a tab. ``human_readable``: the timestamps as ``N ms ago`` (``now_ms``: the
    wall clock), an unknown one (-1) as ``-1``; ValueError with Kafka's message for a
    timestamp in the future."""
    import time

    now = int(time.time() * 1000) if now_ms is None else now_ms
    header = ("NodeId", "DirectoryId", "LogEndOffset", "Lag", "LastFetchTimestamp",
              "LastCaughtUpTimestamp", "Status")  # fmt: skip
    leader = next((r for r in p.current_voters if r.replica_id == p.leader_id), None)
    top = leader.log_end_offset if leader is not None else p.high_watermark

    def when(ts: int, desc: str) -> str:
        if ts < 0:
            return "-1"
        if not human_readable:
            return str(ts)
        if not 0 < ts <= now:
            raise ValueError(
                "Error while computing relative time, possible drift in system clock.\n"
                f"Current timestamp is {now}, {desc} timestamp is {ts}"
            )
        return f"{now - ts} ms ago"

    def row(r, status: str) -> tuple[str, ...]:
        return (str(r.replica_id), uuid_text(r.replica_directory_id), str(r.log_end_offset),
                str(top - r.log_end_offset), when(r.last_fetch_timestamp, "last fetch"),
                when(r.last_caught_up_timestamp, "last caught up"), status)  # fmt: skip

    rows: list[tuple[str, ...]] = [header]
    if leader is not None:
        rows.append(row(leader, "Leader"))
    rows += [row(r, "Follower") for r in p.current_voters if r is not leader]
    rows += [row(r, "Observer") for r in p.observers]
    widths = [max(len(r[i]) for r in rows) for i in range(len(header))]
    return ["".join(c.ljust(w) + "\t" for c, w in zip(r, widths, strict=True)) for r in rows]


# ------------------------------------------------------------------ add- and remove-controller
class TerseFailure(Exception):
    """A refusal Kafka's tool prints as its bare message (``TerseException``), exit 1."""


#: Kafka's ``Errors``: code -> (exception class, default message), for the answers
#: AddRaftVoter and RemoveRaftVoter give (``Errors.exception(message)``).
_ERRORS = {
    -1: ("org.apache.kafka.common.errors.UnknownServerException",
         "The server experienced an unexpected error when processing the request."),
    6: ("org.apache.kafka.common.errors.NotLeaderOrFollowerException",
        "For requests intended only for the leader, this error indicates that the broker is not "
        "the current leader. For requests intended for any replica, this error indicates that "
        "the broker is not a replica of the topic partition."),
    7: ("org.apache.kafka.common.errors.TimeoutException", "The request timed out."),
    8: ("org.apache.kafka.common.errors.BrokerNotAvailableException",
        "The broker is not available."),
    31: ("org.apache.kafka.common.errors.ClusterAuthorizationException",
         "Cluster authorization failed."),
    35: ("org.apache.kafka.common.errors.UnsupportedVersionException",
         "The version of API is not supported."),
    41: ("org.apache.kafka.common.errors.NotControllerException",
         "This is not the correct controller for this cluster."),
    42: ("org.apache.kafka.common.errors.InvalidRequestException",
         "This most likely occurs because of a request being malformed by the client library or "
         "the message was sent to an incompatible broker. See the broker logs for more details."),
    104: ("org.apache.kafka.common.errors.InconsistentClusterIdException",
          "The clusterId in the request does not match that found on the server."),
    125: ("org.apache.kafka.common.errors.InvalidVoterKeyException",
          "The voter key doesn't match the receiving replica's key."),
    126: ("org.apache.kafka.common.errors.DuplicateVoterException",
          "The voter is already part of the set of voters."),
    127: ("org.apache.kafka.common.errors.VoterNotFoundException",
          "The voter is not part of the set of voters."),
}  # fmt: skip


def error_text(code: int, message: str | None) -> str:
    """What Kafka's tool prints first for an error answer: the admin client's future fails with
    ``Errors.forCode(code).exception(message)`` and ``mainNoExit`` prints the
    ExecutionException's message, ``<exception class>: <message>``, the answer's ErrorMessage
    or, when null, the code's default message."""
    from kafka_rpc.protocol.errors import ErrorCode

    cls, default = _ERRORS.get(code, (None, None))
    if cls is None:
        try:
            name = ErrorCode(code).name
        except ValueError:
            name = f"UNKNOWN_CODE_{code}"
        cls = "org.apache.kafka.common.errors.ApiException"
        default = name
    return f"{cls}: {message if message is not None else default}"


@dataclass(frozen=True)
class NewController:
    """What ``add-controller`` reads from the new controller's properties file."""

    node_id: int
    directory_id: uuid.UUID
    endpoints: tuple[tuple[str, str, int], ...]  # (listener name, host, port)


def controller_id_from(props: dict[str, str]) -> int:
    """Kafka ``MetadataQuorumCommand.getControllerId``: ``node.id`` (Java's Integer.parseInt:
    ValueError ``For input string: "x"``), at least 0, ``controller`` in ``process.roles``."""
    if "node.id" not in props:
        raise TerseFailure("node.id not found in configuration file. Is this a valid "
                           "controller configuration file?")  # fmt: skip
    text = props["node.id"]
    try:
        node_id = int(text) if text.strip() == text and text.lstrip("+-").isdigit() else None
    except ValueError:
        node_id = None
    if node_id is None or not -(2**31) <= node_id < 2**31:
        raise ValueError(f'For input string: "{text}"')
    if node_id < 0:
        raise TerseFailure("node.id was negative in configuration file. Is this a valid "
                           "controller configuration file?")  # fmt: skip
    if "controller" not in props.get("process.roles", ""):
        raise TerseFailure("process.roles did not contain 'controller' in configuration file. "
                           "Is this a valid controller configuration file?")  # fmt: skip
    return node_id


def metadata_directory_from(props: dict[str, str]) -> str:
    """Kafka ``getMetadataDirectory``: ``metadata.log.dir``, else the first of ``log.dirs``."""
    if "metadata.log.dir" in props:
        return props["metadata.log.dir"]
    if "log.dirs" in props:
        return props["log.dirs"].strip().split(",")[0]
    raise TerseFailure("Neither metadata.log.dir nor log.dirs were found. Is this a valid "
                       "controller configuration file?")  # fmt: skip


def metadata_directory_id_of(directory: str) -> uuid.UUID:
    """Kafka ``getMetadataDirectoryId``: the ``directory.id`` of ``<directory>/meta.properties``
    (TerseFailure "Unable to read meta.properties from ..." / "No directory id found in ...")."""
    from kafka_rpc.protocol.uuids import parse_uuid_text
    from kafka_rpc.storage import meta_properties
    from kafka_rpc.storage.errors import StorageError

    try:
        meta = meta_properties.read(Path(directory))
    except (StorageError, OSError):
        meta = None
    if meta is None:
        raise TerseFailure(f"Unable to read meta.properties from {directory}")
    if meta.directory_id is None:
        raise TerseFailure(f"No directory id found in {directory}")
    return parse_uuid_text(meta.directory_id)


def controller_endpoints_from(props: dict[str, str]) -> tuple[tuple[str, str, int], ...]:
    """Kafka ``getControllerAdvertisedListeners``: ``listeners`` overridden per name by
    ``advertised.listeners``, then one endpoint per ``controller.listener.names`` entry (names
    upper-cased), an empty host as ``localhost``; TerseFailure for a missing name."""
    from kafka_rpc.config import ConfigError, parse_listeners

    found: dict[str, Any] = {}
    for key in ("listeners", "advertised.listeners"):
        try:
            for e in parse_listeners(key, props.get(key, "")):
                found[e.name] = e
        except ConfigError as e:
            raise TerseFailure(str(e)) from None
    if "controller.listener.names" not in props:
        raise TerseFailure("controller.listener.names was not found. Is this a valid controller "
                           "configuration file?")  # fmt: skip
    out: dict[tuple[str, str, int], None] = {}  # Kafka's LinkedHashSet
    for name in props["controller.listener.names"].split(","):
        name = name.upper()
        ep = found.get(name)
        if ep is None:
            raise TerseFailure(f"Cannot find information about controller listener name: {name}")
        out[(ep.name, ep.host or "localhost", ep.port)] = None
    return tuple(out)


def read_new_controller(path: str) -> NewController:
    """``add-controller``'s reading of the new controller's ``--command-config`` file, Kafka's
    checks in Kafka's order."""
    from kafka_rpc.config import ConfigError, read_properties

    try:
        props = {k: v.strip() for k, v in read_properties(path).items()}
    except ConfigError as e:
        raise TerseFailure(str(e)) from None
    node_id = controller_id_from(props)
    directory_id = metadata_directory_id_of(metadata_directory_from(props))
    return NewController(node_id, directory_id, controller_endpoints_from(props))


def added_line(c: NewController, dry_run: bool) -> str:
    """Kafka's ``handleAddController`` output line."""
    eps = ", ".join(_endpoint_text(n, h, p) for n, h, p in c.endpoints)
    head = "DRY RUN of adding" if dry_run else "Added"
    return (f"{head} controller {c.node_id} with directory id {uuid_text(c.directory_id)} and "
            f"endpoints: {eps}")  # fmt: skip


def removed_line(node_id: int, directory_id: uuid.UUID, dry_run: bool) -> str:
    """Kafka 4.4's ``handleRemoveController`` output line."""
    head = "DRY RUN of removing" if dry_run else "Removed"
    return f"{head} KRaft controller {node_id} with directory id {uuid_text(directory_id)}"


async def _to_active_controller(args: argparse.Namespace, req: Any, version: int | None) -> Any:
    """Send ``req`` where Kafka's admin client would (``LeastLoadedBrokerOrActiveKController``):
    to ``--bootstrap-server`` (a broker forwards) or ``--bootstrap-controller``, and from a
    controller that answers NOT_LEADER_OR_FOLLOWER / NOT_CONTROLLER on to the leader its
    DescribeQuorum names (at most three hops). Returns the last response."""
    from kafka_rpc.client import KafkaRpcClient
    from kafka_rpc.protocol.errors import ErrorCode

    address = args.bootstrap_controller or args.bootstrap_server
    resp = None
    for _hop in range(3):
        client = await secured(KafkaRpcClient.connect, args)(
            address, client_id="kafka-rpc-metadata-quorum",
            connect_timeout=args.timeout, request_timeout=args.timeout,
        )  # fmt: skip
        try:
            v = version  # capped at the highest version both sides support
            common = client.versions.get(type(req).__api_key__)
            if v is not None and common is not None:
                v = min(v, common)
            resp = await client.request(req, version=v)
            if resp.error_code not in (ErrorCode.NOT_LEADER_OR_FOLLOWER,
                                       ErrorCode.NOT_CONTROLLER):  # fmt: skip
                return resp
            leader = await _leader_address(client)
        finally:
            await client.close()
        if leader is None or leader == address:
            return resp
        address = leader
    return resp


async def _leader_address(client: Any) -> str | None:
    """The leader's controller endpoint as a DescribeQuorum (v2 ``Nodes``) names it."""
    from kafka_rpc.protocol import codec
    from kafka_rpc.raft.api import METADATA_TOPIC_NAME

    if 55 not in client.versions:
        return None
    mod = codec.module("DescribeQuorumRequest")
    topic = mod.TopicData(topic_name=METADATA_TOPIC_NAME,
                          partitions=(mod.PartitionData(partition_index=0),))  # fmt: skip
    resp = await client.request(mod.DescribeQuorumRequest(topics=(topic,)))
    parts = resp.topics[0].partitions if resp.topics else ()
    if not parts or parts[0].leader_id < 0:
        return None
    node = next((n for n in resp.nodes if n.node_id == parts[0].leader_id and n.listeners), None)
    return f"{node.listeners[0].host}:{node.listeners[0].port}" if node is not None else None


def _cmd_add_controller(args: argparse.Namespace) -> int:
    """``add-controller`` (module docstring)."""
    from kafka_rpc.protocol import codec

    path = getattr(args, "command_config", None)
    try:
        if path is not None and not Path(path).exists():
            raise TerseFailure(f"Properties file {path} does not exist.")
        if path is None:
            raise TerseFailure("You must supply the configuration file of the controller you "
                               "are adding when using add-controller.")  # fmt: skip
        c = read_new_controller(path)
    except (TerseFailure, ValueError) as e:
        print(e, file=sys.stderr)
        return 1
    if not args.dry_run:
        mod = codec.module("AddRaftVoterRequest")
        req = mod.AddRaftVoterRequest(
            cluster_id=None,
            timeout_ms=int(args.timeout * 1000),
            voter_id=c.node_id,
            voter_directory_id=c.directory_id,
            listeners=tuple(mod.Listener(name=n, host=h, port=p) for n, h, p in c.endpoints),
            ack_when_committed=True,
        )
        code = _send(args, req, 1)
        if code:
            return code
    print(added_line(c, args.dry_run))
    return 0


def _cmd_remove_controller(args: argparse.Namespace) -> int:
    """``remove-controller`` (module docstring)."""
    from kafka_rpc.protocol import codec

    try:
        if args.controller_id < 0:
            raise TerseFailure(f"Invalid negative --controller-id: {args.controller_id}")
        try:
            directory_id = uuid_from_kafka_string(args.controller_directory_id)
        except ValueError as e:
            raise TerseFailure(f"Failed to parse --controller-directory-id: {e}") from None
        if getattr(args, "command_config", None) and not Path(args.command_config).exists():
            raise TerseFailure(f"Properties file {args.command_config} does not exist.")
    except TerseFailure as e:
        print(e, file=sys.stderr)
        return 1
    if not args.dry_run:
        req = codec.message_class("RemoveRaftVoterRequest")(
            cluster_id=None, voter_id=args.controller_id, voter_directory_id=directory_id
        )
        code = _send(args, req, 0)
        if code:
            return code
    print(removed_line(args.controller_id, directory_id, args.dry_run))
    return 0


def _send(args: argparse.Namespace, req: Any, version: int) -> int:
    """Send an AddRaftVoter / RemoveRaftVoter; 0 on NONE, else print Kafka's line and 1."""
    from kafka_rpc.client import KafkaConnectionError
    from kafka_rpc.protocol.errors import KafkaError

    try:
        resp = asyncio.run(_to_active_controller(args, req, version))
    except (KafkaError, KafkaConnectionError, TimeoutError, OSError, ValueError) as e:
        what = type(req).__name__.removesuffix("Request")
        print(f"kafka-rpc: {what} failed: {e}", file=sys.stderr)
        return 1
    if resp.error_code:
        print(error_text(resp.error_code, resp.error_message), file=sys.stderr)
        return 1
    return 0


def _cmd_metadata_quorum(args: argparse.Namespace, argv: list[str]) -> int:
    """Kafka's ``kafka-metadata-quorum.sh describe --status | --replication``: one
    DescribeQuorum for ``__cluster_metadata-0``. The cluster id comes from DescribeCluster, as
    Kafka's tool gets it from ``Admin.describeCluster`` (EndpointType 2 on a controller listener,
    1 on a broker listener); ``unknown`` when the endpoint answers neither it nor Metadata."""
    if args.quorum_command == "add-controller":
        return _cmd_add_controller(args)
    if args.quorum_command == "remove-controller":
        return _cmd_remove_controller(args)
    from kafka_rpc.client import KafkaConnectionError, KafkaRpcClient
    from kafka_rpc.protocol import codec
    from kafka_rpc.protocol.errors import ErrorCode, KafkaError
    from kafka_rpc.raft.api import METADATA_TOPIC_NAME

    # Kafka's describe checks (TerseException, exit 1)
    if args.status and args.replication:
        msg = "Only one of --status or --replication should be specified with describe sub-command"
    elif args.status and args.human_readable:
        msg = "The option --human-readable is only supported along with --replication"
    elif not args.status and not args.replication:
        msg = "One of --status or --replication must be specified with describe sub-command"
    else:
        msg = None
    if msg is not None:
        print(msg, file=sys.stderr)
        return 1
    mod = codec.module("DescribeQuorumRequest")
    topic = mod.TopicData(topic_name=METADATA_TOPIC_NAME,
                          partitions=(mod.PartitionData(partition_index=0),))  # fmt: skip
    req = mod.DescribeQuorumRequest(topics=(topic,))

    async def ask(address: str) -> tuple[Any, str]:
        client = await secured(KafkaRpcClient.connect, args)(
            address, client_id="kafka-rpc-metadata-quorum",
            connect_timeout=args.timeout, request_timeout=args.timeout,
        )  # fmt: skip
        try:
            resp = await client.request(req)
            cluster_id = None
            if 60 in client.versions:  # DescribeCluster
                dc = await client.request(codec.message_class("DescribeClusterRequest")(
                    endpoint_type=2 if args.bootstrap_controller else 1))  # fmt: skip
                cluster_id = dc.cluster_id if not dc.error_code else None
            if cluster_id is None and 3 in client.versions:
                md = await client.request(codec.message_class("MetadataRequest")(topics=()))
                cluster_id = md.cluster_id
            return resp, cluster_id or "unknown"
        finally:
            await client.close()

    async def run() -> int:
        # Kafka's admin client sends DescribeQuorum to the active controller: a controller
        # that is not the leader names it (and, from v2, every voter's endpoints), so follow.
        address = args.bootstrap_controller or args.bootstrap_server
        for _hop in range(3):
            try:
                resp, cluster_id = await ask(address)
            except (KafkaError, KafkaConnectionError, TimeoutError, OSError, ValueError) as e:
                print(f"kafka-rpc: DescribeQuorum failed: {e}", file=sys.stderr)
                return 1
            code = resp.error_code
            p = resp.topics[0].partitions[0] if resp.topics and resp.topics[0].partitions else None
            if not code and p is None:
                code = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
            if not code:
                assert p is not None  # without it, code is UNKNOWN_TOPIC_OR_PARTITION
                code = p.error_code
            leader = next((n for n in resp.nodes if p is not None and n.node_id == p.leader_id
                           and n.listeners), None)  # fmt: skip
            if code == ErrorCode.NOT_LEADER_OR_FOLLOWER and leader is not None:
                address = f"{leader.listeners[0].host}:{leader.listeners[0].port}"
                continue
            break
        if code:
            name = ErrorCode.for_code(code).name
            hint = f" (leader: {p.leader_id}, epoch {p.leader_epoch})" if p is not None else ""
            print(f"kafka-rpc: DescribeQuorum failed: {name}{hint}", file=sys.stderr)
            return 1
        if args.status:
            lines = _quorum_status_lines(cluster_id, p, resp.nodes)
        else:
            try:
                lines = _quorum_replication_lines(p, args.human_readable)
            except ValueError as e:
                print(e, file=sys.stderr)
                return 1
        print("\n".join(lines))
        return 0

    return asyncio.run(run())
