"""The initial voters of a dynamic quorum (KIP-853) as ``kafka-storage format`` takes them.

``--initial-controllers`` is a comma-separated list of ``id@host:port:directoryId`` (Kafka's
``DynamicVoters.parse`` / ``DynamicVoter.parse``): the id an int of at least 0, the host a name,
an IPv4 address or a bracketed IPv6 address (``[::1]``), the port 0..65535, the directory id a
Kafka ``Uuid`` in its 22-character base64 text (``kafka-rpc storage random-uuid``). Empty entries
are skipped; an empty list is "No voters given." and a repeated id "Node id N was specified more
than once.". Each failure raises ``ValueError`` with Kafka's message (its
``IllegalArgumentException``). ``--standalone`` is the one voter ``node.id@host:port:<random
directory id>`` of the node's first advertised controller listener, ``localhost`` for an unknown
host (``StorageTool.createStandaloneDynamicVoters``).

In the bootstrap snapshot each voter has one endpoint, named ``controller.listener.names[0]``,
and supports kraft.version 0..1 (``DynamicVoter.toVoterNode``); every node of the cluster must
be formatted with the same list.
"""

from __future__ import annotations

import ipaddress
import uuid
from collections.abc import Mapping
from dataclasses import dataclass

from kafka_rpc.protocol.uuids import parse_uuid_text, random_uuid_text, uuid_text

__all__ = ["DynamicVoter", "java_host_string", "parse_dynamic_voter", "parse_dynamic_voters",
           "standalone_voter", "voter_set"]  # fmt: skip


@dataclass(frozen=True)
class DynamicVoter:
    """One ``id@host:port:directoryId`` entry (Kafka ``DynamicVoter``)."""

    node_id: int
    host: str
    port: int
    directory_id: uuid.UUID

    def __str__(self) -> str:
        """Kafka's ``DynamicVoter.toString``: an IPv6 host in brackets."""
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{self.node_id}@{host}:{self.port}:{uuid_text(self.directory_id)}"


def _java_int(text: str) -> int:
    """Java's ``Integer.parseInt``: an optional sign and ASCII digits, within 32 bits."""
    body = text[1:] if text[:1] in ("+", "-") else text
    if not body or not body.isascii() or not body.isdigit():
        raise ValueError(text)
    n = int(text)
    if not -(2**31) <= n < 2**31:
        raise ValueError(text)
    return n


def parse_dynamic_voter(text: str) -> DynamicVoter:
    """One entry, as Kafka's ``DynamicVoter.parse`` (its checks in its order and its messages);
    ValueError otherwise."""
    text = text.strip()
    at = text.find("@")
    if at < 0:
        raise ValueError("No @ found in dynamic voter string.")
    if at == 0:
        raise ValueError("Invalid @ at beginning of dynamic voter string.")
    try:
        node_id = _java_int(text[:at])
    except ValueError:
        raise ValueError("Failed to parse node id in dynamic voter string.") from None
    if node_id < 0:
        raise ValueError(f"Invalid negative node id {node_id} in dynamic voter string.")
    rest = text[at + 1 :]
    if not rest:
        raise ValueError("No hostname found after node id.")
    if rest.startswith("["):
        end = rest.find("]")
        if end < 0:
            raise ValueError("Hostname began with left bracket, but no right bracket was found.")
        host, rest = rest[1:end], rest[end + 1 :]
    else:
        colon = rest.find(":")
        if colon < 0:
            raise ValueError("No colon following hostname could be found.")
        host, rest = rest[:colon], rest[colon:]
    if not rest.startswith(":"):
        raise ValueError("Port section must start with a colon.")
    rest = rest[1:]
    colon = rest.find(":")
    if colon < 0:
        raise ValueError("No colon following port could be found.")
    try:
        port = _java_int(rest[:colon])
    except ValueError:
        raise ValueError("Failed to parse port in dynamic voter string.") from None
    if not 0 <= port <= 65535:
        raise ValueError(f"Invalid port {port} in dynamic voter string.")
    try:
        directory_id = parse_uuid_text(rest[colon + 1 :])
    except ValueError:
        raise ValueError("Failed to parse directory ID in dynamic voter string.") from None
    return DynamicVoter(node_id, host, port, directory_id)


def parse_dynamic_voters(text: str) -> dict[int, DynamicVoter]:
    """The ``--initial-controllers`` value, as Kafka's ``DynamicVoters.parse``: node id ->
    voter in id order; ValueError with Kafka's message for a bad entry, none at all, or an id
    given twice."""
    voters: dict[int, DynamicVoter] = {}
    parsed = [parse_dynamic_voter(s) for s in text.strip().split(",") if s]
    if not parsed:
        raise ValueError("No voters given.")
    for v in parsed:
        if v.node_id in voters:
            raise ValueError(f"Node id {v.node_id} was specified more than once.")
        voters[v.node_id] = v
    return dict(sorted(voters.items()))


def standalone_voter(node_id: int, host: str, port: int) -> DynamicVoter:
    """``--standalone``'s voter (Kafka ``StorageTool.createStandaloneDynamicVoters``): this node
    on its first advertised controller listener (``host`` empty: ``localhost``) with a new
    random directory id."""
    return parse_dynamic_voter(f"{node_id}@{host or 'localhost'}:{port}:{random_uuid_text()}")


def java_host_string(host: str) -> str:
    """The host as Java's ``new InetSocketAddress(host, port).getHostString()`` gives it, which
    is what Kafka's ``Endpoints.fromInetSocketAddresses`` writes into a VotersRecord: an IP
    literal in Java's ``InetAddress.getHostAddress`` form (IPv4 dotted; an IPv4-mapped IPv6
    address as its IPv4 address; any other IPv6 address as eight hex groups without leading
    zeros and without ``::`` compression, ``::1`` -> ``0:0:0:0:0:0:0:1``), a name as given."""
    try:
        addr = ipaddress.ip_address(host)
    except ValueError:
        return host
    if isinstance(addr, ipaddress.IPv6Address):
        if addr.ipv4_mapped is not None:
            return str(addr.ipv4_mapped)
        groups = addr.packed
        return ":".join(f"{int.from_bytes(groups[i : i + 2], 'big'):x}" for i in range(0, 16, 2))
    return str(addr)


def voter_set(voters: Mapping[int, DynamicVoter], listener_name: str):
    """The voters as the core's :class:`~kafka_rpc.raft.voters.VoterSet` for the bootstrap
    snapshot: one endpoint named ``listener_name`` (``controller.listener.names[0]``), its host
    as Java resolves a literal (:func:`java_host_string`), and the kraft.version range 0..1
    each (Kafka ``DynamicVoters.toVoterSet``, ``DynamicVoter.toVoterNode``)."""
    from kafka_rpc.raft.voters import VoterNode, VoterSet

    nodes = []
    for v in voters.values():
        endpoints = {listener_name: (java_host_string(v.host), v.port)}
        nodes.append(VoterNode(v.node_id, v.directory_id, endpoints, 0, 1))
    return VoterSet(nodes)
