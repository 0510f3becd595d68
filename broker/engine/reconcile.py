"""The reconcile loop: monitor → schedule → launch (→ sweep), once per tick.

Each step decides with a pure function (:mod:`.monitor`, :mod:`.schedule`,
:mod:`.budget`, :mod:`.recover`, :mod:`.spot`, :mod:`broker.diagnosis`) and
then applies its decision through one store write — the job, its attempt and
its events together, with compare-and-set on the job's version. If another
broker process changed the job first the write fails with
:class:`~broker.store.VersionConflict` and this process moves on: the job is
re-read next tick. Only the process whose ``placed → launching`` write won
calls the launcher, and launching is idempotent per attempt id, so an attempt
never runs twice. Stopping goes the same way: a stop is sent to the launcher
only once the write that records it (``stop_requested_at``, ``stop_reason``)
has committed over the version it was decided on, so a budget raised, or a
progress report, committed in between is decided on first; and an engine that
finds a stop recorded and not sent by itself sends it (stopping is idempotent).

On start, nothing special is needed to re-adopt work: attempts that were
``launching`` are launched again (a no-op if they had started; one never
launched is billed from this launch) and attempts that were ``running`` are
monitored as usual.
"""

from __future__ import annotations

import logging
import re
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import Future
from dataclasses import dataclass, replace
from decimal import Decimal

from broker.auth import job_token, job_token_key, job_token_version
from broker.config import Settings
from broker.diagnosis import Diagnosis, Ending, RuleBook
from broker.engine import budget as budget_rules
from broker.engine import monitor
from broker.engine.billing import accrue
from broker.engine.launch import launch_request, run_as_for, workdir_changed, workdir_seen
from broker.engine.monitor import silence, stalled_again, step_reached
from broker.engine.recover import block_zone, launch_backoff, steps_lost
from broker.engine.schedule import Place, Wait, request_of, schedule_now
from broker.engine.spot import decide as policy_decide
from broker.engine.spot import RealTime, policy_input
from broker.engine.workdir_refs import PackReferences
from broker.lifecycle import AttemptState, JobEvent, JobState, apply
from broker.models import DEADLINE_PIN, Attempt, Event, Job, attempt_id, event_for, note_event, noted
from broker.offers import market, matching_offers
from broker.peers import report_urls
from broker.queue import expected_end
from broker.sealing import Unsealable, job_secret_values, open_task, redact, secret_values
from broker.spec import in_own_base
from broker.store import Change, JobStore, StoreUnavailable, VersionConflict
from broker.store.base import clock_offset
from broker.views import duration as fmt_duration
from broker.views import deadline_at, iso
from launchers.base import (AttemptStatus, LaunchError, Launcher, Phase, after_run_seconds, domain_for, domains_of,
                            elapsed, live_attempts, sweep_attempt_files)
from pricing.deadline import RELIABLE
from pricing.money import fmt, fmt_left, fmt_limit, fmt_rate, fmt_spent_of
from pricing.offers import Tier
from pricing.placement import cloud_block
from pricing.policy import Holding, make_policy

log = logging.getLogger("broker.engine")

ENGINE_STATES = [s.value for s in (JobState.QUEUED, JobState.PLACED, JobState.LAUNCHING, JobState.RUNNING,
                                   JobState.CANCELLING, JobState.STOPPING)]
MONITORED = (JobState.LAUNCHING, JobState.RUNNING, JobState.CANCELLING, JobState.STOPPING)
"""The states of a job whose latest attempt the engine watches (status, billing, stops)."""
HOLDING_STATES = [s for s in ENGINE_STATES if s != JobState.QUEUED.value]
"""The engine's states of a job that holds capacity: placed, or :data:`MONITORED`."""
SWEEP_SECONDS = 60.0
"""How often the engine asks a cloud launcher to tear down clusters no active attempt owns."""
WORKDIR_GC_SECONDS = 3600.0
"""How often the engine collects the uploaded workdir packs no job refers to any more (``broker/workdir_store.py``),
and sweeps the launcher's files of attempts whose job the store no longer holds (:meth:`Engine.sweep_attempt_files`);
its own attempts' unpacked directories are swept every ``SWEEP_SECONDS``."""
ATTEMPT_FILES_LIMIT = 2000
"""The most attempts a sweep of the launcher's per-attempt files looks at (for each of the router's launchers): at
most this many jobs read from the store, in batched reads; the next sweep goes on from where it stopped."""
ATTEMPT_ID = re.compile(r"(?P<job>.+)-a[0-9]+")
"""What :func:`broker.models.attempt_id` makes: the job's id, ``-a``, the attempt's number."""
GC_JOB_LIMIT = 1_000_000
"""The most jobs a collection reads for the packs they refer to; with more, it collects nothing rather than guess."""
UNPACKS_AT_ONCE = 2
"""Attempts' workdirs fetched and unpacked at once, each in a thread of its own beside the ticks."""
BEAT_SECONDS = 5.0
"""How often an engine records that it is alive (at most a quarter of ``owner_timeout_seconds``)."""
SUPERSEDED_SECONDS = 10.0
"""How often (and at its first tick) an engine looks for runs on this host of attempts the store has ended or moved
past (:meth:`Engine._stop_superseded`): a directory listing and a look at the attempts not ended."""
SUPERSEDED_STOP = "superseded"
"""The stop reason such a run is stopped with (no grace period: its work is not kept, its job resumed elsewhere)."""

PROVISIONING_STOP = "stopped at its budget while"
"""How the reason of a job stopped at its budget while its attempt was still being provisioned begins."""

ENDED_PHASE_NAME = {Phase.LOST: "lost", Phase.GONE: "gone", Phase.PREEMPTED: "preempted", Phase.FAILED: "failed",
                    Phase.SUCCEEDED: "succeeded", Phase.STOPPED: "stopped"}


