"""Table maintenance: what keeps a table's cost and storage flat over months of small commits.

Every batch commits a snapshot with small data files and delete files (position deletes in
format 2, deletion vectors in format 3). Between batches, under the run's lock, a table whose
delete files or data files pass the policy's thresholds has its data files rewritten (small
files bin-packed, delete files folded in, deletes left dangling removed); snapshots older than
the retention go (the newest ``keep_snapshots`` always stay, and with them every snapshot of
the batch a crash could replay: maintenance runs only after a batch has fully committed);
files no snapshot references, older than ``orphan_age``, are removed at most once per
``orphan_interval``. Each action is one atomic Iceberg commit, or none: the rewrite and the
orphan removal are Iceberg's Spark procedures, the expiry Iceberg's API in the driver on a
classic session and its procedure over Spark Connect (see
:meth:`cdcflow.iceberg.tables.JvmTable.expire`).

Figures come from the current snapshot's summary and the table's metadata
(:mod:`cdcflow.iceberg.tables`: through the JVM, no Spark job, on a classic session).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from cdcflow.errors import CdcflowError
from cdcflow.iceberg import ledger
from cdcflow.iceberg.tables import call_sql, timestamp_sql

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from cdcflow.config import MaintenanceConfig
    from cdcflow.iceberg.catalog import Catalog
    from cdcflow.iceberg.tables import TableHandle

#: Table property: when orphan files were last removed (epoch seconds).
ORPHANS_PROPERTY = "cdcflow.maintenance.orphans-removed-at"
#: The maintenance table in the internal namespace: one row per action.
MAINTENANCE = "maintenance"
MAINTENANCE_FIELDS: tuple[tuple[str, str], ...] = (
    ("pipeline", "string"),
    ("batch_id", "bigint"),
    ("at", "timestamp"),
    ("namespace", "string"),
    ("table", "string"),
    ("action", "string"),
    ("seconds", "double"),
    ("files_before", "bigint"),
    ("files_after", "bigint"),
    ("bytes_before", "bigint"),
    ("bytes_after", "bigint"),
    ("snapshots_before", "bigint"),
    ("snapshots_after", "bigint"),
)


@dataclass(frozen=True)
class TableFigures:
    """What a table holds now: data and delete files, their bytes, snapshots."""

    data_files: int = 0
    delete_files: int = 0
    bytes: int = 0
    snapshots: int = 0
    #: when the oldest snapshot was committed (epoch seconds; None: no snapshot)
    oldest: float | None = None

    @property
    def files(self) -> int:
        return self.data_files + self.delete_files


@dataclass(frozen=True)
class Action:
    """One maintenance action on one table, with the table's figures before and after."""

    namespace: str
    table: str
    action: str
    seconds: float
    before: TableFigures
    after: TableFigures

    def line(self) -> str:
        """The action as the progress line shows it."""
        files = (self.before.files, self.after.files)
        change = change_text(self.action, files, (self.before.snapshots, self.after.snapshots))
        return f"{self.action} {self.table} ({change}, {self.seconds:.1f}s)"


def change_text(action: str, files: tuple[int, int], snapshots: tuple[int, int]) -> str:
    """What an action changed, as the progress line and ``cdcflow history`` say it: snapshots
    before → after for an expiry, files for the others."""
    if action == "expire_snapshots":
        return f"{snapshots[0]} → {snapshots[1]} snapshots"
    return f"{files[0]} → {files[1]} files"


@dataclass(frozen=True)
class Plan:
    """What is due on a table: a rewrite of its data files, snapshot expiry, orphan removal."""

    rewrite: bool = False
    expire: bool = False
    orphans: bool = False

    @property
    def anything(self) -> bool:
        return self.rewrite or self.expire or self.orphans


def due(
    policy: MaintenanceConfig,
    figures: TableFigures,
    orphans_removed_at: float | None,
    now: float,
    forced: bool = False,
) -> Plan:
    """What the policy asks of a table with these figures (``forced``: maintenance run by
    hand — any delete file or two data files are enough to rewrite, orphans go whatever the
    interval). Snapshots expire, in both, when some beyond ``keep_snapshots`` exist and the
    oldest is older than the retention."""
    if forced:
        rewrite = figures.delete_files > 0 or figures.data_files > 1
        orphans = True
    else:
        rewrite = (
            figures.delete_files >= policy.rewrite_delete_files
            or figures.data_files >= policy.rewrite_data_files
        )
        interval = policy.orphan_interval_seconds
        orphans = orphans_removed_at is None or now - orphans_removed_at >= interval
    # an expiry is due only when it can expire something: more snapshots than the newest
    # ``keep_snapshots`` and one of them older than the retention (no call, and no row in
    # the maintenance table, for an expiry that would expire nothing)
    cutoff = now - policy.snapshot_retention_seconds
    old = figures.oldest is not None and figures.oldest < cutoff
    expire = figures.snapshots > policy.keep_snapshots and old
    return Plan(rewrite=rewrite, expire=expire, orphans=orphans)


