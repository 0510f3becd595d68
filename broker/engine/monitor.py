"""Monitor step: what an attempt's status means for its job. Pure.

A table from (launcher phase, job state) to the job event to apply; the retry
rules decide whether an error exit is recovered. Preemption and a lost node
always recover (up to :data:`MAX_ATTEMPTS`).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from broker.lifecycle import AttemptState, JobEvent, JobState
from broker.models import Attempt, Job
from launchers.base import AttemptStatus, Phase

MAX_ATTEMPTS = 20
"""A job that needs more attempts than this is failed: something is wrong that retrying won't fix."""

ATTEMPT_STATE = {
    Phase.SUCCEEDED: AttemptState.SUCCEEDED,
    Phase.FAILED: AttemptState.FAILED,
    Phase.PREEMPTED: AttemptState.PREEMPTED,
    Phase.LOST: AttemptState.LOST,
    Phase.GONE: AttemptState.LOST,
    Phase.STOPPED: AttemptState.STOPPED,
}


@dataclass(frozen=True)
class Outcome:
    """What to do: the job event (or None), the attempt's new state, and why."""

    event: JobEvent | None
    attempt_state: AttemptState | None
    reason: str
    retried_error: bool = False


def describe_end(status: AttemptStatus) -> str:
    if status.phase is Phase.SUCCEEDED:
        return "the run command exited 0"
    if status.phase is Phase.FAILED:
        where = f"the {status.step} command" if status.step else "the job"
        if status.signal:
            return f"{where} was killed by signal {status.signal}"
        if status.exit_code is not None:
            return f"{where} exited with code {status.exit_code}"
        return status.reason or f"{where} failed without an exit code"  # the launcher's words for what happened
    if status.phase is Phase.PREEMPTED:
        return "the spot capacity was preempted"
    if status.phase in (Phase.LOST, Phase.GONE):
        return status.reason or "the node was lost"
    if status.phase is Phase.STOPPED:
        return f"stopped ({status.reason or 'on request'})"
    return status.phase.value


UNSEEN = " — the broker cannot see it now: "
"""Joins a live job's reason and why its launcher could not look at its attempt (:attr:`AttemptStatus.unseen`)."""


def unseen_reason(reason: str, status: AttemptStatus) -> str | None:
    """A live job's reason for ``status``, when it changes: while its launcher cannot look at the attempt, the reason
    it had, then why (the phase shown is the last one seen); once it can again, the reason it had. None: unchanged."""
    had = reason.split(UNSEEN, 1)[0]
    want = had + UNSEEN + status.reason if status.unseen else had
    return want if want != reason else None


RETRYING = "no need to resume it: the broker is "
"""Leads the retry a job's retry settings call for (:func:`decide`): a queued job's reason said the diagnosis's "resume
it to try again" beside "retrying (retry 2 of 2)", and a resume was refused (409: it is queued, not ended)."""


def retrying_reason(sentence: str, reason: str) -> str:
    """The reason of a job the broker retries itself after an error exit (:func:`decide`'s ``reason``: what ended,
    then why it is retried): its diagnosis's ``sentence`` (what went wrong), and that the broker retries it, which
    retry — never the diagnosis's hint, which tells the user to resume it: the engine adds when it tries again.
    ``A server or the network failed at step 60: connection refused. No need to resume it: the broker is retrying
    (automatic retry 2 of 2)``."""
    at = reason.find(f"; {RETRYING}")  # what ended may hold a "; " of its own (a launcher's words)
    said = (reason[at + 2:] if at >= 0 else reason.split(";", 1)[-1]).strip()
    return f"{sentence.strip()} {said[:1].upper()}{said[1:]}".strip()


def retries_used(job: Job) -> str | None:
    """For a job failing by an error exit its retry settings no longer retry, that they did (``its 2 automatic
    retries are used up``); None for a job with none (``max_restarts_on_errors`` 0), or with some left."""
    most = int((job.retry or {}).get("max_restarts_on_errors") or 0)
    if most <= 0 or job.errors_retried < most:
        return None
    return f"its {'automatic retry is' if most == 1 else f'{most} automatic retries are'} used up"