class Engine:
    """Drives jobs through their states. ``tick`` is one cycle; ``start`` runs it in a thread."""

    def __init__(self, settings: Settings, store: JobStore, launcher: Launcher, *,
                 clock: Callable[[], float] = time.time, monotonic: Callable[[], float] = elapsed,
                 actor: str = "engine", on_event: Callable[[Event, Job], None] | None = None,
                 host_clock: Callable[[], float] = time.time):
        """``clock``: the wall clock (times stored, compared across processes); ``monotonic``: the time an
        attempt is billed for between two of this engine's accruals (:meth:`_billed_until`), which a step
        of the wall clock does not move and a suspended host's sleep does (:func:`launchers.base.elapsed`);
        ``host_clock``: this host's clock as it is measured against the store's (:meth:`_measure_clock`) — the
        wall clock in a broker; a test that moves ``clock`` by hand, to play out minutes in a moment, leaves it
        real (its ``clock`` is no host's, and comparing it with a real server's would stop the engine)."""
        self.settings = settings
        self.store = store
        self.launcher = launcher
        self.clock = clock
        self.host_clock = host_clock
        self.monotonic = monotonic
        #: attempt id → (its ``billed_until`` as this engine last wrote it, or None as it launched it; its
        #: ``created_at`` then; the monotonic time then): what :meth:`_billed_until` counts on from
        self._accrued: dict[str, tuple[float | None, float, float]] = {}
        self.actor = actor
        self.on_event = on_event
        self.rules = RuleBook(settings.extra.get("failure_rules"))
        #: the URL this broker's jobs report to, its own (``None``: an engine serving no API, a ``broker worker``
        #: given no public URL); a launch adds the other brokers serving on its data dir (``broker/peers.py``)
        self.own_url: str | None = settings.public_url
        self.policies: dict[str, object] = {}
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.last_tick_seconds = 0.0
        self.tick_durations = TickDurations()  # every loop's, for /metrics' histogram (the gauge holds the last only)
        self._last_sweep = 0.0
        #: every view it has (a router: this host's and the cloud's); attempts launched in one are this engine's
        self.domains: frozenset[str] = domains_of(launcher)
        self._last_beat = float("-inf")
        #: domain → (its beat's value, when this engine first read that value, on this engine's clock)
        self._beat_seen: dict[str, tuple[float, float]] = {}
        #: attempt id → when this engine first found it naming no view and unseen by its launcher (``_unclaimed``)
        self._unclaimed_since: dict[str, float] = {}
        #: attempt id → when this engine first saw it (another view's, or unclaimed), on this engine's clock: its
        #: ``created_at`` is its writer's clock, which may be hours off this one's
        self._attempt_seen: dict[str, float] = {}
        #: job id → (its progress' ``at``, when this engine first read that value, on its own clock): a report's
        #: ``at`` is the clock of the broker that took it, so the job's silence is counted from the change seen here
        self._progress_seen: dict[str, tuple[object, float]] = {}
        #: this host's clock less the store's (``None``: a store with no clock of its own, SQLite), as last measured at
        #: a beat (:meth:`_measure_clock`); beyond ``max_clock_offset_seconds`` the engine does not tick
        self.clock_offset: float | None = None
        self._clock_said: tuple[str, float] | None = None  # the last clock warning's level and when (monotonic)
        #: since when this engine has read the beats without a gap (start, or back from a store outage):
        #: a beat older than that may be old only because nobody could write it
        self._watching_since = float("inf")
        self._workdirs = None  # broker.workdir_store.WorkdirStore, opened for the first job with a workdir pack
        #: attempt id → its workdir being fetched and unpacked beside the ticks (only the engine's thread touches it)
        self._preparing: dict[str, Future] = {}
        self._preparing_missing: set[str] = set()  # done, and not launching at the last housekeeping
        self._unpacks = threading.BoundedSemaphore(UNPACKS_AT_ONCE)
        self._housekeeping: Future | None = None  # the sweep of workdirs, or the hourly round, under way
        self._last_workdir_sweep = float("-inf")  # at start: what a broker stopped before left behind goes first
        self._last_collect = float("-inf")
        self._pack_refs = PackReferences(store, retention=settings.workdir_retention_seconds, limit=GC_JOB_LIMIT)
        self._left_alone: set[tuple[str, str]] = set()  # (job id, state) left to a newer broker, logged once
        self._placements = 0  # the store's count of placements as of this tick's snapshot, and this tick's own
        #: the attempts whose recorded stop this engine has sent to the launcher (:meth:`_send_stop`)
        self._stops_sent: set[str] = set()
        #: the attempts said to run past their expected length (:func:`_past_length`), once each
        self._past_length_said: set[str] = set()
        #: the jobs whose ``deadline_passed`` note the store holds (:meth:`_deadline_passed`): not read again
        self._deadline_said: set[str] = set()
        self._last_superseded = float("-inf")  # when :meth:`_stop_superseded` last looked
        self._said_start = False  # the first tick logs what this engine found to watch (a restart said nothing)
        self._outage: StoreOutage | None = None  # the store not answering the ticks, since when (tick_safely)
        #: the attempts whose run on this host was live at that look, and not yet ended in the store then
        self._live_seen: set[str] = set()
        #: the superseded runs this engine has billed and asked to stop (:meth:`_end_superseded`), not yet ended:
        #: asked once (a run already stopping keeps its grace), billed to their end once they end
        self._superseded_sent: set[str] = set()
        #: attempt id → the limit this engine last gave its launcher (:meth:`_keep_limit`)
        self._limits_written: dict[str, float] = {}

    # -- the cycle -----------------------------------------------------------------------------

    def tick(self) -> None:
        started = time.perf_counter()
        now = self.clock()
        self._beat(now)
        if self.clock_refusal() is not None:  # each time it would stamp is off: it beats (its runs stay its own), only
            return
        if not 0 <= now - self._last_superseded < SUPERSEDED_SECONDS:  # 0. no run beside its job's next attempt
            self._last_superseded = now
            self._guard(self._stop_superseded, now)
        # the jobs that hold capacity (a queued one holds none): to monitor, and at the start to say what it found.
        # Queued jobs are read below, after the monitoring: read here too, the queue was decoded twice a tick
        jobs = self.store.list_jobs(states=HOLDING_STATES, limit=100_000)
        if not self._said_start:  # what this engine found at its start, in its log: a restart looked like nothing
            self._said_start = True
            watched = [j.id for j in jobs if j.state in MONITORED]
            if watched:
                log.info("engine started: watching %d job(s) placed, launching or running (%s), its own attempts and "
                         "those another broker sharing the store may be silent on", len(watched),
                         ", ".join(watched[:10]) + (f" and {len(watched) - 10} more" if len(watched) > 10 else ""))
            for pool, held in sorted(_pools_gone(jobs, self.settings).items()):
                log.warning("pool %r is not in this config, yet %s still hold%s its slots (%s): they are counted in no "
                            "pool now. If the pool was renamed, its GPUs are the same, and a job placed on the new "
                            "name can share one with them; put the old name back until they end, or cancel them",
                            pool, _jobs_words(held), "s" if len(held) == 1 else "", ", ".join(held))
        for job in jobs:  # 1. monitor what runs
            if job.state in MONITORED:
                self._guard(self._monitor, job, now)
        self._placements = self.store.placements()  # read before the snapshot the placements are decided on
        jobs = self.store.list_jobs(states=ENGINE_STATES, limit=100_000)
        # forget the attempts no longer latest, before this tick's launches: one placed and launched below (its
        # job read queued here) is counted from its launch on, not by the wall clock at its first accrual
        latest = {attempt_id(j.id, j.attempts) for j in jobs}
        for stale in [a for a in self._accrued if a not in latest]:
            del self._accrued[stale]
        self._stops_sent &= latest
        self._past_length_said &= latest
        self._deadline_said &= {j.id for j in jobs}
        for stale in [a for a in self._attempt_seen if a not in latest]:
            del self._attempt_seen[stale]
        live_jobs = {j.id for j in jobs}
        for stale in [j for j in self._progress_seen if j not in live_jobs]:
            del self._progress_seen[stale]
        for stale in [a for a in self._limits_written if a not in latest]:
            del self._limits_written[stale]
        active = [j for j in jobs if j.state.is_active]
        availability = getattr(self.launcher, "availability", dict)()
        mk = market(self.settings, active, availability, now=now)
        queued_attempts: dict[str, list[Attempt]] = {}
        queued = self._drivable([j for j in jobs if j.state is JobState.QUEUED], read=queued_attempts)
        for job in queued:
            self._policy(job.id)
        decisions = schedule_now(queued, mk, self.settings, self.launcher, now=now, policies=self.policies,
                                 attempts_of=lambda job_id: queued_attempts.get(job_id, ()))
        for decision in decisions:  # 2. place the queue
            self._guard(self._apply_schedule, decision, now)
        for job in self._drivable(self.store.list_jobs(states=[JobState.PLACED.value], limit=100_000)):  # 3. launch
            self._guard(self._launch, job, now)
        live = {j.id for j in jobs}
        for job_id in [k for k in self.policies if k not in live]:
            del self.policies[job_id]
        sweep = getattr(self.launcher, "sweep", None)
        if sweep is not None and now - self._last_sweep >= SWEEP_SECONDS:  # 4. no idle cloud GPU left behind
            self._last_sweep = now
            self._guard(self._sweep, sweep)
        self._workdir_housekeeping(jobs, now)  # 5. no workdir, nor a gone job's files, left behind
        self.last_tick_seconds = time.perf_counter() - started
        self.tick_durations.add(self.last_tick_seconds)

    def _sweep(self, sweep) -> None:
        """Hand the launcher's sweep the attempts whose clusters must stay: the latest of each job that may hold
        one. Read after this tick's launches and after the launcher has listed its clusters (it calls the read),
        so that a cluster launched since the tick began, here or by another broker, is kept. A queued or placed job's latest attempt has ended (its job was sent back to
        the queue once it had), so its cluster goes — one a cancelled launch made after all, say — unless a
        newer broker holds that attempt in a state of its own (``_left_alone``)."""
        foreign = {job_id for job_id, _ in self._left_alone}
        waiting = (JobState.QUEUED, JobState.PLACED)
        sweep(lambda: {f"{j.id}-a{j.attempts}" for j in self.store.list_jobs(states=ENGINE_STATES, limit=100_000)
                       if j.attempts and (j.state not in waiting or j.id in foreign)})

    def _stop_superseded(self, now: float) -> None:
        """Stop every run on this host (the launcher's ``live_attempts``) whose attempt the store has ended or moved
        past, and say what it ran since. Such a run is one another broker recorded lost while the broker that
        launched it was silent (``owner_silent``: its host taken for gone, its job resumed as a next attempt
        elsewhere), found alive when that broker comes back (or its store does): an engine monitors only a job's
        latest attempt, so nothing else stops it — it ran to its own limit, set for the whole budget, beside its
        job's next attempt (on a pool, on slots handed to another job). Stopped with no grace period: its work is
        not kept (the job resumed from its checkpoint; a report of a superseded attempt is refused). What it ran
        after it was recorded is billed to it within the budget and said in a ``superseded_run`` event, with what
        is beyond the budget (:meth:`_bill_superseded`). A run seen live at the last look and recorded lost that
        has since ended by itself is billed up to its end the same way. The store is read after the listing, so
        an attempt launched meanwhile is seen recorded; a job the store does not hold, or in a state a newer broker
        set, is left alone. A cloud attempt's cluster goes by the sweep (:meth:`_sweep`), which keeps only latest
        attempts."""
        live = live_attempts(self.launcher)
        ended = self._live_seen.difference(live)
        ids = {a: m.group("job") for a in [*live, *sorted(ended)] if (m := ATTEMPT_ID.fullmatch(a))}
        stored = self.store.attempts_of(sorted(set(ids.values()))) if ids else {}
        seen = set()
        for attempt_id, job_id in ids.items():
            attempts = stored.get(job_id) or []
            attempt = next((a for a in attempts if a.id == attempt_id), None)
            if attempt is None or any(a.foreign for a in attempts) or (
                    attempt.launched_in and attempt.launched_in not in self.domains):
                continue  # not this broker's to judge: a job the store does not hold, a newer broker's state
            over = attempt.state.is_final or attempt.n < max(a.n for a in attempts)
            if attempt_id in ended:
                stopped = attempt_id in self._superseded_sent  # its tail since this engine billed it: the grace
                if over and (attempt.stop_reason == "owner_silent" or stopped):  # ended since it was recorded lost
                    end = self.launcher.status(attempt_id).ended_at  # None: its end unknown (no exit recorded)
                    if end is not None:
                        self._guard(self._bill_superseded, job_id, attempt_id, now, end, False)
            elif over:
                if attempt_id not in self._superseded_sent:  # asked once: a stop already under way keeps its grace
                    self._guard(self._end_superseded, job_id, attempt_id, now)
                    self._superseded_sent.add(attempt_id)
                seen.add(attempt_id)
            else:
                seen.add(attempt_id)
        self._live_seen = seen
        self._superseded_sent &= seen

    def _end_superseded(self, job_id: str, attempt_id: str, now: float) -> None:
        """Bill a live run of an attempt the store has ended or moved past (:meth:`_stop_superseded`) up to now,
        then stop it at once. Billed first, so that an engine stopped in between finds it running again and bills
        it then; a bill that cannot be committed (the job changing too fast) does not hold the stop up."""
        try:
            self._bill_superseded(job_id, attempt_id, now, now, True)
        except VersionConflict:
            log.warning("attempt %s: what it ran after its job moved on was not billed (the job kept changing)",
                        attempt_id)
        log.warning("attempt %s is still running on this host, but its job has ended it or moved on: stopped",
                    attempt_id)
        self.launcher.stop(attempt_id, grace_seconds=0, reason=SUPERSEDED_STOP)

    def _bill_superseded(self, job_id: str, attempt_id: str, now: float, until: float, stopping: bool) -> None:
        """Bill the run of ``attempt_id`` up to ``until`` (its end, or now for one being stopped; on the attempt's
        timeline: the clock of this host, which launched it) where its record stops short of that: the more it
        ran goes into its cost as far as the budget holds beside the job's other attempts (the recorded spend
        never exceeds the budget), and a ``superseded_run`` event says how much it ran on and what of that is
        beyond the budget (``beyond_budget``), as the engine says a run past its budget elsewhere. Nothing is
        written when its record already covers it. Compare-and-set: read again after a conflict (a few times)."""
        for tries in range(3):
            job = self.store.get_job(job_id)
            attempts = self.store.attempts(job_id)
            attempt = next((a for a in attempts if a.id == attempt_id), None)
            if job is None or attempt is None or job.foreign or any(a.foreign for a in attempts):
                return
            full = accrue(replace(attempt, ended_at=None), until)
            others = sum(a.cost for a in attempts if a.id != attempt_id)
            counted = max(attempt.cost, budget_rules.capped(full.cost, others=others, budget=job.budget))
            ran, beyond = full.cost - attempt.cost, full.cost - counted
            if ran <= 0:
                return
            latest = max(a.n for a in attempts)
            after = f" and its job moved on to attempt {latest}" if latest > attempt.n else ""
            said = (f"attempt {attempt.n} was still running on this host after it was recorded "
                    f"{attempt.state.value}{after} (the broker that launched it had been away): "
                    + ("stopped now, with no grace period unless a stop was already under way (what it did since is "
                       "not kept); it ran " if stopping else "it ran until it ended, ")
                    + f"{fmt(ran)} more at {fmt_rate(attempt.price_per_hour)}/h")
            if beyond:
                said += (f"; {fmt(beyond)} of that is beyond the budget, said here and not counted in its spend"
                         + (f" ({fmt(counted - attempt.cost)} counted)" if counted > attempt.cost else ""))
            else:
                said += ", counted in its spend"
            note = self._note(job, "superseded_run", said, now, {
                "attempt_id": attempt_id, "attempt": attempt.n, "state": attempt.state.value, "stopped": stopping,
                "cost": ran, "counted": counted - attempt.cost, "beyond_budget": beyond, "budget": job.budget,
                "spent": others + counted})
            billed = replace(attempt, cost=counted, billed_until=full.billed_until)
            try:
                # an ended job's last change stays its end (what "ended last" and the cost report read)
                keep = {"updated_at": job.updated_at} if job.state.is_final else {}
                self._commit(job, None, job.reason, now, records=(billed,), notes=(note,), spent=others + counted,
                             **keep)
                return
            except VersionConflict:
                if tries == 2:
                    raise

    def run_until_idle(self, *, timeout: float = 60.0, interval: float = 0.1) -> None:
        """Tick until no job is in an engine state (tests, ``broker worker --burst``)."""
        deadline = time.monotonic() + timeout
        while True:
            self.tick()
            if not self.store.list_jobs(states=ENGINE_STATES, limit=1):
                return
            if time.monotonic() > deadline:
                raise TimeoutError("jobs still active after the timeout")
            time.sleep(interval)

    def _beat(self, now: float) -> None:
        """Every few seconds: say this engine is alive, and read when the others last said so.

        A beat's value is the time on its writer's clock, which may be behind or ahead of this one's (another
        host's, or stepped since): so this engine counts an engine's silence from when *it* saw that engine's
        beat last change, on its own clock (``_beat_seen``), never by comparing the value with its own time.
        Its own clock stepping back does not stop its beats either."""
        elapsed = now - self._last_beat
        if 0 <= elapsed < min(BEAT_SECONDS, self.settings.owner_timeout_seconds / 4):
            return
        for domain in sorted(self.domains):
            self.store.beat(domain, now)
        self._measure_clock()
        for domain, value in self.store.beats().items():
            if self._beat_seen.get(domain, (None,))[0] != value:
                self._beat_seen[domain] = (value, now)
        if not 0 <= elapsed <= self.settings.owner_timeout_seconds / 2:
            # the first beat, or the first after this engine lost the store for a while (an outage every
            # engine shared, so the others could not beat either), or after its clock stepped: their silence
            # is counted from now
            self._watching_since = now
        self._last_beat = now

    def beat_ages(self) -> dict[str, float]:
        """Each engine domain's seconds since this engine saw its beat change, on this engine's clock (``/metrics``:
        a beat's value is its writer's clock, which a dead host's may hold hours ahead)."""
        now = self.clock()
        return {domain: max(now - seen, 0.0) for domain, (_, seen) in self._beat_seen.items()}

    def _progress_seen_at(self, job: Job, now: float) -> float:
        """When this engine first read the job's latest progress report, on its own clock (as beats are judged,
        ``_beat_seen``): the report's ``at`` only tells one report from the next. ``-inf``: it reported none."""
        value = job.progress.get("at") if job.progress else None
        if value is None:
            return float("-inf")
        seen = self._progress_seen.get(job.id)
        if seen is None or seen[0] != value:
            seen = self._progress_seen[job.id] = (value, now)
        return seen[1]

    def _measure_clock(self) -> None:
        """Measure this host's clock against the store's (a store shared by several hosts: Redis ``TIME``), at each
        beat, and say in the log when it is off: past :data:`CLOCK_TOLERANCE_SECONDS` a warning, beyond
        ``max_clock_offset_seconds`` an error (the engine stops ticking: :meth:`clock_refusal`), each when it starts
        and at most once every :data:`OUTAGE_REPEAT_SECONDS` while it lasts; and once when it is back under."""
        self.clock_offset = offset = clock_offset(self.store, self.host_clock)
        if offset is None:
            return
        limit = self.settings.max_clock_offset_seconds
        level = "refused" if abs(offset) > limit else "off" if abs(offset) > CLOCK_TOLERANCE_SECONDS else None
        said, at = self._clock_said or (None, float("-inf"))
        if level is None:
            if said is not None:
                self._clock_said = None
                log.warning("clock: this host's clock is back within %g s of the store's (%s it)%s",
                            CLOCK_TOLERANCE_SECONDS, _offset_words(offset),
                            ": the engine ticks again" if said == "refused" else "")
            return
        ticked = self.monotonic()
        if level == said and ticked - at < OUTAGE_REPEAT_SECONDS:
            return
        self._clock_said = (level, ticked)
        if level == "refused":
            log.error("clock: %s", self.clock_refusal())
        else:
            log.warning("clock: this host's clock is %s the store's (Redis TIME)%s: brokers sharing a store need "
                        "synced clocks (NTP: chrony or systemd-timesyncd); beyond BROKER_MAX_CLOCK_OFFSET_S (%g s) "
                        "this broker's engine stops ticking", _offset_words(offset),
                        ", within BROKER_MAX_CLOCK_OFFSET_S again: the engine ticks again" if said == "refused" else "",
                        limit)

    def clock_refusal(self) -> str | None:
        """Why this engine does not tick: this host's clock is further from the store's than
        ``max_clock_offset_seconds``, so every time it would stamp — a deadline passed, a place in the queue, a budget
        billed up to now — would be off by as much; ``None`` while it is within it (or the store has no clock). It
        still beats, so that no other broker takes its runs over; it ticks again by itself once the offset is back
        under the limit, billing its runs for the time between on the monotonic clock."""
        return clock_refusal_words(self.clock_offset, self.settings.max_clock_offset_seconds)

    def _owner_silence(self, job: Job, attempt: Attempt, now: float) -> str | None:
        """For an attempt launched in another launcher's view (another host's processes, another
        SkyPilot state), which this engine cannot see: None while the engine that launched it may still
        be watching it — it beat within ``owner_timeout_seconds``, or the attempt is younger than that,
        or the job itself reported progress within it, or this engine has not itself been reading the
        beats that long (it just started, or the store was down: nobody could beat) — else why it
        counts as lost."""
        timeout = self.settings.owner_timeout_seconds
        owner = attempt.launched_in
        # every time here is this engine's own: when it saw the owner's beat, the attempt, the job's progress change
        # (``created_at`` and a report's ``at`` are other brokers' clocks: one 2 h ahead held its jobs 2 h after death)
        last = max(self._beat_seen.get(owner, (None, float("-inf")))[1], self._attempt_seen.setdefault(attempt.id, now),
                   self._progress_seen_at(job, now), self._watching_since)
        if now - last < timeout:
            return None
        return (f"the broker that launched it ({owner}) and the job have been silent for {int(now - last)} s, and "
                f"its attempts cannot be seen from here")

    def _unclaimed(self, job: Job, attempt: Attempt, status: AttemptStatus,
                   now: float) -> tuple[Attempt, AttemptStatus | None]:
        """An attempt that names no launcher view (``launched_in`` empty: recorded by a broker older than that
        field). One this engine's launcher can see is claimed: its view is written with this tick's commit, so that
        the other engines sharing the store leave it alone from then on. One it cannot see may run on another
        host whose engine has not claimed it yet: while any other engine beats, it is left alone (``None``) until
        it has stayed unclaimed, and the job silent, for ``owner_timeout_seconds`` since this engine first saw it
        so — then it is lost, as before. With no other engine beating (one broker), it is judged at once."""
        if status.phase is not Phase.GONE:
            self._unclaimed_since.pop(attempt.id, None)
            return replace(attempt, launched_in=domain_for(self.launcher, job.placement)), status
        timeout = self.settings.owner_timeout_seconds
        others = any(domain not in self.domains and now - seen < timeout
                     for domain, (_, seen) in self._beat_seen.items())
        first = self._unclaimed_since.setdefault(attempt.id, now)
        last = max(first, self._progress_seen_at(job, now), self._watching_since)
        if others and now - last < timeout:
            return attempt, None
        self._unclaimed_since.pop(attempt.id, None)
        return attempt, status

    def _drivable(self, jobs: list[Job], read: dict[str, list[Attempt]] | None = None) -> list[Job]:
        """The queued or placed jobs this version may place and launch: not one with an attempt in a state a newer
        broker sharing the store set (it may still be live: placing the job again here could run it twice).
        ``read``, if given, receives the attempts read (by job id; a job with none is left out), so that the
        spot policy's input is built from them rather than from a second read of each job's attempts."""
        ids = [j.id for j in jobs if j.attempts]
        attempts = self.store.attempts_of(ids) if ids else {}
        if read is not None:
            read.update(attempts)
        return [j for j in jobs if not self._foreign(j, attempts.get(j.id, ()))]

    def _foreign(self, job: Job, attempts) -> bool:
        """Whether the job or one of its attempts is in a state this version does not know (a newer broker's, in a
        rolling upgrade): the engine leaves such a job alone — that broker drives it — and says so once."""
        state = job.state if job.foreign else next((a.state for a in attempts if a.foreign), None)
        if state is None:
            return False
        if (job.id, state.value) not in self._left_alone:
            self._left_alone.add((job.id, state.value))
            what = "it is" if job.foreign else "an attempt of it is"
            log.warning("job %s left alone: %s %s, a state this broker's version does not know (a newer broker "
                        "sharing the store set it, and drives it)", job.id, what, state.value)
        return True

    def _policy(self, job_id: str):
        """The job's own spot policy object (it keeps what it has observed of spot availability)."""
        policy = self.policies.get(job_id)
        if policy is None:
            policy = self.policies[job_id] = RealTime(make_policy())
        return policy

    def _guard(self, step: Callable, *args) -> None:
        """Run one job's step: a conflict or a failure of that job's is logged and the tick goes on. A store
        that stopped answering ends the tick (:meth:`tick_safely` says so in one line): it is gone for every
        job, and each step after would fail the same way, with a traceback each."""
        try:
            step(*args)
        except VersionConflict:
            log.debug("another writer changed the job first; will look again next tick")
        except StoreUnavailable:
            raise
        except Exception:  # one bad job must not stop the loop for everyone
            log.exception("engine step %s failed", getattr(step, "__name__", step))

    def _guard_apart(self, step: Callable, *args) -> None:
        """:meth:`_guard` for work beside the ticks (in a thread of its own): a store that does not answer is
        a line in the log, the next round tries again."""
        try:
            self._guard(step, *args)
        except StoreUnavailable as exc:
            log.warning("engine %s skipped: %s", getattr(step, "__name__", step), exc)

    # -- apply ---------------------------------------------------------------------------------

    def _commit(self, job: Job, event: JobEvent | None, reason: str, now: float, *,
                records: tuple[Attempt, ...] = (), data: dict | None = None, notes: tuple[Event, ...] = (),
                then: tuple[JobEvent, str] | None = None, placements: int | None = None,
                reason_shown: str | None = None, **fields) -> Job:
        """One change of the job, its attempts and events, committed together. ``then``: a second event (and its
        reason) that follows ``event`` in the same change. ``placements``: for a placement, the count of
        placements read before the snapshot it was decided on (:attr:`Change.expected_placements`).
        ``reason_shown``: the job's reason, changed without an event of its own (an event's reason wins)."""
        events = list(notes)
        new = replace(job, **{"updated_at": now, **fields})
        if reason_shown is not None:
            new = replace(new, reason=reason_shown)
        if event is not None:
            t = apply(job.state, event)
            new = replace(new, state=t.to_state, reason=reason)
            if event is JobEvent.RECOVER:
                # back in the queue after running: how long it has waited counts from here (not after a placement
                # undone or a launch refused, which leave it waiting as it was: a job refused at every launch is stuck)
                new = replace(new, queued_at=now)
            events.append(event_for(new, event, t.to_state, time=now, reason=reason, actor=self.actor,
                                    from_state=job.state, data=data))
            if then is not None:
                before = new.state
                t = apply(before, then[0])
                new = replace(new, state=t.to_state, reason=then[1])
                events.append(event_for(new, then[0], t.to_state, time=now, reason=then[1], actor=self.actor,
                                        from_state=before))
        stored = self.store.commit(Change(job=new, expected_version=job.version, events=events, attempts=records,
                                          expected_placements=placements))
        if self.on_event:
            for e in events:
                try:
                    self.on_event(e, stored)
                except Exception:  # notifications never block or break the engine
                    log.exception("event hook failed")
        return stored

    def _note(self, job: Job, name: str, reason: str, now: float, data: dict | None = None) -> Event:
        return note_event(job, name, reason, time=now, actor=self.actor, data=data)

    def _deadline_passed(self, job: Job, now: float, words: Callable[[], str]) -> tuple[Event, ...]:
        """The ``deadline_passed`` note (``words``) of a job not ended whose deadline has passed, once per job —
        whichever broker saw it first, and across restarts (its events are read until they hold it; a note whose
        commit failed is made again at the next tick). Nothing said it: a job queued past its deadline kept the
        reason of what it waited for, and ran late with no word that it had missed it."""
        if job.deadline is None or now < job.deadline or job.id in self._deadline_said:
            return ()
        if any(e.event == DEADLINE_PASSED for e in self.store.events(job.id)):
            self._deadline_said.add(job.id)
            return ()
        return (self._note(job, DEADLINE_PASSED, words(), now, {"deadline": iso(job.deadline),
                                                              "state": job.state.value}),)

    def _apply_schedule(self, decision: Place | Wait, now: float) -> None:
        job = decision.job
        notes = () if isinstance(decision, Wait) and decision.budget_spent else \
            self._deadline_passed(job, now, lambda: _passed_in_queue(decision))  # words made only when said
        if isinstance(decision, Wait):
            if decision.budget_spent:
                self._commit(job, JobEvent.STOP_BUDGET, f"stopped: {decision.reason}; raise the budget to resume", now,
                             diagnosis=Diagnosis("budget_stop", "Stopped at its budget.",
                                                 "Raise the budget and resume to continue.", infrastructure=True).to_dict())
                return
            if notes:  # with the job's reason, through the event hook (Slack)
                self._commit(job, None, "", now, notes=notes, reason_shown=decision.reason)
            elif job.reason != decision.reason:
                self.store.commit(Change(job=replace(job, reason=decision.reason, updated_at=now),
                                         expected_version=job.version))
            return
        # fenced: a placement another engine committed since this tick's snapshot (capacity this one counted
        # free) makes this write conflict, and the job is placed again on the next tick's snapshot
        self._commit(job, JobEvent.PLACE, decision.reason, now, placement=decision.placement,
                     slots=list(decision.slots), data={"placement": decision.placement},
                     placements=self._placements, notes=notes)
        self._placements += 1

    def _launch(self, job: Job, now: float) -> None:
        n = job.attempts + 1
        attempt = Attempt(
            id=attempt_id(job.id, n), job_id=job.id, n=n, state=AttemptState.LAUNCHING,
            launcher=self.launcher.name, placement=dict(job.placement),
            price_per_hour=int(job.placement.get("price_per_hour", 0)), created_at=now, slots=list(job.slots),
            resume_from=job.last_checkpoint.get("uri") or None,
            launched_in=domain_for(self.launcher, job.placement), workdir=workdir_seen(job),
        )
        earlier = self.store.attempts(job.id)
        attempt = replace(attempt, limit_at=self._limit_at(job, attempt, earlier))
        where = job.placement.get("zone") or job.placement.get("instance_type", "?")
        resume = f", resuming from step {job.last_checkpoint.get('step')}" if attempt.resume_from else ""
        changed = workdir_changed(job, attempt.workdir, earlier)  # a host workdir edited since the last attempt
        reason = f"launching attempt {n} on {job.placement.get('tier')} {where}{resume}" + \
            (f"; {changed}" if changed else "")
        job = self._commit(job, JobEvent.LAUNCH, reason, now, records=(attempt,),
                           data={"attempt_id": attempt.id, "resume_from": attempt.resume_from,
                                 **({"workdir_changed": changed} if changed else {})}, attempts=n,
                           job_token_version=job_token_version(self.settings),  # what a report's token must be
                           job_token_key=job_token_key(self.settings))  # and the key it is made from
        self._accrued[attempt.id] = (None, attempt.created_at, self.monotonic())
        self._start(job, attempt, now)

    def _start(self, job: Job, attempt: Attempt, now: float) -> None:
        try:  # the secrets, sealed in the store, are opened for the launcher's request only: never stored so
            task = open_task(job.spec, self.settings, job.id)
        except Unsealable as exc:
            self._unsealable(job, attempt, now, str(exc))
            return
        try:
            files = self._files(job, attempt)
            if files is _PREPARING:
                return  # launched by a later tick, once unpacked (the launcher has no such attempt till then)
            workdir, mounts = files
            if now > attempt.created_at and attempt.billed_until is None:
                job, attempt = self._billed_from_launch(job, attempt, now)
            primary, others = report_urls(self.own_url, self.settings.data_dir)
            request = launch_request(replace(job, spec=task), attempt, public_url=primary or self.settings.public_url,
                                     fallback_urls=others, stop_grace_seconds=self.settings.stop_grace_seconds,
                                     job_token=job_token(self.settings, job.id), now=now, workdir=workdir,
                                     mounts=mounts,
                                     run_as=run_as_for(job, self.settings.pools, self.settings.checkpoint_root))
            self.launcher.launch(request)
            self._stop_if_moved_on(attempt)
        except LaunchError as exc:
            # a launcher's (or SkyPilot's) message is kept and shown: never with a secret's value in it
            exc = LaunchError(redact(str(exc), secret_values(task)), permanent=exc.permanent, scope=exc.scope)
            failed = replace(attempt, state=AttemptState.FAILED, ended_at=now, reason=str(exc))
            if exc.permanent:  # the task itself cannot run: another placement would be refused the same way
                refused = Diagnosis("launch_refused", f"The launcher cannot run this task: {str(exc).rstrip('.')}.",
                                    "Fix what it names (the task, or the deployment in front of the launcher), "
                                    "then resume it with --force, or submit it again.", infrastructure=False)
                self._commit(job, JobEvent.FAIL, refused.text, now, records=(failed,), placement={}, slots=[],
                             diagnosis={**refused.to_dict(), "attempt": attempt.n})
            else:  # placed again after a backoff, not at the next tick (a new attempt each time)
                n = job.launch_failures + 1
                retry_at = now + launch_backoff(n)
                again = f"; tries again at {iso(retry_at)}" + (f" ({n} refused in a row)" if n > 1 else "")
                # what the refusal rules out (no capacity in the zone, no access to the cloud) is blocked for the job
                # for a cool-down, as a zone is after a preemption: placed again at the same place, it was refused
                # there again and again while another zone, cloud or a free pool could run it
                blocked = {}
                ruled_out = refused_place(attempt, exc.scope)
                if ruled_out is not None:
                    key, words = ruled_out
                    cooldown = self.settings.zone_cooldown_seconds
                    blocked = {"blocked_zones": block_zone(job, key, now=now, cooldown=cooldown)}
                    again = f"; {words} is left out for this job until {iso(now + cooldown)}{again}"
                self._commit(job, JobEvent.LAUNCH_FAILED, f"launch failed: {str(exc).rstrip('.')}{again}", now,
                             records=(failed,), placement={}, slots=[], launch_failures=n,
                             launches_failed=job.launches_failed + 1, launch_retry_at=retry_at, **blocked)
            self._attempt_ended(job, failed)

    def _billed_from_launch(self, job: Job, attempt: Attempt, now: float) -> tuple[Job, Attempt]:
        """An attempt launched later than it was recorded — by a broker started again after it stopped between
        the record and the launch call, or once its files were unpacked — and never billed: nothing ran, nor
        was anything provisioned, since the record (the launcher has nothing of it: it reads gone), and
        clouds bill from the launch. So its billing, and its budget's limit with it, start now; committed
        (compare-and-set on the job's version) before the launch call, so that of two brokers launching it
        again one launches — either way, launching is idempotent per attempt id."""
        moved = replace(attempt, created_at=now)
        moved = replace(moved, limit_at=self._limit_at(job, moved, self.store.attempts(job.id)))
        job = self._commit(job, None, job.reason, now, records=(moved,))
        self._accrued[moved.id] = (None, moved.created_at, self.monotonic())
        return job, moved

    def _stop_if_moved_on(self, attempt: Attempt) -> None:
        """Just after the launch call: stop ``attempt`` if its job no longer waits for it to run — cancelled (or
        stopped at its budget) since this engine read it ``launching``, and maybe already recorded ended by
        another broker that looked for the attempt before this call started it. Nobody monitors a final job:
        the run would go on until its budget's limit. Read after the call, so a cancel this read misses is
        committed after the run began, and whoever monitors the job next finds it running and stops it."""
        job = self.store.get_job(attempt.job_id)
        if job is not None and job.attempts == attempt.n and job.state in (JobState.LAUNCHING, JobState.RUNNING):
            return
        state = job.state if job is not None else JobState.CANCELLED
        reason = "budget" if state in (JobState.STOPPING, JobState.STOPPED_BUDGET) else \
            "cancelled" if state in (JobState.CANCELLING, JobState.CANCELLED) else "stopped"
        log.info("attempt %s stopped as soon as launched: its job is %s", attempt.id, state.value)
        self.launcher.stop(attempt.id, grace_seconds=self.settings.stop_grace_seconds, reason=reason)

    def _unsealable(self, job: Job, attempt: Attempt, now: float, why: str) -> None:
        """A job whose secrets this broker cannot open is not launched without them: the attempt fails
        before any launch, and the job with it, saying which setting to fix; it resumes (no force: not
        the job's fault) once the key is right, its secrets still sealed in the store."""
        diagnosis = Diagnosis("secrets_unsealable", f"Not launched: the broker cannot open the job's secrets: "
                              f"{why.rstrip('.')}.", "Its secrets stay sealed in the store: nothing of the job is lost.", infrastructure=True)
        failed = replace(attempt, state=AttemptState.FAILED, ended_at=now, reason=diagnosis.sentence)
        log.warning("job %s not launched: %s", job.id, why)
        self._commit(job, JobEvent.FAIL, diagnosis.text, now, records=(failed,), placement={}, slots=[],
                     diagnosis={**diagnosis.to_dict(), "attempt": attempt.n})

    def _workdir_store(self):
        if self._workdirs is None:
            from broker.workdir_store import WorkdirStore

            self._workdirs = WorkdirStore(self.settings)
        return self._workdirs

    def _files(self, job: Job, attempt: Attempt) -> tuple[str | None, dict[str, str]] | object:
        """The attempt's own unpacked copies of the job's uploaded workdir (``broker.workdir``) and file_mounts
        sources (``broker.file_mounts``), if it has any: (the workdir, destination → its copy; a single file:
        the file, under a name of the broker's, :meth:`WorkdirStore.mount_file`). Every attempt, a resume too,
        starts from the same files. Fetched and unpacked in a thread beside the ticks — a 100 MiB pack takes
        seconds, which no other job's tick should wait for — so the first calls answer ``_PREPARING``; the job
        stays ``launching`` meanwhile, and the tick that finds
        it done launches (a broker that stops meanwhile leaves a half-made directory the sweep removes,
        and the next one starts again). A pack gone from the store fails the job (no placement can help);
        a store that does not answer sends it back to the queue."""
        section = job.spec.get("broker") or {}
        digest = section.get("workdir")
        mounts = sorted((section.get("file_mounts") or {}).items())  # by destination: the n of mounts/<attempt>/<n>
        if not digest and not mounts:
            return None, {}
        from broker.workdir import PackError, parse_digest, parse_mount

        store = self._workdir_store()
        if attempt.id not in self._preparing and (ready := _ready(store, attempt.id, digest, mounts)) is not None:
            return ready
        future = self._preparing.get(attempt.id)
        if future is None:
            try:
                hex_digest = parse_digest(digest) if digest else None
            except PackError as exc:
                raise LaunchError(f"its workdir {digest} cannot be unpacked: {exc}", permanent=True) from None
            try:
                wanted = [(dest, value, *parse_mount(value)) for dest, value in mounts]
            except PackError as exc:
                raise LaunchError(f"its file_mounts cannot be unpacked: {exc}", permanent=True) from None
            self._preparing[attempt.id] = _background(self._unpack, store, hex_digest, digest, wanted, attempt.id)
            return _PREPARING
        if not future.done():
            return _PREPARING
        del self._preparing[attempt.id]
        return future.result()  # or the LaunchError saying which pack and why

    def _unpack(self, store, hex_digest: str | None, digest: str | None, mounts: list, attempt_id: str):
        from broker.workdir import PackError
        from broker.workdir_store import PackMissing

        with self._unpacks:
            started = time.perf_counter()
            items = [("workdir", digest, hex_digest, None, None)] if hex_digest else []
            items += [(f"file_mounts {dest}", value, h, name, n) for n, (dest, value, h, name) in enumerate(mounts)]
            workdir, copies = None, {}
            for what, value, h, name, n in items:
                try:
                    if n is None:
                        workdir = str(store.attempt_dir(h, attempt_id))
                        continue
                    path = store.mount_file(h, attempt_id, n, name) if name else store.mount_dir(h, attempt_id, n)
                    copies[mounts[n][0]] = str(path)
                except (PackMissing, PackError) as exc:
                    raise LaunchError(f"its {what} {value} cannot be unpacked: {exc}", permanent=True) from None
                except OSError as exc:
                    raise LaunchError(f"its {what} {value} could not be fetched from {store.root}: {exc}") from None
            log.info("workdir of %s ready in %.1f s", attempt_id, time.perf_counter() - started)
            return workdir, copies

    def _attempt_ended(self, job: Job, attempt: Attempt) -> None:
        """An attempt just recorded final: its unpacked workdir and file_mounts go, its clone of a git workdir, and
        the folder a job run as another user was given (beside the ticks; kept while a process still runs in them,
        and then left to the sweep)."""
        from broker.workdir import packs_of

        given = run_as_for(replace(job, placement=attempt.placement), self.settings.pools, self.settings.checkpoint_root) is not None
        cloned = isinstance(job.spec.get("workdir"), dict)  # a local launcher's clone, in its jobs/<attempt>/work
        if attempt.state.is_final and (given or cloned or packs_of(job.spec.get("broker"))) \
                and self._workdir_store().has_local(attempt.id):
            _background(self._workdir_store().remove_attempt_dir, attempt.id)

    def _workdir_housekeeping(self, jobs: list[Job], now: float) -> None:
        """Every ``SWEEP_SECONDS``, beside the ticks, remove this host's unpacked workdirs of attempts that
        are final or unknown (:meth:`sweep_workdirs`); every ``WORKDIR_GC_SECONDS`` (and at start), collect the
        object store's packs no job refers to (:meth:`collect_workdirs`) and the launcher's files of attempts
        whose job is gone (:meth:`sweep_attempt_files`). One at a time."""
        launching = {f"{j.id}-a{j.attempts + (j.state is JobState.PLACED)}" for j in jobs
                     if j.state in (JobState.PLACED, JobState.LAUNCHING)}  # read before this tick launched
        # cancelled while it was unpacked: forgotten (the sweep removes its directory) once two ticks in a row found
        # it not launching — ``jobs`` was read before this tick placed and launched, so an unpack this tick started
        # (and, a small pack, finished) is missing from it once; forgetting it then made the next tick launch it as
        # if a broker had stopped between its record and its launch, and say so in the log
        missing = {a for a, f in self._preparing.items() if a not in launching and f.done()}
        for attempt_id in missing & self._preparing_missing:
            del self._preparing[attempt_id]
        self._preparing_missing = missing - self._preparing_missing
        if self._housekeeping is not None and not self._housekeeping.done():
            return
        if now - self._last_collect >= WORKDIR_GC_SECONDS:
            self._last_collect = self._last_workdir_sweep = now
            self._housekeeping = _background(self._guard_apart, self._housekeep, now)
        elif now - self._last_workdir_sweep >= SWEEP_SECONDS:
            self._last_workdir_sweep = now
            self._housekeeping = _background(self._guard_apart, self.sweep_workdirs)

    def _housekeep(self, now: float) -> None:
        """The hourly round, each step on its own: one that fails (its store or object store not answering) does
        not hold up the others."""
        self._guard_apart(self.sweep_workdirs)
        self._guard_apart(self.collect_workdirs, now)
        if self.settings.job_retention_days is not None:
            # only where jobs are pruned: without it a job gone from the store was never deleted, but the store
            # emptied or replaced (a Redis that lost its data, another store_url), and its logs are kept
            self._guard_apart(self.sweep_attempt_files)

    def sweep_attempt_files(self) -> list[str]:
        """Remove the files the launcher keeps on this host for attempts whose job the store no longer holds —
        pruned by the retention policy (``broker/retention.py``), or otherwise gone: the local launcher's run
        folders, SkyPilot's state files (``launchers.base.sweep_attempt_files``; a launcher keeping none is
        skipped). A job in the store keeps them, whatever its state (``broker logs`` reads an old attempt's log; a
        failed job may be resumed), and so does a process of this host still holding them; a broker removes
        files in its own data dir only. Returns the ids whose files were removed."""
        return sweep_attempt_files(self.launcher, self._attempts_held, limit=ATTEMPT_FILES_LIMIT)

    def _attempts_held(self, attempt_ids: list[str]) -> set[str]:
        """Of ``attempt_ids``, those whose job the store holds, read from its index in batches (``existing``):
        a job's attempts are recorded with it before any launcher makes files for them, and deleted with it. A
        name that is not an attempt id of this broker's is kept (it cannot say whose it is)."""
        jobs = {a: m.group("job") for a in attempt_ids if (m := ATTEMPT_ID.fullmatch(a))}
        held = self.store.existing(sorted(set(jobs.values()))) if jobs else set()
        return {a for a in attempt_ids if a not in jobs or jobs[a] in held}

    def sweep_workdirs(self) -> list[str]:
        """Remove this host's unpacked workdirs whose attempt is final or unknown to the store (a broker
        stopped before it removed one, an attempt recorded final by another broker); returns their ids.
        The directories are listed before the store is read: an attempt created in between is kept."""
        store = self._workdir_store()
        present = store.local_attempts()
        jobs = {a.rsplit("-a", 1)[0] for a in present}
        keep = {a.id for atts in self.store.attempts_of(sorted(jobs)).values() for a in atts
                if not a.state.is_final} if jobs else set()
        return store.sweep_local(present, keep)

    def collect_workdirs(self, now: float, *, wall: float | None = None):
        """Collect the uploaded packs no job refers to (:meth:`WorkdirStore.collect`): a job not final, or
        final and updated within ``workdir_retention_seconds`` of ``now`` (the engine's clock), refers to
        its pack (:class:`PackReferences`: a collection reads what changed since the one before); the packs'
        ages are read against ``wall`` (the host's clock: the store's times)."""
        referenced = self._pack_refs.read(now)
        if referenced is None:
            log.warning("workdir packs not collected: more than %d jobs are running or ended within "
                        "workdir_retention_seconds, and a pack one of them names could be taken", GC_JOB_LIMIT)
            return None
        try:
            return self._workdir_store().collect(referenced, now=time.time() if wall is None else wall,
                                                 grace=self.settings.workdir_grace_seconds)
        except OSError as exc:
            log.warning("workdir packs not collected this time: the store (%s) did not answer: %s",
                        self._workdir_store().root, exc)
            return None

    def _monitor(self, job: Job, now: float, *, again: bool = False) -> None:
        """Look at the job's latest attempt, bill it, decide what its status calls for, commit that, and then
        send the stop it decided, if any. ``again``: the job was read again after a stop decided on it could
        not be committed (:class:`VersionConflict`: someone changed it since this tick read it)."""
        attempts = self.store.attempts(job.id)
        if not attempts or self._foreign(job, attempts):
            return
        attempt = attempts[-1]
        if attempt.launched_in and attempt.launched_in not in self.domains:
            silence = self._owner_silence(job, attempt, now)
            if silence is None:
                return  # the engine that launched it watches it
            # in this broker's log too, not only the job's events ("by engine"): which broker took which job over
            log.warning("job %s: taken over from the broker that launched attempt %s: %s", job.id, attempt.id, silence)
            status = AttemptStatus(Phase.LOST, reason=silence)
            attempt = replace(attempt, stop_reason="owner_silent")
        else:
            status = self.launcher.status(attempt.id)
            if not attempt.launched_in:  # recorded by a broker older than ``launched_in``: whose is it?
                attempt, status = self._unclaimed(job, attempt, status, now)
                if status is None:
                    return  # another engine's, maybe: it claims it at its next tick
        if status.phase is Phase.GONE and job.state is JobState.LAUNCHING:
            if attempt.id not in self._preparing:
                # (not while this engine unpacks its workdir: launched once that is done, as planned — said at every
                # launch with a workdir pack, it read as a broker crash to whoever watched the log)
                log.info("job %s: launching attempt %s again: a broker stopped between its record and its launch",
                         job.id, attempt.id)
            self._start(job, attempt, now)  # re-adopt: the broker stopped between commit and launch
            return
        notes: list[Event] = []
        fields: dict = {}
        live = not status.phase.is_final
        ticked = self.monotonic()
        until = self._billed_until(attempt, now, ticked)
        decided = resend = False  # a stop decided now, or one recorded before that this engine never sent
        if live and attempt.stop_requested_at is None:
            attempt, stop_notes = self._maybe_stop(job, attempts, attempt, now, fields, until=until,
                                                   provisioning=status.phase is Phase.PENDING)
            notes += stop_notes
            decided = attempt.stop_requested_at is not None
            if not decided:
                attempt = self._keep_limit(job, attempts, attempt, until)
        elif live and attempt.id not in self._stops_sent:
            # recorded, maybe never sent: by this engine's process before it died between the commit and the
            # launcher call, or by another broker that did — sent once more (stopping is idempotent)
            resend = True
        stop_budget = fields.pop("_stop_budget", False)
        limit_outdated = False
        if status.phase is Phase.STOPPED and status.reason == "budget" and (
                not attempt.stop_reason or (job.state is JobState.LAUNCHING and attempt.stop_reason == "budget")):
            # the launcher kept the budget by itself (its limit came; no broker had stopped it first), or the
            # engine stopped a launch at a limit the budget has outgrown since (it stays launching: resumed)
            attempt = replace(attempt, stop_requested_at=attempt.limit_at or now, stop_reason="budget")
            limit_outdated = self._limit_outdated(job, attempts, attempt)
            if not limit_outdated:
                # past the budget when its cluster came up after its limit while no broker watched (the
                # guard stopped it at once, and it idled until now or autodown): said, never silently capped
                ended = replace(attempt, ended_at=status.ended_at or now)
                over = max(sum(a.cost for a in attempts[:-1]) + accrue(ended, until).cost - job.budget, 0)
                notes.append(self._note(job, "budget_stop_requested", "stopped at its budget by the launcher "
                                        "itself: " + (f"the budget is used up{_beyond(over, attempt)}" if over else
                                                      "the rest pays for checkpointing and stopping"), now,
                                        {"spent": job.spent, "budget": job.budget, "by": "launcher",
                                         "beyond_budget": over}))
        outcome = monitor.decide(job, attempt, status, limit_outdated=limit_outdated)
        if outcome.event is JobEvent.RECOVER and attempt.stop_reason == "heartbeat" and stalled_again(attempts):
            # stopped as silent twice with no step gained between: a hang of its own, not resumed without end
            outcome = monitor.Outcome(JobEvent.FAIL, outcome.attempt_state,
                                      f"failed: {monitor.describe_end(status)}, stalled again with no progress since "
                                      f"it last stalled")
        unseen = monitor.unseen_reason(job.reason, status) if outcome.event is None and job.state in (
            JobState.RUNNING, JobState.LAUNCHING) else None
        if unseen is not None:  # its launcher cannot look at it (or can again): the job's reason says so while it lasts
            fields["reason_shown"] = unseen
            notes.append(self._note(job, "attempt_unseen", status.reason, now) if status.unseen else
                         self._note(job, "attempt_seen", "its launcher can look at the attempt again", now))
        if outcome.event is None and attempt.id not in self._past_length_said and (
                past := _past_length(job, now)) is not None:
            self._past_length_said.add(attempt.id)  # and said once an attempt, whichever engine saw it first:
            if not noted(self.store.events(job.id), PAST_LENGTH, job):
                notes.append(self._note(job, PAST_LENGTH, past, now, {"expected_hours": job.expected_hours}))
        if outcome.event is None and job.state in (JobState.LAUNCHING, JobState.RUNNING):
            notes += self._deadline_passed(job, now, lambda: _passed_running(job))
        if outcome.event is JobEvent.START:
            attempt = replace(attempt, state=AttemptState.RUNNING, started_at=status.started_at or now)
            fields["running_since"] = attempt.started_at
            if job.launch_failures or job.launch_retry_at is not None:  # a launch went through: no more backoff
                fields.update(launch_failures=0, launch_retry_at=None)
        elif outcome.attempt_state is not None:
            attempt = replace(attempt, state=outcome.attempt_state, ended_at=status.ended_at or now,
                              exit_code=status.exit_code, reason=outcome.reason,
                              started_at=attempt.started_at or status.started_at)
        others = sum(a.cost for a in attempts[:-1])
        attempt = accrue(attempt, until)
        ran = attempt.cost
        attempt = replace(attempt, cost=budget_rules.capped(attempt.cost, others=others, budget=job.budget))
        fields["spent"] = others + attempt.cost
        if ran > attempt.cost and outcome.attempt_state is not None and job.state in (
                JobState.CANCELLING, JobState.STOPPING) and not any(n.data.get("beyond_budget") for n in notes):
            # a stop that ran on past the budget (a grace period longer than the budget left, a host too slow to
            # stop it): the recorded spend stops at the budget, and this says the rest, as the engine says a run
            # past its budget elsewhere — it was capped without a word
            notes.append(self._note(job, "beyond_budget", f"its stop ran past the budget: {fmt(ran - attempt.cost)} "
                                    f"more at {fmt_rate(attempt.price_per_hour)}/h is beyond the budget of "
                                    f"{fmt_limit(job.budget)}, said here and not counted in its spend", now,
                                    {"spent": fields["spent"], "budget": job.budget,
                                     "beyond_budget": ran - attempt.cost}))
        event, reason, data = outcome.event, outcome.reason or job.reason, None
        if event in (JobEvent.SUCCEED, JobEvent.FAIL, JobEvent.RECOVER, JobEvent.ENDED):
            text = _log_text(self.launcher, attempt.id)
            # a commit its library could not tell the broker of (down while it ran on): the log says it
            job, attempt = _committed_unreported(job, attempt, text, fields, at=status.ended_at or now)
            reason, data = self._ended(job, attempts, attempt, status, outcome, now, fields, tail=text[-_TAIL:])
            attempt = replace(attempt, reason=reason, steps_lost=data.get("steps_lost"))
            attempt = _reached_at_end(job, attempt, fields, at=status.ended_at or now)
            fields.setdefault("slots", [])
            if event is JobEvent.RECOVER:
                fields["placement"] = {}
        if outcome.retried_error:
            # placed again after a backoff (5 s, doubling, at most 5 min), not at the next tick: a script failing at
            # once under recover_on_exit_codes ran its 20 attempts back to back in 20 s
            fields["errors_retried"] = job.errors_retried + 1
            fields["launch_retry_at"] = now + launch_backoff(fields["errors_retried"])
            reason = f"{reason}; tries again at {iso(fields['launch_retry_at'])}"
        then = None  # a second event in the same commit
        if stop_budget and event in (None, JobEvent.START):
            spent_of = fmt_spent_of(fields["spent"], job.budget)
            stop = (JobEvent.STOP_BUDGET, f"budget nearly used: spent {spent_of[0]} of "
                                          f"{spent_of[1]}, the rest pays for checkpointing and stopping")
            if stop_budget == "provisioning":
                rest = "the budget is used up" if fields["spent"] >= job.budget else \
                    "the rest pays for tearing it down"
                stop = (JobEvent.STOP_BUDGET, f"{PROVISIONING_STOP} {_provisioned(self.launcher, attempt)} was still "
                                              f"being provisioned: spent {spent_of[0]} of "
                                              f"{spent_of[1]}, its run window ended before it could start, "
                                              f"and {rest}")
            if event is None:
                event, reason = stop
            else:  # started in the tick its budget stop was asked: both said, the job stopping (not "running")
                then = stop
        if event is None and not notes and fields.get("spent") == job.spent and attempt == attempts[-1] \
                and len(fields) == 1:
            if not attempt.state.is_final:  # nothing to bill yet: this engine counts on from what is billed
                self._accrued[attempt.id] = (attempt.billed_until, attempt.created_at, ticked)
            if resend:
                self._send_stop(attempt)
            return
        try:
            self._commit(job, event, reason, now, records=(attempt,), data=data, notes=tuple(notes), then=then,
                         **fields)
        except VersionConflict:
            if not decided or again:
                raise
            # the stop was decided on the job as this tick read it, and it changed since — its budget raised, a
            # cancel, a progress report: nothing was sent, and the stop is decided again on the job as stored
            fresh = self.store.get_job(job.id)
            if fresh is not None and fresh.state in MONITORED:
                self._monitor(fresh, now, again=True)
            return
        if attempt.state.is_final:
            self._accrued.pop(attempt.id, None)
            self._stops_sent.discard(attempt.id)
            self._attempt_ended(job, attempt)
        else:
            self._accrued[attempt.id] = (attempt.billed_until, attempt.created_at, ticked)
        if decided or resend:
            self._send_stop(attempt)

    def _send_stop(self, attempt: Attempt) -> None:
        """Send the launcher the stop recorded on ``attempt`` (``stop_reason``; a silent one without a grace period:
        its node is taken for lost). Only ever after that record is committed over the job's version the stop was
        decided on: a budget raised after the tick read the job makes that commit conflict, and the stop is
        decided again rather than sent at the old limit, which would lose the work since the last checkpoint. Sent
        once per engine (the launcher's stop is idempotent); a send that raises is tried again next tick."""
        grace = 0 if attempt.stop_reason == "heartbeat" else self.settings.stop_grace_seconds
        self.launcher.stop(attempt.id, grace_seconds=grace, reason=attempt.stop_reason)
        self._stops_sent.add(attempt.id)

    def _billed_until(self, attempt: Attempt, now: float, ticked: float) -> float:
        """Up to when ``attempt`` is billed now: on from its last accrual by the time this engine's monotonic
        clock has counted since, when that accrual (or the launch) was this engine's own, so that the wall
        clock stepping back (or forward) neither stalls the spend and the budget stop nor bills a jump;
        else (another broker accrued it since, or moved its launch — :meth:`_billed_from_launch` — or this one
        just started) ``now``, the wall clock, the only one processes share, but never before ``billed_until``
        (from which the monotonic count then starts). The moment is on the attempt's own timeline (from
        ``created_at``), which a step of the wall clock leaves apart from the clock by the step: its limit
        (``limit_at``) is on it too."""
        seen = self._accrued.get(attempt.id)
        if seen is None or seen[0] != attempt.billed_until or seen[1] != attempt.created_at:
            # never before what is billed already: a wall clock stepped back while no count of this engine's
            # held the attempt (it started since) would stall the spend, the budget stop and the limit by the step
            return now if attempt.billed_until is None else max(now, attempt.billed_until)
        since = attempt.created_at if seen[0] is None else seen[0]
        return since + max(ticked - seen[2], 0.0)

    def _maybe_stop(self, job: Job, attempts: list[Attempt], attempt: Attempt, now: float,
                    fields: dict, *, until: float, provisioning: bool = False) -> tuple[Attempt, list[Event]]:
        """Decide whether a live attempt must stop: cancelled, out of budget, silent, or leaving spot for the
        deadline. Returns the attempt with its stop recorded (``stop_requested_at``, ``stop_reason``) and the
        notes; nothing is sent to the launcher here (see :meth:`_monitor`). ``until``: up to when it is billed
        now (:meth:`_billed_until`). ``provisioning``: the launcher still prepares the attempt (its phase is
        pending)."""
        grace = self.settings.stop_grace_seconds
        notes: list[Event] = []
        reason = None
        outdated = False
        if job.state is JobState.CANCELLING:
            reason = "cancelled"
        elif job.state is JobState.STOPPING:
            reason = "budget"
        elif job.state in (JobState.RUNNING, JobState.LAUNCHING):
            spent = sum(a.cost for a in attempts[:-1]) + accrue(attempt, until).cost
            check = budget_rules.check(spent=spent, budget=job.budget, price_per_hour=attempt.price_per_hour,
                                       grace_seconds=grace, tick_seconds=self.settings.tick_seconds,
                                       warned=job.budget_warned)
            # still being provisioned when its run window ended: a cluster that came up now would find its
            # limit passed and stop its run at once, yet be billed its idle minutes after it on top
            unstarted = (job.state is JobState.LAUNCHING and provisioning and
                         self._run_window_ended(attempt, until))
            # past the budget only when nobody watched the attempt for a while (the broker was down, or the
            # clock jumped): the recorded spend stops at the budget, and the notes say what ran beyond it
            over = max(spent - job.budget, 0)
            spent -= over
            beyond = _beyond(over, attempt)
            # ... at a limit the budget has outgrown since (raised; the cluster's limit could not follow): only
            # stopped, to resume with the new limit, not a budget stop
            outdated = unstarted and not check.stop and self._limit_outdated(job, attempts, attempt)
            stop = (check.stop or unstarted) and not outdated
            if outdated:
                reason = "budget"
            elif check.warn or (stop and not job.budget_warned):
                fields["budget_warned"] = True
                percent = spent * 100 // max(job.budget, 1)
                left = fmt_left(job.budget - spent, budget=job.budget)
                why = beyond or (f"; the budget left, {left}, only pays for a clean stop" if stop else "")
                notes.append(self._note(job, "budget_warning", "spent {} of {}".format(*fmt_spent_of(spent, job.budget))
                                        + f" ({percent}%){why}", now, {"spent": spent, "budget": job.budget,
                                                                    "percent": percent, "beyond_budget": over}))
            if stop:
                rest = ("the rest pays for checkpointing and stopping within the budget" if not unstarted else
                        f"{_provisioned(self.launcher, attempt)} was still being provisioned when its run window "
                        f"ended; the rest pays for tearing it down within the budget")
                notes.append(self._note(job, "budget_stop_requested",
                                        "stopping at {} of {}: ".format(*fmt_spent_of(spent, job.budget)) +
                                        (f"the budget is used up{beyond}" if over else rest), now,
                                        {"spent": spent, "budget": job.budget, "beyond_budget": over}))
                reason = "budget"
            elif job.state is JobState.LAUNCHING:
                pass  # nothing runs yet to fall silent or to move off spot (or: an outdated limit, above)
            elif self._silent(job, attempts, attempt, now):
                reason = "heartbeat"
            elif (migrate := self._leave_spot(job, attempts, attempt, now)) is not None:
                fields["force_tier"], fields["pinned_by"] = migrate, DEADLINE_PIN
                notes.append(self._note(job, "migrate", f"leaving spot for {migrate} to meet the deadline", now))
                reason = "migrating"
        if reason is None:
            return attempt, notes
        # not sent here: :meth:`_monitor` sends it once this decision is committed (:meth:`_send_stop`)
        if reason == "budget" and job.state is JobState.RUNNING:
            # applied with this tick's commit: running → stopping
            fields["_stop_budget"] = True
        elif reason == "budget" and job.state is JobState.LAUNCHING and not outdated:
            # launching → stopping (an outdated limit's launch stays launching: resumed next tick)
            fields["_stop_budget"] = "provisioning" if provisioning else True
        return replace(attempt, stop_requested_at=now, stop_reason=reason), notes

    def _run_window_ended(self, attempt: Attempt, until: float) -> bool:
        """Whether the attempt's run window has ended: its launcher's own limit, less what the launcher
        bills after the run (a SkyPilot cluster's idle minutes before autodown and teardown: its guard stops
        the run that much before the limit, :meth:`~launchers.skypilot.SkyPilotLauncher.cluster_stop_at`).
        Torn down then, an attempt still being provisioned is billed no more than that reserve holds."""
        if attempt.limit_at is None:
            return False
        return until >= attempt.limit_at - after_run_seconds(self.launcher, attempt.placement)

    def _limit_at(self, job: Job, attempt: Attempt, attempts: list[Attempt]) -> float | None:
        """When the launcher must stop ``attempt`` by itself to keep the job's budget (see
        :func:`broker.engine.budget.launcher_stop_at`)."""
        return budget_rules.attempt_limit(attempt=attempt, attempts=attempts, budget=job.budget,
                                          grace_seconds=self.settings.stop_grace_seconds)

    def _keep_limit(self, job: Job, attempts: list[Attempt], attempt: Attempt, until: float) -> Attempt:
        """Move the launcher's own stop when the budget changed (raised, most often) since launch: to
        ``limit_at - until`` from now (``until``: :meth:`_billed_until`, on the timeline of ``limit_at``).
        ``limit_at`` stays the limit the launcher holds: one it cannot move (a SkyPilot cluster's) is
        left as given, so that the stop it brings is known for an outdated one (:meth:`_limit_outdated`)."""
        limit = self._limit_at(job, attempt, attempts)
        setter = getattr(self.launcher, "set_stop_in", None)
        # this engine gave the launcher another limit last, on a budget read before a change it then failed to commit
        # over (a budget lowered meanwhile, whose service recorded the limit it moved to: BrokerService._lower_limit)
        written = self._limits_written.get(attempt.id)
        stale = written is not None and abs(written - limit) >= 1 if limit is not None else False
        if limit is None or setter is None or (
                attempt.limit_at is not None and abs(limit - attempt.limit_at) < 1 and not stale):
            return attempt
        if setter(attempt.id, limit - until) is False:
            return attempt
        self._limits_written[attempt.id] = limit
        return replace(attempt, limit_at=limit)

    def _limit_outdated(self, job: Job, attempts: list[Attempt], attempt: Attempt) -> bool:
        """Whether the launcher stopped ``attempt`` at a limit its budget has since outgrown (raised while
        no broker could move the limit, or on a launcher that cannot): the job resumes, not stops."""
        limit = self._limit_at(job, attempt, attempts)
        return limit is not None and attempt.limit_at is not None and limit >= attempt.limit_at + 1

    def _silent(self, job: Job, attempts: list[Attempt], attempt: Attempt, now: float) -> bool:
        """Whether a running job has been silent past ``heartbeat_timeout_seconds`` (:func:`silence`), counted from
        no earlier than when this engine began to watch (its start, or back from a store outage: ``_watching_since``):
        while no broker ran, the job's reports were refused, and a restarted broker stopped it on its first tick."""
        timeout = self.settings.heartbeat_timeout_seconds
        quiet = silence(job, attempts, attempt, now, watching_since=self._watching_since) if timeout else None
        return quiet is not None and quiet > timeout

    def _leave_spot(self, job: Job, attempts: list[Attempt], attempt: Attempt, now: float) -> str | None:
        """The policy's safety net, tick by tick, for a job running on spot with a deadline."""
        if attempt.placement.get("tier") != Tier.SPOT.value or job.deadline is None:
            return None
        if now >= job.deadline:
            # missed already: a move costs a changeover and the reliable tier's price, and meets no deadline (it
            # was noted "leaving spot for ondemand to meet the deadline"); it runs on where it is, as a job without one
            return None
        policy = self._policy(job.id)
        request = request_of(job)
        mk = market(self.settings, [], getattr(self.launcher, "availability", dict)())
        offers = matching_offers(request, mk.offers)
        inp = policy_input(job, attempts, offers, mk.free_capacity, mk.spot_available,
                           now=now, changeover=self.settings.changeover_seconds,
                           holding=Holding(Tier.SPOT, attempt.placement.get("zone")))
        if inp is None or inp.remaining <= inp.changeover:
            return None  # no deadline, or about to finish: moving now costs more than it saves
        if not inp.on_spot:
            # its zone has no spot now: the preemption comes, and the job is placed again after it. Moved now, it was
            # pinned to on-demand "to meet the deadline" with hours to spare: the policy, seeing only the dearer zone
            # up, found on-demand no dearer than spot — a reason for its next placement, not for a pin
            return None
        decision = policy_decide(policy, inp)
        if decision.action not in RELIABLE:
            return None
        tier = RELIABLE[decision.action]
        # a job that may run on spot only (use_spot: true) has no offer there: pinned to it, it waited for ever, its
        # deadline missed all the same ("no offer ... on spot") — it stays where it can run
        return tier.value if any(o.tier is tier for o in offers) else None

    def _secret_values(self, job: Job) -> list[str]:
        """The values of the job's secrets, to hide in what the broker quotes from its run (its launch failed saying
        so where this broker cannot open sealed ones)."""
        return job_secret_values(job.spec, self.settings, job.id)

    def _ended(self, job: Job, attempts: list[Attempt], attempt: Attempt, status, outcome, now: float,
               fields: dict, tail: str | None = None) -> tuple[str, dict]:
        """Diagnose how the attempt ended; on a preemption, block the zone and count the steps lost."""
        tail = _log_tail(self.launcher, attempt.id) if tail is None else tail
        hidden = self._secret_values(job)
        if hidden and tail:  # a line the diagnosis quotes (`set -x` prints a token) goes to events, Slack, the dashboard
            tail = redact(tail, hidden)
        phase = ENDED_PHASE_NAME.get(status.phase, status.phase.value)
        if status.phase is Phase.SUCCEEDED:
            pass  # it finished before the stop asked of it reached it: diagnosed as what it did, not the stop
        elif attempt.stop_reason in ("budget", "cancelled"):
            phase = attempt.stop_reason
        elif attempt.stop_reason == "heartbeat":
            phase = "silent_again" if outcome.event is JobEvent.FAIL and stalled_again(attempts) else "silent"
        known = step_reached(attempt)  # its last reported step, or its committed checkpoint's when further
        said = redact(status.reason, hidden) if hidden and status.reason else status.reason
        if phase.startswith("silent"):  # how long it had been silent when the broker stopped it
            quiet = silence(job, attempts, attempt, attempt.stop_requested_at or now)
            said = fmt_duration(quiet) if quiet is not None else "longer than heartbeat_timeout_seconds"
        diagnosis = self.rules.diagnose(Ending(phase=phase, exit_code=status.exit_code, signal=status.signal,
                                               reason=said, log_tail=tail,
                                               step=known, command=status.step,
                                               unreported=known is None,
                                               # a hint sends a job on from "its last checkpoint" only if it has one
                                               checkpoint=bool(job.last_checkpoint or attempt.checkpoint),
                                               stalled_at=step_reached(attempts[-2])
                                               if phase == "silent_again" and len(attempts) > 1 else None))
        if attempt.stop_reason == "budget" and job.state is JobState.STOPPING \
                and job.reason.startswith(PROVISIONING_STOP) and status.phase is not Phase.SUCCEEDED:
            diagnosis = Diagnosis("budget_stop", f"Stopped at its budget while {_provisioned(self.launcher, attempt)} "
                                  f"was still being provisioned: its run window ended before it could start.",
                                  "Raise the budget and resume to continue.", infrastructure=True)
        if outcome.event is JobEvent.RECOVER and attempt.stop_reason == "budget":  # an outdated limit
            diagnosis = Diagnosis("budget_limit_outdated", "Stopped at the limit of the budget it had at launch.",
                                  "The budget was raised since: the broker resumes it from its last checkpoint.",
                                  infrastructure=True)
        fields["diagnosis"] = {**diagnosis.to_dict(), "attempt": attempt.n}
        info = {"attempt_id": attempt.id, "exit_code": status.exit_code, "diagnosis": diagnosis.text,
                "diagnosis_class": diagnosis.cls, "zone": attempt.placement.get("zone"),
                "tier": attempt.placement.get("tier"), "checkpoint_step": job.last_checkpoint.get("step")}
        lost = steps_lost(job, attempt, diagnosis.step)
        if lost is not None:
            info["steps_lost"] = lost
        if attempt.stop_reason == "owner_silent":  # not the zone's doing: nothing to block
            saved = job.last_checkpoint.get("step")
            text = f"lost: {status.reason}"
            text += f"; resumes from step {saved}" if saved is not None else "; restarts from the beginning"
            return text, info
        if phase != "silent_again" and (status.phase in (Phase.PREEMPTED, Phase.LOST, Phase.GONE) or
                                        (attempt.stop_reason == "heartbeat" and status.phase is not Phase.SUCCEEDED)):
            if attempt.placement.get("tier") == Tier.SPOT.value and status.zone_to_blame:
                fields["blocked_zones"] = block_zone(job, attempt.placement.get("zone"), now=now,
                                                     cooldown=self.settings.zone_cooldown_seconds)
            saved = job.last_checkpoint.get("step")
            where = attempt.placement.get("zone") or attempt.placement.get("instance_type")
            text = f"{diagnosis.sentence.rstrip('.')} {'on' if phase == 'silent' else 'in'} {where}"
            if outcome.event is not JobEvent.RECOVER:
                # cancelled or stopped at its budget as it ended (or out of attempts): it goes on no more, where its
                # reason said "restarts from the beginning (52 steps lost)" of a job the user had cancelled. A
                # diagnosis of the stop itself says so already ("Cancelled in sim-a; cancelled" said it twice)
                return (text if phase in ("budget", "cancelled") else f"{text}; {outcome.reason.split(';', 1)[0]}"), info
            text += f"; resumes from step {saved}" if saved is not None else "; restarts from the beginning"
            text += f" ({lost} steps lost)" if lost is not None else ""
            return text, info
        if outcome.event is JobEvent.SUCCEED:
            return outcome.reason, info
        if outcome.event is JobEvent.RECOVER:
            if attempt.stop_reason == "budget":  # an outdated limit (monitor.decide)
                saved = job.last_checkpoint.get("step")
                return ("stopped by its launcher at the limit of the budget it had at launch; the budget was raised "
                        "since: " + (f"resumes from step {saved}" if saved is not None else
                                      "restarts from the beginning")), info
            if attempt.stop_reason == "migrating":
                return f"moved off spot to meet the deadline; resumes from step {job.last_checkpoint.get('step')}", info
            if outcome.retried_error:  # the broker retries it itself: not the hint's "resume it"
                return monitor.retrying_reason(diagnosis.sentence, outcome.reason), info
            return f"{diagnosis.text} {outcome.reason.split(';', 1)[-1].strip()}".strip(), info
        used_up = monitor.used_up_reason(job, attempts, attempt, diagnosis.sentence, diagnosis.hint) \
            if outcome.event is JobEvent.FAIL and status.phase is Phase.FAILED else None
        return used_up or diagnosis.text, info

    # -- running in the background ---------------------------------------------------------------

    def start(self) -> None:
        self._stop.clear()
        self._thread = threading.Thread(target=self._loop, name="broker-engine", daemon=True)
        self._thread.start()

    def stop(self, timeout: float = 5.0) -> None:
        self._stop.set()
        if self._thread:
            self._thread.join(timeout)

    def tick_safely(self) -> None:
        """One tick for a loop that must outlive it (``broker serve``'s engine thread, ``broker worker``):
        a store that does not answer is one line per tick, not a traceback, and the next tick tries again."""
        try:
            self.tick()
        except StoreUnavailable as exc:
            self._store_not_answering(exc)
        except Exception:
            log.exception("engine tick failed")
        else:
            self._store_answers()

    def _store_not_answering(self, exc: StoreUnavailable) -> None:
        """Say a tick skipped for the store: when the outage starts, then at most once every
        :data:`OUTAGE_REPEAT_SECONDS` while it lasts (each broker logged a line every tick: 39 in 28 s at
        ``tick_seconds`` 0.5), with how long it has lasted and how many ticks it skipped."""
        now = self.monotonic()
        # the next beat counts from then (``_beat``): no one could beat nor report meanwhile, and a job's progress
        # reports were refused with a 503, which is no silence of the job's — the first tick back stopped it as silent
        self._last_beat = float("-inf")
        outage = self._outage
        if outage is None:
            self._outage = StoreOutage(since=now, said_at=now)
            log.warning("engine tick skipped: %s (said again at most once a minute while the store does not answer, "
                        "and when it answers again)", exc)
            return
        outage.skipped += 1
        if now - outage.said_at >= OUTAGE_REPEAT_SECONDS:
            outage.said_at = now
            log.warning("engine tick skipped: %s (the store has not answered for %.0f s: %d tick%s skipped)", exc,
                        now - outage.since, outage.skipped, "" if outage.skipped == 1 else "s")

    def _store_answers(self) -> None:
        """Say, once, that the store answers the ticks again after an outage :meth:`_store_not_answering` said."""
        outage, self._outage = self._outage, None
        if outage is not None:
            log.warning("engine ticks resumed: the job store answers again, after %.0f s without it (%d tick%s "
                        "skipped)", self.monotonic() - outage.since, outage.skipped, "" if outage.skipped == 1 else "s")

    def _loop(self) -> None:
        while not self._stop.is_set():
            self.tick_safely()
            self._stop.wait(self.settings.tick_seconds)


