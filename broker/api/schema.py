"""What the published OpenAPI document (``/openapi.json``, ``/docs``) says beyond the route
signatures: the one error body every error has, which errors each route can answer, the bodies
of the routes that read their request themselves (a task in JSON *or* YAML, small JSON objects
checked field by field so that each refusal names the field), and the shapes of the answers
(:class:`JobOut`, :class:`CostReport` and friends: documentation of what :mod:`broker.views` and
:mod:`broker.costs` render; routes return those dicts as they are, nothing is re-validated on the
way out).

Clients generated from the document, and ``tests/broker/test_openapi_conformance.py``, rely on
it being true: every status a route answers is listed with this body.
"""

from typing import Any

from pydantic import BaseModel, Field

from broker.lifecycle import AttemptState, JobState


class ApiError(BaseModel):
    """Every error the API answers: a sentence, and the request field it is about when there is one."""

    detail: str
    field: str | None = None


class Money(BaseModel):
    """Exact micro-dollars for scripts, and a display string for people."""

    micros: int
    usd: str = Field(examples=["$12.50"])


class AttemptOut(BaseModel):
    id: str
    n: int
    state: AttemptState
    launcher: str | None
    placement: dict[str, Any] | None = Field(description="tier, cloud, region, zone, instance type, $/h")
    price_per_hour: Money | None
    created_at: str | None
    started_at: str | None
    ended_at: str | None
    billed_until: str | None = Field(None, description="when its cost was counted to: after ended_at where its run "
                                                      "went on after the broker ended it (another broker took its "
                                                      "job over), or its cluster was torn down after its run")
    exit_code: int | None
    reason: str | None
    cost: Money | None
    resume_from: str | None = Field(description="the checkpoint this attempt resumed from")
    checkpoint: dict[str, Any] | None = Field(description="the latest checkpoint this attempt committed (step, uri; "
                                                         "`at`: Unix epoch seconds)")
    last_step: int | None
    steps_lost: int | None


ESTIMATED_START = ("roughly when a queued job waiting for capacity will start, as of this read: counting the slots "
                   "or nodes it needs where the scheduler may place it (its offers, a location that ever holds its "
                   "num_nodes, its price cap, a zone blocked for it from when the block ends) and those the jobs "
                   "ahead hold until their expected ends; null when that cannot be told: it waits for another "
                   "reason (the spot policy, its budget), or for capacity held by a job running past its "
                   "expected_hours or giving no length, or taken first by one queued ahead that gives no length "
                   "(its reason then names those jobs)")

REASON = ("why it is in this state, in a sentence; for a queued job, as of this read, followed by what its "
          "estimated_start leaves unsaid: 'estimated to start at …, after its deadline at …' (or 'too late for its "
          "deadline at … with its expected …'), or, waiting for capacity with no estimate, 'no start estimate: what it "
          "needs is held by <job> (running 1.5 h past its expected 30 min); when that ends cannot be told'. The same "
          "words in /v1/jobs, /v1/costs' queue, the dashboard, the CLI and Slack")


class JobOut(BaseModel):
    """A job as the API shows it. Its own times (``submitted_at``, ``updated_at``, ``deadline``, ``estimated_start``,
    an attempt's ``*_at``) are ISO 8601 UTC (``...Z``); the times inside what a job's script reported,
    ``progress.at``, ``progress.first_at``, ``last_checkpoint.at`` and an attempt's ``checkpoint.at``, are Unix
    epoch seconds (a number), as the points of ``GET /v1/jobs/{id}/metrics`` are."""

    id: str
    name: str
    team: str
    state: JobState
    reason: str | None = Field(description=REASON)
    priority: int
    submitted_at: str | None
    updated_at: str | None
    deadline: str | None
    budget: Money | None
    spent: Money | None
    quote: dict[str, Any] | None = Field(description="the admission quote: per tier, $/h, the estimate and after_run "
                                                     "(micro-dollars a cloud cluster is billed after its run, within "
                                                     "the estimate)")
    placement: dict[str, Any] | None
    attempts: int
    checkpoint_uri: str | None
    queue_position: int | None
    estimated_start: str | None = Field(description=ESTIMATED_START)
    progress: dict[str, Any] | None = Field(description="the latest step report: step, total_steps, metrics (a value "
                                                        "sent as NaN or Infinity is null), attempt, first_step; "
                                                        "`at` and `first_at` are Unix epoch seconds")
    last_checkpoint: dict[str, Any] | None = Field(description="the latest committed checkpoint: step, uri, attempt; "
                                                               "`at` is Unix epoch seconds")
    diagnosis: dict[str, Any] | None = Field(description="a failure explained in plain words")
    pinned_tier: str | None = Field(None, description="the tier the job's attempts are held to from now on "
                                                      "(POST /v1/jobs/{id}/ondemand: ondemand; or the reliable tier "
                                                      "the broker moved it to, leaving spot to meet its deadline), or "
                                                      "null; DELETE /v1/jobs/{id}/ondemand takes either back")
    pinned_by: str | None = Field(None, description="who pinned it: the user's name, or `deadline` (the broker, "
                                                    "leaving spot to meet the deadline); null when not pinned or "
                                                    "pinned by a broker of an earlier version")
    version: int
    attempt_list: list[AttemptOut] | None = Field(None, description="one job's own page only")


