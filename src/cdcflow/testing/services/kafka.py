"""A single-node Apache Kafka broker in KRaft mode (broker and controller in one process), from
the official Maven artifacts ``org.apache.kafka:kafka_2.13``.

Kafka 4.3: the line Debezium 3.6's Kafka Connect is built against, so one broker serves the
connector and cdcflow; Spark's Kafka connectors (kafka-clients 3.9 for Spark 4.1, 3.4 for
Spark 3.5) talk to it. Topics get three partitions unless created otherwise.
"""

from __future__ import annotations

import base64
import socket
import struct
import subprocess
import time
import uuid
from pathlib import Path

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

VERSION = "4.3.1"
#: The SLF4J binding the distribution ships and the broker's pom does not name.
LOG4J = "2.25.4"

POM = """<project xmlns="http://maven.apache.org/POM/4.0.0">
  <modelVersion>4.0.0</modelVersion>
  <groupId>cdcflow.services</groupId><artifactId>kafka-broker</artifactId>
  <version>1</version><packaging>pom</packaging>
  <dependencies>
    <dependency><groupId>org.apache.kafka</groupId><artifactId>kafka_2.13</artifactId>
      <version>{version}</version></dependency>
    <dependency><groupId>org.apache.logging.log4j</groupId>
      <artifactId>log4j-slf4j-impl</artifactId><version>{log4j}</version></dependency>
  </dependencies>
</project>
"""


#: The user and password of the broker's SASL listener (PLAIN).
SASL_USER = ("cdcflow", "cdcflow-sasl-secret")


def server_properties(home: Path, port: int, controller: int, sasl: int) -> str:
    """The broker's configuration: one node, loopback only, three partitions per topic; a
    plain listener and a SASL one (PLAIN, :data:`SASL_USER`)."""
    user, password = SASL_USER
    return f"""process.roles=broker,controller
node.id=1
controller.quorum.voters=1@127.0.0.1:{controller}
listeners=PLAINTEXT://127.0.0.1:{port},SASL_PLAINTEXT://127.0.0.1:{sasl},CONTROLLER://127.0.0.1:{controller}
advertised.listeners=PLAINTEXT://127.0.0.1:{port},SASL_PLAINTEXT://127.0.0.1:{sasl}
controller.listener.names=CONTROLLER
inter.broker.listener.name=PLAINTEXT
listener.security.protocol.map=PLAINTEXT:PLAINTEXT,SASL_PLAINTEXT:SASL_PLAINTEXT,CONTROLLER:PLAINTEXT
sasl.enabled.mechanisms=PLAIN
listener.name.sasl_plaintext.plain.sasl.jaas.config=\\
    org.apache.kafka.common.security.plain.PlainLoginModule required user_{user}="{password}";
log.dirs={home / "data"}
num.partitions=3
default.replication.factor=1
auto.create.topics.enable=true
offsets.topic.replication.factor=1
offsets.topic.num.partitions=3
transaction.state.log.replication.factor=1
transaction.state.log.min.isr=1
transaction.state.log.num.partitions=3
share.coordinator.state.topic.replication.factor=1
share.coordinator.state.topic.min.isr=1
group.initial.rebalance.delay.ms=0
# after a SIGKILL the controller refuses the restarted broker until the old session expires
broker.session.timeout.ms=3000
broker.heartbeat.interval.ms=500
num.network.threads=2
num.io.threads=2
num.recovery.threads.per.data.dir=1
background.threads=2
log.cleaner.threads=1
delete.topic.enable=true
"""


def _cluster_id() -> str:
    """Kafka's text form of a UUID: base64url without padding, not starting with ``-``."""
    while True:
        text = base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")
        if not text.startswith("-"):
            return text


def _recv(s: socket.socket, n: int) -> bytes:
    buf = b""
    while len(buf) < n:
        chunk = s.recv(n - len(buf))
        if not chunk:
            raise ConnectionError("closed")
        buf += chunk
    return buf


