"""``cdcflow serve``: a durable HTTP receiver for webhook-delivered CDC messages.

:mod:`~cdcflow.serve.config` (YAML schema, secrets), :mod:`~cdcflow.signing` (the unified
format's signatures, shared with outbound delivery), :mod:`~cdcflow.serve.landing`
(durable landing, rejected area, replay journal), :mod:`~cdcflow.serve.server` (HTTP).
Nothing here imports Spark.
"""
