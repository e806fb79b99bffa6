"""Features as Kafka has them (kafka_rpc.controller.features): the metadata.version table and its
parsing, the levels a new cluster gets, record versions by finalized level, the registration
check (ClusterControlManager.processRegistrationFeature), UpdateFeatures
(FeatureControlManager.updateFeatures) and the commands our features gate."""

from __future__ import annotations

import uuid

import pytest

from kafka_rpc.controller import chunks, coordinator_mapping, features, snapshot
from kafka_rpc.controller.features import (
    CHUNKS_VERSION,
    DISKLESS_VERSION,
    METADATA_VERSION,
    FeatureError,
    default_feature_levels,
    parse_release_version,
    record_version,
    registration_error,
    update_features,
)
from kafka_rpc.controller.image import evolve
from kafka_rpc.protocol import codec
from kafka_rpc.protocol.errors import ErrorCode
from tests.controller.harness import BR, Cluster, bootstrapped, broker_features, topic

R = codec.message_class
UF = codec.module("UpdateFeaturesRequest")


# ============================================================================ metadata.version
@pytest.mark.parametrize(
    ("text", "level"),
    [("3.3-IV3", 7), ("3.7", 19), ("3.8.1", 20), ("3.9", 21), ("4.0", 25), ("4.0-IV1", 23),
     ("4.2", 29), ("4.2-IV1", 29), ("4.1-IV0", 26)],
)  # fmt: skip
def test_release_versions_parse_as_kafka(text, level):
    """MetadataVersion.fromVersionString: a release names its highest internal version."""
    assert parse_release_version(text).level == level


@pytest.mark.parametrize("text", ["4.3", "4.3-IV0", "4.4-IV2", "3.2", "nope", "4"])
def test_release_versions_we_do_not_support_are_refused_with_kafkas_message(text):
    with pytest.raises(ValueError) as info:
        parse_release_version(text)
    msg = str(info.value)
    assert msg.startswith(f"Unknown metadata.version '{text}'. Supported metadata.version are: ")
    assert msg.endswith(
        "3.3-IV3, 3.4-IV0, 3.5-IV0, 3.5-IV1, 3.5-IV2, 3.6-IV0, 3.6-IV1, 3.6-IV2, 3.7-IV0, "
        "3.7-IV1, 3.7-IV2, 3.7-IV3, 3.7-IV4, 3.8-IV0, 3.9-IV0, 4.0-IV0, 4.0-IV1, 4.0-IV2, "
        "4.0-IV3, 4.1-IV0, 4.1-IV1, 4.2-IV0, 4.2-IV1"
    )


def test_the_default_levels_of_a_new_cluster():
    """Kafka's defaults for 4.2-IV1 (Feature.defaultLevel), ELR capped at 0 (not implemented),
    kraft.version 0 (static voters), our features at their max, or 0 Kafka-compatible."""
    d = default_feature_levels()
    assert d == {
        "metadata.version": 29, "kraft.version": 0, "transaction.version": 2,
        "group.version": 1, "eligible.leader.replicas.version": 0, "share.version": 1,
        "streams.version": 1, DISKLESS_VERSION: 1, CHUNKS_VERSION: 1,
    }  # fmt: skip
    k = default_feature_levels(kafka_compatible=True)
    assert k[DISKLESS_VERSION] == k[CHUNKS_VERSION] == 0 and k["share.version"] == 1
    old = default_feature_levels(parse_release_version("3.9").level)  # before 4.0's defaults
    assert (old["transaction.version"], old["group.version"], old["share.version"]) == (0, 0, 0)
    assert default_feature_levels(25, {"group.version": 0})["group.version"] == 0
    # the bootstrap records: metadata.version first, the others by name, none at 0, no kraft
    boot = features.BootstrapMetadata.from_levels(d)
    assert [(r.name, r.feature_level) for r in boot.records] == [
        ("metadata.version", 29), ("group.version", 1), (CHUNKS_VERSION, 1),
        (DISKLESS_VERSION, 1), ("share.version", 1), ("streams.version", 1),
        ("transaction.version", 2),
    ]  # fmt: skip


