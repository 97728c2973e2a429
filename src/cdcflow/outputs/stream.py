"""Outputs: the canonical stream emitted to downstream consumers.

Three kinds (``outputs:`` in the configuration, :class:`cdcflow.config.OutputConfig`):

* ``files`` — per micro-batch, JSON lines under ``<path>/batch=<batch id>/``: unified batch
  envelopes (``batch_id``, ``batch_size``, ``batch_timestamp``, ``events``) or the Kafka message
  form (``key`` ``table:primary_key``, ``value``, ``savegress-*`` ``headers``). A replayed batch
  overwrites its own directory, so the output is idempotent.
* ``kafka`` — the Kafka message form written to a topic with Spark's Kafka sink: key
  ``table:primary_key`` (one key stays on one partition), the unified event as the value,
  ``savegress-*`` headers (the event id among them, for downstream deduplication).
  At-least-once: a replayed batch writes its records again. A batch whose write fails comes
  back as rows the engine dead-letters (``DELIVERY_FAILED``).
* ``webhook`` — signed POSTs (``X-Savegress-Event-ID``, ``X-Savegress-Signature``,
  ``X-Savegress-Timestamp``) of unified batches, or single events when ``batch_size`` is 1,
  over urllib3 (kept-alive connections per task) with its retry policy: exponential backoff
  and jitter on timeouts, connection errors, 5xx and 429 (honouring ``Retry-After``), no retry
  on other 4xx, redirects not followed. Events of requests that still fail after
  ``max_attempts`` come back as rows the engine dead-letters (``DELIVERY_FAILED``). Delivery is
  at-least-once: event ids (and batch ids) are stable across retries and reruns, receivers
  deduplicate on them.

Everything runs on the executors through ``mapInArrow`` (Arrow-batched Python); nothing is
collected to the driver. Decimals are written as exact JSON numbers (``orjson.Fragment``).
"""

from __future__ import annotations

import datetime as dt
import hashlib
import random
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import orjson
import urllib3
from pydantic import SecretStr
from urllib3.exceptions import HTTPError as TransportError
from urllib3.exceptions import (
    InvalidHeader,
    MaxRetryError,
    NewConnectionError,
    ProtocolError,
)
from urllib3.exceptions import TimeoutError as TransportTimeout
from urllib3.util import Retry, Timeout

from cdcflow.event import format_timestamp, spark_schema_ddl
from cdcflow.signing import EVENT_ID_HEADER, signature_headers
from cdcflow.spark.worker import map_in_arrow
from cdcflow.types import ValueTypeError, from_wire, json_default

if TYPE_CHECKING:
    import pyarrow as pa
    from pyspark.sql import DataFrame

    from cdcflow.config import OutputConfig

#: Operations emitted to outputs (markers BEGIN/COMMIT/RESOLVED are not).
OUTPUT_OPERATIONS: tuple[str, ...] = (
    "INSERT",
    "UPDATE",
    "DELETE",
    "UPSERT",
    "SNAPSHOT",
    "TRUNCATE",
    "DDL",
)
#: Columns of the failure rows: the batch's event columns plus the delivery outcome.
FAILURE_DDL = (
    spark_schema_ddl() + ", _fp bigint, _target string, _source string, _status int, _reason string"
)
#: Longest wait honoured from a ``Retry-After`` header, seconds.
MAX_RETRY_AFTER = 60.0
#: Longest computed backoff, seconds.
MAX_BACKOFF = 30.0
#: Answers retried: 429 and every 5xx (any other status is final; redirects are not followed).
RETRY_STATUSES = frozenset({429, *range(500, 600)})


# --------------------------------------------------------------------------- rendering


def _as_dict(value: Any) -> dict[str, Any]:
    """A map value as a dict: Arrow gives a list of (key, value) pairs, Python a dict."""
    if value is None:
        return {}
    if isinstance(value, Mapping):
        return dict(value)
    return {k: v for k, v in value}


def _typed(image: Any, types: Mapping[str, str]) -> dict[str, Any] | None:
    if image is None:
        return None
    out: dict[str, Any] = {}
    for col, text in _as_dict(image).items():
        t = types.get(col, "string")
        try:
            out[col] = from_wire(text, t)
        except (ValueTypeError, ValueError, orjson.JSONDecodeError):
            out[col] = text  # not readable as its type: the wire text, unchanged
    return out


