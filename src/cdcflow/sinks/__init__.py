"""Sinks: where canonical events go (Iceberg replicas, changelogs, dead letters)."""
