"""The source side, simulated: a workload of logical changes in commit order
(:mod:`.workload`), the oracle that applies it in memory (:mod:`.oracle`), and files landed
the way a producer lands them (:mod:`.landing`).

It imports nothing of cdcflow, so the dialects' renderers (``cdcflow.dialects.<name>.render``)
build on it; ``cdcflow.testing`` is the public kit over it.
"""
