"""The ``savegress`` dialect: the unified CDC event format (JSON, Kafka form, protobuf); the
mapping to canonical fields, the shapes read and the format's gaps: ``docs/dialects/savegress.md``.

:mod:`.dialect` is the decoder, :mod:`.proto` the gRPC ``CDCEvent`` message, :mod:`.render`
the producer's landing zone, :mod:`.kafka` its Kafka form.
"""
