"""The ``debezium`` dialect: Debezium change events (JSON with or without schema, Avro, the
flattened ``ExtractNewRecordState`` form), transaction metadata and schema changes, for the
PostgreSQL, MySQL/MariaDB, SQL Server, Oracle, Db2 and MongoDB connectors. The mapping,
ordering per connector, Connect types and partial rows: ``docs/dialects/debezium.md``.

:mod:`.envelopes` declares the message shapes, :mod:`.connect` types Connect schemas and
values, :mod:`.dialect` is the decoder; :mod:`.render` simulates the PostgreSQL connector,
:mod:`.kafka` is its Kafka form.
"""

from cdcflow.dialects.debezium.connect import avro_fields, connect_field, ejson, schema_fields
from cdcflow.dialects.debezium.dialect import CONNECTORS, ORDER, DebeziumDialect
from cdcflow.dialects.debezium.envelopes import MESSAGE_ENVELOPES, OPS, STATUS

__all__ = [
    "CONNECTORS",
    "MESSAGE_ENVELOPES",
    "OPS",
    "ORDER",
    "STATUS",
    "DebeziumDialect",
    "avro_fields",
    "connect_field",
    "ejson",
    "schema_fields",
]
