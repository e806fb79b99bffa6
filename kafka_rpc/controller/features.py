"""Finalized features (Kafka's ``FeatureControlManager`` with the ``MetadataVersion`` and
``Feature`` tables of ``server-common``, and the bootstrap part of ``ActivationRecordsGenerator``).

**metadata.version** (:data:`METADATA_VERSIONS`): Kafka 4.4.0's levels, 7 = 3.3-IV3 (Kafka's
``MINIMUM_VERSION``) to 34 = 4.5-IV0 (unstable there). We support, as controller and as broker,
**7 to 29 (4.2-IV1)** (:data:`LATEST_SUPPORTED_METADATA_VERSION`), the highest level whose record
formats and semantics this code implements. What 26-33 gate (``MetadataVersion``, 4.4.0):
26 (4.1-IV0) only makes ELR the default of a new cluster; 27 (4.1-IV1) the Fetch v18 a replica
fetcher sends (our Raft serves Fetch up to v18); 28 / 29 (4.2-IV0/IV1) make share / streams
groups the default and move inter-broker ListOffsets to v11 (broker-side only). None of them
changes a metadata record, so we implement them all. **30 (4.3-IV0) does** (``didMetadataChange``):
cordoned log directories (KIP-1066), RegisterBrokerRecord v4 and BrokerRegistrationChangeRecord v3
(``registerBrokerRecordVersion``, ``isCordonedLogDirsSupported``), which this controller neither
writes nor acts on; 32 (4.4-IV1) adds CIDR ACLs (``isCidrAclSupported``), 33 (4.4-IV2) the
UnregisterControllerRecord (``isControllerUnregistrationSupported``). So 29 is our top.

**Kafka's other features** (:data:`FEATURES`, ``Feature.PRODUCTION_FEATURES`` of 4.4.0, each with
its levels, their bootstrap MV and dependencies): ``kraft.version`` (0-1; the Raft layer's, never a
FeatureLevelRecord: its level is the metadata log's KRaftVersionRecord, read from the Raft
replica; 1 is a dynamic quorum, KIP-853), ``transaction.version`` (0-2),
``group.version`` (0-1), ``share.version`` (0-2) and ``streams.version`` (0-1), which only brokers
act on (this controller writes nothing for them; our broker role serves none of those APIs, so a
level constrains nothing there and we accept Kafka 4.4's full ranges), and
``eligible.leader.replicas.version`` (0-1 in Kafka, **0 only here**: ELR needs the controller to
keep ELR/LastKnownELR and write ClearElrRecords, which it does not; level 1 also needs MV >= 23).

**Features of ours** (never a Kafka name: prefix ``kafka_rpc.``) gate the records only kafka-rpc
understands, so a Kafka node (which halts on a record type it cannot parse) is never admitted
while they are finalized (registration below):

- ``kafka_rpc.diskless.version`` 0-1: 1 allows KIP-1164's TopicPartitionToBatchCoordinatorMapping
  record (AssignPartitionToBatchCoordinator, snapshots);
- ``kafka_rpc.chunks.version`` 0-1: 1 allows KIP-1114's ChunkRecord / ChunkChangeRecord and
  PartitionRecord / PartitionChangeRecord v3 (CreateChunks, AlterChunkAssignments, snapshots).

**Record versions** (:func:`record_version`): every record is written at the version the finalized
levels dictate (Kafka's ``partitionRecordVersion`` etc.); a record the levels do not allow raises.

**Registration** (:func:`registration_error`, ``ClusterControlManager.processRegistrationFeature``),
**UpdateFeatures** (:func:`update_features`, ``FeatureControlManager.updateFeatures``), replay
(:func:`replay_feature_level`), the bootstrap (:class:`BootstrapMetadata`,
:func:`activation_records`) and the snapshot part (:func:`feature_records`:
``metadata.version`` first, the others by name, as ``FeaturesImage.write``).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from kafka_rpc.controller.base import ControllerResult, ReplayError
from kafka_rpc.controller.image import RESOURCE_BROKER, MetadataImage, evolve
from kafka_rpc.protocol import codec
from kafka_rpc.protocol.errors import ErrorCode

__all__ = [
    "BOOTSTRAP_METADATA_VERSION",
    "BOOTSTRAP_METADATA_VERSION_NAME",
    "CHUNKS_VERSION",
    "DISKLESS_VERSION",
    "ELR_VERSION",
    "FEATURES",
    "KRAFT_VERSION",
    "LATEST_SUPPORTED_METADATA_VERSION",
    "METADATA_VERSION",
    "METADATA_VERSIONS",
    "MINIMUM_METADATA_VERSION",
    "OUR_FEATURES",
    "REPLAY",
    "SNAPSHOT",
    "BootstrapMetadata",
    "FeatureError",
    "FeatureSpec",
    "MetadataVersion",
    "activation_records",
    "check_feature_levels",
    "default_feature_levels",
    "feature_records",
    "finalized_levels",
    "level",
    "metadata_version",
    "parse_release_version",
    "record_version",
    "registration_error",
    "replay_feature_level",
    "supported_features",
    "update_features",
]

log = logging.getLogger("kafka_rpc.controller.features")

_R = codec.message_class

METADATA_VERSION = "metadata.version"
KRAFT_VERSION = "kraft.version"
ELR_VERSION = "eligible.leader.replicas.version"
DISKLESS_VERSION = "kafka_rpc.diskless.version"
CHUNKS_VERSION = "kafka_rpc.chunks.version"


# ============================================================================ metadata.version
@dataclass(frozen=True, slots=True)
class MetadataVersion:
    """One ``MetadataVersion``: feature ``level``, ``release`` ("3.3") and internal version
    ("IV3"); ``changed`` is Kafka's ``didMetadataChange`` (a downgrade across it may lose
    metadata)."""

    level: int
    release: str
    iv: str
    changed: bool

    @property
    def name(self) -> str:
        """Kafka's ``MetadataVersion.version()``: ``"3.3-IV3"``."""
        return f"{self.release}-{self.iv}"

    def __str__(self) -> str:
        return self.name


