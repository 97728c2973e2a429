"""Configuration of ``cdcflow serve``: a YAML file validated with clear errors.

Example::

    listen: {host: 0.0.0.0, port: 8443}
    tls: {cert_file: ./tls/cert.pem, key_file: ./tls/key.pem}   # optional: HTTPS
    landing: ./landing                 # root of the landing zones the pipeline reads
    max_body_size: 10MB                # larger bodies are answered 413
    max_in_flight: 64                  # more concurrent requests are answered 503
    retry_after: 5s                    # Retry-After of 503 answers
    body_timeout: 30s                  # a body not received in full by then is answered 408
    endpoints:
      - path: /crdb                    # CockroachDB webhook sink
        dialect: cockroachdb
        landing: crdb                  # sub-folder of `landing` (a pipeline source path)
        auth:
          bearer: {token: {env: CRDB_WEBHOOK_TOKEN}}
      - path: /events                  # a unified-format producer
        dialect: savegress
        landing: savegress
        auth:
          signature:
            secret: {file: /run/secrets/webhook}   # or {env: NAME}
            timestamp_tolerance: 5m
            replay_window: 7d
    grpc:                              # optional: the gRPC endpoint (receiver.proto)
      listen: {host: 0.0.0.0, port: 50051}
      tls: {cert_file: ./tls/cert.pem, key_file: ./tls/key.pem, client_ca_file: ./tls/ca.pem}
      endpoints:
        - name: events                 # metadata cdcflow-endpoint: events
          landing: savegress           # may share a savegress endpoint's folder
          auth:
            bearer: {token: {env: EVENTS_GRPC_TOKEN}}

Secrets are read from environment variables or files only, never written in the file, spelt as
in the pipeline's configuration (:class:`cdcflow.config_base.SecretFrom`); the configuration
holds their names, and the values live in :class:`Secret` objects whose ``repr``/``str`` hide
them. Validation errors name the bad key and never echo values.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import Any, Literal

from pydantic import Field, field_validator, model_validator

from cdcflow.config_base import (
    ConfigModel,
    SecretFrom,
    check_declared_types,
    known_dialect,
    old_secret_keys,
    parse_duration,
    read_yaml_mapping,
    validate,
)
from cdcflow.errors import ConfigError
from cdcflow.secrets import Secret

_SIZE = re.compile(r"^\s*(\d+)\s*(b|k|kb|kib|m|mb|mib|g|gb|gib)?\s*$", re.IGNORECASE)
_SIZE_UNITS = {
    "": 1,
    "b": 1,
    "k": 1024,
    "kb": 1000,
    "kib": 1024,
    "m": 1024**2,
    "mb": 1000**2,
    "mib": 1024**2,
    "g": 1024**3,
    "gb": 1000**3,
    "gib": 1024**3,
}


def parse_size(value: str | int) -> int:
    """``10MB``, ``512KiB``, ``1m`` (or plain bytes) → bytes."""
    if isinstance(value, bool):
        raise ValueError("expected a size like 10MB or 512KiB")
    if isinstance(value, int):
        if value <= 0:
            raise ValueError("must be positive")
        return value
    m = _SIZE.match(str(value))
    if not m:
        raise ValueError(f"expected a size like 10MB or 512KiB, got {value!r}")
    size = int(m.group(1)) * _SIZE_UNITS[(m.group(2) or "").lower()]
    if size <= 0:
        raise ValueError("must be positive")
    return size


class SignatureAuth(ConfigModel):
    """The unified format's HMAC signature (``X-Savegress-Signature``), keyed with ``secret``,
    and its companions."""

    secret: SecretFrom
    timestamp_tolerance: str = "5m"
    require_timestamp: bool = True
    replay_window: str = "7d"
    require_event_id: bool = False

    @model_validator(mode="before")
    @classmethod
    def _old_secret(cls, data: Any) -> Any:
        return old_secret_keys(data, "secret", "secret_env", "secret_file", "auth.signature")

    @field_validator("timestamp_tolerance", "replay_window")
    @classmethod
    def _duration(cls, v: str) -> str:
        parse_duration(v)
        return v


class BearerAuth(ConfigModel):
    """``Authorization: Bearer <token>`` (e.g. CockroachDB's ``webhook_auth_header``)."""

    token: SecretFrom

    @model_validator(mode="before")
    @classmethod
    def _old_secret(cls, data: Any) -> Any:
        return old_secret_keys(data, "token", "token_env", "token_file", "auth.bearer")


class AuthConfig(ConfigModel):
    """How an endpoint authenticates requests (both may be set: both must pass)."""

    signature: SignatureAuth | None = None
    bearer: BearerAuth | None = None


def _landing_subdir(v: str | None) -> str | None:
    """A landing sub-folder as configured, checked to stay inside the landing root."""
    if v is None:
        return v
    parts = PurePosixPath(v).parts
    if (
        not parts
        or PurePosixPath(v).is_absolute()
        or any(p in ("..", ".") or p.startswith(("_", ".")) for p in parts)
    ):
        raise ValueError(
            "must be a relative sub-folder without '..' and no part starting with _ or ."
        )
    return v


class EndpointConfig(ConfigModel):
    """One URL path, the dialect of its bodies and where they land."""

    path: str
    dialect: str = "auto"
    landing: str | None = None
    auth: AuthConfig = Field(default_factory=AuthConfig)
    keys: dict[str, list[str]] = Field(default_factory=dict)
    types: dict[str, dict[str, str]] = Field(default_factory=dict)
    options: dict[str, Any] = Field(default_factory=dict)
    item_rejections: Literal["land", "reject"] = "land"

    @field_validator("path")
    @classmethod
    def _path(cls, v: str) -> str:
        if not v.startswith("/") or "?" in v or "#" in v or v in ("/healthz", "/metrics"):
            raise ValueError("must start with / and not be /healthz or /metrics")
        return v.rstrip("/") or "/"

    _known_dialect = field_validator("dialect")(known_dialect)
    _readable_types = field_validator("types")(check_declared_types)
    _subdir = field_validator("landing")(_landing_subdir)

    @property
    def subdir(self) -> str:
        """The landing sub-folder (default: the path without slashes)."""
        if self.landing:
            return self.landing
        name = re.sub(r"[^A-Za-z0-9-]+", "-", self.path.strip("/")).strip("-")
        return name or "root"


class ListenConfig(ConfigModel):
    """Address the receiver binds."""

    host: str = "127.0.0.1"
    port: int = Field(default=8080, ge=0, le=65535)


class TlsConfig(ConfigModel):
    """HTTPS: a PEM certificate (chain) and its private key."""

    cert_file: str
    key_file: str


class GrpcTlsConfig(TlsConfig):
    """TLS of the gRPC endpoint; with ``client_ca_file`` clients must present a certificate
    signed by one of its certificates."""

    client_ca_file: str | None = None


class GrpcAuthConfig(ConfigModel):
    """How a gRPC endpoint authenticates calls (``authorization: Bearer <token>`` metadata)."""

    bearer: BearerAuth | None = None


_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")


class GrpcEndpointConfig(ConfigModel):
    """One gRPC endpoint: the name calls give in their ``cdcflow-endpoint`` metadata, where its
    ``CDCEvent`` messages land (dialect ``savegress``) and how they are decoded."""

    name: str
    landing: str | None = None
    auth: GrpcAuthConfig = Field(default_factory=GrpcAuthConfig)
    keys: dict[str, list[str]] = Field(default_factory=dict)
    types: dict[str, dict[str, str]] = Field(default_factory=dict)
    options: dict[str, Any] = Field(default_factory=dict)

    @field_validator("types")
    @classmethod
    def _readable_types(cls, v: dict[str, dict[str, str]]) -> dict[str, dict[str, str]]:
        from cdcflow.dialects import declared_type_problems

        problems = declared_type_problems("savegress", v)
        if problems:
            raise ValueError("; ".join(problems))
        return v

    @field_validator("name")
    @classmethod
    def _name(cls, v: str) -> str:
        if not _NAME.match(v):
            raise ValueError("must be 1-64 letters, digits, '.', '_' or '-'")
        return v

    _subdir = field_validator("landing")(_landing_subdir)

    @property
    def subdir(self) -> str:
        """The landing sub-folder (default: the endpoint's name)."""
        return self.landing or self.name


class GrpcConfig(ConfigModel):
    """The gRPC endpoint of the receiver, beside the HTTP one."""

    listen: ListenConfig = Field(default_factory=lambda: ListenConfig(port=50051))
    tls: GrpcTlsConfig | None = None
    endpoints: list[GrpcEndpointConfig] = Field(min_length=1)

    @model_validator(mode="after")
    def _unique(self) -> GrpcConfig:
        seen: set[str] = set()
        for ep in self.endpoints:
            if ep.name in seen:
                raise ValueError(f"gRPC endpoint name {ep.name} is configured twice")
            seen.add(ep.name)
        return self


class ServeConfig(ConfigModel):
    """A whole receiver (``cdcflow serve CONFIG``)."""

    listen: ListenConfig = Field(default_factory=ListenConfig)
    tls: TlsConfig | None = None
    landing: str
    max_body_size: int | str = "10MiB"
    max_in_flight: int = Field(default=64, ge=1)
    retry_after: str = "5s"
    body_timeout: str = "30s"
    endpoints: list[EndpointConfig] = Field(default_factory=list)
    grpc: GrpcConfig | None = None

    @field_validator("max_body_size")
    @classmethod
    def _size(cls, v: int | str) -> int | str:
        parse_size(v)
        return v

    @field_validator("retry_after", "body_timeout")
    @classmethod
    def _duration(cls, v: str) -> str:
        if parse_duration(v) < 1:
            raise ValueError("must be at least 1s")
        return v

    @model_validator(mode="after")
    def _unique(self) -> ServeConfig:
        if not self.endpoints and self.grpc is None:
            raise ValueError("endpoints: give at least one endpoint (or a grpc section)")
        seen: set[str] = set()
        dialects: dict[str, str] = {}
        for ep in self.endpoints:
            if ep.path in seen:
                raise ValueError(f"endpoint path {ep.path} is configured twice")
            seen.add(ep.path)
            dialects[ep.subdir] = ep.dialect
        for gep in self.grpc.endpoints if self.grpc else []:
            other = dialects.get(gep.subdir, "savegress")
            if other != "savegress":
                raise ValueError(
                    f"grpc endpoint {gep.name} lands in {gep.subdir}, the folder of an endpoint "
                    f"of dialect {other}: one landing folder holds one dialect"
                )
        return self

    @property
    def max_body_bytes(self) -> int:
        return parse_size(self.max_body_size)

    @property
    def retry_after_seconds(self) -> int:
        return max(1, parse_duration(self.retry_after))

    @property
    def body_timeout_seconds(self) -> int:
        return parse_duration(self.body_timeout)


@dataclass(frozen=True)
class EndpointRuntime:
    """An endpoint with its secrets read."""

    config: EndpointConfig
    signing_secret: Secret | None = None
    bearer_token: Secret | None = None
    where: str = ""

    def __repr__(self) -> str:
        return (
            f"EndpointRuntime(path={self.config.path!r}, dialect={self.config.dialect!r}, "
            f"signature={'on' if self.signing_secret else 'off'}, "
            f"bearer={'on' if self.bearer_token else 'off'})"
        )


@dataclass(frozen=True)
class GrpcEndpointRuntime:
    """A gRPC endpoint with its token read."""

    config: GrpcEndpointConfig
    bearer_token: Secret | None = None

    def __repr__(self) -> str:
        return (
            f"GrpcEndpointRuntime(name={self.config.name!r}, "
            f"bearer={'on' if self.bearer_token else 'off'})"
        )


@dataclass(frozen=True)
class Settings:
    """A validated configuration with secrets resolved and paths absolute."""

    config: ServeConfig
    landing: Path
    endpoints: dict[str, EndpointRuntime] = field(default_factory=dict)
    grpc_endpoints: dict[str, GrpcEndpointRuntime] = field(default_factory=dict)

    def __repr__(self) -> str:
        return (
            f"Settings(landing={str(self.landing)!r}, endpoints={list(self.endpoints)!r}, "
            f"grpc_endpoints={list(self.grpc_endpoints)!r})"
        )


def load_serve_config(
    data: Mapping[str, Any], origin: str = "", base: Path | None = None
) -> Settings:
    """Validate a configuration mapping and read its secrets."""
    cfg = validate(ServeConfig, data, f"serve configuration {origin}".strip())
    root = base or Path.cwd()

    def fix(path: str) -> str:
        p = Path(path).expanduser()
        return str(p if p.is_absolute() else (root / p).resolve())

    if cfg.tls is not None:
        tls = TlsConfig(cert_file=fix(cfg.tls.cert_file), key_file=fix(cfg.tls.key_file))
        for key, path in (("cert_file", tls.cert_file), ("key_file", tls.key_file)):
            if not Path(path).is_file():
                raise ConfigError(
                    f"invalid serve configuration {origin}: tls.{key}: no file {path}"
                )
        cfg = cfg.model_copy(update={"tls": tls})
    endpoints: dict[str, EndpointRuntime] = {}
    for i, ep in enumerate(cfg.endpoints):
        where = f"endpoints.{i}.auth"
        sig, bearer = ep.auth.signature, ep.auth.bearer
        endpoints[ep.path] = EndpointRuntime(
            config=ep,
            signing_secret=sig.secret.relative_to(fix).read(f"{where}.signature.secret")
            if sig
            else None,
            bearer_token=bearer.token.relative_to(fix).read(f"{where}.bearer.token")
            if bearer
            else None,
            where=f"endpoints.{i}",
        )
    grpc_endpoints: dict[str, GrpcEndpointRuntime] = {}
    if cfg.grpc is not None:
        gtls = cfg.grpc.tls
        if gtls is not None:
            gtls = gtls.model_copy(
                update={
                    k: fix(v)
                    for k in ("cert_file", "key_file", "client_ca_file")
                    if (v := getattr(gtls, k)) is not None
                }
            )
            for key in ("cert_file", "key_file", "client_ca_file"):
                path = getattr(gtls, key)
                if path is not None and not Path(path).is_file():
                    raise ConfigError(
                        f"invalid serve configuration {origin}: grpc.tls.{key}: no file {path}"
                    )
            cfg = cfg.model_copy(update={"grpc": cfg.grpc.model_copy(update={"tls": gtls})})
        assert cfg.grpc is not None
        for i, gep in enumerate(cfg.grpc.endpoints):
            bearer = gep.auth.bearer
            where = f"grpc.endpoints.{i}.auth.bearer.token"
            grpc_endpoints[gep.name] = GrpcEndpointRuntime(
                config=gep,
                bearer_token=bearer.token.relative_to(fix).read(where) if bearer else None,
            )
    return Settings(
        config=cfg,
        landing=Path(fix(cfg.landing)),
        endpoints=endpoints,
        grpc_endpoints=grpc_endpoints,
    )


def load_serve_config_file(path: str | Path) -> Settings:
    """Read and validate a YAML configuration file (relative paths against its folder)."""
    p = Path(path)
    return load_serve_config(read_yaml_mapping(p), f"({p})", p.parent.resolve())
