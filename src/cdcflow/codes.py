"""Dead-letter codes by the layer that gives them.

A dead letter's ``raw`` is what its layer had: the message's own bytes for a code given while
decoding (transports, framing, dialects: ``NOT_JSON``, ``DELETE_WITHOUT_KEY``, …), the decoded
canonical event as JSON for a code given after it (the engine and the outputs: the codes
below). One code never belongs to both layers; a replay decides by the letter's recorded
``kind`` (``message`` or ``event``), and ``tests/test_codes.py`` keeps the two sets apart.
"""

from __future__ import annotations

#: Codes the engine and the outputs give to decoded events (``kind`` = ``event``).
APPLY_CODES: frozenset[str] = frozenset(
    {
        "KEY_UNKNOWN",  # no key columns known for the table (none configured, none inferred)
        "KEYS_CHANGED",  # keys: none over a keyed replica, or keys over a keyless one
        "IMAGE_INCOMPLETE",  # a keyless table's event whose images cannot name its rows
        "KEY_MISSING",  # a row event lacks a value for a key column
        "SEQUENCE_MISSING",  # ordering columns (sequence_by) absent from the event
        "TYPE_CONFLICT",  # a value the replica's column type cannot hold
        "SEQUENCE_SHAPE_MISMATCH",  # sequences whose shape differs from the table's
        "REPLICA_NAME_CONFLICT",  # two source tables mapped onto one replica name
        "DELIVERY_FAILED",  # an output could not deliver the event
    }
)
