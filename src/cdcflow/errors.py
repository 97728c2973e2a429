"""Errors raised by cdcflow.

Every error has a stable ``code`` (printed as ``[CODE] message``) and pickles, because Spark
ships exceptions between the driver and Python workers.

::

    CdcflowError                      root; ``code``, ``message``, ``hint``
    ├── ConfigError                   bad configuration value (terminal)
    ├── EnvironmentProblem            missing java, jar, ... (terminal)
    ├── UnknownDialectError           dialect name not registered (terminal)
    ├── DecodeError                   one raw message could not be decoded (per message)
    └── CommandFailed                 a command failed while running (exit status 1)

``DecodeError`` is a per-message problem: the pipeline dead-letters the message and goes on
(events the engine or an output cannot apply are dead-lettered by SQL, with the codes of
:mod:`cdcflow.codes`, never raised). The others stop a command with a clear message: exit
status 2 (it could not start: a configuration, an argument, a path, another run), or 1 for
``CommandFailed``.
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable
from typing import Any


class CdcflowError(Exception):
    """Root of all cdcflow errors: a stable code, a message naming the problem, a hint."""

    code: str = "CDCFLOW_ERROR"

    def __init__(self, message: str, *, code: str | None = None, hint: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        if code is not None:
            self.code = code
        self.hint = hint

    def __reduce__(self) -> tuple[Any, ...]:
        return (_rebuild, (type(self), self.message, self.code, self.hint))

    def __str__(self) -> str:
        return f"[{self.code}] {self.message}"


def did_you_mean(name: str, known: Iterable[str]) -> str:
    """`` Did you mean 'x'?`` for the known name closest to ``name``, else ``""``."""
    close = difflib.get_close_matches(name, list(known), n=1)
    return f". Did you mean {close[0]!r}?" if close else ""


def _rebuild(cls: type[CdcflowError], message: str, code: str, hint: str | None) -> CdcflowError:
    return cls(message, code=code, hint=hint)


class ConfigError(CdcflowError):
    """A configuration value is wrong; the message names the key and the allowed values."""

    code = "CONFIG_INVALID"


class EnvironmentProblem(CdcflowError):
    """Something the machine must provide is missing (java, the Iceberg jar, ...)."""

    code = "ENVIRONMENT"


class UnknownDialectError(CdcflowError):
    """A dialect name is not registered."""

    code = "DIALECT_UNKNOWN"


class DecodeError(CdcflowError):
    """One raw message could not be turned into canonical events."""

    code = "DECODE_FAILED"


class CommandFailed(CdcflowError):
    """A command failed while running (Spark failed, or cdcflow itself: exit status 1)."""

    code = "FAILED"