OUTAGE_REPEAT_SECONDS = 60.0
"""While the store does not answer, how often a broker's engine says again that its ticks are skipped."""
CLOCK_TOLERANCE_SECONDS = 2.0
"""How far this host's clock may be from the store's before the engine warns (NTP keeps hosts within milliseconds)."""


def clock_refusal_words(offset: float | None, limit: float) -> str | None:
    """Why a broker whose clock is ``offset`` seconds off the store's does not work (its engine does not tick), for
    the log and a readiness check (:func:`broker.api.probe.clock_refusal`); ``None`` within ``limit`` (or no offset)."""
    if offset is None or abs(offset) <= limit:
        return None
    return (f"this host's clock is {_offset_words(offset)} the job store's (Redis TIME), beyond "
            f"BROKER_MAX_CLOCK_OFFSET_S ({limit:g} s): this broker's engine does not tick until it is back within it. "
            f"Sync the clock (NTP: chrony or systemd-timesyncd)")


def _offset_words(offset: float) -> str:
    """``12.3 s ahead of`` / ``0.4 s behind``: this host's clock against another's, for a sentence."""
    return f"{abs(offset):.1f} s {'ahead of' if offset >= 0 else 'behind'}"


@dataclass
class StoreOutage:
    """The store not answering an engine's ticks: since when and when it was last said (monotonic), and how many
    ticks it has skipped."""

    since: float
    said_at: float
    skipped: int = 1


