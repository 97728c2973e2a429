"""Iceberg's REST catalog server (``org.apache.iceberg.rest.RESTCatalogServer``, published as
the test fixtures of ``org.apache.iceberg:iceberg-open-api``), over Iceberg's JDBC catalog on an
SQLite file and a local warehouse.

The fixtures' poms name no dependencies, so :data:`POM` lists the server's runtime: Iceberg's
core (and its test jar, which holds the REST adapter and servlet), Jetty 12, the SQLite driver,
and the few pieces of Hadoop's that its file IO loads. The server reads its settings from
``CATALOG_*`` environment variables; it binds every interface (it has no host setting), on the
free port it is given.
"""

from __future__ import annotations

import os
import time
import urllib.error
import urllib.request
from pathlib import Path

from cdcflow.testing.services.base import (
    SMALL_JVM,
    Background,
    Service,
    ServiceError,
    free_port,
    java,
    maven_jars,
)

#: The newest Iceberg release whose REST fixtures are published; clients of 1.12 talk to it.
VERSION = "1.11.0"

POM = """<project xmlns="http://maven.apache.org/POM/4.0.0">
  <modelVersion>4.0.0</modelVersion>
  <groupId>cdcflow.services</groupId><artifactId>iceberg-rest</artifactId>
  <version>1</version><packaging>pom</packaging>
  <dependencyManagement><dependencies>
    <dependency><groupId>org.apache.commons</groupId><artifactId>commons-lang3</artifactId>
      <version>3.18.0</version></dependency>
  </dependencies></dependencyManagement>
  <dependencies>
    <dependency><groupId>org.apache.iceberg</groupId><artifactId>iceberg-open-api</artifactId>
      <version>{iceberg}</version><classifier>test-fixtures</classifier></dependency>
    <dependency><groupId>org.apache.iceberg</groupId><artifactId>iceberg-core</artifactId>
      <version>{iceberg}</version><classifier>tests</classifier></dependency>
    <dependency><groupId>org.apache.iceberg</groupId><artifactId>iceberg-core</artifactId>
      <version>{iceberg}</version></dependency>
    <dependency><groupId>org.eclipse.jetty.ee10</groupId><artifactId>jetty-ee10-servlet</artifactId>
      <version>12.1.8</version></dependency>
    <dependency><groupId>org.eclipse.jetty.compression</groupId>
      <artifactId>jetty-compression-server</artifactId><version>12.1.8</version></dependency>
    <dependency><groupId>org.eclipse.jetty.compression</groupId>
      <artifactId>jetty-compression-gzip</artifactId><version>12.1.8</version></dependency>
    <dependency><groupId>org.xerial</groupId><artifactId>sqlite-jdbc</artifactId>
      <version>3.53.0.0</version></dependency>
    <dependency><groupId>org.apache.hadoop</groupId><artifactId>hadoop-common</artifactId>
      <version>3.4.3</version>
      <exclusions><exclusion><groupId>*</groupId><artifactId>*</artifactId></exclusion></exclusions>
    </dependency>
    <dependency><groupId>org.apache.hadoop</groupId><artifactId>hadoop-auth</artifactId>
      <version>3.4.3</version>
      <exclusions><exclusion><groupId>*</groupId><artifactId>*</artifactId></exclusion></exclusions>
    </dependency>
    <dependency><groupId>org.apache.hadoop.thirdparty</groupId>
      <artifactId>hadoop-shaded-guava</artifactId><version>1.5.0</version></dependency>
    <dependency><groupId>com.fasterxml.woodstox</groupId><artifactId>woodstox-core</artifactId>
      <version>5.4.0</version></dependency>
    <dependency><groupId>org.codehaus.woodstox</groupId><artifactId>stax2-api</artifactId>
      <version>4.2.1</version></dependency>
    <dependency><groupId>org.apache.commons</groupId><artifactId>commons-collections4</artifactId>
      <version>4.4</version></dependency>
    <dependency><groupId>org.apache.commons</groupId><artifactId>commons-configuration2</artifactId>
      <version>2.10.1</version></dependency>
    <dependency><groupId>org.slf4j</groupId><artifactId>slf4j-simple</artifactId>
      <version>2.0.17</version></dependency>
  </dependencies>
</project>
"""


def answers(uri: str) -> bool:
    """Whether a REST catalog answers ``GET /v1/config``."""
    try:
        with urllib.request.urlopen(f"{uri}/v1/config", timeout=2) as r:
            return bool(r.status == 200)
    except (urllib.error.URLError, OSError):
        return False


class RestCatalog(Service):
    """One REST catalog server with its own folder: ``catalog.db`` (the backend's SQLite
    file), ``warehouse/``, logs and state. ``name`` is the backend catalog's name."""

    def __init__(self, home: Path, name: str = "rest_backend") -> None:
        self.home = home.resolve()
        self.name = name
        self.process = Background(self.home, b"RESTCatalogServer")

    @property
    def warehouse(self) -> Path:
        """The server's warehouse folder."""
        return self.home / "warehouse"

    @property
    def uri(self) -> str:
        """The catalog's URI."""
        port = self.process.state.get("port")
        if not port or self.process.pid is None:
            raise ServiceError(f"the REST catalog in {self.home} is not running")
        return f"http://127.0.0.1:{port}"

    def start(self, timeout: float = 90.0) -> str:
        """Start the server and wait until it answers; returns :attr:`uri`. A restart keeps
        the catalog."""
        lib = maven_jars(f"iceberg-rest-{VERSION}", POM.format(iceberg=VERSION))
        self.warehouse.mkdir(parents=True, exist_ok=True)
        port = free_port()
        # the server's variables: CATALOG_ dropped, "__" → "-", "_" → "."; an underscore cannot
        # be given, so SQLite's busy timeout goes in the URL
        env = {
            **os.environ,
            "CATALOG_REST_PORT": str(port),
            "CATALOG_CATALOG_NAME": self.name,
            "CATALOG_CATALOG__IMPL": "org.apache.iceberg.jdbc.JdbcCatalog",
            "CATALOG_URI": f"jdbc:sqlite:{self.home / 'catalog.db'}?busy_timeout=60000",
            "CATALOG_JDBC_SCHEMA__VERSION": "V1",
            "CATALOG_WAREHOUSE": str(self.warehouse),
        }
        self.process.record(port=port)
        started = time.monotonic()
        self.process.spawn(
            [
                java(),
                "-Xmx256m",
                *SMALL_JVM,
                "-cp",
                f"{lib}/*",
                "org.apache.iceberg.rest.RESTCatalogServer",
            ],
            lambda: (
                answers(f"http://127.0.0.1:{port}")
                and "Started oejs.Server" in _read(self.home / "stdout.log")
            ),
            env=env,
            timeout=timeout,
            what="the Iceberg REST catalog",
        )
        self.process.record(start_seconds=round(time.monotonic() - started, 2))
        return self.uri

    def stop(self) -> str:
        """Stop the server."""
        return self.process.stop(grace=10)


def _read(path: Path) -> str:
    try:
        return path.read_text(errors="replace")
    except OSError:
        return ""