@pytest.mark.parametrize(
    ("overrides", "fragment"),
    [
        ({"metadata.version": 25}, "Use --release-version instead of --feature metadata.version"),
        ({"foo.version": 1}, "Unsupported feature: foo.version. Supported features are: "
                             "eligible.leader.replicas.version, group.version"),
        ({"eligible.leader.replicas.version": 1}, "Apache Kafka has it; kafka-rpc does not"),
        ({"group.version": 9}, "No feature:group.version with feature level 9"),
        ({"kraft.version": 1}, "Cannot set kraft.version to 1 unless controller.quorum.voters "
         "is empty and one of the flags --standalone, --initial-controllers, or "
         "--no-initial-controllers is used. For dynamic controllers support, try using one of "
         "--standalone, --initial-controllers, or --no-initial-controllers and removing "
         "controller.quorum.voters."),
        ({CHUNKS_VERSION: 2}, f"kafka-rpc supports {CHUNKS_VERSION} 0 to 1"),
    ],
)  # fmt: skip
def test_format_time_feature_errors(overrides, fragment):
    with pytest.raises(FeatureError, match=fragment.replace(".", r"\.")):
        default_feature_levels(29, overrides)


def test_kraft_version_at_format_time_as_kafkas_formatter():
    """``Formatter.effectiveKRaftFeatureLevel``: not by release version but by the quorum's
    kind: 1 for a dynamic quorum, 0 for static voters; the other level given is refused."""
    assert default_feature_levels(29)["kraft.version"] == 0
    assert default_feature_levels(29, dynamic_quorum=True)["kraft.version"] == 1
    # an old release version does not matter (FormatterTest...WithOlderMetadataVersion)
    assert default_feature_levels(20, dynamic_quorum=True)["kraft.version"] == 1
    assert default_feature_levels(29, {"kraft.version": 1}, dynamic_quorum=True)[
        "kraft.version"] == 1  # fmt: skip
    assert default_feature_levels(29, {"kraft.version": 0})["kraft.version"] == 0
    with pytest.raises(FeatureError) as e:
        default_feature_levels(29, {"kraft.version": 0}, dynamic_quorum=True)
    assert str(e.value) == (
        "Cannot set kraft.version to 0 if controller.quorum.voters is empty and one of the flags "
        "--standalone, --initial-controllers, or --no-initial-controllers is used. For dynamic "
        "controllers support, try removing the --feature flag for kraft.version."
    )
    # never a bootstrap record
    boot = features.BootstrapMetadata.from_levels(default_feature_levels(dynamic_quorum=True))
    assert "kraft.version" not in {r.name for r in boot.records}


def test_dependencies_as_feature_validate_version():
    with pytest.raises(FeatureError, match="could not be set to 1 because it depends on "
                                           "metadata.version level 23"):  # fmt: skip
        features._validate_version("eligible.leader.replicas.version", 1, {METADATA_VERSION: 21})
    features._validate_version("eligible.leader.replicas.version", 1, {METADATA_VERSION: 23})


# ============================================================================ record versions
def _rec(name, **kw):
    return R(name)(**kw)


@pytest.mark.parametrize(
    ("mv", "register", "partition"), [(7, 1, 0), (8, 2, 0), (16, 2, 0), (17, 3, 1), (22, 3, 1),
                                      (23, 3, 2), (29, 3, 2)],
)  # fmt: skip
def test_record_versions_follow_metadata_version(mv, register, partition):
    """MetadataVersion.registerBrokerRecordVersion / partitionRecordVersion /
    partitionChangeRecordVersion, with our chunks feature off."""
    img = bootstrapped({METADATA_VERSION: mv})
    assert record_version(_rec("RegisterBrokerRecord"), img) == register
    assert record_version(_rec("PartitionRecord"), img) == partition
    assert record_version(_rec("PartitionChangeRecord"), img) == partition
    assert record_version(_rec("TopicRecord"), img) == 0


def test_chunks_put_partition_records_at_v3_and_gate_our_records():
    on = bootstrapped({METADATA_VERSION: 29, CHUNKS_VERSION: 1, DISKLESS_VERSION: 1})
    off = bootstrapped({METADATA_VERSION: 29})
    assert record_version(_rec("PartitionRecord"), on) == 3
    assert record_version(_rec("PartitionChangeRecord"), on) == 3
    for name in ("ChunkRecord", "ChunkChangeRecord", "TopicPartitionToBatchCoordinatorMapping"):
        assert record_version(_rec(name), on) == 0
        with pytest.raises(FeatureError, match="kafka_rpc"):
            record_version(_rec(name), off)


