"""The Iceberg layer: writes what the engine decided (DDL, statements under the commit
ledger, internal tables) and reads table metadata without Spark jobs. It never imports the
engine."""