def refused_place(attempt: Attempt, scope: str | None) -> tuple[str, str] | None:
    """What a launch refused with ``scope`` (:attr:`launchers.base.LaunchError.scope`) rules out for the job: its
    entry in the job's blocked zones — the attempt's zone (``"zone"``) or its whole cloud (``"cloud"``,
    :func:`pricing.placement.cloud_block`) — and the words for it; ``None``: nothing."""
    p = attempt.placement
    if scope == "zone" and p.get("location"):
        return str(p["location"]), str(p["location"])
    if scope == "cloud" and p.get("cloud"):
        return cloud_block(str(p["cloud"])), f"the cloud {p['cloud']}"
    return None


_PREPARING = object()
"""What :meth:`Engine._files` answers while the attempt's workdir and file_mounts are being unpacked."""


TICK_BUCKETS = (0.01, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0)
"""Upper bounds (seconds) of ``broker_engine_tick_duration_seconds``' buckets: a loop takes milliseconds with a few
jobs; seconds mean a slow store or launcher; a loop near ``tick_seconds`` or beyond falls behind."""


class TickDurations:
    """How long the engine's loops took, as a Prometheus histogram counts them (since this process started): the
    count in each bucket of :data:`TICK_BUCKETS` (not cumulative; +Inf last), their number and their sum."""

    def __init__(self) -> None:
        self.counts = [0] * (len(TICK_BUCKETS) + 1)
        self.total = 0.0

    def add(self, seconds: float) -> None:
        self.counts[next((i for i, bound in enumerate(TICK_BUCKETS) if seconds <= bound), len(TICK_BUCKETS))] += 1
        self.total += seconds

    def cumulative(self) -> list[tuple[str, int]]:
        """``[(le, count of loops at most that long), ...]``, ``+Inf`` last: a histogram's buckets."""
        out, running = [], 0
        for bound, n in zip([*map(str, TICK_BUCKETS), "+Inf"], self.counts):
            running += n
            out.append((bound, running))
        return out


