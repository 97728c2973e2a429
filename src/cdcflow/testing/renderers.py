"""Renderer registry: dialect name → function rendering a workload into a landing zone.

A renderer has the signature::

    render(workload, landing_dir, *, seed, transactions=slice(None), faults=True)
        -> RenderResult  (files written, DialectOptions the decoder needs)

Its module may declare ``FEATURES`` (workload features the format can express),
``EVENT_KINDS`` (change kinds that become events) and ``event_operations(change, workload) ->
list[str]`` (the canonical operations one change becomes in the rendering without faults, for
formats that write some changes as several events, e.g. a key change as a delete and an
insert).

A module whose dialect declares transports of its own (beyond JSON, Kafka records, Avro and
Event Hubs Capture, which the contract suite builds for every dialect) declares
``render_transport(workload, landing_dir, transport, *, seed) -> RenderResult``.

``cdcflow demo`` and the property tests render every registered dialect; a new dialect plugs
in with one line here.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from cdcflow.simulation.workload import Change, Workload

#: Canonical operation of each change kind, when a renderer writes one event per change.
KIND_OPERATIONS: dict[str, str] = {
    "insert": "INSERT",
    "update": "UPDATE",
    "delete": "DELETE",
    "truncate": "TRUNCATE",
    "add_column": "DDL",
}

AVAILABLE_RENDERERS: dict[str, str] = {
    "cockroachdb": "cdcflow.testing.render_cockroachdb:render",
    "datastream": "cdcflow.testing.render_datastream:render",
    "debezium": "cdcflow.testing.render_debezium:render",
    "savegress": "cdcflow.testing.render_savegress:render",
    "sqlserver_ces": "cdcflow.testing.render_sqlserver_ces:render",
}


def renderer(name: str) -> Callable[..., Any]:
    """The render function registered for a dialect."""
    module, _, func = AVAILABLE_RENDERERS[name].partition(":")
    return getattr(importlib.import_module(module), func)


def renderer_features(name: str) -> frozenset[str]:
    """Workload features a dialect's format can express (its renderer module's ``FEATURES``;
    every feature when it declares none)."""
    from cdcflow.simulation.workload import ALL_FEATURES

    module = importlib.import_module(AVAILABLE_RENDERERS[name].partition(":")[0])
    return frozenset(getattr(module, "FEATURES", ALL_FEATURES))


def renderer_event_kinds(name: str) -> frozenset[str]:
    """Change kinds that become events in a dialect's rendering (``EVENT_KINDS``; every kind
    when the module declares none)."""
    module = importlib.import_module(AVAILABLE_RENDERERS[name].partition(":")[0])
    return frozenset(
        getattr(module, "EVENT_KINDS", {"insert", "update", "delete", "truncate", "add_column"})
    )


def renderer_event_operations(name: str) -> Callable[[Change, Workload], list[str]]:
    """How a dialect's rendering (without faults) turns one change into events: the canonical
    operations, in order. The renderer module's ``event_operations`` when it declares one, else
    one operation per change whose kind is in its ``EVENT_KINDS`` (none for other kinds)."""
    module = importlib.import_module(AVAILABLE_RENDERERS[name].partition(":")[0])
    declared = getattr(module, "event_operations", None)
    if declared is not None:
        return declared
    kinds = renderer_event_kinds(name)

    def one_each(change: Change, workload: Workload) -> list[str]:
        return [KIND_OPERATIONS[change.kind]] if change.kind in kinds else []

    return one_each


def renderer_transport(name: str) -> Callable[..., Any] | None:
    """The ``render_transport`` function of a dialect's renderer module, if it has one."""
    module = importlib.import_module(AVAILABLE_RENDERERS[name].partition(":")[0])
    return getattr(module, "render_transport", None)


def renderer_names() -> list[str]:
    """Dialects that have a renderer."""
    return sorted(AVAILABLE_RENDERERS)
