"""The ``debezium`` dialect: Debezium change events (JSON with or without schema, Avro, the
flattened ``ExtractNewRecordState`` form), transaction metadata and schema changes, for the
PostgreSQL, MySQL/MariaDB, SQL Server, Oracle, Db2 and MongoDB connectors. The mapping,
ordering per connector, Connect types and partial rows: ``docs/dialects/debezium.md``.

:mod:`.envelopes` declares the message shapes, :mod:`.connectors` reads each connector's
``source``, :mod:`.connect` Connect values, :mod:`.ddl` schema changes, :mod:`.dialect` is the
decoder; :mod:`.render` simulates the PostgreSQL connector, :mod:`.kafka` its Kafka topics.
"""

from cdcflow.dialects.debezium.connect import avro_fields, connect_field, ejson, schema_fields
from cdcflow.dialects.debezium.connectors import CONNECTORS, ORDER
from cdcflow.dialects.debezium.dialect import DebeziumDialect
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