def _ready(store, attempt_id: str, digest: str | None, mounts: list[tuple[str, str]]):
    """The attempt's copies when all of them were made (by this broker or one before it): as :meth:`Engine._files`
    answers; else ``None``."""
    from broker.workdir import parse_mount

    workdir = store.ready_dir(attempt_id) if digest else None
    if digest and workdir is None:
        return None
    copies = {}
    for n, (dest, value) in enumerate(mounts):
        made = store.ready_mount_file(attempt_id, n) if parse_mount(value)[1] else store.ready_mount(attempt_id, n)
        if made is None:
            return None
        copies[dest] = str(made)
    return (str(workdir) if workdir is not None else None), copies


def _background(fn: Callable, *args) -> Future:
    """Run ``fn(*args)`` in a daemon thread of its own (one never holds up a broker's exit; what it left
    half made is swept), its outcome in the returned future."""
    future: Future = Future()

    def run() -> None:
        try:
            future.set_result(fn(*args))
        except BaseException as exc:  # handed to whoever reads the future
            future.set_exception(exc)

    future.set_running_or_notify_cancel()
    threading.Thread(target=run, name=f"broker-{getattr(fn, '__name__', 'bg')}", daemon=True).start()
    return future


def _pools_gone(jobs: Iterable[Job], settings: Settings) -> dict[str, list[str]]:
    """The on-prem pools that jobs still hold slots on (placed, launching, running or being stopped) but that the
    config no longer names, each with those jobs' ids: the market counts held slots per pool name, so the slots of
    a pool renamed under running jobs were free again under its new name, and a second job was placed on a GPU of a
    1-slot pool beside the first."""
    names = {pool.name for pool in settings.pools}
    gone: dict[str, list[str]] = {}
    for pool, job in ((j.placement.get("location", ""), j) for j in jobs
                      if j.state.is_active and j.placement.get("tier") == Tier.ONPREM.value and j.slots):
        if pool not in names:
            gone.setdefault(pool, []).append(job.id)
    return gone


