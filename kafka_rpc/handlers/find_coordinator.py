"""FindCoordinator (key 10).

API: versions 0-7 on the broker listener (v0-3: one key; v4+: a batch of keys).
Behavior: key type 3 (BATCH, v7, KIP-1164) with keys ``read:<topicId>:<partition>`` or
``write:<topicId>:<partition>`` (topicId as Kafka's 22-char URL-safe base64 Uuid text or the
36-char hyphenated form; partition >= 0) -> this node at the advertised endpoint of the
request's listener, for ``read:`` and ``write:`` alike: every coordinator store we run is
writable from every node (SQLite: this node's own; PostgreSQL, ``postgresql://``: one database
shared by every ``kafka-rpc serve`` process, each a writable coordinator whose acknowledged
commits all others see at once, issue 16). Results come in request order.
Errors, per key: INVALID_REQUEST (42) for a malformed BATCH key, or key type 3 below v7, or an
unknown key type, with NodeId -1, Host "", Port -1; COORDINATOR_NOT_AVAILABLE (15) for key types
0/1/2 (group, transaction, share): those coordinators do not exist here, and we never name a
wrong node. Handler failure: every key gets the error code.
"""

from __future__ import annotations

import base64
import binascii
import re
from uuid import UUID

from kafka_rpc.protocol import codec
from kafka_rpc.protocol.errors import ErrorCode
from kafka_rpc.server.registry import handles

_mod = codec.module("FindCoordinatorResponse")
FindCoordinatorResponse = _mod.FindCoordinatorResponse
Coordinator = _mod.Coordinator

BATCH = 3
_KEY_RE = re.compile(r"(read|write):([A-Za-z0-9_\-]{22}|[0-9a-fA-F\-]{36}):(0|[1-9][0-9]{0,9})")


def parse_batch_key(key: str) -> tuple[str, UUID, int] | None:
    """``(mode, topic_id, partition)`` of a BATCH key, or None when it is malformed."""
    m = _KEY_RE.fullmatch(key)
    if m is None:
        return None
    mode, tid, part = m.groups()
    partition = int(part)
    if partition > 0x7FFFFFFF:
        return None
    try:
        if len(tid) == 22:
            raw = base64.urlsafe_b64decode(tid + "==")
            if len(raw) != 16 or base64.urlsafe_b64encode(raw).decode().rstrip("=") != tid:
                return None
            topic_id = UUID(bytes=raw)
        else:
            topic_id = UUID(tid)
            if str(topic_id) != tid.lower():
                return None
    except (ValueError, binascii.Error):
        return None
    return mode, topic_id, partition


def _answer(ctx, key: str, key_type: int) -> tuple[int, str | None, int, str, int]:
    """``(error_code, error_message, node_id, host, port)`` for one key."""
    if key_type == BATCH and ctx.api_version >= 7:
        if parse_batch_key(key) is None:
            return ErrorCode.INVALID_REQUEST, f"malformed batch coordinator key {key!r}", -1, "", -1
        ep = ctx.server.advertised(ctx.listener.name)
        return ErrorCode.NONE, None, ctx.server.node_id, ep.host, ep.port
    if key_type in (0, 1, 2):
        return (ErrorCode.COORDINATOR_NOT_AVAILABLE, "no coordinator of this type here",
                -1, "", -1)  # fmt: skip
    return ErrorCode.INVALID_REQUEST, f"unsupported key type {key_type}", -1, "", -1


def error_response(request, version: int, code: int):
    if version >= 4:
        return FindCoordinatorResponse(
            coordinators=tuple(
                Coordinator(
                    key=k, node_id=-1, host="", port=-1, error_code=code, error_message=None
                )
                for k in request.coordinator_keys
            )
        )
    return FindCoordinatorResponse(error_code=code, error_message=None, node_id=-1, host="",
                                   port=-1)  # fmt: skip


@handles("FindCoordinatorRequest", error_response=error_response)
def find_coordinator(ctx, request):
    if ctx.api_version >= 4:
        out = []
        for key in request.coordinator_keys:
            code, msg, node, host, port = _answer(ctx, key, request.key_type)
            out.append(Coordinator(key=key, node_id=node, host=host, port=port, error_code=code,
                                   error_message=msg))  # fmt: skip
        return FindCoordinatorResponse(coordinators=tuple(out))
    code, msg, node, host, port = _answer(ctx, request.key, request.key_type)
    return FindCoordinatorResponse(error_code=code, error_message=msg, node_id=node, host=host,
                                   port=port)  # fmt: skip
