"""Every Redis key the broker uses, in one place (as arq does).

All keys share one prefix so several brokers (or tests) can share a server
with different prefixes.
"""

from __future__ import annotations

import calendar
import time
from dataclasses import dataclass


@dataclass(frozen=True)
class Keys:
    prefix: str = "sb"

    def job(self, job_id: str) -> str:
        """JSON of the job (with its version)."""
        return f"{self.prefix}:job:{job_id}"

    def all_jobs(self) -> str:
        """Sorted set: job id scored by submit time."""
        return f"{self.prefix}:jobs"

    def updated(self) -> str:
        """Sorted set: job id scored by its last update (windowed reads skip older finished jobs)."""
        return f"{self.prefix}:jobs:updated"

    def updated_backfilled(self) -> str:
        """String, set once ``updated`` holds every job (stores written before it existed are backfilled)."""
        return f"{self.prefix}:jobs:updated:complete"

    def by_state(self, state: str) -> str:
        """Set of job ids in a state."""
        return f"{self.prefix}:jobs:state:{state}"

    def state_names(self) -> str:
        """Set of every state name a job was ever stored in (so a state a newer broker added, whose set this
        version cannot name, is still read as live by windowed reads)."""
        return f"{self.prefix}:jobs:states"

    def by_team(self, team: str) -> str:
        """Sorted set: the team's job ids scored by submit time."""
        return f"{self.prefix}:jobs:team:{team}"

    def idempotency(self, team: str, key: str) -> str:
        """String: the job id a team's Idempotency-Key created. The team's ``%`` and ``:`` are escaped, so team
        ``a:b``'s key ``c`` and team ``a``'s key ``b:c`` are two keys (a team name without them reads as before).
        The commit script escapes a team's name the same way (``escaped`` in ``COMMIT_SCRIPT``)."""
        return f"{self.idempotency_prefix()}{escaped(team)}:{key}"

    def idempotency_prefix(self) -> str:
        """What every idempotency key begins with."""
        return f"{self.prefix}:idem:"

    def idempotency_unescaped(self, team: str, key: str) -> str:
        """Where a broker from before the escaping stored a team's Idempotency-Key (``idem:{team}:{key}``, the team
        as it is): the same key as :meth:`idempotency` for a team name without ``%`` and ``:``. Read (and deleted
        with its job) only when it names a job of that team with that key: it may be another team's (``a:b`` + ``c``
        and ``a`` + ``b:c``)."""
        return f"{self.idempotency_prefix()}{team}:{key}"

    def attempts(self, job_id: str) -> str:
        """Hash: attempt number → attempt JSON."""
        return f"{self.prefix}:attempts:{job_id}"

    def events(self, job_id: str) -> str:
        """List of event JSON, oldest first."""
        return f"{self.prefix}:events:{job_id}"

    def placements(self) -> str:
        """Integer: how many placements were committed (the fence of ``Change.expected_placements``)."""
        return f"{self.prefix}:placements"

    def team_admissions(self, team: str) -> str:
        """Integer: how many changes fenced by the team's monthly cap were committed (``Change.team_fence``); the
        team's ``%`` and ``:`` escaped, as in :meth:`idempotency`."""
        return f"{self.prefix}:team_admissions:{escaped(team)}"

    def pruned(self) -> str:
        """Integer: how many jobs the retention policy deleted (``JobStore.pruned``)."""
        return f"{self.prefix}:pruned"

    def pruned_totals(self) -> str:
        """Hash: what the jobs the retention policy deleted had added to each counter of ``/metrics`` — field: the
        counter and its labels (``broker.totals.encode``), value: an integer (micro-dollars, or a count)."""
        return f"{self.prefix}:pruned:totals"

    def pruned_costs(self) -> str:
        """Hash: the pruned-cost ledger (``JobStore.pruned_costs``) — field: ``["cost" or "odeq", team, tier, hour]``
        (``broker.totals.encode``; ``hour`` the UTC hour's start, epoch seconds), value: micro-dollars
        (``broker.costs.ledger_of``); and field ``jobs``: how many pruned jobs the ledger holds the costs of.

        Since the ledger is kept by team and month (:meth:`pruned_costs_part`) this hash holds only ``jobs``, and
        entries written by a broker from before that, until :meth:`RedisStore.prune` moves them to their parts."""
        return f"{self.prefix}:pruned:costs"

    def pruned_costs_part(self, part: str) -> str:
        """Hash: the pruned-cost ledger's entries of one team whose hour is in one UTC month, fields and values as in
        :meth:`pruned_costs`; ``part`` is ``YYYY-MM:`` then the team escaped (:func:`ledger_part`). A cost report
        reads the parts of its window's months (:meth:`pruned_costs_parts`), never the whole ledger, so what it
        reads does not grow with the months the store has kept."""
        return f"{self.prefix}:pruned:costs:{part}"

    def pruned_costs_parts(self) -> str:
        """Sorted set: every part of the pruned-cost ledger (:meth:`pruned_costs_part`), scored by its month's start
        (epoch seconds)."""
        return f"{self.prefix}:pruned:costs-parts"

    def engines(self) -> str:
        """Hash: engine domain → its last beat (epoch seconds)."""
        return f"{self.prefix}:engines"

    def metrics(self, job_id: str) -> str:
        """List of metric point JSON, oldest first."""
        return f"{self.prefix}:metrics:{job_id}"


def ledger_part(team: str, hour: float) -> tuple[str, int]:
    """The part of the pruned-cost ledger an entry of ``team`` at ``hour`` (epoch seconds) goes in, and the part's
    score: its UTC month's start."""
    t = time.gmtime(hour)
    return f"{t.tm_year:04d}-{t.tm_mon:02d}:{escaped(team)}", calendar.timegm((t.tm_year, t.tm_mon, 1, 0, 0, 0))


def month_start(when: float) -> int:
    """The start of the UTC month of ``when`` (epoch seconds)."""
    t = time.gmtime(when)
    return calendar.timegm((t.tm_year, t.tm_mon, 1, 0, 0, 0))


def escaped(part: str) -> str:
    """``part`` with ``%`` and ``:`` percent-encoded: no longer able to end early in a key that goes on after it."""
    return part.replace("%", "%25").replace(":", "%3A")
