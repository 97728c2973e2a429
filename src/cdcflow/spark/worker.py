"""What runs in Spark's Python workers: every Arrow-batched function cdcflow gives Spark
(``mapInArrow``) goes through :func:`map_in_arrow`, which wraps it in :class:`InWorker`.

Before each task a Python worker calls ``importlib.invalidate_caches()`` (PySpark's
``setup_spark_files``, up to Spark 4.1). Since Python 3.10 that makes every ``zipimporter``
read its archive's whole directory again, and a worker imports PySpark from
``pyspark.zip``, py4j from its zip and searches the ``spark-core`` jar that Spark puts on its
``PYTHONPATH``: about 15 importers, 70–140 ms of CPU per task before any data is read — a
fixed cost in every task, and minutes for a batch of thousands of files (one task per ≈ 32
files). Those archives are Spark's own and never change while a worker lives, so
:func:`steady_imports` makes their importers keep what they read (Python 3.9's behaviour, and
what SPARK-54744 does for later Spark releases); every other archive (a zip given with
``addPyFile``) is read again as before."""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable, Iterator
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import pyarrow as pa
    from pyspark.sql import DataFrame

#: The file names of the archives a Spark Python worker imports from that Spark itself ships.
_SPARK_ARCHIVES = ("pyspark.zip",)
_SPARK_PREFIXES = ("py4j-", "spark-core_")


def spark_archive(path: str) -> bool:
    """Whether ``path`` is one of the archives Spark puts on its workers' ``PYTHONPATH``
    (``pyspark.zip``, py4j's source zip, the ``spark-core`` jar)."""
    name = os.path.basename(path)
    return name in _SPARK_ARCHIVES or (
        name.startswith(_SPARK_PREFIXES) and name.endswith((".zip", ".jar"))
    )


def steady_imports() -> None:
    """Make the importers of Spark's own archives keep the directory they read (see the
    module's text); idempotent and cheap, called at the start of every task."""
    import zipimport

    current = zipimport.zipimporter.invalidate_caches
    if getattr(current, "_cdcflow_steady", False):
        return

    def invalidate_caches(self: zipimport.zipimporter) -> None:
        if not spark_archive(self.archive):
            current(self)

    invalidate_caches._cdcflow_steady = True  # type: ignore[attr-defined]
    zipimport.zipimporter.invalidate_caches = invalidate_caches  # type: ignore[method-assign]


class InWorker:
    """An Arrow-batched function as Spark's Python worker runs it: :func:`steady_imports`,
    then the function (picklable when the function is)."""

    def __init__(self, fn: Callable[[Iterator[pa.RecordBatch]], Iterator[pa.RecordBatch]]):
        self.fn = fn

    def __call__(self, batches: Iterable[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        steady_imports()
        return self.fn(iter(batches))

    def __repr__(self) -> str:
        return f"InWorker({self.fn!r})"


def map_in_arrow(
    df: DataFrame,
    fn: Callable[[Iterator[pa.RecordBatch]], Iterator[pa.RecordBatch]],
    schema: str,
    **kwargs: Any,
) -> DataFrame:
    """``df.mapInArrow`` of ``fn`` run as :class:`InWorker` (the one way cdcflow hands Spark a
    Python function)."""
    return df.mapInArrow(InWorker(fn), schema, **kwargs)