class JobList(BaseModel):
    jobs: list[JobOut]


class JobBrief(BaseModel):
    id: str
    name: str
    state: str


class CancelRefused(BaseModel):
    id: str
    detail: str = Field(description="why it was not cancelled: no such job this token sees, ...")


class CancelBatchOut(BaseModel):
    """``POST /v1/jobs/cancel``: each job picked, in one of three lists."""
    cancelled: list[JobBrief] = Field(description="cancelled now, or already being cancelled (`cancelling`)")
    already_ended: list[JobBrief] = Field(description="had ended (succeeded, failed, ...): nothing to cancel")
    refused: list[CancelRefused]
    already_cancelling: list[str] = Field(description="the ids of the jobs in `cancelled` that another cancel was "
                                                      "already stopping: not cancelled by this request")


class DryRunOut(BaseModel):
    """``POST /v1/jobs?dry_run=true``: what the submit would do, nothing stored (no job, no event, the
    Idempotency-Key not taken). A task the submit would refuse gets the submit's own error instead (same status,
    ``field`` and ``detail``), so a dry run checks a task file."""

    dry_run: bool = Field(description="always true: nothing was stored")
    existing_job: str | None = Field(description="the job a submit with this Idempotency-Key already made, which the "
                                                 "submit would answer with (nothing new would be queued); else null")
    name: str
    team: str
    priority: int
    budget: Money
    deadline: str | None
    expected_hours: str | None
    quote: dict[str, Any] | None = Field(description="the admission quote, as a submit stores it on the job "
                                                     "(JobOut.quote): per tier, $/h, the estimate and after_run")
    estimate: Money | None = Field(description="the cheapest tier's estimate for expected_hours (after_run "
                                               "included); null when no expected_hours is given (see price_per_hour)")
    price_per_hour: Money | None = Field(description="the cheapest tier's price per hour, all nodes")
    budget_covers: dict[str, bool] | None = Field(description="per tier quoted, whether the budget covers its "
                                                              "estimate; null without expected_hours")
    budget_lasts_seconds: int | None = Field(description="without expected_hours: how long the budget runs the job "
                                                         "until its budget stop on the cheapest tier it can start on "
                                                         "(the clean stop and any billing after the run kept out); "
                                                         "else null")
    placement: dict[str, Any] | None = Field(description="where the scheduler would place it now (tier, cloud, "
                                                         "region, zone or pool, instance type, $/h), as the job's "
                                                         "placement; null: it would wait (reason says why)")
    reason: str | None = Field(description="the scheduler's word on it now: 'placed on ...', or why it would wait")
    queue_position: int | None = Field(description="where it would stand among the queued jobs (1: next)")
    estimated_start: str | None = Field(description=ESTIMATED_START)


class EventOut(BaseModel):
    seq: int
    time: str | None
    event: str
    from_: str | None = Field(alias="from")
    to: str | None
    reason: str | None
    actor: str | None
    attempt: int | None
    data: dict[str, Any] | None


class EventList(BaseModel):
    events: list[EventOut]


