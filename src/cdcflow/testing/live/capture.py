"""``python -m cdcflow.testing.live.capture OUT``: capture what the real PostgreSQL connector
sends for a fixed script of statements, as test data with its provenance.

Services of its own (broker, PostgreSQL, Kafka Connect with Debezium) run the script of
:data:`SETUP` (rows the initial snapshot reads) and :data:`STEPS` (one transaction each,
streamed; Kafka Connect is killed and started again before the last one), and ``OUT`` gets:

- ``messages.jsonl``: every record of the connector's topics as a Kafka record written as
  JSON (``topic``, ``partition``, ``offset``, ``key`` and ``value`` as the JSON text the
  converter wrote), by topic, partition and offset;
- ``tables.json``: every table's rows at the end (``SELECT *``), in the comparable form of
  :mod:`cdcflow.testing.live.oracle`, with the columns' PostgreSQL types;
- ``PROVENANCE.md``: versions (Debezium, Kafka Connect, PostgreSQL), the connector's
  configuration, and the statements.
"""

from __future__ import annotations

import argparse
import base64
import json
import sys
import tempfile
import time
from collections.abc import Sequence
from decimal import Decimal
from pathlib import Path
from typing import Any

from cdcflow.testing.live import oracle

PREFIX = "cap"

SETUP = """CREATE TYPE mood AS ENUM ('sad', 'ok', 'happy');
CREATE TABLE kinds (
  id int PRIMARY KEY, price numeric(12,2), ratio numeric, at timestamptz, local_at timestamp,
  day date, tod time, span interval, ref uuid, doc jsonb, blob bytea, tags text[],
  flag boolean, m mood, qty int DEFAULT 7, f8 double precision, f4 real, small smallint,
  big text, exact numeric(38,10));
CREATE TABLE wide (id int PRIMARY KEY, body text, note text);
ALTER TABLE wide REPLICA IDENTITY FULL;
CREATE TABLE pairs (a int, b int, v text, PRIMARY KEY (a, b));
CREATE TABLE loose (id int PRIMARY KEY, n numeric);
INSERT INTO kinds VALUES
  (1, 12.34, 12345678901234567890.123456789012345678, '2024-05-06 07:08:09.123456+02',
   '2024-05-06 07:08:09.654321',
   '2024-05-06', '13:14:15.5', '1 year 2 mons 3 days 04:05:06.789',
   'a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11', '{"b": {"c": "d"}, "a": [1, 2.50, null]}',
   '\\xdeadbeef', ARRAY['x', 'y,z', NULL], true, 'happy', DEFAULT, 1.5e300, 1.25, 3,
   (SELECT string_agg(md5(g::text), '') FROM generate_series(1, 400) g),
   1234567890123456789012345678.1234567890),
  (2, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL,
   NULL, NULL, NULL, NULL, NULL);
INSERT INTO wide
  VALUES (1, (SELECT string_agg(md5(g::text), '') FROM generate_series(1, 400) g), 'n');
INSERT INTO pairs VALUES (1, 1, 'x'), (1, 2, 'y');
INSERT INTO loose VALUES (1, 2.5);"""

#: (what it shows, one transaction); Kafka Connect is killed before the last.
STEPS: tuple[tuple[str, str], ...] = (
    (
        "edge values: infinities, 24:00, NaN, negative interval, empty array and bytea",
        "INSERT INTO kinds (id, price, ratio, at, local_at, day, tod, span, tags, blob, f8, f4, "
        "exact) VALUES (3, -0.5, 'NaN', 'infinity', '-infinity', 'infinity', '24:00', "
        "'-3 days -04:05:06.5', '{}', '', 'NaN', '-Infinity', "
        "-9999999999999999999999999999.9999999999), "
        "(4, 0, 0.000000000000000001, '-infinity', 'infinity', '-infinity', '00:00', "
        "'-1 mons', ARRAY[NULL]::text[], '\\x00', 0, 0, 0.0000000001)",
    ),
    ("an update leaving the TOASTed text unchanged", "UPDATE kinds SET price = 99.99 WHERE id = 1"),
    ("the same on a REPLICA IDENTITY FULL table", "UPDATE wide SET note = 'm' WHERE id = 1"),
    (
        "a multi-table transaction with a primary-key change",
        "UPDATE kinds SET id = 10 WHERE id = 2; INSERT INTO pairs VALUES (2, 1, 'z'); "
        "DELETE FROM pairs WHERE a = 1 AND b = 1",
    ),
    ("a delete under REPLICA IDENTITY DEFAULT", "DELETE FROM kinds WHERE id = 3"),
    (
        "delete then reinsert of a key, in one transaction",
        "DELETE FROM wide WHERE id = 1; INSERT INTO wide VALUES (1, 'short', 'again')",
    ),
    (
        "a column added, then a row with it",
        "ALTER TABLE pairs ADD COLUMN extra text; INSERT INTO pairs VALUES (3, 1, 'w', 'e')",
    ),
    (
        "a key widened from int to bigint, then a key beyond int",
        "ALTER TABLE kinds ALTER COLUMN id TYPE bigint; "
        "INSERT INTO kinds (id, price) VALUES (5000000000, 2)",
    ),
    (
        "TRUNCATE and an insert in one transaction",
        "TRUNCATE pairs; INSERT INTO pairs VALUES (4, 1, 'after', NULL)",
    ),
    (
        "an unconstrained numeric beyond decimal(38,18)",
        "INSERT INTO loose VALUES (2, 3.14159265358979323846264338327950288419716939937510)",
    ),
    (
        "after Kafka Connect was killed and started again",
        "UPDATE kinds SET flag = false WHERE id = 1",
    ),
)

