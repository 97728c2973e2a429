"""A running pipeline's metrics, readiness, status and status page, fed with batch reports
(no Spark): the counters add up to the reports, freshness counts from the newest source
commit, ``/readyz`` follows the batches, the page shows what the status says — checked in a
real browser (headless Chromium)."""

from __future__ import annotations

import datetime as dt
import json
import re
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from cdcflow.cli.main import main
from cdcflow.config import load_config
from cdcflow.iceberg.maintain import Action, TableFigures
from cdcflow.observe.metrics import PipelineMetrics, read_offsets
from cdcflow.observe.server import MetricsServer
from cdcflow.observe.status import History, Status
from cdcflow.observe.tables import Results, Watermark
from cdcflow.pipeline.report import BatchReport, TableFiles, TableOutcome

T0 = 1_800_000_000.0
COMMIT = dt.datetime.fromtimestamp(T0 - 95, dt.UTC).replace(tzinfo=None).astimezone()


class Clock:
    def __init__(self) -> None:
        self.now = T0

    def __call__(self) -> float:
        return self.now


def _cfg(tmp_path: Path) -> Any:
    return load_config(
        {
            "pipeline": "shop",
            "namespace": "shop",
            "checkpoint": str(tmp_path / "chk"),
            "catalog": {"warehouse": str(tmp_path / "warehouse")},
            "follow_interval": "10s",
            "sources": [
                {"name": "pg", "dialect": "debezium", "path": str(tmp_path / "landing")},
                {
                    "name": "crdb",
                    "dialect": "cockroachdb",
                    "kafka": {"bootstrap_servers": "broker:9092", "topics": ["orders"]},
                },
            ],
        }
    )


def _reports() -> list[BatchReport]:
    files = TableFiles(
        records=1_250, data_files=3, delete_files=1, position_deletes=50, equality_deletes=0,
        bytes=48_000, snapshots=7,
    )  # fmt: skip
    orders = TableOutcome(
        "orders", "merge", 60, duplicates=5, conflicts=1, stale=4, dead_lettered=2,
        newest=COMMIT, files=files, dead_letter_codes={"TYPE_CONFLICT": 2},
    )  # fmt: skip
    users = TableOutcome("users", "merge", 30, duplicates=2, newest=COMMIT - dt.timedelta(hours=1))
    action = Action("shop", "orders", "rewrite_data_files", 1.5, TableFigures(), TableFigures())
    first = BatchReport(
        batch_id=0, events=100, operations={"INSERT": 80, "BEGIN": 5, "COMMIT": 5, "UPDATE": 10},
        duplicates=7, conflicts=1, stale=4, dead_lettered=5, tables={"orders": 60, "users": 30},
        seconds=4.0, applied=83, source="pg", outcomes=(orders, users),
        stages={"decode": 1.0, "merge": 2.0}, dead_letter_codes={"TYPE_CONFLICT": 2, "NOT_JSON": 3},
        actions=(action,),
    )  # fmt: skip
    second = BatchReport(
        batch_id=0, events=20, operations={"UPSERT": 20}, duplicates=0, conflicts=0, stale=0,
        dead_lettered=0, tables={"orders": 20}, seconds=2.0, applied=20, source="crdb",
        outcomes=(TableOutcome("orders", "merge", 20, newest=COMMIT - dt.timedelta(minutes=5)),),
        stages={"decode": 0.5},
    )  # fmt: skip
    return [first, second]


def _value(metrics: PipelineMetrics, name: str, **labels: str) -> float:
    found = metrics.registry.get_sample_value(name, {"pipeline": "shop", **labels})
    assert found is not None, (name, labels)
    return found


def _fed(tmp_path: Path, clock: Clock) -> PipelineMetrics:
    metrics = PipelineMetrics(_cfg(tmp_path), None, ready_intervals=3, clock=clock)
    for r in _reports():
        clock.now += 5
        metrics.report(r)
    return metrics


