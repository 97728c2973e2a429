"""cdcflow's public testing kit: workloads, the oracle, renderers, replica comparison.

Later dialects add a renderer (``cdcflow.testing.renderers``); users reuse the kit to test
their own pipelines.
"""

from cdcflow.testing.oracle import apply as apply_oracle
from cdcflow.testing.renderers import renderer, renderer_names
from cdcflow.testing.workload import Change, TableDef, Transaction, Workload, generate

__all__ = [
    "Change",
    "TableDef",
    "Transaction",
    "Workload",
    "apply_oracle",
    "generate",
    "renderer",
    "renderer_names",
]
