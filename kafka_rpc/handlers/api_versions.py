"""ApiVersions (key 18).

API: versions 0-4 on every listener.
Behavior: lists exactly the APIs the request's listener serves (derived from the registry and the
specs' ``listeners``, the same table the connection dispatches with), and from v3 the features as
Kafka's ``ApiVersionsResponse.Builder`` fills them (``ControllerApis.handleApiVersionsRequest`` /
``SimpleApiVersionManager`` on the controller listener, ``DefaultApiVersionManager`` on the
broker listener):

- SupportedFeatures: the ranges this node supports, on brokers and controllers alike
  (:func:`kafka_rpc.controller.features.supported_features`, ``kraft.version`` 0-1 among them);
  below v4 the features whose minimum is 0 are left out (``ApiVersionsResponse.
  maybeFilterSupportedFeatureKeys``, KAFKA-17492: older clients cannot read them), leaving
  ``metadata.version``;
- FinalizedFeatures: every finalized level != 0 of this node's committed image,
  ``metadata.version`` included, as MinVersionLevel = MaxVersionLevel = the level, and
  ``kraft.version`` when it is >= 1: the metadata log's Raft replica's level (the controller's
  ``kraft_version``, from the replica every node runs: the leader's pending level on the
  active controller, as Kafka's ``raftClient.kraftVersion()``; the replicated one on an
  observer, as ``KRaftMetadataCache.features``); none before the bootstrap is replayed;
- FinalizedFeaturesEpoch: on the controller listener the committed offset at which the finalized
  features last changed (Kafka's ``FeaturesPublisher``), on the broker listener the committed
  image's offset (``KRaftMetadataCache.features``); -1 before the first one.

The encoded body is cached per listener, version and ``kraft.version`` while the committed image
stays the same object (it is replaced on every commit, so the cache never outlives its epoch),
so the hot path is a few attribute reads and a dict lookup. Versions the server does not support are
answered by the connection itself (v0, UNSUPPORTED_VERSION, ``[{18, min, max}]``), never by
this handler.
Errors: INVALID_REQUEST (42) with empty ApiKeys when v3+ ClientSoftwareName or
ClientSoftwareVersion does not match ``[a-zA-Z0-9](?:[a-zA-Z0-9\\-.]*[a-zA-Z0-9])?``.
"""

from __future__ import annotations

import re

from kafka_rpc.api.registry import handles
from kafka_rpc.controller.features import finalized_levels, supported_features
from kafka_rpc.protocol import codec
from kafka_rpc.protocol.errors import ErrorCode

_mod = codec.module("ApiVersionsResponse")
ApiVersionsResponse = _mod.MESSAGE
ApiVersion = _mod.ApiVersion
_SUPPORTED = tuple(
    _mod.SupportedFeatureKey(name=n, min_version=lo, max_version=hi)
    for n, (lo, hi) in sorted(supported_features().items())
)
_SUPPORTED_V3 = tuple(f for f in _SUPPORTED if f.min_version != 0)

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


def _build_ok_body(listener, version: int, ctl, image, kraft_version: int) -> bytes:
    """Encode the answer for this listener at ``version`` with the finalized features of
    ``image`` (the committed image of ``ctl``, the node's controller; both None without one)
    and ``kraft_version``, and keep it in the listener's ``api_versions_bodies`` under
    :func:`_cache_key` (valid while the committed image is ``listener.api_versions_image``)."""
    if image is None:
        epoch = -1
    else:
        epoch = ctl.features_epoch if listener.role == "controller" else image.last_offset
    finalized = () if image is None else tuple(
        _mod.FinalizedFeatureKey(name=n, max_version_level=lv, min_version_level=lv)
        for n, lv in sorted(finalized_levels(image, kraft_version).items())
    )  # fmt: skip
    resp = ApiVersionsResponse(
        api_keys=tuple(
            ApiVersion(api_key=k, min_version=lo, max_version=hi)
            for k, lo, hi in listener.api_versions
        ),
        supported_features=_SUPPORTED_V3 if version < 4 else _SUPPORTED,
        finalized_features_epoch=epoch,
        finalized_features=finalized,
    )
    body = codec.encode(resp, version)
    listener.api_versions_bodies[_cache_key(version, kraft_version)] = body
    return body


def _cache_key(version: int, kraft_version: int) -> int:
    """One int per (ApiVersions version, kraft.version) pair (versions are < 16)."""
    return version | kraft_version << 4


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
    ctl = ctx.services.controller
    if ctl is None:
        image, kraft_version = None, 0
    else:
        image, kraft_version = ctl.image, ctl.kraft_version
    if image is not listener.api_versions_image:  # a new committed image: rebuild on demand
        listener.api_versions_bodies.clear()
        listener.api_versions_image = image
    body = listener.api_versions_bodies.get(_cache_key(version, kraft_version))
    if body is None:
        body = _build_ok_body(listener, version, ctl, image, kraft_version)
    return body