def test_the_counters_add_up_to_the_reports(tmp_path: Path) -> None:
    clock = Clock()
    metrics = _fed(tmp_path, clock)
    first, second = _reports()
    for r in (first, second):
        outcomes = {
            "applied": r.applied,
            "duplicate": r.duplicates,
            "stale": r.stale,
            "conflict": r.conflicts,
            "dead_lettered": r.dead_lettered,
        }
        assert _value(metrics, "cdcflow_events_read_total", source=r.source) == r.events
        for outcome, n in outcomes.items():
            counted = sum(
                s.value
                for family in metrics.registry.collect()
                for s in family.samples
                if s.name == "cdcflow_events_total"
                and s.labels["source"] == r.source
                and s.labels["outcome"] == outcome
            )
            assert counted == n, (r.source, outcome)
    assert (
        _value(metrics, "cdcflow_events_total", source="pg", table="orders", outcome="applied")
        == 48
    )
    # markers applied, decode rejections dead-lettered: no table
    assert _value(metrics, "cdcflow_events_total", source="pg", table="", outcome="applied") == 7
    assert (
        _value(metrics, "cdcflow_events_total", source="pg", table="", outcome="dead_lettered") == 3
    )
    assert _value(metrics, "cdcflow_dead_letters_total", source="pg", code="NOT_JSON") == 3
    assert _value(metrics, "cdcflow_operations_total", source="pg", operation="BEGIN") == 5
    assert _value(metrics, "cdcflow_batches_total", source="crdb") == 1
    assert _value(metrics, "cdcflow_batch_seconds_count", source="pg") == 1
    assert _value(metrics, "cdcflow_batch_seconds_sum", source="pg") == 4.0
    assert _value(metrics, "cdcflow_stage_seconds_sum", source="pg", stage="merge") == 2.0
    assert _value(metrics, "cdcflow_last_batch_timestamp_seconds", source="crdb") == T0 + 10
    assert _value(
        metrics, "cdcflow_maintenance_actions_total", table="shop.orders",
        action="rewrite_data_files",
    ) == 1  # fmt: skip
    # the newest commit any batch brought: freshness counts from it, and grows with time
    assert _value(metrics, "cdcflow_table_source_timestamp_seconds", table="orders") == T0 - 95
    assert _value(metrics, "cdcflow_table_freshness_seconds", table="orders") == 95 + 10
    clock.now += 60
    assert _value(metrics, "cdcflow_table_freshness_seconds", table="orders") == 95 + 70
    assert _value(metrics, "cdcflow_table_rows", table="orders") == 1_200
    assert _value(metrics, "cdcflow_table_delete_files", table="orders") == 1
    assert _value(metrics, "cdcflow_table_bytes", table="orders") == 48_000
    assert _value(metrics, "cdcflow_table_snapshots", table="orders") == 7
    assert _value(metrics, "cdcflow_dead_letters_open", table="orders") == 2


def test_ready_while_batches_succeed_within_the_intervals(tmp_path: Path) -> None:
    clock = Clock()
    metrics = _fed(tmp_path, clock)
    assert metrics.ready() == (True, "ready")
    clock.now += 30  # 3 × follow_interval 10s
    assert metrics.ready()[0]
    clock.now += 1
    ready, why = metrics.ready()
    assert not ready
    assert why == "no batch succeeded and no trigger ended for 31s (3 × follow_interval 10s)"
    assert _value(metrics, "cdcflow_ready") == 0
    metrics.report(_reports()[1])
    assert metrics.ready()[0] and _value(metrics, "cdcflow_ready") == 1


def test_lag_from_a_kafka_progress_and_a_landing_zones_file_log(tmp_path: Path) -> None:
    progress = {
        "timestamp": "2026-11-28T09:55:57.685Z",
        "sources": [
            {"endOffset": {"orders": {"0": 11, "1": 3}}},
            {"endOffset": '{"users": {"0": 4}}'},  # as PySpark 3.5 gives it: JSON text
            {"endOffset": str({"items": {"2": 9}})},  # PySpark 4: the text of a dict
        ],
    }
    assert read_offsets(progress) == {
        ("orders", 0): 11,
        ("orders", 1): 3,
        ("users", 0): 4,
        ("items", 2): 9,
    }
    cfg = _cfg(tmp_path)
    landing = tmp_path / "landing"
    for name in ("a.json", "b.json", "sub/c.json", "_landing.json", ".hidden", "_tmp/d.json"):
        (landing / name).parent.mkdir(parents=True, exist_ok=True)
        (landing / name).write_text("{}")
    query = tmp_path / "chk" / "sources" / "pg" / "query"
    (query / "sources" / "0").mkdir(parents=True)
    read = {"path": f"file://{landing.resolve()}/a.json", "timestamp": 1, "batchId": 0}
    (query / "sources" / "0" / "0").write_text("v1\n" + json.dumps(read) + "\n")
    assert cfg.sources[0].source().files_waiting(str(query)) == 2  # b.json and sub/c.json
    assert cfg.sources[1].source().files_waiting(str(query)) is None  # a Kafka source


