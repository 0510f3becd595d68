"""SkyPilot's API server refusing the broker before any launch is sent: a token revoked (401), SkyPilot versions that
do not match (400), a server restarting (503). SkyPilot's SDK checks the server's health before each call and raises
its own errors there (``ApiServerAuthenticationError``, ``APIVersionMismatchError``), before the launch's
``POST /launch`` — and the launcher lists the attempt's cluster before it launches.

Raised as they were, out of the launcher's launch, the engine logged a traceback and left the job ``launching``, its
reason "launching attempt 1 on …", its attempt billed while nothing ran, until the server accepted again. Now the job
waits in the queue with the launch backoff and a reason naming the cause and the fix, and is launched once the server
accepts. An attempt already launched keeps its phase while the server refuses: never read gone, never launched twice.

SkyPilot's SDK is its own, unpatched, against the loopback fake API server of test_skypilot_local_failures.py; the
fake here (:class:`RefusingRoutes`) answers every request, its health check included, as a test scripts, as SkyPilot's
own middleware does (its bearer-token check, its version check) ahead of every route.
"""

from __future__ import annotations

import time

import pytest
from skyports import clear_server_caches
from test_skypilot_launch_refused import (TOO_OLD, ScriptedRoutes, _closed, _engine, _submitted_and_ticked,  # noqa: F401
                                       as_json, scripted, state_of)
from test_skypilot_local_failures import TASK, launcher, remote  # noqa: F401 (fixtures)
from test_skypilot_task import ONDEMAND_CPU, request

from broker.engine.monitor import UNSEEN
from launchers.base import LaunchError, Phase

AID = "j-0123456789-a2"
REVOKED = (401, as_json({"detail": "Service account token revoked or rotated"}))  # SkyPilot's BearerTokenMiddleware
MISMATCH = (400, as_json({"error": "version_mismatch", "message": TOO_OLD}))  # SkyPilot's version check
UNAVAILABLE = (503, ("text/plain", "no healthy upstream"))  # Envoy with no API server replica ready

TOKEN_SENTENCE = ("SkyPilot's API server refused the broker's credentials (HTTP 401 Unauthorized: Service account "
                  "token revoked or rotated): give the broker a valid SkyPilot API token "
                  "(SKYPILOT_SERVICE_ACCOUNT_TOKEN, or `sky api login` as the broker's user)")
MISMATCH_SENTENCE = ("SkyPilot's API server refused the listing of the attempt's cluster: its SkyPilot version and the "
                     "broker's (0.14.1) do not match (HTTP 400 Bad Request: Your SkyPilot client version is too "
                     "old:0.9.3 The server is running on 0.14.1 and the minimum compatible version is 0.10.0. Upgrade "
                     "your client with: pip install -U \"skypilot==0.14.1\"): upgrade the broker's SkyPilot or the API "
                     "server so that they match")


class RefusingRoutes(ScriptedRoutes):
    """The fake API server's routes, with ``refusing`` (``(status, (content type, body))`` or None) answered to every
    request while it is set, and ``health`` (a list of such answers) answered to the next health checks, one each."""

    def _refused(self) -> bool:
        path = self.path.split("?")[0]
        answer = self.server.refusing
        if path == "/api/health" and self.server.health:
            answer = self.server.health.pop(0)
        if answer is None:
            return False
        self.server.calls.append(f"{self.command} {path} refused")
        if self.command == "POST":
            self._body()
        self._raw(*answer)
        return True

    def do_GET(self):
        if not self._refused():
            super().do_GET()

    def do_POST(self):
        if not self._refused():
            super().do_POST()


@pytest.fixture
def refusing(scripted):  # noqa: F811 (the fixture imported above)
    scripted.RequestHandlerClass = RefusingRoutes
    scripted.refusing = None
    scripted.health = []
    return scripted


def accepts(server) -> None:
    """The server accepts again; SkyPilot's 5 s cache of its last health answer is taken as expired."""
    server.refusing = None
    clear_server_caches()


def _posts(server, path: str) -> int:
    return sum(1 for call in server.calls if call == f"POST {path}")


