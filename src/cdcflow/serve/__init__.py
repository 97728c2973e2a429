"""``cdcflow serve``: a durable receiver for webhook- and gRPC-delivered CDC messages.

:mod:`~cdcflow.serve.config` (YAML schema, secrets), :mod:`~cdcflow.signing` (the unified
format's signatures, shared with outbound delivery), :mod:`~cdcflow.serve.landing`
(durable landing, rejected area, replay journal), :mod:`~cdcflow.serve.receiver` (authenticate,
decode, land, answer; metrics), :mod:`~cdcflow.serve.server` (HTTP),
:mod:`~cdcflow.serve.grpc_server` (gRPC). Nothing here imports Spark.
"""
