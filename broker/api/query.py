"""One rule for query strings: a ``/v1`` route refuses a query parameter it does not take, given twice or empty.

FastAPI reads the parameters a route declares and ignores the rest, so ``GET /v1/costs?perod=30d`` answered the
default week as if nothing were wrong, and ``GET /v1/jobs?stat=queued`` every job. Each route's own parameters
are what FastAPI collected from its signature and dependencies (so the rule can never fall out of step with a
route), and a request naming any other is a 422 that names it, says the one likely meant, and lists those the
route takes — as bad input is answered everywhere else. A parameter given twice (``?state=queued&state=running``)
is a 422 too: every parameter the API takes holds one value, and FastAPI kept the last one given without a word,
so such a list showed the running jobs alone as if they were all. A parameter with no value (``?team=``,
``?state=``, ``?limit=``, or a bare ``?team``) is a 422 too, naming it, and so is a parameter with no name
(``?=``), as ``query``. The routes read one each way: an empty ``team`` as no filter, ``state`` as a state they do
not know, ``limit`` as a number they could not read, and the cost report an empty ``period`` as not given, but
beside ``since`` as a second window. An empty value is most
often a script's unset variable (``?team=$TEAM``), and read as absent it widened what was shown (an admin's every
team) without a word; refused, nothing is lost, and leaving the parameter out asks for the default. The
probes (``/v1/healthz``, ``/v1/readyz``) take any query string: a load balancer's check is set up once, outside
the broker, and a refusal there would restart brokers rather than tell anyone. Routes outside ``/v1`` (the dashboard page, ``/metrics``, Slack, the docs) are
not the JSON API and keep what their callers send them.

A whole-number parameter (``limit``, ``offset``, ``attempt``) is written in the digits 0-9 alone, or it is a 422
naming it (:func:`loose_number_refusal`): FastAPI reads it with Python's lenient int parsing, so ``?limit=1_0``
listed ten jobs, and ``+1``, ``1.0`` or a 1 with a space beside it were read as 1.
"""

# no `from __future__ import annotations`: FastAPI must see the real type of the dependency's parameter

import base64
import binascii
import difflib
import json
import math
from typing import Annotated, get_args

from fastapi import Query, Request
from fastapi.routing import APIRoute

from broker.api.schema import JobList
from broker.service import Invalid

# A text query parameter, as the routes declare it: ``minLength: 1`` puts the rule above in the OpenAPI document (a
# generated client, or a reader, learns that ``?team=`` is refused). The refusal itself stays this module's:
# :func:`refuse_unknown_query` runs first, so FastAPI's own length check never answers.
Text = Annotated[str | None, Query(min_length=1)]

API_PREFIX = "/v1/"
PROBES = frozenset({"/v1/healthz", "/v1/readyz"})


def _query_fields(route: APIRoute) -> list:
    """The query parameter fields ``route`` reads, in the order it declares them: its own and its dependencies'.
    Walked for each request that has a query string (a few objects; routes are not hashable, so nothing is kept)."""
    found = []
    todo = [route.dependant]
    while todo:
        dependant = todo.pop(0)
        found.extend(dependant.query_params)
        todo.extend(dependant.dependencies)
    return found


def taken_by(fields: list) -> tuple[str, ...]:
    """The names of the query parameters ``fields`` (:func:`_query_fields`) declare, in their order."""
    return tuple(dict.fromkeys(f.alias for f in fields))


def whole_numbers_of(fields: list) -> frozenset[str]:
    """The query parameters of ``fields`` declared as ``int`` (or ``int | None``): ``bool`` is a type of its own."""
    return frozenset(f.alias for f in fields
                     if f.field_info.annotation is int or int in get_args(f.field_info.annotation))


def unknown_query_refusal(method: str, path: str, given: list[str], taken: tuple[str, ...]) -> Invalid | None:
    """The 422 for the parameters of ``given`` that are not in ``taken``, or ``None`` when there are none."""
    unknown = [name for name in dict.fromkeys(given) if name not in taken]
    if not unknown:
        return None
    first, others = unknown[0], unknown[1:]
    close = difflib.get_close_matches(first, taken, n=1)
    meant = f" (did you mean '{close[0]}'?)" if close else ""
    nor = f"; nor {'are' if len(others) > 1 else 'is'} {', '.join(others)}" if others else ""
    takes = f"it takes {', '.join(taken)}" if taken else "it takes none"
    return Invalid(first, f"is not a query parameter of {method} {path}{meant}{nor}; {takes}")


def repeated_query_refusal(given: list[str]) -> Invalid | None:
    """The 422 for the first parameter ``given`` more than once, or ``None`` when each is given once."""
    seen: set[str] = set()
    for name in given:
        if name in seen:
            times = given.count(name)
            return Invalid(name, f"is given {times} times; it takes one value (ask once for each)")
        seen.add(name)
    return None


