"""``GET /metrics`` for Prometheus: the only module that imports ``prometheus_client``.

Figures derived from state (jobs by state, spend, saving, preemptions,
recovery and queue-wait distributions) are read from the store at scrape
time by :class:`StoreCollector`, so several broker processes sharing a store
all report the same totals and nothing is lost on restart. API latency is a
live histogram fed by :func:`install_latency_middleware`. Labels stay
low-cardinality: team, state, tier, zone, method (or ``other``), route template,
status class — never a job id.

Money is exact in ``/v1/costs`` (micro-dollars); here it is dollars as
Prometheus floats, which is what dashboards add and rate over.

Set ``BROKER_METRICS_TOKEN`` to require ``Authorization: Bearer <it>`` on a scrape (:func:`metrics_token`).
"""

# no `from __future__ import annotations`: FastAPI must see the real types of local aliases

import os
import secrets
import threading
import time
from dataclasses import dataclass

from fastapi import APIRouter, Header, Request
from fastapi.responses import Response
from prometheus_client import (CONTENT_TYPE_LATEST, CollectorRegistry, Counter, Histogram, disable_created_metrics,
                               generate_latest)
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily

from broker import costs, totals
from broker.api.probe import StoreProbe
from broker.config import ConfigError, Settings
from broker.lifecycle import AttemptState, JobState
from broker.offers import held_slots
from broker.store import Pruned, StoreUnavailable
from broker.store.base import clock_offset
from broker.team_budget import Month, month_of

ENDED_ATTEMPT_STATES = tuple(s.value for s in AttemptState if s.is_final)
"""The ``state`` label values of ``broker_attempts_ended_total``: each team has every one from the first scrape."""

# A histogram's creation time is exported as a family of its own, broker_http_request_duration_seconds_created, that
# reads as one more gauge of the broker's: no panel or rule uses it (Prometheus keeps a counter's reset by itself), so
# it is not exported. Process-wide; this is the only module that imports prometheus_client.
disable_created_metrics()

LATENCY_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5)
# uvicorn's h11 parser takes any token as a method: each made-up one would be a label value kept for good
METHODS = frozenset({"GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"})


def registry_of(app) -> CollectorRegistry:
    """The app's own registry (one per app, so tests can build many apps in one process)."""
    reg = getattr(app.state, "metrics_registry", None)
    if reg is None:
        reg = CollectorRegistry(auto_describe=True)
        app.state.metrics_registry = reg
    return reg


@dataclass(frozen=True)
class _JobFigures:
    """What one job adds to the store-derived metrics (kept per job between scrapes)."""

    state: str
    team: str
    totals: tuple  # ((key, value), ...): what it adds to the counters and histograms, broker.totals.of_job
    ended: bool = True  # a final state (or one a newer broker wrote, which this one leaves alone)
    queued_since: float = 0.0  # submitted, or requeued: its last attempt's end (broker_queue_oldest_seconds)
    budget: int = 0  # micro-dollars
    spent: int = 0
    month: str = ""  # the calendar month (UTC) ``month_spent`` is of: the one it was read in; "" for no capped team's
    month_spent: int = 0  # micro-dollars its attempts cost in ``month``, as its team's cost report counts them


def _figures(job, tries, month: Month | None = None) -> _JobFigures:
    """``month``: the month of the read, for a job of a capped team (``broker_team_month_spent_dollars``)."""
    tries = list(tries)
    ends = [a.ended_at for a in tries if a.ended_at is not None]
    month_name, month_spent = (month.name, _spent_in_month(job, tries, month)) if month is not None else ("", 0)
    return _JobFigures(
        state=job.state.value, team=job.team, totals=tuple(totals.of_job(job, tries).items()),
        ended=bool(job.state.is_final or getattr(job.state, "foreign", False)),
        # when it last entered the queue; a job stored before that was kept: submitted, or requeued at its last end
        queued_since=float(job.queued_at) if job.queued_at is not None else max([float(job.submitted_at), *ends]),
        budget=int(job.budget or 0), spent=int(job.spent or 0),
        month=month_name, month_spent=month_spent)


