"""Envelope (key 58): an Apache Kafka broker forwards a client's admin request to the active
controller (KIP-590; Kafka's ``ForwardingManager`` on the broker, ``ControllerApis.
handleEnvelopeRequest`` + ``EnvelopeUtils.handleEnvelopeRequest`` on the controller).

API: Envelope v0 on the controller listener.
Behavior, in Kafka's order:

1. With an authorizer, the **envelope's** sender (the forwarding broker's connection) needs
   CLUSTER_ACTION on the cluster: the connection checks it before this handler runs
   (``API_RULES``), answering CLUSTER_AUTHORIZATION_FAILED.
2. RequestPrincipal must be ``int16 version 0`` + ``DefaultPrincipalData`` v0 (Kafka's
   ``DefaultKafkaPrincipalBuilder.serialize``): else PRINCIPAL_DESERIALIZATION_FAILURE.
3. ClientHostAddress must be 4 or 16 bytes (``InetAddress.getByAddress``): else INVALID_REQUEST.
4. RequestData's request header must parse (else UNSUPPORTED_VERSION, the broker then closes
   the client's connection) and name a forwardable API (:data:`FORWARDABLE`, Kafka's
   ``ApiKeys.forwardable``): else INVALID_REQUEST. The body must parse at the header's version
   for an API this listener serves: else UNSUPPORTED_VERSION.
5. The inner request runs through the listener's own handler, authorized (when the listener has
   an authorizer) as the **forwarded** principal and client address, per API and per topic as a
   direct request would be.
6. The answer is ResponseData = the inner response with its own response header (the inner
   correlation id; header version of the inner API and version), ErrorCode 0. An inner
   response carrying NOT_CONTROLLER anywhere (DescribeQuorum: NOT_LEADER_OR_FOLLOWER) is lifted
   instead: ErrorCode NOT_CONTROLLER and no
   data, so the broker finds the new controller and sends it again
   (``RequestChannel.Request.buildResponseSend``).

The inner request is counted in the listener's request metrics under its own api key (next to
the Envelope itself) and its version, so ``kafka_rpc_requests_total`` shows what brokers
forwarded.
"""

from __future__ import annotations

import dataclasses
import ipaddress
import logging
import struct
import time
from typing import Any

from kafka_rpc.api.context import RequestContext, error_response
from kafka_rpc.api.registry import handles
from kafka_rpc.protocol import codec
from kafka_rpc.protocol.errors import ErrorCode, KafkaError
from kafka_rpc.protocol.frames import encode_response, frame, parse_request_header
from kafka_rpc.security.authorizer import topic_plan

__all__ = ["FORWARDABLE", "envelope", "parse_principal", "serialize_principal"]

log = logging.getLogger("kafka_rpc.server")

FORWARDABLE = frozenset(
    {19, 20, 30, 31, 33, 37, 38, 39, 40, 43, 44, 45, 46, 49, 51, 55, 57, 64, 67, 80, 81}
)
"""The api keys Kafka marks forwardable (``ApiKeys``' ``forwardable`` flag): CreateTopics,
DeleteTopics, Create/DeleteAcls, AlterConfigs, CreatePartitions, the delegation-token APIs,
ElectLeaders, IncrementalAlterConfigs, Alter/ListPartitionReassignments, AlterClientQuotas,
AlterUserScramCredentials, DescribeQuorum, UpdateFeatures, UnregisterBroker,
AllocateProducerIds, Add/RemoveRaftVoter."""

_Resp = codec.message_class("EnvelopeResponse")
_PRINCIPAL_VERSION = struct.Struct(">h")


def parse_principal(data: bytes | None) -> str:
    """``"Type:Name"`` from an Envelope's RequestPrincipal (int16 version 0, then
    DefaultPrincipalData v0). Raises ValueError when it is null, of another version, or does not
    decode (Kafka: PrincipalDeserializationException)."""
    if data is None or len(data) < 2:
        raise ValueError("no serialized principal")
    (version,) = _PRINCIPAL_VERSION.unpack_from(data, 0)
    if version != 0:
        raise ValueError(f"unknown principal serialization version {version}")
    try:
        p = codec.decode("DefaultPrincipalData", 0, bytes(data[2:]))
    except Exception as e:
        raise ValueError(f"DefaultPrincipalData does not decode: {e}") from e
    return f"{p.type}:{p.name}"


def serialize_principal(principal: str, token_authenticated: bool = False) -> bytes:
    """The RequestPrincipal bytes of ``principal`` (``"Type:Name"``), as Kafka's
    ``DefaultKafkaPrincipalBuilder.serialize`` writes them."""
    ptype, _, name = principal.partition(":")
    data = codec.message_class("DefaultPrincipalData")(
        type=ptype, name=name, token_authenticated=token_authenticated
    )
    return _PRINCIPAL_VERSION.pack(0) + codec.encode(data, 0, "DefaultPrincipalData")


