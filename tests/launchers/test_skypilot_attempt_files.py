"""The SkyPilot launcher's files per attempt (``<data dir>/skypilot/<attempt id>.json``, ``.lock``, the fetched
``.log``) go once the store no longer holds the attempt's job — pruned by the retention policy — and stay while it
does. Real parts: a SQLite store with the retention's own prune, the engine, the router; SkyPilot is scripted."""

from __future__ import annotations

import fcntl
import time
from dataclasses import replace

import pytest
from skypilot_fakes import ScriptedSky
from test_skypilot_task import GPU_TASK, ONDEMAND_T4

from broker.config import load_settings
from broker.engine.reconcile import Engine
from broker.lifecycle import AttemptState, JobState
from broker.models import Attempt, Job
from broker.retention import DAY, Retention
from broker.store import Change, open_store
from launchers.base import LaunchRequest, Phase
from launchers.local import LocalLauncher
from launchers.router import RoutingLauncher
from launchers.skypilot import SkyPilotLauncher, cluster_name

NOW = time.time()


@pytest.fixture
def broker(sky, tmp_path):
    """An engine on a SQLite store whose launcher routes clouds to a SkyPilot launcher over a scripted SkyPilot."""
    settings = load_settings({"BROKER_DATA_DIR": str(tmp_path / "data"), "BROKER_LAUNCHER": "skypilot",
                              "BROKER_ADMIN_TOKEN": "t"})
    client = ScriptedSky(real_plan=False)
    cloud = SkyPilotLauncher(settings.data_dir / "skypilot", client=client)
    launcher = RoutingLauncher(LocalLauncher(settings.data_dir / "runs"), cloud)
    store = open_store(f"sqlite://{tmp_path / 'sky.db'}")
    yield Engine(settings, store, launcher), store, cloud, client
    store.close()


def ended_job(store, cloud, client, job_id: str, *, attempts: int, state: JobState, updated: float) -> list[str]:
    """A job whose ``attempts`` ran on SkyPilot clusters and ended (their state and logs kept, their clusters torn
    down), recorded in ``state``, last updated at ``updated``; its attempt ids."""
    job = store.commit(Change(job=Job(id=job_id, name="train", team="vision", state=JobState.QUEUED, spec=GPU_TASK,
                                      budget=50_000_000, priority=0, submitted_at=updated - DAY,
                                      updated_at=updated - DAY), expected_version=None))
    ids, records = [], []
    for n in range(1, attempts + 1):
        aid = f"{job_id}-a{n}"
        cloud.launch(LaunchRequest(attempt_id=aid, job_id=job_id, attempt=n, task=GPU_TASK, placement=ONDEMAND_T4))
        client.output[cluster_name(aid)] = f"epoch 1 of attempt {n}\n".encode()
        client.provisioned(cluster_name(aid), job="FAILED" if n < attempts else "SUCCEEDED")
        assert cloud.status(aid).phase.is_final
        records.append(Attempt(id=aid, job_id=job_id, n=n, state=AttemptState.SUCCEEDED, launcher="skypilot",
                               placement=ONDEMAND_T4, price_per_hour=526_000, created_at=updated - DAY,
                               ended_at=updated, launched_in=cloud.domain))
        ids.append(aid)
    store.commit(Change(job=replace(job, state=state, attempts=attempts, updated_at=updated),
                        expected_version=job.version, attempts=records))
    return ids


def files_of(cloud, aid: str) -> list[str]:
    return sorted(p.name for p in cloud.state_dir.iterdir() if p.name.startswith(aid + "."))


def test_the_state_files_of_a_pruned_jobs_attempts_go_and_those_of_kept_jobs_stay(broker):
    engine, store, cloud, client = broker
    pruned = ended_job(store, cloud, client, "j-0ld0000001", attempts=2, state=JobState.SUCCEEDED, updated=NOW - 90 * DAY)
    failed = ended_job(store, cloud, client, "j-0ld0000002", attempts=1, state=JobState.FAILED, updated=NOW - 30 * DAY)
    waiting = ended_job(store, cloud, client, "j-0ld0000003", attempts=1, state=JobState.QUEUED, updated=NOW - 90 * DAY)
    kept = failed + waiting  # a failed job within the retention (it may be resumed), a job not final however old
    for aid in pruned + kept:
        assert files_of(cloud, aid) == [f"{aid}.json", f"{aid}.lock", f"{aid}.log"]

    assert engine.sweep_attempt_files() == []  # every job still held: its attempts' logs are what `broker logs` shows

    assert Retention(store, days=60, pause=0).prune(NOW) == 1 and store.get_job("j-0ld0000001") is None
    assert sorted(engine.sweep_attempt_files()) == pruned
    for aid in pruned:
        assert files_of(cloud, aid) == []
    for aid in kept:
        assert files_of(cloud, aid) == [f"{aid}.json", f"{aid}.lock", f"{aid}.log"]
        assert cloud.logs(aid)[0].startswith(b"epoch 1") and cloud.status(aid).phase is Phase.SUCCEEDED
    assert engine.sweep_attempt_files() == [], "nothing counted twice"


def test_an_attempt_whose_state_a_call_is_working_on_is_left_to_the_next_sweep(broker):
    engine, store, cloud, client = broker
    [aid] = ended_job(store, cloud, client, "j-0ld0000004", attempts=1, state=JobState.CANCELLED, updated=NOW - 90 * DAY)
    assert Retention(store, days=60, pause=0).prune(NOW) == 1

    with open(cloud.state_dir / f"{aid}.lock", "a+") as held:  # a status(), stop() or logs() of it under way
        fcntl.flock(held, fcntl.LOCK_EX)
        assert engine.sweep_attempt_files() == []
        assert files_of(cloud, aid) == [f"{aid}.json", f"{aid}.lock", f"{aid}.log"]
    assert engine.sweep_attempt_files() == [aid]
    assert files_of(cloud, aid) == []
