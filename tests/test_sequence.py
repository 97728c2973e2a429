"""The sequence encoding preserves tuple order."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from cdcflow import sequence

element = st.one_of(
    st.none(),
    st.integers(min_value=-(10**40), max_value=10**40),
    st.text(max_size=12),
)
tuples = st.lists(element, max_size=5).map(tuple)


def _sign(x: int) -> int:
    return (x > 0) - (x < 0)


@settings(max_examples=500, deadline=None)
@given(tuples, tuples)
def test_string_order_equals_tuple_order(a: tuple, b: tuple) -> None:
    ea, eb = sequence.encode(a), sequence.encode(b)
    expected = sequence.compare_tuples(a, b)
    actual = (ea > eb) - (ea < eb)
    assert actual == expected
    # Spark compares UTF-8 bytes: the same order must hold for the encoded bytes
    ba, bb = ea.encode(), eb.encode()
    assert (ba > bb) - (ba < bb) == expected


@settings(max_examples=300, deadline=None)
@given(tuples)
def test_round_trip(t: tuple) -> None:
    assert sequence.decode(sequence.encode(t)) == t


def test_examples_are_readable() -> None:
    assert sequence.encode((305441741, 42)) == "p09305441741!p0242!"
    assert sequence.encode(("mysql-bin", -5)) == "smysql-bin!n984!"
    assert sequence.encode((0,)) < sequence.encode((0, 0)) < sequence.encode((1,))


def test_lsn_text_order_is_not_used() -> None:
    # as text '0/A' > '0/1000'; as LSNs 0/A < 0/1000
    from cdcflow.positions import pg_lsn

    assert sequence.encode((pg_lsn("0/A"),)) < sequence.encode((pg_lsn("0/1000"),))


@pytest.mark.parametrize("bad", [1.5, True, b"x"])
def test_rejects_other_types(bad: object) -> None:
    with pytest.raises(TypeError):
        sequence.encode((bad,))  # type: ignore[arg-type]


def test_rejects_huge_integers() -> None:
    with pytest.raises(ValueError, match="99 digits"):
        sequence.encode((10**100,))