class LogsOut(BaseModel):
    attempt: int | None = Field(description="the attempt read (the newest unless ?attempt= named one); null: none "
                                            "has run yet. Pass it back as ?attempt= with ?offset=: an offset is "
                                            "into one attempt's output")
    data: str = Field(description="the output from ?offset= on, at most 1 MiB, ending on a whole UTF-8 character")
    offset: int = Field(description="pass it back as ?offset= (with ?attempt=) to read on")
    done: bool = Field(description="the attempt has ended (or the job ended before any ran): its output grows no "
                                   "more, so a page with no data is its end")


class ProgressAck(BaseModel):
    ok: bool
    state: JobState
    stop: bool = Field(description="the broker wants the script to checkpoint and exit")


class Health(BaseModel):
    ok: bool = Field(description="the process answers (always true in a 200)")
    engine: bool = Field(description="the reconcile loop runs in this process")
    store: str = Field(description="'ok', or why the store did not answer")


class WhoAmI(BaseModel):
    name: str = Field(description="who the token is: 'admin', or 'team:<team>'")
    team: str | None = Field(description="the caller's team; null for an admin, who sees every team")
    admin: bool = Field(description="whether the token is the admin's")


class WorkdirOut(BaseModel):
    """An uploaded workdir pack (a tar.gz of the task's directory), named by its content's SHA-256."""

    digest: str = Field(examples=["sha256:" + "0" * 64], description="what `broker.workdir` names in a task")
    bytes: int = Field(description="the pack's size (compressed)")
    max_bytes: int = Field(description="the largest pack this broker accepts (max_workdir_bytes)")
    files: int | None = Field(None, description="files and links in it (when it was just stored)")


class WorkdirLimits(BaseModel):
    max_bytes: int = Field(description="the largest pack this broker accepts (max_workdir_bytes)")
    max_unpacked_bytes: int = Field(description="the most a pack may unpack to")
    host_paths: bool = Field(description="whether this caller's submits may name paths on the broker's host (a "
                                         "workdir, file_mounts sources) instead of uploading them: an admin's only")


class ByTier(BaseModel):
    onprem: Money
    ondemand: Money
    spot: Money


class CostWindow(BaseModel):
    since: str
    until: str
    period: str = Field(description="24h, 7d, 30d, 90d, or custom")


class CostTotals(BaseModel):
    spent: Money
    ondemand_equivalent: Money = Field(description="the same attempts at on-demand prices")
    saving: Money
    saving_percent: int | None
    by_tier: ByTier


class CostDay(ByTier):
    date: str
    total: Money
    ondemand_equivalent: Money
    saving: Money
    saving_percent: int | None = Field(description="the share of the on-demand equivalent saved, rounded down (negative: paid more); null with no on-demand figure")


class CostTeam(BaseModel):
    team: str
    spent: Money
    ondemand_equivalent: Money
    saving: Money
    saving_percent: int | None = Field(description="the share of the on-demand equivalent saved, rounded down (negative: paid more); null with no on-demand figure")
    by_tier: ByTier


class CostJob(BaseModel):
    id: str
    name: str
    team: str
    state: JobState
    spent: Money
    ondemand_equivalent: Money
    saving: Money
    saving_percent: int | None = Field(description="the share of the on-demand equivalent saved, rounded down (negative: paid more); null with no on-demand figure")
    attempts: int


class Preemption(BaseModel):
    job_id: str
    team: str
    attempt: int
    zone: str
    tier: str
    state: AttemptState
    time: str | None
    recovery_seconds: int = Field(description="until the next attempt ran (or until now while the job waits, or "
                                              "until the job ended if it ended without resuming)")
    recovered: bool
    waiting: bool = Field(description="the job still waits to resume from it (not recovered, and not ended)")


class ZoneCount(BaseModel):
    zone: str
    count: int


class Preemptions(BaseModel):
    count: int = Field(description="attempts preempted (a node lost without notice is counted in `lost`)")
    lost: int = Field(description="attempts whose node was lost without notice: an on-prem pool node that went "
                                  "away (a pool is not preempted), a VM that vanished")
    recovery_seconds: int = Field(description="from each preemption and each lost node (`events` says which)")
    by_zone: list[ZoneCount] = Field(description="preemptions by zone")
    events: list[Preemption] = Field(description="the newest 50")


class SpentOfBudget(BaseModel):
    """A spend and its budget as two strings to read side by side: to the same decimals when the budget has more
    than cents ("$0.002" of "$0.002", where ``spent.usd`` alone reads "$0.0020")."""

    spent: str
    budget: str


