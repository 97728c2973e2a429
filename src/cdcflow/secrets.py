"""Secrets from the environment or a file, never from the configuration itself, and never
shown: the one way a webhook's signing key, the receiver's tokens and a Kafka source's SASL
settings are read."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from cdcflow.errors import ConfigError


class Secret:
    """A secret value that never shows itself in ``repr``, ``str`` or logs."""

    __slots__ = ("_value", "origin")

    def __init__(self, value: bytes, origin: str) -> None:
        self._value = value
        self.origin = origin  # "env NAME" / "file PATH": safe to show

    def reveal(self) -> bytes:
        """The secret's bytes (to sign, compare, or hand to a client library)."""
        return self._value

    def text(self) -> str:
        """The secret as text (UTF-8)."""
        return self._value.decode("utf-8")

    def __repr__(self) -> str:
        return f"Secret(<hidden>, from {self.origin})"

    __str__ = __repr__

    def __reduce__(self) -> Any:
        raise TypeError("secrets are not pickled")


def read_secret(env: str | None, file: str | None, where: str) -> Secret:
    """Read a secret now from the environment variable ``env`` or the file ``file`` (exactly one
    given); errors name ``where``, the variable or the file, never the value. Surrounding
    whitespace is dropped."""
    if (env is None) == (file is None):
        raise ConfigError(f"{where}: give exactly one of an environment variable or a file")
    if env is not None:
        value = os.environ.get(env)
        if value is None or not value.strip():
            raise ConfigError(f"{where}: environment variable {env} is not set or empty")
        return Secret(value.strip().encode("utf-8"), f"env {env}")
    assert file is not None
    try:
        data = Path(file).read_bytes()
    except OSError as e:
        raise ConfigError(f"{where}: cannot read secret file {file}: {e.strerror}") from None
    data = data.strip()
    if not data:
        raise ConfigError(f"{where}: secret file {file} is empty")
    return Secret(data, f"file {file}")
