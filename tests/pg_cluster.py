"""A throw-away PostgreSQL cluster for tests and benchmarks (pytest-postgresql's executor).

``PgCluster`` runs ``initdb`` + ``pg_ctl start`` in a fresh temporary directory on a free loopback
port (TCP on 127.0.0.1 only, plus a Unix socket in that directory), and ``pg_ctl stop -m fast``
plus removal of the directory on ``stop()``. ``initdb`` refuses to run as root, so when the
effective uid is 0 (CI runs as root) the server runs as the ``postgres`` user (``nobody`` when
there is none) through ``runuser``: a two-line wrapper script around ``pg_ctl`` is given to the
executor, and the directory is handed to that user.

Without PostgreSQL on the machine ``require_pg_ctl()`` fails with a message saying how to install
it, unless ``KAFKA_RPC_SKIP_POSTGRES=1`` (a developer's explicit opt-out; CI never sets it), in
which case it skips.
"""

from __future__ import annotations

import glob
import os
import pwd
import shutil
import subprocess
import tempfile
from pathlib import Path

import port_for
import pytest
from pytest_postgresql.executors.proc import PostgreSQLExecutor

SKIP_ENV = "KAFKA_RPC_SKIP_POSTGRES"
INSTALL_HINT = (
    "PostgreSQL (pg_ctl) was not found on PATH nor in /usr/lib/postgresql/*/bin. Install it "
    "(Debian/Ubuntu: `apt-get install -y postgresql`, then put /usr/lib/postgresql/<v>/bin on "
    f"PATH), or opt out of the PostgreSQL tests explicitly with {SKIP_ENV}=1."
)


def find_pg_ctl() -> str | None:
    """Path of ``pg_ctl``: on PATH, else the newest ``/usr/lib/postgresql/<v>/bin/pg_ctl``."""
    found = shutil.which("pg_ctl")
    if found:
        return found
    candidates = glob.glob("/usr/lib/postgresql/*/bin/pg_ctl")
    candidates.sort(key=lambda p: int(Path(p).parent.parent.name.split(".")[0] or 0))
    return candidates[-1] if candidates else None


def require_pg_ctl() -> str:
    """``find_pg_ctl()``, or fail (skip only when ``KAFKA_RPC_SKIP_POSTGRES=1``)."""
    path = find_pg_ctl()
    if path is None:
        if os.environ.get(SKIP_ENV) == "1":
            pytest.skip(f"PostgreSQL not installed and {SKIP_ENV}=1")
        pytest.fail(INSTALL_HINT, pytrace=False)
    return path


def _server_user() -> str | None:
    """The unprivileged user the server runs as when we are root (None when not root)."""
    if os.geteuid() != 0:
        return None
    for name in ("postgres", "nobody"):
        try:
            pwd.getpwnam(name)
            return name
        except KeyError:
            continue
    raise RuntimeError("running as root and no 'postgres' or 'nobody' user to run PostgreSQL")


