"""Slash-command text → a :class:`Command`, or a :class:`CommandError` that says how to write it. Pure.

Slack sends the text after ``/broker`` with ``&``, ``<`` and ``>`` escaped and
links wrapped as ``<https://…>`` or ``<https://…|label>``; both are undone here:
a link becomes what the user typed (its label: Slack links ``train.py`` as
``<http://train.py|train.py>``), a bare one its URL, a mention ``@name``/``#channel``.
``submit`` takes a URL or inline YAML (optionally in a ``` fence) plus
``key=value`` options on its first line: ``budget=$50``, ``team=``,
``priority=``, ``deadline=``, ``expected_hours=``, ``max_price=``, ``name=``;
a value with spaces in quotes (``deadline="1 hour 30 mins"``). Anything else on
the first line but a URL or a ``` fence is refused, naming the word: the YAML
goes on the lines after it.

Every other command is refused whole, with its usage, when given a word it does not use (``cancel j-1 j-2``,
``queue team-a``): acting on part of what was typed (cancelling the first job of two) surprises, and some of
these cannot be undone. ``help`` alone answers whatever follows it: its answer is every usage line.
"""

from __future__ import annotations

import difflib
import re
from dataclasses import dataclass, field

from broker.costs import PERIOD_SPELLINGS, period_choices
from broker.costs import PERIODS as REPORT_PERIODS
from pricing.money import AmountTooLarge, DecimalComma, Micros, MoneyError, TooPrecise, to_decimal, to_micros

USAGE = {
    "submit": "submit <url or YAML> [budget=$50 team=… priority=… deadline=… expected_hours=… max_price=… name=…]",
    "status": "status [job id]",
    "queue": "queue",
    "logs": "logs <job id>",
    "cancel": "cancel <job id>",
    "resume": "resume <job id> [force]",
    "costs": "costs [team] [24h|7d|30d|90d], or costs <job id>",
    "budget": "budget <job id> <$ new budget>",
    "deadline": "deadline <job id> <6h, 2026-12-08 09:00 Europe/Berlin, or none>",
    "help": "help",
}
_EXAMPLES = {"budget": "budget=$50", "team": "team=nlp", "priority": "priority=10", "deadline": 'deadline="in 6 hours"',
             "expected_hours": "expected_hours=4", "max_price": "max_price=$2", "name": "name=bert-ft"}
"""An example of each submit option, for a refusal of one given with no value."""
SUBMIT_OPTIONS = {"budget": "budget_usd", "team": "team", "priority": "priority", "deadline": "deadline",
                  "expected_hours": "expected_hours", "max_price": "max_price_per_hour", "name": None}
PERIODS = tuple(REPORT_PERIODS)
"""The cost report's periods; their other spellings (``1d``, ``1w``…: :data:`broker.costs.PERIOD_SPELLINGS`) are
read as the period they spell, as ``broker costs --period 1d`` reads them."""
_SLACK_MARKUP = re.compile(r"<([@#!]?)([^|>]*)(?:\|([^>]*))?>")
"""Slack's markup in the text it sends (a ``<`` typed by the user comes as ``&lt;``): links, mentions."""
_WORD = re.compile(r"""[a-z_]+=(?:"[^"]*"|'[^']*'|“[^”]*”|‘[^’]*’)|\S+""", re.I)
"""A word of the first line: an option with a quoted value (spaces and all), or a run of non-spaces."""
_QUOTES = {'"': '"', "'": "'", "“": "”", "‘": "’"}
_OPTION = re.compile(r"^([a-z_]+)=(.*)$", re.S | re.I)
_PERIODISH = re.compile(r"^\d+(?:\.\d+)?[a-z]*$", re.I)
"""A word that means a length of time (``1y``, ``12h``, ``30``), not a team."""
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
    when: str | None = None  # `deadline`: the new deadline as typed (None: remove it)


def unescape(text: str) -> str:
    """What the user typed, from Slack's escaped text: a link is its label (Slack turns ``train.py`` into
    ``<http://train.py|train.py>``, ``a@b.io`` into ``<mailto:a@b.io|a@b.io>``), or its URL when bare
    (``<https://…>``); a mention reads ``@name`` (``<@U1|name>``, ``<!here>``), a channel ``#name``."""
    def plain(m: re.Match) -> str:
        sigil, target, label = m.group(1), m.group(2), m.group(3)
        if sigil == "":  # a link
            return target if label is None else label
        if sigil == "!":  # <!here>, <!subteam^S1|@team>, <!date^…|Feb 18>: the label is the text
            return "@" + target.split("^")[0] if label is None else label
        name = target if label is None else label  # <@U1|alice>, <#C1|general>
        return name if name.startswith(sigil) else sigil + name

    text = _SLACK_MARKUP.sub(plain, text)
    return text.replace("&lt;", "<").replace("&gt;", ">").replace("&amp;", "&")


