"""SaslHandshake (17) and SaslAuthenticate (36) on a connection that does not do SASL.

On a SASL listener (SASL_PLAINTEXT, SASL_SSL) these requests never reach a handler: the
connection runs the exchange itself
(``kafka_rpc.server.secure_connection.SecureConnection``). Anywhere
else, and on a SASL connection that sends them out of turn to the fast path, they are answered
as Kafka's ``KafkaApis.handleSaslHandshakeRequest`` / ``handleSaslAuthenticateRequest`` answer
them: ILLEGAL_SASL_STATE (34), the connection stays open.
"""

from __future__ import annotations

from typing import Any

from kafka_rpc.api.registry import handles
from kafka_rpc.protocol import codec
from kafka_rpc.protocol.errors import ErrorCode

_Handshake = codec.message_class("SaslHandshakeResponse")
_Authenticate = codec.message_class("SaslAuthenticateResponse")


@handles("SaslHandshakeRequest")
def sasl_handshake(ctx: Any, request: Any) -> Any:
    """ILLEGAL_SASL_STATE: this listener does not authenticate with SASL."""
    return _Handshake(error_code=ErrorCode.ILLEGAL_SASL_STATE, mechanisms=())


@handles("SaslAuthenticateRequest")
def sasl_authenticate(ctx: Any, request: Any) -> Any:
    """ILLEGAL_SASL_STATE: this listener does not authenticate with SASL."""
    return _Authenticate(
        error_code=ErrorCode.ILLEGAL_SASL_STATE,
        error_message="Unexpected SASL request on a listener without SASL",
        auth_bytes=b"",
    )