def _jobs_words(ids: Sequence[str]) -> str:
    return "1 job" if len(ids) == 1 else f"{len(ids)} jobs"


def _beyond(over: int, attempt: Attempt) -> str:
    """The words for what an attempt was billed beyond the budget while no broker watched (empty for none):
    the recorded spend stops at the budget, so these words are where the rest is said."""
    if not over:
        return ""
    return (f"; it ran on while the broker was not watching (stopped, or its clock jumped): {fmt(over)} more at "
            f"{fmt_rate(attempt.price_per_hour)}/h is beyond the budget, said here and not counted in its spend")


def _provisioned(launcher: Launcher, attempt: Attempt) -> str:
    """What is provisioned for ``attempt``, for a sentence: ``its cluster`` where the launcher bills the
    minutes after a run (a cloud cluster), else ``it``."""
    return "its cluster" if after_run_seconds(launcher, attempt.placement) else "it"


_TAIL = 16_384  # the end of an attempt's log its diagnosis reads


def _log_tail(launcher: Launcher, attempt_id: str, size: int = _TAIL) -> str:
    """The end of an attempt's output, for its diagnosis (best effort: no logs, no patterns)."""
    return _log_text(launcher, attempt_id)[-size:]


_LOG_PAGE = 1 << 22  # 4 MiB


