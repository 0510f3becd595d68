"""A launch SkyPilot's API server, or a proxy in front of it, answers with a 4xx was refused: nothing was taken.

Taken for a launch that may have been sent (as a 5xx or a cut connection must be), the attempt read pending, then gone
120 s later, and the engine launched the job again every two minutes, for ever, the user never told why — a reverse
proxy's 413 for a request body over its limit, SkyPilot's 401 for a token revoked, 403 for a role without the right,
400 for a client of another version, a rate limit's 429. Now the launch is refused with a sentence naming the status and
the fix: the task's own size (413) fails the job, the deployment's faults make it wait (the launch backoff). A 5xx, a
408 (Envoy's answer once its idle timeout fires, after it forwarded the request) or a connection cut stay a launch
that may have been sent: awaited, never sent twice.

SkyPilot's SDK is its own, unpatched, against the loopback HTTP server of test_skypilot_local_failures.py that plays a
remote API server; here its ``POST /launch`` (and its upload of a task's files) answer as each test scripts.
"""

from __future__ import annotations

import json
import time

import pytest
from test_skypilot_local_failures import TASK, _Routes, launcher, remote  # noqa: F401 (fixtures)
from test_skypilot_task import ONDEMAND_CPU, request

from launchers.base import LaunchError

AID = "j-0123456789-a2"

NGINX_PAGE = ("<html>\r\n<head><title>{0}</title></head>\r\n<body>\r\n<center><h1>{0}</h1></center>\r\n<hr><center>"
              "nginx/1.25.3</center>\r\n</body>\r\n</html>\r\n")
NGINX_413 = NGINX_PAGE.format("413 Request Entity Too Large")
NGINX_502 = NGINX_PAGE.format("502 Bad Gateway")
TOO_OLD = ("\x1b[33mYour SkyPilot client version is too old:0.9.3\n\x1b[0mThe server is running on 0.14.1 and the "
           "minimum compatible version is 0.10.0.\nUpgrade your client with:\n\x1b[33mpip install -U "
           "\"skypilot==0.14.1\"\x1b[0m")  # SkyPilot's own words (sky/server/versions.py), its colours too


def html(page: str) -> tuple[str, str]:
    return "text/html", page


def as_json(body) -> tuple[str, str]:
    return "application/json", json.dumps(body)


class ScriptedRoutes(_Routes):
    """The routes of test_skypilot_local_failures' server, with the answers a test scripts on the server: ``launch``
    for a real ``POST /launch`` (``dry_run_too``: for the dry run as well), ``upload`` for each upload of the task's
    files; each ``(status, (content type, body))``, or "cut" for a connection closed unanswered. ``answered``: the
    bodies of the launches so answered (``launches``: those taken)."""

    def _raw(self, status: int, answer: tuple[str, str]) -> None:
        content_type, text = answer
        data = text.encode()
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_POST(self):
        path = self.path.split("?")[0]
        if path.startswith("/upload") and self.server.upload is not None:
            self._body()
            self.server.calls.append(f"POST {path}")
            self._raw(*self.server.upload)
            return
        if path != "/launch" or self.server.launch is None:
            super().do_POST()
            return
        sent = json.loads(self._body())
        self.server.calls.append("POST /launch")
        if sent.get("dryrun") and not self.server.dry_run_too:
            self._answer(200, None, {"X-Skypilot-Request-ID": "dry-1"})
            return
        self.server.answered.append(sent)
        if self.server.launch == "cut":
            self.close_connection = True
            return
        self._raw(*self.server.launch)


@pytest.fixture
def scripted(remote):  # noqa: F811 (the fixture imported above)
    remote.RequestHandlerClass = ScriptedRoutes
    remote.launch = remote.upload = None
    remote.dry_run_too = False
    remote.answered = []
    return remote


def state_of(launcher):  # noqa: F811
    return json.loads(launcher._path(AID, ".json").read_text())