class BudgetBurn(BaseModel):
    id: str
    name: str
    team: str
    state: JobState
    spent: Money
    budget: Money
    spent_of_budget: SpentOfBudget
    percent: int | None
    price_per_hour: Money
    hours_left: str | None = Field(description="at the current price, rounded down: to a tenth from an hour on, to "
                                                 "two significant figures under one (\"0.19\")")


class QueuedJob(BaseModel):
    id: str
    name: str
    team: str
    position: int | None
    estimated_start: str | None = Field(description=ESTIMATED_START)
    priority: int
    reason: str | None = Field(description=REASON)
    deadline: str | None = Field(None, description="when it must be done (ISO, UTC), if it has a deadline")
    waiting_seconds: int = Field(description="since the job last entered the queue (its submit, its resume, or its "
                                             "requeue after a run): a job resumed days after its submit has waited "
                                             "since its resume")


class Viewer(BaseModel):
    admin: bool
    team: str | None


class MonthlyCap(BaseModel):
    """A team's monthly cap (``teams.<team>.monthly_budget_usd``) and where the team stands against it this month."""

    team: str
    month: str = Field(description="the calendar month in UTC, e.g. 2026-12")
    cap: Money
    spent: Money = Field(description="what the team's jobs spent this month (this report's figure for the month)")
    held: Money = Field(description="the unspent budgets of the team's jobs not ended: what they may still spend")
    holders: int = Field(description="how many jobs not ended hold some of it")
    free: Money = Field(description="cap - spent - held: the most a new job's budget (or a raise, or a resume's "
                                    "unspent budget) may be; micros is negative only if the cap was lowered below "
                                    "what is held")
    text: str


class FailedJob(BaseModel):
    id: str
    name: str
    team: str
    state: str = Field(description="failed, or stopped_budget")
    ended: str | None = Field(description="when it ended (ISO 8601, UTC)")
    reason: str = Field(description="why, in plain words (the diagnosis of its last attempt, else its reason)")
    spent: Money


class Failures(BaseModel):
    count: int = Field(description="jobs in view that ended failed or stopped at their budget inside the window")
    jobs: list[FailedJob] = Field(description="the newest 10 of them, newest first")


class CostReport(BaseModel):
    """``GET /v1/costs``: money is exact micro-dollars with a display string."""

    team: str | None = Field(description="the team reported on; null: all teams (admins)")
    window: CostWindow
    currency: str
    totals: CostTotals
    by_day: list[CostDay]
    by_team: list[CostTeam]
    top_jobs: list[CostJob]
    preemptions: Preemptions
    rounding_note: str | None = Field(description="a sentence when the rows shown, each rounded up on its own, do "
                                                  "not add up to the totals shown (rounded once from exact sums)")
    retention_note: str | None = Field(
        default=None, description="a sentence on the jobs the retention policy deleted (job_retention_days): how "
                                  "much of the totals is their spend, counted to the hour (they are listed nowhere); "
                                  "and, when the window begins before the retention horizon, that the totals leave "
                                  "out jobs pruned before their costs were kept")
    budget_burn: list[BudgetBurn] = Field(description="running jobs: how fast they eat their budgets")
    queue: list[QueuedJob]
    teams: list[str]
    viewer: Viewer
    monthly_caps: list[MonthlyCap] = Field(
        description="the teams in view that have a monthly cap: where each stands this month, whatever the window")
    failures: Failures | None = Field(
        default=None, description="the jobs in view that ended failed or stopped at their budget in the window "
                                  "(the dashboard's \"Recent failures and budget stops\")")


class AttemptCost(BaseModel):
    n: int
    state: AttemptState
    tier: str
    zone: str
    instance_type: str | None
    num_nodes: int = Field(description="the nodes of its placement: `price_per_hour`, `cost` and "
                                       "`ondemand_equivalent` are for all of them")
    price_per_hour: Money | None
    cost: Money
    ondemand_equivalent: Money
    seconds: int | float = Field(description="the seconds it was billed for, exact (a float when not whole)")
    started_at: str | None
    ended_at: str | None
    reason: str | None


class MetricPoint(BaseModel):
    time: float | str | None = Field(description="when the broker received the report: Unix epoch seconds")
    step: int | None
    total_steps: int | None
    metrics: dict[str, float]


