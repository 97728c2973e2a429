"""Servers that tests and demos run against, each installed from its official artifacts and
started by this package on a free port of the loopback interface, with its state in a folder
of its own:

- :class:`~cdcflow.testing.services.kafka.KafkaBroker`: Apache Kafka in KRaft mode (broker and
  controller in one process), from its Maven artifacts;
- :class:`~cdcflow.testing.services.connect.KafkaConnect`: Kafka Connect in standalone mode with
  Debezium's source connectors, from their Maven artifacts;
- :class:`~cdcflow.testing.services.postgres.Postgres`: PostgreSQL from Debian's packages, run
  as a non-root user, with logical decoding on;
- :class:`~cdcflow.testing.services.rest.RestCatalog`: Iceberg's REST catalog server, from
  Iceberg's Maven artifacts, over a JDBC catalog on an SQLite file;
- :class:`~cdcflow.testing.services.spark_connect.SparkConnectServer`: a Spark Connect server
  from the installed PySpark (4.x), with cdcflow's jars and its embedded catalog.

Java servers are resolved with ``mvn`` into a Maven repository of their own under the services
cache (``$CDCFLOW_SERVICES_CACHE``, default ``~/.cache/cdcflow/services``), once; later starts
need no network. Every server is a context manager (stopped on exit, also after a failure), and
``python -m cdcflow.testing.services NAME start|stop|status --home DIR`` drives one by hand.
"""