def used_up_reason(job: Job, attempts: list[Attempt], attempt: Attempt, sentence: str, hint: str) -> str | None:
    """The reason of a job that failed once more after its automatic retries (``max_restarts_on_errors``) were used
    up: its diagnosis's ``sentence``, how many times it failed and whether each time alike (the same diagnosis, at
    the same step), that the retries are used up, then the diagnosis's ``hint`` — a resume is the user's now.
    "A server or the network failed at step 60: connection refused. It failed 3 times, each at step 60 with the same
    error; its 2 automatic retries are used up. Not the job's code: … resume it to try again." — it read as one
    failure, "failed for a while". ``attempts``: the job's attempts, ``attempt`` the one that ended now (its last).
    None when the job had no automatic retries to use up (:func:`retries_used`)."""
    used = retries_used(job)
    if used is None:
        return None
    times = job.errors_retried + 1  # the error exits retried since the job was last resumed (a resume restarts them)
    earlier = [a for a in attempts if a.id != attempt.id and a.state is AttemptState.FAILED][-max(times - 1, 1):]
    head = sentence.strip().rstrip(".")
    alike = len(earlier) == job.errors_retried and bool(head) and all(
        (a.reason or "").startswith(head) and a.exit_code == attempt.exit_code for a in earlier)
    step = _step_in(head)
    each = (f", each after step {step} with the same error" if step is not None else ", each with the same error") \
        if alike else ""
    return f"{head}. It failed {times} times{each}; {used}. {hint.strip()}".strip()


def _step_in(sentence: str) -> int | None:
    """The step a diagnosis's sentence names (``… failed after step 60 (the last the job reported): …``; "at step
    60" from a broker of an earlier version), when it names one."""
    found = re.search(r"\b(?:at|after) step (\d+)\b", sentence)
    return int(found.group(1)) if found else None


def decide(job: Job, attempt: Attempt, status: AttemptStatus, *, limit_outdated: bool = False) -> Outcome:
    """The job event an attempt status calls for, given the job's state and retry settings.
    ``limit_outdated``: a launcher's own budget stop came at a limit the budget has outgrown since."""
    if status.phase in (Phase.PENDING,):
        return Outcome(None, None, "")
    if status.phase is Phase.RUNNING:
        if job.state is JobState.LAUNCHING:
            return Outcome(JobEvent.START, AttemptState.RUNNING, "the attempt started")
        return Outcome(None, None, "")
    end = describe_end(status)
    attempt_state = ATTEMPT_STATE[status.phase]
    if job.state in (JobState.CANCELLING, JobState.STOPPING):
        what = "cancelled" if job.state is JobState.CANCELLING else "stopped at its budget"
        if status.phase is Phase.SUCCEEDED:  # it finished on its own before the stop reached it
            # not "before it could be cancelled": a cancel accepted while no broker ran reached the run only at the
            # next tick, and it may have run on for a while after the user asked
            stop = "cancel" if job.state is JobState.CANCELLING else "budget stop"
            return Outcome(JobEvent.SUCCEED, attempt_state, f"succeeded: {end}, before the {stop} asked of it "
                                                            f"reached it")
        return Outcome(JobEvent.ENDED, attempt_state, f"{what}; {end}")
    if status.phase is Phase.STOPPED and status.reason == "budget":
        if limit_outdated and job.attempts_run < MAX_ATTEMPTS:
            # the budget was raised after the launcher's limit was set (and it could not be moved): resume
            return Outcome(JobEvent.RECOVER, attempt_state, "stopped by its launcher at the limit of the budget it "
                           "had at launch; the budget was raised since: requeued to resume from its last checkpoint")
        # the launcher stopped it by itself at the budget (no broker asked): the budget stop, as if asked
        return Outcome(JobEvent.STOP_BUDGET, attempt_state, "stopped at its budget by the launcher itself (its own "
                       "limit, kept while no broker watches); raise the budget to resume")
    if status.phase is Phase.SUCCEEDED:
        return Outcome(JobEvent.SUCCEED, attempt_state, "succeeded: " + end)
    if status.phase is Phase.FAILED:
        retry = job.retry or {}
        code_listed = status.exit_code in (retry.get("recover_on_exit_codes") or [])
        under_limit = job.errors_retried < int(retry.get("max_restarts_on_errors") or 0)
        if (code_listed or under_limit) and job.attempts_run < MAX_ATTEMPTS:
            why = "its exit code is in recover_on_exit_codes" if code_listed else \
                f"automatic retry {job.errors_retried + 1} of {retry.get('max_restarts_on_errors')}"
            return Outcome(JobEvent.RECOVER, attempt_state, f"{end}; {RETRYING}retrying ({why})", retried_error=True)
        if code_listed or under_limit:  # the retry settings would retry it: say why they did not (was "failed: ...")
            return Outcome(JobEvent.FAIL, attempt_state, f"failed: {end}; not retried: the job already used its "
                                                         f"{MAX_ATTEMPTS} attempts, the most a job gets")
        used = retries_used(job)
        return Outcome(JobEvent.FAIL, attempt_state, f"failed: {end}" + (f"; {used}" if used else ""))
    # preempted, lost, gone, or stopped by something other than a cancel: infrastructure, recover
    if job.attempts_run >= MAX_ATTEMPTS:
        return Outcome(JobEvent.FAIL, attempt_state,
                       f"failed: {end}, and the job already used {MAX_ATTEMPTS} attempts")
    return Outcome(JobEvent.RECOVER, attempt_state, f"{end}; requeued to resume from its last checkpoint")