def parse(text: str) -> Command:
    text = unescape(text or "").strip()
    if not text:
        return Command("help")
    first, _, rest = text.partition("\n")
    words = first.split()
    name, args = words[0].lower(), words[1:]
    if name not in USAGE:
        close = difflib.get_close_matches(name, sorted(USAGE), n=1)  # `stauts` was "Try help", with no word of status
        likely = f" Did you mean `{close[0]}`?" if close else ""
        raise CommandError(f"I don't know `{shown(words[0])}`.{likely} Try `help`.")
    if name == "submit":
        return _submit(first.strip()[len(words[0]):], rest)
    if rest.strip():
        raise CommandError(f"`{name}` takes one line: `{USAGE[name]}`")
    if name == "help":
        return Command(name)
    if name == "queue":
        if args:  # `queue team-a` listed the user's own team's queue as if it were team-a's
            raise _unused(name, args)
        return Command(name)
    if name == "status":
        if len(args) > 1:
            raise _unused(name, args[1:])
        return Command(name, job_id=_job_id(args[0], name) if args else None)
    if name in ("logs", "cancel"):
        if not args:
            raise _usage(name)
        if len(args) > 1:
            raise _unused(name, args[1:])
        return Command(name, job_id=_job_id(args[0], name))
    if name == "resume":
        if not args:
            raise _usage(name)
        if len(args) > 2 or (len(args) == 2 and args[1].lower() != "force"):
            unused = args[1:] if len(args) == 2 else args[2:]
            if len(args) == 2 and difflib.get_close_matches(args[1].lower(), ["force"], n=1):  # `forse`, `foce`
                raise CommandError(f"`{shown(args[1])}` is not a word `resume` takes: did you mean `force`? Nothing "
                                   f"was done. Usage: `{USAGE[name]}`")
            raise _unused(name, unused)
        return Command(name, job_id=_job_id(args[0], name), force=len(args) == 2)
    if name == "budget":
        if len(args) < 2:
            raise _usage(name)
        if len(args) > 2:
            raise _unused(name, args[2:])
        return Command(name, job_id=_job_id(args[0], name), amount=_money(args[1], "the new budget"))
    if name == "deadline":
        # the rest of the line is the deadline, spaces and all (`2026-12-08 09:00 Europe/Berlin`), quotes or not;
        # `none` removes it
        if len(args) < 2:
            raise _usage(name)
        when = " ".join(args[1:]).strip()
        if len(when) >= 2 and when[0] in _QUOTES and when[-1] == _QUOTES[when[0]]:
            when = when[1:-1].strip()
        if not when:
            raise _usage(name)
        return Command(name, job_id=_job_id(args[0], name), when=None if when.lower() == "none" else when)
    # costs [team] [period], in either order; the dispatcher reads a "team" that is a job of the user's as that job
    team = period = None
    for a in args:
        spelled = PERIOD_SPELLINGS.get(a.lower(), a.lower())
        if spelled in PERIODS and period is None:
            period = spelled
        elif _PERIODISH.match(a) and spelled not in PERIODS:  # `costs 1y` was read as a team named "1y"
            raise CommandError(f"`{shown(a)}` is not a period I know: costs takes {period_choices()}. "
                               f"Usage: `{USAGE[name]}`")
        elif team is None and spelled not in PERIODS:
            team = a
        else:
            raise _unused(name, [a])
    return Command(name, team=team, period=period)  # none given: the report's default (7d), a job's whole life