REFUSED = [
    pytest.param(
        413, html(NGINX_413), True,
        "SkyPilot's API server, or the proxy in front of it, refused the launch request as too large (HTTP 413 Request "
        "Entity Too Large): raise the proxy's body limit (nginx: client_max_body_size) or make the task smaller: its "
        "run and setup scripts, envs and file_mounts entries go in that request",
        id="a proxy's 413 for a body over its limit → fails the job: the same task is as large at every placement"),
    pytest.param(
        401, as_json({"detail": "Invalid or expired service account token"}), False,
        "SkyPilot's API server refused the broker's credentials (HTTP 401 Unauthorized: Invalid or expired service "
        "account token): give the broker a valid SkyPilot API token (SKYPILOT_SERVICE_ACCOUNT_TOKEN, or `sky api "
        "login` as the broker's user)",
        id="SkyPilot's 401 for a token revoked → the job waits for an operator"),
    pytest.param(
        403, as_json({"detail": "Forbidden"}), False,
        "SkyPilot's API server refused the broker's SkyPilot user the launch request (HTTP 403 Forbidden): give that "
        "user the right to launch clusters (its role, its workspace)",
        id="SkyPilot's 403 for a role without the right (its PermissionDeniedError) → the job waits"),
    pytest.param(
        400, as_json({"error": "version_mismatch", "message": TOO_OLD}), False,
        "SkyPilot's API server refused the launch request: its SkyPilot version and the broker's (0.14.1) do not match "
        "(HTTP 400 Bad Request: Your SkyPilot client version is too old:0.9.3 The server is running on 0.14.1 and the "
        "minimum compatible version is 0.10.0. Upgrade your client with: pip install -U \"skypilot==0.14.1\"): upgrade "
        "the broker's SkyPilot or the API server so that they match",
        id="SkyPilot's 400 for a client of another version → the job waits for an upgrade"),
    pytest.param(
        429, ("text/plain", "Too Many Requests"), False,
        "SkyPilot's API server, or the proxy in front of it, is limiting the broker's requests (HTTP 429 Too Many "
        "Requests): the launch request is tried again later",
        id="a rate limit's 429 → the job waits: a refusal that passes"),
    pytest.param(
        404, html("<html><head><title>404 Not Found</title></head></html>"), False,
        "SkyPilot's API server, or a proxy in front of it, refused the launch request (HTTP 404 Not Found): check "
        "SKYPILOT_API_SERVER_ENDPOINT and that proxy",
        id="any other 4xx (an endpoint behind the wrong path) → the job waits, the status named"),
    pytest.param(
        422, as_json({"detail": [{"type": "missing", "loc": ["body", "task"], "msg": "Field required",
                                  "input": {"envs": {"WANDB_API_KEY": "hunter2"}}}]}), False,
        "SkyPilot's API server, or a proxy in front of it, refused the launch request (HTTP 422 Unprocessable Entity: "
        "body.task: Field required): check SKYPILOT_API_SERVER_ENDPOINT and that proxy",
        id="FastAPI's 422 → what is wrong where, never the values it quotes (the task's envs)"),
]


@pytest.mark.parametrize("status, answer, permanent, sentence", REFUSED)
def test_a_launch_answered_with_a_4xx_is_refused_with_a_sentence_and_not_awaited(
        launcher, scripted, status, answer, permanent, sentence):  # noqa: F811
    scripted.launch = (status, answer)
    with pytest.raises(LaunchError) as caught:
        launcher.launch(request(TASK, ONDEMAND_CPU, attempt_id=AID))
    assert str(caught.value) == sentence
    assert caught.value.permanent is permanent
    assert len(scripted.answered) == 1 and scripted.launches == []
    state = state_of(launcher)
    assert "sent_at" not in state and "request_id" not in state, "awaited as a launch that may show up"
    with pytest.raises(LaunchError):  # nothing to wait for: launched again, it is sent again at once
        launcher.launch(request(TASK, ONDEMAND_CPU, attempt_id=AID))
    assert len(scripted.answered) == 2


MAYBE_TAKEN = [
    pytest.param((500, as_json({"detail": "Internal Server Error"})), id="SkyPilot's 500"),
    pytest.param((502, html(NGINX_502)), id="a proxy's 502"),
    pytest.param((408, html("<html><head><title>408 Request Timeout</title></head></html>")),
                 id="a 408 (Envoy's idle timeout fires after it forwarded the request)"),
    pytest.param("cut", id="the connection cut before an answer"),
]


@pytest.mark.parametrize("answer", MAYBE_TAKEN)
def test_a_launch_answered_with_a_5xx_a_408_or_nothing_may_have_been_taken_and_is_never_sent_twice(
        launcher, scripted, answer):  # noqa: F811
    scripted.launch = answer
    launcher.launch(request(TASK, ONDEMAND_CPU, attempt_id=AID))  # no error: awaited as pending
    assert "sent_at" in state_of(launcher)
    launcher.launch(request(TASK, ONDEMAND_CPU, attempt_id=AID))
    assert len(scripted.answered) == 1, "sent again while the first may still show up"


def test_a_dry_run_answered_413_fails_the_job_with_the_same_sentence(launcher, scripted):  # noqa: F811
    """The dry run sends the same task as the launch: a proxy's limit meets it first."""
    scripted.launch, scripted.dry_run_too = (413, html(NGINX_413)), True
    with pytest.raises(LaunchError) as caught:
        launcher.launch(request(TASK, ONDEMAND_CPU, attempt_id=AID))
    assert caught.value.permanent
    assert str(caught.value).startswith("SkyPilot's API server, or the proxy in front of it, refused the launch "
                                        "request as too large (HTTP 413 Request Entity Too Large): raise the proxy's")
    assert [sent["dryrun"] for sent in scripted.answered] == [True]