def test_broker_registration_change_versions_by_content():
    """Kafka's explicit versions: v0 fence/unfence, v1 InControlledShutdown, v2 LogDirs."""
    img = bootstrapped({METADATA_VERSION: 29})
    brc = R("BrokerRegistrationChangeRecord")
    assert record_version(brc(broker_id=1, broker_epoch=5, fenced=1), img) == 0
    assert record_version(brc(broker_id=1, broker_epoch=5, in_controlled_shutdown=1), img) == 1
    assert record_version(brc(broker_id=1, broker_epoch=5, log_dirs=(uuid.uuid4(),)), img) == 2


def test_records_need_their_metadata_version():
    with pytest.raises(FeatureError, match="Unknown metadata version"):
        record_version(_rec("RegisterBrokerRecord"), bootstrapped({}))
    with pytest.raises(FeatureError, match=r"3\.5-IV2"):
        record_version(_rec("UserScramCredentialRecord"), bootstrapped({METADATA_VERSION: 10}))
    with pytest.raises(FeatureError, match=r"3\.6-IV1"):
        record_version(_rec("BeginTransactionRecord"), bootstrapped({METADATA_VERSION: 12}))


# ============================================================================ registration
def test_registration_feature_checks_as_kafka():
    img = bootstrapped()
    assert registration_error(img, broker_features()) is None
    # a range that does not hold the finalized level
    code, msg = registration_error(img, broker_features(group__version=(0, 0)))
    assert code == ErrorCode.UNSUPPORTED_VERSION
    assert msg == (
        "Unable to register because the broker does not support finalized version 1 of "
        "group.version. The broker wants a version between 0 and 0, inclusive."
    )
    # metadata.version must be listed: INVALID_REGISTRATION
    code, msg = registration_error(img, broker_features(metadata__version=None))
    assert (code, msg) == (ErrorCode.INVALID_REGISTRATION,
                           "Request features do not contain 'metadata.version'")  # fmt: skip
    # a finalized feature the broker does not list is checked as 0..0: our chunks feature
    code, msg = registration_error(img, broker_features(kafka_rpc__chunks__version=None))
    assert code == ErrorCode.UNSUPPORTED_VERSION and "of kafka_rpc.chunks.version" in msg
    # a feature the controller does not know counts as level 0
    extra = (*broker_features(), BR.Feature(name="x.version", min_supported_version=1,
                                            max_supported_version=2))  # fmt: skip
    assert "finalized version 0 of x.version" in registration_error(img, extra)[1]
    # kraft.version comes from the Raft layer: our range 0-1 takes level 1, a broker's 0-0 not
    assert registration_error(img, broker_features(), kraft_version=1) is None
    assert registration_error(img, broker_features(kraft__version=(0, 0)), kraft_version=1)[
        1].endswith("version 1 of kraft.version. The broker wants a version between 0 and 0, "
                    "inclusive.")  # fmt: skip


def _kafka_broker_features(mv_max=29, **extra):
    """What a Kafka 4.4 broker lists (BrokerFeatures.defaultSupportedFeatures), its MV capped."""
    ranges = {"metadata.version": (7, mv_max), "kraft.version": (0, 1),
              "transaction.version": (0, 2), "group.version": (0, 1),
              "eligible.leader.replicas.version": (0, 1), "share.version": (0, 2),
              "streams.version": (0, 1), **extra}  # fmt: skip
    return tuple(BR.Feature(name=n, min_supported_version=lo, max_supported_version=hi)
                 for n, (lo, hi) in ranges.items())  # fmt: skip


def test_a_kafka_broker_is_refused_with_our_features_and_admitted_kafka_compatible():
    """The gate of docs/features.md: records a Kafka node cannot parse are written only
    while our features are finalized, and then a Kafka broker cannot register."""
    code, msg = registration_error(bootstrapped(), _kafka_broker_features())
    assert code == ErrorCode.UNSUPPORTED_VERSION and "kafka_rpc." in msg
    assert registration_error(bootstrapped(kafka_compatible=True), _kafka_broker_features()) is None
    # a 4.0 broker (MV up to 25, no share/streams) needs a cluster formatted at 4.0 or below
    old = tuple(f for f in _kafka_broker_features(25) if f.name not in
                ("share.version", "streams.version"))  # fmt: skip
    levels = default_feature_levels(25, kafka_compatible=True)
    assert registration_error(bootstrapped(levels), old) is None
    assert "metadata.version" in registration_error(bootstrapped(kafka_compatible=True), old)[1]