def _log_text(launcher: Launcher, attempt_id: str, pages: int = 24) -> str:
    """The end of an attempt's output, its last 4 MiB, read in pages of 4 MiB from the start (at most ``pages``:
    a longer log gives the page that far in; the local launcher keeps at most 64 MiB of an attempt's output by
    default, its start and its newest, which 24 pages cover). Best effort: "" without logs. The first page alone was
    read before: a run with more output had its diagnosis, and its last commit's line, read from the middle of its
    log. A short page is not taken for the end (a capped log's start ends short of a page, its newest output after
    it): only an empty page, or an offset that does not move, is."""
    data, offset = b"", 0
    try:
        for _ in range(pages):
            page, nxt = launcher.logs(attempt_id, offset=offset, limit=_LOG_PAGE)
            if page:
                data = (data + page)[-_LOG_PAGE:]
            if not page or nxt <= offset:
                break
            offset = nxt
    except Exception:
        if not data:
            return ""
    return data.decode("utf-8", "replace")


# The checkpoint library's line for a commit it could not tell the broker of (checkpoint/progress.py,
# UNDELIVERED_LINE: "[checkpoint] committed step 900: file:///…/step-000000000900-… (not yet told to the broker: …)").
# Matched here, not imported: the broker never imports the checkpoint library; the two formats are kept in step.
_UNREPORTED_COMMIT = re.compile(r"^\[checkpoint\] committed step (\d+): (\S.*?) \(not yet told to the broker: "
                                r"[^\n]*\)[ \t]*$", re.M)