def stable_event_id(fp: Any, sequence: Any) -> str:
    """Event id for events without one: a hash of the batch fingerprint ``_fp`` (content of the
    event) and its sequence, identical across retries and reruns."""
    payload = f"{fp}|{sequence}".encode()
    return "cdc-" + hashlib.blake2b(payload, digest_size=16).hexdigest()


def render_unified(row: Mapping[str, Any]) -> dict[str, Any]:
    """A canonical event (a decoded-frame row: wire-string maps plus ``types``) as a unified-
    format event with typed values. Dump it with :func:`dumps` to keep decimals exact."""
    types = {k: v for k, v in _as_dict(row.get("types")).items() if v}
    position: Any = row.get("position")
    if isinstance(position, str):
        try:
            position = orjson.loads(position)
        except orjson.JSONDecodeError:
            pass
    ts = row.get("timestamp")
    doc: dict[str, Any] = {
        "id": row.get("id") or stable_event_id(row.get("_fp"), row.get("sequence")),
        "source": row.get("source"),
        "schema": row.get("schema"),
        "table": row.get("table"),
        "operation": row.get("operation"),
        "timestamp": format_timestamp(ts) if isinstance(ts, dt.datetime) else ts,
        "transaction_id": row.get("transaction_id"),
        "position": position,
        "before": _typed(row.get("before"), types),
        "after": _typed(row.get("after"), types),
        "metadata": _as_dict(row.get("metadata")),
    }
    if row.get("operation") == "DDL":
        doc["ddl_type"] = row.get("ddl_type")
        doc["ddl_command"] = row.get("ddl_command")
    return doc


def dumps(doc: Any) -> bytes:
    """Compact JSON with exact decimals, ISO timestamps and base64 bytes."""
    return orjson.dumps(doc, default=json_default)


def primary_key(row: Mapping[str, Any]) -> str:
    """The ``primary_key`` part of a Kafka key: the key values, comma-joined."""
    return ",".join("" if v is None else str(v) for v in _as_dict(row.get("key")).values())


def kafka_record(row: Mapping[str, Any], event: Mapping[str, Any]) -> dict[str, Any]:
    """The Kafka message form of one event as a JSON record (key, value, headers)."""
    ts = row.get("timestamp")
    millis = int(ts.timestamp() * 1000) if isinstance(ts, dt.datetime) else 0
    return {
        "key": f"{event['table']}:{primary_key(row)}",
        "value": event,
        "headers": {
            "savegress-event-id": event["id"],
            "savegress-operation": event["operation"],
            "savegress-table": event["table"],
            "savegress-timestamp": str(millis),
        },
    }


def envelope(batch_id: str, events: list[dict[str, Any]], now: dt.datetime) -> dict[str, Any]:
    """A unified batch envelope."""
    return {
        "batch_id": batch_id,
        "batch_size": len(events),
        "batch_timestamp": format_timestamp(now),
        "events": events,
    }


def _partition_id() -> int:
    from pyspark import TaskContext

    ctx = TaskContext.get()
    return ctx.partitionId() if ctx is not None else 0


def _chunks(rows: list[dict[str, Any]], size: int) -> Iterator[tuple[int, int]]:
    for start in range(0, len(rows), size):
        yield start, min(start + size, len(rows))


def _ordered(events: DataFrame, partitions: int) -> DataFrame:
    """Events spread over ``partitions`` by (table, key) and in sequence order within each:
    a replayed batch gives the same partitions, so the same batch ids."""
    from pyspark.sql import functions as F

    return events.repartition(partitions, F.col("_target"), F.to_json("key")).sortWithinPartitions(
        "sequence", "id"
    )


def _row_events(events: DataFrame) -> DataFrame:
    ops = ", ".join(f"'{op}'" for op in OUTPUT_OPERATIONS)
    return events.where(f"operation IN ({ops})")


# --------------------------------------------------------------------------- files


