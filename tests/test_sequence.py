"""The sequence encoding preserves tuple order."""

from __future__ import annotations

import pickle

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


@pytest.mark.parametrize(
    "n", [10**99, -(10**99), 10**4400, 2**70000], ids=["1e99", "-1e99", "1e4400", "2^70000"]
)
def test_an_integer_past_99_digits_is_out_of_range_at_its_place(n: int) -> None:
    """The limit is exact (±(10**99 - 1) encode, ±10**99 do not), the error names the
    element's place, says the size (no ``str`` of a number Python would refuse to print)
    and pickles (Spark ships it between processes)."""
    with pytest.raises(sequence.OutOfRange) as caught:
        sequence.encode(("file", 1, n))
    e = caught.value
    assert e.index == 2 and isinstance(e, ValueError)
    size = "a 100-digit integer" if abs(n) == 10**99 else "an integer of 4000+ digits"
    assert str(e) == f"{size} is beyond what a sequence orders (up to 99 digits)"
    again = pickle.loads(pickle.dumps(e))
    assert (again.index, again.digits, str(again)) == (e.index, e.digits, str(e))


def test_the_largest_integers_encode_in_order() -> None:
    edge = [-(10**99) + 1, -(10**98), -1, 0, 10**98, 10**99 - 1]
    encoded = [sequence.encode((n,)) for n in edge]
    assert encoded == sorted(encoded)
    assert [sequence.decode(e) for e in encoded] == [(n,) for n in edge]