def rewrite_sql(catalog: str, namespace: str, name: str) -> str:
    """Bin-pack small data files and fold delete files in (every data file with a delete
    file is rewritten); deletes no data file needs any more go too."""
    options = (
        "options => map('delete-file-threshold', '1', 'min-input-files', '2', "
        "'remove-dangling-deletes', 'true', 'partial-progress.enabled', 'false')"
    )
    return call_sql(catalog, "rewrite_data_files", namespace, name, options)


def orphans_sql(catalog: str, namespace: str, name: str, older_than: float) -> str:
    """Remove files under the table's location that no snapshot references, older than
    ``older_than`` (epoch seconds)."""
    bound = f"older_than => {timestamp_sql(older_than)}"
    return call_sql(catalog, "remove_orphan_files", namespace, name, bound)


def figures(table: TableHandle) -> TableFigures:
    """A table's figures from its current snapshot's summary and its snapshot list."""
    snap = table.current()
    summary: Mapping[str, str] = snap.summary if snap is not None else {}

    def number(key: str) -> int:
        try:
            return int(summary.get(key, "0"))
        except ValueError:
            return 0

    snapshots, oldest = 0, None
    if snap is not None:
        snapshots = table.snapshot_count()
        millis = table.oldest_millis()
        oldest = millis / 1000 if millis is not None else None
    return TableFigures(
        data_files=number("total-data-files"),
        delete_files=number("total-delete-files"),
        bytes=number("total-files-size"),
        snapshots=snapshots,
        oldest=oldest,
    )


@dataclass
class Maintainer:
    """Runs the policy over the tables a pipeline writes (see the module's text)."""

    catalog: Catalog
    policy_of: Callable[[str, str], MaintenanceConfig | None]
    clock: Callable[[], float] = time.time
    actions: list[Action] = field(default_factory=list)

    def run(
        self, spark: SparkSession, tables: list[tuple[str, str]], forced: bool = False
    ) -> list[Action]:
        """Maintain ``tables`` ((namespace, name)); the actions taken, in order."""
        done: list[Action] = []
        for namespace, name in tables:
            policy = self.policy_of(namespace, name)
            if policy is None:
                continue
            done.extend(self._table(spark, namespace, name, policy, forced))
        self.actions.extend(done)
        return done

    def _table(
        self,
        spark: SparkSession,
        namespace: str,
        name: str,
        policy: MaintenanceConfig,
        forced: bool,
    ) -> list[Action]:
        table = self.catalog.load(spark, namespace, name)
        if table is None or table.current() is None:
            return []
        now = self.clock()
        stamp = table.properties().get(ORPHANS_PROPERTY)
        removed_at = float(stamp) if stamp and stamp.replace(".", "", 1).isdigit() else None
        plan = due(policy, figures(table), removed_at, now, forced)
        out: list[Action] = []
        cat = self.catalog.name
        if plan.rewrite:
            sql = rewrite_sql(cat, namespace, name)
            out.append(self._do(spark, namespace, name, "rewrite_data_files", _call(spark, sql)))
        if plan.expire:
            older = now - policy.snapshot_retention_seconds
            keep = policy.keep_snapshots
            out.append(
                self._do(
                    spark, namespace, name, "expire_snapshots", lambda t: t.expire(older, keep)
                )
            )
        if plan.orphans:
            sql = orphans_sql(cat, namespace, name, now - policy.orphan_age_seconds)
            out.append(self._do(spark, namespace, name, "remove_orphan_files", _call(spark, sql)))
            self.catalog.alter(spark, namespace, name, properties={ORPHANS_PROPERTY: f"{now:.0f}"})
        return out

    def _do(
        self,
        spark: SparkSession,
        namespace: str,
        name: str,
        action: str,
        run: Callable[[TableHandle], object],
    ) -> Action:
        """Run one action (``run`` gets the table's handle), timed, with the figures around it."""
        table = self._loaded(spark, namespace, name)
        before = figures(table)
        started = time.perf_counter()
        ledger.step_reached({ledger.STEP: f"before:{action}", ledger.LOCATION: table.location()})
        run(table)
        ledger.step_reached({ledger.STEP: action})
        seconds = time.perf_counter() - started
        after = figures(self._loaded(spark, namespace, name))
        return Action(namespace, name, action, seconds, before, after)

    def _loaded(self, spark: SparkSession, namespace: str, name: str) -> TableHandle:
        table = self.catalog.load(spark, namespace, name)
        if table is None:  # under the run's lock, between this round's own actions
            raise CdcflowError(f"table {namespace}.{name} went away during its maintenance")
        return table


def _call(spark: SparkSession, sql: str) -> Callable[[TableHandle], object]:
    """An action that is one ``CALL`` of a procedure (its result, a row of counts, unused)."""
    return lambda _table: spark.sql(sql).collect()
