"""What the pipeline's configuration (:mod:`cdcflow.config`) and the receiver's
(:mod:`cdcflow.serve.config`) share: the model base, the one way a secret is named, the
dialect check, durations, the YAML file reading and the validation messages.

A secret is spelt the same everywhere: a key holding ``{env: NAME}`` (an environment variable)
or ``{file: PATH}`` (a file), read when the configuration is put to use, never written in the
file, never shown. The receiver's and the webhook output's earlier spelling (``token_env:
NAME``, ``secret_file: PATH`` beside the other keys) is still read, with a warning naming the
new one.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Callable, Mapping
from pathlib import Path
from types import UnionType
from typing import Any, TypeVar, Union, get_args, get_origin

import yaml
from pydantic import BaseModel, ConfigDict, ValidationError, ValidationInfo, model_validator

from cdcflow.errors import ConfigError, did_you_mean
from cdcflow.secrets import Secret, read_secret

_LOG = logging.getLogger("cdcflow.config")
_M = TypeVar("_M", bound=BaseModel)

_DURATION = re.compile(r"^\s*(\d+)\s*(s|m|h|d)\s*$")
_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400}


def parse_duration(text: str | int) -> int:
    """``90s``, ``15m``, ``12h``, ``7d`` (or plain seconds) → seconds."""
    if isinstance(text, int):
        return text
    m = _DURATION.match(text)
    if not m:
        raise ValueError(f"expected a duration like 30s, 15m, 12h or 7d, got {text!r}")
    return int(m.group(1)) * _UNITS[m.group(2)]


class ConfigModel(BaseModel):
    """The base of every configuration model: unknown keys are errors, values are frozen."""

    model_config = ConfigDict(extra="forbid", frozen=True)


class SecretFrom(ConfigModel):
    """Where a secret comes from: an environment variable (``env``) or a file (``file``),
    exactly one. The value itself never appears in a configuration."""

    env: str | None = None
    file: str | None = None

    @model_validator(mode="after")
    def _one(self) -> SecretFrom:
        if (self.env is None) == (self.file is None):
            raise ValueError("give exactly one of env or file")
        return self

    def read(self, where: str) -> Secret:
        """The secret, read now; errors name ``where``, the variable or the file, never the
        value."""
        return read_secret(self.env, self.file, where)

    def relative_to(self, fix: Callable[[str], str]) -> SecretFrom:
        """A copy whose file is resolved by ``fix`` (a relative path against the configuration
        file's folder)."""
        return self.model_copy(update={"file": fix(self.file)}) if self.file else self


def old_secret_keys(data: Any, key: str, env_key: str, file_key: str, where: str) -> Any:
    """``data`` (a model's mapping before validation) with the deprecated spelling ``env_key:
    NAME`` / ``file_key: PATH`` turned into ``key: {env: NAME}`` / ``key: {file: PATH}``, and a
    warning naming the new spelling (``where``: the model, for the warning)."""
    if not isinstance(data, Mapping) or not (env_key in data or file_key in data):
        return data
    if key in data:
        raise ValueError(f"give {key} alone: {env_key}/{file_key} are its deprecated spelling")
    out = dict(data)
    found = {
        kind: out.pop(old) for kind, old in (("env", env_key), ("file", file_key)) if old in out
    }
    for kind, value in found.items():
        old = env_key if kind == "env" else file_key
        _LOG.warning(
            "%s: '%s: %s' is deprecated, write '%s: {%s: %s}' (a secret is spelt so everywhere)",
            where,
            old,
            value,
            key,
            kind,
            value,
        )
    out[key] = found
    return out


def known_dialect(v: str) -> str:
    """The validator of a ``dialect`` key: ``auto`` or a registered dialect (the error names
    the closest)."""
    from cdcflow.dialects import dialect_class
    from cdcflow.errors import UnknownDialectError

    if v != "auto":
        try:
            dialect_class(v)
        except UnknownDialectError as e:
            raise ValueError(e.message) from None
    return v


def check_declared_types(
    types: dict[str, dict[str, str]], info: ValidationInfo
) -> dict[str, dict[str, str]]:
    """The validator of a source's (or a receiver endpoint's) declared column types: each read
    by its ``dialect`` before any message is (a dialect that failed its own check is left to
    that error)."""
    from cdcflow.dialects import declared_type_problems

    dialect = info.data.get("dialect")
    problems = declared_type_problems(dialect, types) if dialect is not None else []
    if problems:
        raise ValueError("; ".join(problems))
    return types


def read_yaml_mapping(path: str | Path) -> dict[str, Any]:
    """A YAML configuration file's top-level mapping (an empty file: ``{}``)."""
    p = Path(path)
    if not p.exists():
        raise ConfigError(f"configuration file not found: {p}")
    try:
        data = yaml.safe_load(p.read_text()) or {}
    except yaml.YAMLError as e:
        raise ConfigError(f"{p} is not valid YAML: {e}") from None
    if not isinstance(data, dict):
        raise ConfigError(f"{p} must hold a mapping at the top level")
    return data


def validate(model: type[_M], data: Mapping[str, Any], what: str) -> _M:
    """``data`` validated as ``model``; a :class:`ConfigError` naming each bad key otherwise
    (``what``: the configuration, for the message)."""
    try:
        return model.model_validate(dict(data))
    except ValidationError as e:
        raise ConfigError(validation_message(e, what, model)) from None


def validation_message(err: ValidationError, what: str, model: type[BaseModel]) -> str:
    """A configuration's validation errors, naming each bad key; an unknown key gets the
    closest allowed one and the keys allowed where it stands (``model``: the configuration's
    model). Values given are not echoed (they may be secrets), but for a key taking one of a
    few fixed words (a literal), where the word given is shown beside those allowed."""
    lines = []
    for e in err.errors(include_url=False):
        loc = ".".join(str(p) for p in e["loc"]) or "(top level)"
        msg = e["msg"]
        if e["type"] == "extra_forbidden":
            msg = "unknown key" + _allowed_keys(model, e["loc"])
        elif e["type"] == "literal_error" and isinstance(e.get("input"), str | int | bool):
            msg = f"{msg} (got {e['input']!r})"
        elif msg.startswith("Value error, "):
            msg = msg[len("Value error, ") :]
        lines.append(f"{loc}: {msg}")
    return f"invalid {what}: " + "; ".join(lines)


def _allowed_keys(model: type[BaseModel], loc: tuple[int | str, ...]) -> str:
    """``. Did you mean 'x'? Allowed keys: …`` for the unknown key at ``loc``, ``""`` where
    the mapping it stands in is not a model's (a free-form mapping takes any key)."""
    found = _model_at(model, loc[:-1])
    if found is None:
        return ""
    known = sorted(found.model_fields)
    return f"{did_you_mean(str(loc[-1]), known) or '.'} Allowed keys: {', '.join(known)}"


def _model_at(model: type[BaseModel], loc: tuple[int | str, ...]) -> type[BaseModel] | None:
    """The model of the mapping at ``loc`` (list indexes and mapping keys stepped through)."""
    current: Any = model
    steps = list(loc)
    while steps:
        if not (isinstance(current, type) and issubclass(current, BaseModel)):
            return None
        found = current.model_fields.get(str(steps.pop(0)))
        if found is None:
            return None
        current = found.annotation
        while True:  # X | None, list[X], dict[str, X]: into X, as far as the location goes
            args = [a for a in get_args(current) if a is not type(None)]
            origin = get_origin(current)
            if origin in (Union, UnionType):
                models = [a for a in args if isinstance(a, type) and issubclass(a, BaseModel)]
                current = models[0] if len(models) == 1 else None
            elif origin in (list, dict) and args and steps:
                steps.pop(0)
                current = args[-1]
            else:
                break
    return current if isinstance(current, type) and issubclass(current, BaseModel) else None