METADATA_VERSIONS: tuple[MetadataVersion, ...] = tuple(
    MetadataVersion(lvl, rel, iv, ch)
    for lvl, rel, iv, ch in (
        (7, "3.3", "IV3", True), (8, "3.4", "IV0", True), (9, "3.5", "IV0", False),
        (10, "3.5", "IV1", False), (11, "3.5", "IV2", True), (12, "3.6", "IV0", False),
        (13, "3.6", "IV1", True), (14, "3.6", "IV2", True), (15, "3.7", "IV0", True),
        (16, "3.7", "IV1", False), (17, "3.7", "IV2", True), (18, "3.7", "IV3", False),
        (19, "3.7", "IV4", False), (20, "3.8", "IV0", False), (21, "3.9", "IV0", False),
        (22, "4.0", "IV0", False), (23, "4.0", "IV1", True), (24, "4.0", "IV2", False),
        (25, "4.0", "IV3", False), (26, "4.1", "IV0", False), (27, "4.1", "IV1", False),
        (28, "4.2", "IV0", False), (29, "4.2", "IV1", False), (30, "4.3", "IV0", True),
        (31, "4.4", "IV0", False), (32, "4.4", "IV1", True), (33, "4.4", "IV2", True),
        (34, "4.5", "IV0", False),
    )
)  # fmt: skip
"""Kafka 4.4.0's ``MetadataVersion`` enum (level, release, internal version, didMetadataChange)."""
_MV_BY_LEVEL = {mv.level: mv for mv in METADATA_VERSIONS}

MINIMUM_METADATA_VERSION = 7
"""``MetadataVersion.MINIMUM_VERSION`` (3.3-IV3)."""
LATEST_SUPPORTED_METADATA_VERSION = 29
"""The highest ``metadata.version`` this code implements (4.2-IV1; see the module docstring).
It plays Kafka's ``LATEST_PRODUCTION``: the default of a new cluster and the top of the range
we register and advertise with."""
BOOTSTRAP_METADATA_VERSION = LATEST_SUPPORTED_METADATA_VERSION
"""The ``metadata.version`` a new cluster gets unless formatted with ``--release-version``."""
BOOTSTRAP_METADATA_VERSION_NAME = _MV_BY_LEVEL[BOOTSTRAP_METADATA_VERSION].name


def metadata_version(level: int) -> MetadataVersion:
    """``MetadataVersion.fromFeatureLevel``; ValueError (Kafka's message) for an unknown level."""
    mv = _MV_BY_LEVEL.get(level)
    if mv is None:
        raise ValueError(
            f"No MetadataVersion with feature level {level}. Valid feature levels are from "
            f"{MINIMUM_METADATA_VERSION} to {METADATA_VERSIONS[-1].level}."
        )
    return mv


def _supported_versions_text() -> str:
    return ", ".join(
        mv.name for mv in METADATA_VERSIONS if mv.level <= LATEST_SUPPORTED_METADATA_VERSION
    )


def parse_release_version(text: str) -> MetadataVersion:
    """Kafka's ``MetadataVersion.fromVersionString`` (unstable versions off) over the levels we
    support: ``"4.2-IV1"`` names one level, ``"3.9"`` (or ``"3.9.1"``: only the first two
    segments count) the highest supported level of that release. ValueError with Kafka's
    message otherwise ("Unknown metadata.version '...'. Supported metadata.version are: ...")."""
    segments = text.split(".")
    key = text if len(segments) <= 2 else ".".join(segments[:2])
    found = None
    for mv in METADATA_VERSIONS:
        if mv.level > LATEST_SUPPORTED_METADATA_VERSION:
            break
        if key in (mv.name, mv.release):
            found = mv  # a release maps to its highest (supported) internal version
    if found is None:
        raise ValueError(
            f"Unknown metadata.version '{text}'. Supported metadata.version are: "
            f"{_supported_versions_text()}"
        )
    return found


def _metadata_changed(a: int, b: int) -> bool:
    """``MetadataVersion.checkIfMetadataChanged``: whether any level in ``(low, high]`` changed
    the metadata (so going from one to the other may lose information)."""
    low, high = sorted((a, b))
    return any(_MV_BY_LEVEL[lv].changed for lv in range(low + 1, high + 1) if lv in _MV_BY_LEVEL)


