"""Webhook signatures of the unified format, shared by ``cdcflow serve`` and outbound delivery.

The unified format ("Webhook Delivery") signs the raw request body only::

    X-Savegress-Signature: sha256=<hex HMAC-SHA256 of the body, keyed with the shared secret>
    X-Savegress-Timestamp: <unix seconds>
    X-Savegress-Event-ID: <event id>

Verification semantics (what :func:`verify` implements, and what receivers should do):

* the header is ``sha256=`` followed by 64 hex digits; the prefix is matched without regard to
  case, surrounding white space is ignored, the digits are compared lower-cased;
* the comparison is constant-time (:func:`hmac.compare_digest` over bytes);
* a missing, empty, non-ASCII, wrongly prefixed or malformed header is simply *not valid*
  (``False``), never an exception — the spec's sample ``verify_signature`` raises ``TypeError``
  on a missing or non-ASCII header, which a receiver must answer 401, not 500;
* the timestamp and the event id are **not** signed: a timestamp window alone does not stop
  replays (anyone holding a signed body can send it again with a fresh timestamp). Receivers
  deduplicate on the event id carried *inside* the signed body (``id``, or ``batch_id`` of a
  batch) for longer than the sender retries (:func:`signed_event_id`).
"""

from __future__ import annotations

import hashlib
import hmac
import time
from collections.abc import Iterable, Mapping
from typing import Any

import orjson

SIGNATURE_HEADER = "X-Savegress-Signature"
TIMESTAMP_HEADER = "X-Savegress-Timestamp"
EVENT_ID_HEADER = "X-Savegress-Event-ID"
PREFIX = "sha256="
_HEX = frozenset("0123456789abcdef")


def _key(secret: bytes | str) -> bytes:
    return secret.encode("utf-8") if isinstance(secret, str) else bytes(secret)


def sign(body: bytes, secret: bytes | str) -> str:
    """The ``X-Savegress-Signature`` value of ``body``: ``sha256=<hex HMAC-SHA256>``."""
    return PREFIX + hmac.new(_key(secret), body, hashlib.sha256).hexdigest()


def _digest_text(header_value: Any) -> bytes | None:
    """The 64 lower-case hex digits of a signature header, or ``None`` when malformed."""
    if header_value is None:
        return None
    if isinstance(header_value, bytes | bytearray):
        try:
            text = bytes(header_value).decode("ascii")
        except UnicodeDecodeError:
            return None
    elif isinstance(header_value, str):
        text = header_value
    else:
        return None
    if not text.isascii():
        return None
    text = text.strip()
    if text[: len(PREFIX)].lower() != PREFIX:
        return None
    digits = text[len(PREFIX) :].strip().lower()
    if len(digits) != 64 or not set(digits) <= _HEX:
        return None
    return digits.encode("ascii")


def verify(body: bytes, header_value: Any, secret: bytes | str) -> bool:
    """Whether ``header_value`` is a valid signature of ``body`` under ``secret``.

    Constant-time; ``False`` (never an exception) for a missing, non-ASCII or garbage header.
    """
    return verify_any(body, header_value, (secret,))


def verify_any(body: bytes, header_value: Any, secrets: Iterable[bytes | str]) -> bool:
    """:func:`verify` against several secrets (rotation: old and new accepted for a while).
    Every secret is tried, so the time taken does not tell which one matched."""
    given = _digest_text(header_value)
    if given is None:
        return False
    ok = False
    for secret in secrets:
        expected = hmac.new(_key(secret), body, hashlib.sha256).hexdigest().encode("ascii")
        ok |= hmac.compare_digest(expected, given)
    return ok


def check_timestamp(header_value: Any, tolerance: float, now: float | None = None) -> str | None:
    """``None`` when ``X-Savegress-Timestamp`` (unix seconds; milliseconds are recognised by
    their size) is within ``tolerance`` seconds of ``now``, else why not (``missing``,
    ``malformed``, ``stale``, ``future``)."""
    if header_value is None or header_value == "":
        return "missing"
    if isinstance(header_value, bytes | bytearray):
        try:
            header_value = bytes(header_value).decode("ascii")
        except UnicodeDecodeError:
            return "malformed"
    text = str(header_value).strip()
    if not text.isascii() or not text.isdigit() or len(text) > 16:
        return "malformed"
    value = int(text)
    if value > 10**11:  # milliseconds (the Kafka form's savegress-timestamp)
        value //= 1000
    current = time.time() if now is None else now
    if value < current - tolerance:
        return "stale"
    if value > current + tolerance:
        return "future"
    return None


def signed_event_id(body: bytes) -> str | None:
    """The event id carried inside a signed unified-format body: a single event's ``id`` or a
    batch's ``batch_id``; ``None`` when the body is not such a JSON object or has none."""
    try:
        doc = orjson.loads(body)
    except orjson.JSONDecodeError:
        return None
    if not isinstance(doc, Mapping):
        return None
    for name in ("batch_id", "id") if "events" in doc else ("id",):
        value = doc.get(name)
        if isinstance(value, str | int) and not isinstance(value, bool) and str(value):
            return str(value)
    return None


def signature_headers(
    body: bytes, secret: bytes | str, event_id: str, timestamp: int | None = None
) -> dict[str, str]:
    """The three headers a sender puts on a unified-format webhook request."""
    return {
        EVENT_ID_HEADER: event_id,
        SIGNATURE_HEADER: sign(body, secret),
        TIMESTAMP_HEADER: str(int(time.time()) if timestamp is None else timestamp),
    }
