"""The engine: micro-batches of canonical events → sinks (Spark SQL only)."""