@pytest.fixture
def served(tmp_path: Path) -> Iterator[tuple[MetricsServer, Clock]]:
    clock = Clock()
    server = MetricsServer(_fed(tmp_path, clock), "127.0.0.1", 0).start(seed=False)
    try:
        yield server, clock
    finally:
        server.stop()


def _get(url: str) -> tuple[int, str, str]:
    try:
        with urllib.request.urlopen(url, timeout=10) as answer:
            return answer.status, answer.headers["Content-Type"], answer.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.headers["Content-Type"], e.read().decode()


def test_the_endpoints(served: tuple[MetricsServer, Clock]) -> None:
    server, clock = served
    assert _get(server.url + "healthz")[:2] == (200, "text/plain")
    assert _get(server.url + "readyz") == (200, "text/plain", "ready\n")
    code, kind, text = _get(server.url + "metrics")
    assert code == 200 and kind.startswith("text/plain; version=")
    assert 'cdcflow_events_read_total{pipeline="shop",source="pg"} 100.0' in text
    assert "broker:9092" not in text  # no connection setting in a label
    code, kind, body = _get(server.url + "status.json")
    assert (code, kind) == (200, "application/json")
    status = Status.from_json(json.loads(body))
    assert status == server.metrics.status() and status.live and status.ready
    assert [t.table for t in status.tables] == ["orders", "users"]
    assert _get(server.url + "nothing")[0] == 404
    clock.now += 100
    assert _get(server.url + "readyz")[0] == 503


