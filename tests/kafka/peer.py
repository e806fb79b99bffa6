"""Apache Kafka as a test peer: its jars, its server processes and its command-line tools.

Nothing of Kafka is in this repository. ``tests/kafka/pom.xml`` names pinned releases on Maven
Central; :func:`resolve` runs ``mvn dependency:copy-dependencies`` once per release into a cache
outside the repository (``$KAFKA_RPC_KAFKA_CACHE``, default ``~/.cache/kafka-rpc/kafka``) and
marks the directory complete, so a second run needs no network (``.ci/run`` resolves both
releases before the tests start: ``python -m tests.kafka.peer resolve``).

Processes (:class:`KafkaProcess`) are started in a session of their own, so a Ctrl-C in the
terminal does not reach them and their whole process group can be killed at once. Each keeps its
output in a log file; :meth:`KafkaProcess.tail` gives its end, which the tests print when they
fail. Every process started here is killed in the owner's ``finally``, and again at interpreter
exit (``atexit``) for whatever a crashed test left behind.

Without ``java`` (17+) or ``mvn`` the tests that need Kafka fail with a message saying how to
install them, unless a developer opts out with ``KAFKA_RPC_SKIP_KAFKA=1`` (then they skip). CI
never sets it.
"""

from __future__ import annotations

import atexit
import contextlib
import fcntl
import functools
import hashlib
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import uuid
import zipfile
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path

__all__ = [
    "NEWEST",
    "OLDEST",
    "VERSIONS",
    "KafkaProcess",
    "KafkaUnavailable",
    "cache_root",
    "free_port",
    "resolve",
    "run_tool",
    "tool_class",
]

HERE = Path(__file__).resolve().parent
POM = HERE / "pom.xml"

# The newest 4.x release on Maven Central and the newest of the oldest 4.x line (4.0.x).
NEWEST = "4.4.0"
OLDEST = "4.0.2"
VERSIONS = (NEWEST, OLDEST)
# kafka-shell is not published for every release: 4.4.0 has none on Maven Central, so the
# newest published shell (4.3.1) runs on the 4.4.0 jars.
SHELL_VERSION = {"4.4.0": "4.3.1"}
# log4j-core version Kafka's POMs bring in; the SLF4J 1.7 binding must match it.
LOG4J_VERSION = "2.25.5"

INSTALL_HINT = (
    "Apache Kafka runs from Maven Central jars in these tests: install Java 17+ and Maven "
    "(Debian: `apt-get install openjdk-17-jdk-headless maven`), or opt out explicitly with "
    "KAFKA_RPC_SKIP_KAFKA=1"
)

# Command-line tools by their script name: the main class moved between releases, so the first
# class the release's jars contain is used.
TOOLS: dict[str, tuple[str, ...]] = {
    "kafka-storage": ("kafka.tools.StorageTool",),
    "kafka-metadata-quorum": ("org.apache.kafka.tools.MetadataQuorumCommand",),
    "kafka-features": ("org.apache.kafka.tools.FeatureCommand",),
    "kafka-broker-api-versions": (
        "org.apache.kafka.tools.BrokerApiVersionsCommand",
        "kafka.admin.BrokerApiVersionsCommand",
    ),
    "kafka-cluster": ("org.apache.kafka.tools.ClusterTool",),
    "kafka-topics": ("org.apache.kafka.tools.TopicCommand",),
    "kafka-configs": ("org.apache.kafka.tools.ConfigCommand", "kafka.admin.ConfigCommand"),
    "kafka-acls": ("org.apache.kafka.tools.AclCommand",),
    "kafka-dump-log": ("org.apache.kafka.tools.DumpLogSegments", "kafka.tools.DumpLogSegments"),
    "kafka-metadata-shell": ("org.apache.kafka.shell.MetadataShell",),
    "kafka-console-producer": ("org.apache.kafka.tools.ConsoleProducer",),
    "kafka-console-consumer": ("org.apache.kafka.tools.consumer.ConsoleConsumer",),
    "kafka-log-dirs": ("org.apache.kafka.tools.LogDirsCommand",),
    "kafka-reassign-partitions": ("org.apache.kafka.tools.reassign.ReassignPartitionsCommand",),
}

SERVER_LOG4J = """\
status = warn
appender.out.type = Console
appender.out.name = OUT
appender.out.target = SYSTEM_OUT
appender.out.layout.type = PatternLayout
appender.out.layout.pattern = [%d] %p %m (%c{1})%n
rootLogger.level = INFO
rootLogger.appenderRef.out.ref = OUT
logger.kafka.name = kafka
logger.kafka.level = INFO
logger.request.name = kafka.request.logger
logger.request.level = WARN
"""