def test_a_refused_registration_writes_nothing():
    c = Cluster()
    before = len(c.log)
    res = c.register(1, features=broker_features(group__version=(0, 0)))
    assert res.response.error_code == ErrorCode.UNSUPPORTED_VERSION and len(c.log) == before
    assert 1 not in c.image.brokers


# ============================================================================ UpdateFeatures
def update_features_request(*updates, validate_only=False):
    """UpdateFeatures with one FeatureUpdateKey per ``(name, level, upgrade type)``."""
    return R("UpdateFeaturesRequest")(
        feature_updates=tuple(
            UF.FeatureUpdateKey(feature=n, max_version_level=lv, upgrade_type=t)
            for n, lv, t in updates
        ),
        validate_only=validate_only,
    )


def _run(c, request, version=2, voters=(1,)):
    return c.run(lambda img, r, ctx: update_features(img, r, version, 1, voters), request)


def test_update_features_upgrade_and_downgrade():
    c = Cluster(levels=default_feature_levels(25))
    c.live(1)
    req = update_features_request(("group.version", 0, 2), ("metadata.version", 29, 1))
    res = _run(c, req, version=1)
    assert res.response.error_code == 0 and res.response.error_message is None
    assert [(r.feature, r.error_code, r.error_message) for r in res.response.results] == [
        ("group.version", 0, "NONE"), ("metadata.version", 0, "NONE")]
    assert [(type(r).__spec_name__, r.name, r.feature_level) for r in res.records] == [
        ("FeatureLevelRecord", "group.version", 0), ("FeatureLevelRecord", "metadata.version", 29)]
    assert "group.version" not in c.image.features and c.image.features[METADATA_VERSION] == 29
    # v2: no per-feature results; validate-only writes nothing
    res = _run(c, update_features_request(("group.version", 1, 1), validate_only=True))
    assert res.response.error_code == 0 and res.response.results == () and res.records == []
    # 29 -> 23 changes no metadata (24-29 did not), 23 -> 22 would (4.0-IV1 added ELR records)
    assert _run(c, update_features_request(("metadata.version", 23, 2))).response.error_code == 0
    res = _run(c, update_features_request(("metadata.version", 22, 2)))
    assert res.response.error_code == ErrorCode.INVALID_UPDATE_VERSION
    assert res.response.error_message == (
        "The update failed for all features since the following feature had an error: "
        "Unsupported metadata.version downgrade from 23 to 22. Refusing to perform the "
        "requested downgrade because it might delete metadata information.")
    res = _run(c, update_features_request(("metadata.version", 22, 3)))
    assert res.response.error_message.endswith(
        "Unsafe metadata downgrade is not supported in this version.")


@pytest.mark.parametrize(
    ("update", "voters", "message"),
    [
        (("group.version", 0, 1), (1,), "Invalid update version 0 for feature group.version. "
         "Can't downgrade the version of this feature without setting the upgrade type to either "
         "safe or unsafe downgrade."),
        (("streams.version", 1, 2), (1,), "Can't downgrade to a newer version."),
        (("group.version", 1, 7), (1,), "The controller does not support the given upgrade type."),
        (("group.version", -1, 2), (1,), "A feature version cannot be less than 0."),
        (("group.version", 2, 1), (1,), "Local controller 1 only supports versions 0-1"),
        (("eligible.leader.replicas.version", 1, 1), (1,),
         "Local controller 1 does not support this feature."),
        (("share.version", 2, 1), (1,), "Broker 2 only supports versions 0-1"),
        (("metadata.version", 30, 1), (1,), "Local controller 1 only supports versions 7-29"),
        (("x.version", 0, 2), (1,), "Invalid update version 0 for feature x.version. Feature "
         "x.version not found."),
        (("streams.version", 1, 1), (1, 2, 3), "controller 2 has not registered, and may not "
         "support this feature"),
    ],
)  # fmt: skip
def test_update_features_refusals(update, voters, message):
    c = Cluster(levels=default_feature_levels(25))
    c.live(1)
    c.register(2, features=broker_features(share__version=(0, 1)))
    before = (len(c.log), c.image.features)
    res = _run(c, update_features_request(update), voters=voters)
    assert res.response.error_code == ErrorCode.INVALID_UPDATE_VERSION, res.response
    assert message in res.response.error_message and res.records == []
    assert res.response.results == ()
    assert (len(c.log), c.image.features) == before


