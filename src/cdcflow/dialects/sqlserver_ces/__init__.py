"""The ``sqlserver_ces`` dialect: SQL Server 2025 change event streaming CloudEvents; the
mapping to canonical fields, the serializations read, split messages and the spec's
contradictions: ``docs/dialects/sqlserver_ces.md``.

:mod:`.cloudevent` reads the CloudEvent whatever carried it (JSON, binary content mode, Avro)
and its ``data`` member, :mod:`.dialect` is the decoder, :mod:`.render` the producer's landing
zone, :mod:`.kafka` its Kafka form (Event Hubs' Kafka endpoint).
"""