def _spent_in_month(job, tries, month: Month) -> int:
    """What ``job``'s attempts cost in ``month`` as its team's cost report for the month counts it: a job is in the
    report's read (:func:`broker.costs.gather`: ``JobStore.cost_history``) when it is not final or was updated since
    the month began, and was submitted before it ended; then its attempts' share of the month
    (:func:`broker.costs.billed_in`). Kept with the job's figures, it holds for every later scrape of the same month:
    a job not final is read again at every scrape, and a final one at every scrape until one after its last update
    (its ``updated_at`` at or after the listing's ``since``): so it was last read in the month of that update or
    later, and in any month after the one it was last read in, the report leaves it out (updated before the month
    began), which is the 0 a figure of another month stands for (:meth:`StoreCollector._month_spent`)."""
    final = bool(getattr(job.state, "is_final", False))  # a newer broker's state: not final, as the store filters
    if final and (job.updated_at is None or job.updated_at < month.since) or job.submitted_at >= month.until:
        return 0
    return costs.billed_in(map(costs.span_of, tries), costs.Window(month.since, month.until, month.name))


NEAR_BUDGET = 0.8
"""``broker_jobs_near_budget`` counts the jobs not ended that have spent at least this share of their budget."""


def capped_teams(settings) -> frozenset[str]:
    """The teams the config gives a monthly cap (``teams.<team>.monthly_budget_usd``)."""
    teams = getattr(settings, "teams", None) or {}
    return frozenset(t.name for t in teams.values() if t.monthly_budget is not None)


def configured_places(settings) -> tuple[set[tuple[str, str]], set[tuple[str, str]]]:
    """The (zone, tier) label pairs the config names, each given its series at 0 from the first scrape (a series
    that appears at 1 is no increase to Prometheus: a preemption storm's first events went unseen): for
    ``broker_preemptions_total`` the simulated zones; for ``broker_attempts_lost_total`` those and the on-prem
    pools (a pool's node can be lost, never preempted). A cloud's zones (SkyPilot) are known only once used."""
    if settings is None:
        return set(), set()
    zones = {(z.name, z.tier if z.tier in costs.TIERS else "onprem") for z in getattr(settings, "zones", ())}
    pools = {(p.name, "onprem") for p in getattr(settings, "pools", ())}
    return zones, zones | pools


