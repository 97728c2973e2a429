"""The tables cdcflow writes: the metadata columns of replicas and changelogs, the internal
tables of a pipeline (``<namespace>__cdcflow``) and the table properties it keeps.

Internal tables, one per pipeline namespace, each written at most once per batch:

=================  ==============================================================================
``dead_letters``   messages and events that could not be decoded or applied, with raw bytes
``batches``        the batch history: counts, tables, seconds per stage
``tombstones``     deleted keys of every replica (replica name, key as JSON, sequence), so a late
                   older event cannot resurrect a deleted row
``watermarks``     the highest ``RESOLVED`` point per (dialect, scope, partition)
``segments``       segments of split messages waiting for the rest of their message
``held``           events held until a consistent point (consistency mode)
``history_log``    every applied event of the ``scd2`` tables (replica name, key, sequence,
                   operation, image), from which the versions of a key are recomputed
``multiset_log``   every applied event of the tables without a key (replica name, event id,
                   the hashes of its images, its after image), from which the number of copies
                   of a row is counted
=================  ==============================================================================
"""

from __future__ import annotations

from cdcflow.event import spark_schema_ddl

#: Metadata column of merge-mode replicas.
CDC_STRUCT = (
    "struct<sequence:string, row_sequence:string, column_sequences:map<string,string>, "
    "operation:string, source_timestamp:timestamp, event_id:string, fingerprint:bigint, "
    "deleted:boolean, applied_at:timestamp>"
)
#: Metadata column of the replicas of tables without a key (``keys: none``): the hash of the
#: row's image and which of its copies the row is (1..n).
MULTISET_STRUCT = "struct<image:string, copy:bigint, applied_at:timestamp>"
#: Metadata column of append-mode changelogs.
CHANGELOG_STRUCT = (
    "struct<operation:string, sequence:string, source_timestamp:timestamp, event_id:string, "
    "fingerprint:bigint, transaction_id:string, partial:boolean, applied_at:timestamp>"
)

#: Metadata column of scd2 history tables: the newest event folded into the version.
HISTORY_STRUCT = (
    "struct<sequence:string, operation:string, event_id:string, fingerprint:bigint, "
    "applied_at:timestamp>"
)
#: Validity columns of scd2 history tables, with their types: the version's sequence, the
#: next version's (or the closing delete's) sequence, their source commit timestamps, and
#: whether the version is the key's current one.
VALIDITY: tuple[tuple[str, str], ...] = (
    ("__START_AT", "string"),
    ("__END_AT", "string"),
    ("__START_TIMESTAMP", "timestamp"),
    ("__END_TIMESTAMP", "timestamp"),
    ("__CURRENT", "boolean"),
)
VALIDITY_COLUMNS: tuple[str, ...] = tuple(n for n, _ in VALIDITY)

#: Table property: a replica's key columns, comma-separated.
KEY_PROPERTY = "cdcflow.key-columns"
#: Table property: the replica holds a table without a key, as a multiset of rows (``true``).
KEYLESS_PROPERTY = "cdcflow.keyless"
#: Table property: rows older than this sequence were removed by a ``TRUNCATE``.
TRUNCATE_PROPERTY = "cdcflow.truncated-before"
#: Table property: the shape of the sort fields a table's sequences come from.
SHAPE_PROPERTY = "cdcflow.sequence-shape"

Fields = tuple[tuple[str, str], ...]

DEAD_LETTERS = "dead_letters"
#: ``kind``: ``message`` (``raw`` holds the message's bytes) or ``event`` (the decoded event as
#: JSON); ``replayed_at``/``replay_batch``: set once a replay took the row up.
DEAD_LETTER_FIELDS: Fields = (
    ("pipeline", "string"),
    ("batch_id", "bigint"),
    ("first_seen", "timestamp"),
    ("origin", "string"),
    ("offset", "bigint"),
    ("line", "bigint"),
    ("item", "int"),
    ("dialect", "string"),
    ("table", "string"),
    ("error_code", "string"),
    ("error_message", "string"),
    ("raw", "binary"),
    ("source", "string"),
    ("kind", "string"),
    ("replayed_at", "timestamp"),
    ("replay_batch", "bigint"),
)

