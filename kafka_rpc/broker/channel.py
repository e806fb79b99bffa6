"""Requests from this node to the active controller (Kafka's ``NodeToControllerChannelManager``).

The active controller is the Raft leader among the metadata quorum's voters (``voters()``, given
by the composition root: the node's Raft replica's voter set, which a dynamic quorum changes,
KIP-853; ``controller.quorum.voters`` by default). The channel asks the node's own metadata
replica who leads (the controller's ``active_controller_id``, -1 when unknown); when it does not
know, it walks the voters in id order. Requests go to the voter's controller listener (its
address in the voter set) over one :class:`~kafka_rpc.client.KafkaRpcClient` per voter, made
again when that address changes. A response that carries NOT_CONTROLLER in
any ErrorCode field, or a connection that fails or times out, counts as "the controller moved":
the channel forgets the node and tries the next candidate, up to ``attempts`` nodes per send, as
Kafka's request thread re-queues a request after NOT_CONTROLLER.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import uuid
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from kafka_rpc.client import KafkaConnectionError, KafkaRpcClient
from kafka_rpc.protocol.errors import ErrorCode, KafkaError

__all__ = [
    "NOT_CONTROLLER_ONLY",
    "ControllerChannel",
    "ControllerUnavailableError",
    "error_codes",
]

if TYPE_CHECKING:
    from kafka_rpc.config import Config

log = logging.getLogger("kafka_rpc.broker.channel")


class ControllerUnavailableError(Exception):
    """No voter answered as the active controller."""


def error_codes(obj: Any) -> list[int]:
    """Every ErrorCode value in a decoded message (nested arrays and structs included), in field
    order. Which fields of a message class can hold one (``error_code`` itself, arrays, structs:
    judged by the field's default; scalars are skipped) is worked out once per class."""
    out: list[int] = []
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        _collect_codes(obj, out)
    return out


_SCALARS = (int, float, str, bytes, uuid.UUID)
#: per message class: ``(field name, is the error_code)`` of the fields worth reading
_CODE_FIELDS: dict[type, tuple[tuple[str, bool], ...]] = {}


def _code_fields(cls: type) -> tuple[tuple[str, bool], ...]:
    plan = []
    for f in dataclasses.fields(cls):
        if f.name == "error_code":
            plan.append((f.name, True))
        elif not isinstance(f.default, _SCALARS) or f.default_factory is not dataclasses.MISSING:
            plan.append((f.name, False))  # an array, a struct, or no scalar default: look
    fields = _CODE_FIELDS[cls] = tuple(plan)
    return fields


def _collect_codes(obj: Any, out: list[int]) -> None:
    cls = type(obj)
    fields = _CODE_FIELDS.get(cls)
    if fields is None:  # (an empty plan is a plan too)
        fields = _code_fields(cls)
    for name, is_code in fields:
        value = getattr(obj, name)
        if is_code:
            out.append(value)
        elif isinstance(value, tuple):
            if value and hasattr(type(value[0]), "__dataclass_fields__"):
                for x in value:
                    _collect_codes(x, out)
        elif hasattr(type(value), "__dataclass_fields__"):
            _collect_codes(value, out)


#: the answers that mean "the controller moved" for most requests (Kafka's
#: ``NodeToControllerRequestThread`` re-queues on NOT_CONTROLLER)
NOT_CONTROLLER_ONLY: frozenset[int] = frozenset({ErrorCode.NOT_CONTROLLER})


def _moved(response: Any, codes: frozenset[int]) -> bool:
    return any(c in codes for c in error_codes(response))


class ControllerChannel:
    """Send requests to the active controller's controller listener."""

    def __init__(
        self,
        config: Config,
        node_id: int,
        *,
        active_controller_id: Callable[[], int] = lambda: -1,
        security: Any = None,
        bound: Callable[[], dict[str, tuple[str, int]]] = dict,
        request_timeout: float | None = None,
        voters: Callable[[], dict[int, tuple[str, int]]] | None = None,
    ) -> None:
        """``config``: the node's settings (the controller listener names,
        ``controller.quorum.request.timeout.ms``); ``active_controller_id()``: the leader this
        node's metadata replica knows (-1: unknown); ``security``: the controller listener's
        ``ClientSecurity`` (None for PLAINTEXT); ``bound()``: this node's bound listeners, name
        -> (host, port); ``request_timeout`` in seconds; ``voters()``: the quorum's voters, id
        -> (host, port) of their controller listener (default: ``controller.quorum.voters``)."""
        cfg = config
        self.config = config
        self.node_id = node_id
        self._leader = active_controller_id
        self._security = security
        self._bound = bound
        self._voters = voters if voters is not None else cfg.voters
        self.request_timeout = (
            request_timeout
            if request_timeout is not None
            else max(5.0, cfg.quorum_request_timeout_ms / 1000)
        )
        self.connect_timeout = max(0.5, cfg.quorum_request_timeout_ms / 1000)
        #: node id -> (the address it was made for, the client)
        self._clients: dict[int, tuple[tuple[str, int], KafkaRpcClient]] = {}
        self._last_active = -1
        self._closed = False
        #: clients of a voter's former address, closed at the next drop
        self._retired: list[KafkaRpcClient] = []

    @property
    def voters(self) -> dict[int, tuple[str, int]]:
        """The quorum's voters now: id -> (host, port) of their controller listener."""
        return self._voters()

    # ------------------------------------------------------------------ who leads
    def active_controller_id(self) -> int:
        """The Raft leader as this node's replica knows it (-1: unknown)."""
        voters = self.voters
        leader = self._leader()
        if leader in voters:
            return leader
        if self._last_active in voters:
            return self._last_active
        return -1

    def candidates(self) -> list[int]:
        """Voters to try, the known leader (or the last node that answered as it) first."""
        voters = self.voters
        first = [n for n in (self.active_controller_id(), self._last_active) if n in voters]
        order = list(dict.fromkeys(first))
        order += [n for n in sorted(voters) if n not in order]
        return order

    def _client(self, node_id: int) -> KafkaRpcClient:
        address = self._address(node_id)
        entry = self._clients.get(node_id)
        if entry is not None and entry[0] == address:
            return entry[1]
        if entry is not None:  # the voter moved (a new VotersRecord): a new connection
            self._retired.append(entry[1])
        host, port = address
        client = KafkaRpcClient(
            f"{host}:{port}",
            client_id=f"broker-{self.node_id}-to-controller",
            request_timeout=self.request_timeout,
            connect_timeout=self.connect_timeout,
            security=self._security,
        )
        self._clients[node_id] = (address, client)
        return client

    def _address(self, node_id: int) -> tuple[str, int]:
        """The voter's controller listener; for this node itself, the bound controller listener
        (the voter set may name port 0 or a stale port in tests)."""
        if node_id == self.node_id:
            bound = self._bound()
            for name in self.config.controller_listener_names:
                if name in bound:
                    host, port = bound[name]
                    return (host or "127.0.0.1", port)
        return self.voters[node_id]

    async def _drop(self, node_id: int) -> None:
        entry = self._clients.pop(node_id, None)
        retired, self._retired = self._retired, []
        for client in (*retired, *((entry[1],) if entry is not None else ())):
            with contextlib.suppress(Exception):
                await client.close()

    # ------------------------------------------------------------------ send
    async def send(
        self,
        request: Any,
        version: int | None = None,
        timeout: float | None = None,
        attempts: int = 2,
        moved: frozenset[int] = NOT_CONTROLLER_ONLY,
    ) -> tuple[int, Any]:
        """``(node id, response)`` from the first candidate whose answer carries none of the
        ``moved`` error codes (NOT_CONTROLLER by default; the Raft requests a broker forwards
        add NOT_LEADER_OR_FOLLOWER, the Raft core's "not the leader"), trying at most
        ``attempts`` nodes (the leader is looked up again before each). Raises
        :class:`ControllerUnavailableError` when none does."""
        if self._closed:
            raise ControllerUnavailableError("the controller channel is closed")
        tried: list[int] = []
        last: object = None
        for _ in range(max(1, attempts)):
            cands = self.candidates()
            if not cands:
                break
            node = next((n for n in cands if n not in tried), cands[0])
            tried.append(node)
            try:
                resp = await self._client(node).request(request, version=version, timeout=timeout)
            except (KafkaConnectionError, TimeoutError, OSError, KafkaError) as e:
                last = e
                if self._last_active == node:
                    self._last_active = -1
                await self._drop(node)
                continue
            if _moved(resp, moved):
                last = f"node {node} answered that it is not the active controller"
                if self._last_active == node:
                    self._last_active = -1
                continue
            self._last_active = node
            return node, resp
        raise ControllerUnavailableError(f"no active controller answered (tried {tried}): {last}")

    async def close(self) -> None:
        self._closed = True
        for node in list(self._clients):
            await self._drop(node)
        await self._drop(-1)  # the retired ones
