"""Slack loose ends: the recently ended jobs in the order they ended, the Slack config read once (at start), and
what walking the commands as a user found: `costs` leaving lost nodes out, `submit` naming the API's `body`.

Through the real app with signed requests, as ``test_slack.py`` does (its helpers and fixtures).
"""

from __future__ import annotations

import re
import subprocess
import sys
import time
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from broker.config import ConfigError, load_settings
from broker.lifecycle import AttemptState, JobEvent, JobState
from broker.models import event_for
from broker.store import Change
from broker.slack.blocks import local_time

from . import world
from .conftest import build_app
from .test_slack import command, slack, slack_app, stub, text_of  # noqa: F401  (fixtures: found by name)

REPO = Path(__file__).resolve().parents[2]

H = 3600


def listed(said: str) -> list[str]:
    """The job ids of a ``status`` reply, in the order shown."""
    return re.findall(r"`(j-[a-z0-9-]+)`", said)


def ended_at(store, job_id: str, state: JobState, *, submitted: float, end: float) -> None:
    """A job of team-a that ended at ``end``, with the event that ended it (as the engine records it)."""
    job = world.job(job_id, "team-a", state, submitted=submitted, budget=1_000_000, spent=1_000_000, attempts=0,
                    reason=f"{state.value}: test", updated=end)
    event, before = ENDINGS[state]
    store.commit(Change(job=job, expected_version=None, events=[
        event_for(job, event, state, time=end, reason=job.reason, actor="engine", from_state=before)]))


ENDINGS = {JobState.FAILED: (JobEvent.FAIL, JobState.RUNNING), JobState.SUCCEEDED: (JobEvent.SUCCEED, JobState.RUNNING),
           JobState.STOPPED_BUDGET: (JobEvent.ENDED, JobState.STOPPING)}


def submitted(slack, name: str) -> str:
    said = text_of(command(slack, f"submit budget=$5\nname: {name}\nrun: echo hi").json())
    return re.match(r"Submitted (j-[0-9a-f]+)", said)[1]


# -- the recently ended: by when they ended -------------------------------------------------------------


def test_status_lists_jobs_by_when_they_ended_not_by_submission_or_a_later_budget_change(slack, store):
    """Three jobs submitted in one order and cancelled in another are listed newest-ended first; a job stopped at
    its budget an hour ago whose budget was raised a moment ago (its record changed, it did not end again) keeps
    its place by its end, where it was listed first as if it had just ended."""
    now = time.time()
    ended_at(store, "j-stopped", JobState.STOPPED_BUDGET, submitted=now - 2 * H, end=now - H)
    first, second, third = (submitted(slack, n) for n in ("first", "second", "third"))
    for job_id in (third, first, second):  # ended in an order other than submitted
        assert "Cancelling" in text_of(command(slack, f"cancel {job_id}").json())
        assert store.get_job(job_id).state is JobState.CANCELLED
    assert "Budget raised from $1.00 to $3.00" in text_of(command(slack, "budget j-stopped $3").json())
    assert store.get_job("j-stopped").updated_at > store.get_job(second).updated_at  # changed last, ended before

    said = text_of(command(slack, "status").json())
    assert "2 active job(s), 5 recently ended" in said
    ids = listed(said)
    assert ids[:2] == ["j-a2", "j-a3"]  # the active ones first (running, then the queue)
    assert ids[2:] == [second, first, third, "j-stopped", "j-a1"], said
    # each says when it ended, which is what orders them
    assert f"`j-stopped` — stopped_budget · ended {local_time(now - H)} · " in said


def test_jobs_that_ended_at_the_same_moment_are_listed_by_id(slack, store):
    now = time.time()
    for job_id in ("j-tie-c", "j-tie-a", "j-tie-b"):
        ended_at(store, job_id, JobState.FAILED, submitted=now - 2 * H, end=now - H)
    ended_at(store, "j-later", JobState.SUCCEEDED, submitted=now - 3 * H, end=now - 60)
    ids = listed(text_of(command(slack, "status").json()))
    assert ids[2:6] == ["j-later", "j-tie-a", "j-tie-b", "j-tie-c"]


# -- the Slack config: read once, at start --------------------------------------------------------------


def test_broker_serve_refuses_a_secret_yaml_read_as_a_number_at_start_naming_the_setting(tmp_path):
    """An unquoted signing secret of digits is a number to YAML: the broker started, and every Slack request was
    a 500 (the signature check refuses a secret that is not text). `broker serve` stops at once, naming it."""
    config = tmp_path / "broker.yaml"
    config.write_text("slack:\n  signing_secret: 8674665223082153551\n  users: {U1: team-a}\n")
    env = {"PATH": "/usr/bin:/bin", "HOME": str(tmp_path), "BROKER_DATA_DIR": str(tmp_path / "data")}
    r = subprocess.run([sys.executable, "-m", "broker.cli", "serve", "--port", "0", "--config", str(config)],
                       env=env, cwd=REPO, capture_output=True, text=True, timeout=60)
    assert (r.returncode, r.stderr) == (1, f"error: {config}: slack.signing_secret: must be text (put it in "
                                           f"quotes)\n"), r.stderr