def silence(job: Job, attempts: list[Attempt], attempt: Attempt, now: float, *,
            watching_since: float = float("-inf")) -> float | None:
    """How long the running ``attempt`` has been silent at ``now``, in seconds; None for a job that never reported
    progress (nothing says how often it would, so it is not watched).

    From its last report, when it made one. Before its first, from its start plus the longest time any earlier
    attempt of the job took from its start to its first report (setup, the restore): before, the report of
    the attempt a resume replaced was read as this one's, and a job resumed after a wait longer than the timeout
    was stopped as silent in its first tick. Never from before ``watching_since``, when the engine asking began
    to watch (its start): while no broker ran, the job's reports were refused ("not yet told to the broker:
    Connection refused"), which is no silence of the job's — a restarted broker stopped healthy jobs as stalled
    on its first tick, and failed them as stalled again at the next restart. Another broker may have watched
    meanwhile: it stops a job silent on its watch; this one gives it a full timeout from its own start."""
    last = job.progress.get("at")
    if not last:
        return None
    since = float(last)
    if since < attempt.created_at:  # a report of an earlier attempt: this one has not reported yet
        startup = max((a.first_report_at - a.started_at for a in attempts
                       if a.id != attempt.id and a.first_report_at and a.started_at), default=0.0)
        since = (attempt.started_at or attempt.created_at) + max(startup, 0.0)
    return max(now - max(since, watching_since), 0.0)


def stalled_again(attempts: list[Attempt]) -> bool:
    """Whether the last of ``attempts``, stopped as silent, follows one stopped as silent too, with no step gained
    between: the step it reached (:func:`step_reached`; None: it told of none) is not past the step the one before
    stalled at. A hang that comes back at the same place is the job's own (a data loader, a collective, a lock), and
    resuming it again would only burn its budget a heartbeat timeout at a time (up to :data:`MAX_ATTEMPTS` times)."""
    if len(attempts) < 2:
        return False
    before, last = attempts[-2], attempts[-1]
    if before.stop_reason != "heartbeat" or before.state is AttemptState.SUCCEEDED:
        return False
    got, stalled_at = step_reached(last), step_reached(before)
    return got is None or (stalled_at is not None and got <= stalled_at)


def step_reached(attempt: Attempt) -> int | None:
    """The furthest step ``attempt`` is known to have reached: its last reported step, or the step of a checkpoint it
    committed, when further (a commit at step N means the run got to N). Its last step alone read a job that told of
    a later checkpoint only (its step reports refused while no broker ran) as one with no progress: "stalled again"."""
    steps = [s for s in (attempt.last_step, (attempt.checkpoint or {}).get("step")) if isinstance(s, int)]
    return max(steps) if steps else None