class ReportedPoint(BaseModel):
    """One step report of a job's script (``POST /v1/jobs/{id}/progress``), as the broker keeps it."""

    seq: int = Field(description="its place among the job's points, from 1")
    time: float = Field(description="when the broker received it: Unix epoch seconds (not ISO 8601)")
    step: int | None
    total_steps: int | None = Field(None, description="only when the report gave it")
    metrics: dict[str, float | None] = Field(description="as reported; null: a value sent as NaN or Infinity (a "
                                                         "diverged loss), kept with the rest of the report")
    attempt: int | None = Field(None, description="the attempt that sent it, when the script named it "
                                                  "($BROKER_ATTEMPT)")
    checkpoint: dict[str, Any] | None = Field(None, description="a checkpoint committed with it: step and uri")


class MetricsOut(BaseModel):
    """``GET /v1/jobs/{id}/metrics``: the points the job reported (the newest 10,000), oldest first."""

    points: list[ReportedPoint]


class JobCosts(BaseModel):
    """``GET /v1/costs/jobs/{id}``: one job, all time."""

    job: JobOut
    spent: Money
    ondemand_equivalent: Money
    saving: Money
    saving_percent: int | None
    spent_of_budget: SpentOfBudget
    attempts: list[AttemptCost]
    rounding_note: str | None = Field(default=None, description="a sentence when the attempts' costs shown, each "
                                      "rounded up on its own, do not add up to the job's total shown; else null")
    metrics: list[MetricPoint]


def ok(model: type[BaseModel], description: str = "OK", status: int = 200) -> dict[int | str, dict[str, Any]]:
    """``responses=`` entry for a route's ``status`` answer, documented as ``model``."""
    return {status: {"model": model, "description": description}}


def answers(model: type[BaseModel], *codes: int) -> dict[str, Any]:
    """Route keywords: the 200 answer documented as ``model`` (the route's dict is sent as it is,
    ``response_model=None``) and the error ``codes`` it can answer."""
    return {"response_model": None, "responses": {**ok(model), **errors(*codes)}}


WHY = {
    400: "a malformed request (a Content-Length that is not a number; a header such as Idempotency-Key or "
         "Authorization sent twice with different values: `field` names it)",
    401: "no bearer token, or one the broker does not know",
    403: "the token may not do this (another team's jobs or costs; admins only)",
    404: "no such job (or attempt, or zone) that this token can see; or no such route (`field` names the `path`)",
    409: "the job's state does not allow this now: `detail` says why, and `field` names what it is about where there "
         "is one (the job's `state`, its `budget`, `broker.checkpoint`, `Idempotency-Key`, ...)",
    413: "the body is larger than the broker accepts",
    415: "a body the API does not read: `field` names `Content-Type` (JSON, or YAML for a task) or `Content-Encoding` "
         "(send it uncompressed)",
    422: "bad input: `field` names it and `detail` says why",
    500: "an unexpected error, logged by the broker; a read can be retried, a change checked first (`detail` says)",
    503: "the job store did not answer (a `Retry-After` header says when to try again; `detail` says whether a "
         "change may have been made), or this broker process cannot serve it (no launcher to read logs from)",
}

COMMON = (400, 413, 415, 500, 503)  # any request: the body checks run before routing, the last-resort handler, a store that is down


def errors(*codes: int) -> dict[int | str, dict[str, Any]]:
    """``responses=`` for a route: each code with :class:`ApiError` and what it means."""
    return {code: {"model": ApiError, "description": WHY[code]} for code in codes}


def body(schema: dict[str, Any], *, yaml: bool = False, example: Any = None,
         examples: dict[str, dict[str, Any]] | None = None) -> dict[str, Any]:
    """``openapi_extra=`` declaring a JSON request body (and its YAML text form with ``yaml``); ``examples``: named
    ones (``summary`` and ``value`` each), the first the one Swagger UI's "Try it out" fills in."""
    shown = {"example": example} if example else {"examples": examples} if examples else {}
    content: dict[str, Any] = {"application/json": {"schema": schema, **shown}}
    if yaml:
        content["application/yaml"] = {"schema": {"type": "string", "description": "the same task as YAML text"}}
    return {"requestBody": {"required": True, "content": content}}


_MONEY = {"anyOf": [{"type": "string"}, {"type": "number"}], "description": "dollars, exact to a millionth: \"12.50\" or 12.5"}