class StoreCollector:
    """Reads the store on each scrape and reports what state implies.

    Incremental: the first scrape reads every job; later ones read only jobs that are not
    final or were updated since the previous scrape (less ``SKEW_S``, for other broker
    processes' clocks) — a finished job cannot change without its ``updated_at`` moving —
    and keep each job's figures in memory, so a scrape does not decode the whole history.
    Each job is read as its cost record (:meth:`JobStore.cost_page`), a page at a time. What
    an update time before the scrape's ``since`` would hide is read by id: a job held as not
    ended that the listing no longer names (it ended, stamped by a clock behind by more than
    ``SKEW_S``), and, when the store's count of jobs differs from the jobs held, each stored
    job not held (one imported or restored with its old update time; :meth:`JobStore.job_count`
    is one count, the ids are read only then). A finished job rewritten, still finished, with
    an update time before ``since`` is the one change still unseen until a restart: finding it
    would take a sequence every commit advances, which a broker of an older version sharing
    the store would not advance (docs/deploy.md, "Upgrading brokers that share a store").

    The counters (spend, on-demand equivalent, preemptions) and the histograms (recovery, queue wait) are these
    figures plus the store's totals of the jobs the retention policy deleted (:meth:`JobStore.pruned_totals`), so
    that they do not fall when a job is pruned, here or in a broker started after. A job is in one or the other, never both and never neither: when the store's
    count of pruned jobs has moved since the last scrape, the figures of the jobs no longer stored are dropped
    (:meth:`JobStore.existing`), between two reads of that count that agree — with no prune in between, the jobs
    kept and the totals read add up to every job once. (A job pruned by a broker older than the histograms' totals
    left no part of them in the store: its observations are gone from the histograms.)
    """

    SKEW_S = 300.0
    PAGE = 1000
    """Jobs read (with their attempts) at a time."""
    SETTLE_TRIES = 5
    """Reads of the pruned totals a scrape makes at most, each time a prune lands in between; after that it leaves
    the counters out (a gap in the series) rather than report a sum that could fall at the next."""

    def __init__(self, service, engine_of=lambda: None, teams=(), settings=None):
        self.service = service
        # the configured zones and pools: each has its preemption and lost-node series from the start, at 0
        self.zones, self.places = configured_places(settings if settings is not None
                                                    else getattr(service, "settings", None))
        # the configured teams: each has its series from the start, at 0, not only once it has a job — without them
        # increase(broker_spend_dollars_total[1h]) missed a team's first spend, and its panels read "no data"
        self.teams = tuple(teams)
        # the teams with a monthly cap: each job of theirs is kept with what it cost in the month it was read in, so
        # that a scrape's broker_team_month_spent_dollars is summed from the records it reads anyway
        self.capped = capped_teams(settings if settings is not None else getattr(service, "settings", None))
        # the configured pools' sizes: each has its slots and slots-in-use series from the start
        self.pools = {p.name: p.slots for p in getattr(settings if settings is not None
                                                       else getattr(service, "settings", None), "pools", ())}
        self.engine_of = engine_of
        self.clock = getattr(service, "clock", time.time)  # the clock that stamps updated_at
        self._figures: dict[str, _JobFigures] = {}
        self._pruned_jobs: int | None = None  # the store's count of pruned jobs as of the figures
        self._read_at: float | None = None
        self._month: Month | None = None  # the month of the last read: that of each job read then not final
        self._lock = threading.Lock()
        # a store that stalls without refusing (a Redis paused, packets dropped) held a scrape for the client's socket
        # timeout, 10 s, Prometheus's own scrape timeout: the target read as down (BrokerDown) and broker_store_up
        # was never 0 (BrokerStoreDown never fired). A bounded look first, as the health probes take
        self._probe = StoreProbe(lambda: service.store.get_job("metrics-probe"))
        #: domain → (its beat's value, when a scrape first read it, monotonic): for a process without an engine
        self._beat_seen: dict[str, tuple[float, float]] = {}

    def describe(self):
        return []  # read the store only on scrape, not at registration

    def _refresh(self) -> tuple[list[_JobFigures], Pruned | None]:
        """The figures of the jobs in the store, and the store's totals of those pruned (``None``: prunes kept
        landing while they were read)."""
        store = self.service.store
        with self._lock:  # one refresh at a time; scrapes are rare
            now = self.clock()
            since = None if self._read_at is None else self._read_at - self.SKEW_S
            self._month = month_of(now)
            live = {i for i, f in self._figures.items() if not f.ended}
            # a page at a time, each job as its cost record (JobStore.cost_page: only what of_job reads): read whole,
            # the first scrape of a store of 50,000 jobs held every job and attempt at once (about 1 GB more, kept
            # by the process after), and decoding whole records was most of its time
            before = None
            while True:
                jobs, attempts = store.cost_page(limit=self.PAGE, active_since=since, before=before)
                for j in jobs:
                    self._figures[j.id] = self._figures_of(j, attempts[j.id])
                    live.discard(j.id)
                if len(jobs) < self.PAGE:
                    break
                before = (jobs[-1].submitted_at, jobs[-1].id)
                del jobs, attempts
            if live:
                # jobs held as not ended that the listing no longer names: they ended with an update time before
                # ``since`` (a broker whose clock lags by more than SKEW_S); read by id, or they would stay running
                self._read(store, live)
            self._read_at = now
            pruned = self._settle(store)
            if since is not None and pruned is not None and store.job_count() != len(self._figures):
                # a job no listing since the last scrape named: written with an update time before ``since`` (an
                # import, a store restored, a lagging clock). Only the ids are read, and only when the counts differ
                self._read(store, store.job_ids() - self._figures.keys())
            return list(self._figures.values()), pruned

    def _read(self, store, job_ids) -> None:
        """The figures of ``job_ids`` read again, by id (a job no longer stored is left as it is: :meth:`_settle`
        drops it with the pruned totals that hold it)."""
        ids = sorted(job_ids)
        for i in range(0, len(ids), self.PAGE):
            jobs, attempts = store.cost_records(ids[i:i + self.PAGE])
            for j in jobs:
                self._figures[j.id] = self._figures_of(j, attempts[j.id])

    def _figures_of(self, job, tries) -> _JobFigures:
        return _figures(job, tries, self._month if job.team in self.capped else None)

    def _settle(self, store) -> Pruned | None:
        """The pruned totals, with the figures of every job pruned until they were read dropped."""
        for _ in range(self.SETTLE_TRIES):
            pruned = store.pruned_totals()
            if pruned.jobs == self._pruned_jobs:
                return pruned  # nothing pruned since the figures were settled, nor since they were read
            kept = store.existing(list(self._figures))
            if store.pruned() != pruned.jobs:
                continue  # a prune landed between: what was kept may already be in the totals
            for job_id in [i for i in self._figures if i not in kept]:
                del self._figures[job_id]
            self._pruned_jobs = pruned.jobs
            return pruned
        return None

    def _live(self, figures: list[_JobFigures], teams: list[str]):
        """Per team, from the jobs not ended (read fresh at every scrape): how long the oldest queued job has
        waited, how many have spent :data:`NEAR_BUDGET` of their budget or more, and their budgets and spend. Every
        team has each series, at 0 when it has no such job, so an alert's expression always has a value."""
        now = self.clock()
        oldest = GaugeMetricFamily("broker_queue_oldest_seconds", "How long the longest-waiting queued job has "
                                   "waited, by team: since it last entered the queue (its submit, its resume, or its "
                                   "requeue after a preemption or a retried error); 0 when none is queued.", labels=["team"])
        near = GaugeMetricFamily("broker_jobs_near_budget", f"Jobs not ended that have spent {NEAR_BUDGET:.0%} "
                                 "of their budget or more, by team.", labels=["team"])
        budget = GaugeMetricFamily("broker_team_active_budget_dollars", "The budgets of a team's jobs not ended.",
                                   labels=["team"])
        spent = GaugeMetricFamily("broker_team_active_spent_dollars", "What a team's jobs not ended have spent.",
                                  labels=["team"])
        waits = dict.fromkeys(teams, 0.0)
        nears = dict.fromkeys(teams, 0)
        budgets = dict.fromkeys(teams, 0)
        spends = dict.fromkeys(teams, 0)
        for f in figures:
            if f.ended:
                continue
            if f.state == JobState.QUEUED.value:
                waits[f.team] = max(waits.get(f.team, 0.0), now - f.queued_since)
            if f.budget > 0 and f.spent >= NEAR_BUDGET * f.budget:
                nears[f.team] = nears.get(f.team, 0) + 1
            budgets[f.team] = budgets.get(f.team, 0) + f.budget
            spends[f.team] = spends.get(f.team, 0) + f.spent
        for team in sorted(waits):
            oldest.add_metric([team], max(0.0, waits[team]))
            near.add_metric([team], nears[team])
            budget.add_metric([team], budgets[team] / 1_000_000)
            spent.add_metric([team], spends[team] / 1_000_000)
        yield from (oldest, near, budget, spent)

    def _pools(self, holding):
        """Each configured on-prem pool's size and the slots its jobs hold now (placed, launching, running,
        cancelling, stopping: what placement counts as taken, :func:`broker.offers.held_slots`), so an admin sees
        how full the team's own GPUs are without adding up job placements; a pool the config no longer names shows
        while jobs still hold its slots. ``holding``: the jobs that hold capacity, read beside the cost records (which
        keep no slots): a few, however many jobs the store holds."""
        size = GaugeMetricFamily("broker_pool_slots", "An on-prem pool's slots (GPUs, or CPU slots), as configured.",
                                 labels=["pool"])
        used = GaugeMetricFamily("broker_pool_slots_in_use", "The slots of an on-prem pool its jobs hold now "
                                 "(placed, launching, running, cancelling or stopping).", labels=["pool"])
        held = {pool: len(slots) for pool, slots in held_slots(holding).items()}
        for pool in sorted(self.pools):
            size.add_metric([pool], self.pools[pool])
        for pool in sorted({**dict.fromkeys(self.pools, 0), **held}):
            used.add_metric([pool], held.get(pool, 0))
        yield from (size, used)

    def _caps(self, figures: list[_JobFigures], settled: bool):
        """Each team with a monthly cap: the cap, this month's spend and what its jobs not ended hold (what
        :mod:`broker.team_budget` weighs at admission), so an alert can fire before a team's submits are refused.

        The spend is the team's cost report's total for the month (``service.team_standing``), summed from the cost
        records this scrape read (each job's share of the month, kept with its figures: :func:`_spent_in_month`) and
        the pruned-cost ledger of the month, read once for every team: a cost report's read of the month per capped
        team was a scan of the jobs at every scrape. When this scrape's read was of another month (a scrape at
        midnight on the 1st), or left prunes unsettled, the standing reads the spend itself, as admission does."""
        if not self.capped:
            return
        families = {
            "cap": GaugeMetricFamily("broker_team_monthly_cap_dollars", "A team's monthly_budget_usd.",
                                     labels=["team"]),
            "spent": GaugeMetricFamily("broker_team_month_spent_dollars", "What a team with a monthly cap spent "
                                       "this calendar month (UTC).", labels=["team"]),
            "held": GaugeMetricFamily("broker_team_month_held_dollars", "The unspent budgets of a capped team's jobs "
                                      "not ended: what they may still spend.", labels=["team"]),
        }
        now = self.clock()
        spent = self._month_spent(figures, month_of(now)) if settled else {}
        for team in sorted(self.capped):
            standing = self.service.team_standing(team, now, spent=spent.get(team))
            families["cap"].add_metric([team], standing.cap / 1_000_000)
            families["spent"].add_metric([team], standing.spent / 1_000_000)
            families["held"].add_metric([team], standing.held / 1_000_000)
        yield from families.values()

    def _month_spent(self, figures: list[_JobFigures], month: Month) -> dict[str, int]:
        """Each capped team's spend in ``month`` (micro-dollars), from the figures held and the pruned-cost ledger;
        empty when the last read was of another month (each job not final was read then)."""
        if self._month is None or self._month.name != month.name:
            return {}
        win = costs.Window(month.since, month.until, month.name)
        out = dict.fromkeys(self.capped, 0)
        for f in figures:
            if f.team in out and f.month == month.name:  # (a figure of an earlier month: a job the report leaves out)
                out[f.team] += f.month_spent
        ledger = self.service.store.pruned_costs(team=None, since=month.since, until=month.until)
        return {team: n + costs.ledger_spent(ledger, win, team) for team, n in out.items()}

    def collect(self):
        up = GaugeMetricFamily("broker_store_up", "1 when this scrape could read the store, else 0 (the figures "
                               "read from it are then left out, the process's own ones are not).")
        try:
            self._probe.look()
            figures, pruned = self._refresh()
            pruned_jobs = self.service.store.pruned() if pruned is None else pruned.jobs
            holding = self.service.store.list_jobs(states=[s.value for s in JobState if s.is_active], limit=100_000)
        except StoreUnavailable:
            up.add_metric([], 0)
            yield up
            yield from self._engine()
            return
        up.add_metric([], 1)
        yield up
        sums: dict[totals.Key, int] = dict(pruned.totals) if pruned is not None else {}
        for f in figures:
            for key, value in f.totals:  # (no zeros: of_job leaves them out)
                sums[key] = sums.get(key, 0) + value
        teams = sorted({f.team for f in figures} | set(self.teams)
                       | {k[1] for k in sums if k[0] in (totals.SPEND, totals.ONDEMAND_EQUIVALENT)})
        by_state = GaugeMetricFamily("broker_jobs", "Jobs stored, by state and team: every job the store holds, "
                                     "ended ones included, until the retention policy prunes it (a gauge: it falls "
                                     "when a job is pruned or resumed; broker_jobs_pruned_total counts the pruned).",
                                     labels=["state", "team"])
        counts: dict[tuple[str, str], int] = {}
        for f in figures:
            counts[(f.state, f.team)] = counts.get((f.state, f.team), 0) + 1
        for team in teams:
            for st in JobState:
                by_state.add_metric([st.value, team], counts.get((st.value, team), 0))
        yield by_state
        yield from self._live(figures, teams)
        yield from self._pools(holding)
        yield from self._caps(figures, pruned is not None)

        if pruned is not None:  # else left out this once: a sum without the jobs pruned meanwhile would fall
            spend = CounterMetricFamily("broker_spend_dollars", "Cost accrued by all attempts, by team and tier.",
                                        labels=["team", "tier"])
            equiv = CounterMetricFamily("broker_ondemand_equivalent_dollars",
                                        "What the same work would have cost all on-demand, by team.", labels=["team"])
            saved = GaugeMetricFamily("broker_saved_vs_ondemand_dollars",
                                      "On-demand equivalent minus actual spend, by team.", labels=["team"])
            preempt = CounterMetricFamily("broker_preemptions", "Attempts preempted, by zone and tier.",
                                          labels=["zone", "tier"])
            # a node lost without notice (an on-prem pool's, which is never preempted) is not a preemption
            lost = CounterMetricFamily("broker_attempts_lost", "Attempts whose node was lost without notice (an "
                                       "on-prem pool node gone, a VM vanished), by zone and tier.",
                                       labels=["zone", "tier"])
            for team in teams:
                for tier in costs.TIERS:
                    spend.add_metric([team, tier], sums.get((totals.SPEND, team, tier), 0) / 1_000_000)
                total = sum(sums.get((totals.SPEND, team, t), 0) for t in costs.TIERS)
                equivalent = sums.get((totals.ONDEMAND_EQUIVALENT, team), 0)
                equiv.add_metric([team], equivalent / 1_000_000)
                saved.add_metric([team], (equivalent - total) / 1_000_000)
            # every zone and pool the config names has its series from the first scrape, at 0
            counted = {totals.PREEMPTIONS: dict.fromkeys(self.zones, 0), totals.LOST: dict.fromkeys(self.places, 0)}
            for key, n in sums.items():
                if key[0] in counted:
                    counted[key[0]][tuple(key[1:])] = n
            for labels, n in sorted(counted[totals.PREEMPTIONS].items()):
                preempt.add_metric(list(labels), n)
            for labels, n in sorted(counted[totals.LOST].items()):
                lost.add_metric(list(labels), n)
            ended = CounterMetricFamily("broker_attempts_ended", "Attempts that ended, by team and how: succeeded, "
                                        "failed, preempted, lost, stopped (a stop the broker asked for: a cancel, a "
                                        "budget stop, a move).", labels=["team", "state"])
            # each team's every end from the first scrape, at 0: a failure alert's increase() sees the first one
            counts = {(team, state): 0 for team in teams for state in ENDED_ATTEMPT_STATES}
            counts.update({tuple(k[1:]): n for k, n in sums.items() if k[0] == totals.ATTEMPTS_ENDED})
            for labels, n in sorted(counts.items()):
                ended.add_metric(list(labels), n)
            yield spend
            yield equiv
            yield saved
            yield preempt
            yield lost
            yield ended
            # the histograms too: without the jobs pruned meanwhile their counts would fall
            yield _histogram("broker_recovery_seconds", "Time from a preemption or a lost node to the next attempt "
                                                        "running.",
                             sums, totals.RECOVERY)
            yield _histogram("broker_queue_wait_seconds", "Time from submit to a job's first launch.",
                             sums, totals.QUEUE_WAIT)
        beats = GaugeMetricFamily("broker_engine_last_beat_timestamp_seconds",
                                  "When each engine sharing the store (by its launcher's domain) last said it was "
                                  "alive, on its own clock: time() minus the newest is how long no engine has placed "
                                  "or watched a job (an API with BROKER_ENGINE=off whose worker is down looks healthy "
                                  "otherwise).", labels=["domain"])
        read = self.service.store.beats()
        for domain, seen in sorted(read.items()):
            beats.add_metric([domain], float(seen))
        yield beats
        ages = GaugeMetricFamily("broker_engine_beat_age_seconds",
                                 "Seconds since this broker saw each engine's beat change (by its launcher's domain), "
                                 "on this broker's own clock: another host's beat carries its clock, which may be "
                                 "hours off. min() over it above 120 is no engine placing or watching jobs; one domain "
                                 "above owner_timeout_seconds, an engine whose jobs the others take over.",
                                 labels=["domain"])
        for domain, age in sorted(self._beat_ages(read).items()):
            ages.add_metric([domain], age)
        yield ages
        offset = clock_offset(self.service.store, time.time)  # this host's clock, as the engine measures it
        if offset is not None:  # a store several hosts share (Redis); SQLite is one process with one clock
            skew = GaugeMetricFamily("broker_clock_offset_seconds",
                                     "This host's clock less the job store's (Redis TIME), at this scrape: brokers "
                                     "sharing a store need synced clocks; beyond BROKER_MAX_CLOCK_OFFSET_S the engine "
                                     "does not tick.")
            skew.add_metric([], offset)
            yield skew
        gone = CounterMetricFamily("broker_jobs_pruned", "Finished jobs deleted by the retention policy "
                                   "(job_retention_days), by every broker sharing the store.")
        gone.add_metric([], pruned_jobs)
        yield gone
        yield from self._engine()

    def _beat_ages(self, beats: dict[str, float]) -> dict[str, float]:
        """Each domain's seconds since its beat was seen to change: as this process's engine saw it, where it runs
        one that has beaten; else as this collector saw it from scrape to scrape (an API with ``BROKER_ENGINE=off``,
        whose worker is the one to watch), from the first scrape that read each value."""
        engine = self.engine_of()
        ages = getattr(engine, "beat_ages", None)
        seen = ages() if ages is not None else {}
        if seen:
            return seen
        now = time.monotonic()
        for domain, value in beats.items():
            if self._beat_seen.get(domain, (None,))[0] != value:
                self._beat_seen[domain] = (value, now)
        return {domain: now - self._beat_seen[domain][1] for domain in beats}

    def _engine(self):
        engine = self.engine_of()
        if engine is not None:
            g = GaugeMetricFamily("broker_engine_tick_seconds", "Duration of the engine's last reconcile loop.")
            g.add_metric([], float(getattr(engine, "last_tick_seconds", 0.0)))
            yield g
            durations = getattr(engine, "tick_durations", None)
            if durations is not None:  # every loop since this broker started (the gauge: the last only)
                yield HistogramMetricFamily("broker_engine_tick_duration_seconds",
                                            "Durations of the engine's reconcile loops since this broker started.",
                                            buckets=durations.cumulative(), sum_value=durations.total)


