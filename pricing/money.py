"""Exact money: integer micro-dollars everywhere, Decimal at the edges.

Why micro-dollars: a GPU-second on a $0.50/h pool costs 138.9 micro-dollars, so
integer micros keep per-second accrual exact enough to never round a budget
over, while staying a plain ``int`` that SQLite, Redis and JSON store losslessly.
Floats never touch money: prices enter as ``Decimal`` strings from the catalog
and leave as ``Decimal`` or formatted strings.
"""

from __future__ import annotations

import math
import re
from decimal import ROUND_CEILING, ROUND_FLOOR, Decimal, InvalidOperation

MICROS_PER_DOLLAR = 1_000_000
MAX_DOLLARS = 1_000_000_000  # no budget or price is larger; keeps every stored amount far inside a 64-bit integer
SECONDS_PER_HOUR = 3600

Micros = int


class MoneyError(ValueError):
    """A value could not be read as an amount of money."""


class AmountTooLarge(MoneyError):
    """An amount above ``MAX_DOLLARS``."""


class TooPrecise(MoneyError):
    """An amount with a fraction of a micro-dollar, read with ``exact=True``."""


class DecimalComma(MoneyError):
    """A comma that does not group thousands (``"0,50"``, a decimal comma): read as a separator it made the
    amount 100 times what was meant."""


class NotPlain(MoneyError):
    """An amount not written as dollars with a point before the cents: an exponent (``"1e3"``, which ``Decimal``
    reads as $1,000), ``"nan"`` or ``"inf"``."""


_THOUSANDS = re.compile(r"^[+-]?\d{1,3}(?:,\d{3})+(?:\.\d*)?$")
_PLAIN = re.compile(r"^[+-]?(?:[0-9]+\.?[0-9]*|\.[0-9]+)$")  # digits, and a point before the cents


def to_micros(value: str | int | Decimal, *, exact: bool = False) -> Micros:
    """Read dollars (``"12.5"``, ``"$12.50"``, ``Decimal``, ``int``) as micro-dollars.

    Floats are refused: they cannot represent most prices exactly.
    Sub-micro fractions round up (a price is never under-stated), or with ``exact`` are refused
    (:class:`TooPrecise`): a cap a user gives, such as a budget, rounded up would let the broker spend
    more than it.

    Text is dollars with a point before the cents: an exponent (``"1e3"``, which ``Decimal`` read as $1,000),
    ``"nan"`` or ``"inf"`` is refused (:class:`NotPlain`, naming the value), after the range checks so an amount
    past them still says the largest or the finest there is. A ``Decimal`` or ``int`` is a number already.
    """
    plain = True
    if isinstance(value, bool) or isinstance(value, float):
        raise MoneyError(f"money must be given as a string or Decimal, not {type(value).__name__}")
    if isinstance(value, int):
        value = Decimal(value)
    if isinstance(value, str):
        text = value.strip()
        if text.startswith("$"):
            text = text[1:]
        elif text.endswith("$"):  # "10$", as many write it
            text = text[:-1]
        if "," in text:
            if not _THOUSANDS.match(text.strip()):
                fix = text.strip().replace(",", ".") if text.count(",") == 1 and "." not in text else None
                raise DecimalComma("has a comma, which groups thousands only (1,000): " + (
                    f"write {fix}, with a point before the cents" if fix else "write the cents after a point"))
            text = text.replace(",", "")
        typed, plain = value, bool(_PLAIN.match(text.strip()))
        try:
            value = Decimal(text)
        except InvalidOperation as exc:
            raise MoneyError(f"{value!r} is not an amount of dollars") from exc
        if not value.is_finite():
            raise NotPlain(f"{typed!r} is not an amount of dollars: write digits, with a point before the cents")
    if not value.is_finite():
        raise MoneyError(f"{value} is not an amount of dollars")
    # copy_abs and adjusted use no decimal context: abs() of 1e999999999999 is past the context's exponent
    # (InvalidOperation, a 500), and 1e-999999999999 a million times over underflows to 0, an amount "exactly" $0
    if value.copy_abs() > MAX_DOLLARS:
        raise AmountTooLarge(f"must be at most ${MAX_DOLLARS:,}")
    if exact and value and value.adjusted() < -6:
        raise TooPrecise("has more than 6 decimal places (money is counted in millionths of a dollar)")
    micros = value * MICROS_PER_DOLLAR
    if exact and micros != micros.to_integral_value():
        raise TooPrecise("has more than 6 decimal places (money is counted in millionths of a dollar)")
    if not plain:
        how = "not with an exponent" if "e" in str(typed).lower() else "digits with a point before the cents"
        raise NotPlain(f"{typed!r} is not an amount of dollars: write it as {_positional(value)}, {how}")
    return int(micros.to_integral_value(rounding=ROUND_CEILING))


