"""Cost routes: ``GET /v1/costs`` (the report, for scripts and the page) and ``GET /dashboard``.

The page is static HTML/JS/CSS shipped in ``broker/api/static`` (no CDN: it
works offline). It asks for a token, keeps it in ``localStorage`` and calls
``/v1/costs`` with ``Authorization: Bearer``, so it sees exactly what the
token may see: a team its own spend, the admin every team's.
"""

# no `from __future__ import annotations`: FastAPI must see the real types of local aliases

from importlib import resources
from typing import Annotated

from fastapi import APIRouter, Depends, Header, Request
from fastapi.responses import HTMLResponse, Response

from broker import costs
from broker.api.query import Text
from broker.api.schema import CostReport, JobCosts, answers
from broker.auth import Principal, authenticate
from broker.config import Settings
from broker.service import Invalid
from broker.views import beside_state, iso, job_view, shown_reason

FAILURES = 10
"""The most jobs the page's "Recent failures and budget stops" lists (``failures.count`` says how many there are)."""
FAILED_STATES = ("failed", "stopped_budget")

STATIC_TYPES = {".js": "text/javascript; charset=utf-8", ".css": "text/css; charset=utf-8",
                ".svg": "image/svg+xml"}
PAGE_HEADERS = {
    # everything the page needs comes from the broker itself
    "Content-Security-Policy": "default-src 'self'; img-src 'self' data:; style-src 'self'; script-src 'self'; "
                               "connect-src 'self'; frame-ancestors 'none'",
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    "Cache-Control": "no-store",
}


def _static(name: str) -> bytes | None:
    """One of the files shipped in ``static``, by its exact name, else ``None``. The name is looked up among those
    listed, never handed to the filesystem: one too long for it (ENAMETOOLONG) was a 500 and a traceback."""
    folder = resources.files("broker.api").joinpath("static")
    f = next((entry for entry in folder.iterdir() if entry.name == name), None)
    return f.read_bytes() if f is not None and f.is_file() else None