def test_an_upload_of_the_tasks_files_answered_413_fails_the_job_naming_the_workdir_and_file_mounts(
        launcher, scripted, tmp_path):  # noqa: F811
    """SkyPilot uploads a task's files to a remote API server before its launch, in parts of up to 95 MB: nginx's
    default body limit is 1 MB."""
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "a.txt").write_text("a")
    scripted.upload = (413, html(NGINX_413))
    with pytest.raises(LaunchError) as caught:
        launcher.launch(request({**TASK, "file_mounts": {"/data": str(tmp_path / "data")}}, ONDEMAND_CPU,
                                attempt_id=AID))
    assert caught.value.permanent
    assert str(caught.value) == (
        "SkyPilot's API server, or the proxy in front of it, refused the upload of the task's files as too large "
        "(HTTP 413 Request Entity Too Large): raise the proxy's body limit (nginx: client_max_body_size; "
        "SkyPilot uploads in parts of up to 95 MB) or make the workdir and file_mounts smaller: keep data and "
        "checkpoints in a bucket")
    assert "POST /launch" not in scripted.calls[scripted.calls.index("POST /upload_v2"):]


def _engine(tmp_path, clock=time.time):
    """A broker (SQLite store, the SkyPilot launcher on the SDK) as test_skypilot_local_failures' engine test makes
    it, on ``clock``: ``(service, engine, store)``."""
    from broker.config import load_settings
    from broker.engine.reconcile import Engine
    from broker.service import BrokerService
    from broker.store import open_store
    from launchers.local import LocalLauncher
    from launchers.router import RoutingLauncher
    from launchers.skypilot import SdkClient, SkyPilotLauncher

    settings = load_settings({"BROKER_DATA_DIR": str(tmp_path / "data"), "BROKER_LAUNCHER": "skypilot",
                              "BROKER_ADMIN_TOKEN": "t"})
    launcher = RoutingLauncher(LocalLauncher(settings.data_dir / "runs"),
                               SkyPilotLauncher(settings.data_dir / "skypilot", client=SdkClient()))
    store = open_store(f"sqlite://{tmp_path / 'r.db'}")
    return BrokerService(settings, store, launcher), Engine(settings, store, launcher, clock=clock), store


def _submitted_and_ticked(service, engine, store):
    """A job the admin submits (``run: true``, $5), read back after three engine ticks."""
    from broker.auth import Principal

    job, _ = service.submit(Principal("admin", None, admin=True), {"run": "true", "broker": {"budget_usd": 5}})
    for _ in range(3):
        engine.tick()
    return store.get_job(job.id)


def _closed(engine, store) -> None:
    if engine._housekeeping is not None:  # the tick's workdir sweep, beside it: done before the store closes
        engine._housekeeping.result(timeout=30)
    store.close()


def test_the_engine_fails_a_job_whose_launch_is_answered_413_instead_of_launching_it_every_two_minutes(
        scripted, tmp_path):
    from broker.lifecycle import JobState

    scripted.launch = (413, html(NGINX_413))
    service, engine, store = _engine(tmp_path)
    try:
        ended = _submitted_and_ticked(service, engine, store)
        assert ended.state is JobState.FAILED, (ended.state, ended.reason)
        assert "refused the launch request as too large (HTTP 413 Request Entity Too Large): raise the proxy's body " \
               "limit (nginx: client_max_body_size)" in ended.reason
        assert ended.attempts == 1 and len(scripted.answered) == 1 and scripted.launches == []
    finally:
        _closed(engine, store)


def test_the_engine_backs_off_a_job_whose_launch_is_answered_401_saying_why(scripted, tmp_path):
    from broker.lifecycle import JobState

    scripted.launch = (401, as_json({"detail": "Invalid or expired service account token"}))
    service, engine, store = _engine(tmp_path)
    try:
        waiting = _submitted_and_ticked(service, engine, store)
        assert waiting.state is JobState.QUEUED, (waiting.state, waiting.reason)
        assert waiting.reason.startswith("launch failed: SkyPilot's API server refused the broker's credentials (HTTP "
                                         "401 Unauthorized: Invalid or expired service account token)")
        assert "; tries again at " in waiting.reason
        assert waiting.launch_retry_at is not None and waiting.launch_retry_at > time.time()
        assert waiting.launch_failures == 1 and len(scripted.answered) == 1, "placed again before its backoff"
    finally:
        _closed(engine, store)
