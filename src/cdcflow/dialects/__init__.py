"""The dialect registry: each dialect's decoder, renderer, Kafka form and page, imported lazily.

A dialect is one package, ``cdcflow/dialects/<name>/``: its decoder class in ``dialect.py``,
its renderer (the producer simulation the demo and the tests use) in ``render.py``, its Kafka
form, where the producer writes to Kafka, in ``kafka.py``; its page is
``docs/dialects/<name>.md``. Adding one is that package, its page and one line in
:data:`DIALECTS` (see ``docs/dialects/README.md``). Unknown names fail with the list of known
names and the closest match.
"""

from __future__ import annotations

import importlib
import random
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING

from cdcflow.dialects.base import Dialect
from cdcflow.dialects.model import DialectOptions
from cdcflow.errors import UnknownDialectError, did_you_mean
from cdcflow.types import ValueTypeError

if TYPE_CHECKING:
    from cdcflow.dialects.rendering import KafkaDelivery, RenderResult
    from cdcflow.simulation.workload import Change, Workload


@dataclass(frozen=True)
class Registered:
    """One dialect's parts, all in the package ``cdcflow.dialects.<name>``."""

    name: str
    #: The decoder class, in ``<name>/dialect.py``.
    decoder_class: str
    #: Whether the producer writes to Kafka (a Kafka form in ``<name>/kafka.py``).
    kafka: bool = False

    @property
    def decoder(self) -> str:
        """``module:class`` of the decoder."""
        return f"cdcflow.dialects.{self.name}.dialect:{self.decoder_class}"

    @property
    def renderer(self) -> str:
        """The renderer's module."""
        return f"cdcflow.dialects.{self.name}.render"

    @property
    def kafka_form(self) -> str | None:
        """The Kafka form's module, if the producer writes to Kafka."""
        return f"cdcflow.dialects.{self.name}.kafka" if self.kafka else None

    @property
    def docs(self) -> str:
        """The dialect's page, from the repository's root."""
        return f"docs/dialects/{self.name}.md"


#: Every dialect, by name.
DIALECTS: dict[str, Registered] = {
    r.name: r
    for r in (
        Registered("cockroachdb", "CockroachDbDialect", kafka=True),
        Registered("datastream", "DatastreamDialect"),
        Registered("debezium", "DebeziumDialect", kafka=True),
        Registered("savegress", "SavegressDialect", kafka=True),
        Registered("sqlserver_ces", "SqlServerCesDialect", kafka=True),
    )
}

_CLASSES: dict[str, type[Dialect]] = {}


def dialect_names() -> list[str]:
    """Registered dialect names, sorted."""
    return sorted(DIALECTS)


def registered(name: str) -> Registered:
    """Where the dialect registered as ``name`` lives."""
    found = DIALECTS.get(name)
    if found is None:
        known = dialect_names()
        raise UnknownDialectError(
            f"unknown dialect {name!r}; known dialects: {', '.join(known)}"
            f"{did_you_mean(name, known) or '.'}",
            hint="use --dialect auto to detect the dialect of each message",
        )
    return found


def dialect_class(name: str) -> type[Dialect]:
    """The decoder class registered as ``name`` (imported on first use)."""
    if name not in _CLASSES:
        module_name, _, cls_name = registered(name).decoder.partition(":")
        _CLASSES[name] = getattr(importlib.import_module(module_name), cls_name)
    return _CLASSES[name]


def get_dialect(name: str, options: DialectOptions | None = None, *, wire: bool = False) -> Dialect:
    """An instance of the dialect registered as ``name`` (``wire``: values as wire strings)."""
    return dialect_class(name)(options, wire=wire)


# --------------------------------------------------------------------------- renderers


def _renderer_module(name: str) -> ModuleType:
    return importlib.import_module(registered(name).renderer)


def renderer(name: str) -> Callable[..., RenderResult]:
    """The dialect's renderer: a workload (the ``transactions`` of it) rendered into a landing
    zone as its producer writes it, with the producer's delivery faults when ``faults``; the
    files written and the decoder options they need."""
    from cdcflow.dialects.rendering import RenderJob

    module = _renderer_module(name)

    def render(
        workload: Workload,
        landing: Path,
        *,
        seed: int,
        transactions: slice | None = None,
        faults: bool = True,
    ) -> RenderResult:
        return module.render(RenderJob(workload, landing, seed, transactions, faults))

    return render