TOOLS_LOG4J = """\
status = warn
appender.err.type = Console
appender.err.name = ERR
appender.err.target = SYSTEM_ERR
appender.err.layout.type = PatternLayout
appender.err.layout.pattern = [%d] %p %m (%c)%n
rootLogger.level = WARN
rootLogger.appenderRef.err.ref = ERR
"""

SERVER_JVM_OPTS = ("-Xms128m", "-Xmx768m", "-XX:+UseG1GC", "-XX:MaxGCPauseMillis=20")
# A tool is a short-lived JVM: the C1 compiler alone starts it faster.
TOOL_JVM_OPTS = ("-Xmx256m", "-XX:TieredStopAtLevel=1", "-XX:+UseSerialGC")
# JVM log warnings go to stderr, never into a tool's stdout, which the tests parse; the
# class-data-sharing ones (an archive being written or not usable) are dropped.
JVM_LOG_OPTS = ("-Xlog:disable", "-Xlog:all=warning:stderr", "-Xlog:cds*=off:stderr")


class KafkaUnavailable(RuntimeError):
    """Java 17+ or Maven is missing, or a release could not be resolved; the message says how
    to get them."""


# ---------------------------------------------------------------------------------------------
# jars


def cache_root() -> Path:
    """Where resolved releases live: ``$KAFKA_RPC_KAFKA_CACHE`` or ``~/.cache/kafka-rpc/kafka``."""
    env = os.environ.get("KAFKA_RPC_KAFKA_CACHE")
    return Path(env) if env else Path.home() / ".cache" / "kafka-rpc" / "kafka"


def _java_major(java: str) -> int:
    out = subprocess.run(
        [java, "-version"], capture_output=True, text=True, timeout=30, check=False
    ).stderr
    m = re.search(r'version "(\d+)(?:\.(\d+))?', out)
    if not m:
        return 0
    major = int(m.group(1))
    return int(m.group(2) or 0) if major == 1 else major


def java_binary() -> str:
    """``$JAVA_HOME/bin/java`` or ``java`` on PATH, checked to be Java 17 or newer (checked
    once per process and ``JAVA_HOME``: the check starts a JVM).

    Raises :class:`KafkaUnavailable` otherwise."""
    return _java_binary(os.environ.get("JAVA_HOME"), os.environ.get("PATH"))


@functools.lru_cache(maxsize=4)
def _java_binary(home: str | None, _path: str | None) -> str:
    java = str(Path(home) / "bin" / "java") if home else shutil.which("java")
    if not java or not Path(java).exists():
        raise KafkaUnavailable(f"no `java` found. {INSTALL_HINT}")
    if _java_major(java) < 17:
        raise KafkaUnavailable(f"{java} is older than Java 17. {INSTALL_HINT}")
    return java


def javac_binary() -> str:
    """``javac`` next to :func:`java_binary` (a JDK, not only a JRE)."""
    javac = Path(java_binary()).with_name("javac")
    if javac.exists():
        return str(javac)
    found = shutil.which("javac")
    if not found:
        raise KafkaUnavailable(f"no `javac` found (a JDK is needed). {INSTALL_HINT}")
    return found


