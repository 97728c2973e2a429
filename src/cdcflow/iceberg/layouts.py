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
#: Metadata column of append-mode changelogs.
CHANGELOG_STRUCT = (
    "struct<operation:string, sequence:string, source_timestamp:timestamp, event_id:string, "
    "fingerprint:bigint, transaction_id:string, partial:boolean, applied_at:timestamp>"
)

#: Table property: a replica's key columns, comma-separated.
KEY_PROPERTY = "cdcflow.key-columns"
#: Table property: rows older than this sequence were removed by a ``TRUNCATE``.
TRUNCATE_PROPERTY = "cdcflow.truncated-before"
#: Table property: the shape of the sort fields a table's sequences come from.
SHAPE_PROPERTY = "cdcflow.sequence-shape"

DEAD_LETTERS = "dead_letters"
DEAD_LETTER_COLUMNS = (
    "pipeline string, batch_id bigint, first_seen timestamp, origin string, offset bigint, "
    "line bigint, item int, dialect string, `table` string, error_code string, "
    "error_message string, raw binary"
)

BATCHES = "batches"
HISTORY_COLUMNS = (
    "pipeline string, batch_id bigint, started_at timestamp, finished_at timestamp, "
    "events bigint, operations map<string,bigint>, duplicates bigint, conflicts bigint, "
    "stale bigint, dead_lettered bigint, tables map<string,bigint>, seconds double, "
    "stages map<string,double>"
)

TOMBSTONES = "tombstones"
TOMBSTONE_COLUMNS = "target string, key string, seq string, deleted_at timestamp"

WATERMARKS = "watermarks"
WATERMARK_COLUMNS = (
    "dialect string, scope string, part string, sequence string, resolved_at timestamp, "
    "batch_id bigint, updated_at timestamp"
)

SEGMENTS = "segments"
SEGMENT_COLUMNS = (
    "src string, dialect string, grp string, idx int, final boolean, total int, raw binary, "
    "origin string, offset bigint, line bigint, item int, batch_id bigint, "
    "first_seen timestamp, resolved_batch bigint, outcome string"
)

HELD = "held"
HELD_EXTRA = "_fp bigint, _target string, batch_id bigint, released_batch bigint"


def held_columns() -> str:
    """Columns of the held-events table: the decoded-event columns plus bookkeeping."""
    return f"{spark_schema_ddl()}, {HELD_EXTRA}"


def canonical_from_spark(simple: str) -> str:
    """Canonical type of an existing Spark column type (``simpleString``)."""
    if simple == "struct<x:double,y:double>":
        return "point"
    if simple.startswith("array<"):
        return f"array<{canonical_from_spark(simple[6:-1])}>"
    return simple
