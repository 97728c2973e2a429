"""Where raw messages come from: one module per source kind.

A landing zone (:mod:`.landing`), Kafka topics (:mod:`.kafka`) and a DataFrame given through
the Python API (:mod:`.given`) each own their configuration model, their checks before Spark
starts, the streaming reader, what they do after a batch and what a running pipeline sees
waiting in them, behind :class:`~cdcflow.sources.base.Source`. The pipeline calls a source
through that interface only; :meth:`cdcflow.config.SourceConfig.source` is the one place that
picks the kind.
"""
