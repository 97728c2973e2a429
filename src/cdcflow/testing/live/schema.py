"""The live table set, the bookkeeping that makes the database its own oracle, and the
Debezium connector's configuration.

Tables (``public``):

- ``customers``: ``REPLICA IDENTITY DEFAULT`` (updates carry no before image, deletes only the
  key); an enum, ``numeric(12,2)`` and unconstrained ``numeric``, ``boolean``, ``date``,
  ``timestamptz`` with a ``DEFAULT``; its key is widened ``int`` → ``bigint`` and a column is
  added while the workload runs;
- ``orders``: ``REPLICA IDENTITY FULL``; ``timestamp``, ``time``, ``interval``,
  ``numeric(14,4)``, ``uuid``, ``jsonb``, ``text[]``, ``bytea``, ``smallint``, ``real``,
  ``double precision``, an ``int`` widened to ``bigint``, and sometimes large text;
- ``documents``: large text PostgreSQL stores out of line (TOAST), updated with and without
  it, so Debezium sends its unavailable-value placeholder;
- ``ledger``: a two-column key, truncated while the workload runs.

Bookkeeping (not captured): every row change of those tables is recorded by a trigger in
``live_changes`` (the new row as ``jsonb``, the old key), and every transaction that changed
one records, at its commit, its place in the commit order with the WAL insert position in
``live_commits``: a deferred constraint trigger takes an advisory lock held until the commit
is written, so the order of ``live_commits.seq`` is the order of the commit records in the WAL
(the order logical decoding streams transactions in). The state of a table at any transaction
boundary is then the replay of its changes in that order, each row rebuilt with
``jsonb_populate_record`` as a row of the table itself.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class TableSpec:
    """A live table: its name, key columns and ``CREATE TABLE`` statement."""

    name: str
    key: tuple[str, ...]
    ddl: str


TYPES = "CREATE TYPE tier AS ENUM ('bronze', 'silver', 'gold', 'platinum')"

TABLES: tuple[TableSpec, ...] = (
    TableSpec(
        "customers",
        ("id",),
        """CREATE TABLE customers (
             id int PRIMARY KEY,
             name text NOT NULL,
             email text,
             tier tier,
             balance numeric(12,2) NOT NULL DEFAULT 0,
             credit numeric,
             active boolean NOT NULL DEFAULT true,
             signup date,
             created_at timestamptz NOT NULL DEFAULT now())""",
    ),
    TableSpec(
        "orders",
        ("id",),
        """CREATE TABLE orders (
             id bigint PRIMARY KEY,
             customer_id int NOT NULL,
             placed_at timestamp,
             ship_by time,
             handling interval,
             total numeric(14,4),
             ref uuid,
             lines jsonb,
             tags text[],
             signature bytea,
             quantity int,
             priority smallint DEFAULT 5,
             weight real,
             score double precision,
             note text);
           ALTER TABLE orders REPLICA IDENTITY FULL""",
    ),
    TableSpec(
        "documents",
        ("id",),
        """CREATE TABLE documents (
             id int PRIMARY KEY,
             title text NOT NULL,
             body text,
             revision int NOT NULL DEFAULT 1,
             edited_at timestamptz)""",
    ),
    TableSpec(
        "ledger",
        ("account", "entry"),
        """CREATE TABLE ledger (
             account int,
             entry int,
             amount numeric(10,2) NOT NULL,
             memo text,
             PRIMARY KEY (account, entry))""",
    ),
)

#: Schema changes the workload makes while it runs: (share of the run, statement).
SCHEMA_CHANGES: tuple[tuple[float, str], ...] = (
    (0.3, "ALTER TABLE customers ADD COLUMN nickname text"),
    (0.45, "ALTER TABLE customers ALTER COLUMN id TYPE bigint"),
    (0.55, "ALTER TABLE orders ALTER COLUMN quantity TYPE bigint"),
)

#: The lock every recording transaction holds from its commit's start to its end.
_COMMIT_LOCK = 260026

BOOKKEEPING = f"""
CREATE TABLE live_changes (
  id bigserial PRIMARY KEY,
  xid xid8 NOT NULL DEFAULT pg_current_xact_id(),
  tbl text NOT NULL,
  op char(1) NOT NULL,
  old_key jsonb,
  new jsonb);
