"""A team's checkpoint base, a job token that is not the job's, and the job's secrets in its output: what one team
could learn of, or take from, another team or the broker's host, and what misled an operator."""

from __future__ import annotations

from dataclasses import replace

import pytest
from fastapi.testclient import TestClient

from broker.api.app import create_app
from broker.auth import Principal, job_token
from broker.lifecycle import JobState
from broker.sealing import new_key_text
from broker.store import Change

from broker_testing import local_broker, run_until, wait_for
from test_broker_checkpoint_base import ADMIN_H, NLP, VISION, task  # the same teams and task

CONFIG = """
pools:
  - {name: cpu, slots: 2, price_per_slot_hour: "0.10"}
default_budget_usd: "10"
tick_seconds: 0.05
"""


@pytest.fixture
def served(make_settings, store):
    settings = make_settings(config=CONFIG, BROKER_SECRETS_KEY=new_key_text())
    with TestClient(create_app(settings, store=store, engine=False), raise_server_exceptions=False) as client:
        yield client, store, settings


def end(store, job_id: str, state: JobState) -> None:
    """As the engine would: the job reaches a final state."""
    job = store.get_job(job_id)
    store.commit(Change(job=replace(job, state=state, reason="ended in the test"), expected_version=job.version))


def root_of(settings) -> str:
    return settings.checkpoint_root.rstrip("/")


# -- 1. another team's base, live or ended -----------------------------------------------------------------------


@pytest.mark.parametrize("ended", [JobState.SUCCEEDED, JobState.CANCELLED, None],
                         ids=["after it succeeded", "after it was cancelled", "while it is queued"])
@pytest.mark.parametrize("where", ["root", "bucket"], ids=["a name under the root", "a bucket URL"])
def test_a_team_cannot_name_the_base_another_teams_job_used_and_is_told_nothing_of_that_job(served, ended, where):
    client, store, settings = served
    base = f"{root_of(settings)}/llm-run-7" if where == "root" else "s3://shared/llm-run-7"
    theirs = client.post("/v1/jobs", json=task(base), headers=NLP)
    assert theirs.status_code == 201, theirs.text
    if ended is not None:
        end(store, theirs.json()["id"], ended)
    for again in (base, base + "/", base + "/step-100"):  # one base however spelled, and a folder inside it
        r = client.post("/v1/jobs", json=task(again), headers=VISION)
        assert r.status_code == 403 and r.json()["field"] == "broker.checkpoint", r.text
        detail = r.json()["detail"]
        assert "another team" in detail and "name another base" in detail.lower(), detail
        assert theirs.json()["id"] not in detail and not any(s.value in detail for s in JobState), detail
    assert len(client.get("/v1/jobs", headers=ADMIN_H).json()["jobs"]) == 1  # nothing stored


def test_a_team_still_continues_its_own_cancelled_jobs_base_and_an_admin_is_not_held_to_the_rule(served):
    client, store, settings = served
    base = f"{root_of(settings)}/llm-run-7"
    first = client.post("/v1/jobs", json=task(base), headers=VISION).json()
    live = client.post("/v1/jobs", json=task(base), headers=VISION)
    assert live.status_code == 409 and first["id"] in live.json()["detail"], live.text  # its own job, named
    end(store, first["id"], JobState.CANCELLED)
    again = client.post("/v1/jobs", json=task(base), headers=VISION)
    assert again.status_code == 201, again.text
    end(store, again.json()["id"], JobState.SUCCEEDED)
    admin = client.post("/v1/jobs", json=task(base, team="nlp"), headers=ADMIN_H)
    assert admin.status_code == 201, admin.text


def test_a_base_is_free_again_once_the_other_teams_job_is_no_longer_stored(served):
    client, store, _ = served
    theirs = client.post("/v1/jobs", json=task("s3://shared/run"), headers=NLP).json()
    end(store, theirs["id"], JobState.SUCCEEDED)
    assert client.post("/v1/jobs", json=task("s3://shared/run"), headers=VISION).status_code == 403
    store.prune([store.get_job(theirs["id"])])
    r = client.post("/v1/jobs", json=task("s3://shared/run"), headers=VISION)
    assert r.status_code == 201, r.text


# -- 2. nothing learned of the host's files -----------------------------------------------------------------------


def test_a_teams_path_outside_the_root_is_refused_alike_whether_a_file_a_folder_or_nothing_is_there(served, tmp_path):
    client, _, _ = served
    (tmp_path / "a-file").write_text("x")
    (tmp_path / "a-folder").mkdir()
    answers = {}
    for name in ("a-file", "a-folder", "nothing-there", "a-file/below"):
        r = client.post("/v1/jobs", json=task(f"file://{tmp_path / name}"), headers=VISION)
        assert r.status_code == 403 and r.json()["field"] == "broker.checkpoint", r.text
        answers[name] = r.json()["detail"].replace(str(tmp_path / name), "PATH")
    assert len(set(answers.values())) == 1, answers
    assert "outside its checkpoint root" in answers["a-file"]