def _fingerprint(version: str) -> str:
    shell = SHELL_VERSION.get(version, version)
    text = POM.read_text() + f"|{version}|{shell}|{LOG4J_VERSION}"
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def resolve(version: str, *, quiet: bool = True) -> Path:
    """The directory of jars of Apache Kafka ``version`` (server, tools, shell, their runtime
    dependencies and the log4j2 SLF4J binding), resolved from Maven Central on first use.

    The result is cached under :func:`cache_root` with a marker naming the pom's fingerprint;
    while the marker matches no ``mvn`` runs at all. Raises :class:`KafkaUnavailable` when
    Maven is missing or the resolution fails (with Maven's output)."""
    libs = cache_root() / version / "libs"
    marker = libs / ".resolved"
    fp = _fingerprint(version)
    if marker.exists() and marker.read_text().strip() == fp:
        return libs
    mvn = shutil.which("mvn")
    if not mvn:
        raise KafkaUnavailable(f"no `mvn` found to resolve Apache Kafka {version}. {INSTALL_HINT}")
    libs.parent.mkdir(parents=True, exist_ok=True)
    # one resolver per release at a time (pytest-xdist workers, parallel runs): the others wait
    # here, then find the marker written and use the jars as they are
    with open(libs.parent / ".resolve.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if marker.exists() and marker.read_text().strip() == fp:
            return libs
        return _resolve_locked(version, mvn, libs, fp, quiet)


def _resolve_locked(version: str, mvn: str, libs: Path, fp: str, quiet: bool) -> Path:
    """Maven into a staging directory beside ``libs``, renamed into place once complete."""
    staging = Path(tempfile.mkdtemp(prefix="libs-", dir=libs.parent))
    cmd = [
        mvn,
        "-B",
        "-f",
        str(POM),
        f"-Dkafka.version={version}",
        f"-Dkafka.shell.version={SHELL_VERSION.get(version, version)}",
        f"-Dlog4j.version={LOG4J_VERSION}",
        "dependency:copy-dependencies",
        f"-DoutputDirectory={staging}",
    ]
    if quiet:
        cmd.insert(1, "-q")
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=900, check=False)
    if proc.returncode != 0:
        shutil.rmtree(staging, ignore_errors=True)
        raise KafkaUnavailable(
            f"resolving Apache Kafka {version} with Maven failed:\n{proc.stdout[-3000:]}"
            f"\n{proc.stderr[-2000:]}"
        )
    (staging / ".resolved").write_text(fp + "\n")
    if libs.exists():  # an older resolution (another pom): moved aside, then removed
        old = libs.with_name(f"libs-old-{uuid.uuid4().hex[:8]}")
        libs.rename(old)
        shutil.rmtree(old, ignore_errors=True)
    staging.rename(libs)
    return libs


def classpath(version: str) -> str:
    """A JVM classpath of every jar of ``version`` (``<libs>/*``)."""
    return str(resolve(version) / "*")


def _cds_archive(version: str, main_class: str) -> Path:
    """The archive of ``main_class``, named by the jars' fingerprint and the JVM binary (an
    archive is only usable by the JVM that wrote it)."""
    java = Path(java_binary()).resolve()
    jvm = hashlib.sha256(f"{java}|{java.stat().st_mtime_ns}".encode()).hexdigest()[:8]
    return resolve(version).parent / "cds" / f"{main_class}-{_fingerprint(version)}-{jvm}.jsa"


def _drop_stale_cds_tmp(directory: Path, age_s: float = 3600.0) -> None:
    """Temporary archives older than ``age_s`` (their writer was killed before renaming)."""
    now = time.time()
    for f in directory.glob("*.tmp"):
        with contextlib.suppress(FileNotFoundError):
            if now - f.stat().st_mtime > age_s:
                f.unlink()


def cds_options(version: str, main_class: str) -> tuple[list[str], Path | None]:
    """JVM options for a class-data-sharing archive of ``main_class`` on ``version``'s jars
    (JDK 13+ dynamic archives): ``-XX:SharedArchiveFile`` once the archive exists in the cache
    (a tool then starts in about half the time), else ``-XX:ArchiveClassesAtExit`` to a
    temporary file, returned as the second item for :func:`_keep_cds_archive` to move into
    place after a clean exit. An unusable archive only costs the speed-up (the JVM falls back
    without CDS)."""
    archive = _cds_archive(version, main_class)
    if archive.exists():
        return [f"-XX:SharedArchiveFile={archive}"], None
    archive.parent.mkdir(parents=True, exist_ok=True)
    _drop_stale_cds_tmp(archive.parent)
    tmp = archive.with_name(f"{archive.name}.{os.getpid()}-{uuid.uuid4().hex[:8]}.tmp")
    return [f"-XX:ArchiveClassesAtExit={tmp}"], tmp


def _keep_cds_archive(version: str, main_class: str, tmp: Path | None, ok: bool) -> None:
    if tmp is None:
        return
    if ok and tmp.exists():
        os.replace(tmp, _cds_archive(version, main_class))
    else:
        with contextlib.suppress(FileNotFoundError):
            tmp.unlink()


def _classes(version: str) -> frozenset[str]:
    libs = resolve(version)
    index = libs / ".classes.json"
    if index.exists():
        return frozenset(json.loads(index.read_text()))
    names: set[str] = set()
    for jar in sorted(libs.glob("*.jar")):
        if not jar.name.startswith("kafka"):
            continue
        with zipfile.ZipFile(jar) as z:
            for n in z.namelist():
                if n.endswith(".class") and "$" not in n:
                    names.add(n[:-6].replace("/", "."))
    tmp = index.with_name(f"{index.name}.{os.getpid()}-{uuid.uuid4().hex[:8]}.tmp")
    tmp.write_text(json.dumps(sorted(names)))
    os.replace(tmp, index)  # never a half-written index for a concurrent reader
    return frozenset(names)


