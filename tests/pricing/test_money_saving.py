"""A saving against on-demand reads rounded down, beside a spend and an on-demand figure rounded up; an amount is
dollars with a point before the cents, never an exponent (pricing/money.py).

`broker costs` said "spent $0.0001; the same work on on-demand: $0.0003; saved $0.0003 (80%)" for an exact
$0.000056 / $0.000280 / $0.000224: the saving rounded up as a cost is, overstated, and more than the two figures
beside it leave. `/broker budget j-… 1e3` set a budget of $1,000.00.
"""

from __future__ import annotations

import random
from decimal import Decimal

import pytest

from pricing.money import (AmountTooLarge, MoneyError, NotPlain, TooPrecise, fmt, fmt_saving, shown, to_micros,
                           typed_to_micros)

SAVINGS = [
    pytest.param(56, 280, "$0.0002", id="an exact $0.000224 reads $0.0002, not $0.0003 (the auditor's CLI line)"),
    pytest.param(4_610, 10_899, "$0.0062", id="an exact $0.006289 reads $0.0062, not $0.0063 (the Slack notice)"),
    pytest.param(5_000_000, 20_000_000, "$15.00", id="whole cents read as they are"),
    pytest.param(2_000_000, 17_123_456, "$15.12", id="cents rounded down: $15.123456 reads $15.12"),
    pytest.param(1_000_100, 1_009_900, "$0.00",
                 id="never more than the figures shown leave: $1.01 on-demand less $1.01 spent is $0.00, not $0.0098"),
    pytest.param(0, 50, "under $0.0001", id="a saving too small to show is under $0.0001, not $0.00 nor $0.0001"),
    pytest.param(0, 0, "$0.00", id="nothing saved reads $0.00"),
    pytest.param(1_100_000, 1_000_000, "-$0.10", id="paid more is a cost: as fmt writes it, rounded up"),
    pytest.param(4_601, 1, "-$0.0046", id="paid $0.0046 more, rounded up"),
]


@pytest.mark.parametrize("spent, equivalent, text", SAVINGS)
def test_a_saving_reads_rounded_down(spent, equivalent, text):
    assert fmt_saving(spent, equivalent) == text


def _value(text: str) -> int:
    return to_micros(text.removeprefix("under "), exact=True)


def test_a_saving_never_reads_as_more_than_was_saved_nor_than_the_figures_beside_it_leave():
    rng = random.Random(11)
    cases = [(s, e) for s in range(0, 400, 7) for e in range(s, s + 400, 3)]
    for _ in range(20_000):
        scale = rng.choice([10**3, 10**5, 10**7, 10**10])
        s, e = rng.randrange(0, scale), rng.randrange(0, scale)
        cases.append((min(s, e), max(s, e)))
    for spent, equivalent in cases:
        saving = equivalent - spent
        text = fmt_saving(spent, equivalent)
        if text.startswith("under "):  # true, and more than nothing
            assert 0 < saving < _value(text), (spent, equivalent, text)
            continue
        value = _value(text)
        assert 0 <= value <= saving, (spent, equivalent, text)  # rounded down: never overstated
        assert shown(spent) + value <= shown(equivalent), (spent, equivalent, text)  # the three read side by side
        assert saving - value < 10_000 + shown(spent) - spent, (spent, equivalent, text)  # and not far below


@pytest.mark.parametrize("typed", ["1e3", "1E3", "1e+3", "2.5e2", "$1e3", "1e-2", " 1e3 "], ids=repr)
def test_an_amount_with_an_exponent_is_refused_naming_it(typed):
    with pytest.raises(NotPlain) as caught:
        to_micros(typed, exact=True)
    assert repr(typed.strip().removeprefix("$")) in str(caught.value) or repr(typed) in str(caught.value)
    assert "exponent" in str(caught.value)
    with pytest.raises(MoneyError):
        to_micros(typed)  # a price read as loosely: the same


def test_the_refusal_says_how_to_write_it():
    with pytest.raises(NotPlain, match=r"'1e3' is not an amount of dollars: write it as 1000, not with an exponent"):
        to_micros("1e3", exact=True)


@pytest.mark.parametrize("typed", ["nan", "NaN", "inf", "-Infinity", "sNaN"], ids=repr)
def test_nan_and_infinity_are_refused_naming_the_value(typed):
    with pytest.raises(NotPlain, match=repr(typed)):
        to_micros(typed, exact=True)


@pytest.mark.parametrize("typed, exc", [("1e300", AmountTooLarge), ("1e-999999999999", TooPrecise)], ids=repr)
def test_an_exponent_past_the_range_still_says_the_largest_or_the_finest_there_is(typed, exc):
    with pytest.raises(exc):
        to_micros(typed, exact=True)


@pytest.mark.parametrize("typed, micros", [
    (5, 5_000_000), (5.5, 5_500_000), ("5", 5_000_000), ("5.5", 5_500_000), (".5", 500_000), ("5.", 5_000_000),
    ("+5", 5_000_000), ("$1,000.50", 1_000_500_000), (Decimal("1E+3"), 1_000_000_000), (0.00001, 10),
    (1e3, 1_000_000_000),
], ids=repr)
def test_numbers_and_plain_amounts_still_read(typed, micros):
    """JSON and YAML numbers are numbers (``0.00001``, whose ``repr`` is ``1e-05``, too); a ``Decimal`` is one
    already; only text is read as typed."""
    assert typed_to_micros(typed, exact=True) == micros


def test_fmt_still_rounds_a_cost_up():
    assert fmt(56) == "$0.0001" and fmt(10_899) == "$0.0109"