class PgCluster:
    """One throw-away cluster. ``start()`` returns self; ``dsn(db)`` is a ``postgresql://`` URL
    for the superuser ``postgres`` (trust authentication, loopback only).

    ``fsync``: False for unit tests (a cluster that dies with the test need not survive power
    loss; commits are still WAL-logged and crash-safe against a process kill), True for
    benchmarks. ``options``: more ``-c name=value`` server settings."""

    def __init__(self, *, fsync: bool = False, options: dict[str, str] | None = None) -> None:
        self.pg_ctl = require_pg_ctl()
        self.user = "postgres"
        self.host = "127.0.0.1"
        self.port = 0
        self.fsync = fsync
        self.options = dict(options or {})
        self.base: Path | None = None
        self.executor: PostgreSQLExecutor | None = None

    def dsn(self, dbname: str = "postgres") -> str:
        return f"postgresql://{self.user}@{self.host}:{self.port}/{dbname}"

    @property
    def bin_dir(self) -> Path:
        return Path(os.path.realpath(self.pg_ctl)).parent

    def start(self) -> PgCluster:
        self.base = Path(tempfile.mkdtemp(prefix="kafka-rpc-pg-"))
        try:
            executable = os.path.realpath(self.pg_ctl)
            run_as = _server_user()
            if run_as is not None:
                pw = pwd.getpwnam(run_as)
                os.chown(self.base, pw.pw_uid, pw.pw_gid)
                wrapper = self.base / "pg_ctl-as-user"
                wrapper.write_text(
                    f'#!/bin/sh\nexec runuser -u {run_as} -- "{executable}" "$@"\n',
                    encoding="utf-8",
                )
                wrapper.chmod(0o755)
                executable = str(wrapper)
            self.port = port_for.get_port(None)
            settings = {
                "listen_addresses": self.host,
                "fsync": "on" if self.fsync else "off",
                "max_connections": "200",
                **self.options,
            }
            self.executor = PostgreSQLExecutor(
                executable=executable,
                host=self.host,
                port=self.port,
                datadir=str(self.base / "data"),
                unixsocketdir=str(self.base),
                logfile=str(self.base / "postgresql.log"),
                startparams="-w",
                dbname="postgres",
                user=self.user,
                timeout=60,
                postgres_options=" ".join(f"-c {k}={v}" for k, v in settings.items()),
            )
            self.executor.start()
            self.wait_ready()
        except BaseException:
            self.stop()
            raise
        return self

    def wait_ready(self, timeout: float = 60.0) -> None:
        """Wait until the server accepts connections (``pg_isready``; the port opens before the
        startup finishes, and a loaded machine stretches that window). Raises ``TimeoutError``."""
        import time

        deadline = time.monotonic() + timeout
        while True:
            ready = subprocess.run(
                [str(self.bin_dir / "pg_isready"), "-q", "-h", self.host, "-p", str(self.port),
                 "-d", "postgres", "-U", self.user],
                check=False, timeout=timeout,
            )  # fmt: skip
            if ready.returncode == 0:
                return
            if time.monotonic() > deadline:
                log = ""
                if self.base is not None and (self.base / "postgresql.log").exists():
                    log = (self.base / "postgresql.log").read_text(errors="replace")[-2000:]
                raise TimeoutError(f"PostgreSQL on port {self.port} not ready: {log}")
            time.sleep(0.05)

    def psql(self, sql: str, dbname: str = "postgres") -> str:
        """Run ``sql`` with ``psql`` (autocommit) and return its unaligned output."""
        out = subprocess.run(
            [str(self.bin_dir / "psql"), "-X", "-A", "-t", "-v", "ON_ERROR_STOP=1",
             "-d", self.dsn(dbname), "-c", sql],
            check=True, capture_output=True, text=True, timeout=60,
        )  # fmt: skip
        return out.stdout

    def stop(self) -> None:
        """Stop the server (fast shutdown) and remove its directory. Idempotent."""
        executor, self.executor = self.executor, None
        try:
            if executor is not None:
                try:
                    executor.stop()
                except Exception:  # noqa: BLE001 - still remove the directory
                    pass
        finally:
            if self.base is not None:
                shutil.rmtree(self.base, ignore_errors=True)
                self.base = None

    def __enter__(self) -> PgCluster:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


# -- pytest fixtures (import them into a conftest.py) ------------------------------------------


class Databases:
    """Creates and drops databases on a running cluster through one autocommit connection."""

    def __init__(self, cluster: PgCluster) -> None:
        import psycopg

        self.cluster = cluster
        self.admin = psycopg.connect(cluster.dsn(), autocommit=True)

    def create(self) -> tuple[str, str]:
        """A new empty database: ``(name, dsn)``."""
        import uuid

        name = f"t_{uuid.uuid4().hex[:16]}"
        self.admin.execute(f'CREATE DATABASE "{name}"')
        return name, self.cluster.dsn(name)

    def drop(self, name: str) -> None:
        self.admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')

    def close(self) -> None:
        self.admin.close()


@pytest.fixture(scope="session")
def pg_cluster():
    """One throw-away cluster per test session (started on first use, removed at the end)."""
    cluster = PgCluster()
    try:
        cluster.start()
        yield cluster
    finally:
        cluster.stop()


@pytest.fixture(scope="session")
def pg_databases(pg_cluster):
    dbs = Databases(pg_cluster)
    try:
        yield dbs
    finally:
        dbs.close()


@pytest.fixture
def pg_dsn(pg_databases):
    """A fresh empty database for one test; dropped afterwards."""
    name, dsn = pg_databases.create()
    try:
        yield dsn
    finally:
        pg_databases.drop(name)
