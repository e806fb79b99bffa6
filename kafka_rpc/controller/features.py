"""Finalized features (Kafka's ``FeatureControlManager``, and the bootstrap part of
``ActivationRecordsGenerator``): ``metadata.version`` and the other feature levels.

* The first active controller of an empty log writes ``FeatureLevelRecord metadata.version =
  BOOTSTRAP_METADATA_VERSION`` (:func:`bootstrap_records`; Kafka's ``kafka-storage format``
  puts it in a bootstrap checkpoint instead).
* Replay: :func:`replay_feature_level` (``FeatureControlManager.replay``).
* A registering broker must support every finalized level (:func:`supports_finalized_levels`,
  ``QuorumController``'s registration check).
* Snapshot part: :func:`feature_records`. Known divergence from Kafka: the records are sorted by
  feature name, while Kafka's ``FeaturesImage.write`` writes ``metadata.version`` first.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from kafka_rpc.controller.image import MetadataImage, evolve
from kafka_rpc.protocol import codec

__all__ = [
    "BOOTSTRAP_METADATA_VERSION",
    "BOOTSTRAP_METADATA_VERSION_NAME",
    "METADATA_VERSION",
    "REPLAY",
    "bootstrap_records",
    "feature_records",
    "replay_feature_level",
    "supports_finalized_levels",
]

#: ``MetadataVersion.IBP_4_0_IV3``: feature level 25 (3.9-IV0 is 21, 4.0-IV0 22). Kafka's
#: ``kafka-storage format`` puts it in a bootstrap checkpoint; the first leader appends it here.
BOOTSTRAP_METADATA_VERSION = 25
BOOTSTRAP_METADATA_VERSION_NAME = "4.0-IV3"
METADATA_VERSION = "metadata.version"

_R = codec.message_class


def supports_finalized_levels(image: MetadataImage, features: Iterable[Any]) -> bool:
    """Whether a broker's supported ranges (``features``: entries with ``name``,
    ``min_supported_version``, ``max_supported_version``, as BrokerRegistration's Features) hold
    every finalized level of ``image`` they name; a feature the image does not finalize is no
    constraint. False answers the registration UNSUPPORTED_VERSION."""
    for f in features:
        level = image.features.get(f.name)
        if level is not None and not f.min_supported_version <= level <= f.max_supported_version:
            return False
    return True


def bootstrap_records(image: MetadataImage, extra: Iterable[Any] = ()) -> list:
    """The batch the first active controller of an empty log writes: ``FeatureLevelRecord
    metadata.version = BOOTSTRAP_METADATA_VERSION`` then ``extra`` (the SCRAM credentials of
    ``--add-scram``); empty when ``image`` already has a ``metadata.version``."""
    if METADATA_VERSION in image.features:
        return []
    rec = _R("FeatureLevelRecord")(name=METADATA_VERSION, feature_level=BOOTSTRAP_METADATA_VERSION)
    return [rec, *extra]


def replay_feature_level(img: MetadataImage, r: Any, offset: int) -> MetadataImage:
    """FeatureControlManager.replay(FeatureLevelRecord): level 0 removes the feature."""
    if r.feature_level == 0:
        return evolve(img, features=img.features.discard(r.name))
    return evolve(img, features=img.features.set(r.name, r.feature_level))


REPLAY = {"FeatureLevelRecord": replay_feature_level}


def feature_records(image: MetadataImage) -> list:
    """The FeatureLevelRecords that rebuild ``image.features``, by feature name (see the module
    docstring for the divergence from Kafka's order)."""
    return [
        _R("FeatureLevelRecord")(name=name, feature_level=image.features[name])
        for name in sorted(image.features)
    ]