TABLES: dict[str, tuple[str, ...]] = {
    "kinds": ("id",),
    "wide": ("id",),
    "pairs": ("a", "b"),
    "loose": ("id",),
}


def encode(value: Any) -> Any:
    """A comparable value as JSON (decimals and bytes tagged, tuples as lists)."""
    if isinstance(value, Decimal):
        return {"decimal": str(value)}
    if isinstance(value, bytes):
        return {"base64": base64.b64encode(value).decode()}
    if isinstance(value, tuple | list):
        return [encode(v) for v in value]
    return value


def decode(value: Any) -> Any:
    """The inverse of :func:`encode`."""
    if isinstance(value, dict):
        if "decimal" in value:
            return Decimal(value["decimal"])
        return base64.b64decode(value["base64"])
    if isinstance(value, list):
        return tuple(decode(v) for v in value)
    return value


def capture(out: Path, work: Path) -> None:
    """Run the script against real services in ``work`` and write ``out``."""
    import psycopg

    from cdcflow.testing.live.schema import connector_config
    from cdcflow.testing.services.connect import DEBEZIUM, KafkaConnect
    from cdcflow.testing.services.kafka import VERSION as KAFKA
    from cdcflow.testing.services.kafka import KafkaBroker
    from cdcflow.testing.services.postgres import Postgres

    out.mkdir(parents=True, exist_ok=True)
    with (
        KafkaBroker(work / "kafka") as broker,
        Postgres(work / "postgres" / "data") as pg,
        KafkaConnect(work / "connect", broker.bootstrap, offset_flush_ms=30_000) as connect,
    ):
        with psycopg.connect(pg.url, autocommit=True) as conn:
            conn.execute(SETUP)
            version = str(conn.execute("SELECT version()").fetchone()[0])  # type: ignore[index]
        config = connector_config(
            port=pg.port, database=pg.database, user=pg.user, password=pg.password, prefix=PREFIX
        )
        config["table.include.list"] = ",".join(f"public\\.{t}" for t in TABLES)
        connect.add(PREFIX, config)
        _wait(lambda: _snapshot_done(broker.bootstrap), "the initial snapshot")
        _wait(lambda: bool(connect.offsets(PREFIX)), "the connector's first offset flush")
        with psycopg.connect(pg.url, autocommit=True) as conn:
            xid = 0
            for i, (_, sql) in enumerate(STEPS):
                if i == len(STEPS) - 1:
                    # killed once the previous step is in Kafka, before its next offset
                    # flush: what it produced since the last flush it produces again
                    _wait(lambda x=xid: _ended(broker.bootstrap, x), "the previous step")
                    connect.kill()
                    connect.start()
                with conn.transaction():
                    conn.execute(sql)
                    row = conn.execute("SELECT pg_current_xact_id()::text").fetchone()
                    xid = int(row[0]) if row else 0
            _wait(lambda: _flushed(connect, xid), "the connector's offsets")
            tables = {}
            for name, key in TABLES.items():
                cols = oracle.columns(conn, name)
                rows = oracle.source_rows(conn, name, cols, frozenset())
                tables[name] = {
                    "key": list(key),
                    "columns": [[c.name, c.pg_type, c.kind] for c in cols],
                    "rows": sorted((encode(r) for r in rows), key=repr),
                }
        records = _records(broker.bootstrap)
    (out / "messages.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    (out / "tables.json").write_text(_tables_json(tables))
    shown = {k: v for k, v in config.items() if "password" not in k and "port" not in k}
    steps = "\n".join(
        f"{i + 1}. {what}:\n\n    ```sql\n    {sql}\n    ```" for i, (what, sql) in enumerate(STEPS)
    )
    (out / "PROVENANCE.md").write_text(
        f"""# Captured from the real Debezium PostgreSQL connector

Written by `python -m cdcflow.testing.live.capture` (`cdcflow/testing/live/capture.py`): a
PostgreSQL server, an Apache Kafka broker and Kafka Connect started by the project, the
statements below run against them, every record of the connector's topics dumped.

- Debezium PostgreSQL connector {DEBEZIUM} (`io.debezium:debezium-connector-postgres`), plugin
  `pgoutput`, in Kafka Connect {KAFKA} standalone (`connect-runtime`, `connect-json`;
  `JsonConverter` with schemas and `replace.null.with.default=false` for keys and values);
  broker Apache Kafka {KAFKA} (KRaft)
- {version}
- connector configuration (password and port left out):

```json
{json.dumps(shown, indent=1)}
```

`messages.jsonl`: {len(records)} records (topic, partition, offset, key and value as the JSON
text the converter wrote; a null value is a tombstone). `tables.json`: each table's rows at
the end, in the comparable form of `cdcflow.testing.live.oracle`.

## Before the connector started (read by its initial snapshot)

```sql
{SETUP}
```

## Then, one transaction each (Kafka Connect SIGKILLed and started again before the last)

{steps}
"""
    )


def _tables_json(tables: dict[str, dict[str, Any]]) -> str:
    """``tables.json``: a table's key and columns on a line each, then a row per line."""
    parts = []
    for name, t in tables.items():
        rows = ",\n".join("   " + json.dumps(r) for r in t["rows"])
        parts.append(
            f' "{name}": {{\n  "key": {json.dumps(t["key"])},\n'
            f'  "columns": {json.dumps(t["columns"])},\n  "rows": [\n{rows}\n  ]\n }}'
        )
    return "{\n" + ",\n".join(parts) + "\n}\n"


def _wait(done: Any, what: str, timeout: float = 120.0) -> None:
    deadline = time.monotonic() + timeout
    while not done():
        if time.monotonic() > deadline:
            raise TimeoutError(f"waited {timeout:.0f}s for {what}")
        time.sleep(0.3)


def _flushed(connect: Any, xid: int) -> bool:
    """Whether the connector's flushed offset is at transaction ``xid`` or later."""
    offsets = connect.offsets(PREFIX)
    return max((o["offset"].get("txId") or 0 for o in offsets), default=0) >= xid


def _records(bootstrap: str) -> list[dict[str, Any]]:
    """Every record of the connector's topics, by topic, partition and offset; keys and
    values as text."""
    from cdcflow.testing.kafka import consume, end_offsets

    topics = sorted({t for t, _ in end_offsets(bootstrap, PREFIX)})
    found = consume(bootstrap, topics) if topics else []
    return [
        {
            "topic": r["topic"],
            "partition": r["partition"],
            "offset": r["offset"],
            "key": None if r["key"] is None else r["key"].decode(),
            "value": None if r["value"] is None else r["value"].decode(),
        }
        for r in sorted(found, key=lambda r: (r["topic"], r["partition"], r["offset"]))
    ]


def _ended(bootstrap: str, xid: int) -> bool:
    """Whether the END of transaction ``xid`` is in Kafka."""
    return any(
        r["topic"] == f"{PREFIX}.transaction"
        and f'"{xid}:' in (r["value"] or "")
        and '"END"' in (r["value"] or "")
        for r in _records(bootstrap)
    )


def _snapshot_done(bootstrap: str) -> bool:
    return any(
        r["value"] and '"snapshot":"last"' in r["value"].replace(" ", "")
        for r in _records(bootstrap)
    )


def main(argv: Sequence[str] | None = None) -> int:
    """Capture into ``OUT``."""
    parser = argparse.ArgumentParser(prog="python -m cdcflow.testing.live.capture")
    parser.add_argument("out", type=Path)
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="cdcflow-capture-") as work:
        capture(args.out, Path(work))
    print(f"captured into {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