def typed_to_micros(value: object, *, exact: bool = False) -> Micros:
    """Dollars as a user typed them in YAML or JSON, as micro-dollars.

    Those parsers read ``20.5`` as a float; its shortest ``repr`` is what was typed, so it is
    read through that string (exact), never as a binary fraction. Strings, ints and
    ``Decimal`` go to :func:`to_micros`; anything else (a bool, a list) is a :class:`MoneyError`.
    """
    typed = getattr(value, "typed", None)  # a JSON number that says how it was typed (broker.task_text.TypedFloat)
    if isinstance(value, float) and isinstance(typed, str):
        value = typed  # "1e3": refused as that text is, not read as 1000.0
    elif isinstance(value, float):
        # (positional: ``repr`` writes 0.00001 as "1e-05", which :func:`to_micros` refuses as typed text)
        value = _positional(Decimal(repr(value))) if math.isfinite(value) else repr(value)
    if isinstance(value, bool) or not isinstance(value, (str, int, Decimal)):
        raise MoneyError(f"{value!r} is not an amount of dollars")
    return to_micros(value, exact=exact)


def _positional(value: Decimal) -> str:
    """``value`` with no exponent: ``Decimal("1E+3")`` → ``"1000"``, ``Decimal("1e-05")`` → ``"0.00001"``."""
    return format(value, "f")


def to_decimal(micros: Micros) -> Decimal:
    """Micro-dollars as an exact ``Decimal`` of dollars."""
    return Decimal(micros) / MICROS_PER_DOLLAR


