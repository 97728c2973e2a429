"""cdcflow's public testing kit: workloads, the oracle, renderers, replica comparison.

Workloads and the oracle live in :mod:`cdcflow.simulation`, each dialect's renderer with its
decoder (named by the one registry, :mod:`cdcflow.dialects`); users reuse the kit to test
their own pipelines.
"""

from cdcflow.dialects import dialect_names, renderer
from cdcflow.simulation.oracle import apply as apply_oracle
from cdcflow.simulation.workload import Change, TableDef, Transaction, Workload, generate

__all__ = [
    "Change",
    "TableDef",
    "Transaction",
    "Workload",
    "apply_oracle",
    "dialect_names",
    "generate",
    "renderer",
]
