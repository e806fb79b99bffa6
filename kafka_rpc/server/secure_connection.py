"""Connections on listeners that are not plain PLAINTEXT (docs/security.md):
:class:`SecureConnection` (TLS principal, SASL authentication, authorization) on top of
:class:`~kafka_rpc.server.connection.KafkaConnection`, and :func:`tls_protocol_factory`, the
``create_server`` factory of a TLS listener. PLAINTEXT listeners without an authorizer never use
this module, so nothing here is on their per-request path.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import struct
from asyncio import sslproto
from typing import TYPE_CHECKING, Any

import uvloop
from uvloop.loop import SSLProtocol as UvSSLProtocol  # type: ignore[attr-defined]  # not in uvloop's stub

from kafka_rpc.api.context import RequestContext, error_response
from kafka_rpc.protocol import codec
from kafka_rpc.protocol.errors import ErrorCode
from kafka_rpc.protocol.frames import API_VERSIONS_KEY
from kafka_rpc.security.authorizer import API_RULES, topic_plan
from kafka_rpc.server.connection import KafkaConnection, _size_unpack

if TYPE_CHECKING:
    from kafka_rpc.api.registry import ApiEntry
    from kafka_rpc.server.listener_state import ListenerState

__all__ = [
    "SASL_AUTHENTICATE_KEY",
    "SASL_HANDSHAKE_KEY",
    "SecureConnection",
    "tls_protocol_factory",
]

log = logging.getLogger("kafka_rpc.server")

SASL_HANDSHAKE_KEY = 17
SASL_AUTHENTICATE_KEY = 36


#: the APIs answered per topic (Metadata, CreateTopics, DeleteTopics), from the one table
_TOPIC_APIS = frozenset(k for k, rule in API_RULES.items() if rule and rule[0] == "topics")


def _with_post(entry: ApiEntry, post: Any) -> Any:
    """``entry``'s handler with ``post`` applied to its response (sync or async alike)."""
    handler = entry.handler
    if entry.is_async:

        async def wrapped(ctx: Any, request: Any) -> Any:
            return post(await handler(ctx, request))

        return wrapped
    return lambda ctx, request: post(handler(ctx, request))


