"""Running a pipeline: the streaming queries, the checkpoint, each micro-batch, replays and
reports."""
