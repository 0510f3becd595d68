"""Walkthrough, Dec 6: what a job's reason says while the broker retries it, and once its retries are used up.

With ``retry: {max_restarts_on_errors: 2}`` and a script that meets a refused connection at step 60 every time, the
queued job's reason read "…throttling); resume it to try again. retrying (retry 2 of 2); tries again at 06:09:23Z" —
and ``broker resume`` answered 409, "is queued, not ended". After the third failure alike, the reason said the network
"failed for a while", not that the retries were used up nor that each attempt failed the same way.

Real parts: the broker's engine in this process, the local launcher running the script as a process, a real refused
connection (a loopback port nothing listens on), SQLite. The retries wait out the broker's backoff (5 s, then 10 s).
"""

from __future__ import annotations

import pytest
from broker_testing import local_broker, run_until, wait_for
from testports import free_port

from broker.auth import Principal
from broker.engine.monitor import retries_used, retrying_reason, used_up_reason
from broker.lifecycle import AttemptState, JobState
from broker.models import Attempt, Job
from broker.service import Conflict

ADMIN = Principal("admin", None, admin=True)
CONFIG = """
pools:
  - {name: cpu, slots: 1, price_per_slot_hour: "0.36"}
stop_grace_seconds: 2
tick_seconds: 0.05
"""


def _script(tmp_path) -> str:
    port = free_port()  # nothing listens there: connecting is refused, as the walkthrough's server was
    script = tmp_path / "fetches_at_60.py"
    script.write_text("import urllib.request\n"
                      "for step in range(100):\n"
                      "    if step % 10 == 0:\n"
                      "        print(f'step {step}', flush=True)\n"
                      "    if step == 60:\n"
                      f"        urllib.request.urlopen('http://127.0.0.1:{port}/shard-7', timeout=5)\n")
    return f"python {script}"


@pytest.fixture
def broker(make_settings, tmp_path):
    with local_broker(make_settings, tmp_path, CONFIG) as parts:
        yield parts


def test_a_job_the_broker_retries_itself_is_never_told_to_resume_and_says_when_its_retries_are_used_up(
        broker, tmp_path):
    service, engine, store, launcher = broker
    job = service.submit(ADMIN, {"name": "fetch", "run": _script(tmp_path), "resources": {"cpus": 1},
                                 "broker": {"budget_usd": 5, "retry": {"max_restarts_on_errors": 2}}})[0]
    try:
        seen, refused = {}, {}  # each retry's reason as the queued job showed it while it waited, and a resume then

        def waiting_for(n):
            def check():
                engine.tick()
                j = store.get_job(job.id)
                if j.state is JobState.QUEUED and j.attempts == n and n not in seen:
                    seen[n] = j.reason
                    with pytest.raises(Conflict) as no:
                        service.resume(ADMIN, job.id)
                    refused[n] = str(no.value)
                return j.attempts > n or j.state.is_final
            return check

        for n in (1, 2):
            wait_for(waiting_for(n), timeout=30)
            assert n in seen, f"the job was never seen queued after attempt {n}"
            said = seen[n]
            assert said.startswith("A server or the network failed after step 60 (the last in the job's log): "), said
            assert "resume it to try again" not in said and "throttling" not in said, said  # the hint: none
            assert f"No need to resume it: the broker is retrying (automatic retry {n} of 2); tries again at " \
                in said, said
            # what the reason says agrees with what the broker does: it will not resume a job it retries itself
            assert refused[n] == f"{job.id} is queued, not ended: only a failed or budget-stopped job resumes"
        final = run_until(engine, store, job.id, {"failed", "succeeded"}, timeout=40)
        assert final.state is JobState.FAILED and final.attempts == 3
        assert final.reason.startswith("A server or the network failed after step 60 (the last in the job's log): "), \
            final.reason
        assert ". It failed 3 times, each after step 60 with the same error; its 2 automatic retries are used up. " \
               "Not the job's code" in final.reason, final.reason
        assert final.reason.endswith("resume it to try again."), final.reason  # the user's to resume now
        resumed = service.resume(ADMIN, job.id)  # and a resume goes through, as the reason says
        assert resumed.state is JobState.QUEUED
    finally:
        if not store.get_job(job.id).state.is_final:
            service.cancel(ADMIN, job.id)
        for a in store.attempts(job.id):
            launcher.stop(a.id, grace_seconds=0)


def _job(**kw) -> Job:
    base = dict(id="j", name="j", team="t", spec={}, budget=1, priority=0, state=JobState.RUNNING,
                submitted_at=0.0, updated_at=0.0, retry={"max_restarts_on_errors": 2}, errors_retried=2, attempts=3)
    return Job(**{**base, **kw})


def _failed(n: int, reason: str, exit_code: int = 1) -> Attempt:
    return Attempt(id=f"a{n}", job_id="j", n=n, state=AttemptState.FAILED, launcher="local", placement={},
                   price_per_hour=0, created_at=float(n), exit_code=exit_code, reason=reason)


SENTENCE = "A server or the network failed after step 60 (the last in the job's log): connection refused."
HINT = "Not the job's code: a server or the network failed for a while; resume it to try again."


@pytest.mark.parametrize("earlier, said", [
    pytest.param([f"{SENTENCE} No need to resume it: the broker is retrying (automatic retry 1 of 2)"] * 2,
                 f"{SENTENCE[:-1]}. It failed 3 times, each after step 60 with the same error; its 2 automatic retries "
                 f"are used up. {HINT}", id="three failures alike at step 60 say so, then the resume advice"),
    pytest.param([f"{SENTENCE} {HINT} retrying (retry 1 of 2)"] * 2,
                 f"{SENTENCE[:-1]}. It failed 3 times, each after step 60 with the same error; its 2 automatic retries "
                 f"are used up. {HINT}", id="attempts a broker of an earlier version stored read as alike too"),
    pytest.param(["A server or the network failed after step 40 (the last in the job's log): connection refused. No need to "
                  "resume it",
                  f"{SENTENCE} No need to resume it"],
                 f"{SENTENCE[:-1]}. It failed 3 times; its 2 automatic retries are used up. {HINT}",
                 id="failures at different steps are counted, not called the same"),
])
def test_the_reason_once_the_retries_are_used_up(earlier, said):
    attempts = [_failed(1, earlier[0]), _failed(2, earlier[1]), _failed(3, "")]
    assert used_up_reason(_job(), attempts, attempts[-1], SENTENCE, HINT) == said


def test_a_job_with_no_automatic_retries_or_some_left_has_no_used_up_words():
    attempts = [_failed(1, SENTENCE)]
    assert used_up_reason(_job(retry={}, errors_retried=0), attempts, attempts[0], SENTENCE, HINT) is None
    assert used_up_reason(_job(errors_retried=1), attempts, attempts[0], SENTENCE, HINT) is None
    assert retries_used(_job(retry={"max_restarts_on_errors": 1}, errors_retried=1)) == \
        "its automatic retry is used up"


@pytest.mark.parametrize("end", ["the job exited with code 1", "the runner said: refused; reset; gone"],
                         ids=["what ended, then the retry", "what ended in a launcher's words, with semicolons"])
def test_the_retrying_reason_leaves_out_the_hint_that_says_to_resume(end):
    assert retrying_reason(SENTENCE, f"{end}; no need to resume it: the broker is retrying (automatic retry 2 of 2)") \
        == f"{SENTENCE} No need to resume it: the broker is retrying (automatic retry 2 of 2)"
