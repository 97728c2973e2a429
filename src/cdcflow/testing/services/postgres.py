"""A PostgreSQL server from Debian's packages, on a free port of 127.0.0.1, with logical
decoding on (``wal_level=logical``), run as a non-root user.

Run as root, the server runs as Debian's ``postgres`` user: it then owns the data folder, and
the folders above it get the right to be traversed (``o+x``, not to be listed) where they lack
it. Local socket connections are trusted; TCP connections need the password of the database's
owner, a login role with ``REPLICATION`` (what Debezium connects as).
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import time
from pathlib import Path

from cdcflow.testing.services.base import (
    Background,
    Service,
    ServiceError,
    free_port,
    installing,
    program,
)

#: Settings appended to postgresql.conf at initdb.
CONF = """
listen_addresses = '127.0.0.1'
unix_socket_directories = '{socket}'
wal_level = logical
max_wal_senders = 10
max_replication_slots = 10
max_connections = 50
shared_buffers = 32MB
# a test server: no crash durability
fsync = off
full_page_writes = off
# logical decoding reads WAL up to the flush point: a commit must flush to be seen at once
synchronous_commit = on
"""


def _bin() -> Path:
    found = sorted(Path("/usr/lib/postgresql").glob("*/bin/pg_ctl"))
    if not found:
        program("pg_ctlcluster", "postgresql")
        found = sorted(Path("/usr/lib/postgresql").glob("*/bin/pg_ctl"))
    if not found:
        raise ServiceError("PostgreSQL's server programs are not in /usr/lib/postgresql/*/bin")
    return found[-1].parent


class Postgres(Service):
    """One server with its own data folder; ``database``, ``user`` and ``password`` are
    created at the first start."""

    def __init__(
        self, data: Path, database: str = "cdc", user: str = "cdc", password: str = "cdc"
    ) -> None:
        self.data = data.resolve()
        self.database, self.user, self.password = database, user, password
        self.process = Background(self.data.parent / f"{self.data.name}.state", b"postgres")
        self.bin = _bin()
        self.os_user = "postgres" if os.geteuid() == 0 else None
        if self.os_user:
            _ensure_user(self.os_user)
        # the socket's path must fit in 107 bytes
        short = self.data if len(str(self.data)) < 80 else None
        digest = hashlib.sha256(str(self.data).encode()).hexdigest()[:12]
        self.socket = short or Path("/tmp") / f"cdcflow-pg-{digest}"

    @property
    def port(self) -> int:
        """The port of the running server."""
        port = self.process.state.get("port")
        if not port:
            raise ServiceError(f"the PostgreSQL server of {self.data} was never started")
        return int(port)

    @property
    def url(self) -> str:
        """A libpq URL for the database's owner over TCP."""
        return f"postgresql://{self.user}:{self.password}@127.0.0.1:{self.port}/{self.database}"

    @property
    def jdbc_url(self) -> str:
        """The JDBC URL of the database (user and password go as properties)."""
        return f"jdbc:postgresql://127.0.0.1:{self.port}/{self.database}"

    def _run(self, *cmd: str, stdin: str | None = None) -> str:
        full = list(cmd) if self.os_user is None else ["runuser", "-u", self.os_user, "--", *cmd]
        done = subprocess.run(full, input=stdin, capture_output=True, text=True, cwd="/")
        if done.returncode != 0:
            raise ServiceError(f"{' '.join(cmd[:2])} failed: {done.stdout}{done.stderr}")
        return done.stdout

    def _owned(self, path: Path) -> None:
        path.mkdir(parents=True, exist_ok=True)
        if self.os_user:
            shutil.chown(path, self.os_user, self.os_user)
            for parent in path.parents:
                if parent == Path("/"):
                    break
                mode = parent.stat().st_mode
                if not mode & 0o001:
                    parent.chmod(mode | 0o001)
        path.chmod(0o700)

    def start(self, timeout: float = 60.0) -> str:
        """Create the cluster (first start), start it, wait for it; returns :attr:`url`."""
        self._owned(self.data)
        if self.socket != self.data:
            self._owned(self.socket)
        if not (self.data / "PG_VERSION").exists():
            self._run(
                str(self.bin / "initdb"),
                "-D",
                str(self.data),
                "-U",
                "postgres",
                "-E",
                "UTF8",
                "--locale=C",
                "--no-sync",
                "--no-instructions",
                "--auth-local=trust",
                "--auth-host=scram-sha-256",
            )
            with open(self.data / "postgresql.conf", "a") as f:
                f.write(CONF.format(socket=self.socket))
        port = free_port()
        self.process.record(port=port)
        self._run(
            str(self.bin / "pg_ctl"),
            "-D",
            str(self.data),
            "-l",
            str(self.data / "server.log"),
            "-o",
            f"-p {port} -k {self.socket}",
            "-w",
            "-t",
            str(int(timeout)),
            "start",
        )
        deadline = time.monotonic() + timeout
        while subprocess.run(
            [str(self.bin / "pg_isready"), "-q", "-h", "127.0.0.1", "-p", str(port)]
        ).returncode:
            if time.monotonic() > deadline:
                raise ServiceError(f"PostgreSQL not ready after {timeout:.0f}s ({self.data})")
            time.sleep(0.1)
        pid = int((self.data / "postmaster.pid").read_text().split()[0])
        self.process.record(pid=pid)
        self.superuser(
            """SELECT format('CREATE ROLE %I LOGIN REPLICATION PASSWORD %L', :'user', :'pw')
                 WHERE NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = :'user') \\gexec
               SELECT format('CREATE DATABASE %I OWNER %I', :'db', :'user')
                 WHERE NOT EXISTS (SELECT 1 FROM pg_database WHERE datname = :'db') \\gexec"""
        )
        return self.url

    def superuser(self, sql: str, database: str = "postgres") -> str:
        """Run SQL as the superuser over the local socket (``:'user'``, ``:'pw'``, ``:'db'``
        are the owner role, its password and the database)."""
        return self._run(
            str(self.bin / "psql"),
            "-X",
            "-q",
            "-A",
            "-t",
            "-v",
            "ON_ERROR_STOP=1",
            "-h",
            str(self.socket),
            "-p",
            str(self.port),
            "-U",
            "postgres",
            "-d",
            database,
            "-v",
            f"user={self.user}",
            "-v",
            f"pw={self.password}",
            "-v",
            f"db={self.database}",
            stdin=sql,
        )

    def stop(self) -> str:
        """Stop the server (fast shutdown)."""
        if not (self.data / "postmaster.pid").exists():
            return "not running"
        if self.os_user:
            self._owned(self.data)  # a folder above may have lost its o+x since the start
        self._run(str(self.bin / "pg_ctl"), "-D", str(self.data), "-m", "fast", "-w", "stop")
        return "stopped"


def _ensure_user(name: str) -> None:
    """The system user the server runs as (Debian's package creates ``postgres``)."""
    if subprocess.run(["id", name], capture_output=True).returncode == 0:
        return
    with installing():  # another test run may be adding it
        if subprocess.run(["id", name], capture_output=True).returncode != 0:
            subprocess.run(
                ["useradd", "--system", "--no-create-home", "--home-dir", "/", name], check=True
            )