def tool_class(version: str, tool: str) -> str:
    """The main class of ``tool`` (a script name such as ``kafka-topics``) in ``version``."""
    classes = _classes(version)
    for cls in TOOLS[tool]:
        if cls in classes:
            return cls
    raise KafkaUnavailable(f"{tool}: none of {TOOLS[tool]} is in Apache Kafka {version}")


# ---------------------------------------------------------------------------------------------
# processes

_LIVE: set[ManagedProcess] = set()


def _kill_all() -> None:
    for p in list(_LIVE):
        p.kill()


atexit.register(_kill_all)


def _config_file(dirpath: Path, name: str, text: str) -> Path:
    path = dirpath / name
    if not path.exists():
        path.write_text(text)
    return path


def free_port(host: str = "127.0.0.1") -> int:
    """An unused TCP port on ``host`` (bound and released at once)."""
    with socket.socket() as s:
        s.bind((host, 0))
        return s.getsockname()[1]


def write_properties(path: Path, props: Mapping[str, object]) -> Path:
    """Write ``props`` as a Java properties file (values as str; ``\\`` escaped)."""
    lines = [f"{k}={str(v).replace(chr(92), chr(92) * 2)}" for k, v in props.items()]
    path.write_text("\n".join(lines) + "\n")
    return path


class ManagedProcess:
    """A child in a session (and process group) of its own whose output goes to ``log_path``;
    the base of :class:`KafkaProcess` and :class:`RpcNode`. Leaving a ``with`` block kills the
    group; when an exception leaves it, the log's tail is printed first."""

    name: str
    log_path: Path
    proc: subprocess.Popen | None = None

    def start(self) -> ManagedProcess:
        raise NotImplementedError

    def _spawn(self, cmd: list[str], cwd: Path, env: Mapping[str, str]) -> None:
        log = open(self.log_path, "ab")  # noqa: SIM115 - the child owns it
        try:
            self.proc = subprocess.Popen(
                cmd, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, cwd=cwd,
                env={**os.environ, **env}, start_new_session=True,
            )  # fmt: skip
        finally:
            log.close()
        _LIVE.add(self)

    def __enter__(self):
        if self.proc is None:
            self.start()
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        if exc_type is not None:
            print(f"\n----- {self.name} log tail -----\n{self.tail()}", file=sys.stderr)
        self.kill()

    @property
    def pid(self) -> int:
        assert self.proc is not None
        return self.proc.pid

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def _signal_group(self, sig: int) -> None:
        if self.proc is None:
            return
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.proc.pid, sig)

    def kill(self) -> None:
        """SIGKILL the whole process group and reap it (bounded)."""
        if self.proc is None:
            return
        self._signal_group(signal.SIGKILL)
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.proc.wait(timeout=10)
        _LIVE.discard(self)

    def stop(self, timeout: float = 30.0) -> int | None:
        """SIGTERM (Kafka's clean shutdown), then SIGKILL after ``timeout`` seconds. Returns the
        exit code, or None when it had to be killed."""
        if self.proc is None:
            return None
        self._signal_group(signal.SIGTERM)
        try:
            rc = self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            rc = None
        self.kill()
        return rc

    def log_text(self) -> str:
        try:
            return self.log_path.read_text(errors="replace")
        except FileNotFoundError:
            return ""

    def tail(self, lines: int = 80) -> str:
        return "\n".join(self.log_text().splitlines()[-lines:])

    def wait_for_log(self, pattern: str, timeout: float, *, since: int = 0) -> re.Match:
        """Block until the log (from byte ``since``) matches the regex ``pattern``; raise
        ``TimeoutError`` with the tail after ``timeout`` seconds or if the process exits."""
        rx = re.compile(pattern)
        deadline = time.monotonic() + timeout
        while True:
            m = rx.search(self.log_text()[since:])
            if m:
                return m
            if not self.alive():
                raise RuntimeError(
                    f"{self.name} exited ({self.proc and self.proc.returncode}) before "
                    f"/{pattern}/:\n{self.tail()}"
                )
            if time.monotonic() > deadline:
                raise TimeoutError(f"{self.name}: no /{pattern}/ in {timeout}s:\n{self.tail()}")
            time.sleep(0.1)

    def wait_for_port(self, host: str, port: int, timeout: float) -> None:
        """Block until ``host:port`` accepts a TCP connection (bounded)."""
        deadline = time.monotonic() + timeout
        while True:
            with contextlib.suppress(OSError), socket.create_connection((host, port), 0.5):
                return
            if not self.alive():
                raise RuntimeError(f"{self.name} exited before listening:\n{self.tail()}")
            if time.monotonic() > deadline:
                raise TimeoutError(f"{self.name}: {host}:{port} not listening:\n{self.tail()}")
            time.sleep(0.1)