# ============================================================================ features
@dataclass(frozen=True, slots=True)
class FeatureSpec:
    """A feature other than ``metadata.version`` (Kafka's ``Feature`` with its ``FeatureVersion``
    values, or one of ours). ``bootstrap_mv[i]`` is level i's ``bootstrapMetadataVersion`` (the
    lowest MV whose new clusters get it by default), ``dependencies[i]`` its
    ``dependencies()`` (feature name -> minimum level); ``supported_max`` is the highest level
    this code implements; ``ours`` marks a kafka-rpc feature."""

    name: str
    bootstrap_mv: tuple[int, ...]
    supported_max: int
    dependencies: tuple[Mapping[str, int], ...] = ()
    ours: bool = False

    @property
    def kafka_max(self) -> int:
        """Kafka 4.4.0's latest production level (ours: our own max)."""
        return len(self.bootstrap_mv) - 1

    def depends(self, lvl: int) -> Mapping[str, int]:
        return self.dependencies[lvl] if lvl < len(self.dependencies) else {}

    def default_level(self, mv: int, kafka_compatible: bool = False) -> int:
        """The level a cluster formatted at ``mv`` gets: Kafka's ``Feature.defaultLevel`` (the
        highest level whose bootstrap MV is <= ``mv``) capped at what we support; ours at their
        max, or 0 when ``kafka_compatible``."""
        if self.ours:
            return 0 if kafka_compatible else self.supported_max
        best = 0
        for lvl, bmv in enumerate(self.bootstrap_mv):
            if bmv <= mv:
                best = lvl
        return min(best, self.supported_max)


FEATURES: dict[str, FeatureSpec] = {
    f.name: f
    for f in (
        FeatureSpec(KRAFT_VERSION, (7, 21), supported_max=1),
        FeatureSpec("transaction.version", (7, 24, 24), supported_max=2),
        FeatureSpec("group.version", (7, 22), supported_max=1),
        FeatureSpec(ELR_VERSION, (7, 26), supported_max=0,
                    dependencies=({}, {METADATA_VERSION: 23})),
        FeatureSpec("share.version", (7, 28, 31), supported_max=2),
        FeatureSpec("streams.version", (7, 29), supported_max=1),
        FeatureSpec(DISKLESS_VERSION, (7, 7), supported_max=1, ours=True),
        FeatureSpec(CHUNKS_VERSION, (7, 7), supported_max=1, ours=True),
    )
}  # fmt: skip
"""Every feature besides ``metadata.version`` this code knows (Kafka 4.4.0's production features
and ours), by name."""
OUR_FEATURES = tuple(n for n, f in FEATURES.items() if f.ours)


def supported_features() -> dict[str, tuple[int, int]]:
    """The ranges this node supports, as controller and as broker: ``{name: (min, max)}`` with
    every feature whose max is > 0 (``QuorumFeatures.defaultSupportedFeatureMap`` /
    ``BrokerFeatures.defaultSupportedFeatures`` list no feature supported at 0 only), so
    ``kraft.version`` is there as 0-1 (``Feature.KRAFT_VERSION``'s range on every 4.x node) and
    ``eligible.leader.replicas.version`` is absent."""
    out = {METADATA_VERSION: (MINIMUM_METADATA_VERSION, LATEST_SUPPORTED_METADATA_VERSION)}
    for name, f in FEATURES.items():
        if f.supported_max > 0:
            out[name] = (0, f.supported_max)
    return out


def level(image: Any, name: str) -> int:
    """The finalized level of feature ``name`` in ``image`` (0 when absent; for
    ``metadata.version``, 0 means not yet bootstrapped)."""
    return image.features.get(name, 0)


def finalized_levels(image: Any, kraft_version: int = 0) -> dict[str, int]:
    """The finalized features as Kafka reports them (``FinalizedFeatures``): every level > 0,
    ``metadata.version`` included, plus ``kraft.version`` from the Raft layer
    (``kraft_version``: the metadata replica's, ``RaftClient.kraftVersion``) when > 0, as
    ``FinalizedFeatures.setFinalizedLevel`` drops a level of 0."""
    out = {n: lv for n, lv in image.features.items() if lv > 0}
    if kraft_version > 0:
        out[KRAFT_VERSION] = kraft_version
    return out


class FeatureError(ValueError):
    """A feature level this code cannot finalize or write (format time, bootstrap, a record the
    finalized levels do not allow)."""


def check_feature_levels(levels: Mapping[str, int]) -> None:
    """Kafka's ``Formatter.calculateEffectiveFeatureLevels`` checks over a complete map
    (``metadata.version`` included): every feature known, every level one we support, every
    dependency met (``Feature.validateVersion``). Raises FeatureError with the reason."""
    mv = levels.get(METADATA_VERSION)
    if mv is None:
        raise FeatureError("No FeatureLevelRecord for metadata.version was found")
    if not MINIMUM_METADATA_VERSION <= mv <= LATEST_SUPPORTED_METADATA_VERSION:
        name = _MV_BY_LEVEL[mv].name if mv in _MV_BY_LEVEL else str(mv)
        raise FeatureError(
            f"metadata.version {name} is not supported by kafka-rpc: supported metadata.version "
            f"are: {_supported_versions_text()}"
        )
    for name, lvl in sorted(levels.items()):
        if name == METADATA_VERSION:
            continue
        f = FEATURES.get(name)
        if f is None:
            raise FeatureError(
                f"Unsupported feature: {name}. Supported features are: "
                + ", ".join(sorted(FEATURES))
            )
        if not 0 <= lvl <= f.supported_max:
            known = ("" if lvl > f.kafka_max or lvl < 0
                     else " (Apache Kafka has it; kafka-rpc does not)")  # fmt: skip
            raise FeatureError(
                f"No feature:{name} with feature level {lvl}{known}. kafka-rpc supports "
                f"{name} 0 to {f.supported_max}."
            )
        _validate_version(name, lvl, levels)