class SecureConnection(KafkaConnection):
    """A connection on a listener that is not plain PLAINTEXT (docs/security.md):
    TLS, SASL authentication, authorization. PLAINTEXT listeners without an authorizer use
    :class:`KafkaConnection` itself, so none of this costs them anything.

    * TLS (SSL, SASL_SSL): the handshake runs before this protocol sees the connection
      (:func:`tls_protocol_factory`); a failed one (a plaintext client, an untrusted or expired
      certificate) is logged once with the peer address and closes only that connection. The
      principal is ``User:`` and the
      client certificate's subject mapped by ``ssl.principal.mapping.rules``, or
      ``User:ANONYMOUS`` without one (Kafka's ``DefaultKafkaPrincipalBuilder``).
    * SASL (SASL_PLAINTEXT, SASL_SSL; Kafka's ``SaslServerAuthenticator``): until authenticated
      only ApiVersions, SaslHandshake and (after SaslHandshake v1) SaslAuthenticate are served,
      frames are limited to ``sasl.server.max.receive.size`` bytes, and any other request closes
      the connection. SaslHandshake v0 is followed by raw tokens (4-byte size, no header).
      Unsupported mechanism: UNSUPPORTED_SASL_MECHANISM, then close; a SASL request out of order:
      ILLEGAL_SASL_STATE, then close; bad credentials or a malformed token:
      SASL_AUTHENTICATION_FAILED, then close (raw-token form: close). With
      ``connections.max.reauth.ms`` > 0, SaslAuthenticate v1+ answers SessionLifetimeMs; the
      client re-authenticates (SaslHandshake v1 + SaslAuthenticate, same mechanism and
      principal, KIP-368) before it ends; after the end any request but the SaslAuthenticate
      of a re-authentication begun in time closes the connection.
    * Authorization: with an authorizer, every request passes
      :meth:`kafka_rpc.security.authorizer.StandardAuthorizer.authorize_request` first (the
      one table of required operations per API is there); a denied request gets its error
      response with CLUSTER_AUTHORIZATION_FAILED / TOPIC_AUTHORIZATION_FAILED.

    Once authenticated without an authorizer, requests go through the same native dispatch as a
    PLAINTEXT connection (the SASL APIs excepted, so re-authentication is seen here).
    """

    def __init__(self, listener: ListenerState) -> None:
        super().__init__(listener)
        from kafka_rpc.security.principal import ANONYMOUS

        sec = listener.security
        self.security = sec
        self.principal = ANONYMOUS
        self.authorizer = sec.authorizer
        self.authenticated = sec.sasl is None
        self.mechanism: str | None = None
        self._sasl_server: Any = None
        self._handshake_version = -1
        self._raw_tokens = False
        self._session_timer: asyncio.TimerHandle | None = None
        self._session_expired = False
        self._full_max_bytes = self.max_bytes
        if not self.authenticated:
            self.max_bytes = min(self.max_bytes, sec.sasl.max_receive_size)
        if not self.authenticated or self.authorizer is not None:
            self.dispatch_table = ()  # every request through _serve

    # -------------------------------------------------------------------------- TLS
    def connection_made(self, transport) -> None:
        """Called after the TLS handshake on TLS listeners (:func:`tls_protocol_factory`): the
        principal from the client certificate, when there is one."""
        super().connection_made(transport)
        ssl_object = transport.get_extra_info("ssl_object")
        der = ssl_object.getpeercert(binary_form=True) if ssl_object is not None else None
        if der:
            from kafka_rpc.security.principal import subject_name, user

            try:
                self.principal = user(self.security.principal_mapper.name(subject_name(der)))
            except ValueError as e:
                log.info("closing %s: %s", self.peer, e)
                self._abort()

    def connection_lost(self, exc) -> None:
        self._cancel_session()
        super().connection_lost(exc)

    def force_close(self) -> None:
        self._cancel_session()
        super().force_close()

    # -------------------------------------------------------------------------- requests
    def data_received(self, data: bytes) -> None:
        if self._raw_tokens:
            self._rest += data
            self._raw_token_frames()
            return
        super().data_received(data)
        if self._raw_tokens and self._rest and not self._closed:
            self._raw_token_frames()

    def _dispatch(self, buf: bytes, pos: int, room: int, out: list) -> tuple:
        if self._raw_tokens:  # after SaslHandshake v0: the rest are raw tokens
            return pos, None, None
        return super()._dispatch(buf, pos, room, out)

    def _serve(self, entry: ApiEntry, ctx: RequestContext, request: Any) -> None:
        key = entry.api_key
        if self._session_expired and not (
            key == SASL_AUTHENTICATE_KEY and self._sasl_server is not None
        ):  # Kafka's serverAuthenticationSessionExpired: only a re-authentication begun in time
            log.info("closing %s: SASL session expired (connections.max.reauth.ms) before %s",
                     self.peer, entry.name)  # fmt: skip
            self._abort()
            return
        if key in (SASL_HANDSHAKE_KEY, SASL_AUTHENTICATE_KEY):
            if self.security.sasl is not None:
                try:
                    self._sasl_request(entry, ctx, request)
                except Exception:
                    log.exception("closing %s: SASL exchange failed", self.peer)
                    self._abort()
                return
        elif not self.authenticated:
            if key != API_VERSIONS_KEY or self.mechanism is not None:
                log.info("closing %s: %s before SASL authentication", self.peer, entry.name)
                self._abort()
                return
        if self.authorizer is not None:
            code = self.authorizer.authorize_request(self.principal, self.peer, key, request)
            if code:
                self._deny(entry, ctx, request, code)
                return
            if key in _TOPIC_APIS:
                plan = topic_plan(self.authorizer, self.principal, self.peer, key, request)
                if plan is not None:
                    request, post = plan
                    entry = dataclasses.replace(entry, handler=_with_post(entry, post))
        super()._serve(entry, ctx, request)

    def _deny(self, entry: ApiEntry, ctx: RequestContext, request: Any, code: int) -> None:
        log.info("denied %s v%d from %s (%s): %s", entry.name, ctx.api_version, self.principal,
                 self.peer, ErrorCode.for_code(code).name)  # fmt: skip
        try:
            data = self._encode(entry, ctx, error_response(entry, request, ctx.api_version, code))
        except Exception:
            log.exception("cannot build the error response of %s; closing", entry.name)
            self._abort()
            return
        self._pending.append(data)

    # -------------------------------------------------------------------------- SASL
    def _answer(self, entry: ApiEntry, ctx: RequestContext, response: Any, close: bool) -> None:
        self._pending.append(self._encode(entry, ctx, response))
        if close:
            self._abort()

    def _sasl_request(self, entry: ApiEntry, ctx: RequestContext, request: Any) -> None:
        from kafka_rpc.security.sasl import SaslAuthenticationError

        sasl = self.security.sasl
        if entry.api_key == SASL_HANDSHAKE_KEY:
            cls = codec.message_class("SaslHandshakeResponse")
            mechs = sasl.mechanisms
            reauth = self.authenticated
            if self._sasl_server is not None or (reauth and ctx.api_version < 1):
                log.info("closing %s: SaslHandshake out of order", self.peer)
                self._answer(
                    entry, ctx, cls(error_code=ErrorCode.ILLEGAL_SASL_STATE, mechanisms=mechs), True
                )
                return
            mech = request.mechanism
            if mech not in mechs or (reauth and mech != self.mechanism):
                log.info("closing %s: SASL mechanism %r not enabled%s", self.peer, mech,
                         " or changed on re-authentication" if reauth else "")  # fmt: skip
                self._answer(
                    entry,
                    ctx,
                    cls(error_code=ErrorCode.UNSUPPORTED_SASL_MECHANISM, mechanisms=mechs),
                    True,
                )
                return
            self.mechanism = mech
            self._sasl_server = sasl.new_server(mech)
            self._handshake_version = ctx.api_version
            self._answer(entry, ctx, cls(error_code=0, mechanisms=mechs), False)
            if ctx.api_version == 0:
                self._raw_tokens = True
            return
        cls = codec.message_class("SaslAuthenticateResponse")
        server = self._sasl_server
        if server is None or self._handshake_version < 1:
            log.info("closing %s: SaslAuthenticate without SaslHandshake v1", self.peer)
            msg = "SaslAuthenticate before SaslHandshake v1"
            self._answer(entry, ctx, cls(error_code=ErrorCode.ILLEGAL_SASL_STATE,
                                         error_message=msg), True)  # fmt: skip
            return
        try:
            token = server.step(request.auth_bytes)
            if server.complete:
                self._authenticated_as(server.username)
        except SaslAuthenticationError as e:
            log.info("closing %s: SASL %s authentication failed: %s", self.peer, self.mechanism, e)
            self._answer(
                entry,
                ctx,
                cls(error_code=ErrorCode.SASL_AUTHENTICATION_FAILED, error_message=str(e)),
                True,
            )
            return
        lifetime = self.security.sasl.max_reauth_ms if server.complete else 0
        self._answer(entry, ctx, cls(auth_bytes=token, session_lifetime_ms=lifetime), False)

    def _authenticated_as(self, username: str | None) -> None:
        """The exchange completed: the principal, the session timer, the fast path back."""
        from kafka_rpc.security.principal import user
        from kafka_rpc.security.sasl import SaslAuthenticationError

        principal = user(username or "")
        if self.authenticated and principal != self.principal:
            raise SaslAuthenticationError("Cannot change principals during re-authentication")
        self.principal = principal
        self._sasl_server = None
        self.authenticated = True
        self.max_bytes = self._full_max_bytes
        self._cancel_session()
        self._session_expired = False
        if self.authorizer is None:
            self.dispatch_table = self.listener.secure_dispatch_table
        reauth_ms = self.security.sasl.max_reauth_ms
        if reauth_ms > 0:
            self._session_timer = asyncio.get_running_loop().call_later(
                reauth_ms / 1000, self._expire_session
            )

    def _expire_session(self) -> None:
        """``connections.max.reauth.ms`` passed without re-authentication: the next request
        other than a SASL one closes the connection (served here, off the fast path)."""
        self._session_timer = None
        self._session_expired = True
        self.dispatch_table = ()

    def _cancel_session(self) -> None:
        timer, self._session_timer = self._session_timer, None
        if timer is not None:
            timer.cancel()

    def _raw_token_frames(self) -> None:
        """SASL tokens after SaslHandshake v0 (Kafka's pre-KIP-152 form): 4-byte size + token,
        answered with 4-byte size + the server's token; a failure closes without an answer."""
        from kafka_rpc.security.sasl import SaslAuthenticationError

        rest = self._rest
        while not self._closed and self._raw_tokens and len(rest) >= 4:
            size = _size_unpack(rest, 0)[0]
            if size < 0 or size > self.max_bytes:
                log.info("closing %s: SASL token of %d bytes", self.peer, size)
                self._abort()
                return
            if len(rest) < 4 + size:
                return
            token = bytes(rest[4 : 4 + size])
            del rest[: 4 + size]
            server = self._sasl_server
            try:
                reply = server.step(token)
                if server.complete:
                    self._authenticated_as(server.username)
                    self._raw_tokens = False
            except SaslAuthenticationError as e:
                log.info("closing %s: SASL %s authentication failed: %s", self.peer,
                         self.mechanism, e)  # fmt: skip
                self._abort()
                return
            self._pending.append(struct.pack(">i", len(reply)) + reply)
            self._flush()
        if not self._raw_tokens and rest and not self._closed:
            data = bytes(rest)
            rest.clear()
            self._need = 4
            super().data_received(data)


