"""Outputs: the canonical stream emitted to downstream consumers (unified-format or Kafka-form
files per batch, signed webhooks)."""
