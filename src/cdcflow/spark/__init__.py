"""Spark integration: the session builder (Iceberg runtime, Python workers, UTC)."""
