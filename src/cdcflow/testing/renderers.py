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
}


def renderer(name: str) -> Callable[..., Any]:
    """The render function registered for a dialect."""
    module, _, func = AVAILABLE_RENDERERS[name].partition(":")
    return getattr(importlib.import_module(module), func)


def renderer_names() -> list[str]:
    """Dialects that have a renderer."""
    return sorted(AVAILABLE_RENDERERS)