def _validate_version(name: str, lvl: int, levels: Mapping[str, int]) -> None:
    """``Feature.validateVersion``: a level >= 1 needs ``metadata.version`` and every dependency
    of that level at or above its minimum; FeatureError (Kafka's message) otherwise."""
    mv = levels.get(METADATA_VERSION)
    if lvl >= 1 and (mv is None or mv < MINIMUM_METADATA_VERSION):
        raise FeatureError(
            f"{name} could not be set to {lvl} because it depends on metadata.version="
            f"{MINIMUM_METADATA_VERSION} ({_MV_BY_LEVEL[MINIMUM_METADATA_VERSION]})"
        )
    for dep, need in FEATURES[name].depends(lvl).items():
        have = levels.get(dep)
        if have is None or have < need:
            raise FeatureError(
                f"{name} could not be set to {lvl} because it depends on {dep} level {need}"
            )


def default_feature_levels(
    mv: int = BOOTSTRAP_METADATA_VERSION,
    overrides: Mapping[str, int] | None = None,
    kafka_compatible: bool = False,
    dynamic_quorum: bool = False,
) -> dict[str, int]:
    """The feature levels a new cluster starts with (``Formatter.calculateEffectiveFeatureLevels``):
    ``metadata.version`` = ``mv``, each feature in ``overrides`` (``--feature NAME=LEVEL``) as
    given, every other one at its default for ``mv`` (ours at their max unless
    ``kafka_compatible``). ``kraft.version`` does not follow ``mv``
    (``Formatter.effectiveKRaftFeatureLevel``): 1 with ``dynamic_quorum`` (empty
    ``controller.quorum.voters`` and one of ``--standalone``, ``--initial-controllers``,
    ``--no-initial-controllers``), else 0; a given 0 with a dynamic quorum, or a given level
    above 0 without one, is a FeatureError with Kafka's message. Checked with
    :func:`check_feature_levels` (FeatureError)."""
    overrides = dict(overrides or {})
    if METADATA_VERSION in overrides:
        raise FeatureError(
            "Use --release-version instead of --feature metadata.version=X to avoid ambiguity."
        )
    for name in overrides:
        if name not in FEATURES:
            raise FeatureError(
                f"Unsupported feature: {name}. Supported features are: "
                + ", ".join(sorted(FEATURES))
            )
    kraft = overrides.get(KRAFT_VERSION)
    if kraft is not None and kraft == 0 and dynamic_quorum:
        raise FeatureError(
            "Cannot set kraft.version to 0 if controller.quorum.voters is empty and one of the "
            "flags --standalone, --initial-controllers, or --no-initial-controllers is used. For "
            "dynamic controllers support, try removing the --feature flag for kraft.version."
        )
    if kraft is not None and kraft != 0 and not dynamic_quorum:
        raise FeatureError(
            f"Cannot set kraft.version to {kraft} unless controller.quorum.voters is empty and "
            "one of the flags --standalone, --initial-controllers, or --no-initial-controllers "
            "is used. For dynamic controllers support, try using one of --standalone, "
            "--initial-controllers, or --no-initial-controllers and removing "
            "controller.quorum.voters."
        )
    levels = {METADATA_VERSION: mv}
    for name, f in FEATURES.items():
        levels[name] = overrides.get(name, f.default_level(mv, kafka_compatible))
    if kraft is None:
        levels[KRAFT_VERSION] = 1 if dynamic_quorum else 0
    check_feature_levels(levels)
    return levels


# ============================================================================ record versions
def _mv(image: Any) -> int:
    mv = image.features.get(METADATA_VERSION)
    if mv is None:
        raise FeatureError("Unknown metadata version: no metadata.version has been finalized")
    return mv


_GATED = {
    "ChunkRecord": CHUNKS_VERSION,
    "ChunkChangeRecord": CHUNKS_VERSION,
    "TopicPartitionToBatchCoordinatorMapping": DISKLESS_VERSION,
}
_MIN_MV = {
    "UserScramCredentialRecord": 11,  # isScramSupported (3.5-IV2)
    "RemoveUserScramCredentialRecord": 11,
    "BeginTransactionRecord": 13,  # isMetadataTransactionSupported (3.6-IV1)
    "EndTransactionRecord": 13,
    "AbortTransactionRecord": 13,
    "RegisterControllerRecord": 15,  # isControllerRegistrationSupported (3.7-IV0)
}


