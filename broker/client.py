"""A small Python client for the broker's HTTP API (the CLI is built on it).

    from broker.client import BrokerClient
    client = BrokerClient()                      # BROKER_URL / BROKER_TOKEN, or the local broker
    job = client.submit(open("task.yaml").read(), budget="20", deadline="6h")
    client.wait(job["id"])
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any, Iterator

import httpx
import yaml

from broker.config import default_data_dir

FINAL = {"succeeded", "failed", "cancelled", "stopped_budget"}


class BrokerError(Exception):
    """The broker refused a request; ``status`` is the HTTP status, ``field`` the field it names."""

    def __init__(self, status: int, detail: str, field: str | None = None):
        self.status = status
        self.detail = detail
        self.field = field
        super().__init__(detail)


def default_token(env: dict[str, str] | os._Environ = os.environ) -> str | None:
    """``BROKER_TOKEN``, else the admin token a local ``broker serve`` wrote to its data dir."""
    if env.get("BROKER_TOKEN"):
        return env["BROKER_TOKEN"]
    path = default_data_dir(env) / "admin-token"
    return path.read_text().strip() if path.exists() else None


class BrokerClient:
    def __init__(self, url: str | None = None, token: str | None = None, *, timeout: float = 30.0):
        self.url = (url or os.environ.get("BROKER_URL") or "http://127.0.0.1:8000").rstrip("/")
        self.token = token or default_token()
        headers = {"Authorization": f"Bearer {self.token}"} if self.token else {}
        self._http = httpx.Client(base_url=self.url, headers=headers, timeout=timeout)

    def close(self) -> None:
        self._http.close()

    def __enter__(self) -> BrokerClient:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def _call(self, method: str, path: str, **kw) -> Any:
        try:
            r = self._http.request(method, path, **kw)
        except httpx.ConnectError:
            raise BrokerError(0, f"cannot reach the broker at {self.url} (is `broker serve` running?)") from None
        except httpx.TimeoutException:
            raise BrokerError(0, f"the broker at {self.url} did not answer in time") from None
        if r.status_code >= 400:
            try:
                body = r.json()
                detail, field = body.get("detail", r.text), body.get("field")
            except ValueError:
                detail, field = r.text or r.reason_phrase, None
            raise BrokerError(r.status_code, str(detail), field)
        return r.json()

    # -- jobs ------------------------------------------------------------------------------------

    def submit(self, spec: str | dict, *, budget: str | None = None, team: str | None = None,
               deadline: str | None = None, idempotency_key: str | None = None) -> dict:
        """Submit a task (YAML text or a mapping); ``budget``/``team``/``deadline`` override its broker: section."""
        task = yaml.safe_load(spec) if isinstance(spec, str) else dict(spec)
        if not isinstance(task, dict):
            raise BrokerError(0, "the task file must hold a mapping (a SkyPilot task)")
        overrides = {k: v for k, v in {"budget_usd": budget, "team": team, "deadline": deadline}.items() if v is not None}
        if overrides:
            task["broker"] = {**(task.get("broker") or {}), **overrides}
        headers = {"Idempotency-Key": idempotency_key} if idempotency_key else {}
        return self._call("POST", "/v1/jobs", json=task, headers=headers)

    def jobs(self, *, state: str | None = None, team: str | None = None) -> list[dict]:
        params = {k: v for k, v in {"state": state, "team": team}.items() if v}
        return self._call("GET", "/v1/jobs", params=params)["jobs"]

    def job(self, job_id: str) -> dict:
        return self._call("GET", f"/v1/jobs/{job_id}")

    def events(self, job_id: str) -> list[dict]:
        return self._call("GET", f"/v1/jobs/{job_id}/events")["events"]

    def cancel(self, job_id: str) -> dict:
        return self._call("POST", f"/v1/jobs/{job_id}/cancel")

    def resume(self, job_id: str, *, force: bool = False) -> dict:
        return self._call("POST", f"/v1/jobs/{job_id}/resume", params={"force": "true"} if force else None)

    def set_budget(self, job_id: str, budget_usd: str) -> dict:
        return self._call("POST", f"/v1/jobs/{job_id}/budget", json={"budget_usd": str(budget_usd)})

    def switch_to_ondemand(self, job_id: str) -> dict:
        return self._call("POST", f"/v1/jobs/{job_id}/ondemand")

    def fault(self, kind: str, *, job_id: str | None = None, zone: str | None = None,
              available: bool | None = None) -> dict:
        return self._call("POST", "/v1/admin/faults",
                          json={"kind": kind, "job_id": job_id, "zone": zone, "available": available})

    def costs(self, **params) -> dict:
        return self._call("GET", "/v1/costs", params=params)

    def job_costs(self, job_id: str) -> dict:
        return self._call("GET", f"/v1/costs/jobs/{job_id}")

    def logs(self, job_id: str, *, offset: int = 0, attempt: int | None = None) -> dict:
        params: dict[str, Any] = {"offset": offset}
        if attempt:
            params["attempt"] = attempt
        return self._call("GET", f"/v1/jobs/{job_id}/logs", params=params)

    def follow_logs(self, job_id: str, *, poll: float = 0.5) -> Iterator[str]:
        """Yield log text as it appears, across attempts, until the job ends."""
        attempt, offset = None, 0
        while True:
            chunk = self.logs(job_id, offset=offset, attempt=attempt)
            if chunk["attempt"] is not None and attempt is None:
                attempt = chunk["attempt"]
            if chunk["data"]:
                yield chunk["data"]
                offset = chunk["offset"]
                continue
            job = self.job(job_id)
            if attempt is not None and job["attempts"] > attempt:
                attempt, offset = attempt + 1, 0
                continue
            if job["state"] in FINAL and (attempt is None or attempt >= job["attempts"]):
                return
            time.sleep(poll)

    def wait(self, job_id: str, *, timeout: float = 3600, poll: float = 0.5) -> dict:
        deadline = time.monotonic() + timeout
        while True:
            job = self.job(job_id)
            if job["state"] in FINAL:
                return job
            if time.monotonic() > deadline:
                raise TimeoutError(f"job {job_id} still {job['state']} after {timeout} s")
            time.sleep(poll)

    def health(self) -> dict:
        return self._call("GET", "/v1/healthz")


def read_task_file(path: str | Path) -> str:
    p = Path(path)
    if not p.exists():
        raise BrokerError(0, f"{path}: no such file")
    return p.read_text()