def test_update_features_checks_registered_controllers_as_kafka():
    """FeatureControlManager.reasonNotSupported at MV >= 3.7-IV0: every other registered
    controller's range (a feature it does not list counts as 0..0), then every quorum node must
    have registered."""
    c = Cluster(levels=default_feature_levels(25))
    c.live(1)
    RC = codec.module("RegisterControllerRecord")

    def controller(cid, *feats):
        c.apply([R("RegisterControllerRecord")(
            controller_id=cid, incarnation_id=uuid.UUID(int=cid), end_points=(),
            features=tuple(RC.ControllerFeature(name=n, min_supported_version=lo,
                                                max_supported_version=hi)
                           for n, lo, hi in feats))])  # fmt: skip

    controller(2, ("metadata.version", 7, 29), ("streams.version", 0, 1))
    res = _run(c, update_features_request(("streams.version", 0, 2)), voters=(1, 2, 3))
    assert res.response.error_message.endswith(
        "controller 3 has not registered, and may not support this feature")
    controller(3, ("metadata.version", 7, 29))  # a controller without our feature's range
    res = _run(c, update_features_request((CHUNKS_VERSION, 1, 1)), voters=(1, 2, 3))
    assert res.response.error_code == ErrorCode.INVALID_UPDATE_VERSION and res.records == []
    assert res.response.error_message.endswith(
        f"Invalid update version 1 for feature {CHUNKS_VERSION}. "
        "Controller 2 does not support this feature.")
    res = _run(c, update_features_request(("streams.version", 0, 2)), voters=(1, 2, 3))
    assert res.response.error_code == 0, res.response


def test_v0_allow_downgrade_is_an_upgrade_as_kafkas_controller_reads_it():
    c = Cluster()
    req = R("UpdateFeaturesRequest")(feature_updates=(
        UF.FeatureUpdateKey(feature="group.version", max_version_level=0, allow_downgrade=True),))
    res = _run(c, req, version=0)
    assert res.response.error_code == ErrorCode.INVALID_UPDATE_VERSION
    assert "without setting the upgrade type" in res.response.error_message


def test_kraft_version_unchanged_writes_a_noop_as_kafka():
    c = Cluster()
    res = _run(c, update_features_request(("kraft.version", 0, 1)))
    assert res.response.error_code == 0
    assert [type(r).__spec_name__ for r in res.records] == ["NoOpRecord"]


class _Raft:
    """The Raft layer's kraft.version upgrade as the controller sees it (the
    ``upgrade_kraft_version(level, validate_only)`` collaborator ``update_features`` takes, in
    Kafka ``KRaftVersionAccessor.upgradeKRaftVersion``): answers ``answer`` and records calls.
    A stand-in until the Raft core's ``upgrade_kraft_version`` exists (see the report)."""

    def __init__(self, answer=(0, None)):
        self.answer = answer
        self.calls: list[tuple[int, bool]] = []

    def __call__(self, level, validate_only):
        self.calls.append((level, validate_only))
        return self.answer


def _run_kraft(c, request, raft, current=0, voters=(1,), version=2):
    return c.run(lambda img, r, ctx: update_features(img, r, version, 1, voters, current, raft),
                 request)  # fmt: skip