def declared_type_problems(dialect: str, types: Mapping[str, Mapping[str, str]]) -> list[str]:
    """What is wrong with a source's declared column types (``table → column → type``) for
    ``dialect`` (``auto``: a type some dialect reads), one line per column naming it, with
    what to declare instead; checked when a configuration is read, before any message."""
    classes = [dialect_class(n) for n in (dialect_names() if dialect == "auto" else [dialect])]
    problems: list[str] = []
    for table, columns in types.items():
        for column, native in columns.items():
            problem = _unreadable(classes, native)
            if problem is not None:
                problems.append(f"{table}.{column}: {problem}")
    return problems


def _unreadable(classes: list[type[Dialect]], native: str) -> str | None:
    """Why none of ``classes`` reads a declared type (``None`` when one does); for several,
    in words of no dialect in particular."""
    for cls in classes:
        try:
            cls.declared_type(native)
        except ValueTypeError as e:
            problem = str(e)
        else:
            return None
    if len(classes) > 1:
        try:
            Dialect.declared_type(native)
        except ValueTypeError as e:
            problem = str(e)
    return problem


def renderer_features(name: str) -> frozenset[str]:
    """Workload features a dialect's format can express (its renderer's ``FEATURES``; every
    feature when it declares none)."""
    from cdcflow.simulation.workload import ALL_FEATURES

    return frozenset(getattr(_renderer_module(name), "FEATURES", ALL_FEATURES))


def renderer_event_kinds(name: str) -> frozenset[str]:
    """Change kinds that become events in a dialect's rendering (``EVENT_KINDS``; every kind
    when the renderer declares none)."""
    from cdcflow.dialects.rendering import KIND_OPERATIONS

    return frozenset(getattr(_renderer_module(name), "EVENT_KINDS", KIND_OPERATIONS))


def renderer_event_operations(name: str) -> Callable[[Change, Workload], list[str]]:
    """How a dialect's rendering (without faults) turns one change into events: the canonical
    operations, in order. The renderer's ``event_operations`` when it declares one, else one
    operation per change whose kind is in its ``EVENT_KINDS`` (none for other kinds)."""
    from cdcflow.dialects.rendering import KIND_OPERATIONS

    declared = getattr(_renderer_module(name), "event_operations", None)
    if declared is not None:
        return declared
    kinds = renderer_event_kinds(name)

    def one_each(change: Change, workload: Workload) -> list[str]:
        return [KIND_OPERATIONS[change.kind]] if change.kind in kinds else []

    return one_each


def renderer_transport(name: str) -> Callable[..., RenderResult] | None:
    """The renderer's ``render_transport`` (a transport of the format's own), if it has one."""
    return getattr(_renderer_module(name), "render_transport", None)


# --------------------------------------------------------------------------- Kafka forms


def kafka_dialects() -> list[str]:
    """Dialects whose producer writes to Kafka, sorted."""
    return [n for n in dialect_names() if DIALECTS[n].kafka]


def kafka_delivery(
    name: str,
    workload: Workload,
    *,
    seed: int,
    faults: bool = True,
    partitions: int = 3,
    prefix: str | None = None,
) -> KafkaDelivery:
    """A workload in the dialect's Kafka form, its topics starting with ``prefix`` (default:
    the form's ``PREFIX``: the connector's topic prefix, the database of CockroachDB's full
    table names, the event hub); with ``faults``, records sent twice and a run of records sent
    again, as after a producer restart (order across partitions is whatever the broker
    gives)."""
    from cdcflow.dialects.rendering import resent

    module = _kafka_module(name)
    found: KafkaDelivery = module.records(
        workload, seed=seed, faults=faults, partitions=partitions, prefix=prefix or module.PREFIX
    )
    if faults:
        found.records = resent(found.records, random.Random(seed + 1))
    return found


def _kafka_module(name: str) -> ModuleType:
    module = registered(name).kafka_form
    if module is None:
        raise ValueError(f"dialect {name!r} has no Kafka form; those with one: {kafka_dialects()}")
    return importlib.import_module(module)