class NotifierCollector:
    """This process's Slack notifier's counters (:meth:`broker.slack.notify.Notifier.counters`): a notification given
    up after its retry window, or dropped from a full queue, was a log line alone, and on call no one could tell a
    failure had gone unsaid. Nothing when the config sends no notifications."""

    def __init__(self, notifier_of):
        self.notifier_of = notifier_of

    def collect(self):
        notifier = self.notifier_of()
        if notifier is None:
            return
        counted = CounterMetricFamily("broker_slack_notifications", "Slack notifications by outcome: sent, failed "
                                      "(given up after the retry window), dropped (a destination's queue full), "
                                      "discarded (unsent at shutdown).", labels=["outcome"])
        for outcome, value in sorted(notifier.counters().items()):
            if outcome != "summarized":
                counted.add_metric([outcome], value)
        yield counted
        waiting = GaugeMetricFamily("broker_slack_notifications_queued",
                                    "Slack notifications waiting or being delivered, every destination together.")
        waiting.add_metric([], notifier.queued())
        yield waiting


def _histogram(name: str, doc: str, sums: dict, key: str) -> HistogramMetricFamily:
    buckets, total = totals.histogram(sums, key)
    return HistogramMetricFamily(name, doc, buckets=buckets, sum_value=total)


def install_latency_middleware(app) -> None:
    """Time every request into ``broker_http_request_duration_seconds{method,route,status}``, and count each one
    answered 401 (a credential refused: no token, a token that matches nobody, a bad Slack signature, a wrong
    ``/metrics`` token) into ``broker_http_unauthorized_total{route}``: the histogram's ``status`` is only the class
    (``4xx``), which mixes them with 403s, 404s and 422s, and an alert on token guessing or a token still in use after
    its rotation needs them apart.

    ``route`` is the route template (``/v1/jobs/{job_id}``), or ``other`` for
    paths no route matched, and ``method`` one of :data:`METHODS` or ``other``,
    so a scan of random URLs or methods cannot grow the label set.
    Idempotent per app.
    """
    if getattr(app.state, "latency_middleware", False):
        return
    app.state.latency_middleware = True
    hist = Histogram("broker_http_request_duration_seconds", "API request latency.",
                     labelnames=["method", "route", "status"], buckets=LATENCY_BUCKETS, registry=registry_of(app))
    refused = Counter("broker_http_unauthorized", "API requests answered 401 (a credential refused), by route.",
                      labelnames=["route"], registry=registry_of(app))

    @app.middleware("http")
    async def _latency(request: Request, call_next):
        started = time.perf_counter()
        status, code = "5xx", 500
        try:
            response = await call_next(request)
            code = response.status_code
            status = f"{code // 100}xx"
            return response
        finally:
            route = request.scope.get("route")
            template = getattr(route, "path", None) or "other"
            method = request.method if request.method in METHODS else "other"
            hist.labels(method, template, status).observe(time.perf_counter() - started)
            if code == 401:
                refused.labels(template).inc()