def fmt(micros: Micros) -> str:
    """``$12.34`` for people: cents, rounded up so a shown cost never understates.

    Amounts under a dollar that are not whole cents show hundredths of a cent
    (``$0.0045``), so a short job's cost does not read as "$0.01" everywhere.
    """
    sign = "-" if micros < 0 else ""
    if abs(micros) < MICROS_PER_DOLLAR and micros % 10_000:
        ten_thousandths = -((-abs(micros)) // 100)
        if ten_thousandths % 100:
            return f"{sign}$0.{ten_thousandths:04d}"
    cents = -((-abs(micros)) // 10_000)
    return f"{sign}${cents // 100:,}.{cents % 100:02d}"


def fmt_limit(micros: Micros) -> str:
    """A limit a user set (a budget), shown exactly: ``$12.50``, or every decimal it has (``$12.345``).

    :func:`fmt` rounds up, which is right for a cost (never understated) but would show a cap of
    $12.345 as $12.35, more than the broker will spend.
    """
    if micros % 10_000 == 0:
        return fmt(micros)
    sign = "-" if micros < 0 else ""
    dollars, rest = divmod(abs(micros), MICROS_PER_DOLLAR)
    return f"{sign}${dollars:,}.{f'{rest:06d}'.rstrip('0')}"


def fmt_rate(micros: Micros) -> str:
    """A price per hour (``$3.333``, ``$1.006``, ``$0.4246``, ``$0.20``; the caller adds ``/h``), shown exactly, as
    :func:`fmt_limit` shows a budget.

    A rate is a price set or quoted, not a cost: :func:`fmt` rounded $3.333/h up to "$3.34/h", and 30 s at the rate
    shown ($0.02783) no longer gave the cost shown beside it ($0.0278 for 30 s at $3.333/h).
    """
    return fmt_limit(micros)


def shown(micros: Micros) -> Micros:
    """The amount :func:`fmt` shows for ``micros``, in micro-dollars (rounded up as it rounds): what a reader adds
    up when a table's rows are summed by eye."""
    sign = -1 if micros < 0 else 1
    amount = abs(micros)
    if amount < MICROS_PER_DOLLAR and amount % 10_000 and -((-amount) // 100) % 100:
        return sign * -((-amount) // 100) * 100
    return sign * -((-amount) // 10_000) * 10_000


def fmt_left(micros: Micros, *, budget: Micros | None = None) -> str:
    """An amount *left* of a limit (what a budget has not spent), for people: rounded **down**.

    The opposite of a cost: :func:`fmt` rounds a cost up so it is never understated, and an amount left rounded up
    would overstate what the broker will still spend. :func:`fmt_limit` is exact, right for a cap a user typed
    (``$12.345``) but unreadable for what a spend leaves of it (``$49.987654``). So: cents rounded down
    (``$49.98``); under a dollar, a hundredth of a cent when that is not a whole cent (``$0.0019``), as :func:`fmt`
    shows a short job's cost; a rest above zero too small for that reads ``under $0.0001``, not ``$0.00``, which
    says it is all spent; nothing (or less) left is ``$0.00``.

    Given ``budget`` (the cap it is left of), a rest that is the whole budget reads exactly as the cap does
    (:func:`fmt_limit`): "$0.002 of the $0.002 budget", never "$0.0020 of the $0.002 budget"; it never reads as
    more than the cap.
    """
    if budget is not None and micros >= budget:
        return fmt_limit(max(budget, 0))
    if micros <= 0:
        return "$0.00"
    if micros < 100:
        return "under $0.0001"
    if micros < MICROS_PER_DOLLAR and (micros // 100) % 100:
        return f"$0.{micros // 100:04d}"
    cents = micros // 10_000
    return f"${cents // 100:,}.{cents % 100:02d}"


def fmt_saving(spent: Micros, equivalent: Micros) -> str:
    """What ``spent`` saved against ``equivalent`` (its on-demand equivalent), for people: rounded **down**.

    A saving is a claim in the user's favour, like an amount left (:func:`fmt_left`): rounded up, as :func:`fmt`
    rounds a cost, it overstated what the broker saved ("saved $0.0003" of an exact $0.000224; now "$0.0002").
    It is also never more than the on-demand figure rounded up less the spend shown (:func:`shown`), and the
    on-demand figure shown beside it is the spend shown plus this (:func:`fmt_ondemand`), so the three read side by
    side add up: "spent $0.0047; on-demand $0.0109; saved $0.0062" for an exact $0.006289, "spent $0.0962; on-demand
    $0.2705; saved $0.1743" for an exact $0.174367 (the on-demand $0.270512 rounded up read $0.2706); a spend of
    $1.0001 shown as $1.01 beside an on-demand $1.0099 saved "$0.00", not "$0.0098". A
    saving too small to show is ``under $0.0001``; nothing saved reads ``$0.00``; below zero (the work cost more)
    it is a cost, and reads as :func:`fmt` writes it, rounded up.
    """
    saving = equivalent - spent
    if saving <= 0:
        return fmt(saving)
    return fmt_left(_claimed(spent, equivalent))


def _claimed(spent: Micros, equivalent: Micros) -> Micros:
    """A saving above zero as :func:`fmt_saving` bounds it, before :func:`fmt_left` rounds it down."""
    return min(equivalent - spent, shown(equivalent) - shown(spent))


def saving_shown(spent: Micros, equivalent: Micros) -> Micros:
    """The amount :func:`fmt_saving` shows, in micro-dollars: a cost (below zero) rounded up as :func:`shown` rounds
    it, a saving rounded down as :func:`fmt_left` rounds it; ``under $0.0001`` counts as nothing."""
    saving = equivalent - spent
    if saving <= 0:
        return shown(saving)
    claimed = _claimed(spent, equivalent)
    if claimed < 100:
        return 0
    if claimed < MICROS_PER_DOLLAR and (claimed // 100) % 100:
        return claimed // 100 * 100
    return claimed // 10_000 * 10_000


def ondemand_shown(spent: Micros, equivalent: Micros, *, spent_shown: Micros | None = None) -> Micros:
    """The on-demand equivalent shown beside a spend and its saving, in micro-dollars: the spend shown plus the
    saving shown (:func:`saving_shown`), so the three read side by side add up exactly.

    Each rounded on its own (the equivalent up, as a cost, the saving down) they did not: $0.096145 spent against
    $0.270512 read "spent $0.0962; on-demand $0.2706; saved $0.1743", a hundredth of a cent apart. The saving keeps
    its rule (never overstated) and the spend its own (never understated); the on-demand figure, which is neither
    billed nor claimed, gives way: it is within a rounding step or so (a hundredth of a cent, or a cent) of the
    exact one.
    ``spent_shown``: the spend as its edge shows it, when not as :func:`shown` rounds it (a spend shown to its
    budget's decimals: :func:`fmt_spent_of`).
    """
    if equivalent == spent:  # work on on-demand, or with nothing to compare: its equivalent is its cost, as shown
        return shown(spent) if spent_shown is None else spent_shown
    return (shown(spent) if spent_shown is None else spent_shown) + saving_shown(spent, equivalent)


def fmt_ondemand(spent: Micros, equivalent: Micros, *, spent_shown: Micros | None = None) -> str:
    """:func:`ondemand_shown` for people: as :func:`fmt` writes it where that is exact, else every decimal it has
    (``$1.0049``: a spend of $0.50 beside a saving of $0.5049), never rounded again, which would undo the sum."""
    amount = ondemand_shown(spent, equivalent, spent_shown=spent_shown)
    return fmt(amount) if shown(amount) == amount else fmt_limit(amount)


def amount_shown(text: str) -> Micros:
    """The micro-dollars a shown amount (``$1,234.56``, ``-$0.0045``, as :func:`fmt` or :func:`fmt_spent_of` write
    it) reads as: what a reader adds up."""
    negative = text.startswith("-")
    micros = to_micros(text.removeprefix("-"), exact=True)
    return -micros if negative else micros


def fmt_spent_of(spent: Micros, budget: Micros) -> tuple[str, str]:
    """A spend and the budget it is part of, to read side by side ("spent X of Y", a dashboard's "X / Y"): the
    spend as :func:`fmt` (rounded up), the budget as :func:`fmt_limit` (exact).

    A budget with more decimals than cents has both shown to the same decimals (the more either needs, trailing
    zeros both have dropped): :func:`fmt` and :func:`fmt_limit` apart read "$0.0020 / $0.002" for a budget all
    spent, and "$0.0013 / $0.00125" for one under it, a spend above its cap. At the same decimals the spend, rounded
    up, can reach the budget but not pass it ("$0.00125 / $0.00125", "$0.0013 / $0.0020"), and both stay what
    they were: the spend never understated, the budget exact. A budget in whole cents leaves both as they are
    ("$0.0045 / $5.00").
    """
    cap = fmt_limit(budget)
    places = len(cap) - cap.index(".") - 1
    if places <= 2:
        return fmt(spent), cap
    rounded = fmt(spent)  # (not :func:`shown`'s name)
    places = max(places, len(rounded.rstrip("0")) - rounded.index(".") - 1)
    step = 10 ** (6 - places)
    spent_units = -((-abs(spent)) // step)  # rounded up, as fmt does
    texts = [_fixed(-spent_units if spent < 0 else spent_units, places), _fixed(budget // step, places)]
    while places > 2 and all(t.endswith("0") for t in texts):
        texts, places = [t[:-1] for t in texts], places - 1
    return texts[0], texts[1]


def _fixed(units: int, places: int) -> str:
    """``units`` of ``10**-places`` dollars as ``$1,234.5670``."""
    sign = "-" if units < 0 else ""
    whole, rest = divmod(abs(units), 10 ** places)
    return f"{sign}${whole:,}.{rest:0{places}d}"


def cost_for_seconds(price_per_hour: Micros, seconds: int | Decimal) -> Micros:
    """Cost of ``seconds`` at ``price_per_hour``, rounded up to a whole micro-dollar."""
    total = Decimal(price_per_hour) * Decimal(seconds) / SECONDS_PER_HOUR
    return int(total.to_integral_value(rounding=ROUND_CEILING))


def affordable_seconds(price_per_hour: Micros, micros: Micros) -> int:
    """Whole seconds that ``micros`` buys at ``price_per_hour`` (rounded down)."""
    if price_per_hour <= 0:
        raise MoneyError("price must be positive to compute affordable time")
    return int((Decimal(micros) * SECONDS_PER_HOUR / price_per_hour).to_integral_value(rounding=ROUND_FLOOR))
