"""Readers without Spark: a replica opened by its name through pyiceberg (and DuckDB and Polars
over pyiceberg's scan) holds exactly what Spark reads — deletes applied, ``_cdc`` included or
projected away — on the embedded catalog (Iceberg's JDBC catalog on an SQLite file)."""

from __future__ import annotations

import datetime as dt
from decimal import Decimal
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from cdcflow.config import TableConfig
from cdcflow.dialects import renderer, renderer_features
from cdcflow.pipeline.query import Pipeline
from cdcflow.simulation.workload import generate
from cdcflow.testing.compare import compare_replicas
from tests.scenario import config

pytestmark = pytest.mark.spark


def _plain(value: Any, t: pa.DataType) -> Any:
    """A comparable Python value of an Arrow value (maps as dicts, times in UTC)."""
    if value is None:
        return None
    if pa.types.is_map(t):
        return {k: _plain(v, t.item_type) for k, v in value}
    if pa.types.is_struct(t):
        return {f.name: _plain(value.get(f.name), f.type) for f in t}
    if pa.types.is_list(t) or pa.types.is_large_list(t):
        return [_plain(v, t.value_type) for v in value]
    if isinstance(value, dt.datetime):
        if value.tzinfo is not None:
            value = value.astimezone(dt.UTC).replace(tzinfo=None)
        return value.isoformat()
    if isinstance(value, Decimal):
        return value.normalize()
    return value


def _rows(table: pa.Table) -> list[tuple[Any, ...]]:
    names = sorted(table.column_names)
    types = {f.name: f.type for f in table.schema}
    out = [tuple(_plain(r[c], types[c]) for c in names) for r in table.to_pylist()]
    return sorted(out, key=repr)


@pytest.mark.parametrize("version", ["2", "3"])
def test_a_replica_read_by_name_outside_spark_equals_sparks_read(
    spark: Any, tmp_path: Path, version: str
) -> None:
    """Format 2 (position delete files) and format 3 (deletion vectors) alike."""
    from pyiceberg.catalog.sql import SqlCatalog

    w = generate(5, tables=3, transactions=60, features=renderer_features("savegress"))
    res = renderer("savegress")(w, tmp_path / "landing", seed=5)
    namespace = f"readers_v{version}"
    cfg = config(tmp_path, namespace, keys={t: list(k) for t, k in res.options.table_keys.items()})
    cfg = cfg.model_copy(
        update={
            "tables": {"default": TableConfig(table_properties={"format-version": version})},
            "sources": [
                cfg.sources[0].model_copy(
                    update={
                        "types": {t: dict(c) for t, c in res.options.column_types.items()},
                        "options": dict(res.options.extra),
                    }
                )
            ],
        }
    )
    Pipeline(cfg, spark).run()
    # the replicas are right to begin with (deletes applied)
    compare_replicas(spark, w, namespace).assert_equal()

    uri = spark.conf.get("spark.sql.catalog.cdc.uri")
    assert uri.startswith("jdbc:sqlite:"), uri
    warehouse = spark.conf.get("spark.sql.catalog.cdc.warehouse")
    # what a user types: the catalog's name, its SQLite file, the warehouse
    catalog = SqlCatalog(
        "cdc", uri="sqlite:///" + uri.removeprefix("jdbc:sqlite:"), warehouse=f"file://{warehouse}"
    )
    assert (namespace,) in catalog.list_namespaces()
    deleted = 0
    for name in w.tables:
        ident = f"cdc.{namespace}.{name}"
        deleted += sum(1 for c in w.changes() if c.table == name and c.kind == "delete")

        iceberg = catalog.load_table((namespace, name))
        assert iceberg.format_version == int(version)
        sparks = spark.table(ident)._collect_as_arrow()
        theirs = iceberg.scan().to_arrow()
        assert _rows(pa.Table.from_batches(sparks)) == _rows(theirs), name
        data = [c for c in spark.table(ident).columns if c != "_cdc"]
        spark_data = pa.Table.from_batches(spark.table(ident).select(*data)._collect_as_arrow())
        projected = iceberg.scan(selected_fields=tuple(data)).to_arrow()
        assert _rows(spark_data) == _rows(projected), name
        # engines over pyiceberg's scan
        duck = iceberg.scan().to_duckdb(table_name="t").sql("SELECT * FROM t").to_arrow_table()
        assert _rows(duck) == _rows(theirs), name
        polars = iceberg.scan().to_polars().to_arrow()
        assert _rows(polars) == _rows(theirs), name
    assert deleted > 0  # the replicas had rows deleted, which every reader left out
