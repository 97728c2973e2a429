"""Concurrent sessions writing the live table set: inserts, updates (with and without the
TOASTed text), deletes, primary-key changes, delete-then-reinsert of a key, multi-table
transactions, a ``TRUNCATE`` followed by inserts in the same transaction, and the schema
changes of :data:`cdcflow.testing.live.schema.SCHEMA_CHANGES` at their share of the run.

Values cover what the columns can hold: decimals of every scale a column allows, negative and
fractional intervals, times up to ``24:00:00``, timestamps before 1970, JSON with nested
objects and exact decimals, arrays with ``NULL`` elements and separators inside elements,
empty and binary ``bytea``, text with quotes and non-ASCII characters.

Each session draws from its own seeded generator; which transactions commit, and in which
order, is decided by the database (deadlocks and key conflicts roll back and are counted).
"""

from __future__ import annotations

import datetime as dt
import functools
import random
import threading
import time
import uuid
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from decimal import Decimal
from typing import TYPE_CHECKING, Any

from cdcflow.testing.live.schema import SCHEMA_CHANGES, TABLES, setup_sql

if TYPE_CHECKING:
    import psycopg

_WORDS = (
    "alpha", "bravo", "café", "delta", "écho", "foxtrot", "golf", "hôtel", "india", "juliett",
    "kilo", "lima", "mike", "o'brien", 'say "hi"', "tab\there", "comma,inside", "{brace}",
    "back\\slash", "zoë", "日本", "☕", "😀", "",
)  # fmt: skip
_TIERS = ("bronze", "silver", "gold", "platinum")
_UTC = dt.UTC


@dataclass(frozen=True)
class Settings:
    """How much the workload writes: rows before the connector starts, sessions, their
    transactions per second, and the size of large text."""

    seed: int = 26
    sessions: int = 3
    tx_per_second: float = 12.0
    customers: int = 120
    orders: int = 160
    documents: int = 20
    ledger: int = 80
    big_text: tuple[int, int] = (3_000, 24_000)


@dataclass
class Keys:
    """The keys a table is believed to hold (sessions race, so it is a hint) and the next
    fresh key."""

    live: set[Any] = field(default_factory=set)
    next: int = 1
    lock: threading.Lock = field(default_factory=threading.Lock)

    def fresh(self) -> int:
        """A key never used before."""
        with self.lock:
            self.next += 1
            return self.next - 1

    def pick(self, rng: random.Random) -> Any | None:
        """A key the table probably holds."""
        with self.lock:
            if not self.live:
                return None
            return rng.choice(sorted(self.live, key=repr))

    def add(self, key: Any) -> None:
        with self.lock:
            self.live.add(key)

    def drop(self, key: Any) -> None:
        with self.lock:
            self.live.discard(key)