def record_version(record: Any, image: Any) -> int:
    """The version ``record`` (a decoded metadata record) is written at under ``image``'s
    finalized levels, as Kafka's ``MetadataVersion`` methods choose it:

    - RegisterBrokerRecord: 1, 2 from MV 8 (3.4-IV0), 3 from MV 17 (3.7-IV2)
      (``registerBrokerRecordVersion``);
    - PartitionRecord / PartitionChangeRecord: 0, 1 from MV 17, 2 from MV 23 (4.0-IV1)
      (``partitionRecordVersion``, ``partitionChangeRecordVersion``); **3** (KIP-1114's
      StartOffset/StartTimestamp) only while ``kafka_rpc.chunks.version`` >= 1;
    - BrokerRegistrationChangeRecord: Kafka's explicit versions by content: 2 with LogDirs,
      1 with InControlledShutdown, else 0 (fence / unfence);
    - every other record: its only version, 0.

    Raises FeatureError for a record the levels do not allow: ChunkRecord / ChunkChangeRecord
    without ``kafka_rpc.chunks.version``, the coordinator mapping without
    ``kafka_rpc.diskless.version``, UserScramCredentialRecord below MV 11, the transaction
    records below MV 13, RegisterControllerRecord below MV 15, or no ``metadata.version`` at
    all (Kafka's ``metadataVersionOrThrow``)."""
    name = type(record).__spec_name__
    feature = _GATED.get(name)
    if feature is not None:
        if level(image, feature) < 1:
            raise FeatureError(f"{name} needs {feature} >= 1 (it is {level(image, feature)})")
        return 0
    if name in ("PartitionRecord", "PartitionChangeRecord"):
        if level(image, CHUNKS_VERSION) >= 1:
            return 3
        mv = _mv(image)
        return 2 if mv >= 23 else 1 if mv >= 17 else 0
    if name == "RegisterBrokerRecord":
        mv = _mv(image)
        return 3 if mv >= 17 else 2 if mv >= 8 else 1
    if name == "BrokerRegistrationChangeRecord":
        if record.log_dirs:
            return 2
        return 1 if record.in_controlled_shutdown else 0
    need = _MIN_MV.get(name)
    if need is not None and _mv(image) < need:
        raise FeatureError(f"{name} needs metadata.version {need} ({_MV_BY_LEVEL[need]}) or later")
    return 0


# ============================================================================ registration
def registration_error(
    image: MetadataImage, features: Iterable[Any], kraft_version: int = 0
) -> tuple[int, str] | None:
    """``ClusterControlManager.processRegistrationFeature`` over a BrokerRegistration's
    Features (entries with ``name``, ``min_supported_version``, ``max_supported_version``):

    - every listed range must contain the finalized level (a feature the image does not
      finalize counts as 0; ``kraft.version`` is ``kraft_version``, from the Raft layer), else
      UNSUPPORTED_VERSION "Unable to register because the broker does not support finalized
      version N of F. The broker wants a version between A and B, inclusive.";
    - ``metadata.version`` must be listed, else INVALID_REGISTRATION;
    - every finalized feature != 0 the broker does not list is checked as 0..0 (so it fails).

    Returns ``(error code, message)`` or None when the broker may register."""
    finalized = dict(image.features)
    finalized[KRAFT_VERSION] = kraft_version
    unverified = dict(finalized)

    def check(name: str, lo: int, hi: int) -> tuple[int, str] | None:
        have = finalized.get(name, 0)
        if not lo <= have <= hi:
            return (
                ErrorCode.UNSUPPORTED_VERSION,
                f"Unable to register because the broker does not support finalized version "
                f"{have} of {name}. The broker wants a version between {lo} and {hi}, inclusive.",
            )
        return None

    listed = set()
    for f in features:
        err = check(f.name, f.min_supported_version, f.max_supported_version)
        if err is not None:
            return err
        listed.add(f.name)
        unverified.pop(f.name, None)
    if METADATA_VERSION not in listed:
        return (ErrorCode.INVALID_REGISTRATION,
                f"Request features do not contain '{METADATA_VERSION}'")  # fmt: skip
    for name, lvl in sorted(unverified.items()):
        if lvl != 0:
            err = check(name, 0, 0)
            if err is not None:
                return err
    return None


# ============================================================================ replay
def replay_feature_level(img: MetadataImage, r: Any, offset: int) -> MetadataImage:
    """``FeatureControlManager.replay(FeatureLevelRecord)``: a level outside the range this node
    supports (an unknown feature: 0 only) is a ReplayError (Kafka's controller stops there);
    ``kraft.version`` is ignored (it lives in the Raft layer's KRaftVersionRecord, KAFKA-18979);
    ``metadata.version`` is set; another feature's level 0 removes it."""
    if r.name == KRAFT_VERSION:
        return img
    lo, hi = supported_features().get(r.name, (0, 0))
    if not lo <= r.feature_level <= hi:
        raise ReplayError(
            f"Tried to apply FeatureLevelRecord {r.name}={r.feature_level}, but this node only "
            f"supports versions {lo}-{hi}"
        )
    if r.feature_level == 0:
        return evolve(img, features=img.features.discard(r.name))
    return evolve(img, features=img.features.set(r.name, r.feature_level))


REPLAY = {"FeatureLevelRecord": replay_feature_level}


def feature_records(image: MetadataImage) -> list:
    """The FeatureLevelRecords that rebuild ``image.features``: ``metadata.version`` first, then
    the others by name (``FeaturesImage.write``)."""
    names = sorted(image.features, key=lambda n: (n != METADATA_VERSION, n))
    return [_R("FeatureLevelRecord")(name=n, feature_level=image.features[n]) for n in names]


SNAPSHOT = (feature_records,)
"""This manager's part of a snapshot (``kafka_rpc.controller.snapshot``), in order."""