def router(service, settings: Settings) -> APIRouter:
    r = APIRouter()

    def principal(authorization: Annotated[str | None, Header()] = None) -> Principal:
        return authenticate(settings, authorization)

    Caller = Annotated[Principal, Depends(principal)]

    def team_for(caller: Principal, team: str | None) -> str | None:
        if caller.admin:
            service.check_team(team)
            return team or None
        if team and team != caller.team:
            raise Invalid("team", f"you can see only your team's costs ({caller.team})", status=403)
        return caller.team

    @r.get("/v1/costs", tags=["costs"], **answers(CostReport, 401, 403, 422))
    def get_costs(caller: Caller, team: Text = None, period: Text = None, since: Text = None,
                  until: Text = None) -> dict:
        """Spend, saving against on-demand, preemptions, budget burn and the queue, for a team and a window.

        ``period`` is ``24h``, ``7d`` (default), ``30d`` or ``90d`` ending now (or ``1d``, ``1w``, ``168h``, ``720h``,
        ``2160h``, the same periods spelled otherwise: the report names them as those); or give ISO ``since``
        (and optionally ``until``): a date is that day from its start in UTC, a time needs its timezone
        (``2026-11-30T10:00Z`` or ``+01:00``; without one it is a 422, as a deadline is). Money is integer micro-dollars (``micros``) with a display string
        (``usd``). Non-admin tokens see only their own team.
        """
        now = service.clock()
        try:
            win = costs.window(now=now, period=period, since=since, until=until)
        except costs.CostQueryError as exc:
            raise Invalid(exc.field, exc.reason) from None
        scope = team_for(caller, team)
        history = costs.gather(service.store, team=scope, win=win, retention_days=settings.job_retention_days)
        q = service.queue_waits(caller)
        body = costs.report(history.jobs, history.attempts, win=win, now=now, positions=q.positions, starts=q.starts,
                            team=scope, ledger=history.ledger, retention_days=history.retention_days)
        # each queued job's reason as its own view says it (a start too late for its deadline, why no estimate), from
        # the whole job the queue read: the report's rows hold only the fields the costs need
        for row in body["queue"]:
            job = q.queued.get(row["id"])
            row["deadline"] = iso(job.deadline) if job is not None else None  # (the report reads no deadline)
            if job is not None:
                row["reason"] = shown_reason(job, q.starts.get(job.id), q.waiting.get(job.id))
        body["failures"] = _failures(history.jobs, win)
        body["teams"] = _teams(history.jobs) if caller.admin else [caller.team]
        body["monthly_caps"] = service.monthly_caps(scope, now)  # this month's, whatever the window
        body["viewer"] = {"admin": caller.admin, "team": caller.team}
        return body

    def _failures(window_jobs, win) -> dict:
        """The jobs of the report that ended failed or stopped at their budget inside the window, newest end first:
        how many, and the :data:`FAILURES` newest, each with its reason in plain words (the diagnosis of its last
        attempt, else its stored reason) and its spend. A job that failed having spent nothing is in no other table
        of the page, and one that spent a little only among the most expensive. Reads at most :data:`FAILURES` whole
        jobs (for their diagnosis); the rest comes from the report's own read."""
        ended = [j for j in window_jobs if j.state.value in FAILED_STATES and j.updated_at is not None
                 and win.since <= j.updated_at < win.until]
        ended.sort(key=lambda j: (j.updated_at, j.id), reverse=True)
        rows = []
        for j in ended[:FAILURES]:
            full = service.store.get_job(j.id)
            diagnosis = (full.diagnosis if full is not None else None) or {}
            reason = str(diagnosis.get("text") or diagnosis.get("sentence") or "") \
                or beside_state(j.state.value, full.reason if full is not None else j.reason)
            rows.append({"id": j.id, "name": j.name, "team": j.team, "state": j.state.value,
                         "ended": iso(j.updated_at), "reason": reason, "spent": costs.money(j.spent)})
        return {"count": len(ended), "jobs": rows}

    def _teams(window_jobs) -> list[str]:
        """The teams an admin may filter on: those the config names, those with jobs in the window (a team taken
        out of the config still has its spend there), and the default team, where the admin's own jobs go, once it
        has a job. Named always, it was listed beside the configured teams on a broker where nothing used it."""
        teams = {*settings.teams, *(j.team for j in window_jobs)}
        if settings.default_team not in teams and service.store.list_jobs(team=settings.default_team, limit=1):
            teams.add(settings.default_team)
        return sorted(teams)

    @r.get("/v1/costs/jobs/{job_id}", tags=["costs"], **answers(JobCosts, 401, 404, 422))
    def get_job_costs(job_id: str, caller: Caller) -> dict:
        """One job: its attempts with tier, zone and cost, saving against on-demand, and its metric points."""
        job = service.get(caller, job_id)
        attempts = service.attempts(caller, job_id)
        points = service.store.metrics(job_id, limit=2000)
        q = service.queue_waits(caller, of=[job])
        return {"job": job_view(job, position=q.positions.get(job.id), estimated_start=q.starts.get(job.id),
                                waiting=q.waiting.get(job.id)),
                **costs.job_costs(job, attempts),
                "metrics": [_point(p) for p in points]}

    @r.get("/dashboard", include_in_schema=False)
    def dashboard() -> HTMLResponse:
        return HTMLResponse(_static("dashboard.html").decode(), headers=PAGE_HEADERS)

    @r.get("/dashboard/", include_in_schema=False)
    @r.get("/docs/", include_in_schema=False)
    @r.get("/redoc/", include_in_schema=False)
    def page_slash(request: Request) -> Response:
        # a browser's /dashboard/, /docs/ or /redoc/ (the router redirects no path: broker/api/app.py), to the page by
        # a relative URL, so that it stays on the host and under any prefix a proxy serves the broker at
        page = request.url.path.rstrip("/").rsplit("/", 1)[-1]
        return Response(status_code=308, headers={"Location": f"../{page}"})

    @r.get("/dashboard/static/{name}", include_in_schema=False)
    def static(name: str) -> Response:
        body = _static(name)
        ext = name[name.rfind("."):] if "." in name else ""
        if body is None or ext not in STATIC_TYPES:
            return Response(status_code=404, content=b"not found")
        return Response(content=body, media_type=STATIC_TYPES[ext], headers=PAGE_HEADERS)

    return r


def _point(p: dict) -> dict:
    """A progress point on the wire: time, step, total_steps and numeric metrics only."""
    metrics = p.get("metrics") if isinstance(p.get("metrics"), dict) else {}
    return {"time": p.get("time"), "step": p.get("step"), "total_steps": p.get("total_steps"),
            "metrics": {k: v for k, v in metrics.items() if isinstance(v, (int, float)) and not isinstance(v, bool)}}