BATCHES = "batches"
HISTORY_FIELDS: Fields = (
    ("pipeline", "string"),
    ("batch_id", "bigint"),
    ("started_at", "timestamp"),
    ("finished_at", "timestamp"),
    ("events", "bigint"),
    ("operations", "map<string,bigint>"),
    ("duplicates", "bigint"),
    ("conflicts", "bigint"),
    ("stale", "bigint"),
    ("dead_lettered", "bigint"),
    ("tables", "map<string,bigint>"),
    ("seconds", "double"),
    ("stages", "map<string,double>"),
    ("source", "string"),
    ("applied", "bigint"),
    ("undelivered", "bigint"),
    # a Kafka source that goes on past lost offsets: <topic>-<partition> → <from>-<to>
    ("skipped", "map<string,string>"),
    # per table, the newest source commit time among the batch's events (its freshness)
    ("source_times", "map<string,timestamp>"),
    # messages without a change skipped on purpose (Kafka tombstones…), by reason
    ("skipped_messages", "map<string,bigint>"),
)

TOMBSTONES = "tombstones"
#: The tombstone table is partitioned by replica name, which its property
#: :data:`TOMBSTONES_PARTITIONED` says (tables of earlier versions are not, until migrated).
TOMBSTONE_PARTITION = "target"
TOMBSTONES_PARTITIONED = "cdcflow.partitioned-by"
TOMBSTONE_FIELDS: Fields = (
    ("target", "string"),
    ("key", "string"),
    ("seq", "string"),
    ("deleted_at", "timestamp"),
)

HISTORY_LOG = "history_log"
HISTORY_LOG_FIELDS: Fields = (
    ("target", "string"),
    ("key", "string"),
    ("seq", "string"),
    ("op", "string"),
    ("partial", "boolean"),
    ("image", "map<string,string>"),
    ("ts", "timestamp"),
    ("id", "string"),
    ("fp", "bigint"),
    ("logged_at", "timestamp"),
)

MULTISET_LOG = "multiset_log"
#: ``bh``/``ah``: hashes of the event's before and after images (what it removes and adds);
#: ``prev_bh``/``prev_ah``: those of the copy it replaced; ``pipeline``/``batch_id``: the
#: batch that logged the row.
MULTISET_LOG_FIELDS: Fields = (
    ("target", "string"),
    ("id", "string"),
    ("fp", "bigint"),
    ("seq", "string"),
    ("op", "string"),
    ("bh", "string"),
    ("ah", "string"),
    ("image", "map<string,string>"),
    ("ts", "timestamp"),
    ("prev_bh", "string"),
    ("prev_ah", "string"),
    ("pipeline", "string"),
    ("batch_id", "bigint"),
    ("logged_at", "timestamp"),
)

WATERMARKS = "watermarks"
WATERMARK_FIELDS: Fields = (
    ("dialect", "string"),
    ("scope", "string"),
    ("part", "string"),
    ("sequence", "string"),
    ("resolved_at", "timestamp"),
    ("batch_id", "bigint"),
    ("updated_at", "timestamp"),
    ("src", "string"),
)

SEGMENTS = "segments"
SEGMENT_FIELDS: Fields = (
    ("src", "string"),
    ("dialect", "string"),
    ("grp", "string"),
    ("idx", "int"),
    ("final", "boolean"),
    ("total", "int"),
    ("raw", "binary"),
    ("origin", "string"),
    ("offset", "bigint"),
    ("line", "bigint"),
    ("item", "int"),
    ("batch_id", "bigint"),
    ("first_seen", "timestamp"),
    ("resolved_batch", "bigint"),
    ("outcome", "string"),
)

HELD = "held"
#: The held-events table: decoded-event columns plus bookkeeping (``_source`` last: tables of
#: earlier versions gain it at the end).
HELD_BOOKKEEPING: Fields = (
    ("_fp", "bigint"),
    ("_target", "string"),
    ("batch_id", "bigint"),
    ("released_batch", "bigint"),
    ("_source", "string"),
)


def held_fields() -> Fields:
    """Columns of the held-events table."""
    events = tuple(
        (c.split(" ", 1)[0].strip("`"), c.split(" ", 1)[1]) for c in spark_schema_ddl().split(", ")
    )
    return events + HELD_BOOKKEEPING


def held_event_columns() -> list[str]:
    """Columns of a held event (what is released), in table order."""
    return [n for n, _ in held_fields() if n not in ("batch_id", "released_batch")]


def ddl(fields: Fields) -> str:
    """A column list for ``CREATE TABLE``."""
    return ", ".join(f"`{n}` {t}" for n, t in fields)


def canonical_from_spark(simple: str) -> str:
    """Canonical type of an existing Spark column type (``simpleString``)."""
    if simple == "struct<x:double,y:double>":
        return "point"
    if simple.startswith("array<"):
        return f"array<{canonical_from_spark(simple[6:-1])}>"
    return simple