@pytest.mark.parametrize("answer, sentence", [
    pytest.param(REVOKED, TOKEN_SENTENCE, id="a token revoked: 401 at the health check"),
    pytest.param(MISMATCH, MISMATCH_SENTENCE, id="SkyPilot versions that do not match: 400 at the health check"),
])
def test_the_engine_backs_off_a_job_the_api_server_refuses_before_its_launch_and_launches_it_once_it_accepts(
        refusing, tmp_path, answer, sentence):
    from broker.lifecycle import AttemptState, JobState

    now = [time.time()]
    refusing.refusing = answer
    service, engine, store = _engine(tmp_path, lambda: now[0])
    try:
        waiting = _submitted_and_ticked(service, engine, store)
        assert waiting.state is JobState.QUEUED, (waiting.state, waiting.reason)
        assert waiting.reason.startswith(f"launch failed: {sentence}; tries again at "), waiting.reason
        assert waiting.launch_failures == 1 and waiting.launch_retry_at is not None
        refused = store.attempts(waiting.id)
        assert [a.state for a in refused] == [AttemptState.FAILED], "left launching (and billed) while nothing ran"
        assert _posts(refusing, "/launch") == 0 and refusing.launches == []

        accepts(refusing)
        now[0] = waiting.launch_retry_at + 1
        engine.tick()
        launched = store.get_job(waiting.id)
        assert launched.state is JobState.LAUNCHING, (launched.state, launched.reason)
        assert launched.attempts == 2 and len(refusing.launches) == 1
        assert refusing.launches[0]["cluster_name"] == "broker-" + f"{waiting.id}-a2"
    finally:
        _closed(engine, store)


def test_a_launched_attempt_keeps_its_phase_while_the_api_server_refuses_the_token_and_is_never_launched_again(
        refusing, launcher):  # noqa: F811
    launcher.launch(request(TASK, ONDEMAND_CPU, attempt_id=AID))
    assert launcher.status(AID).phase is Phase.PENDING and len(refusing.launches) == 1

    refusing.refusing = REVOKED
    clear_server_caches()
    during = launcher.status(AID)
    assert during.phase is Phase.PENDING, "read gone (and launched again) because the listing was refused"
    assert during.reason == TOKEN_SENTENCE
    launcher.launch(request(TASK, ONDEMAND_CPU, attempt_id=AID))  # the engine's re-launch of an attempt: a no-op

    accepts(refusing)
    assert launcher.status(AID).phase is Phase.PENDING
    assert len(refusing.launches) == 1 and _posts(refusing, "/launch") == 2  # its dry run and its launch, once each


def test_the_engine_keeps_a_launch_in_flight_while_the_api_server_refuses_and_never_launches_it_twice(
        refusing, tmp_path):
    from broker.auth import Principal
    from broker.lifecycle import AttemptState, JobState

    now = [time.time()]
    service, engine, store = _engine(tmp_path, lambda: now[0])
    try:
        job, _ = service.submit(Principal("admin", None, admin=True), {"run": "true", "broker": {"budget_usd": 5}})
        engine.tick()
        assert store.get_job(job.id).state is JobState.LAUNCHING and len(refusing.launches) == 1
        before = store.get_job(job.id).reason
        for answer in (REVOKED, MISMATCH):
            refusing.refusing = answer
            clear_server_caches()
            for _ in range(3):
                now[0] += 200  # past the wait for a launch that may show up: a gone attempt would be launched again
                engine.tick()
            refused = store.get_job(job.id)
            assert refused.reason.endswith(UNSEEN + (TOKEN_SENTENCE if answer is REVOKED else MISMATCH_SENTENCE)), \
                "the job read as launching fine while the broker could not see its attempt"
        accepts(refusing)
        for _ in range(2):
            now[0] += 200
            engine.tick()
        held = store.get_job(job.id)
        assert held.state is JobState.LAUNCHING and held.attempts == 1, (held.state, held.reason)
        assert UNSEEN not in held.reason and held.reason == before
        assert [e.event for e in store.events(job.id) if e.event in ("attempt_unseen", "attempt_seen")] == \
            ["attempt_unseen", "attempt_unseen", "attempt_seen"]
        assert [a.state for a in store.attempts(job.id)] == [AttemptState.LAUNCHING]
        assert len(refusing.launches) == 1
    finally:
        _closed(engine, store)