# ============================================================================ bootstrap
@dataclass(frozen=True)
class BootstrapMetadata:
    """What a new cluster's first active controller writes (Kafka's ``BootstrapMetadata``):
    ``records`` (decoded: the FeatureLevelRecords, ``metadata.version`` first, then the SCRAM
    credentials of ``--add-scram``) and ``source`` (for the log)."""

    records: tuple = ()
    source: str = "the default bootstrap"
    levels: Mapping[str, int] = field(default_factory=dict)

    @classmethod
    def from_levels(
        cls, levels: Mapping[str, int], extra: Sequence[Any] = (), source: str = "format command"
    ) -> BootstrapMetadata:
        """``BootstrapMetadata.fromVersions``: ``FeatureLevelRecord metadata.version``, then one
        per other feature with level > 0 sorted by name, never ``kraft.version``; then
        ``extra`` (UserScramCredentialRecords)."""
        F = _R("FeatureLevelRecord")
        recs = [F(name=METADATA_VERSION, feature_level=levels[METADATA_VERSION])]
        for name in sorted(levels):
            if name not in (METADATA_VERSION, KRAFT_VERSION) and levels[name] > 0:
                recs.append(F(name=name, feature_level=levels[name]))
        return cls.from_records([*recs, *extra], source)

    @classmethod
    def from_records(cls, records: Sequence[Any], source: str) -> BootstrapMetadata:
        """``BootstrapMetadata.fromRecords``: FeatureError when no ``metadata.version`` is set,
        or when a level is one this code does not support (Kafka's controller would stop on
        replaying it)."""
        levels: dict[str, int] = {}
        for r in records:
            if type(r).__spec_name__ == "FeatureLevelRecord" and r.name != KRAFT_VERSION:
                levels[r.name] = r.feature_level
        if METADATA_VERSION not in levels:
            raise FeatureError(
                f"No FeatureLevelRecord for {METADATA_VERSION} was found in the bootstrap "
                f"metadata from {source}"
            )
        check_feature_levels(levels)
        return cls(tuple(records), source, levels)

    @classmethod
    def default(cls, kafka_compatible: bool = False) -> BootstrapMetadata:
        """The bootstrap of a metadata directory without ``bootstrap.checkpoint``
        (``BootstrapDirectory.readFromConfiguration``): Kafka's is ``metadata.version`` alone
        at its latest production level, which ``kafka_compatible`` gives (at ours); our default
        finalizes every proposal: :func:`default_feature_levels` at
        :data:`BOOTSTRAP_METADATA_VERSION`."""
        if kafka_compatible:
            return cls.from_levels({METADATA_VERSION: BOOTSTRAP_METADATA_VERSION},
                                   source="the default bootstrap")  # fmt: skip
        return cls.from_levels(default_feature_levels(), source="the default bootstrap")

    @property
    def metadata_version(self) -> int:
        return self.levels[METADATA_VERSION]

    def level(self, name: str) -> int:
        return self.levels.get(name, 0)


def activation_records(
    image: MetadataImage,
    bootstrap: BootstrapMetadata,
    transaction_start: int = -1,
    min_insync_replicas: int = 1,
) -> tuple[list, str]:
    """``ActivationRecordsGenerator.generate``: what a controller writes on becoming active,
    as ``(records, log message)``; the records go in one batch.

    - Empty log (``image`` has no ``metadata.version``): ``BeginTransactionRecord{Name=
      "Bootstrap records"}`` when the bootstrap MV supports transactions (>= 13, 3.6-IV1; with
      an open transaction left by a failed bootstrap, ``AbortTransactionRecord{Reason=
      "Controller failover"}`` first), the bootstrap records, ``ConfigRecord
      min.insync.replicas`` for BROKER "" when ``eligible.leader.replicas.version`` > 0, then
      ``EndTransactionRecord``; below MV 13 the same records without the markers.
    - Otherwise: ``AbortTransactionRecord{Reason="Controller failover"}`` when the log ends
      inside a transaction (``transaction_start`` = its BeginTransactionRecord's offset, -1 for
      none), else nothing.

    Raises FeatureError for an open transaction under an MV without transactions (Kafka: "Cannot
    continue")."""
    txn = transaction_start != -1
    if METADATA_VERSION in image.features:
        if not txn:
            return [], "Performing controller activation."
        if image.features[METADATA_VERSION] < 13:
            raise FeatureError(
                f"Detected in-progress transaction at offset {transaction_start}, but the "
                f"metadata.version does not support transactions. Cannot continue."
            )
        return (
            [_R("AbortTransactionRecord")(reason="Controller failover")],
            f"Performing controller activation. Aborting in-progress metadata transaction at "
            f"offset {transaction_start}.",
        )
    mv = bootstrap.metadata_version
    with_txn = mv >= 13
    recs: list = []
    if txn:
        if not with_txn:
            raise FeatureError(
                f"Detected partial bootstrap records transaction at {transaction_start}, but the "
                f"metadata.version {_MV_BY_LEVEL[mv]} does not support transactions. Cannot "
                "continue."
            )
        recs.append(_R("AbortTransactionRecord")(reason="Controller failover"))
        msg = (f"Aborting partial bootstrap records transaction at offset {transaction_start}. "
               f"Re-appending {len(bootstrap.records)} bootstrap record(s)")  # fmt: skip
    else:
        msg = (f"The metadata log appears to be empty. Appending {len(bootstrap.records)} "
               "bootstrap record(s)")  # fmt: skip
    if with_txn:
        recs.append(_R("BeginTransactionRecord")(name="Bootstrap records"))
        msg += " in metadata transaction"
    recs.extend(bootstrap.records)
    if bootstrap.level(ELR_VERSION) > 0:
        recs.append(
            _R("ConfigRecord")(
                resource_type=RESOURCE_BROKER, resource_name="", name="min.insync.replicas",
                value=str(min_insync_replicas),
            )
        )  # fmt: skip
    if with_txn:
        recs.append(_R("EndTransactionRecord")())
    msg += f" at metadata.version {_MV_BY_LEVEL[mv]} from bootstrap source '{bootstrap.source}'."
    return recs, "Performing controller activation. " + msg


