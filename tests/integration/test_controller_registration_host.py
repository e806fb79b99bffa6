"""The endpoints a controller registers (ControllerRegistration, KIP-919): a controller listener
bound to every address (``CONTROLLER://0.0.0.0:0`` or ``CONTROLLER://:0``) registers this
machine's canonical host name, as Kafka's ``ListenerInfo.withWildcardHostnamesResolved``, never
``127.0.0.1``; an ``advertised.listeners`` entry for the controller listener wins."""

from __future__ import annotations

import socket

import pytest

from tests.integration.conftest import start_server
from tests.waiting import until

pytestmark = pytest.mark.integration


async def registered(tmp_path, **extra):
    running = await start_server(tmp_path, **extra)
    try:
        ctl = running.server.controller
        await until(lambda: 1 in ctl.image.controllers, "the controller's registration")
        (ep,) = ctl.image.controllers[1].endpoints
        return ep, running.port("CONTROLLER")
    finally:
        await running.stop()


@pytest.mark.parametrize("host", ["0.0.0.0", ""])
async def test_a_wildcard_controller_listener_registers_the_host_name(tmp_path, host):
    ep, port = await registered(tmp_path, listeners=f"PLAINTEXT://127.0.0.1:0,CONTROLLER://{host}:0")
    assert (ep.name, ep.host, ep.port) == ("CONTROLLER", socket.getfqdn(), port)
    assert ep.host != "127.0.0.1"


async def test_the_advertised_controller_listener_is_registered(tmp_path):
    ep, port = await registered(
        tmp_path,
        listeners="PLAINTEXT://127.0.0.1:0,CONTROLLER://0.0.0.0:0",
        **{"advertised.listeners": "PLAINTEXT://127.0.0.1:0,CONTROLLER://ctl-1.example:0"},
    )
    assert (ep.name, ep.host, ep.port) == ("CONTROLLER", "ctl-1.example", port)
