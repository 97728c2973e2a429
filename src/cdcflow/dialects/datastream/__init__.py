"""The ``datastream`` dialect: Google Cloud Datastream events (Cloud Storage JSON and Avro
files, BigQuery rows). The mapping to canonical fields per source, ordering, backfills, update
pairs, Avro types and the spec's contradictions: ``docs/dialects/datastream.md``.

:mod:`.dialect` is the decoder and its envelope table, :mod:`.metadata` reads
``source_metadata`` per source, :mod:`.avro` types Avro payload columns, :mod:`.names` parses
Cloud Storage object names; :mod:`.sources` and :mod:`.render` simulate the streams (no Kafka
form: Datastream writes to Cloud Storage and BigQuery).
"""

from cdcflow.dialects.datastream.avro import avro_column_type
from cdcflow.dialects.datastream.dialect import (
    CAPABILITIES,
    MESSAGE_ENVELOPES,
    METADATA_FIELDS,
    DatastreamDialect,
)
from cdcflow.dialects.datastream.names import parse_object_name

__all__ = [
    "CAPABILITIES",
    "MESSAGE_ENVELOPES",
    "METADATA_FIELDS",
    "DatastreamDialect",
    "avro_column_type",
    "parse_object_name",
]
