"""Property: random workloads × delivery faults × 1–3 runs → every replica (and every scd2
history) equals the oracle."""

from __future__ import annotations

import itertools
import tempfile
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from cdcflow.demo import demo_config
from cdcflow.pipeline.query import Pipeline
from cdcflow.testing import oracle
from cdcflow.testing.compare import diff_table, history_shape, read_replica
from cdcflow.testing.renderers import renderer, renderer_features, renderer_names
from cdcflow.testing.workload import generate

pytestmark = pytest.mark.spark
_n = itertools.count()


@pytest.fixture(scope="module")
def prop_root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One folder under pytest's temporary root for every example (hypothesis runs a test's
    examples under one function-scoped fixture, so each example makes its own folder in it)."""
    return tmp_path_factory.mktemp("prop")


@pytest.mark.parametrize("dialect", renderer_names())
@settings(max_examples=2, deadline=None, suppress_health_check=list(HealthCheck))
@given(
    seed=st.integers(min_value=0, max_value=10**6),
    runs=st.integers(min_value=1, max_value=3),
    overlap=st.booleans(),
)
def test_replicas_equal_the_oracle(
    spark: Any, prop_root: Path, dialect: str, seed: int, runs: int, overlap: bool
) -> None:
    w = generate(seed, tables=3, transactions=60, features=renderer_features(dialect))
    expected = oracle.apply(w)
    root = Path(tempfile.mkdtemp(prefix="replicas-", dir=prop_root))
    n = len(w.transactions)
    cuts = sorted({0, n, *(n * i // runs for i in range(1, runs))})
    render = renderer(dialect)
    cfg = None
    for i, (lo, hi) in enumerate(itertools.pairwise(cuts)):
        start = max(0, lo - 5) if overlap and i else lo  # redeliver the tail of the last run
        res = render(w, root / "landing" / dialect, seed=seed + i, transactions=slice(start, hi))
        if cfg is None:
            cfg = demo_config(root, dialect, res.options)
            cfg = cfg.model_copy(update={"namespace": f"prop{next(_n)}", "pipeline": f"prop{seed}"})
        Pipeline(cfg, spark).run()
    assert cfg is not None
    for name, table in w.tables.items():
        cols = list(table.columns)
        ident = f"cdc.{cfg.namespace}.{name}"
        rows = list(expected[name].values())
        if not rows and not spark.catalog.tableExists(ident):
            continue
        d = diff_table(name, rows, read_replica(spark, ident, cols), cols)
        assert d.equal, f"{name}: missing {d.missing[:3]} unexpected {d.unexpected[:3]}"


@settings(max_examples=2, deadline=None, suppress_health_check=list(HealthCheck))
@given(
    seed=st.integers(min_value=0, max_value=10**6),
    runs=st.integers(min_value=1, max_value=3),
    overlap=st.booleans(),
)
def test_histories_equal_the_oracle(
    spark: Any, prop_root: Path, seed: int, runs: int, overlap: bool
) -> None:
    """scd2 tables of every feature the unified format carries (partial updates, key changes,
    truncates, added columns) under redelivery and several runs: versions equal the oracle's."""
    dialect = "savegress"
    w = generate(seed, tables=2, transactions=50, features=renderer_features(dialect))
    expected = oracle.history(w)
    root = Path(tempfile.mkdtemp(prefix="histories-", dir=prop_root))
    n = len(w.transactions)
    cuts = sorted({0, n, *(n * i // runs for i in range(1, runs))})
    render = renderer(dialect)
    cfg = None
    for i, (lo, hi) in enumerate(itertools.pairwise(cuts)):
        start = max(0, lo - 5) if overlap and i else lo
        res = render(w, root / "landing" / dialect, seed=seed + i, transactions=slice(start, hi))
        if cfg is None:
            cfg = demo_config(root, dialect, res.options, {"default": {"mode": "scd2"}})
            cfg = cfg.model_copy(update={"namespace": f"prop{next(_n)}", "pipeline": f"hist{seed}"})
        Pipeline(cfg, spark).run()
    assert cfg is not None
    for name, table in w.tables.items():
        cols = list(table.columns)
        ident = f"cdc.{cfg.namespace}.{name}"
        if not expected[name] and not spark.catalog.tableExists(ident):
            continue
        got = history_shape(
            read_replica(spark, ident, [*cols, "__START_AT", "__END_AT"]), table.key
        )
        shape = [*cols, oracle.VERSION, oracle.ENDS]
        d = diff_table(name, expected[name], got, shape)
        assert d.equal, f"{name}: missing {d.missing[:3]} unexpected {d.unexpected[:3]}"
