"""Property: random workloads × delivery faults × 1–3 runs → every replica (and every scd2
history) equals the oracle."""

from __future__ import annotations

import itertools
import random
import tempfile
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from cdcflow.demo import demo_config
from cdcflow.dialects import dialect_names, renderer, renderer_features
from cdcflow.iceberg import ledger
from cdcflow.pipeline.query import Pipeline
from cdcflow.simulation.workload import generate
from cdcflow.testing.compare import compare_replicas
from tests.scenario import config, ev, land

pytestmark = pytest.mark.spark
_n = itertools.count()


@pytest.fixture(scope="module")
def prop_root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One folder under pytest's temporary root for every example (hypothesis runs a test's
    examples under one function-scoped fixture, so each example makes its own folder in it)."""
    return tmp_path_factory.mktemp("prop")


@pytest.mark.parametrize("dialect", dialect_names())
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
    compare_replicas(spark, w, cfg.namespace, empty_may_be_absent=True).assert_equal()


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
    compare_replicas(
        spark, w, cfg.namespace, histories=w.tables, empty_may_be_absent=True
    ).assert_equal()


def keyless_workload(seed: int, n: int = 48) -> tuple[list[dict[str, Any]], Counter[Any]]:
    """Events of a table without a key, in commit order, and the multiset of rows they leave:
    rows drawn from a few values (so copies abound), deletes and updates of rows present
    (whole before images; some updates partial, the before image giving the rest), now and
    then a ``TRUNCATE``."""
    rnd = random.Random(seed)
    rows: Counter[tuple[str, int]] = Counter()
    events: list[dict[str, Any]] = []
    for i in range(n):
        seq, event = 10 * (i + 1), f"k{seed}-{i}"
        present = sorted(rows.elements())
        kind = rnd.choice(["insert"] * 4 + ["delete", "update", "partial"] * bool(present))
        if rnd.random() < 0.04:
            kind = "truncate"
        new = (rnd.choice("abc"), rnd.randrange(3))
        if kind == "insert":
            rows[new] += 1
            events.append(ev("INSERT", "bag", seq, id=event, after={"v": new[0], "n": new[1]}))
            continue
        if kind == "truncate":
            rows.clear()
            events.append(ev("TRUNCATE", "bag", seq, id=event))
            continue
        old = rnd.choice(present)
        rows[old] -= 1
        before = {"v": old[0], "n": old[1]}
        if kind == "delete":
            events.append(ev("DELETE", "bag", seq, id=event, before=before))
            continue
        new = (old[0], new[1]) if kind == "partial" else new
        rows[new] += 1
        after = {"n": new[1]} if kind == "partial" else {"v": new[0], "n": new[1]}
        partial = kind == "partial"
        events.append(
            ev("UPDATE", "bag", seq, id=event, before=before, after=after, partial=partial)
        )
    return events, +rows


class _Killed(Exception):
    """The crash a step hook stands for."""


def _kill_after(step: str) -> Any:
    def hook(props: Any) -> None:
        if props.get(ledger.STEP) == step:
            raise _Killed(step)

    return hook


def test_a_table_without_a_key_equals_the_multiset_of_its_rows(spark: Any, prop_root: Path) -> None:
    """``keys: none``: a random workload of copies, deletes, updates (partial ones too) and
    truncates, delivered shuffled with a tenth of the events twice; the run is killed right
    after the keyless tables' log holds its batch (the replica not written yet), then run
    again: the replica is the multiset the workload leaves, each image's copies numbered
    1..n."""
    events, expected = keyless_workload(11)
    rnd = random.Random(11)
    root = Path(tempfile.mkdtemp(prefix="keyless-", dir=prop_root))
    cfg = config(root, f"bag{next(_n)}", tables={"bag": {"keys": "none"}})
    replica = f"cdc.{cfg.namespace}.bag"
    sent = events + rnd.sample(events, len(events) // 10)
    rnd.shuffle(sent)
    for part in range(0, len(sent), 7):
        land(root / "landing", sent[part : part + 7])
    hook = _kill_after("multiset_log")
    ledger.STEP_HOOKS.append(hook)
    try:
        with pytest.raises(Exception, match="multiset_log"):
            Pipeline(cfg, spark).run()
    finally:
        ledger.STEP_HOOKS.remove(hook)
    assert spark.table(replica).count() == 0
    Pipeline(cfg, spark).run()
    got = [r.asDict(recursive=True) for r in spark.table(replica).collect()]
    assert Counter((r["v"], r["n"]) for r in got) == expected
    copies = Counter(r["_cdc"]["image"] for r in got)
    assert sorted(r["_cdc"]["copy"] for r in got) == sorted(
        i for n in copies.values() for i in range(1, n + 1)
    )