@pytest.mark.parametrize("config, message", [
    ("slack: {user: {U1: team-a}}", "slack.user: is not a setting (did you mean 'users'?)"),
    ("slack: {users: {U1: [team-a]}}", "slack.users.U1: must be a team's name"),
    ("slack: {admins: {U1: yes}}", "slack.admins: must be a list of Slack member ids"),
    ("slack: {bot_token: 12345}", "slack.bot_token: must be text (put it in quotes)"),
    ("slack: {command: /broker train}", "slack.command: must be one word, the slash command's name (/broker), "
                                        "not '/broker train'"),
    ("slack: {raise_budget_percent: lots}", "slack.raise_budget_percent: must be a whole number"),
    ("notifications: {retries: many}", "notifications.retries: must be a whole number"),
    ("notifications: {events: [started, fail]}", "notifications.events: 'started' is not an event (did you mean "
                                                 "'start'?)"),
    ("notifications: {event: [fail]}", "notifications.event: is not a setting (did you mean 'events'?)"),
], ids=["users misspelt, which left every user unmapped", "a user mapped to a list",
        "admins as a mapping", "a bot token YAML reads as a number", "a command of two words",
        "a raise percent that is no number", "retries that are no number (named alone, not with another setting)",
        "an event misspelt, which never notified", "events misspelt, which notified the default events"])
def test_a_slack_config_mistake_is_refused_at_load_naming_the_setting(tmp_path, config, message):
    path = tmp_path / "config.yaml"
    path.write_text(config + "\n")
    with pytest.raises(ConfigError) as caught:
        load_settings({"BROKER_DATA_DIR": str(tmp_path / "data")}, config_path=path)
    assert str(caught.value) == message
    assert caught.value.located() == f"{path}: {message}"


def test_admins_given_as_one_id_is_that_admin_not_its_letters(tmp_path):
    path = tmp_path / "config.yaml"
    path.write_text("slack: {admins: U0999, users: {U1: team-a}}\n")
    cfg = load_settings({"BROKER_DATA_DIR": str(tmp_path / "data")}, config_path=path).slack
    assert cfg.admins == frozenset({"U0999"}) and cfg.principal("U0999").admin and cfg.principal("U") is None


def test_the_slack_routes_use_the_config_read_at_start_with_its_environment(tmp_path, store, seeded, monkeypatch):
    """The settings carry the Slack config as they were read, from the environment they were read with: the
    edges read it again from the process's own environment, where a secret given to :func:`load_settings` (as
    `broker serve` gives its environment) was not, and Slack was answered 404 "not configured"."""
    monkeypatch.delenv("BROKER_SLACK_SIGNING_SECRET", raising=False)
    path = tmp_path / "config.yaml"
    path.write_text("slack: {users: {U_A: team-a}}\npools: [{name: local, slots: 2, price_per_slot_hour: '0.2'}]\n")
    settings = load_settings({"BROKER_DATA_DIR": str(tmp_path / "data"), "BROKER_ADMIN_TOKEN": world.ADMIN,
                              "BROKER_SLACK_SIGNING_SECRET": world.SIGNING_SECRET}, config_path=path)
    with TestClient(build_app(settings, store)) as client:
        r = command(client, "status j-a2")
        assert r.status_code == 200, r.text
        assert "j-a2" in text_of(r.json())


# -- walking the commands as a user ---------------------------------------------------------------------


def test_costs_counts_a_lost_pool_node_apart_from_preemptions(slack, store):
    """A node lost without notice is no preemption (the API, the CLI and the page say so): Slack's `costs` left it
    out, so a team whose pool node went away read "1 preemption(s)" with the recovery of both."""
    now = time.time()
    job = world.job("j-lost", "team-a", JobState.SUCCEEDED, submitted=now - 3 * H, budget=5_000_000, spent=200_000,
                    attempts=2, updated=now - H)
    store.commit(Change(job=job, expected_version=None, attempts=[
        world.attempt("j-lost", 1, AttemptState.LOST, world.onprem(100_000), start=now - 3 * H, seconds=H,
                      cost=100_000),
        world.attempt("j-lost", 2, AttemptState.SUCCEEDED, world.onprem(100_000), start=now - 2 * H + 60,
                      seconds=H - 60, cost=100_000)]))
    said = text_of(command(slack, "costs").json())
    assert "1 preemption, 1 node lost (not preempted), " in said, said


def test_costs_of_a_team_with_no_preemptions_says_so_not_0_s_to_recover(slack):
    said = text_of(command(slack, "costs", user="U_B").json())
    assert "No preemptions or lost nodes" in said and "0 s to recover" not in said, said


@pytest.mark.parametrize("yaml, says", [
    ("run: [", "Could not read the task: its YAML is not valid YAML at line 2"),
    ("- run: echo hi", "Could not read the task: its YAML must be a mapping (a SkyPilot task), not list"),
    ("run: echo\nrun: echo", "Could not read the task: run: is given twice in the same mapping"),
], ids=["broken YAML", "a list", "a key given twice"])
def test_a_task_slack_cannot_read_is_named_as_its_yaml_not_the_apis_body(slack, yaml, says):
    said = text_of(command(slack, f"submit budget=$5\n{yaml}").json())
    assert says in said and "body" not in said, said


def test_a_slack_member_mapped_to_a_team_the_config_lacks_is_refused_at_load(tmp_path):
    """Mapped to a misspelt team, a member's every command was refused ("there is no team") only once they used it."""
    path = tmp_path / "config.yaml"
    path.write_text("teams: {team-a: {tokens: [tok-a-123456]}}\nslack: {users: {U1: team-a, U2: taem-a}}\n")
    with pytest.raises(ConfigError) as caught:
        load_settings({"BROKER_DATA_DIR": str(tmp_path / "data")}, config_path=path)
    assert str(caught.value).startswith("slack.users.U2: 'taem-a' is not a team of this config (did you mean "
                                        "'team-a'?"), str(caught.value)
    path.write_text("teams: {team-a: {tokens: [tok-a-123456]}}\nslack: {users: {U1: team-a}}\n")
    assert load_settings({"BROKER_DATA_DIR": str(tmp_path / "data")}, config_path=path).slack.users == {"U1": "team-a"}
