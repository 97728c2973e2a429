"""Kafka Connect in standalone mode (``org.apache.kafka.connect.cli.ConnectStandalone``) with
Debezium's source connectors as plugins, all from their Maven artifacts.

Versions are matched: Debezium 3.6.1.Final is built against Kafka 4.3.0 (its build parent's
``version.kafka``), so the worker is Kafka Connect 4.3.1 (``connect-runtime`` and
``connect-json``), the patch release of the same line as the project's broker. Each connector
plugin is resolved into a folder of its own (its runtime dependencies; Kafka Connect's API is
``provided``), and the folder above them is the worker's ``plugin.path``.

Standalone mode keeps source offsets in a file (``<home>/connect.offsets``, flushed every
``offset_flush_ms``) and no connector configuration: every connector added is written to
``<home>/connectors/<name>.json`` and given to each start, as a standalone worker's connector
files are. A worker killed (SIGKILL) and started again resumes each connector from its last
flushed offset, so what it produced after that flush is produced again.
"""

from __future__ import annotations

import json
import time
import urllib.error
import urllib.request
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from cdcflow.testing.services.base import (
    SMALL_JVM,
    Background,
    Service,
    ServiceError,
    free_port,
    java,
    log4j2,
    maven_jars,
    port_free,
)
from cdcflow.testing.services.kafka import LOG4J
from cdcflow.testing.services.kafka import VERSION as KAFKA_VERSION

#: Debezium's release; built against Kafka 4.3.0.
DEBEZIUM = "3.6.1.Final"
#: Debezium connector plugins by name: their Maven artifact.
PLUGINS: dict[str, str] = {
    "postgres": "debezium-connector-postgres",
    "mariadb": "debezium-connector-mariadb",
    "mysql": "debezium-connector-mysql",
}

WORKER_POM = """<project xmlns="http://maven.apache.org/POM/4.0.0">
  <modelVersion>4.0.0</modelVersion>
  <groupId>cdcflow.services</groupId><artifactId>kafka-connect</artifactId>
  <version>1</version><packaging>pom</packaging>
  <dependencies>
    <dependency><groupId>org.apache.kafka</groupId><artifactId>connect-runtime</artifactId>
      <version>{kafka}</version></dependency>
    <dependency><groupId>org.apache.kafka</groupId><artifactId>connect-json</artifactId>
      <version>{kafka}</version></dependency>
    <dependency><groupId>org.apache.logging.log4j</groupId>
      <artifactId>log4j-slf4j-impl</artifactId><version>{log4j}</version></dependency>
  </dependencies>
</project>
"""

PLUGIN_POM = """<project xmlns="http://maven.apache.org/POM/4.0.0">
  <modelVersion>4.0.0</modelVersion>
  <groupId>cdcflow.services</groupId><artifactId>{artifact}-plugin</artifactId>
  <version>1</version><packaging>pom</packaging>
  <dependencies>
    <dependency><groupId>io.debezium</groupId><artifactId>{artifact}</artifactId>
      <version>{debezium}</version></dependency>
  </dependencies>
</project>
"""


def plugin_path(plugins: tuple[str, ...], debezium: str = DEBEZIUM) -> list[Path]:
    """The folders holding each plugin's jars (resolved on first use); their parents go on
    the worker's ``plugin.path``."""
    out = []
    for name in plugins:
        artifact = PLUGINS.get(name)
        if artifact is None:
            raise ServiceError(f"no Debezium plugin {name!r}: one of {', '.join(PLUGINS)}")
        pom = PLUGIN_POM.format(artifact=artifact, debezium=debezium)
        out.append(maven_jars(f"{artifact}-{debezium}", pom))
    return out


def worker_properties(
    home: Path, bootstrap: str, port: int, plugin_dirs: list[Path], offset_flush_ms: int
) -> str:
    """The worker's configuration: JSON with schemas for keys and values, offsets in a file,
    REST on the loopback interface. The JSON converter keeps a ``NULL`` a ``NULL``: by
    default it writes a null field that has a default value (a column with ``DEFAULT``) as
    that default."""
    path = ",".join(sorted({str(p.parent) for p in plugin_dirs}))
    return f"""bootstrap.servers={bootstrap}
key.converter=org.apache.kafka.connect.json.JsonConverter
value.converter=org.apache.kafka.connect.json.JsonConverter
key.converter.schemas.enable=true
value.converter.schemas.enable=true
key.converter.replace.null.with.default=false
value.converter.replace.null.with.default=false
offset.storage.file.filename={home / "connect.offsets"}
offset.flush.interval.ms={offset_flush_ms}
plugin.path={path}
listeners=http://127.0.0.1:{port}
rest.advertised.host.name=127.0.0.1
"""


