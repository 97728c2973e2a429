"""What the servers share: the cache, free ports, installing a missing program, resolving a
Java server's jars with Maven, and a background process with its state in a folder."""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import shutil
import signal
import socket
import subprocess
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from types import TracebackType
from typing import Any, Self

from cdcflow.errors import CdcflowError

#: Environment variable naming the services cache.
CACHE_ENV = "CDCFLOW_SERVICES_CACHE"
#: A small JVM that starts fast and leaves the cores to the tests.
#: (the compiled-code cache at the usual 240 MB: C1 alone reserves 48 MB, which a broker or
#: Kafka Connect with its connectors fills, and the JVM then stops compiling).
SMALL_JVM = (
    "-XX:+UseSerialGC",
    "-XX:TieredStopAtLevel=1",
    "-XX:CICompilerCount=1",
    "-XX:ReservedCodeCacheSize=240m",
    "-Xss512k",
)


class ServiceError(CdcflowError):
    """A server could not be installed, started or stopped."""

    code = "SERVICE_FAILED"


def cache_root() -> Path:
    """``$CDCFLOW_SERVICES_CACHE``, else ``~/.cache/cdcflow/services``."""
    found = os.environ.get(CACHE_ENV)
    return Path(found).expanduser() if found else Path.home() / ".cache" / "cdcflow" / "services"


@contextlib.contextmanager
def installing() -> Iterator[None]:
    """Hold the cache's install lock (``<cache>/install.lock``): two test runs on one machine
    (the two Spark lines side by side) install a program or resolve a server's jars one after
    the other, the second finding what the first installed."""
    root = cache_root()
    root.mkdir(parents=True, exist_ok=True)
    with (root / "install.lock").open("a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def free_port() -> int:
    """A port nothing listens on now (on 127.0.0.1)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def port_free(port: int) -> bool:
    """Whether a server can listen on ``port`` of 127.0.0.1 again: as Java's server sockets
    do (``SO_REUSEADDR``), connections of its last run still closing do not count."""
    with socket.socket() as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
        return True


def program(name: str, package: str) -> str:
    """The path of a program, installed from Debian's packages when missing (as root)."""
    found = shutil.which(name)
    if found:
        return found
    with installing():
        return _install(name, package)


def _install(name: str, package: str) -> str:
    """Install ``package`` for the program ``name`` unless another run just did."""
    found = shutil.which(name)
    if found:
        return found
    apt = shutil.which("apt-get")
    if apt is None or os.geteuid() != 0:
        raise ServiceError(
            f"{name} not found: install Debian's package {package!r} (apt-get install {package})"
        )
    for cmd in ([apt, "update", "-q"], [apt, "install", "-y", "-q", package]):
        done = subprocess.run(cmd, capture_output=True, text=True)
        if done.returncode != 0:
            raise ServiceError(f"{' '.join(cmd)} failed: {done.stderr[-2000:]}")
    found = shutil.which(name)
    if not found:
        raise ServiceError(f"{name} still not found after installing {package!r}")
    return found


def java() -> str:
    """The ``java`` of ``JAVA_HOME``, else of the ``PATH``."""
    home = os.environ.get("JAVA_HOME")
    if home and (Path(home) / "bin" / "java").exists():
        return str(Path(home) / "bin" / "java")
    found = shutil.which("java")
    if not found:
        raise ServiceError("java not found: the servers need a Java 17 runtime")
    return found


def maven_jars(name: str, pom: str) -> Path:
    """The folder of a Java server's runtime jars, resolved from the dependencies of ``pom``
    with ``mvn`` into the cache (its own Maven repository, apart from ``~/.m2``) on first use."""
    root = cache_root()
    digest = hashlib.sha256(pom.encode()).hexdigest()[:16]
    folder = root / f"{name}-{digest}"
    lib = folder / "lib"
    if (folder / ".resolved").exists():
        return lib
    mvn = program("mvn", "maven")
    with installing():
        if not (folder / ".resolved").exists():
            _resolve(folder, pom, mvn, root / "m2")
    return lib


def _resolve(folder: Path, pom: str, mvn: str, repository: Path) -> None:
    """Resolve the runtime dependencies of ``pom`` into ``folder/lib`` with ``mvn``."""
    name, digest = folder.name.rsplit("-", 1)
    lib = folder / "lib"
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "pom.xml").write_text(pom)
    tmp = folder / "lib.tmp"
    shutil.rmtree(tmp, ignore_errors=True)
    cmd = [
        mvn,
        "-B",
        "-q",
        f"-Dmaven.repo.local={repository}",
        "-f",
        str(folder / "pom.xml"),
        "dependency:copy-dependencies",
        f"-DoutputDirectory={tmp}",
        "-DincludeScope=runtime",
    ]
    done = subprocess.run(cmd, capture_output=True, text=True)
    if done.returncode != 0:
        raise ServiceError(f"mvn could not resolve the jars of {name}:\n{done.stdout[-3000:]}")
    shutil.rmtree(lib, ignore_errors=True)
    tmp.rename(lib)
    (folder / ".resolved").write_text(digest + "\n")