TASK = body({
    "type": "object",
    "description": "A SkyPilot task (any valid one is kept as given for the launcher) with an optional "
                   "`broker:` section. Unknown keys in `broker:` are refused, naming the key.",
    "additionalProperties": True,
    "properties": {
        "name": {"type": "string"},
        "resources": {"type": "object", "description": "SkyPilot resources: accelerators, any_of, infra, use_spot, ..."},
        "num_nodes": {"type": "integer"},
        "setup": {"type": "string"},
        "run": {"type": "string"},
        "envs": {"type": "object"},
        "broker": {
            "type": "object",
            "properties": {
                "team": {"type": "string", "description": "default: the token's team"},
                "budget_usd": {**_MONEY, "description": "the cap, never exceeded (default: the team's default budget)"},
                "deadline": {"type": "string", "description": "a duration from now (6h, 1d12h), or an ISO time with its timezone (2026-12-01T18:00Z)"},
                "expected_hours": {"type": "number", "description": "makes the admission quote a total, not a price per hour"},
                "priority": {"type": "integer"},
                "max_price_per_hour": _MONEY,
                "checkpoint": {"type": "string", "description": "fsspec URI: s3://, gs://, file://"},
                "retry": {"type": "object", "properties": {"max_restarts_on_errors": {"type": "integer"},
                                                           "recover_on_exit_codes": {"type": "array", "items": {"type": "integer"}}}},
            },
        },
    },
}, yaml=True, examples={
    # the first is what "Try it out" sends: one the broker's default config (one CPU pool, `local`) accepts; the A100
    # example was refused 422 there ("no offer has 1x A100"), by the very broker serving the document
    "cpu": {"summary": "a CPU job: runs on the default config's local pool",
            "value": {"name": "finetune", "resources": {"cpus": 1}, "run": "python train.py",
                      "broker": {"budget_usd": "20", "deadline": "12h", "expected_hours": 4}}},
    "gpu": {"summary": "a GPU job: needs a pool or zone with A100s in the broker's config, or the clouds "
                       "(BROKER_LAUNCHER=skypilot); the default config has none, and refuses it 422",
            "value": {"name": "finetune", "resources": {"accelerators": "A100:1"}, "run": "python train.py",
                      "broker": {"budget_usd": "20", "deadline": "12h", "expected_hours": 4}}},
})

# a key other than budget_usd is refused (422, naming it): {"budget_usd": 40, "deadline": "6h"} is not half-applied
BUDGET = body({"type": "object", "required": ["budget_usd"], "properties": {"budget_usd": _MONEY},
               "additionalProperties": False,
               "description": "The new cap; any other key is refused (422, naming it)."},
              example={"budget_usd": "40"})

# read as a submit's broker.deadline; null removes it; any other key is refused (422, naming it)
DEADLINE = body({"type": "object", "required": ["deadline"],
                 "properties": {"deadline": {"type": ["string", "null"],
                                             "description": "a duration from now (6h, 1d12h), or an ISO time with its "
                                                            "timezone (2026-12-01T18:00Z, '2026-12-01 18:00 "
                                                            "Europe/Berlin'), as a submit's broker.deadline; null "
                                                            "removes the deadline"}},
                 "additionalProperties": False,
                 "description": "The new deadline, or null for none; any other key is refused (422, naming it)."},
                example={"deadline": "6h"})

# a boolean is taken too, as its text ("True"), as SkyPilot does with a task's envs
_ENV_MAP = {"type": "object", "additionalProperties": {"anyOf": [{"type": "string"}, {"type": "number"},
                                                                 {"type": "boolean"}]},
            "description": "names to values: a string, a number or a boolean (set as its text: true is \"True\")"}
RESUME = {"requestBody": {"required": False, "content": {"application/json": {"schema": {
    "type": "object",
    "description": "Optional: envs and secrets set on the task from this attempt on (secrets sealed at rest), as "
                   "`broker submit --env/--secret` give them; a job given them resumes without force.",
    "properties": {"envs": _ENV_MAP, "secrets": _ENV_MAP}}, "example": {"secrets": {"HF_TOKEN": "hf_..."}}}}}}