class _RememberPeer:
    """Mixin of a TLS protocol around a connection: remembers the peer for the log."""

    peer = None

    def connection_made(self, transport) -> None:
        self.peer = transport.get_extra_info("peername")
        super().connection_made(transport)  # type: ignore[misc]  # a mixin: the next class has it


class _TlsServerProtocol(_RememberPeer, sslproto.SSLProtocol):
    """asyncio's TLS protocol (event loops other than uvloop's)."""


class _UvTlsServerProtocol(_RememberPeer, UvSSLProtocol):
    """uvloop's own TLS protocol (the one ``create_server(ssl=...)`` uses, compiled)."""


def _tls_protocol_class(loop: asyncio.AbstractEventLoop) -> type:
    """uvloop's own TLS protocol on a uvloop loop, asyncio's ``SSLProtocol`` on any other; both
    remember the peer for the log."""
    return _UvTlsServerProtocol if isinstance(loop, uvloop.Loop) else _TlsServerProtocol


def tls_protocol_factory(listener: ListenerState, conn_cls: type, ctx: Any) -> Any:
    """The ``create_server`` factory of a TLS listener: a TLS protocol (server side; uvloop's
    own on a uvloop loop, else asyncio's ``SSLProtocol``) wrapping a ``conn_cls(listener)``,
    whose ``connection_made`` runs once the handshake is done. A failed handshake (a plaintext
    client, an untrusted or expired certificate, the handshake timeout) fails the protocol's
    handshake waiter: logged here once with the peer address, and the TLS protocol closes the
    connection. (``create_server(ssl=...)`` itself gives no such hook: uvloop drops these
    failures silently, so the TLS protocol is built here rather than by the loop.)"""
    loop = asyncio.get_running_loop()
    name = listener.name
    proto_cls = _tls_protocol_class(loop)

    def factory() -> Any:
        waiter = loop.create_future()
        proto = proto_cls(loop, conn_cls(listener), ctx, waiter, server_side=True)

        def done(f: asyncio.Future) -> None:
            exc = None if f.cancelled() else f.exception()
            if exc is not None:
                log.info("closing %s: TLS handshake failed on %s: %s", getattr(proto, "peer", None),
                         name, exc or type(exc).__name__)  # fmt: skip

        waiter.add_done_callback(done)
        return proto

    return factory
