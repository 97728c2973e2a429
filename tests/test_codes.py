"""One code never means two things: the codes given while decoding (the dead letter holds the
message) and those given to decoded events (it holds the event's JSON) are apart, and every
code the engine and the outputs give is registered in :data:`cdcflow.codes.APPLY_CODES`."""

from __future__ import annotations

import re
from pathlib import Path

import cdcflow
from cdcflow.codes import APPLY_CODES

SRC = Path(cdcflow.__file__).parent
DECODING = ("transports", "decode", "dialects", "wire.py", "serve")
APPLYING = ("engine", "outputs", "pipeline/stages.py")
# a code given as the first argument of fail/DecodeError/Rejection, or as code=
GIVEN = re.compile(r"(?:fail\(|DecodeError\(|Rejection\(|reject\(|code=)\s*\"([A-Z][A-Z0-9_]+)\"")
# an upper-case literal with an underscore (operation names have none, but STOP_REQUESTED)
CODE_LIKE = re.compile(r"\"([A-Z]+_[A-Z0-9_]+)\"")
NOT_CODES = {"STOP_REQUESTED"}  # a batch stop reason, not a dead-letter code


def _files(parts: tuple[str, ...]) -> list[Path]:
    out: list[Path] = []
    for part in parts:
        path = SRC / part
        out.extend(sorted(path.rglob("*.py")) if path.is_dir() else [path])
    return out


def _codes(parts: tuple[str, ...], pattern: re.Pattern[str]) -> dict[str, set[str]]:
    found: dict[str, set[str]] = {}
    for path in _files(parts):
        for m in pattern.finditer(path.read_text()):
            found.setdefault(m.group(1), set()).add(str(path.relative_to(SRC)))
    return found


def test_decode_codes_and_apply_codes_are_apart() -> None:
    decode = _codes(DECODING, GIVEN)
    assert len(decode) > 40  # the pattern still finds what decoders give
    both = {c: sorted(where) for c, where in decode.items() if c in APPLY_CODES}
    assert not both, f"apply codes given while decoding: {both}"


def test_every_code_the_engine_and_outputs_give_is_registered() -> None:
    apply = _codes(APPLYING, CODE_LIKE)
    assert {"KEY_MISSING", "TYPE_CONFLICT", "DELIVERY_FAILED"} <= set(apply)
    unknown = {c: sorted(w) for c, w in apply.items() if c not in APPLY_CODES | NOT_CODES}
    assert not unknown, f"codes not in cdcflow.codes.APPLY_CODES: {unknown}"