def _has_code(obj: Any, code: int) -> bool:
    """Whether any ErrorCode field of a response (nested entries included) is ``code`` (Kafka's
    ``AbstractResponse.errorCounts`` containing it)."""
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        for f in dataclasses.fields(obj):
            v = getattr(obj, f.name)
            if f.name == "error_code" and v == code:
                return True
            if isinstance(v, tuple):
                if any(_has_code(x, code) for x in v):
                    return True
            elif dataclasses.is_dataclass(v) and _has_code(v, code):
                return True
    return False


def _refuse(code: int, why: str) -> Any:
    log.info("envelope refused (%s): %s", ErrorCode.for_code(code).name, why)
    return _Resp(response_data=None, error_code=code)


@handles("EnvelopeRequest")
async def envelope(ctx: RequestContext, request: Any) -> Any:
    listener = ctx[4]
    try:
        principal = parse_principal(request.request_principal)
    except ValueError as e:
        return _refuse(ErrorCode.PRINCIPAL_DESERIALIZATION_FAILURE, str(e))
    try:
        address = str(ipaddress.ip_address(bytes(request.client_host_address)))
    except ValueError:
        return _refuse(ErrorCode.INVALID_REQUEST, "Failed to parse client address from envelope")
    data = bytes(request.request_data)
    try:
        api_key, version, corr, client_id, body_pos = parse_request_header(data, 0)
    except Exception as e:  # noqa: BLE001 - an unknown key or a broken header alike
        return _refuse(ErrorCode.UNSUPPORTED_VERSION, f"inner request header: {e}")
    if api_key not in FORWARDABLE:
        return _refuse(
            ErrorCode.INVALID_REQUEST,
            f"API {api_key} is not enabled or is not eligible for forwarding",
        )
    entry = listener.table.get(api_key)
    if entry is None or not entry.min_version <= version <= entry.max_version:
        return _refuse(ErrorCode.UNSUPPORTED_VERSION, f"api {api_key} v{version} is not served")
    framed = frame(data)
    try:
        inner = entry.readers[version](framed, body_pos + 4)[0]
    except Exception as e:  # noqa: BLE001
        return _refuse(ErrorCode.UNSUPPORTED_VERSION, f"{entry.name} v{version}: {e}")
    inner_ctx = RequestContext(api_key, version, corr, client_id, listener, framed, body_pos + 4)
    t0 = time.perf_counter()
    handler = entry.handler
    authorizer = getattr(listener.security, "authorizer", None)
    if authorizer is not None:
        peer = (address, 0)
        code = authorizer.authorize_request(principal, peer, api_key, inner)
        if code:
            log.info("denied forwarded %s v%d of %s (%s)", entry.name, version, principal,
                     address)  # fmt: skip
            return _wrap(entry, inner_ctx, error_response(entry, inner, version, code))
        plan = topic_plan(authorizer, principal, peer, api_key, inner)
        if plan is not None:
            inner, post = plan
            base = handler

            async def handler(c: Any, r: Any) -> Any:
                res = base(c, r)
                if entry.is_async:
                    res = await res
                return post(res)

            return await _run(listener, entry, inner_ctx, inner, handler, True, t0)
    return await _run(listener, entry, inner_ctx, inner, handler, entry.is_async, t0)


async def _run(listener, entry, inner_ctx, inner, handler, is_async, t0) -> Any:
    try:
        result = handler(inner_ctx, inner)
        if is_async:
            result = await result
    except Exception as exc:
        code = exc.code if isinstance(exc, KafkaError) else ErrorCode.UNKNOWN_SERVER_ERROR
        log.error("forwarded %s v%d failed: %s", entry.name, inner_ctx.api_version, exc,
                  exc_info=not isinstance(exc, KafkaError))  # fmt: skip
        result = error_response(entry, inner, inner_ctx.api_version, code)
    if listener.metrics is not None:
        elapsed = time.perf_counter() - t0
        listener.metrics.observe(entry.api_key, inner_ctx.api_version, elapsed, False)
    # DescribeQuorum says NOT_LEADER_OR_FOLLOWER where the others say NOT_CONTROLLER
    lifted = ErrorCode.NOT_LEADER_OR_FOLLOWER if entry.api_key == 55 else ErrorCode.NOT_CONTROLLER
    if type(result) is not bytes and _has_code(result, lifted):
        return _Resp(response_data=None, error_code=ErrorCode.NOT_CONTROLLER)
    return _wrap(entry, inner_ctx, result)


def _wrap(entry: Any, ctx: RequestContext, result: Any) -> Any:
    version = ctx.api_version
    data = encode_response(
        ctx.correlation_id, version >= entry.resp_header_flex, result, entry.writers[version]
    )
    return _Resp(response_data=bytes(data[4:]), error_code=0)