CREATE SEQUENCE live_commit_seq;
CREATE TABLE live_commits (
  seq bigint PRIMARY KEY,
  xid xid8 NOT NULL UNIQUE,
  lsn pg_lsn NOT NULL,
  at timestamptz NOT NULL);

CREATE FUNCTION live_change() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
  old_key jsonb;
BEGIN
  IF TG_OP = 'TRUNCATE' THEN
    INSERT INTO live_changes (tbl, op) VALUES (TG_TABLE_NAME, 'T');
    RETURN NULL;
  END IF;
  IF TG_OP <> 'INSERT' THEN
    SELECT jsonb_object_agg(k, to_jsonb(OLD) -> k) INTO old_key FROM unnest(TG_ARGV) AS k;
  END IF;
  INSERT INTO live_changes (tbl, op, old_key, new)
  VALUES (TG_TABLE_NAME, left(TG_OP, 1), old_key,
          CASE WHEN TG_OP <> 'DELETE' THEN to_jsonb(NEW) END);
  RETURN NULL;
END $$;

CREATE FUNCTION live_commit() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  IF NOT EXISTS (SELECT 1 FROM live_commits WHERE xid = pg_current_xact_id()) THEN
    PERFORM pg_advisory_xact_lock({_COMMIT_LOCK});
    INSERT INTO live_commits
    VALUES (nextval('live_commit_seq'), pg_current_xact_id(), pg_current_wal_insert_lsn(),
            clock_timestamp());
  END IF;
  RETURN NULL;
END $$;

CREATE CONSTRAINT TRIGGER live_commit AFTER INSERT ON live_changes
  DEFERRABLE INITIALLY DEFERRED FOR EACH ROW EXECUTE FUNCTION live_commit();
"""


def setup_sql(tables: tuple[TableSpec, ...] = TABLES) -> str:
    """Statements creating the table set with its bookkeeping triggers."""
    parts = [TYPES + ";", BOOKKEEPING]
    for t in tables:
        args = ", ".join(f"'{k}'" for k in t.key)
        parts.append(
            f"""{t.ddl};
            CREATE TRIGGER live_rows AFTER INSERT OR UPDATE OR DELETE ON {t.name}
              FOR EACH ROW EXECUTE FUNCTION live_change({args});
            CREATE TRIGGER live_truncate AFTER TRUNCATE ON {t.name}
              FOR EACH STATEMENT EXECUTE FUNCTION live_change();"""
        )
    return "\n".join(parts)


def connector_config(
    *,
    port: int,
    database: str,
    user: str,
    password: str,
    prefix: str,
    tables: tuple[TableSpec, ...] = TABLES,
) -> dict[str, str]:
    """Debezium's PostgreSQL connector over ``pgoutput`` for the table set: transaction
    metadata on, ``TRUNCATE`` events kept (Debezium skips them by default), the publication
    created for the captured tables only; every type setting left at Debezium's default."""
    return {
        "connector.class": "io.debezium.connector.postgresql.PostgresConnector",
        "tasks.max": "1",
        "plugin.name": "pgoutput",
        "database.hostname": "127.0.0.1",
        "database.port": str(port),
        "database.user": user,
        "database.password": password,
        "database.dbname": database,
        "topic.prefix": prefix,
        "slot.name": prefix,
        "publication.name": f"{prefix}_publication",
        "publication.autocreate.mode": "filtered",
        "table.include.list": ",".join(f"public\\.{t.name}" for t in tables),
        "provide.transaction.metadata": "true",
        "skipped.operations": "none",
    }
