"""This node as a client of another node's listener (Raft, the controller channel, forwarding,
broker registration): the TLS and SASL settings of the target listener, as Kafka's
inter-broker / controller clients take them (``ssl.*`` of that listener name, its
``sasl.mechanism.controller.protocol`` or ``sasl.mechanism.inter.broker.protocol``, and the
``username``/``password`` of the listener's JAAS options)."""

from __future__ import annotations

import ssl
from dataclasses import dataclass

from kafka_rpc.config import Config

__all__ = ["ClientSecurity", "client_security", "client_security_from_properties"]


@dataclass(frozen=True)
class ClientSecurity:
    """TLS context (None: plaintext) and SASL mechanism with credentials (None: no SASL)."""

    ssl_context: ssl.SSLContext | None = None
    sasl_mechanism: str | None = None
    username: str = ""
    password: str = ""

    def sasl_client(self):
        """A fresh :class:`~kafka_rpc.security.sasl.SaslClient` for one exchange."""
        from kafka_rpc.security.sasl import SaslClient

        return SaslClient(self.sasl_mechanism, self.username, self.password)


def client_security(config: Config, listener: str) -> ClientSecurity | None:
    """The settings to reach ``listener`` on another node; None when it is PLAINTEXT."""
    protocol = config.security_protocol(listener)
    if protocol == "PLAINTEXT":
        return None
    ctx = None
    if protocol in ("SSL", "SASL_SSL"):
        from kafka_rpc.security.tls import client_context, ssl_settings

        ctx = client_context(ssl_settings(config, listener))
    if protocol in ("SASL_PLAINTEXT", "SASL_SSL"):
        from kafka_rpc.security.sasl import client_credentials

        key = (
            "sasl.mechanism.controller.protocol"
            if listener in config.controller_listener_names
            else "sasl.mechanism.inter.broker.protocol"
        )
        mech = config.listener_value(listener, key)
        username, password = client_credentials(config, listener, mech)
        return ClientSecurity(ctx, mech, username, password)
    return ClientSecurity(ctx)


def client_security_from_properties(path: str | None) -> ClientSecurity | None:
    """A ``ClientSecurity`` from a Kafka client properties file (the tools' ``--command-config``,
    as Kafka's admin tools read it): ``security.protocol`` (PLAINTEXT, SSL, SASL_PLAINTEXT,
    SASL_SSL), ``ssl.truststore.location`` (PEM), ``ssl.keystore.location`` (PEM, for a client
    certificate) with ``ssl.key.password``, ``ssl.endpoint.identification.algorithm`` (empty:
    no host name check), ``sasl.mechanism`` and ``sasl.jaas.config`` (username, password).
    None without a file or for PLAINTEXT. Raises OSError / ValueError for an unreadable file,
    certificate or key."""
    if not path:
        return None
    from kafka_rpc.config import read_properties
    from kafka_rpc.security.sasl import parse_jaas

    props = {k: v.strip() for k, v in read_properties(path).items()}
    proto = props.get("security.protocol", "PLAINTEXT").upper()
    ctx = None
    if proto in ("SSL", "SASL_SSL"):
        ctx = ssl.create_default_context(cafile=props.get("ssl.truststore.location") or None)
        if props.get("ssl.endpoint.identification.algorithm", "https") == "":
            ctx.check_hostname = False
        if props.get("ssl.keystore.location"):
            ctx.load_cert_chain(props["ssl.keystore.location"],
                                password=props.get("ssl.key.password") or None)  # fmt: skip
    if proto in ("SASL_PLAINTEXT", "SASL_SSL"):
        jaas = parse_jaas(props.get("sasl.jaas.config", ""))
        return ClientSecurity(ctx, props.get("sasl.mechanism", "GSSAPI"),
                              jaas.get("username", ""), jaas.get("password", ""))  # fmt: skip
    return ClientSecurity(ctx) if ctx is not None else None