class KafkaProcess(ManagedProcess):
    """One JVM running a Kafka main class, with its output in ``<workdir>/<name>.log``.

    Usage::

        with KafkaProcess("broker", NEWEST, "kafka.Kafka", [props], workdir) as p:
            p.wait_for_log("Kafka Server started", timeout=60)

    Leaving the ``with`` block (normally or by an exception) kills the process group; when an
    exception leaves it, the log's tail is printed first. ``start`` returns immediately."""

    def __init__(
        self,
        name: str,
        version: str,
        main_class: str,
        args: Sequence[str],
        workdir: Path,
        *,
        jvm_opts: Iterable[str] = SERVER_JVM_OPTS,
        env: Mapping[str, str] | None = None,
        log4j: str = SERVER_LOG4J,
    ) -> None:
        self.name = name
        self.version = version
        self.main_class = main_class
        self.args = list(args)
        self.workdir = Path(workdir)
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.jvm_opts = list(jvm_opts)
        self.env = dict(env or {})
        self.log_path = self.workdir / f"{name}.log"
        self._log4j = _config_file(
            self.workdir, f"log4j2-{hashlib.md5(log4j.encode()).hexdigest()[:8]}.properties", log4j
        )
        self.proc: subprocess.Popen | None = None

    def command(self) -> list[str]:
        return [
            java_binary(),
            *self.jvm_opts,
            f"-Dlog4j2.configurationFile={self._log4j}",
            f"-Dkafka.logs.dir={self.workdir}",
            "-cp",
            classpath(self.version),
            self.main_class,
            *self.args,
        ]

    def start(self) -> KafkaProcess:
        self._spawn(self.command(), self.workdir, self.env)
        return self


def run_tool(
    version: str,
    tool: str,
    *args: str,
    timeout: float = 120.0,
    input: str | None = None,
    check: bool = True,
    workdir: Path | None = None,
) -> subprocess.CompletedProcess:
    """Run one of Kafka's command-line tools (``tool`` as its script name, e.g.
    ``kafka-metadata-quorum``) from the ``version`` jars and return what it printed.

    The tool runs in a process group of its own that is killed after ``timeout`` seconds
    (raising ``subprocess.TimeoutExpired``). With ``check`` a non-zero exit raises
    ``AssertionError`` carrying the output. ``workdir``: its working directory (default: a
    temporary one, removed when the tool has exited)."""
    if workdir is None:  # a directory of its own, removed afterwards
        with tempfile.TemporaryDirectory(prefix="kafka-tool-") as tmp:
            return run_tool(version, tool, *args, timeout=timeout, input=input, check=check,
                            workdir=Path(tmp))  # fmt: skip
    workdir = Path(workdir)
    log4j = _config_file(workdir, "tools-log4j2.properties", TOOLS_LOG4J)
    main_class = tool_class(version, tool)
    cds, cds_tmp = cds_options(version, main_class)
    cmd = [
        java_binary(),
        *TOOL_JVM_OPTS,
        *JVM_LOG_OPTS,
        *cds,
        f"-Dlog4j2.configurationFile={log4j}",
        "-cp",
        classpath(version),
        main_class,
        *args,
    ]
    proc = subprocess.Popen(
        cmd,
        stdin=subprocess.PIPE if input is not None else subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=workdir,
        start_new_session=True,
    )
    try:
        out, err = proc.communicate(input=input, timeout=timeout)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        out, err = proc.communicate()
        raise subprocess.TimeoutExpired(cmd, timeout, out, err) from None
    finally:
        if proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=10)
        _keep_cds_archive(version, main_class, cds_tmp, proc.returncode == 0)
    result = subprocess.CompletedProcess(cmd, proc.returncode, out, err)
    if check and proc.returncode != 0:
        raise AssertionError(
            f"{tool} {' '.join(args)} exited {proc.returncode}\nstdout:\n{out[-4000:]}\n"
            f"stderr:\n{err[-4000:]}"
        )
    return result


# ---------------------------------------------------------------------------------------------
# Kafka nodes