def nameless_query_refusal(method: str, path: str, given: list[str], taken: tuple[str, ...]) -> Invalid | None:
    """The 422 for a parameter with no name (``?=``, ``?=queued``, ``?state=queued&=``), or ``None``: it was refused
    as an unknown parameter named by nothing (": is not a query parameter of ..."), which read as a broken answer.
    Most often a script's ``?$NAME=$VALUE`` with both unset."""
    if "" not in given:
        return None
    takes = f"takes {', '.join(taken)}" if taken else "takes none"
    return Invalid("query", f"holds a parameter with no name (an '=' with nothing before it): name it, or leave it "
                            f"out; {method} {path} {takes}")


def empty_query_refusal(items: list[tuple[str, str]]) -> Invalid | None:
    """The 422 for the first parameter of ``items`` (name, value) given with no value, or ``None``."""
    for name, value in items:
        if value == "":
            return Invalid(name, "is empty: give it a value, or leave it out for the default")
    return None


def loose_number_refusal(items: list[tuple[str, str]], numbers: frozenset[str]) -> Invalid | None:
    """The 422 for the first whole-number parameter of ``items`` not written in ASCII digits alone, or ``None``.
    FastAPI reads such a value with Python's int parsing, which takes ``1_0`` (ten), ``+1``, a space on either
    side and ``1.0``: ``?limit=1_0`` listed ten jobs where a client meant one, or had a bug it was not told of. None of these
    parameters takes a negative number, so a sign is refused too (``-0`` was read as offset 0); leading zeros are
    still digits, and the value's range is FastAPI's to check (``limit=0`` says it must be at least 1)."""
    for name, value in items:
        if name in numbers and not (value.isascii() and value.isdigit()):
            return Invalid(name, "must be written in the digits 0-9 alone: no sign, space, underscore or "
                                 "decimal point")
    return None


async def refuse_unknown_query(request: Request) -> None:
    """The app's dependency, run before each route's own: a 422 for a query parameter the route does not take,
    one given more than once, one given with no value, or a whole number not written in digits."""
    route = request.scope.get("route")
    if not request.query_params or not isinstance(route, APIRoute):
        return
    if not route.path.startswith(API_PREFIX) or route.path in PROBES:
        return
    items = request.query_params.multi_items()
    given = [name for name, _ in items]
    fields = _query_fields(route)  # walked once: both checks below read it
    taken = taken_by(fields)
    refusal = (nameless_query_refusal(request.method, route.path, given, taken)
               or unknown_query_refusal(request.method, route.path, given, taken)
               or repeated_query_refusal(given) or empty_query_refusal(items)
               or loose_number_refusal(items, whole_numbers_of(fields)))
    if refusal is not None:
        raise refusal


# -- the job listing's cursor ------------------------------------------------------------------------------------

CURSOR_MAX = 512  # characters: a cursor the broker made is well under 100
CURSOR_ID_MAX = 128  # characters of the job id a cursor holds: the broker's are 12 (j-2bb07170b9)
_CURSOR_CHARS = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_"  # base64url, unpadded


class JobPage(JobList):
    """``GET /v1/jobs``: a page of jobs, and the cursor that reads the next (``null`` on the last page)."""
    next_cursor: str | None = None


def job_cursor(submitted_at: float, job_id: str) -> str:
    """The cursor of the page after the job ``(submitted_at, job_id)``: opaque to a client (base64url of the
    listing's sort key), so that what it holds can change without a client having read it."""
    raw = json.dumps([submitted_at, job_id], separators=(",", ":")).encode()
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def read_cursor(cursor: str) -> tuple[float, str]:
    """The ``(submitted_at, id)`` key that ``cursor`` holds, or a 422 naming ``cursor``: one that is not a cursor
    (cut short, mangled, from another API) is refused rather than read as the first page again, which would list the
    same jobs over and over. Cursors are not signed: a well-formed one the broker never gave is read as the position
    it names, which shows only jobs the caller may see anyway."""
    bad = Invalid("cursor", "is not a cursor this broker gave: pass the `next_cursor` of the previous page as it "
                            "is, or leave it out for the first page")
    if len(cursor) > CURSOR_MAX or cursor.strip(_CURSOR_CHARS):
        raise bad
    try:
        raw = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4))
        key = json.loads(raw.decode("utf-8"))
    except (binascii.Error, ValueError):  # JSONDecodeError and UnicodeDecodeError are ValueErrors
        raise bad from None
    if not (isinstance(key, list) and len(key) == 2):
        raise bad
    when, job_id = key
    if isinstance(when, bool) or not isinstance(when, (int, float)):
        raise bad
    try:  # a whole number of 320 digits is no float (OverflowError, a 500), and NaN or Infinity no place in the order
        when = float(when)
    except OverflowError:
        raise bad from None
    if not math.isfinite(when):
        raise bad
    # the id as a stored job's may be: printable text of a bounded length (a lone surrogate, "\ud800", cannot be
    # written to the store and was a 500)
    if not isinstance(job_id, str) or not job_id or len(job_id) > CURSOR_ID_MAX or not job_id.isprintable():
        raise bad
    try:
        job_id.encode("utf-8")
    except UnicodeEncodeError:
        raise bad from None
    return when, job_id
