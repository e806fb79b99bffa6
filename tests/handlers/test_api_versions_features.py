"""ApiVersions' feature fields from a hand-built controller view: SupportedFeatures lists
``kraft.version`` 0-1 from v4 and drops every min-0 feature below it (KAFKA-17492,
``ApiVersionsResponse.maybeFilterSupportedFeatureKeys``); FinalizedFeatures carries
``kraft.version`` only when the Raft layer's level is >= 1; a change of that level alone (same
committed image) is answered fresh, not from the cache."""

from __future__ import annotations

from types import SimpleNamespace

from pyrsistent import pmap

from kafka_rpc.controller.image import EMPTY, evolve
from kafka_rpc.handlers.api_versions import api_versions
from kafka_rpc.protocol import codec

AV = codec.message_class("ApiVersionsRequest")(
    client_software_name="t", client_software_version="1"
)


def _ctx(ctl, listener, version):
    return SimpleNamespace(api_version=version, listener=listener,
                           services=SimpleNamespace(controller=ctl))  # fmt: skip


def _listener(role="broker"):
    return SimpleNamespace(role=role, api_versions=[(18, 0, 4)], api_versions_bodies={},
                           api_versions_image=None)  # fmt: skip


def _answer(ctl, listener, version):
    body = api_versions(_ctx(ctl, listener, version), AV)
    return codec.decode("ApiVersionsResponse", version, body)


def test_kraft_version_in_supported_and_finalized_features():
    image = evolve(EMPTY, features=pmap({"metadata.version": 29, "group.version": 1}))
    ctl = SimpleNamespace(image=image, kraft_version=0, features_epoch=5)
    for role in ("broker", "controller"):
        listener = _listener(role)
        r4 = _answer(ctl, listener, 4)
        supported = {f.name: (f.min_version, f.max_version) for f in r4.supported_features}
        assert supported["kraft.version"] == (0, 1)
        assert supported["metadata.version"][0] == 7
        r3 = _answer(ctl, listener, 3)
        assert [f.name for f in r3.supported_features] == ["metadata.version"]
        finalized = {f.name: f.max_version_level for f in r4.finalized_features}
        assert finalized == {"metadata.version": 29, "group.version": 1}  # level 0: absent
        # the Raft layer moves to kraft.version 1 (the image is the same object)
        ctl.kraft_version = 1
        for v in (3, 4):
            r = _answer(ctl, listener, v)
            levels = {f.name: (f.min_version_level, f.max_version_level)
                      for f in r.finalized_features}  # fmt: skip
            assert levels["kraft.version"] == (1, 1) and levels["metadata.version"] == (29, 29)
        ctl.kraft_version = 0


def test_no_controller_yet():
    r = _answer(None, _listener(), 4)
    assert r.finalized_features == () and r.finalized_features_epoch == -1
    assert "kraft.version" in {f.name for f in r.supported_features}
