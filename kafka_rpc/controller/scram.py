"""SCRAM credentials in the metadata log (Kafka's ``ScramControlManager``).

* Records: :func:`scram_records` turns a :class:`~kafka_rpc.security.sasl.ScramCredentials`
  store (``--add-scram`` at format time) into UserScramCredentialRecords, which the first active
  controller of an empty log writes in its bootstrap batch
  (:func:`~kafka_rpc.controller.features.bootstrap_records`).
* Replay: UserScramCredentialRecord (:data:`REPLAY`) into the image's ``scram`` map, which
  :class:`~kafka_rpc.security.sasl.ImageScramCredentials` authenticates against.
* Snapshot part: :func:`image_scram_records`.
"""

from __future__ import annotations

from typing import Any

from kafka_rpc.controller.image import MetadataImage, evolve
from kafka_rpc.protocol import codec
from kafka_rpc.security.sasl import SCRAM_MECHANISM_IDS, ScramCredential, ScramCredentials

__all__ = ["REPLAY", "image_scram_records", "replay_user_scram_credential", "scram_records"]


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


REPLAY = {"UserScramCredentialRecord": replay_user_scram_credential}


def image_scram_records(image: MetadataImage) -> list:
    """The UserScramCredentialRecords that rebuild ``image.scram`` (snapshots)."""
    ids = {v: k for k, v in SCRAM_MECHANISM_IDS.items()}
    store = ScramCredentials()
    for (mech_id, name), c in image.scram.items():
        store.by_mechanism.setdefault(ids[mech_id], {})[name] = c
    return scram_records(store)