class KafkaConnect(Service):
    """One standalone worker with its own folder (``home``): configuration, offsets,
    connector files, logs, state."""

    def __init__(
        self,
        home: Path,
        bootstrap: str,
        plugins: tuple[str, ...] = ("postgres",),
        offset_flush_ms: int = 2000,
    ) -> None:
        self.home = home.resolve()
        self.bootstrap = bootstrap
        self.plugins = plugins
        self.offset_flush_ms = offset_flush_ms
        self.process = Background(self.home, b"ConnectStandalone")

    @property
    def url(self) -> str:
        """The REST API's base URL."""
        port = self.process.state.get("port")
        if not port or self.process.pid is None:
            raise ServiceError(f"the Kafka Connect worker in {self.home} is not running")
        return f"http://127.0.0.1:{port}"

    @property
    def connectors(self) -> dict[str, dict[str, str]]:
        """The connectors added, by name: their configuration."""
        folder = self.home / "connectors"
        if not folder.exists():
            return {}
        return {p.stem: json.loads(p.read_text())["config"] for p in sorted(folder.glob("*.json"))}

    def start(self, timeout: float = 120.0) -> str:
        """Start the worker with every connector added, and wait until each one's tasks run;
        returns the REST URL. A restart keeps the offsets and, when it is free, the port."""
        lib = maven_jars(
            f"kafka-connect-{KAFKA_VERSION}",
            WORKER_POM.format(kafka=KAFKA_VERSION, log4j=LOG4J),
        )
        dirs = plugin_path(self.plugins)
        self.home.mkdir(parents=True, exist_ok=True)
        state = self.process.state
        port = state.get("port") if state.get("port") and port_free(state["port"]) else None
        port = port or free_port()
        props = self.home / "worker.properties"
        props.write_text(
            worker_properties(self.home, self.bootstrap, port, dirs, self.offset_flush_ms)
        )
        (self.home / "log4j2.properties").write_text(
            log4j2("connect", self.home / "connect.log", {"org.reflections": "error"})
        )
        files = sorted((self.home / "connectors").glob("*.json"))
        self.process.record(port=port)
        started = time.monotonic()
        names = [p.stem for p in files]
        self.process.spawn(
            [
                java(),
                "-Xms64m",
                "-Xmx384m",
                *SMALL_JVM,
                f"-Dlog4j2.configurationFile={self.home / 'log4j2.properties'}",
                "-cp",
                f"{lib}/*",
                "org.apache.kafka.connect.cli.ConnectStandalone",
                str(props),
                *(str(p) for p in files),
            ],
            lambda: self._running(port, names),
            timeout=timeout,
            what="Kafka Connect",
        )
        self.process.record(start_seconds=round(time.monotonic() - started, 2))
        return self.url

    def _running(self, port: int, names: list[str]) -> bool:
        base = f"http://127.0.0.1:{port}"
        try:
            if _request("GET", base + "/") is None:
                return False
            for name in names:
                status = _request("GET", f"{base}/connectors/{name}/status")
                tasks = (status or {}).get("tasks") or []
                if not tasks or any(t.get("state") != "RUNNING" for t in tasks):
                    failed = [t for t in tasks if t.get("state") == "FAILED"]
                    if failed:
                        raise ServiceError(
                            f"connector {name} failed: {str(failed[0].get('trace'))[:2000]}"
                        )
                    return False
        except (OSError, ValueError):
            return False
        return True

    def add(self, name: str, config: Mapping[str, str], timeout: float = 120.0) -> None:
        """Add a connector (kept for every later start) and, when the worker runs, start it
        and wait until its tasks run."""
        folder = self.home / "connectors"
        folder.mkdir(parents=True, exist_ok=True)
        body = {"name": name, "config": {"name": name, **config}}
        (folder / f"{name}.json").write_text(json.dumps(body, indent=1))
        if self.process.pid is None:
            return
        port = int(self.process.state["port"])
        _request("PUT", f"{self.url}/connectors/{name}/config", body["config"])
        deadline = time.monotonic() + timeout
        while not self._running(port, [name]):
            if time.monotonic() > deadline:
                raise ServiceError(f"connector {name} not running after {timeout:.0f}s")
            time.sleep(0.2)

    def status(self, name: str) -> dict[str, Any]:
        """The connector's status (its state and its tasks')."""
        return _request("GET", f"{self.url}/connectors/{name}/status") or {}

    def offsets(self, name: str) -> list[dict[str, Any]]:
        """The connector's flushed source offsets: ``[{"partition": …, "offset": …}]``."""
        found = _request("GET", f"{self.url}/connectors/{name}/offsets") or {}
        return list(found.get("offsets") or [])

    def stop(self, grace: float = 30.0) -> str:
        """Stop the worker (SIGTERM: it flushes its offsets; SIGKILL after ``grace``)."""
        return self.process.stop(grace)

    def kill(self) -> None:
        """Kill the worker (SIGKILL): offsets not flushed yet are lost, and what it produced
        since is produced again after the next start."""
        self.process.kill()


def _request(method: str, url: str, body: Any = None, timeout: float = 10.0) -> Any:
    """A REST call: the answer's JSON (``None`` for 404 or an empty answer)."""
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(url, data=data, method=method)
    req.add_header("Accept", "application/json")
    if data is not None:
        req.add_header("Content-Type", "application/json")
    try:
        with urllib.request.urlopen(req, timeout=timeout) as resp:
            text = resp.read()
    except urllib.error.HTTPError as e:
        if e.code == 404:
            return None
        detail = e.read().decode(errors="replace")[:2000]
        raise ServiceError(f"{method} {url}: HTTP {e.code}: {detail}") from None
    return json.loads(text) if text.strip() else None
