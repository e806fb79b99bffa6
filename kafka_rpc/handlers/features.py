"""UpdateFeatures (key 57).

API: v0-2 on both listeners (Kafka's ``ControllerApis.handleUpdateFeatures`` on the controller
listener, ``KafkaApis`` forwarding it on the broker listener).
Behavior:

- on the node of the active controller (either listener): ``controller.update_features``
  (:func:`kafka_rpc.controller.features.update_features`: Kafka's ``FeatureControlManager``
  rules), answered once its FeatureLevelRecords commit;
- on the controller listener of any other node: NOT_CONTROLLER;
- on the broker listener of any other node: sent on, at the same version, to the active
  controller's controller listener and its answer relayed
  (:func:`kafka_rpc.broker.channel.answer_or_forward`).

Errors (top-level ErrorCode + ErrorMessage): INVALID_UPDATE_VERSION (95) with Kafka's message
naming the feature; NOT_CONTROLLER (41) as above; REQUEST_TIMED_OUT (7) when a forwarding broker
reaches no active controller; CLUSTER_AUTHORIZATION_FAILED (31) without ALTER on the cluster when
an authorizer is configured (``kafka_rpc.security.authorizer.API_RULES``).
"""

from __future__ import annotations

from typing import Any

from kafka_rpc.api.registry import handles
from kafka_rpc.broker.forwarding import answer_or_forward, forward_error_message
from kafka_rpc.protocol import codec

__all__ = ["update_features", "update_features_error_response"]

_Response = codec.message_class("UpdateFeaturesResponse")


def update_features_error_response(request: Any, version: int, code: int) -> Any:
    """The whole request answered with ``code`` (Kafka's ``UpdateFeaturesRequest.
    getErrorResponse``: no per-feature results) and its message."""
    return _Response(error_code=code, error_message=forward_error_message(code))


@handles("UpdateFeaturesRequest", error_response=update_features_error_response)
async def update_features(ctx, request):
    version = ctx.api_version
    return await answer_or_forward(
        ctx.services, ctx.listener.role, request, version, "update_features",
        lambda code: update_features_error_response(request, version, code),
        timeout=max(1.0, request.timeout_ms / 1000),
    )  # fmt: skip
