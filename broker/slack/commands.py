"""Slash-command text → a :class:`Command`, or a :class:`CommandError` that says how to write it. Pure.

Slack sends the text after ``/broker`` with ``&``, ``<`` and ``>`` escaped and
links wrapped as ``<https://…>`` or ``<https://…|label>``; both are undone here.
``submit`` takes a URL or inline YAML (optionally in a ``` fence) plus
``key=value`` options on its first line: ``budget=$50``, ``team=``,
``priority=``, ``deadline=``, ``expected_hours=``, ``max_price=``, ``name=``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from pricing.money import AmountTooLarge, DecimalComma, Micros, MoneyError, TooPrecise, to_decimal, to_micros

USAGE = {
    "submit": "submit <url or YAML> budget=$50 [team=… priority=… deadline=… expected_hours=…]",
    "status": "status [job id]",
    "queue": "queue",
    "logs": "logs <job id>",
    "cancel": "cancel <job id>",
    "resume": "resume <job id> [force]",
    "costs": "costs [team] [24h|7d|30d|90d]",
    "budget": "budget <job id> <$ new budget>",
    "help": "help",
}
SUBMIT_OPTIONS = {"budget": "budget_usd", "team": "team", "priority": "priority", "deadline": "deadline",
                  "expected_hours": "expected_hours", "max_price": "max_price_per_hour", "name": None}
PERIODS = ("24h", "7d", "30d", "90d")
_LINK = re.compile(r"<((?:https?|mailto):[^|>]+)(?:\|[^>]*)?>")
_OPTION = re.compile(r"^([a-z_]+)=(\S+)$")
_JOB_ID = re.compile(r"^[A-Za-z0-9._-]{1,64}$")


class CommandError(ValueError):
    """Unparseable text; the message is a sentence with the usage to show."""


@dataclass(frozen=True)
class Command:
    name: str
    job_id: str | None = None
    team: str | None = None
    period: str | None = None
    amount: Micros | None = None
    force: bool = False
    url: str | None = None
    yaml: str | None = None
    options: dict[str, str] = field(default_factory=dict)  # broker: section keys (and "name")


def unescape(text: str) -> str:
    text = _LINK.sub(lambda m: m.group(1), text)
    return text.replace("&lt;", "<").replace("&gt;", ">").replace("&amp;", "&")


def parse(text: str) -> Command:
    text = unescape(text or "").strip()
    if not text:
        return Command("help")
    first, _, rest = text.partition("\n")
    words = first.split()
    name, args = words[0].lower(), words[1:]
    if name not in USAGE:
        raise CommandError(f"I don't know `{words[0]}`. Try `help`.")
    if name == "submit":
        return _submit(args, rest)
    if rest.strip():
        raise CommandError(f"`{name}` takes one line: `{USAGE[name]}`")
    if name in ("help", "queue"):
        return Command(name)
    if name == "status":
        if len(args) > 1:
            raise _usage(name)
        return Command(name, job_id=_job_id(args[0], name) if args else None)
    if name in ("logs", "cancel"):
        if len(args) != 1:
            raise _usage(name)
        return Command(name, job_id=_job_id(args[0], name))
    if name == "resume":
        if len(args) not in (1, 2) or (len(args) == 2 and args[1].lower() != "force"):
            raise _usage(name)
        return Command(name, job_id=_job_id(args[0], name), force=len(args) == 2)
    if name == "budget":
        if len(args) != 2:
            raise _usage(name)
        return Command(name, job_id=_job_id(args[0], name), amount=_money(args[1], "the new budget"))
    # costs [team] [period], in either order
    team = period = None
    for a in args:
        if a.lower() in PERIODS and period is None:
            period = a.lower()
        elif team is None and a.lower() not in PERIODS:
            team = a
        else:
            raise _usage(name)
    return Command(name, team=team, period=period or "7d")


def _submit(args: list[str], rest: str) -> Command:
    options: dict[str, str] = {}
    body_words = []
    for a in args:
        m = _OPTION.match(a)
        if m and m.group(1) in SUBMIT_OPTIONS:
            options[m.group(1)] = m.group(2)
        elif m:
            raise CommandError(f"`{m.group(1)}` is not a submit option (known: {', '.join(SUBMIT_OPTIONS)})")
        else:
            body_words.append(a)
    body = (" ".join(body_words) + "\n" + rest).strip()
    body = re.sub(r"^```[a-zA-Z]*\n?|\n?```$", "", body).strip()
    if "budget" in options:
        options["budget"] = str(to_decimal(_money(options["budget"], "budget")))
    broker = {SUBMIT_OPTIONS[k] or k: v for k, v in options.items()}
    if not body:
        raise CommandError(f"Give the task as a URL or inline YAML: `{USAGE['submit']}`")
    if re.fullmatch(r"https?://\S+", body):
        return Command("submit", url=body, options=broker)
    return Command("submit", yaml=body, options=broker)


def _job_id(text: str, name: str) -> str:
    if not _JOB_ID.match(text):
        raise CommandError(f"`{text}` is not a job id. Usage: `{USAGE[name]}`")
    return text


def _money(text: str, what: str) -> Micros:
    try:
        micros = to_micros(text, exact=True)  # a cap rounded up would let the broker spend more than it
    except (AmountTooLarge, DecimalComma) as exc:
        raise CommandError(f"{what}: {exc}") from None
    except TooPrecise:
        raise CommandError(f"{what}: `{text}` has more than 6 decimal places (a millionth of a dollar)") from None
    except MoneyError:
        raise CommandError(f"{what}: `{text}` is not an amount of dollars (like $50)") from None
    if micros <= 0:
        raise CommandError(f"{what}: must be more than $0")
    return micros


def _usage(name: str) -> CommandError:
    return CommandError(f"Usage: `{USAGE[name]}`")
