"""SCRAM credentials in the metadata log (Kafka's ``ScramControlManager``).

* Records: :func:`scram_records` turns a :class:`~kafka_rpc.security.sasl.ScramCredentials`
  store (``--add-scram`` at format time) into UserScramCredentialRecords, which format puts in
  ``bootstrap.checkpoint`` and the first active controller of an empty log writes in its
  bootstrap transaction (:class:`~kafka_rpc.controller.features.BootstrapMetadata`).
* Command: :func:`alter_user_scram_credentials` (AlterUserScramCredentials, 51).
* Replay: UserScramCredentialRecord and RemoveUserScramCredentialRecord (:data:`REPLAY`) into
  the image's ``scram`` map, which :class:`~kafka_rpc.security.sasl.ImageScramCredentials`
  authenticates against.
* Snapshot part: :func:`image_scram_records`.
"""

from __future__ import annotations

import hashlib
import hmac
from typing import Any

from kafka_rpc.controller.base import ControllerContext, ControllerResult, ReplayError
from kafka_rpc.controller.image import MetadataImage, evolve
from kafka_rpc.protocol import codec
from kafka_rpc.protocol.errors import ErrorCode
from kafka_rpc.security.sasl import SCRAM_MECHANISM_IDS, ScramCredential, ScramCredentials

__all__ = [
    "REPLAY",
    "SNAPSHOT",
    "alter_user_scram_credentials",
    "alter_user_scram_credentials_error_response",
    "image_scram_records",
    "replay_remove_user_scram_credential",
    "replay_user_scram_credential",
    "scram_records",
]

MV_SCRAM = 11
"""metadata.version 3.5-IV2: SCRAM records (``MetadataVersion.isScramSupported``)."""
MIN_ITERATIONS = 4096  # Kafka's ScramMechanism.minIterations (both mechanisms)
MAX_ITERATIONS = 16384  # ScramControlManager.MAX_ITERATIONS
_HASH = {1: hashlib.sha256, 2: hashlib.sha512}


def _keys(mechanism: int, salted_password: bytes) -> tuple[bytes, bytes]:
    """(StoredKey, ServerKey) from a SaltedPassword (RFC 5802; Kafka's ``ScramFormatter``):
    StoredKey = H(HMAC(SaltedPassword, "Client Key")), ServerKey = HMAC(SaltedPassword,
    "Server Key")."""
    h = _HASH[mechanism]
    client_key = hmac.new(salted_password, b"Client Key", h).digest()
    return h(client_key).digest(), hmac.new(salted_password, b"Server Key", h).digest()


def alter_user_scram_credentials(
    image: MetadataImage, request: Any, ctx: ControllerContext
) -> ControllerResult:
    """AlterUserScramCredentials v0 (ScramControlManager.alterCredentials). Per user (a user
    named twice in the request, deletions and upsertions together, gets DUPLICATE_RESOURCE "A
    user credential cannot be altered twice in the same request" and no change):

    - metadata.version below 3.5-IV2: UNSUPPORTED_VERSION;
    - empty name: UNACCEPTABLE_CREDENTIAL "Username must not be empty"; a mechanism other than
      1 / 2: UNSUPPORTED_SASL_MECHANISM "Unknown SCRAM mechanism";
    - deletion of a credential that does not exist: RESOURCE_NOT_FOUND;
    - upsertion with fewer than 4096 or more than 16384 iterations: UNACCEPTABLE_CREDENTIAL
      "Too few iterations" / "Too many iterations";
    - otherwise a RemoveUserScramCredentialRecord, or a UserScramCredentialRecord with the salt,
      the iterations and the stored and server keys derived from SaltedPassword (the password
      itself never reaches the controller).
    Results: the deletions, then the upsertions, then the refused users, each in request order;
    all records in one batch."""
    mod = codec.module("AlterUserScramCredentialsResponse")
    supported = image.features.get("metadata.version", 0) >= MV_SCRAM
    dup = "A user credential cannot be altered twice in the same request"
    deletions: dict[str, Any] = {}
    upserts: dict[str, Any] = {}
    errors: dict[str, tuple[int, str]] = {}

    def check(name: str, mechanism: int) -> tuple[int, str] | None:
        if not supported:
            return ErrorCode.UNSUPPORTED_VERSION, (
                "The current metadata.version does not support SCRAM"
            )
        if name == "":
            return ErrorCode.UNACCEPTABLE_CREDENTIAL, "Username must not be empty"
        if mechanism not in _HASH:
            return ErrorCode.UNSUPPORTED_SASL_MECHANISM, "Unknown SCRAM mechanism"
        return None

    for d in request.deletions:
        if d.name in errors:
            continue
        if deletions.pop(d.name, None) is not None:
            errors[d.name] = (ErrorCode.DUPLICATE_RESOURCE, dup)
            continue
        err = check(d.name, d.mechanism)
        if err is None and (d.mechanism, d.name) not in image.scram:
            err = (ErrorCode.RESOURCE_NOT_FOUND,
                   "Attempt to delete a user credential that does not exist")  # fmt: skip
        if err is not None:
            errors[d.name] = err
        else:
            deletions[d.name] = d
    for u in request.upsertions:
        if u.name in errors:
            continue
        if deletions.pop(u.name, None) is not None or upserts.pop(u.name, None) is not None:
            errors[u.name] = (ErrorCode.DUPLICATE_RESOURCE, dup)
            continue
        err = check(u.name, u.mechanism)
        if err is None and u.iterations < MIN_ITERATIONS:
            err = (ErrorCode.UNACCEPTABLE_CREDENTIAL, "Too few iterations")
        elif err is None and u.iterations > MAX_ITERATIONS:
            err = (ErrorCode.UNACCEPTABLE_CREDENTIAL, "Too many iterations")
        if err is not None:
            errors[u.name] = err
        else:
            upserts[u.name] = u
    records = []
    results = []
    for name, d in deletions.items():
        records.append(codec.message_class("RemoveUserScramCredentialRecord")(
            name=name, mechanism=d.mechanism))  # fmt: skip
        results.append(mod.AlterUserScramCredentialsResult(user=name, error_code=0))
    for name, u in upserts.items():
        stored, server = _keys(u.mechanism, bytes(u.salted_password))
        records.append(codec.message_class("UserScramCredentialRecord")(
            name=name, mechanism=u.mechanism, salt=bytes(u.salt), stored_key=stored,
            server_key=server, iterations=u.iterations))  # fmt: skip
        results.append(mod.AlterUserScramCredentialsResult(user=name, error_code=0))
    for name, (code, message) in errors.items():
        results.append(mod.AlterUserScramCredentialsResult(user=name, error_code=code,
                                                           error_message=message))  # fmt: skip
    return ControllerResult(records, mod.AlterUserScramCredentialsResponse(results=tuple(results)))