def alive(pid: int | None, marker: bytes | None = None) -> bool:
    """Whether a process runs (not a zombie) and, with ``marker``, its command line holds it
    (a reused process id is not ours)."""
    if not pid:
        return False
    try:
        os.kill(pid, 0)
        stat = Path(f"/proc/{pid}/stat").read_text()
        cmd = Path(f"/proc/{pid}/cmdline").read_bytes()
    except (ProcessLookupError, PermissionError, OSError):
        return False
    if stat.rsplit(")", 1)[1].split()[0] == "Z":
        return False
    return marker is None or marker in cmd


def log4j2(name: str, log: Path, loggers: Mapping[str, str] | None = None) -> str:
    """A log4j 2 configuration writing to ``log`` at level info (``loggers``: other levels by
    logger name). The JVM stops itself in its own shutdown hook: log4j's must not stop
    first."""
    lines = [
        "status = warn",
        f"name = {name}",
        "shutdownHook = disable",
        "appender.file.type = File",
        "appender.file.name = file",
        f"appender.file.fileName = {log}",
        "appender.file.layout.type = PatternLayout",
        "appender.file.layout.pattern = [%d] %p %m (%c)%n",
        "rootLogger.level = info",
        "rootLogger.appenderRef.file.ref = file",
    ]
    for i, (logger, level) in enumerate((loggers or {}).items()):
        lines += [f"logger.l{i}.name = {logger}", f"logger.l{i}.level = {level}"]
    return "\n".join(lines) + "\n"


class Service:
    """A server that ``with`` starts and stops (also after a failure)."""

    def start(self) -> str:
        """Start the server; returns its address."""
        raise NotImplementedError

    def stop(self) -> str:
        """Stop the server; says how."""
        raise NotImplementedError

    def __enter__(self) -> Self:
        self.start()
        return self

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()


class Background:
    """A server process started in a session of its own, its state (process id and what the
    server adds) in ``<home>/state.json`` and its output in ``<home>/stdout.log``."""

    def __init__(self, home: Path, marker: bytes) -> None:
        self.home = home.resolve()
        self.marker = marker

    @property
    def state(self) -> dict[str, Any]:
        """What the last start recorded."""
        path = self.home / "state.json"
        return json.loads(path.read_text()) if path.exists() else {}

    def record(self, **values: Any) -> None:
        """Add to the recorded state."""
        self.home.mkdir(parents=True, exist_ok=True)
        (self.home / "state.json").write_text(json.dumps({**self.state, **values}, indent=1))

    @property
    def pid(self) -> int | None:
        """The server's process id, while it runs."""
        pid = self.state.get("pid")
        return pid if alive(pid, self.marker) else None

    def spawn(
        self,
        cmd: Sequence[str],
        ready: Callable[[], bool],
        *,
        env: Mapping[str, str] | None = None,
        timeout: float = 90.0,
        what: str = "server",
    ) -> int:
        """Start ``cmd`` and wait until ``ready()``; returns the process id."""
        if self.pid is not None:
            raise ServiceError(f"{what} already runs (pid {self.pid}) in {self.home}")
        self.home.mkdir(parents=True, exist_ok=True)
        with open(self.home / "stdout.log", "ab") as out:
            proc = subprocess.Popen(
                list(cmd),
                stdout=out,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=True,
                cwd=self.home,
                env=dict(env) if env is not None else None,
            )
        self.record(pid=proc.pid)
        deadline = time.monotonic() + timeout
        while not ready():
            if proc.poll() is not None:
                raise ServiceError(
                    f"{what} exited with status {proc.returncode}: "
                    f"{self.tail()} (logs in {self.home})"
                )
            if time.monotonic() > deadline:
                self.stop(grace=5)
                raise ServiceError(f"{what} not ready after {timeout:.0f}s (logs in {self.home})")
            time.sleep(0.1)
        return proc.pid

    def tail(self, lines: int = 15) -> str:
        """The end of the server's output."""
        try:
            text = (self.home / "stdout.log").read_text(errors="replace")
        except OSError:
            return ""
        return "\n".join(text.splitlines()[-lines:])

    def stop(self, grace: float = 30.0) -> str:
        """SIGTERM, then SIGKILL after ``grace`` seconds: ``stopped``, ``killed`` or
        ``not running``."""
        pid = self.pid
        if pid is None:
            return "not running"
        os.kill(pid, signal.SIGTERM)
        deadline = time.monotonic() + grace
        while alive(pid, self.marker) and time.monotonic() < deadline:
            time.sleep(0.1)
        if alive(pid, self.marker):
            self.kill()
            return "killed"
        return "stopped"

    def kill(self) -> None:
        """SIGKILL the server (a crash), and wait until it is gone."""
        pid = self.pid
        if pid is None:
            return
        os.kill(pid, signal.SIGKILL)
        while alive(pid, self.marker):
            time.sleep(0.05)