def test_a_health_check_answered_503_is_not_retried_inside_the_call(refusing, launcher):  # noqa: F811
    """SkyPilot retries a 503 by itself for up to 600 s (``rest.request``), inside the engine's tick: every job's
    monitoring waited. The call now answers at once with why; the next poll asks again."""
    launcher.launch(request(TASK, ONDEMAND_CPU, attempt_id=AID))
    refusing.health = [UNAVAILABLE, UNAVAILABLE]
    clear_server_caches()
    during = launcher.status(AID)
    assert during.phase is Phase.PENDING
    assert during.reason == ("SkyPilot's API server, or the proxy in front of it, is temporarily unavailable (HTTP "
                             "503: no healthy upstream): the listing of the attempt's cluster is tried again later")
    assert refusing.health == [UNAVAILABLE], "SkyPilot asked again within the call"
    refusing.health = []
    clear_server_caches()
    assert launcher.status(AID).phase is Phase.PENDING
    assert len(refusing.launches) == 1


def test_a_launch_that_may_have_been_sent_is_not_refused_when_the_api_server_then_refuses(
        refusing, launcher):  # noqa: F811
    """Its POST got no answer (it may have been taken): refused, its job would be placed again, a new attempt beside
    the one that may show up. It stays awaited."""
    refusing.launch = "cut"
    launcher.launch(request(TASK, ONDEMAND_CPU, attempt_id=AID))
    assert len(refusing.answered) == 1
    refusing.refusing = REVOKED
    clear_server_caches()
    launcher.launch_settle_seconds = 0  # as when the engine finds it gone once the wait is over
    try:
        launcher.launch(request(TASK, ONDEMAND_CPU, attempt_id=AID))
    except LaunchError:
        pytest.fail("a launch that may have been taken was refused, to be placed again as a new attempt")
    except Exception:  # SkyPilot's own error, as before: the engine logs it and follows the attempt
        pass
    assert len(refusing.answered) == 1 and "sent_at" in state_of(launcher), "no longer awaited"


def test_a_launch_whose_intent_was_saved_is_not_refused_when_the_api_server_then_refuses(
        refusing, launcher):  # noqa: F811
    """The broker died inside SkyPilot's launch call, after saving its intent and before any answer: the launch may
    be on the API server, unseen until the listing works. Refused, its job would be placed again under a new
    cluster name beside a request that may still run; it stays this attempt's, tried again on the same name."""
    name = launcher.cluster(AID)
    launcher._save(AID, {"cluster": name, "spot": False, "pod": False, "phase": None, "stop_at": None,
                         "grace_seconds": 30})
    refusing.refusing = REVOKED
    clear_server_caches()
    try:
        launcher.launch(request(TASK, ONDEMAND_CPU, attempt_id=AID))
    except LaunchError:
        pytest.fail("a launch that may have been sent before the broker died was refused, to be placed anew")
    except Exception:  # SkyPilot's own error, as before: the engine logs it and tries this attempt again
        pass
    assert state_of(launcher).get("cluster") == name and not refusing.launches


def test_a_stop_and_a_sweep_while_the_api_server_refuses_say_why_in_one_line_and_the_stop_is_kept(
        refusing, launcher, caplog):  # noqa: F811
    """An attempt with no file of the launcher's (the broker died before it saved one, or the state directory was
    lost) is stopped by the name of its cluster, which needs a listing; so does the sweep. With the API server
    refusing, SkyPilot's own error escaped both, and the engine logged a traceback at every tick and sweep. Now
    each says why once, the stop is kept for when the server answers, and nothing is launched."""
    import logging

    refusing.refusing = REVOKED
    clear_server_caches()
    with caplog.at_level(logging.WARNING, logger="launchers.skypilot"):
        for _ in range(2):
            launcher.stop(AID, grace_seconds=0, reason="cancelled")
            assert launcher.sweep(lambda: []) == []
    assert state_of(launcher).get("stop_reason") == "cancelled", "the stop was forgotten"
    said = [r.getMessage() for r in caplog.records if r.name == "launchers.skypilot"]
    assert len(said) == 2, said  # one line for the attempt's listing, one for the sweep's: not one per call
    assert said[0].startswith(TOKEN_SENTENCE) and said[1].startswith(TOKEN_SENTENCE)

    accepts(refusing)
    assert launcher.sweep(lambda: []) == [] and launcher.status(AID).phase is Phase.STOPPED  # no cluster was left
    assert refusing.launches == []
