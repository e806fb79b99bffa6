"""DescribeConfigs (key 32), v1-4 on both listeners.

Kafka's ``ConfigHelper.describeConfigs`` (served by ``KafkaApis`` and ``ControllerApis`` alike),
answered from this node's committed metadata image (``ctx.services.controller.image``), one result
per resource in request order:

- TOPIC (2): the topic's effective configs (:func:`kafka_rpc.controller.topic_configs
  .describe_topic_configs`: every Kafka 4.4 topic config, overrides from the topic's
  ConfigRecords with source TOPIC_CONFIG, dynamic broker configs of the metadata log for this
  node or all brokers, ``log.retention.ms`` / ``log.retention.bytes`` of this node's
  ``server.properties`` as STATIC_BROKER_CONFIG, Kafka's defaults as DEFAULT_CONFIG),
  only the ConfigurationKeys asked for when the list is not null or empty; Synonyms only with
  IncludeSynonyms; ConfigType from v3; Documentation always null (texts are not kept).
- BROKER (4), BROKER_LOGGER (8), CLIENT_METRICS (16) and GROUP (32), which Kafka describes
  too: INVALID_REQUEST "Unsupported resource type: N" for that resource. Kafka answers a
  broker with every key of its ``KafkaConfig`` and their sources, loggers with log4j's levels;
  this server does not model those (a documented difference, ``docs/kafka-tools.md``).
- a resource type Kafka does not know: the whole request fails with INVALID_REQUEST on every
  resource (Kafka's handler throws InvalidRequestException before describing anything).

Errors per resource: INVALID_TOPIC_EXCEPTION (17) with Kafka's ``Topic.validate`` message for
an illegal topic name; UNKNOWN_TOPIC_OR_PARTITION (3) for a topic the image does not hold; as
Kafka, ErrorMessage is the empty string when there is none. Authorization (an authorizer on the
listener) is per resource before this handler runs: DESCRIBE_CONFIGS on the topic, else
TOPIC_AUTHORIZATION_FAILED (``kafka_rpc.security.authorizer.topic_plan``).
"""

from __future__ import annotations

from typing import Any

from kafka_rpc.api.registry import handles
from kafka_rpc.controller.image import EMPTY, RESOURCE_BROKER
from kafka_rpc.controller.replication import validate_topic_name
from kafka_rpc.controller.topic_configs import BROKER_SETTINGS, describe_topic_configs
from kafka_rpc.protocol import codec
from kafka_rpc.protocol.errors import ErrorCode

__all__ = ["RESOURCE_TOPIC", "describe_configs", "describe_configs_response"]

_mod = codec.module("DescribeConfigsResponse")
RESOURCE_TOPIC = 2
"""Kafka's ``ConfigResource.Type.TOPIC`` id."""
#: Every ``ConfigResource.Type`` Kafka's DescribeConfigs handler accepts: topic 2, broker 4,
#: broker logger 8, client metrics 16, group 32.
KAFKA_RESOURCE_TYPES = frozenset({2, 4, 8, 16, 32})
#: ``Errors.INVALID_REQUEST.message()``, what Kafka's error response carries.
_INVALID_REQUEST_MESSAGE = (
    "This most likely occurs because of a request being malformed by the client library or "
    "the message was sent to an incompatible broker. See the broker logs for more details."
)


def _result(resource: Any, code: int = 0, message: str = "", configs: tuple = ()):
    return _mod.DescribeConfigsResult(
        error_code=code,
        error_message=message,
        resource_type=resource.resource_type,
        resource_name=resource.resource_name,
        configs=configs,
    )


def error_response(request: Any, version: int, code: int) -> Any:
    """Every resource of ``request`` answered with ``code`` (Kafka's
    ``DescribeConfigsRequest.getErrorResponse``)."""
    message = _INVALID_REQUEST_MESSAGE if code == ErrorCode.INVALID_REQUEST else ""
    if code not in (ErrorCode.NONE, ErrorCode.INVALID_REQUEST):
        message = ErrorCode.for_code(code).name
    return _mod.DescribeConfigsResponse(
        results=tuple(_result(r, code, message) for r in request.resources)
    )


def describe_configs_response(
    image: Any, request: Any, broker_settings: dict[str, str], node_id: int = -1
) -> Any:
    """The DescribeConfigs answer for ``request`` from ``image`` (see the module docstring);
    ``broker_settings``: this node's ``server.properties`` values of
    :data:`~kafka_rpc.controller.topic_configs.BROKER_SETTINGS`; ``node_id``: this node (its
    own dynamic broker configs count)."""
    if any(r.resource_type not in KAFKA_RESOURCE_TYPES for r in request.resources):
        return error_response(request, 0, ErrorCode.INVALID_REQUEST)
    results = []
    for res in request.resources:
        if res.resource_type != RESOURCE_TOPIC:
            results.append(_result(res, ErrorCode.INVALID_REQUEST,
                                   f"Unsupported resource type: {res.resource_type}"))  # fmt: skip
            continue
        name = res.resource_name
        bad = validate_topic_name(name)
        if bad is not None:
            results.append(_result(res, ErrorCode.INVALID_TOPIC_EXCEPTION, bad))
            continue
        if image.topic_by_name(name) is None:
            results.append(_result(res, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION))
            continue
        entries = describe_topic_configs(
            dict(image.topic_configs(name)),
            broker_settings,
            res.configuration_keys,
            request.include_synonyms,
            dynamic_broker=dict(image.configs.get((RESOURCE_BROKER, str(node_id)), {})),
            dynamic_default=dict(image.configs.get((RESOURCE_BROKER, ""), {})),
        )
        configs = tuple(
            _mod.DescribeConfigsResourceResult(
                name=e.name,
                value=e.value,
                read_only=e.read_only,
                config_source=e.source,
                is_sensitive=e.is_sensitive,
                synonyms=tuple(
                    _mod.DescribeConfigsSynonym(name=n, value=v, source=s) for n, v, s in e.synonyms
                ),
                config_type=e.config_type,
                documentation=None,
            )
            for e in entries
        )
        results.append(_result(res, configs=configs))
    return _mod.DescribeConfigsResponse(results=tuple(results))


@handles("DescribeConfigsRequest", error_response=error_response)
def describe_configs(ctx: Any, request: Any) -> Any:
    services = ctx.services
    ctl = getattr(services, "controller", None)
    image = getattr(ctl, "image", None) or EMPTY
    raw = services.config.raw
    settings = {k: raw[k] for k in BROKER_SETTINGS if k in raw}
    return describe_configs_response(image, request, settings, services.node_id)
