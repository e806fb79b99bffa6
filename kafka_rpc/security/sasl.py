"""SASL mechanisms on the server and this node's client side: PLAIN (RFC 4616) and
SCRAM-SHA-256 / SCRAM-SHA-512 (RFC 5802, KIP-84) through the ``scramp`` library.

Kafka's semantics (``PlainSaslServer``, ``ScramSaslServer``, ``ScramCredentialUtils``):

* PLAIN checks ``authzid\\0authcid\\0password`` against the JAAS-style user list of the listener
  (``user_<name>="<password>"`` in ``listener.name.<l>.plain.sasl.jaas.config``, or
  ``listener.name.<l>.sasl.jaas.config`` / ``sasl.jaas.config``); an authorization id other
  than empty or the user fails.
* SCRAM credentials are kept salted (salt, StoredKey, ServerKey, iterations; never the
  password), created at format time with Kafka's ``--add-scram`` syntax (:class:`ScramCredentials`)
  as UserScramCredentialRecords in ``bootstrap.checkpoint`` (:mod:`kafka_rpc.storage.bootstrap`,
  as Kafka's ``Formatter``); the first active controller of an empty log writes them in its
  bootstrap transaction
  (their records and replay: :mod:`kafka_rpc.controller.scram`), and every node authenticates
  against its image's (:class:`ImageScramCredentials`). The
  iteration count must be 4096..16384 (Kafka's ``ScramMechanism`` bounds).
* Any failure raises :class:`SaslAuthenticationError`; the connection answers
  SASL_AUTHENTICATION_FAILED and closes.
"""

from __future__ import annotations

import base64
import hmac
import os
import re
from dataclasses import dataclass, field
from typing import Any

import scramp

from kafka_rpc.config import SASL_MECHANISMS, Config, ConfigError

__all__ = [
    "MECHANISMS",
    "PlainServer",
    "SaslAuthenticationError",
    "SaslClient",
    "SaslServerSettings",
    "ScramCredentials",
    "ScramServer",
    "parse_add_scram",
    "parse_jaas",
    "sasl_server_settings",
]

MECHANISMS = SASL_MECHANISMS
SCRAM_MECHANISMS = ("SCRAM-SHA-256", "SCRAM-SHA-512")
MIN_ITERATIONS, MAX_ITERATIONS = 4096, 16384


class SaslAuthenticationError(Exception):
    """Authentication failed (bad credentials, malformed token); the message is the answer's
    ErrorMessage."""


# ------------------------------------------------------------------------------- JAAS options
_JAAS_OPT = re.compile(r'([A-Za-z0-9_.\-]+)\s*=\s*(?:"((?:[^"\\]|\\.)*)"|([^\s;"]+))')


def parse_jaas(text: str) -> dict[str, str]:
    """The options of a JAAS login module line (``<LoginModule class> required k="v" ...;``)
    as a dict; quoted values may contain spaces and ``\\"``."""
    out = {}
    body = text.strip()
    m = re.match(r"^\S+\s+(required|requisite|sufficient|optional)\b", body)
    if m:
        body = body[m.end() :]
    for k, quoted, bare in _JAAS_OPT.findall(body):
        out[k] = re.sub(r"\\(.)", r"\1", quoted) if quoted or not bare else bare
    return out


def _jaas(config: Config, listener: str, mechanism: str) -> dict[str, str]:
    """The JAAS options of ``mechanism`` on ``listener``: Kafka's
    ``listener.name.<l>.<mechanism lower>.sasl.jaas.config``, else the listener's or the global
    ``sasl.jaas.config``."""
    key = f"listener.name.{listener.lower()}.{mechanism.lower()}.sasl.jaas.config"
    text = config.raw.get(key)
    if text is None:
        text = config.listener_value(listener, "sasl.jaas.config")
    return parse_jaas(text) if text else {}


# ------------------------------------------------------------------------------- SCRAM store
@dataclass(frozen=True)
class ScramCredential:
    """Kafka's ``ScramCredential``: salt, StoredKey, ServerKey (bytes), iterations."""

    salt: bytes
    stored_key: bytes
    server_key: bytes
    iterations: int


@dataclass
class ScramCredentials:
    """mechanism -> user name -> :class:`ScramCredential` (what UserScramCredentialRecords hold)."""

    by_mechanism: dict[str, dict[str, ScramCredential]] = field(default_factory=dict)

    def get(self, mechanism: str, name: str) -> ScramCredential | None:
        """The credential of ``name`` for ``mechanism`` (``SCRAM-SHA-256``...), or None."""
        return self.by_mechanism.get(mechanism, {}).get(name)

    def add(self, mechanism: str, name: str, password: str, iterations: int = MIN_ITERATIONS,
            salt: bytes | None = None) -> None:  # fmt: skip
        """Salt and store ``password`` (Kafka's ``ScramFormatter.generateCredential``)."""
        if mechanism not in SCRAM_MECHANISMS:
            raise ConfigError(f"--add-scram: unsupported mechanism {mechanism}")
        if not MIN_ITERATIONS <= iterations <= MAX_ITERATIONS:
            raise ConfigError(
                f"--add-scram: iterations {iterations} outside {MIN_ITERATIONS}..{MAX_ITERATIONS}"
            )
        s, stored, server, it = scramp.ScramMechanism(mechanism).make_auth_info(
            password, iteration_count=iterations, salt=salt or os.urandom(32)
        )
        self.by_mechanism.setdefault(mechanism, {})[name] = ScramCredential(s, stored, server, it)