def _file_lines(
    pipeline: str, batch_id: int, fmt: str, size: int
) -> Callable[[Iterable[pa.RecordBatch]], Iterator[pa.RecordBatch]]:
    def fn(batches: Iterable[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        import pyarrow as pa

        part = _partition_id()
        chunk = 0
        now = dt.datetime.now(dt.UTC)
        for batch in batches:
            rows = batch.to_pylist()
            lines: list[str] = []
            if fmt == "kafka":
                for r in rows:
                    lines.append(dumps(kafka_record(r, render_unified(r))).decode())
            else:
                for a, b in _chunks(rows, size):
                    bid = f"{pipeline}-{batch_id}-{part}.{chunk}"
                    chunk += 1
                    events = [render_unified(r) for r in rows[a:b]]
                    lines.append(dumps(envelope(bid, events, now)).decode())
            if lines:
                yield pa.RecordBatch.from_arrays([pa.array(lines, pa.string())], ["value"])

    return fn


def write_files(events: DataFrame, out: OutputConfig, pipeline: str, batch_id: int) -> str:
    """Write one batch's events to ``<path>/batch=<batch_id>/`` (replaced when replayed)."""
    target = f"{str(out.path).rstrip('/')}/batch={batch_id}"
    rendered = map_in_arrow(
        _ordered(_row_events(events), out.concurrency),
        _file_lines(pipeline, batch_id, out.format, out.batch_size),
        "value string",
    )
    rendered.write.mode("overwrite").text(target)
    return target


# --------------------------------------------------------------------------- kafka

#: The rows Spark's Kafka sink takes.
KAFKA_ROW_DDL = "key binary, value binary, headers array<struct<key:string,value:binary>>"


def _kafka_rows(batches: Iterable[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    import pyarrow as pa

    header = pa.struct([("key", pa.string()), ("value", pa.binary())])
    for batch in batches:
        keys: list[bytes] = []
        values: list[bytes] = []
        headers: list[list[dict[str, Any]]] = []
        for row in batch.to_pylist():
            record = kafka_record(row, render_unified(row))
            keys.append(record["key"].encode("utf-8"))
            values.append(dumps(record["value"]))
            headers.append(
                [{"key": k, "value": str(v).encode("utf-8")} for k, v in record["headers"].items()]
            )
        if keys:
            yield pa.RecordBatch.from_arrays(
                [
                    pa.array(keys, pa.binary()),
                    pa.array(values, pa.binary()),
                    pa.array(headers, pa.list_(header)),
                ],
                ["key", "value", "headers"],
            )


def write_kafka(
    events: DataFrame, out: OutputConfig, pipeline: str, batch_id: int
) -> DataFrame | None:
    """Write one batch's events to the output's topic; ``None`` when written, else the frame
    of the events not delivered (columns of :data:`FAILURE_DDL`) when Spark's Kafka sink
    failed."""
    from py4j.protocol import Py4JJavaError
    from pyspark.errors.exceptions.captured import CapturedException

    kafka = out.kafka
    assert kafka is not None  # a kafka output has its section (configuration validation)
    rows = _ordered(_row_events(events), out.concurrency)
    records = map_in_arrow(rows, _kafka_rows, KAFKA_ROW_DDL)
    options = kafka.connection_options(f"output {out.name!r}")
    try:
        records.write.format("kafka").options(**options).option("topic", kafka.topic).save()
    except (Py4JJavaError, CapturedException) as e:
        from pyspark.sql import functions as F

        from cdcflow.spark.errors import first_line

        cols = [c.split(" ")[0].strip("`") for c in FAILURE_DDL.split(", ")][:-2]
        failed = _row_events(events).select(*cols)
        reason = f"Kafka write to topic {kafka.topic} failed: {first_line(e)}"
        return failed.withColumn("_status", F.lit(None).cast("int")).withColumn(
            "_reason", F.lit(reason)
        )
    return None


# --------------------------------------------------------------------------- webhook


def load_secret(out: OutputConfig) -> SecretStr | None:
    """The output's ``secret``, read now (``None`` when unsigned)."""
    if out.secret is None:
        return None
    return SecretStr(out.secret.read(f"output {out.name!r}: secret").text())


@dataclass(frozen=True)
class Delivery:
    """Outcome of one request after its retries."""

    ok: bool
    status: int | None
    reason: str
    attempts: int


def backoff_delay(
    retry: int, base: float, cap: float = MAX_BACKOFF, rng: Callable[[], float] = random.random
) -> float:
    """Wait before retry number ``retry`` (1-based): ``base * 2**(retry-1)`` with jitter
    between 50% and 150%, at most ``cap``."""
    return min(base * (2 ** (retry - 1)) * (0.5 + rng()), cap)


class WebhookRetry(Retry):
    """urllib3's retry policy with the webhook's waits: the backoff of :func:`backoff_delay`
    from the first retry on (urllib3's own starts at the second), and ``Retry-After`` (seconds
    or an HTTP date) honoured on 429 and 503 only, at most :data:`MAX_RETRY_AFTER`; one that
    cannot be read leaves the backoff in force."""

    RETRY_AFTER_STATUS_CODES = frozenset({429, 503})

    def get_backoff_time(self) -> float:
        return backoff_delay(len(self.history), self.backoff_factor)

    def get_retry_after(self, response: urllib3.BaseHTTPResponse) -> float | None:
        if response.status not in self.RETRY_AFTER_STATUS_CODES:
            return None
        try:
            seconds = super().get_retry_after(response)
        except InvalidHeader:
            return None
        return None if seconds is None else min(float(seconds), MAX_RETRY_AFTER)


def retry_policy(max_attempts: int, backoff: float) -> WebhookRetry:
    """The retry policy of one request: up to ``max_attempts`` attempts; timeouts, connection
    errors, 429 and 5xx are retried, any other answer is final."""
    return WebhookRetry(
        total=max_attempts - 1,
        allowed_methods=frozenset({"POST"}),
        status_forcelist=RETRY_STATUSES,
        backoff_factor=backoff,
    )


def connection_pool() -> urllib3.PoolManager:
    """A kept-alive connection per endpoint for one task's requests, which go one at a time."""
    return urllib3.PoolManager(maxsize=1, retries=False)


def _failure(error: BaseException) -> str:
    """``timeout`` or ``connection: <what the socket said>`` (never the URL, which may carry
    a token)."""
    # urllib3 files a refused connection under its connect timeouts
    if isinstance(error, TimeoutError | TransportTimeout) and not isinstance(
        error, NewConnectionError
    ):
        return "timeout"
    cause: object = error
    # the socket's own error: raised from (urllib3 2) or during (1.26) the wrapping one
    if isinstance(error.__cause__ or error.__context__, OSError):
        cause = error.__cause__ or error.__context__
    elif isinstance(error, ProtocolError) and len(error.args) == 2:
        cause = error.args[1]
    return f"connection: {cause}"


def _headers(body: bytes, event_id: str, secret: SecretStr | None) -> dict[str, str]:
    headers = {"Content-Type": "application/json", "User-Agent": "cdcflow"}
    if secret is not None:
        headers.update(signature_headers(body, secret.get_secret_value(), event_id))
    else:
        headers[EVENT_ID_HEADER] = event_id
    return headers


def post(
    url: str,
    body: bytes,
    event_id: str,
    secret: SecretStr | None,
    *,
    max_attempts: int,
    timeout: float,
    backoff: float,
    pool: urllib3.PoolManager | None = None,
) -> Delivery:
    """POST ``body`` with the unified format's headers, retrying what may succeed later
    (:func:`retry_policy`). Each attempt is signed afresh, so its timestamp is current."""
    http = pool if pool is not None else connection_pool()
    policy = retry_policy(max_attempts, backoff)
    limits = Timeout(connect=timeout, read=timeout)
    attempt = 0
    while True:
        attempt += 1
        response: urllib3.BaseHTTPResponse | None = None
        error: Exception | None = None
        try:
            response = http.request(
                "POST",
                url,
                body=body,
                headers=_headers(body, event_id, secret),
                timeout=limits,
                redirect=False,
            )
        except (TransportError, OSError) as e:
            error, status, reason = e, None, _failure(e)
        else:
            status, reason = response.status, f"HTTP {response.status}"
            if 200 <= status < 300:
                return Delivery(True, status, "ok", attempt)
            if not policy.is_retry("POST", status, "Retry-After" in response.headers):
                return Delivery(False, status, reason, attempt)
        try:
            policy = policy.increment("POST", url, response=response, error=error)
        except MaxRetryError:
            return Delivery(False, status, reason, attempt)
        policy.sleep(response)


def _deliver(
    pipeline: str, batch_id: int, out: OutputConfig, secret: SecretStr | None
) -> Callable[[Iterable[pa.RecordBatch]], Iterator[pa.RecordBatch]]:
    url, size = out.url, out.batch_size
    assert url is not None  # a webhook output has its url (configuration validation)
    attempts, timeout, backoff = out.max_attempts, out.timeout, out.backoff

    def fn(batches: Iterable[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        import pyarrow as pa

        part = _partition_id()
        chunk = 0
        now = dt.datetime.now(dt.UTC)
        with connection_pool() as pool:
            for batch in batches:
                rows = batch.to_pylist()
                failed: list[int] = []
                statuses: list[int | None] = []
                reasons: list[str] = []
                for a, b in _chunks(rows, size):
                    events = [render_unified(r) for r in rows[a:b]]
                    if size == 1:
                        body, eid = dumps(events[0]), str(events[0]["id"])
                    else:
                        eid = f"{pipeline}-{batch_id}-{part}.{chunk}"
                        body = dumps(envelope(eid, events, now))
                    chunk += 1
                    result = post(
                        url,
                        body,
                        eid,
                        secret,
                        pool=pool,
                        max_attempts=attempts,
                        timeout=timeout,
                        backoff=backoff,
                    )
                    if not result.ok:
                        failed.extend(range(a, b))
                        statuses.extend([result.status] * (b - a))
                        reasons.extend(
                            [f"{result.reason} after {result.attempts} attempt(s)"] * (b - a)
                        )
                if failed:
                    taken = batch.take(pa.array(failed, pa.int64()))
                    taken = taken.append_column("_status", pa.array(statuses, pa.int32()))
                    yield taken.append_column("_reason", pa.array(reasons, pa.string()))

    return fn


def deliver_webhook(
    events: DataFrame, out: OutputConfig, pipeline: str, batch_id: int
) -> DataFrame:
    """Deliver one batch's events; returns the (materialised) frame of the events that could
    not be delivered, with ``_status`` and ``_reason``, columns of :data:`FAILURE_DDL`."""
    secret = load_secret(out)
    cols = [c.split(" ")[0] for c in FAILURE_DDL.split(", ")][:-2]
    frame = _ordered(_row_events(events).select(*[c.strip("`") for c in cols]), out.concurrency)
    failures = map_in_arrow(frame, _deliver(pipeline, batch_id, out, secret), FAILURE_DDL)
    # deliver exactly once per batch run: the failures are computed here, not on every read
    return failures.localCheckpoint(eager=True)


def failure_message_sql(out: OutputConfig) -> str:
    """Spark SQL text of the dead-letter message of a failed delivery."""
    name = out.name.replace("'", "")
    return (
        f"concat('output {name}: delivery failed, last status ', "
        "coalesce(CAST(_status AS string), 'none'), ' (', _reason, ')')"
    )


def emit(
    events: DataFrame, outputs: Sequence[OutputConfig], pipeline: str, batch_id: int
) -> list[DataFrame]:
    """Run every configured output over one batch's events; dead-letter rows of failures."""
    from cdcflow.engine.deadletters import coded_rows

    dead: list[DataFrame] = []
    for out in outputs:
        if out.type == "files":
            write_files(events, out, pipeline, batch_id)
        elif out.type == "kafka":
            failed = write_kafka(events, out, pipeline, batch_id)
            if failed is not None:
                dead.append(
                    coded_rows(
                        failed, pipeline, batch_id, "DELIVERY_FAILED", failure_message_sql(out)
                    )
                )
        else:
            failures = deliver_webhook(events, out, pipeline, batch_id)
            dead.append(
                coded_rows(
                    failures, pipeline, batch_id, "DELIVERY_FAILED", failure_message_sql(out)
                )
            )
    return dead