def test_status_asks_the_running_pipeline(
    served: tuple[MetricsServer, Clock], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    server, _ = served
    doc = _cfg(tmp_path).model_dump(exclude_defaults=True)
    doc["metrics"] = {"port": server.port}
    config = tmp_path / "shop.yaml"
    config.write_text(yaml.safe_dump(doc))
    assert main(["status", str(config)]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == "pipeline shop · namespace shop · running, ready · 5 dead letters"
    assert re.split(r"\s{2,}", lines[2]) == [
        "source", "reads", "last batch", "batches", "events", "lag",
    ]  # fmt: skip
    assert re.split(r"\s{2,}", lines[4])[:3] == ["crdb", "kafka orders", "00:00:00 ago"]
    orders = re.split(r"\s{2,}", lines[7])
    assert orders[:4] == ["orders", "1,200", "00:01:45", "00:00:00 ago"]
    assert main(["status", str(config), "--output", "json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["tables"][0]["freshness"] == 105 and doc["ready"] is True


@pytest.mark.services
def test_the_status_page_in_a_browser(served: tuple[MetricsServer, Clock], tmp_path: Path) -> None:
    """Headless Chromium loads the page: readiness, each replica's figures and a point per
    batch of the last hour in both plots, and nothing fetched from elsewhere."""
    from cdcflow.testing.services.chromium import Chromium

    server, _ = served
    browser = Chromium()
    dom = browser.dom(server.url)
    assert '<span class="badge ready" id="ready">ready</span>' in dom
    rows = re.findall(r"<tr>(.*?)</tr>", dom.split('id="tables"', 1)[1].split("</table>")[0])
    cells = [re.findall(r"<td[^>]*>(.*?)</td>", r) for r in rows if "<td" in r]
    assert [c[:3] for c in cells] == [["orders", "00:01:45", "1,200"], ["users", "01:01:45", ""]]
    assert cells[0][5:] == ["2", "3", "1", "7", "46.9 KiB"]
    for plot in ("batch-seconds", "events-per-second"):
        svg = dom.split(f'id="{plot}"', 1)[1].split("</svg>")[0]
        assert 'data-points="2"' in svg and svg.count("<circle") == 2
    assert "http" not in dom.split("<body>", 1)[1].replace("http://www.w3.org/2000/svg", "")
    shot = browser.screenshot(server.url, tmp_path / "page.png", 1100, 700)
    assert shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_the_dashboard_and_the_alert_rules_name_only_metrics_a_pipeline_exports(
    tmp_path: Path,
) -> None:
    """``docs/grafana-dashboard.json`` and the alert rules of ``docs/operations.md`` use the
    metrics a pipeline serves, by the names it serves them under."""
    metrics = _fed(tmp_path, Clock())
    metrics.queries["crdb"].kafka_lag = {("orders", 0): 3}
    metrics.queries["pg"].files_waiting = 2
    metrics.resolved[("crdb", "orders")] = T0
    served = {s.name for family in metrics.registry.collect() for s in family.samples}
    docs = Path(__file__).resolve().parents[1] / "docs"
    dashboard = json.loads((docs / "grafana-dashboard.json").read_text())
    exprs = [t["expr"] for p in dashboard["panels"] for t in p["targets"]]
    section = (docs / "operations.md").read_text().split("```yaml\ngroups:", 1)[1]
    rules = yaml.safe_load("groups:" + section.split("```", 1)[0])
    exprs += [r["expr"] for g in rules["groups"] for r in g["rules"]]
    named = {n for e in exprs for n in re.findall(r"\bcdcflow_[a-z_]+", e)}
    assert named and named <= served, sorted(named - served)
    assert {
        "cdcflow_ready",
        "cdcflow_table_freshness_seconds",
        "cdcflow_dead_letters_total",
    } <= named


class _Catalog(Results):
    """What a catalog holds, as the read commands' results give it."""

    def replica_names(self) -> list[str]:
        return ["orders", "users"]

    def files(self, names: Any) -> dict[str, TableFiles]:
        return {"users": TableFiles(10, 1, 0, 0, 0, 2_048, 3)}

    def table_batches(self) -> History:
        history = History()
        history.add("pg", 0, T0 - 50, 2.0, 10, ["users"], {"users": T0 - 400})
        history.add("pg", 1, T0 - 4000, 2.0, 10, ["users"], {"users": T0 - 900})
        return history

    def open_dead_letters(self) -> dict[str, int]:
        return {"users": 1, "": 2}

    def watermarks(self) -> list[Watermark]:
        at = dt.datetime.fromtimestamp(T0 - 20, dt.UTC)
        return [Watermark("crdb", "cockroachdb", "orders", 3, at)]


def test_a_pipeline_starts_from_what_its_catalog_holds(tmp_path: Path) -> None:
    """Before its first batch, a running pipeline shows what the catalog holds: figures of the
    replicas, the newest source time of the history, open dead letters, the resolved
    watermarks; its own batches then add to them."""
    clock = Clock()
    metrics = PipelineMetrics(_cfg(tmp_path), None, clock=clock)
    metrics.seed(_Catalog(_cfg(tmp_path)))
    metrics.poll()
    status = metrics.status()
    users = {t.table: t for t in status.tables}["users"]
    assert (users.rows, users.bytes, users.dead_letters) == (10, 2_048, 1)
    assert users.freshness(T0) == 400 and users.last_batch == T0 - 50
    assert [(s.source, s.batches, s.events) for s in status.sources] == [
        ("pg", 2, 20),
        ("crdb", 0, 0),
    ]
    assert [b.batch_id for b in status.recent] == [0]  # the other is older than an hour
    assert status.dead_letters == 3
    assert _value(metrics, "cdcflow_resolved_lag_seconds", source="crdb", scope="orders") == 20
    metrics.report(_reports()[0])
    assert _value(metrics, "cdcflow_table_source_timestamp_seconds", table="users") == T0 - 400
    assert metrics.status().sources[0].batches == 3
