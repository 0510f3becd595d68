"""How an amount left of a budget, and a spend beside its budget, read to people (pricing/money.py).

A cost is rounded up (never understated), a cap a user set is shown exactly; what is *left* of a cap is rounded
down, so a message never says the broker will still spend more than it will, and "$49.987654" left after a spend
reads "$49.98".
"""

from __future__ import annotations

import random
from decimal import Decimal

import pytest

from pricing.money import fmt, fmt_left, fmt_limit, fmt_spent_of, shown, to_micros

LEFT = [
    pytest.param(49_987_654, None, "$49.98", id="$49.987654 left reads $49.98: cents, rounded down"),
    pytest.param(49_999_999, None, "$49.99", id="a micro-dollar short of $50 left reads $49.99, never $50.00"),
    pytest.param(1_234_567_890, None, "$1,234.56", id="thousands are grouped as a cost's are"),
    pytest.param(1_000_000, None, "$1.00", id="a whole dollar left reads $1.00"),
    pytest.param(1_900, None, "$0.0019", id="under a dollar, a hundredth of a cent: $0.0019"),
    pytest.param(1_999, None, "$0.0019", id="$0.001999 left reads $0.0019, rounded down, not $0.0020"),
    pytest.param(999_999, None, "$0.9999", id="a micro-dollar short of a dollar reads $0.9999"),
    pytest.param(4_000, None, "$0.0040", id="$0.004 left reads $0.0040, as fmt writes a cost of $0.004"),
    pytest.param(500_050, None, "$0.50", id="a rest that rounds down to whole cents reads $0.50, not $0.5000"),
    pytest.param(10_050, None, "$0.01", id="$0.01005 left reads $0.01"),
    pytest.param(100, None, "$0.0001", id="a hundredth of a cent left reads $0.0001"),
    pytest.param(99, None, "under $0.0001", id="a rest too small to show reads under $0.0001, never $0.00 as if spent"),
    pytest.param(1, None, "under $0.0001", id="one micro-dollar left is under $0.0001"),
    pytest.param(0, None, "$0.00", id="nothing left reads $0.00"),
    pytest.param(-5_000, None, "$0.00", id="a spend past the budget leaves $0.00, not a negative amount"),
    pytest.param(2_000, 2_000, "$0.002", id="the whole of a $0.002 budget left reads as the cap does, not $0.0020"),
    pytest.param(12_345_000, 12_345_000, "$12.345",
                 id="the whole of a $12.345 budget left reads $12.345, as set, not rounded down to $12.34"),
    pytest.param(1_999, 2_000, "$0.0019", id="part of a $0.002 budget left reads rounded down, below the cap"),
    pytest.param(12_344_999, 12_345_000, "$12.34", id="part of a $12.345 budget left reads $12.34"),
    pytest.param(3_000_000, 2_000_000, "$2.00", id="never more left than the cap itself"),
    pytest.param(0, 3_000_000, "$0.00", id="nothing left of a $3 budget reads $0.00"),
]


@pytest.mark.parametrize("micros, budget, text", LEFT)
def test_an_amount_left_reads_rounded_down(micros, budget, text):
    assert fmt_left(micros, budget=budget) == text


SPENT_OF = [
    pytest.param(2_000, 2_000, ("$0.002", "$0.002"),
                 id="a $0.002 budget all spent reads $0.002 of $0.002, not $0.0020 of $0.002"),
    pytest.param(1_234, 2_000, ("$0.0013", "$0.0020"), id="part of a $0.002 budget: both to a hundredth of a cent"),
    pytest.param(1_250, 1_250, ("$0.00125", "$0.00125"),
                 id="a $0.00125 budget all spent never reads $0.0013 of $0.00125, a spend above its cap"),
    pytest.param(1_000, 1_250, ("$0.00100", "$0.00125"), id="part of a $0.00125 budget: both to five decimals"),
    pytest.param(3_200_000, 12_345_000, ("$3.200", "$12.345"), id="a $12.345 budget keeps its three decimals, the spend too"),
    pytest.param(3_200_001, 12_345_000, ("$3.201", "$12.345"), id="the spend is rounded up to the budget's decimals"),
    pytest.param(4_500, 5_000_000, ("$0.0045", "$5.00"), id="a budget in whole cents leaves fmt and fmt_limit as they are"),
    pytest.param(3_604_000, 3_604_000, ("$3.604", "$3.604"), id="a $3.604 budget all spent reads the same twice"),
    pytest.param(0, 2_000, ("$0.000", "$0.002"), id="nothing spent of a $0.002 budget reads $0.000 of $0.002"),
]


@pytest.mark.parametrize("spent, budget, texts", SPENT_OF)
def test_a_spend_and_its_budget_read_alike(spent, budget, texts):
    assert fmt_spent_of(spent, budget) == texts


def _value(text: str) -> int:
    return to_micros(text.removeprefix("under "), exact=True)


def test_what_is_left_never_reads_as_more_than_is_left_or_than_the_cap():
    rng = random.Random(7)
    for _ in range(20_000):
        budget = rng.choice([rng.randrange(1, 10_000), rng.randrange(1, 10**7), rng.randrange(1, 10**10)])
        left = rng.randrange(0, budget + 1)
        text = fmt_left(left, budget=budget)
        if text.startswith("under "):  # true of what is left, and it is more than nothing
            assert 0 < left < _value(text), (left, budget, text)
        else:
            assert _value(text) <= left and _value(text) <= _value(fmt_limit(budget)), (left, budget, text)
        assert text != "$0.00" or left == 0, (left, budget, text)


def test_a_spend_beside_its_budget_is_never_understated_nor_shown_above_it():
    rng = random.Random(11)
    for _ in range(20_000):
        budget = rng.choice([rng.randrange(1, 10_000), rng.randrange(1, 10**7), rng.randrange(1, 10**10)])
        spent = rng.randrange(0, budget + 1)
        spent_text, budget_text = fmt_spent_of(spent, budget)
        assert to_micros(budget_text) == budget, (spent, budget, budget_text)  # the cap stays exact
        assert spent <= to_micros(spent_text) <= budget, (spent, budget, spent_text)
        if spent == budget:
            assert spent_text == budget_text
        if budget % 10_000 == 0:
            assert (spent_text, budget_text) == (fmt(spent), fmt_limit(budget))
        else:
            assert len(spent_text.split(".")[1]) == len(budget_text.split(".")[1]), (spent, budget)


@pytest.mark.parametrize("micros", [0, 1, 99, 4_567, 10_000, 10_001, 999_999, 1_000_001, 123_456_789, -4_567])
def test_shown_is_the_amount_fmt_writes(micros):
    text = fmt(micros)
    assert Decimal(shown(micros)) == Decimal(text.replace("$", "").replace(",", "")) * 1_000_000