def test_a_file_inside_another_teams_base_under_the_root_is_not_told_apart_from_a_folder(served):
    client, store, settings = served
    base = f"{root_of(settings)}/llm-run-7"
    client.post("/v1/jobs", json=task(base), headers=NLP)
    folder = base.removeprefix("file://")
    import os

    os.makedirs(f"{folder}/step-100", exist_ok=True)
    open(f"{folder}/step-100/model.pt", "w").close()
    for name in ("step-100/model.pt", "step-100"):
        r = client.post("/v1/jobs", json=task(f"{base}/{name}"), headers=VISION)
        assert r.status_code == 403 and "is a file" not in r.text, r.text


# -- 3. the workdir packs' folder ---------------------------------------------------------------------------------


@pytest.mark.parametrize("headers", [VISION, ADMIN_H], ids=["a team", "an admin"])
@pytest.mark.parametrize("under", ["workdirs", "workdirs/", "workdirs/sha256", "workdirs/trash/sha256", "./workdirs"])
def test_no_one_names_the_workdir_packs_folder_as_a_checkpoint_base(served, headers, under):
    client, _, settings = served
    r = client.post("/v1/jobs", json=task(f"{root_of(settings)}/{under}", team="vision"), headers=headers)
    assert r.status_code in (403, 422) and r.json()["field"] == "broker.checkpoint", r.text
    assert "workdir packs" in r.json()["detail"], r.text
    assert client.get("/v1/jobs", headers=ADMIN_H).json()["jobs"] == []
    beside = client.post("/v1/jobs", json=task(f"{root_of(settings)}/workdirs-of-mine", team="vision"),
                         headers=headers)
    assert beside.status_code == 201, beside.text


# -- 4. a job token that is not the job's -------------------------------------------------------------------------


def test_a_progress_report_with_a_token_not_the_jobs_is_a_401_the_same_whether_the_job_exists(served):
    client, store, settings = served
    job_id = client.post("/v1/jobs", json=task(None), headers=VISION).json()["id"]
    answers = []
    for target in (job_id, "j-00000000000000"):
        r = client.post(f"/v1/jobs/{target}/progress", json={"step": 1},
                        headers={"Authorization": "Bearer v2.AAAA"})
        assert r.status_code == 401 and r.json()["field"] == "Authorization", r.text
        assert "not valid for job" in r.json()["detail"] and "BROKER_SECRETS_KEY" in r.json()["detail"], r.text
        answers.append(r.json()["detail"].replace(target, "ID"))
    assert answers[0] == answers[1]
    ok = client.post(f"/v1/jobs/{job_id}/progress", json={"step": 1},
                     headers={"Authorization": f"Bearer {job_token(settings, job_id)}"})
    assert ok.status_code == 200, ok.text
    gone = "j-11111111111111"  # the job's own token, for a job that is not stored: a real 404
    r = client.post(f"/v1/jobs/{gone}/progress", json={"step": 1},
                    headers={"Authorization": f"Bearer {job_token(settings, gone)}"})
    assert r.status_code == 404, r.text


# -- 5. secrets in the job's output -------------------------------------------------------------------------------

SECRET = "hf_s3cr3t_value"
RUN = """printf 'token=%s ab abc\\n' "$HF_TOKEN"
printf 'half=%.6s' "$HF_TOKEN"
while [ ! -f "{gate}" ]; do sleep 0.05; done
printf '%s\\n' "${{HF_TOKEN#??????}}"
"""


def test_the_logs_hide_the_jobs_secrets_with_offsets_into_the_raw_output(make_settings, tmp_path):
    """``set -x`` printed a token: the events hid it, ``broker logs`` showed it. A secret written in two pieces is
    not shown in two pages either, and a page read from inside a secret shows none of it."""
    gate = tmp_path / "gate"
    admin = Principal("admin", None, admin=True)
    with local_broker(make_settings, tmp_path, CONFIG) as (service, engine, store, _):
        job = service.submit(admin, {"name": "t", "run": RUN.format(gate=gate), "resources": {"cpus": 1},
                                     "secrets": {"HF_TOKEN": SECRET, "SHORT": "ab"},
                                     "broker": {"budget_usd": 5}})[0]
        run_until(engine, store, job.id, {"running"})
        page = wait_for(lambda: (p := service.logs(admin, job.id)) and "half=" in p["data"] and p)
        raw_line = f"token={SECRET} ab abc\n".encode()
        # the first 6 characters of the secret are held back: they may be the start of it (they are)
        assert page["data"] == "token=*** *** abc\nhalf=" and not page["done"], page
        assert page["offset"] == len(raw_line) + len(b"half="), page  # an offset into the raw output
        gate.touch()
        run_until(engine, store, job.id, {"succeeded"})
        rest = service.logs(admin, job.id, offset=page["offset"])
        assert rest["data"] == "***\n" and rest["done"], rest
        assert rest["offset"] == len(raw_line) + len(f"half={SECRET}\n".encode())
        inside = service.logs(admin, job.id, offset=len(b"token=hf_s3c"))  # a page from inside the secret
        assert SECRET[6:] not in inside["data"] and inside["data"].startswith("*** *** abc\n"), inside
        whole = service.logs(admin, job.id)["data"]
        assert whole == "token=*** *** abc\nhalf=***\n", whole