def _submit(line: str, rest: str) -> Command:
    """``line``: the first line after ``submit``; ``rest``: the lines after it."""
    options: dict[str, str] = {}
    url = fence = None
    after = None  # the option the word before was: a stray word after one is most likely its value's
    for w in _WORD.finditer(line):
        a = w.group(0)
        if a.startswith("```"):  # a fence opened on the first line: it and all after it are the task
            fence = line[w.start():]
            break
        m = _OPTION.match(a)
        if m and m.group(1).lower() in SUBMIT_OPTIONS:  # `Budget=$5` (a phone's capital) is budget
            m = _OPTION.match(m.group(1).lower() + "=" + m.group(2))
            if not m.group(2):  # `budget=` was "not an option (key=value) or a URL"
                raise CommandError(f"`{m.group(1)}=` has no value: give one (like {_EXAMPLES[m.group(1)]}), or leave "
                                   f"`{m.group(1)}=` out for the default; nothing was submitted")
            if m.group(1) in options:  # the last one won without a word (budget=$5 budget=$6 submitted at $6)
                raise CommandError(f"`{m.group(1)}` is given twice: give it once; nothing was submitted")
            options[m.group(1)] = _unquote(m.group(1), m.group(2))
            after = a
        elif m:
            close = difflib.get_close_matches(m.group(1).lower(), list(SUBMIT_OPTIONS), n=1)
            likely = f" Did you mean `{close[0]}`?" if close else ""
            raise CommandError(f"`{shown(m.group(1))}` is not a submit option.{likely} "
                               f"(known: {', '.join(SUBMIT_OPTIONS)})")
        elif url is None and re.fullmatch(r"https?://\S+", a):
            url, after = a, None
        else:
            raise CommandError(_stray(a, after))
    if url is not None and (fence or rest.strip()):
        raise CommandError(f"Give the task as a URL or as YAML, not both: `{USAGE['submit']}`")
    body = url or ((fence or "") + "\n" + rest).strip()
    body = re.sub(r"^```(?:[a-zA-Z]*\n)?|\n?```$", "", body).strip()  # ```yaml⏎ is a language, ```name: not
    if "budget" in options:
        options["budget"] = str(to_decimal(_money(options["budget"], "budget")))
    broker = {SUBMIT_OPTIONS[k] or k: v for k, v in options.items()}
    if not body:
        raise CommandError(f"Give the task as a URL or inline YAML: `{USAGE['submit']}`")
    if re.fullmatch(r"https?://\S+", body):
        return Command("submit", url=body, options=broker)
    return Command("submit", yaml=body, options=broker)


def _unquote(key: str, value: str) -> str:
    if value[0] in _QUOTES:
        if len(value) < 2 or value[-1] != _QUOTES[value[0]]:
            raise CommandError(f"{key}: the quote after `{key}=` is not closed (like {key}=\"1 hour 30 mins\")")
        value = value[1:-1].strip()
        if not value:
            raise CommandError(f"{key}: the quotes are empty; leave `{key}=` out for the default")
    return value


def _stray(word: str, after: str | None) -> str:
    """A sentence for a word on submit's first line that is no option, URL or fence."""
    if after is not None and not word.endswith(":"):  # `name:` begins YAML, not a value's second word
        key = after.partition("=")[0]
        return (f"`{shown(word)}` after `{shown(after)}` is not an option: a value with spaces goes in quotes "
                f"({key}=\"{shown(after.partition('=')[2] + ' ' + word)}\"), and the YAML on the lines after the "
                "first")
    return (f"`{shown(word)}` is not an option (key=value) or a URL: put the YAML on the lines after "
            f"`submit` and its options, or give one URL. Usage: `{USAGE['submit']}`")


def _job_id(text: str, name: str) -> str:
    # an id pasted as Slack shows code (`j-12b398a7b9`), or closing a sentence (`j-12b398a7b9.`), is that id
    cleaned = text.strip("`'\"").rstrip(".,;:!?)")
    if not _JOB_ID.match(cleaned):
        raise CommandError(f"`{shown(text)}` is not a job id. Usage: `{USAGE[name]}`")
    return cleaned


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


def _unused(name: str, words: list[str]) -> CommandError:
    """A command given ``words`` it does not use: refused whole, naming them, rather than run on the rest."""
    said = " ".join(f"`{shown(w)}`" for w in words[:SHOWN_WORDS])
    if len(words) > SHOWN_WORDS:  # 15,000 words each in backticks pushed the reason and the usage off the message
        said += f" … ({len(words):,} words in all)"
    return CommandError(f"{said} {'is' if len(words) == 1 else 'are'} more than `{name}` takes, so nothing was done. "
                        f"Usage: `{USAGE[name]}`")


SHOWN_CHARS = 60
"""The most of one word the user typed that a refusal quotes back (a 5,000-character job id, a pasted log line)."""
SHOWN_WORDS = 5
"""The most of the words a refusal names as unused that it quotes back; the rest are counted."""


def shown(word: str, limit: int = SHOWN_CHARS) -> str:
    """What the user typed, quoted back in a refusal: its first ``limit`` characters, then ``…``. Quoted whole, a long
    word filled Slack's 3,000-character section and cut off the reason and the usage after it."""
    return word if len(word) <= limit else word[:limit - 1] + "…"