#: Kafka's ``ScramMechanism`` type ids (UserScramCredentialRecord.Mechanism)
SCRAM_MECHANISM_IDS = {"SCRAM-SHA-256": 1, "SCRAM-SHA-512": 2}


class ImageScramCredentials:
    """The SCRAM credentials of the metadata log as this node's image has them;
    ``image()`` returns the current committed image."""

    def __init__(self, image: Any) -> None:
        self.image = image

    def get(self, mechanism: str, name: str) -> ScramCredential | None:
        """The credential of ``name`` for ``mechanism`` in the current image, or None."""
        return self.image().scram.get((SCRAM_MECHANISM_IDS.get(mechanism, 0), name))


_ADD_SCRAM_RE = re.compile(r"^\s*(SCRAM-SHA-256|SCRAM-SHA-512)\s*=\s*\[(.*)\]\s*$")


def parse_add_scram(text: str) -> tuple[str, str, str, int, bytes | None]:
    """Kafka's ``kafka-storage format --add-scram`` argument,
    ``SCRAM-SHA-256=[name=alice,password=alice-secret]`` (optional ``iterations=8192``,
    ``salt=<base64>``; quoted values allowed) -> (mechanism, name, password, iterations, salt)."""
    m = _ADD_SCRAM_RE.match(text)
    if m is None:
        raise ConfigError(
            f"--add-scram {text!r}: expected SCRAM-SHA-256=[name=...,password=...] or "
            "SCRAM-SHA-512=[...]"
        )
    opts = {}
    for k, quoted, bare in re.findall(r'\s*(\w+)\s*=\s*(?:"([^"]*)"|([^,]*))\s*,?', m.group(2)):
        opts[k] = quoted or bare
    if not opts.get("name") or "password" not in opts:
        raise ConfigError(f"--add-scram {text!r}: name and password are required")
    try:
        iterations = int(opts.get("iterations", MIN_ITERATIONS))
        salt = base64.b64decode(opts["salt"]) if "salt" in opts else None
    except ValueError:
        raise ConfigError(f"--add-scram {text!r}: bad iterations or salt") from None
    return m.group(1), opts["name"], opts["password"], iterations, salt


# ------------------------------------------------------------------------------- servers
@dataclass
class SaslServerSettings:
    """What one SASL listener accepts: its enabled mechanisms, PLAIN's users, the SCRAM store,
    and ``connections.max.reauth.ms`` (0: sessions do not expire)."""

    mechanisms: tuple[str, ...]
    plain_users: dict[str, str]
    scram: Any  # ScramCredentials or ImageScramCredentials: ``get(mechanism, name)``
    max_reauth_ms: int
    max_receive_size: int

    def new_server(self, mechanism: str) -> Any:
        """A fresh authenticator for ``mechanism`` (one per exchange)."""
        if mechanism == "PLAIN":
            return PlainServer(self.plain_users)
        return ScramServer(mechanism, self.scram)


def sasl_server_settings(
    config: Config, listener: str, scram: ScramCredentials
) -> SaslServerSettings:
    """The SASL settings of ``listener`` (mechanisms, PLAIN users, reauth, receive limit)."""
    mechs = tuple(
        x.strip() for x in config.listener_value(listener, "sasl.enabled.mechanisms").split(",")
        if x.strip()
    )  # fmt: skip
    for mech in mechs:
        if mech not in MECHANISMS:
            raise ConfigError(f"sasl.enabled.mechanisms of listener {listener}: {mech}")
    plain = {
        k[len("user_") :]: v
        for k, v in _jaas(config, listener, "PLAIN").items()
        if k.startswith("user_")
    }
    try:
        reauth = int(config.listener_value(listener, "connections.max.reauth.ms") or 0)
        max_receive = int(config.listener_value(listener, "sasl.server.max.receive.size"))
    except ValueError:
        raise ConfigError(
            f"connections.max.reauth.ms or sasl.server.max.receive.size of listener {listener}"
        ) from None
    return SaslServerSettings(mechs, plain, scram, max(reauth, 0), max_receive)