def serving(bootstrap: str, timeout: float = 1.0) -> bool:
    """Whether a broker answers a Metadata request (the first thing every client sends) and
    lists itself."""
    host, port = bootstrap.rsplit(":", 1)
    client = b"cdcflow"
    body = struct.pack(">hhih", 3, 1, 7, len(client)) + client + struct.pack(">i", 0)
    try:
        with socket.create_connection((host, int(port)), timeout=timeout) as s:
            s.settimeout(timeout)
            s.sendall(struct.pack(">i", len(body)) + body)
            size = struct.unpack(">i", _recv(s, 4))[0]
            data = _recv(s, size)
        return struct.unpack_from(">i", data, 4)[0] > 0
    except (OSError, struct.error):
        return False


class KafkaBroker(Service):
    """One broker with its own folder (``home``): configuration, data, logs, state."""

    def __init__(self, home: Path, version: str = VERSION) -> None:
        self.home = home.resolve()
        self.version = version
        self.process = Background(self.home, b"kafka.Kafka")

    @property
    def bootstrap(self) -> str:
        """``host:port`` of the running broker."""
        found = self.process.state.get("bootstrap")
        if not found or self.process.pid is None:
            raise ServiceError(f"the broker in {self.home} is not running")
        return str(found)

    @property
    def sasl_bootstrap(self) -> str:
        """``host:port`` of the running broker's SASL listener (PLAIN, :data:`SASL_USER`)."""
        found = self.process.state.get("sasl_bootstrap")
        if not found or self.process.pid is None:
            raise ServiceError(f"the broker in {self.home} is not running")
        return str(found)

    def _jvm(self) -> list[str]:
        lib = maven_jars(f"kafka-{self.version}", POM.format(version=self.version, log4j=LOG4J))
        return [
            java(),
            "-Xms128m",
            "-Xmx512m",
            *SMALL_JVM,
            f"-Dlog4j2.configurationFile={self.home / 'log4j2.properties'}",
            f"-Dkafka.logs.dir={self.home}",
            "-cp",
            f"{lib}/*",
        ]

    def start(self, timeout: float = 90.0) -> str:
        """Format the storage (first start), start the broker and wait until it serves;
        returns the bootstrap address. A restart keeps the data and, when they are free, the
        ports."""
        state = self.process.state
        self.home.mkdir(parents=True, exist_ok=True)
        port = state.get("port") if state.get("port") and port_free(state["port"]) else None
        port = port or free_port()
        taken = {port}
        controller = state.get("controller")
        if not controller or not port_free(controller) or controller in taken:
            controller = free_port()
            while controller in taken:
                controller = free_port()
        taken.add(controller)
        sasl = state.get("sasl_port")
        if not sasl or not port_free(sasl) or sasl in taken:
            sasl = free_port()
            while sasl in taken:
                sasl = free_port()
        props = self.home / "server.properties"
        props.write_text(server_properties(self.home, port, controller, sasl))
        (self.home / "log4j2.properties").write_text(
            log4j2("kafka", self.home / "server.log", {"kafka.request.logger": "warn"})
        )
        jvm = self._jvm()
        if not (self.home / "data" / "meta.properties").exists():
            cluster = state.get("cluster_id") or _cluster_id()
            done = subprocess.run(
                [*jvm, "kafka.tools.StorageTool", "format", "-t", cluster, "-c", str(props)],
                capture_output=True,
                text=True,
            )
            if done.returncode != 0:
                raise ServiceError(f"formatting Kafka's storage failed: {done.stdout}{done.stderr}")
            self.process.record(cluster_id=cluster)
        bootstrap = f"127.0.0.1:{port}"
        self.process.record(
            port=port,
            controller=controller,
            bootstrap=bootstrap,
            sasl_port=sasl,
            sasl_bootstrap=f"127.0.0.1:{sasl}",
        )
        started = time.monotonic()
        self.process.spawn(
            [*jvm, "kafka.Kafka", str(props)],
            lambda: serving(bootstrap),
            timeout=timeout,
            what="the Kafka broker",
        )
        self.process.record(start_seconds=round(time.monotonic() - started, 2))
        return bootstrap

    def stop(self, grace: float = 30.0) -> str:
        """Stop the broker (SIGTERM, SIGKILL after ``grace``)."""
        return self.process.stop(grace)

    def kill(self) -> None:
        """Kill the broker (SIGKILL), as a crash would."""
        self.process.kill()