PROGRESS = {"security": [{"jobToken": []}], **body({
    "type": "object",
    "description": "A step report and/or a committed checkpoint (at least one of `step` and `checkpoint`).",
    "properties": {
        "step": {"type": "integer", "minimum": 0},
        "total_steps": {"type": "integer", "minimum": 0},
        "metrics": {"type": "object", "additionalProperties": {"type": "number"}, "description": "up to 50 numbers"},
        "checkpoint": {"type": "object", "properties": {"step": {"type": "integer"}, "uri": {"type": "string"}}},
        "attempt": {"type": "integer", "minimum": 1,
                    "description": "the sending attempt ($BROKER_ATTEMPT): a report of one the job has moved past "
                                   "is refused (409) and changes nothing"},
    },
}, example={"step": 1200, "total_steps": 5000, "metrics": {"loss": 0.71}, "attempt": 1})}

WORKDIR_PACK = {"requestBody": {"required": True, "content": {"application/octet-stream": {
    "schema": {"type": "string", "format": "binary"},
    "description": "the workdir as a tar.gz whose SHA-256 is the digest in the path (`broker submit` makes it): "
                   "regular files, directories and links within it only; at most max_bytes"}}}}

CANCEL_MANY = body({
    "type": "object",
    "description": "The jobs to cancel, one way: `ids`, `name` (every job not ended whose name begins so) or "
                   "`all: true` (every job not ended of your team; an admin names the `team`).",
    "properties": {
        "ids": {"type": "array", "items": {"type": "string", "minLength": 1}, "minItems": 1, "maxItems": 1000},
        "name": {"type": "string", "minLength": 1, "description": "the start of the jobs' names"},
        "all": {"type": "boolean"},
        "team": {"type": "string", "minLength": 1, "description": "with name or all: this team's jobs (admins)"},
    },
}, example={"name": "sweep3-"})

FAULT = body({
    "type": "object",
    "required": ["kind"],
    "properties": {
        "kind": {"type": "string", "enum": ["preempt", "kill", "zone"]},
        "job_id": {"type": "string", "description": "preempt, kill: the job whose running attempt is hit"},
        "zone": {"type": "string", "description": "zone: the simulated zone"},
        "available": {"type": ["boolean", "null"], "description": "zone: capacity off, on, or back to its trace"},
    },
}, example={"kind": "preempt", "job_id": "j-3fa9c1b2e0"})

SECURITY_SCHEMES = {
    "bearerAuth": {"type": "http", "scheme": "bearer",
                   "description": "a team's token or the admin token: `Authorization: Bearer <token>`; without one, "
                                  "or with one the broker does not know, a route asking for it answers 401"},
    "jobToken": {"type": "http", "scheme": "bearer",
                 "description": "a job's own token ($BROKER_JOB_TOKEN in its environment), for its progress reports "
                                "only; a team's or the admin token is refused there (403)"},
}

IDEMPOTENCY_KEY = ("1 to 200 characters (an empty one is refused, 422), naming this submit within the team: a retry "
                   "with the same key answers the job the first one made (200) instead of queueing a second; one "
                   "already used for a different task is refused (422). Sent twice with different values: 400")


def secured(document: dict[str, Any]) -> dict[str, Any]:
    """The built OpenAPI ``document`` with its bearer tokens said the way clients read them: ``bearerAuth`` on every
    route (``jobToken`` where its ``openapi_extra`` names it), none on a route that reads no ``Authorization`` header
    (health and readiness), and that header taken out of each route's parameters. The routes read it as a plain
    header, which the document listed as an optional parameter of each, so Swagger UI had no "Authorize" and a
    generated client no token setting, though every call without it is a 401. Changed in place, once."""
    components = document.setdefault("components", {})
    if "securitySchemes" in components:
        return document
    components["securitySchemes"] = SECURITY_SCHEMES
    document["security"] = [{"bearerAuth": []}]
    for operations in document.get("paths", {}).values():
        for operation in operations.values():
            if not isinstance(operation, dict):
                continue
            params = operation.get("parameters", [])
            token = [p for p in params if p.get("in") == "header" and p.get("name", "").lower() == "authorization"]
            if not token:
                operation.setdefault("security", [])  # asks no token
            for p in params:
                if p.get("in") == "header" and p.get("name", "").lower() == "idempotency-key":
                    p["description"] = IDEMPOTENCY_KEY
            if token:
                operation["parameters"] = [p for p in params if p not in token]
                if not operation["parameters"]:
                    del operation["parameters"]
    return document