def metrics_token(env) -> str | None:
    """The token ``/metrics`` asks for, from ``BROKER_METRICS_TOKEN`` in ``env``; ``None`` when it is unset (open).

    Surrounding whitespace is stripped, as Prometheus strips its ``credentials_file``: a token written to a file with
    a trailing newline (``echo tok >file``, ``$(cat file)``) and given to both left every scrape refused for ever.
    Set but empty, or only whitespace, is refused (:class:`ConfigError`, so ``broker serve`` stops with one line
    naming it), as the CLI refuses an empty ``BROKER_TOKEN``: read as unset, ``BROKER_METRICS_TOKEN=$UNSET_VAR``
    served every team's spend to anyone, with nothing said at start. A refusal rather than a warning, because the
    variable being set says its operator meant ``/metrics`` to be closed, and a start-up line is easily missed.
    """
    raw = env.get("BROKER_METRICS_TOKEN")
    if raw is None:
        return None
    token = raw.strip()
    if not token:
        raise ConfigError("BROKER_METRICS_TOKEN is set but empty: give it the token Prometheus sends (Authorization: "
                          "Bearer), or unset it (unset BROKER_METRICS_TOKEN) to leave /metrics open")
    return token


def router(service, settings: Settings, *, app=None) -> APIRouter:
    """``/metrics``. ``app`` gives the registry (with the latency histogram) and the engine."""
    r = APIRouter()
    if app is not None:
        reg = registry_of(app)
        engine_of = lambda: getattr(app.state, "engine", None)  # noqa: E731
    else:
        reg = CollectorRegistry(auto_describe=True)
        engine_of = lambda: None  # noqa: E731
    reg.register(StoreCollector(service, engine_of, teams=settings.teams, settings=settings))
    if app is not None:
        reg.register(NotifierCollector(lambda: getattr(app.state, "notifier", None)))
    token = metrics_token(os.environ)  # refused here, at start, when set but empty

    @r.get("/metrics", include_in_schema=False)
    def metrics(authorization: str | None = Header(default=None)) -> Response:
        if token and not (authorization and authorization.lower().startswith("bearer ")
                          and secrets.compare_digest(authorization[7:].strip().encode(), token.encode())):
            return Response(status_code=401, content=b"send Authorization: Bearer <BROKER_METRICS_TOKEN>\n",
                            headers={"WWW-Authenticate": "Bearer"})
        return Response(generate_latest(reg), media_type=CONTENT_TYPE_LATEST)

    return r
