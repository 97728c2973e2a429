"""Fuzzing every decoder: mutated conformance samples and renderer output, per dialect and
with detection, through the decoder, the Arrow column builder and the split-message rules.

Bounded in the normal suite (``CDCFLOW_FUZZ_EXAMPLES``, default 1,000 per target); ``make fuzz``
runs 10,000 per target and prints the figures.
"""

from __future__ import annotations

import os
import resource
import sys
import time

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from cdcflow import sequence
from cdcflow.decode.decoder import DECODER_ERROR, Decoder
from tests.fuzzing import (
    POSITION_FIELDS,
    SHARED,
    TARGETS,
    PositionField,
    Tally,
    check,
    mutated,
    position_values,
    seed_files,
)

EXAMPLES = int(os.environ.get("CDCFLOW_FUZZ_EXAMPLES", "1000"))
#: Trace each file's memory against the bound of :mod:`tests.fuzzing` (``make fuzz``).
TRACE = os.environ.get("CDCFLOW_FUZZ_MEMORY", "") == "1"
_TALLIES: dict[str, Tally] = {}


@pytest.mark.parametrize("dialect", TARGETS)
def test_mutated_messages_end_in_events_or_coded_rejections(dialect: str) -> None:
    if not (SHARED / "conformance").is_dir():
        pytest.skip(f"{SHARED} is absent: fuzzing seeds from renderer output only")
    tally = _TALLIES.setdefault(dialect, Tally(trace=TRACE))
    for wire in (False, True):  # first use imports and caches: not the memory of a message
        for name, data in seed_files(dialect)[:3]:
            check(dialect, name, data, wire)
    started = time.perf_counter()

    @settings(
        max_examples=EXAMPLES,
        deadline=None,
        database=None,
        suppress_health_check=list(HealthCheck),
    )
    @given(file=mutated(dialect), wire=st.booleans())
    def run(file: tuple[str, bytes], wire: bool) -> None:
        check(dialect, file[0], file[1], wire, tally)

    run()
    if EXAMPLES > 1000:
        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
        codes = ", ".join(f"{c} {n}" for c, n in sorted(tally.rejections.items()))
        print(
            f"\nfuzz {dialect}: {tally.files} mutated files, {tally.messages} messages, "
            f"{tally.events} events, 0 exceptions, {time.perf_counter() - started:.0f}s, "
            f"slowest file {tally.slowest * 1000:.0f} ms, largest {tally.largest} bytes, "
            f"process peak RSS {peak:.0f} MiB"
            + (
                f", highest traced peak of one file {tally.peak / 1024:.0f} KiB "
                f"({tally.peak_size} bytes)"
                if tally.trace
                else ""
            )
            + f"\n  rejections: {codes}",
            file=sys.stderr,
        )


def test_every_dialect_has_position_fields_fuzzed() -> None:
    assert {f.dialect for f in POSITION_FIELDS} == set(TARGETS) - {"auto"}


@settings(max_examples=600, deadline=None, database=None)
@given(case=position_values(), wire=st.booleans())
def test_position_numbers_at_and_past_the_limits(
    case: tuple[PositionField, int, bytes], wire: bool
) -> None:
    """A position number the dialect orders gives an event whose sequence holds it, at the
    limit too; one past it (the encoder's 99 digits, 64 bits read without exact numbers, a
    dialect's own) is a coded rejection naming the field (or, past 100 digits, the JSON
    reader's ``NUMBER_TOO_LARGE``), never ``DECODER_ERROR``."""
    spot, number, data = case
    outcomes = list(Decoder(spot.dialect, wire=wire).decode_file(data, spot.origin))
    events = [e for o in outcomes for e in o.events]
    rejections = [r for o in outcomes for r in o.rejections]
    assert DECODER_ERROR not in {r.code for r in rejections}, rejections
    if 0 <= number < spot.limit:
        assert not rejections, rejections
        (event,) = events
        assert number in sequence.decode(event["sequence"])
    elif abs(number) >= spot.limit:
        assert not events
        (rejection,) = rejections
        # past 100 digits a JSON number is refused as the message is read, by no field
        if number > 0 and rejection.code != "NUMBER_TOO_LARGE":
            assert any(n in rejection.message for n in spot.names), rejection
        if rejection.code == "POSITION_OUT_OF_RANGE":
            assert f"position field '{spot.names[0]}'" in rejection.message
            assert "integer is beyond what a sequence orders (up to 99 digits)" in (
                rejection.message
            )
