"""The ``cockroachdb`` dialect: CockroachDB changefeed messages (Kafka, cloud storage, webhook,
sinkless; JSON, Avro, CSV); the mapping and each envelope: ``docs/dialects/cockroachdb.md``.

:mod:`.envelopes` declares the message shapes (one table for recognition and dispatch),
:mod:`.types` reads Avro and Connect-style schemas and the values they type, :mod:`.names`
parses object names and topics, :mod:`.dialect` is the decoder, :mod:`.rows` its row event;
:mod:`.feed` and :mod:`.render` simulate the changefeeds, :mod:`.kafka` the Kafka sink's form.
"""

from cdcflow.dialects.cockroachdb.dialect import CAPABILITIES, CockroachDbDialect
from cdcflow.dialects.cockroachdb.envelopes import (
    ENRICHED_OPS,
    ENVELOPES,
    MESSAGE_ENVELOPES,
    SINKLESS_FIELDS,
    SOURCE_METADATA,
    WRAPPED_FIELDS,
)
from cdcflow.dialects.cockroachdb.names import name_timestamp, parse_object_name, split_topic
from cdcflow.dialects.cockroachdb.types import (
    avro_schema_types,
    bits_from_avro,
    enriched_schema_types,
)

__all__ = [
    "CAPABILITIES",
    "ENRICHED_OPS",
    "ENVELOPES",
    "MESSAGE_ENVELOPES",
    "SINKLESS_FIELDS",
    "SOURCE_METADATA",
    "WRAPPED_FIELDS",
    "CockroachDbDialect",
    "avro_schema_types",
    "bits_from_avro",
    "enriched_schema_types",
    "name_timestamp",
    "parse_object_name",
    "split_topic",
]