def test_kraft_version_upgrade_asks_the_raft_layer_as_kafkas_feature_control_manager():
    """``FeatureControlManager.updateFeature`` for kraft.version: the support checks first,
    then an UPGRADE asks the Raft layer (``upgradeKRaftVersion(epoch, level, validateOnly)``)
    and writes a NoOpRecord to wait on; its refusal is the answer."""
    c = Cluster(levels=default_feature_levels(25))
    c.live(1)
    raft = _Raft()
    res = _run_kraft(c, update_features_request(("kraft.version", 1, 1)), raft)
    assert res.response.error_code == 0 and raft.calls == [(1, False)]
    assert [type(r).__spec_name__ for r in res.records] == ["NoOpRecord"]
    # validate-only: asked as such, nothing written
    raft = _Raft()
    res = _run_kraft(c, update_features_request(("kraft.version", 1, 1), validate_only=True),
                     raft)  # fmt: skip
    assert (res.response.error_code, res.records, raft.calls) == (0, [], [(1, True)])
    # the Raft layer refuses (a voter without level 1 in its range): its code and message
    why = ("Invalid update version 1 for feature kraft.version. Can't upgrade to the new "
           "kraft version because not all of the voters support it.")  # fmt: skip
    raft = _Raft((ErrorCode.INVALID_UPDATE_VERSION, why))
    res = _run_kraft(c, update_features_request(("kraft.version", 1, 1)), raft)
    assert res.response.error_code == ErrorCode.INVALID_UPDATE_VERSION and res.records == []
    assert res.response.error_message == (
        "The update failed for all features since the following feature had an error: " + why
    )
    raft = _Raft((ErrorCode.NOT_LEADER_OR_FOLLOWER, "stale epoch"))
    res = _run_kraft(c, update_features_request(("kraft.version", 1, 1)), raft)
    assert res.response.error_code == ErrorCode.NOT_LEADER_OR_FOLLOWER
    # the same level again: still the Raft layer's no-op and a NoOpRecord, as Kafka
    raft = _Raft()
    res = _run_kraft(c, update_features_request(("kraft.version", 1, 1)), raft, current=1)
    assert res.response.error_code == 0 and raft.calls == [(1, False)] and len(res.records) == 1


@pytest.mark.parametrize(
    ("setup", "voters", "message"),
    [
        ("broker", (1,), "Broker 2 does not support this feature."),
        ("controller", (1, 2), "Controller 2 does not support this feature."),
        ("none", (1, 3), "controller 3 has not registered, and may not support this feature"),
    ],
)  # fmt: skip
def test_kraft_version_upgrade_needs_every_broker_controller_and_voter(setup, voters, message):
    """``reasonNotSupported``: a registered broker or (MV >= 3.7-IV0) controller whose range
    lacks level 1, or a static voter that has not registered: INVALID_UPDATE_VERSION and the
    Raft layer is not asked."""
    c = Cluster(levels=default_feature_levels(25))
    c.live(1)
    if setup == "broker":
        c.register(2, features=broker_features(kraft__version=(0, 0)))
    elif setup == "controller":
        RC = codec.module("RegisterControllerRecord")
        c.apply([R("RegisterControllerRecord")(
            controller_id=2, incarnation_id=uuid.UUID(int=2), end_points=(),
            features=(RC.ControllerFeature(name="metadata.version", min_supported_version=7,
                                           max_supported_version=29),))])  # fmt: skip
    raft = _Raft()
    res = _run_kraft(c, update_features_request(("kraft.version", 1, 1)), raft, voters=voters)
    assert res.response.error_code == ErrorCode.INVALID_UPDATE_VERSION, res.response
    assert res.response.error_message.endswith(
        f"Invalid update version 1 for feature kraft.version. {message}"
    )
    assert raft.calls == [] and res.records == []


def test_kraft_version_has_no_downgrade():
    c = Cluster(levels=default_feature_levels(25))
    c.live(1)
    raft = _Raft()
    res = _run_kraft(c, update_features_request(("kraft.version", 0, 1)), raft, current=1)
    assert res.response.error_message.endswith(
        "Can't downgrade the version of this feature without setting the upgrade type to "
        "either safe or unsafe downgrade."
    )
    for kind in (2, 3):  # SAFE_DOWNGRADE, UNSAFE_DOWNGRADE
        res = _run_kraft(c, update_features_request(("kraft.version", 0, kind)), raft, current=1)
        assert res.response.error_code == ErrorCode.INVALID_UPDATE_VERSION
        assert res.response.error_message.endswith(
            "Invalid update version 0 for feature kraft.version. Can't downgrade the version of "
            "this feature."
        )
        # to the level it has: nothing to do, nothing written
        res = _run_kraft(c, update_features_request(("kraft.version", 1, kind)), raft, current=1)
        assert res.response.error_code == 0 and res.records == []
    assert raft.calls == []
    # without a Raft layer only the current level is accepted
    res = _run(c, update_features_request(("kraft.version", 1, 1)))
    assert res.response.error_code == ErrorCode.INVALID_UPDATE_VERSION


