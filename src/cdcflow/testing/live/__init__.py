"""A live producer: PostgreSQL → Debezium's PostgreSQL connector in Kafka Connect → Kafka →
``cdcflow run`` → Iceberg, with the database itself as the oracle (``make live-demo``, the live
tests).

- :mod:`~cdcflow.testing.live.schema`: the table set (the PostgreSQL types users have, a
  ``REPLICA IDENTITY FULL`` table, TOASTed text), the bookkeeping that records every
  transaction's commit order with its LSN and every row change (triggers), and the
  connector's configuration;
- :mod:`~cdcflow.testing.live.workload`: concurrent sessions doing inserts, updates, deletes,
  key changes, re-inserts, multi-table transactions, a ``TRUNCATE`` and schema changes;
- :mod:`~cdcflow.testing.live.oracle`: the type mapping (PostgreSQL value → replica value),
  the source tables now and at every transaction boundary, replicas now and at every Iceberg
  snapshot (time travel), their comparison and the end-to-end lag;
- :mod:`~cdcflow.testing.live.scenario`: the run — services up, workload, faults (Kafka
  Connect and ``cdcflow run`` killed, the broker restarted), catch-up measured, checks;
  :mod:`~cdcflow.testing.live.report` what it is asked (``Plan``) and what it found
  (``Report``); :mod:`~cdcflow.testing.live.follower` ``cdcflow run --follow`` as a process.
"""
