"""The engine: what each micro-batch needs — metadata, per-table plans, the batch's SQL and the
statements to run (no writes; ``cdcflow.iceberg`` writes them)."""