def test_our_features_cannot_be_dropped_while_their_records_describe_state():
    c = Cluster()
    c.live(1)
    c.create(topic("t"))
    ok = _run(c, update_features_request((CHUNKS_VERSION, 0, 2), validate_only=True))
    assert ok.response.error_code == 0  # no chunk yet
    t = c.image.topic_by_name("t")
    CC = codec.module("CreateChunksRequest")
    req = R("CreateChunksRequest")(topic_partitions=(CC.CreateChunksTopicPartition(
        topic_name="t", partition_id=0, broker_ids=(1,), start_offset=10, prev_stop_offset=9,
        start_timestamp=-1),))  # fmt: skip
    assert c.run(chunks.create_chunks, req).response.results[0].error_code == 0
    res = _run(c, update_features_request((CHUNKS_VERSION, 0, 2)))
    assert res.response.error_code == ErrorCode.INVALID_UPDATE_VERSION
    assert "1 partition(s) have chunks" in res.response.error_message
    assert t.topic_id in c.image.topics


# ============================================================================ gated commands
def test_kafka_compatible_cluster_refuses_chunks_and_mappings_and_writes_only_kafka_records():
    c = Cluster(kafka_compatible=True)
    c.live(1)
    c.create(topic("t"))
    CC = codec.module("CreateChunksRequest")
    req = R("CreateChunksRequest")(topic_partitions=(CC.CreateChunksTopicPartition(
        topic_name="t", partition_id=0, broker_ids=(1,), start_offset=10, prev_stop_offset=9,
        start_timestamp=-1),))  # fmt: skip
    res = c.run(chunks.create_chunks, req)
    r = res.response.results[0]
    assert r.error_code == ErrorCode.UNSUPPORTED_VERSION and CHUNKS_VERSION in r.error_message
    assert res.records == []
    AC = codec.module("AlterChunkAssignmentsRequest")
    res = c.run(chunks.alter_chunk_assignments, R("AlterChunkAssignmentsRequest")(chunks=(
        AC.AlterChunkAssignment(topic_name="t", partition_id=0, start_offset=0,
                                broker_ids=(1,)),)))  # fmt: skip
    assert res.response.results[0].error_code == ErrorCode.UNSUPPORTED_VERSION
    A = codec.module("AssignPartitionToBatchCoordinatorRequest")
    tid = c.image.topic_by_name("t").topic_id
    res = c.run(coordinator_mapping.assign_partition_to_batch_coordinator,
                R("AssignPartitionToBatchCoordinatorRequest")(topics=(A.AssignTopicToBatchCoordinator(
                    topic_id=tid, partitions=(A.AssignTopicPartitionToBatchCoordinator(
                        partition_index=0, batch_coordinator_partition_index=0),)),)))  # fmt: skip
    assert res.records == []
    assert res.response.responses[0].partitions[0].error_code == ErrorCode.UNSUPPORTED_VERSION
    # every record in the log and in a snapshot is a type and version Kafka 4.2 parses
    for data in c.log + snapshot.image_records(c.image):
        rec, version = codec.decode_record(data)
        name = type(rec).__spec_name__
        assert name not in ("ChunkRecord", "ChunkChangeRecord",
                            "TopicPartitionToBatchCoordinatorMapping"), name  # fmt: skip
        assert version <= {"PartitionRecord": 2, "PartitionChangeRecord": 2,
                           "RegisterBrokerRecord": 3}.get(name, 0), (name, version)  # fmt: skip


def test_snapshots_leave_our_records_out_when_our_features_are_off():
    c = Cluster()
    c.live(1)
    c.create(topic("t"))
    tid = c.image.topic_by_name("t").topic_id
    A = codec.module("AssignPartitionToBatchCoordinatorRequest")
    c.run(coordinator_mapping.assign_partition_to_batch_coordinator,
          R("AssignPartitionToBatchCoordinatorRequest")(topics=(A.AssignTopicToBatchCoordinator(
              topic_id=tid, partitions=(A.AssignTopicPartitionToBatchCoordinator(
                  partition_index=0, batch_coordinator_partition_index=0),)),)))  # fmt: skip
    names = [type(codec.decode_record(d)[0]).__spec_name__ for d in snapshot.image_records(c.image)]
    assert "TopicPartitionToBatchCoordinatorMapping" in names
    assert names[0] == "FeatureLevelRecord" and codec.decode_record(
        snapshot.image_records(c.image)[0])[0].name == METADATA_VERSION
    off = evolve(c.image, features=c.image.features.discard(DISKLESS_VERSION))
    names = [type(codec.decode_record(d)[0]).__spec_name__ for d in snapshot.image_records(off)]
    assert "TopicPartitionToBatchCoordinatorMapping" not in names