def alter_user_scram_credentials_error_response(request: Any, code: int, message: Any) -> Any:
    """Every user of the request answered ``code`` (NOT_CONTROLLER ...)."""
    mod = codec.module("AlterUserScramCredentialsResponse")
    users = dict.fromkeys([d.name for d in request.deletions] +
                          [u.name for u in request.upsertions])  # fmt: skip
    return mod.AlterUserScramCredentialsResponse(results=tuple(
        mod.AlterUserScramCredentialsResult(user=n, error_code=code, error_message=message)
        for n in users))  # fmt: skip


def scram_records(store: ScramCredentials) -> list:
    """UserScramCredentialRecords of every credential of ``store`` (by mechanism, then user;
    salted keys only), for the metadata log's bootstrap batch."""
    rec = codec.message_class("UserScramCredentialRecord")
    return [
        rec(
            name=name,
            mechanism=SCRAM_MECHANISM_IDS[mech],
            salt=c.salt,
            stored_key=c.stored_key,
            server_key=c.server_key,
            iterations=c.iterations,
        )
        for mech, users in sorted(store.by_mechanism.items())
        for name, c in sorted(users.items())
    ]


def replay_user_scram_credential(img: MetadataImage, r: Any, offset: int) -> MetadataImage:
    """ScramControlManager.replay(UserScramCredentialRecord): the credential of (mechanism id,
    user), replacing an earlier one."""
    cred = ScramCredential(r.salt, r.stored_key, r.server_key, r.iterations)
    return evolve(img, scram=img.scram.set((r.mechanism, r.name), cred))


def replay_remove_user_scram_credential(img: MetadataImage, r: Any, offset: int) -> MetadataImage:
    """ScramControlManager.replay(RemoveUserScramCredentialRecord): the credential goes; one
    that does not exist is a ReplayError ("Unable to find credential to delete")."""
    key = (r.mechanism, r.name)
    if key not in img.scram:
        raise ReplayError(f"Unable to find credential to delete: {r.name} ({r.mechanism})")
    return evolve(img, scram=img.scram.remove(key))


REPLAY = {
    "UserScramCredentialRecord": replay_user_scram_credential,
    "RemoveUserScramCredentialRecord": replay_remove_user_scram_credential,
}


def image_scram_records(image: MetadataImage) -> list:
    """The UserScramCredentialRecords that rebuild ``image.scram`` (snapshots)."""
    ids = {v: k for k, v in SCRAM_MECHANISM_IDS.items()}
    store = ScramCredentials()
    for (mech_id, name), c in image.scram.items():
        store.by_mechanism.setdefault(ids[mech_id], {})[name] = c
    return scram_records(store)


SNAPSHOT = (image_scram_records,)
"""This manager's part of a snapshot (``kafka_rpc.controller.snapshot``), in order."""
