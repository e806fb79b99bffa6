"""Answer a controller request here or forward it to the active controller (Kafka's
``ControllerApis`` on the controller listener, ``ForwardingManager`` on the broker listener), with
Kafka's texts for the errors forwarding makes itself."""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from kafka_rpc.broker.channel import ControllerUnavailableError, error_codes
from kafka_rpc.protocol.errors import ErrorCode

if TYPE_CHECKING:
    from kafka_rpc.broker.services import BrokerServices

__all__ = ["FORWARD_ERROR_MESSAGES", "answer_or_forward", "forward_error_message"]

log = logging.getLogger("kafka_rpc.broker.channel")


#: the ErrorMessage of the two errors :func:`answer_or_forward` makes itself (Kafka's texts)
FORWARD_ERROR_MESSAGES: dict[int, str] = {
    ErrorCode.NOT_CONTROLLER: "This is not the correct controller for this cluster.",
    ErrorCode.REQUEST_TIMED_OUT: "No active controller could be reached.",
}


def forward_error_message(code: int) -> str:
    """The ErrorMessage of a whole-request error answered while forwarding: the text of
    :data:`FORWARD_ERROR_MESSAGES`, else the error's name (``"error N"`` for an unknown code)."""
    msg = FORWARD_ERROR_MESSAGES.get(code)
    if msg is None:
        try:
            msg = ErrorCode(code).name
        except ValueError:
            msg = f"error {code}"
    return msg


async def answer_or_forward(
    services: BrokerServices,
    role: str,
    request: Any,
    version: int,
    local: str,
    error: Callable[[int], Any],
    timeout: float | None = None,
) -> Any:
    """Answer a controller request that came in on a listener of ``role`` (Kafka's
    ``ControllerApis`` on the controller listener, ``ForwardingManager`` on the broker listener):

    - on the node of the active controller, either listener: ``services.controller.<local>
      (request, version)``, answered once its records commit;
    - on a controller listener elsewhere: ``error(NOT_CONTROLLER)``;
    - on a broker listener elsewhere, or when the active controller itself answered
      NOT_CONTROLLER (leadership lost mid-request): the same request, at the same version, sent
      to the active controller through ``services.controller_channel`` (``timeout`` in
      seconds, the channel's default when None) and its answer relayed;
      ``error(REQUEST_TIMED_OUT)`` when no controller answers."""
    ctl = services.controller
    if ctl is not None and ctl.is_active:
        resp = await getattr(ctl, local)(request, version)
        if role == "controller" or ErrorCode.NOT_CONTROLLER not in error_codes(resp):
            return resp
    if role == "controller":
        return error(ErrorCode.NOT_CONTROLLER)
    kw: dict[str, Any] = {} if timeout is None else {"timeout": timeout}
    try:
        _node, resp = await services.controller_channel.send(request, version=version, **kw)
    except ControllerUnavailableError as e:
        log.warning("%s: %s", type(request).__name__, e)
        return error(ErrorCode.REQUEST_TIMED_OUT)
    return resp