class PlainServer:
    """RFC 4616 on the server: one token, ``[authzid] NUL authcid NUL passwd`` (UTF-8)."""

    def __init__(self, users: dict[str, str]) -> None:
        self.users = users
        self.username: str | None = None
        self.complete = False

    def step(self, token: bytes) -> bytes:
        """Check the client's token; returns the (empty) server token."""
        if self.complete:
            raise SaslAuthenticationError("PLAIN: unexpected token after completion")
        parts = token.split(b"\0")
        if len(parts) != 3:
            raise SaslAuthenticationError("Invalid SASL/PLAIN response: expected 3 tokens")
        try:
            authzid, authcid, passwd = (p.decode("utf-8") for p in parts)
        except UnicodeDecodeError:
            raise SaslAuthenticationError("Invalid SASL/PLAIN response: not UTF-8") from None
        if not authcid:
            raise SaslAuthenticationError("Authentication failed: username not specified")
        if not passwd:
            raise SaslAuthenticationError("Authentication failed: password not specified")
        expected = self.users.get(authcid)
        if expected is None or not hmac.compare_digest(expected.encode(), passwd.encode()):
            raise SaslAuthenticationError("Authentication failed: Invalid username or password")
        if authzid and authzid != authcid:
            raise SaslAuthenticationError(
                "Authentication failed: Client requested an authorization id that is different "
                "from username"
            )
        self.username = authcid
        self.complete = True
        return b""


class ScramServer:
    """RFC 5802 on the server through ``scramp``: client-first -> server-first, client-final ->
    server-final. The user name is the SCRAM ``n=`` name with Kafka's ``=2C``/``=3D`` escapes
    undone."""

    def __init__(self, mechanism: str, store: Any) -> None:
        self.mechanism = mechanism
        self.store = store
        self.username: str | None = None
        self.complete = False
        self._step = 0

        def auth_fn(name: str) -> tuple:
            cred = store.get(mechanism, name)
            if cred is None:
                raise SaslAuthenticationError(
                    f"Authentication failed during authentication due to invalid credentials "
                    f"with SASL mechanism {mechanism}"
                )
            self.username = name
            return cred.salt, cred.stored_key, cred.server_key, cred.iterations

        self._server = scramp.ScramMechanism(mechanism).make_server(auth_fn)

    def step(self, token: bytes) -> bytes:
        try:
            text = token.decode("utf-8")
            if self._step == 0:
                self._step = 1
                self._server.set_client_first(text)
                return self._server.get_server_first().encode()
            if self._step == 1:
                self._step = 2
                self._server.set_client_final(text)
                out = self._server.get_server_final().encode()
                self.complete = True
                return out
        except SaslAuthenticationError:
            raise
        except (scramp.ScramException, UnicodeDecodeError, ValueError, KeyError, TypeError) as e:
            raise SaslAuthenticationError(
                f"Authentication failed during authentication due to invalid credentials with "
                f"SASL mechanism {self.mechanism}: {e}"
            ) from None
        raise SaslAuthenticationError(f"{self.mechanism}: unexpected token after completion")


# ------------------------------------------------------------------------------- client side
class SaslClient:
    """This node's side of a SASL exchange: ``first()`` is the first token, ``step(server)``
    the next (None when the exchange is complete). Raises :class:`SaslAuthenticationError`
    when the server's answer does not verify (SCRAM's server signature)."""

    def __init__(self, mechanism: str, username: str, password: str) -> None:
        if mechanism not in MECHANISMS:
            raise ConfigError(f"unsupported SASL mechanism {mechanism}")
        self.mechanism = mechanism
        self.username = username
        self.password = password
        self._scram = (
            scramp.ScramClient([mechanism], username, password)
            if mechanism in SCRAM_MECHANISMS
            else None
        )
        self._step = 0

    def first(self) -> bytes:
        """The client's first token (PLAIN: ``\\0user\\0password``; SCRAM: client-first)."""
        if self._scram is None:
            return b"\0" + self.username.encode() + b"\0" + self.password.encode()
        return self._scram.get_client_first().encode()

    def step(self, server_token: bytes) -> bytes | None:
        """The next token for the server's ``server_token``, None once complete."""
        if self._scram is None:
            return None
        try:
            if self._step == 0:
                self._step = 1
                self._scram.set_server_first(server_token.decode())
                return self._scram.get_client_final().encode()
            self._scram.set_server_final(server_token.decode())
            return None
        except (scramp.ScramException, UnicodeDecodeError) as e:
            raise SaslAuthenticationError(f"{self.mechanism}: {e}") from None


def client_credentials(config: Config, listener: str, mechanism: str) -> tuple[str, str]:
    """(username, password) this node logs in with on ``listener`` with ``mechanism``, from the
    listener's JAAS options; ConfigError when absent."""
    opts = _jaas(config, listener, mechanism)
    if "username" not in opts or "password" not in opts:
        raise ConfigError(
            f"listener.name.{listener.lower()}.{mechanism.lower()}.sasl.jaas.config: username "
            "and password are needed for this node's own connections"
        )
    return opts["username"], opts["password"]
