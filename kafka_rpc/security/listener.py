"""What a listener needs to serve a security protocol: built once per listener at start."""

from __future__ import annotations

import ssl
from dataclasses import dataclass
from typing import Any

from kafka_rpc.config import Config
from kafka_rpc.security.principal import SslPrincipalMapper
from kafka_rpc.security.sasl import SaslServerSettings, ScramCredentials, sasl_server_settings
from kafka_rpc.security.tls import server_context, ssl_settings

__all__ = ["ListenerSecurity", "listener_security"]


@dataclass
class ListenerSecurity:
    """One listener's security: ``protocol`` (Kafka's SecurityProtocol), the server TLS context
    (SSL, SASL_SSL), the SASL settings (SASL_*), the principal mapper of certificate subjects,
    and the server-wide authorizer (None: no authorization)."""

    protocol: str
    ssl_context: ssl.SSLContext | None
    sasl: SaslServerSettings | None
    principal_mapper: SslPrincipalMapper
    authorizer: Any = None

    @property
    def plain(self) -> bool:
        """PLAINTEXT without an authorizer: the connection needs none of this."""
        return self.ssl_context is None and self.sasl is None and self.authorizer is None


def listener_security(
    config: Config, listener: str, scram: ScramCredentials | None, authorizer: Any
) -> ListenerSecurity:
    """Build ``listener``'s security from ``config`` (ConfigError on bad TLS files or values)."""
    protocol = config.security_protocol(listener)
    ctx = None
    if protocol in ("SSL", "SASL_SSL"):
        ctx = server_context(ssl_settings(config, listener))
    sasl = None
    if protocol in ("SASL_PLAINTEXT", "SASL_SSL"):
        sasl = sasl_server_settings(config, listener, scram or ScramCredentials())
    mapper = SslPrincipalMapper(config.listener_value(listener, "ssl.principal.mapping.rules"))
    return ListenerSecurity(protocol, ctx, sasl, mapper, authorizer)