# ============================================================================ UpdateFeatures
_UPGRADE, _SAFE_DOWNGRADE, _UNSAFE_DOWNGRADE = 1, 2, 3


def _our_feature_in_use(image: MetadataImage, name: str) -> str | None:
    """Why ``name`` (a feature of ours) cannot go to 0 now: the records it gates still describe
    state (they would vanish from snapshots); None when nothing needs them."""
    if name == CHUNKS_VERSION:
        n = sum(
            1
            for t in image.topics.values()
            for i, p in t.partitions.items()
            if p.start_offset >= 0 or t.chunks.get(i)
        )
        if n:
            return f"{n} partition(s) have chunks (ChunkRecords, PartitionRecord v3)"
    elif name == DISKLESS_VERSION:
        n = sum(len(t.batch_coordinators) for t in image.topics.values())
        if n:
            return f"{n} partition(s) have a Batch Coordinator mapping"
    return None


def _invalid(feature: str, lvl: int, message: str) -> tuple[int, str]:
    return (ErrorCode.INVALID_UPDATE_VERSION,
            f"Invalid update version {lvl} for feature {feature}. {message}")  # fmt: skip


def _reason_not_supported(
    name: str,
    lvl: int,
    node_id: int,
    image: MetadataImage,
    quorum_node_ids: Sequence[int],
) -> str | None:
    """``FeatureControlManager.reasonNotSupported``: this controller's range, every registered
    broker's, and (at MV >= 15, where controllers register, KIP-919) every other registered
    controller's (a feature it does not list counts as 0..0); then every other quorum node must
    have registered ("controller N has not registered, and may not support this feature")."""

    def why(what: str, rng: tuple[int, int]) -> str | None:
        lo, hi = rng
        if not lo <= lvl <= hi:
            if hi == 0:
                return f"{what} does not support this feature."
            return f"{what} only supports versions {lo if lo == hi else f'{lo}-{hi}'}"
        return None

    r = why(f"Local controller {node_id}", supported_features().get(name, (0, 0)))
    if r:
        return r
    for bid in sorted(image.brokers):
        ranges = {n: (lo, hi) for n, lo, hi in image.brokers[bid].features}
        r = why(f"Broker {bid}", ranges.get(name, (0, 0)))
        if r:
            return r
    if level(image, METADATA_VERSION) >= 15:
        for cid in sorted(image.controllers):
            if cid != node_id:
                ranges = {n: (lo, hi) for n, lo, hi in image.controllers[cid].features}
                r = why(f"Controller {cid}", ranges.get(name, (0, 0)))
                if r:
                    return r
        for cid in quorum_node_ids:
            if cid != node_id and cid not in image.controllers:
                return f"controller {cid} has not registered, and may not support this feature"
    return None


