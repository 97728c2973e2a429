"""cdcflow's public testing kit: workloads, the oracle, renderers, replica comparison.

Workloads and the oracle live in :mod:`cdcflow.simulation`; each dialect's renderer lives
with its decoder (``cdcflow.testing.renderers`` names them); users reuse the kit to test their
own pipelines.
"""

from cdcflow.simulation.oracle import apply as apply_oracle
from cdcflow.simulation.workload import Change, TableDef, Transaction, Workload, generate
from cdcflow.testing.renderers import renderer, renderer_names

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