class Values:
    """Random column values of one session."""

    def __init__(self, rng: random.Random, big_text: tuple[int, int]) -> None:
        self.rng = rng
        self.big_text = big_text

    def text(self, words: int = 3) -> str:
        return " ".join(self.rng.choice(_WORDS) for _ in range(self.rng.randint(1, words)))

    def big(self) -> str:
        # hexadecimal text compresses only to half its size: stored out of line (TOAST)
        n = self.rng.randint(*self.big_text)
        return self.rng.randbytes(n // 2 + 1).hex()[:n]

    def decimal(self, precision: int, scale: int, null: float = 0.0) -> Decimal | None:
        """A value of ``numeric(precision, scale)`` written with any scale up to ``scale``."""
        if self.rng.random() < null:
            return None
        s = self.rng.randint(0, scale)
        whole = self.rng.randint(0, precision - scale)
        n = self.rng.randint(-(10 ** (whole + s)) + 1, 10 ** (whole + s) - 1)
        return Decimal(f"{n}E{-s}")  # exact: scaleb would round beyond 28 digits

    def loose_decimal(self) -> Decimal | None:
        """An unconstrained ``numeric`` value: any scale up to 18, up to 20 integer digits."""
        return self.decimal(38, 18, null=0.15)

    def date(self) -> dt.date:
        return dt.date(1950, 1, 1) + dt.timedelta(days=self.rng.randint(0, 365 * 100))

    def timestamp(self) -> dt.datetime:
        base = dt.datetime(1890, 1, 1) + dt.timedelta(
            seconds=self.rng.randint(0, 220 * 365 * 86400)
        )
        return base.replace(microsecond=self.rng.choice((0, self.rng.randint(0, 999_999))))

    def instant(self) -> dt.datetime:
        offset = dt.timezone(dt.timedelta(minutes=self.rng.choice((0, 60, -300, 330, 765))))
        return self.timestamp().replace(tzinfo=offset)

    def time(self) -> str:
        if self.rng.random() < 0.05:
            return self.rng.choice(("24:00:00", "00:00:00"))
        t = dt.time(
            self.rng.randint(0, 23),
            self.rng.randint(0, 59),
            self.rng.randint(0, 59),
            self.rng.choice((0, 500_000, self.rng.randint(0, 999_999))),
        )
        return t.isoformat()

    def interval(self) -> str | None:
        if self.rng.random() < 0.1:
            return None
        r = self.rng
        parts = [
            f"{r.randint(-3, 5)} years" if r.random() < 0.3 else "",
            f"{r.randint(-11, 11)} mons" if r.random() < 0.4 else "",
            f"{r.randint(-40, 40)} days" if r.random() < 0.6 else "",
            f"{r.randint(-30, 30)}:{r.randint(0, 59):02}:{r.randint(0, 59):02}"
            + (f".{r.randint(0, 999_999):06}" if r.random() < 0.5 else ""),
        ]
        return " ".join(p for p in parts if p)

    def json(self) -> Any:
        r = self.rng
        return {
            "sku": self.text(1),
            "qty": r.randint(-5, 500),
            "price": str(self.decimal(8, 3)),
            "exact": float(r.randint(0, 10_000)) / 8,
            "ok": r.random() < 0.5,
            "none": None,
            "nested": {"list": [r.randint(0, 9) for _ in range(r.randint(0, 4))], "s": self.text()},
        }

    def tags(self) -> list[str | None] | None:
        r = self.rng
        if r.random() < 0.1:
            return None
        return [None if r.random() < 0.1 else self.text(1) for _ in range(r.randint(0, 4))]

    def maybe(self, value: Callable[[], Any], null: float = 0.1) -> Any:
        return None if self.rng.random() < null else value()


def _jsonb(value: Any) -> Any:
    from psycopg.types.json import Jsonb

    return None if value is None else Jsonb(value)


@dataclass
class Stats:
    """What the sessions did: committed transactions by kind, rolled back ones, schema
    changes made."""

    committed: Counter[str] = field(default_factory=Counter)
    rolled_back: Counter[str] = field(default_factory=Counter)
    schema_changes: list[str] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def count(self, kind: str, ok: bool) -> None:
        with self.lock:
            (self.committed if ok else self.rolled_back)[kind] += 1


class Workload:
    """The table set, its initial rows, and the sessions that change it."""

    def __init__(self, url: str, settings: Settings | None = None) -> None:
        self.url = url
        self.settings = settings or Settings()
        self.keys = {t.name: Keys() for t in TABLES}
        self.stats = Stats()
        self.applied: set[str] = set()
        self._stop = threading.Event()
        self._threads: list[threading.Thread] = []
        self._errors: list[BaseException] = []

    def connect(self) -> psycopg.Connection[Any]:
        """A session of the workload's database."""
        import psycopg

        return psycopg.connect(self.url, autocommit=True)

    def setup(self) -> None:
        """Create the table set and its rows before the connector starts, a few rows per
        transaction."""
        s = self.settings
        rng = random.Random(s.seed)
        with self.connect() as conn:
            conn.execute(setup_sql())
            session = _Session(self, conn, rng, 0)
            counts = (
                ("customers", s.customers, session.new_customer),
                ("orders", s.orders, session.new_order),
                ("documents", s.documents, session.new_document),
                ("ledger", s.ledger, session.new_ledger_entry),
            )
            for _, n, make in counts:
                for start in range(0, n, 10):
                    with conn.transaction():
                        for _ in range(min(10, n - start)):
                            make()

    def start(self, duration: float) -> None:
        """Start the sessions (and the schema changes and the ``TRUNCATE`` at their share of
        ``duration`` seconds); they stop by themselves after ``duration``."""
        self._stop.clear()
        deadline = time.monotonic() + duration
        for i in range(self.settings.sessions):
            rng = random.Random(self.settings.seed * 1000 + i + 1)
            self._spawn(f"session-{i}", functools.partial(self._session, rng, i, deadline))
        self._spawn("schedule", lambda: self._schedule(time.monotonic(), duration))

    def _spawn(self, name: str, target: Callable[[], None]) -> None:
        def run() -> None:
            try:
                target()
            except BaseException as e:  # reported by join()
                self._errors.append(e)

        thread = threading.Thread(target=run, name=f"live-{name}", daemon=True)
        thread.start()
        self._threads.append(thread)

    def stop(self) -> None:
        """Ask the sessions to stop after their transaction in progress."""
        self._stop.set()

    def join(self, timeout: float | None = None) -> None:
        """Wait for the sessions; raises the first error a session met."""
        for thread in self._threads:
            thread.join(timeout)
        self._threads.clear()
        if self._errors:
            raise self._errors[0]

    @property
    def running(self) -> bool:
        """Whether a session still runs."""
        return any(t.is_alive() for t in self._threads)

    def _session(self, rng: random.Random, n: int, deadline: float) -> None:
        pause = self.settings.sessions / self.settings.tx_per_second
        with self.connect() as conn:
            session = _Session(self, conn, rng, n)
            while not self._stop.is_set() and time.monotonic() < deadline:
                session.one()
                time.sleep(rng.uniform(0, 2 * pause))

    def _schedule(self, started: float, duration: float) -> None:
        import psycopg

        plan = [(share, sql) for share, sql in SCHEMA_CHANGES]
        plan.append((0.7, "TRUNCATE"))
        plan.sort()
        with self.connect() as conn:
            session = _Session(self, conn, random.Random(self.settings.seed + 7), 99)
            for share, sql in plan:
                while time.monotonic() < started + share * duration:
                    if self._stop.wait(0.1):
                        return
                for _ in range(10):  # a deadlock with a session: try again
                    try:
                        if sql == "TRUNCATE":
                            session.truncate_ledger()
                        else:
                            conn.execute(sql)
                            self.stats.schema_changes.append(sql)
                        break
                    except psycopg.errors.DeadlockDetected:
                        continue
                self.applied.add(sql)

    def changed(self, fragment: str) -> bool:
        """Whether a schema change naming ``fragment`` was made."""
        return any(fragment in sql for sql in list(self.applied))


class _Session:
    """One connection's transactions."""

    def __init__(self, w: Workload, conn: psycopg.Connection[Any], rng: random.Random, n: int):
        self.w = w
        self.conn = conn
        self.rng = rng
        self.v = Values(rng, w.settings.big_text)
        self.n = n

    # ------------------------------------------------------------------ one transaction

    def one(self) -> None:
        """One random transaction, committed or rolled back (deadlock, key conflict)."""
        import psycopg

        kinds: list[tuple[str, Callable[[], None], int]] = [
            ("new_customer", self.new_customer, 6),
            ("update_customer", self.update_customer, 10),
            ("delete_customer", self.delete_customer, 3),
            ("customer_key_change", self.customer_key_change, 2),
            ("reinsert_customer", self.reinsert_customer, 2),
            ("place_order", self.place_order, 8),
            ("update_order", self.update_order, 8),
            ("delete_order", self.delete_order, 2),
            ("order_key_change", self.order_key_change, 1),
            ("new_document", self.new_document, 2),
            ("edit_document_title", self.edit_document_title, 6),
            ("edit_document_body", self.edit_document_body, 2),
            ("delete_document", self.delete_document, 1),
            ("ledger_entries", self.ledger_entries, 5),
            ("same_values_update", self.same_values_update, 1),
        ]
        kind, make, _ = self.rng.choices(kinds, weights=[k[2] for k in kinds])[0]
        try:
            with self.conn.transaction():
                make()
        except (
            psycopg.errors.DeadlockDetected,
            psycopg.errors.UniqueViolation,
            psycopg.errors.SerializationFailure,
            psycopg.errors.NumericValueOutOfRange,
        ):
            self.w.stats.count(kind, False)
            return
        self.w.stats.count(kind, True)

    def _exec(self, sql: str, params: tuple[Any, ...] | dict[str, Any] = ()) -> int:
        cur = self.conn.execute(sql, params)
        return cur.rowcount

    # ------------------------------------------------------------------ customers

    def _customer_row(self, key: int) -> dict[str, Any]:
        v = self.v
        row: dict[str, Any] = {
            "id": key,
            "name": v.text(),
            "email": v.maybe(lambda: f"user{key}@example.org"),
            "tier": v.maybe(lambda: self.rng.choice(_TIERS)),
            "balance": v.decimal(12, 2),
            "credit": v.loose_decimal(),
            "active": self.rng.random() < 0.8,
            "signup": v.maybe(v.date),
        }
        if self.rng.random() < 0.5:
            row["created_at"] = v.instant()
        if self.w.changed("nickname") and self.rng.random() < 0.7:
            row["nickname"] = v.maybe(v.text)
        return row

    def _insert(self, table: str, row: dict[str, Any]) -> int:
        cols = ", ".join(row)
        marks = ", ".join(f"%({c})s" for c in row)
        return self._exec(
            f"INSERT INTO {table} ({cols}) VALUES ({marks}) ON CONFLICT DO NOTHING", row
        )

    def _fresh_customer(self) -> int:
        key = self.w.keys["customers"].fresh()
        if self.w.changed("customers ALTER COLUMN id") and self.rng.random() < 0.3:
            key += 5_000_000_000  # beyond int, once the key is a bigint
        return key

    def new_customer(self) -> None:
        key = self._fresh_customer()
        if self._insert("customers", self._customer_row(key)):
            self.w.keys["customers"].add(key)

    def _update(self, table: str, row: Callable[[Any], dict[str, Any]], most: int) -> None:
        """Up to ``most`` columns of a row (by ``id``) set to new values."""
        key = self.w.keys[table].pick(self.rng)
        if key is None:
            return
        values = row(key)
        del values["id"]
        chosen = self.rng.sample(sorted(values), self.rng.randint(1, most))
        sets = ", ".join(f"{c} = %({c})s" for c in chosen)
        self._exec(
            f"UPDATE {table} SET {sets} WHERE id = %(id)s",
            {**{c: values[c] for c in chosen}, "id": key},
        )

    def _delete(self, table: str) -> None:
        key = self.w.keys[table].pick(self.rng)
        if key is not None and self._exec(f"DELETE FROM {table} WHERE id = %s", (key,)):
            self.w.keys[table].drop(key)

    def _key_change(self, table: str, fresh: Callable[[], int]) -> None:
        old = self.w.keys[table].pick(self.rng)
        if old is None:
            return
        new = fresh()
        if self._exec(f"UPDATE {table} SET id = %s WHERE id = %s", (new, old)):
            self.w.keys[table].drop(old)
            self.w.keys[table].add(new)

    def update_customer(self) -> None:
        self._update("customers", self._customer_row, 3)

    def delete_customer(self) -> None:
        self._delete("customers")

    def customer_key_change(self) -> None:
        self._key_change("customers", self._fresh_customer)

    def reinsert_customer(self) -> None:
        key = self.w.keys["customers"].pick(self.rng)
        if key is None:
            return
        self._exec("DELETE FROM customers WHERE id = %s", (key,))
        self._insert("customers", self._customer_row(key))

    # ------------------------------------------------------------------ orders

    def _order_row(self, key: int) -> dict[str, Any]:
        v, r = self.v, self.rng
        customer = self.w.keys["customers"].pick(r) or 1
        return {
            "id": key,
            "customer_id": customer if customer < 2**31 else 1,
            "placed_at": v.maybe(v.timestamp),
            "ship_by": v.maybe(v.time),
            "handling": v.interval(),
            "total": v.decimal(14, 4, null=0.1),
            "ref": v.maybe(uuid.uuid4),
            "lines": _jsonb(v.maybe(lambda: [v.json() for _ in range(r.randint(0, 3))])),
            "tags": v.tags(),
            "signature": v.maybe(lambda: r.randbytes(r.randint(0, 48))),
            "quantity": self._quantity(),
            "priority": v.maybe(lambda: r.randint(-(2**15), 2**15 - 1)),
            "weight": v.maybe(lambda: r.choice((0.1, 1.5, -2.75, 3.4e38, 1e-30, r.random()))),
            "score": v.maybe(
                lambda: r.choice((0.1, 1e300, -2.2250738585072014e-308, 2**53 + 1.0, r.random()))
            ),
            "note": v.big() if r.random() < 0.15 else v.maybe(v.text),
        }

    def _quantity(self) -> int:
        r = self.rng
        if r.random() < 0.8:
            return r.randint(0, 99)
        bits = 63 if self.w.changed("quantity TYPE bigint") else 31
        return r.randint(-(2**bits), 2**bits - 1)

    def new_order(self) -> int:
        key = self.w.keys["orders"].fresh()
        if self._insert("orders", self._order_row(key)):
            self.w.keys["orders"].add(key)
        return key

    def place_order(self) -> None:
        """A multi-table transaction: an order, its ledger entry, the customer's balance."""
        key = self.new_order()
        customer = self.w.keys["customers"].pick(self.rng)
        amount = self.v.decimal(8, 2)
        if customer is not None:
            self._exec(
                "UPDATE customers SET balance = balance - %s WHERE id = %s", (amount, customer)
            )
        self.new_ledger_entry(account=key % 50, amount=amount, memo=f"order {key}")

    def update_order(self) -> None:
        def row(key: int) -> dict[str, Any]:
            values = self._order_row(key)
            if self.rng.random() < 0.7:
                del values["note"]  # the note, when large, stays unchanged
            return values

        self._update("orders", row, 4)

    def delete_order(self) -> None:
        self._delete("orders")

    def order_key_change(self) -> None:
        self._key_change("orders", self.w.keys["orders"].fresh)

    # ------------------------------------------------------------------ documents

    def new_document(self) -> None:
        key = self.w.keys["documents"].fresh()
        row = {
            "id": key,
            "title": self.v.text(),
            "body": self.v.big(),
            "edited_at": self.v.instant(),
        }
        if self._insert("documents", row):
            self.w.keys["documents"].add(key)

    def edit_document_title(self) -> None:
        """An update that leaves the TOASTed body as it is."""
        key = self.w.keys["documents"].pick(self.rng)
        if key is not None:
            self._exec(
                "UPDATE documents SET title = %s, revision = revision + 1, edited_at = %s "
                "WHERE id = %s",
                (self.v.text(), self.v.instant(), key),
            )

    def edit_document_body(self) -> None:
        key = self.w.keys["documents"].pick(self.rng)
        if key is not None:
            body = None if self.rng.random() < 0.1 else self.v.big()
            self._exec(
                "UPDATE documents SET body = %s, revision = revision + 1 WHERE id = %s", (body, key)
            )

    def delete_document(self) -> None:
        self._delete("documents")

    # ------------------------------------------------------------------ ledger

    def new_ledger_entry(
        self, account: int | None = None, amount: Decimal | None = None, memo: str | None = None
    ) -> None:
        key = (
            account if account is not None else self.rng.randint(0, 49),
            self.w.keys["ledger"].fresh(),
        )
        row = {
            "account": key[0],
            "entry": key[1],
            "amount": amount if amount is not None else self.v.decimal(10, 2),
            "memo": memo if memo is not None else self.v.maybe(self.v.text),
        }
        if self._insert("ledger", row):
            self.w.keys["ledger"].add(key)

    def ledger_entries(self) -> None:
        for _ in range(self.rng.randint(1, 3)):
            self.new_ledger_entry()
        key = self.w.keys["ledger"].pick(self.rng)
        if key is not None:
            if self.rng.random() < 0.5:
                self._exec(
                    "UPDATE ledger SET amount = %s WHERE account = %s AND entry = %s",
                    (self.v.decimal(10, 2), *key),
                )
            elif self._exec("DELETE FROM ledger WHERE account = %s AND entry = %s", key):
                self.w.keys["ledger"].drop(key)

    def truncate_ledger(self) -> None:
        """``TRUNCATE`` and new entries in one transaction."""
        with self.conn.transaction():
            self._exec("TRUNCATE ledger")
            with self.w.keys["ledger"].lock:
                self.w.keys["ledger"].live.clear()
            for _ in range(3):
                self.new_ledger_entry()
        self.w.stats.count("truncate_ledger", True)

    # ------------------------------------------------------------------ other

    def same_values_update(self) -> None:
        """An update that changes nothing (PostgreSQL still logs it)."""
        key = self.w.keys["customers"].pick(self.rng)
        if key is not None:
            self._exec("UPDATE customers SET name = name WHERE id = %s", (key,))