def random_cluster_id() -> str:
    """A cluster id as ``kafka-storage random-uuid`` prints it (22 characters of URL-safe
    base64 of a random UUID), never starting with '-' (Kafka's ``Uuid.randomUuid`` draws again:
    such an id would read as an option on a command line)."""
    from kafka_rpc.protocol.uuids import random_uuid_text

    return random_uuid_text()


class KafkaNode(KafkaProcess):
    """An Apache Kafka server (``kafka.Kafka server.properties``): a dedicated controller, a
    broker, or both, on loopback. :meth:`format` runs ``kafka-storage format`` on its
    directories first (Kafka refuses to start on unformatted ones)."""

    def __init__(
        self,
        name: str,
        version: str,
        workdir: Path,
        props: Mapping[str, object],
        **kw,
    ) -> None:
        workdir = Path(workdir)
        workdir.mkdir(parents=True, exist_ok=True)
        self.props = dict(props)
        self.properties_path = write_properties(workdir / f"{name}.properties", self.props)
        super().__init__(name, version, "kafka.Kafka", [str(self.properties_path)], workdir, **kw)

    def format(self, cluster_id: str, *extra: str) -> subprocess.CompletedProcess:
        """``kafka-storage format -t cluster_id -c <properties> [extra...]``."""
        return run_tool(
            self.version,
            "kafka-storage",
            "format",
            "-t",
            cluster_id,
            "-c",
            str(self.properties_path),
            *extra,
            workdir=self.workdir,
        )


class RpcNode(ManagedProcess):
    """One ``kafka-rpc serve`` process (ours) beside Kafka's, on loopback: its properties file,
    its own session and process group, its output in ``<workdir>/<name>.log``.

    ``props`` are Kafka-style keys (``process.roles``, ``listeners``, ``controller.quorum.voters``,
    ``log.dirs``...). :meth:`format` runs ``kafka-rpc storage format`` with a shared cluster id;
    ``serve`` alone formats an empty directory by itself."""

    def __init__(self, name: str, workdir: Path, props: Mapping[str, object]) -> None:
        self.name = name
        self.workdir = Path(workdir)
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.props = dict(props)
        self.properties_path = write_properties(self.workdir / f"{name}.properties", self.props)
        self.log_path = self.workdir / f"{name}.log"
        self.proc: subprocess.Popen | None = None

    def cli(self, *args: str, timeout: float = 60.0, check: bool = True):
        """Run ``kafka-rpc <args>`` (our CLI) and return the CompletedProcess."""
        proc = subprocess.run(
            [sys.executable, "-m", "kafka_rpc.cli", *args],
            capture_output=True, text=True, timeout=timeout, cwd=self.workdir,
            env={**os.environ, "KAFKA_RPC_NO_REEXEC": "1"},
        )  # fmt: skip
        if check and proc.returncode != 0:
            raise AssertionError(f"kafka-rpc {' '.join(args)}: {proc.stdout}\n{proc.stderr}")
        return proc

    def format(self, cluster_id: str, *extra: str):
        return self.cli(
            "storage", "format", "--cluster-id", cluster_id, "--config",
            str(self.properties_path), *extra,
        )  # fmt: skip

    def start(self, log_level: str = "INFO") -> RpcNode:
        cmd = [sys.executable, "-m", "kafka_rpc.cli", "--log-level", log_level, "serve",
               "--config", str(self.properties_path)]  # fmt: skip
        self._spawn(cmd, self.workdir, {"KAFKA_RPC_NO_REEXEC": "1"})
        return self

    def wait_started(self, timeout: float = 60.0) -> None:
        """Until the server printed its ``cluster id`` line (it listens by then)."""
        self.wait_for_log(r"cluster id", timeout)


def _main(argv: list[str]) -> int:
    import argparse

    ap = argparse.ArgumentParser(prog="python -m tests.kafka.peer")
    sub = ap.add_subparsers(dest="cmd", required=True)
    r = sub.add_parser("resolve", help="resolve the pinned Kafka releases into the cache")
    r.add_argument("versions", nargs="*", default=list(VERSIONS))
    args = ap.parse_args(argv)
    if args.cmd == "resolve":
        java_binary()
        for v in args.versions:
            t0 = time.monotonic()
            libs = resolve(v, quiet=True)
            n = len(list(libs.glob("*.jar")))
            print(f"Apache Kafka {v}: {n} jars in {libs} ({time.monotonic() - t0:.1f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(_main(sys.argv[1:]))
