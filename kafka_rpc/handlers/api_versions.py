"""ApiVersions (key 18).

API: versions 0-4 on every listener.
Behavior: lists exactly the APIs the request's listener serves (derived from the registry and the
specs' ``listeners``, the same table the connection dispatches with). No supported or finalized
features. Versions the server does not support are answered by the connection itself (v0,
UNSUPPORTED_VERSION, ``[{18, min, max}]``), never by this handler.
Errors: INVALID_REQUEST (42) with empty ApiKeys when v3+ ClientSoftwareName or
ClientSoftwareVersion does not match ``[a-zA-Z0-9](?:[a-zA-Z0-9\\-.]*[a-zA-Z0-9])?``.
"""

from __future__ import annotations

import re

from kafka_rpc.protocol import codec
from kafka_rpc.protocol.errors import ErrorCode
from kafka_rpc.server.registry import handles

ApiVersionsResponse = codec.message_class("ApiVersionsResponse")
ApiVersion = codec.module("ApiVersionsResponse").ApiVersion

_SOFTWARE_RE = re.compile(r"[a-zA-Z0-9](?:[a-zA-Z0-9\-.]*[a-zA-Z0-9])?")
_valid_software: set[str] = set()  # names/versions that matched; a client repeats its own


def _is_valid_software(text: str) -> bool:
    """Kafka's ApiVersionsRequest.isValid rule for ClientSoftwareName/Version. Matches are
    remembered (up to 4,096 distinct strings) so a connection's repeated requests skip the regex."""
    if _SOFTWARE_RE.fullmatch(text) is None:
        return False
    if len(_valid_software) < 4096:
        _valid_software.add(text)
    return True


def _build_ok_body(listener, version: int) -> bytes:
    """Encode the answer for this listener at ``version`` and keep it in the listener's
    ``api_versions_bodies``: it is constant for the listener's life, so it is built once per
    version and reused (Kafka's ApiVersionManager also precomputes it)."""
    resp = ApiVersionsResponse(
        api_keys=tuple(
            ApiVersion(api_key=k, min_version=lo, max_version=hi)
            for k, lo, hi in listener.api_versions
        )
    )
    body = listener.api_versions_bodies[version] = codec.encode(resp, version)
    return body


@handles("ApiVersionsRequest")
def api_versions(ctx, request):
    version = ctx.api_version
    if version >= 3 and not (
        (request.client_software_name in _valid_software
         or _is_valid_software(request.client_software_name))
        and (request.client_software_version in _valid_software
             or _is_valid_software(request.client_software_version))
    ):  # fmt: skip
        return ApiVersionsResponse(error_code=ErrorCode.INVALID_REQUEST)
    listener = ctx.listener
    body = listener.api_versions_bodies.get(version)
    return body if body is not None else _build_ok_body(listener, version)
