"""Renderer registry: dialect name → function rendering a workload into a landing zone.

A renderer has the signature::

    render(workload, landing_dir, *, seed, transactions=slice(None), faults=True)
        -> RenderResult  (files written, DialectOptions the decoder needs)

``cdcflow demo`` and the property tests render every registered dialect; a new dialect plugs
in with one line here.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import Any

AVAILABLE_RENDERERS: dict[str, str] = {
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
    from cdcflow.testing.workload import ALL_FEATURES

    module = importlib.import_module(AVAILABLE_RENDERERS[name].partition(":")[0])
    return frozenset(getattr(module, "FEATURES", ALL_FEATURES))


def renderer_event_kinds(name: str) -> frozenset[str]:
    """Change kinds that become events in a dialect's rendering (``EVENT_KINDS``; every kind
    when the module declares none)."""
    module = importlib.import_module(AVAILABLE_RENDERERS[name].partition(":")[0])
    return frozenset(
        getattr(module, "EVENT_KINDS", {"insert", "update", "delete", "truncate", "add_column"})
    )


def renderer_names() -> list[str]:
    """Dialects that have a renderer."""
    return sorted(AVAILABLE_RENDERERS)