def committed_in_log(text: str) -> tuple[int, str] | None:
    """The newest checkpoint (step, uri) the log says its run committed without telling the broker, or None."""
    found = [(int(m.group(1)), m.group(2)) for m in _UNREPORTED_COMMIT.finditer(text.replace("\r", "\n"))]
    return max(found, key=lambda f: f[0]) if found else None


DEADLINE_PASSED = "deadline_passed"
"""The note on a job not ended whose deadline has passed, once per job (:meth:`Engine._deadline_passed`)."""


def _passed_in_queue(decision: Place | Wait) -> str:
    """A ``deadline_passed`` note's words for a job the scheduler weighed after its deadline: placed now, or what
    it waits for (its reason, less its lead)."""
    at = deadline_at(decision.job.deadline or 0)
    if isinstance(decision, Place):
        return f"its deadline at {at} passed while it waited in the queue; placed now, it runs late"
    what = decision.reason.removeprefix("waiting: ")
    return (f"its deadline at {at} passed while it waited in the queue ({what}); it stays queued and runs when it can "
            f"start, late — cancel it if a late run is of no use")


def _passed_running(job: Job) -> str:
    """A ``deadline_passed`` note's words for a job launching or running when its deadline passed."""
    doing = "was being launched" if job.state is JobState.LAUNCHING else "ran"
    step = job.progress.get("step") if job.progress else None
    at_step = f", at step {step}" if isinstance(step, int) and not isinstance(step, bool) else ""
    return (f"its deadline at {deadline_at(job.deadline or 0)} passed while it {doing} (attempt {job.attempts}"
            f"{at_step}); it runs on to its end, late — cancel it if a late run is of no use")


PAST_LENGTH = "past_expected_length"
"""The note on a job whose attempt runs past its ``expected_hours`` (:func:`_past_length`)."""


def _past_length(job: Job, now: float) -> str | None:
    """For a running job past its ``expected_hours`` by more than the queue's grace, with no step rate to follow
    (:func:`broker.queue.expected_end` gives it no end): what its events say, once an attempt. A job that said 18 s
    ran on for minutes, unsaid: the queue had let it take GPUs kept for a pool's head on that length, and the head
    started minutes late with its estimate gone. The length is no limit — the job runs on — but its team is told,
    and what the jobs behind it were told of it no longer holds."""
    if job.state is not JobState.RUNNING or job.running_since is None or not job.expected_hours:
        return None
    if expected_end(job, now) is not None:  # within its length (and the grace), or followed by its step rate
        return None
    length = float(Decimal(job.expected_hours) * 3600)
    return (f"running {fmt_duration(now - job.running_since)}, past its expected {fmt_duration(length)} "
            f"(broker: expected_hours {job.expected_hours}): the queue no longer counts on its end, so jobs waiting for "
            f"what it holds get no start estimate, and any let in ahead of a waiting job on that length delay it. It "
            f"runs on; give the next run a longer expected_hours, or report its steps with their total "
            f"(`report(step, total_steps)` of the checkpoint library's progress) so its end follows its rate")


def _committed_unreported(job: Job, attempt: Attempt, text: str, fields: dict, *, at: float) -> tuple[Job, Attempt]:
    """An attempt that ended while the broker was not told of its last commit: where its log names a checkpoint
    ahead of the job's last one, that one is the job's (and the attempt's) last checkpoint — else the job resumed
    from, and showed as its last checkpoint, an older one. The job is returned as it will be stored (its texts say
    "resumes from step N" of it); ``fields`` gets the change."""
    seen = committed_in_log(text)
    if seen is None:
        return job, attempt
    step, uri = seen
    last = job.last_checkpoint or {}
    if last.get("step") is not None and last["step"] >= step:
        return job, attempt
    if not in_own_base(job, uri):  # the run prints what it likes: held to the job's base, as a report is
        return job, attempt
    record = {"step": step, "uri": uri, "at": at, "attempt": attempt.n}
    fields["last_checkpoint"] = record
    return replace(job, last_checkpoint=record), replace(attempt, checkpoint=record)


def _reached_at_end(job: Job, attempt: Attempt, fields: dict, *, at: float) -> Attempt:
    """The step an ended attempt reached, where the checkpoint its log names (:func:`_committed_unreported`) is ahead
    of the progress last reported: a commit at step N means the run reached N (as a checkpoint report says, in
    ``BrokerService.report_progress``). The job's progress and the attempt's last step say it, not the step before
    the outage. A step the log merely prints is left to the diagnosis (progress is what the run reported)."""
    step = (fields.get("last_checkpoint") or {}).get("step")
    if not isinstance(step, int):
        return attempt
    progress = job.progress or {}
    if progress.get("step") is not None and progress["step"] >= step:
        return attempt
    if progress.get("attempt") not in (None, attempt.n):  # another attempt's: its rate's first step is not this one's
        progress = {"total_steps": progress.get("total_steps"), "metrics": {}}
    fields["progress"] = {**progress, "step": step, "at": at, "attempt": attempt.n}
    if attempt.last_step is None or attempt.last_step < step:
        attempt = replace(attempt, last_step=step)
    return attempt
