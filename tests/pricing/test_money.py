"""Money reads exactly from what users type, and shows without understating."""

from decimal import Decimal

import pytest

from pricing.money import DecimalComma, MoneyError, TooPrecise, fmt, fmt_limit, to_micros, typed_to_micros


@pytest.mark.parametrize("typed, micros", [
    pytest.param(20.1, 20_100_000, id="a YAML float such as 20.1 is read as typed, not as its binary fraction"),
    pytest.param(0.3, 300_000, id="0.3 is three tenths exactly"),
    pytest.param(7, 7_000_000, id="a whole number of dollars"),
    pytest.param("$1,250.50", 1_250_500_000, id="a string with a dollar sign and thousands separator"),
    pytest.param("10$", 10_000_000, id="a dollar sign after the amount, as many write it"),
    pytest.param(Decimal("0.0000001"), 1, id="a fraction of a micro-dollar rounds up, never under-stating a price"),
])
def test_typed_dollars_become_exact_micros(typed, micros):
    assert typed_to_micros(typed) == micros


@pytest.mark.parametrize("typed", [True, None, [1], {"usd": 1}, "twelve", float("inf")], ids=repr)
def test_what_is_not_an_amount_of_dollars_is_refused(typed):
    with pytest.raises(MoneyError):
        typed_to_micros(typed)


@pytest.mark.parametrize("typed", ["1.0000001", 0.1234567, Decimal("0.0000001")], ids=repr)
def test_a_cap_read_exactly_refuses_a_fraction_of_a_micro_dollar_instead_of_rounding_it_up(typed):
    with pytest.raises(TooPrecise):
        typed_to_micros(typed, exact=True)


@pytest.mark.parametrize("typed, said", [
    pytest.param("0,50", "write 0.50, with a point before the cents", id="fifty cents with a decimal comma (was $50)"),
    pytest.param("1,5", "write 1.5, with a point before the cents", id="a dollar fifty with a decimal comma (was $15)"),
    pytest.param("$12,75", "write 12.75,", id="with its dollar sign"),
    pytest.param("1.000,50", "write the cents after a point", id="a point grouping thousands and a decimal comma"),
    pytest.param("1,50,000", "write the cents after a point", id="commas not every three digits"),
])
def test_a_comma_that_does_not_group_thousands_is_refused_not_dropped(typed, said):
    """A comma was dropped wherever it stood: `--budget 0,50` (fifty cents, as half of Europe writes it) set a cap of
    $50, a hundred times the one meant."""
    with pytest.raises(DecimalComma, match="has a comma, which groups thousands only") as caught:
        to_micros(typed, exact=True)
    assert said in str(caught.value)


@pytest.mark.parametrize("typed, micros", [("1,000", 1_000_000_000), ("$1,234,567.89", 1_234_567_890_000),
                                           ("+1,000.5", 1_000_500_000)], ids=repr)
def test_commas_grouping_thousands_are_read_as_the_broker_shows_amounts(typed, micros):
    assert to_micros(typed, exact=True) == micros


def test_a_cap_read_exactly_keeps_six_decimals():
    assert typed_to_micros("1.000001", exact=True) == 1_000_001 and to_micros("$2,000.50", exact=True) == 2_000_500_000


def test_plain_to_micros_still_refuses_floats():
    with pytest.raises(MoneyError):
        to_micros(0.1)  # type: ignore[arg-type]


def test_shown_amounts_round_up_and_keep_small_costs_visible():
    assert fmt(12_341_000) == "$12.35"
    assert fmt(4_500) == "$0.0045"
    assert fmt(-1_000_000) == "-$1.00"


@pytest.mark.parametrize("micros, shown", [
    pytest.param(12_345_000, "$12.345", id="a budget of 12.345 shows as set, not rounded up to a cap it is not"),
    pytest.param(1_000_001, "$1.000001", id="every decimal a budget has, down to the micro-dollar"),
    pytest.param(5_000_000, "$5.00", id="whole cents as any amount"),
    pytest.param(1_234_567_890_000, "$1,234,567.89", id="thousands separated"),
    pytest.param(4_500, "$0.0045", id="under a cent"),
])
def test_a_limit_the_user_set_shows_exactly(micros, shown):
    assert fmt_limit(micros) == shown
    assert to_micros(shown, exact=True) == micros  # what is shown reads back as the same budget


@pytest.mark.parametrize("amount", ["1e300", 10**12, "1000000000.000001", "-2000000000"])
def test_an_amount_beyond_a_billion_dollars_is_refused(amount):
    from pricing.money import AmountTooLarge

    with pytest.raises(AmountTooLarge, match=r"at most \$1,000,000,000"):
        to_micros(amount)


def test_a_billion_dollars_is_still_an_amount():
    assert to_micros(1_000_000_000) == 10**15 and to_micros("1000000000") == 10**15


@pytest.mark.parametrize("micros, text", [
    pytest.param(3_333_000, "$3.333", id="$3.333/h is shown so, not rounded up to $3.34 as a cost is"),
    pytest.param(1_006_000, "$1.006", id="$1.006/h, not $1.01"),
    pytest.param(424_600, "$0.4246", id="under a dollar, as before"),
    pytest.param(424_650, "$0.42465", id="every decimal it has"),
    pytest.param(200_000, "$0.20", id="whole cents, as before"),
    pytest.param(36_000_000_000, "$36,000.00", id="thousands grouped"),
])
def test_a_rate_is_shown_exactly_so_seconds_times_it_give_the_cost(micros, text):
    from pricing.money import fmt_rate

    assert fmt_rate(micros) == text