def update_features(
    image: MetadataImage,
    request: Any,
    version: int,
    node_id: int,
    quorum_node_ids: Sequence[int] = (),
    kraft_version: int = 0,
    upgrade_kraft_version: Callable[[int, bool], tuple[int, str | None]] | None = None,
) -> ControllerResult:
    """UpdateFeatures (57, v0-2) on the active controller: Kafka's ``QuorumController.
    updateFeatures`` -> ``FeatureControlManager.updateFeatures`` (a v0 request's AllowDowngrade
    is not read there either: every v0 update is an UPGRADE).

    Per update, in request order, the first failure fails them all (INVALID_UPDATE_VERSION,
    top-level message "The update failed for all features since the following feature had an
    error: Invalid update version L for feature F. <reason>", nothing written):

    - UpgradeType not 1-3: "The controller does not support the given upgrade type.";
    - level < 0; a level this controller, a registered broker or (at MV >= 15) another registered
      controller does not support, or another quorum node has not registered;
    - a lower level without SAFE/UNSAFE_DOWNGRADE, a higher one with them;
    - ``metadata.version``: an unknown level; a downgrade across a level that changed the
      metadata (``didMetadataChange``) is refused, also when unsafe ("Unsupported metadata.version
      downgrade from A to B. ...");
    - ``kraft.version`` (``kraft_version``: the Raft layer's current level, on the leader the
      pending one): the checks above (a level outside a registered broker's or controller's
      range, an unregistered voter, an UPGRADE to a lower level), then a SAFE/UNSAFE_DOWNGRADE
      to another level: "Can't downgrade the version of this feature." (there is no
      downgrade); an UPGRADE asks the Raft layer, ``upgrade_kraft_version(level,
      validate_only)`` -> ``(error code, message)`` (Kafka's ``KRaftVersionAccessor.
      upgradeKRaftVersion`` -> ``LeaderState.maybeAppendUpgradedKRaftVersion``, which appends
      the KRaftVersionRecord batch unless ``validate_only``; its refusal, e.g.
      INVALID_UPDATE_VERSION when a voter's range excludes the level, is this request's error
      with its message) and writes a NoOpRecord, so the answer waits for a commit after the
      upgrade. Without ``upgrade_kraft_version`` (no Raft layer) only the current level is
      accepted;
    - another feature: its dependencies (``Feature.validateVersion`` against the proposed
      levels; an unknown name at level 0: "Feature F not found.");
    - a feature of ours going to 0 while records it gates describe state (ours, as Kafka refuses
      a lossy MV downgrade).

    Success: one FeatureLevelRecord v0 per update (level 0 removes the feature) in one batch,
    none with ValidateOnly (v1+); ErrorCode 0 and, for v0-1, one result per update (ErrorCode 0,
    ErrorMessage "NONE", as Kafka's ``Errors.NONE.message()``)."""
    mod = codec.module("UpdateFeaturesResponse")
    Resp = mod.UpdateFeaturesResponse
    validate_only = bool(request.validate_only) if version >= 1 else False
    current_mv = level(image, METADATA_VERSION)
    proposed = dict(image.features)
    proposed[METADATA_VERSION] = current_mv
    for u in request.feature_updates:
        proposed[u.feature] = u.max_version_level
    records: list = []
    error: tuple[int, str] | None = None
    for u in request.feature_updates:
        name, new = u.feature, u.max_version_level
        kind = _UPGRADE if version == 0 else u.upgrade_type
        if kind not in (_UPGRADE, _SAFE_DOWNGRADE, _UNSAFE_DOWNGRADE):
            error = _invalid(name, new, "The controller does not support the given upgrade type.")
            break
        if name == METADATA_VERSION:
            cur = current_mv
        elif name == KRAFT_VERSION:
            cur = kraft_version
        else:
            cur = level(image, name)
        if new < 0:
            error = _invalid(name, new, "A feature version cannot be less than 0.")
            break
        reason = _reason_not_supported(name, new, node_id, image, quorum_node_ids)
        if reason:
            error = _invalid(name, new, reason)
            break
        if new < cur and kind == _UPGRADE:
            error = _invalid(
                name, new, "Can't downgrade the version of this feature without setting the "
                "upgrade type to either safe or unsafe downgrade.")  # fmt: skip
            break
        if new > cur and kind != _UPGRADE:
            error = _invalid(name, new, "Can't downgrade to a newer version.")
            break
        if name == METADATA_VERSION:
            if new not in _MV_BY_LEVEL:
                error = (
                    ErrorCode.INVALID_UPDATE_VERSION,
                    f"Invalid metadata.version {new}. Valid versions are from "
                    f"{MINIMUM_METADATA_VERSION} to {METADATA_VERSIONS[-1].level}.",
                )
                break
            if new < cur and _metadata_changed(cur, new):
                why = ("Unsafe metadata downgrade is not supported in this version."
                       if kind == _UNSAFE_DOWNGRADE else
                       "Refusing to perform the requested downgrade because it might delete "
                       "metadata information.")  # fmt: skip
                error = (
                    ErrorCode.INVALID_UPDATE_VERSION,
                    f"Unsupported metadata.version downgrade from {cur} to {new}. {why}",
                )
                break
            log.warning("%s metadata.version from %s to %s.",
                        "Downgrading" if new < cur else "Upgrading", cur, new)  # fmt: skip
        elif name == KRAFT_VERSION:
            if kind != _UPGRADE:
                if new != cur:
                    error = _invalid(name, new, "Can't downgrade the version of this feature.")
                    break
                continue  # unchanged
            if upgrade_kraft_version is not None:
                code, message = upgrade_kraft_version(new, validate_only)
                if code:
                    error = (code, message or ErrorCode.for_code(code).name)
                    break
            elif new != cur:
                error = _invalid(name, new, "This controller has no Raft layer to upgrade.")
                break
            # an offset to wait on, so the answer follows the upgrade's commit
            records.append(_R("NoOpRecord")())
            continue
        else:
            if name not in FEATURES:
                error = _invalid(name, new, f"Feature {name} not found.")
                break
            try:
                _validate_version(name, new, proposed)
            except FeatureError as e:
                error = _invalid(name, new, str(e))
                break
            if new == 0 and FEATURES[name].ours:
                in_use = _our_feature_in_use(image, name)
                if in_use:
                    error = _invalid(
                        name, new, "Refusing to perform the requested downgrade because it "
                        f"would delete metadata information: {in_use}.")  # fmt: skip
                    break
        records.append(_R("FeatureLevelRecord")(name=name, feature_level=new))
    if error is not None:
        log.warning("UpdateFeatures: %s", error[1])
        return ControllerResult([], Resp(
            error_code=error[0],
            error_message="The update failed for all features since the following feature had "
                          f"an error: {error[1]}",
        ))  # fmt: skip
    results = ()
    if version <= 1:
        results = tuple(
            mod.UpdatableFeatureResult(feature=u.feature, error_code=0, error_message="NONE")
            for u in request.feature_updates
        )
    if validate_only:
        records = []
    return ControllerResult(records, Resp(error_code=0, error_message=None, results=results))
