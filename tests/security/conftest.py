"""One `kafka-rpc serve` process with a listener per security protocol, certificates and SCRAM
credentials made at test time (module scope: started once for the client tests)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from tests.security.certs import make_ca, split_keystore

TIMEOUT = 20
JAAS_PLAIN = (
    'org.apache.kafka.common.security.plain.PlainLoginModule required username="admin" '
    'password="admin-secret" user_admin="admin-secret" user_alice="alice-secret";'
)


class Pki:
    """A CA, the server's keystore (encrypted key), a client keystore, an untrusted one and an
    expired one; PEM files in ``directory``."""

    def __init__(self, directory: Path) -> None:
        self.dir = directory
        self.ca = make_ca(directory)
        self.server = self.ca.issue(directory, "localhost", password="key-secret")
        self.client = self.ca.issue(directory, "client1", ou="eng", o="acme")
        self.client_key, self.client_cert = split_keystore(self.client)
        self.rogue_ca = make_ca(directory / "rogue", "rogue-ca")
        self.untrusted = self.rogue_ca.issue(directory / "rogue", "mallory")
        self.expired = self.ca.issue(directory, "old", expired=True)

    @property
    def truststore(self) -> str:
        return str(self.ca.path)


def secure_overrides(pki: Pki, data: Path) -> dict[str, str]:
    return {
        "node.id": "1",
        "log.dirs": str(data),
        "listeners": "PLAINTEXT://127.0.0.1:0,SSL://127.0.0.1:0,MTLS://127.0.0.1:0,"
        "SASL_PLAINTEXT://127.0.0.1:0,SASL_SSL://127.0.0.1:0,CONTROLLER://127.0.0.1:0",
        "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,SSL:SSL,MTLS:SSL,"
        "SASL_PLAINTEXT:SASL_PLAINTEXT,SASL_SSL:SASL_SSL,CONTROLLER:PLAINTEXT",
        "ssl.keystore.type": "PEM",
        "ssl.keystore.location": str(pki.server),
        "ssl.key.password": "key-secret",
        "ssl.truststore.location": pki.truststore,
        "listener.name.ssl.ssl.client.auth": "requested",
        "listener.name.mtls.ssl.client.auth": "required",
        "listener.name.sasl_plaintext.plain.sasl.jaas.config": JAAS_PLAIN,
        "sasl.jaas.config": JAAS_PLAIN,
        "shutdown.timeout.ms": "2000",
    }


class SecureServe:
    """`kafka-rpc serve` with :func:`secure_overrides`, after `storage format --add-scram`."""

    def __init__(self, tmp: Path, pki: Pki, wait: bool = True, **extra: str) -> None:
        """Formats and starts the node; with ``wait``, returns once it printed its
        ``cluster id`` line (its listeners' ports read from the ``listening`` lines), else at
        once (``started`` is set by that line)."""
        self.overrides = {**secure_overrides(pki, tmp / "data"), **extra}
        ov = [x for k, v in self.overrides.items() for x in ("--override", f"{k}={v}")]
        cfg = tmp / "server.properties"
        cfg.write_text("")
        cli = [sys.executable, "-m", "kafka_rpc.cli"]
        subprocess.run(
            [*cli, "storage", "format", "-t", "q1Sh-9_ISia_zwGINzRvyQ", "-c", str(cfg), *ov,
             "--add-scram", "SCRAM-SHA-256=[name=alice,password=alice-secret]",
             "--add-scram", "SCRAM-SHA-512=[name=bob,password=bob-secret,iterations=8192]"],
            check=True, timeout=TIMEOUT, capture_output=True,
        )  # fmt: skip
        self.proc = subprocess.Popen(
            [*cli, "serve", "--config", str(cfg), *ov], stdout=subprocess.PIPE,
            stderr=subprocess.PIPE, text=True, env=dict(os.environ), cwd=tmp,
            start_new_session=True,
        )  # fmt: skip
        self.lines: list[str] = []
        self.errors: list[str] = []
        self.ports: dict[str, int] = {}
        done = self.started = threading.Event()

        def out() -> None:
            for line in self.proc.stdout:
                self.lines.append(line)
                m = re.match(r"listening (\w+) \((\w+)\) on ([\d.]+):(\d+)", line)
                if m:
                    self.ports[m.group(1)] = int(m.group(4))
                if line.startswith("cluster id"):
                    done.set()
            done.set()

        def err() -> None:
            for line in self.proc.stderr:
                self.errors.append(line)

        threading.Thread(target=out, daemon=True).start()
        threading.Thread(target=err, daemon=True).start()
        if not wait:
            return
        if not done.wait(TIMEOUT) or "SASL_SSL" not in self.ports:
            self.stop()
            raise AssertionError(f"server did not start: {self.lines} {self.errors}")

    def bootstrap(self, listener: str) -> str:
        return f"localhost:{self.ports[listener]}"

    def stop(self) -> int:
        if self.proc.poll() is None:
            self.proc.terminate()
        try:
            return self.proc.wait(TIMEOUT)
        except subprocess.TimeoutExpired:
            os.killpg(self.proc.pid, 9)
            return self.proc.wait(TIMEOUT)


@pytest.fixture(scope="module")
def pki(tmp_path_factory) -> Pki:
    return Pki(tmp_path_factory.mktemp("pki"))


@pytest.fixture(scope="module")
def secure_server(tmp_path_factory, pki):
    srv = SecureServe(tmp_path_factory.mktemp("secure"), pki)
    yield srv
    srv.stop()
