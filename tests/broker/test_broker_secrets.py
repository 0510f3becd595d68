"""Task secrets sealed at rest: the store (SQLite file, Redis) never holds a secret's value, the job
still gets it, and a broker without the right key refuses to launch rather than launch without it."""

import base64
import json
import os
import sqlite3
import time
from dataclasses import replace
from pathlib import Path

import pytest
import redis
from fastapi.testclient import TestClient

from broker.api.app import create_app
from broker.auth import Principal
from broker.config import ConfigError
from broker.engine.reconcile import Engine
from broker.lifecycle import JobState
from broker.runtime import open_launcher
from broker.sealing import KEY_FILE, Sealer, Unsealable, open_spec, sealer_for
from broker.service import BrokerService, Invalid
from broker.store import Change, open_store
from broker.store.redis import RedisStore
from launchers.base import LaunchError
from launchers.local import LocalLauncher

from broker_testing import ADMIN as ADMIN_TOKEN, run_until
from broker_testing import wait_for

ADMIN = Principal("admin", None, admin=True)
CONFIG = """
pools:
  - {name: cpu, slots: 2, price_per_slot_hour: "0.36"}
stop_grace_seconds: 2
tick_seconds: 0.05
"""
VALUE = "wandb-Zq8tXk2v9PLmR4sN7cJ1"  # found nowhere but in the job's own environment
OTHER = "hf_Lp3QwErTy7UiOp0AsDfGhJk"


def key_text() -> str:
    return base64.b64encode(os.urandom(32)).decode()


def task(out: Path, *, secrets=None) -> dict:
    return {"name": "sealed", "run": f'printf "%s|%s" "$WANDB_API_KEY" "$HF_TOKEN" > {out}',
            "resources": {"cpus": 1}, "envs": {"EPOCHS": "3"},
            "secrets": secrets if secrets is not None else {"WANDB_API_KEY": VALUE, "HF_TOKEN": OTHER},
            "broker": {"budget_usd": 5}}


@pytest.fixture(params=["sqlite", "redis"])
def backend(request, tmp_path, redis_server, make_settings):
    """(settings maker, store, where its raw bytes are): a real SQLite file or the test's redis-server."""
    if request.param == "sqlite":
        url = f"sqlite://{tmp_path / 'secrets.db'}"
        store = open_store(url)
    else:
        url = redis_server.url
        store = RedisStore(url, prefix=f"sec{os.getpid()}-{time.monotonic_ns()}")

    def settings(**env):
        return make_settings(store_url=url, config=CONFIG, **env)

    yield request.param, settings, store
    store.close()


def raw_bytes(kind: str, store, tmp_path: Path, redis_server) -> bytes:
    """Everything the store keeps, as stored: the SQLite files (database and write-ahead log) and a dump
    of every table; or every key under the store's prefix, and Redis's append-only file."""
    if kind == "sqlite":
        files = b"".join(p.read_bytes() for p in tmp_path.glob("secrets.db*"))
        db = sqlite3.connect(tmp_path / "secrets.db")
        dump = "\n".join(db.iterdump()).encode()
        db.close()
        return files + dump
    r = redis.Redis.from_url(redis_server.url)
    out = []
    for key in r.scan_iter(match=f"{store.keys.prefix}*"):
        kind_of = r.type(key)
        if kind_of == b"string":
            out.append(r.get(key))
        elif kind_of == b"hash":
            out += [k + b"=" + v for k, v in r.hgetall(key).items()]
        elif kind_of == b"list":
            out += r.lrange(key, 0, -1)
        elif kind_of == b"zset":
            out += r.zrange(key, 0, -1)
        elif kind_of == b"set":
            out += list(r.smembers(key))
        elif kind_of == b"stream":
            out += [json.dumps({k.decode(): v.decode() for k, v in fields.items()}).encode()
                    for _, fields in r.xrange(key)]
    aof = b"".join(p.read_bytes() for p in Path(redis_server.workdir).rglob("*") if p.is_file() and "aof" in p.name)
    assert out and aof
    return b"\n".join(out) + aof


def test_the_store_holds_no_secret_value_and_the_job_gets_them_all(backend, tmp_path, redis_server):
    kind, settings_of, store = backend
    settings = settings_of()
    launcher = open_launcher(settings)
    service, engine = BrokerService(settings, store, launcher), Engine(settings, store, launcher)
    out = tmp_path / "seen.txt"
    job = service.submit(ADMIN, task(out))[0]
    stored = store.get_job(job.id).spec["secrets"]
    assert set(stored) == {"WANDB_API_KEY", "HF_TOKEN"} and all(v.startswith("sealed:v1:") for v in stored.values())
    final = run_until(engine, store, job.id, {"succeeded", "failed"})
    assert final.state is JobState.SUCCEEDED, final.reason
    assert out.read_text() == f"{VALUE}|{OTHER}"  # the launcher got the real values
    raw = raw_bytes(kind, store, tmp_path, redis_server)
    assert job.id.encode() in raw and b"WANDB_API_KEY" in raw  # the dump is the job's, names and all
    assert VALUE.encode() not in raw and OTHER.encode() not in raw
    # the local runner's folder, kept after the attempt, forgot them once read
    run_dir = settings.data_dir / "runs" / f"{job.id}-a1"
    assert all(VALUE not in p.read_text(errors="replace") for p in run_dir.iterdir() if p.is_file())
    assert json.loads((run_dir / "request.json").read_text())["task"]["secrets"] == {"WANDB_API_KEY": None,
                                                                                    "HF_TOKEN": None}


def test_views_events_and_the_api_show_no_secret_value(make_settings, tmp_path):
    settings = make_settings(config=CONFIG)
    store = open_store(f"sqlite://{tmp_path / 'api.db'}")
    launcher = open_launcher(settings)
    engine = Engine(settings, store, launcher)
    app = create_app(settings, store=store, engine=False)
    auth = {"Authorization": f"Bearer {ADMIN_TOKEN}"}
    with TestClient(app, raise_server_exceptions=False) as client:
        r = client.post("/v1/jobs", json=task(tmp_path / "seen.txt"), headers=auth)
        assert r.status_code == 201, r.text
        job_id = r.json()["id"]
        run_until(engine, store, job_id, {"succeeded"})
        answers = [client.get(path, headers=auth).text for path in
                   (f"/v1/jobs/{job_id}", "/v1/jobs", f"/v1/jobs/{job_id}/events", "/v1/costs?period=1d",
                    f"/v1/jobs/{job_id}/metrics", "/metrics", "/dashboard")]
    assert all(VALUE not in a and OTHER not in a for a in answers)
    assert "submit" in answers[2] and job_id in answers[0]
    events = json.dumps([e.to_dict() for e in store.events(job_id)])
    assert VALUE not in events and OTHER not in events


def test_a_broker_with_another_key_fails_the_job_naming_the_setting_and_it_resumes_once_fixed(backend, tmp_path):
    _, settings_of, store = backend
    first, second = key_text(), key_text()
    accepting = settings_of(BROKER_SECRETS_KEY=first)
    job = BrokerService(accepting, store, open_launcher(accepting)).submit(ADMIN, task(tmp_path / "seen.txt"))[0]
    sealed = store.get_job(job.id).spec

    wrong = settings_of(BROKER_SECRETS_KEY=second)
    failed = run_until(Engine(wrong, store, open_launcher(wrong)), store, job.id, {"failed", "succeeded"})
    assert failed.state is JobState.FAILED
    assert "BROKER_SECRETS_KEY" in failed.reason and "key this broker does not have" in failed.reason
    assert failed.diagnosis["class"] == "secrets_unsealable" and failed.diagnosis["infrastructure"]
    (attempt,) = store.attempts(job.id)
    assert attempt.state.value == "failed" and "cannot open the job's secrets" in attempt.reason
    assert not (wrong.data_dir / "runs" / attempt.id).exists()  # nothing was launched without its secrets
    assert failed.spec == sealed  # nothing lost

    # the key rotated: the new one seals, the old one (listed) still opens; no force needed
    rotated = settings_of(BROKER_SECRETS_KEY=second, BROKER_SECRETS_OLD_KEYS=f"{key_text()},{first}")
    launcher = open_launcher(rotated)
    BrokerService(rotated, store, launcher).resume(ADMIN, job.id)
    final = run_until(Engine(rotated, store, launcher), store, job.id, {"succeeded", "failed"})
    assert final.state is JobState.SUCCEEDED, final.reason
    assert (tmp_path / "seen.txt").read_text() == f"{VALUE}|{OTHER}"


def test_a_broker_with_no_key_at_all_says_which_setting_to_set(make_settings, tmp_path):
    store = open_store(f"sqlite://{tmp_path / 'k.db'}")
    settings = make_settings(config=CONFIG)
    job = BrokerService(settings, store, open_launcher(settings)).submit(ADMIN, task(tmp_path / "seen.txt"))[0]
    elsewhere = replace(settings, data_dir=tmp_path / "another-host")  # no key file there, none set
    failed = run_until(Engine(elsewhere, store, open_launcher(elsewhere)), store, job.id, {"failed"})
    assert "BROKER_SECRETS_KEY is not set" in failed.reason
    assert not (elsewhere.data_dir / KEY_FILE).exists()  # an engine does not make a key that opens nothing


def test_a_job_stored_before_sealing_still_launches_with_its_plain_secrets(backend, tmp_path):
    _, settings_of, store = backend
    settings = settings_of()
    launcher = open_launcher(settings)
    job = BrokerService(settings, store, launcher).submit(ADMIN, task(tmp_path / "seen.txt"))[0]
    # as an earlier version stored it: the values in plain text
    plain = {**job.spec, "secrets": {"WANDB_API_KEY": VALUE, "HF_TOKEN": 42}}
    store.commit(Change(job=replace(job, spec=plain), expected_version=job.version))
    final = run_until(Engine(settings, store, launcher), store, job.id, {"succeeded", "failed"})
    assert final.state is JobState.SUCCEEDED, final.reason
    assert (tmp_path / "seen.txt").read_text() == f"{VALUE}|42"


def test_an_idempotent_retry_compares_the_secrets_as_given(make_settings, tmp_path):
    settings = make_settings(config=CONFIG)
    service = BrokerService(settings, open_store(f"sqlite://{tmp_path / 'i.db'}"))
    out = tmp_path / "seen.txt"
    first, created = service.submit(ADMIN, task(out, secrets={"WANDB_API_KEY": VALUE, "N": 7}), idempotency_key="k1")
    again, created_again = service.submit(ADMIN, task(out, secrets={"WANDB_API_KEY": VALUE, "N": 7}),
                                          idempotency_key="k1")
    assert created and not created_again and again.id == first.id
    with pytest.raises(Invalid) as refused:
        service.submit(ADMIN, task(out, secrets={"WANDB_API_KEY": OTHER, "N": 7}), idempotency_key="k1")
    assert refused.value.field == "Idempotency-Key" and OTHER not in str(refused.value)


def test_a_launchers_refusal_is_kept_without_the_secret_values(make_settings, tmp_path):
    class Refusing(LocalLauncher):
        def launch(self, request):
            raise LaunchError(f"SkyPilot cannot satisfy the task: secrets {request.task['secrets']}", permanent=True)

    settings = make_settings(config=CONFIG)
    store = open_store(f"sqlite://{tmp_path / 'r.db'}")
    launcher = Refusing(settings.data_dir / "runs")
    job = BrokerService(settings, store, launcher).submit(ADMIN, task(tmp_path / "seen.txt"))[0]
    failed = run_until(Engine(settings, store, launcher), store, job.id, {"failed"})
    kept = json.dumps([failed.to_dict(), [a.to_dict() for a in store.attempts(job.id)],
                       [e.to_dict() for e in store.events(job.id)]])
    assert "SkyPilot cannot satisfy the task" in failed.reason and "***" in failed.reason
    assert VALUE not in kept and OTHER not in kept


def test_a_sealed_value_opens_only_in_its_own_job_under_its_own_name():
    sealer = Sealer(os.urandom(32))
    text = sealer.seal("j-1", "A", "value")
    assert sealer.open("j-1", "A", text) == "value"
    for job_id, name in (("j-2", "A"), ("j-1", "B")):
        with pytest.raises(Unsealable, match="altered or copied from another job"):
            sealer.open(job_id, name, text)
    assert open_spec({"secrets": {"A": text}}, sealer, "j-1") == {"secrets": {"A": "value"}}


def test_the_key_file_is_made_once_readable_by_its_owner_only(make_settings):
    settings = make_settings()
    a = sealer_for(settings, create=True)
    b = sealer_for(settings, create=True)
    assert a.key == b.key and len(a.key) == 32
    assert (settings.data_dir / KEY_FILE).stat().st_mode & 0o777 == 0o600
    assert list(settings.data_dir.glob(f".{KEY_FILE}*")) == []


def test_a_key_file_from_before_a_key_was_set_still_opens_its_jobs(make_settings):
    settings = make_settings()
    text = sealer_for(settings, create=True).seal("j-1", "A", "value")
    later = make_settings(BROKER_SECRETS_KEY=key_text())
    assert sealer_for(later).open("j-1", "A", text) == "value"


@pytest.mark.parametrize("env, field", [({"BROKER_SECRETS_KEY": "not-a-key"}, "BROKER_SECRETS_KEY"),
                                        ({"BROKER_SECRETS_KEY": base64.b64encode(b"short").decode()},
                                         "BROKER_SECRETS_KEY"),
                                        ({"BROKER_SECRETS_OLD_KEYS": "abc,def"}, "BROKER_SECRETS_OLD_KEYS")])
def test_a_malformed_key_setting_is_refused_naming_it(make_settings, env, field):
    with pytest.raises(ConfigError, match=f"^{field}: must be 32 random bytes in base64"):
        make_settings(**env)


def test_an_idempotent_retry_on_a_broker_without_the_key_is_a_conflict_naming_it(make_settings, tmp_path):
    from broker.service import Conflict

    store = open_store(f"sqlite://{tmp_path / 'c.db'}")
    accepting = make_settings(config=CONFIG, BROKER_SECRETS_KEY=key_text())
    first = BrokerService(accepting, store).submit(ADMIN, task(tmp_path / "o"), idempotency_key="k")[0]
    other = make_settings(config=CONFIG, BROKER_SECRETS_KEY=key_text())
    with pytest.raises(Conflict, match=f"already used for job {first.id}.*BROKER_SECRETS_OLD_KEYS"):
        BrokerService(other, store).submit(ADMIN, task(tmp_path / "o"), idempotency_key="k")


def test_a_broker_on_redis_without_a_key_says_so_at_start(make_settings, redis_server):
    from broker.cli import _check_secrets_key

    assert _check_secrets_key(make_settings()) is None  # SQLite: one host, its key file serves every broker
    warning = _check_secrets_key(make_settings(store_url=redis_server.url))
    assert warning.startswith("warning: BROKER_SECRETS_KEY is not set") and "docs/deploy.md" in warning
    assert _check_secrets_key(make_settings(store_url=redis_server.url, BROKER_SECRETS_KEY=key_text())) is None


def test_a_key_file_gone_bad_never_touches_a_job_without_secrets_and_a_retry_says_what_is_wrong(make_settings, tmp_path):
    """The data dir's key file damaged after start (a bad restore, a truncated write): a job with no secrets
    still launches — it needs no key — and an Idempotency-Key retry of a job with secrets is a 409 naming
    the file, not a 500."""
    from broker.service import Conflict

    settings = make_settings(config=CONFIG)
    store = open_store(f"sqlite://{tmp_path / 'bad.db'}")
    launcher = open_launcher(settings)
    service, engine = BrokerService(settings, store, launcher), Engine(settings, store, launcher)
    try:
        sealed = service.submit(ADMIN, task(tmp_path / "o"), idempotency_key="k")[0]
        service.cancel(ADMIN, sealed.id)
        (settings.data_dir / KEY_FILE).write_text("truncated\n")
        out = tmp_path / "plain.txt"
        plain = service.submit(ADMIN, task(out, secrets={}))[0]
        final = run_until(engine, store, plain.id, {"succeeded", "failed"})
        assert final.state is JobState.SUCCEEDED, final.reason
        with pytest.raises(Conflict, match=f"already used for job {sealed.id}.*{KEY_FILE}"):
            service.submit(ADMIN, task(tmp_path / "o"), idempotency_key="k")
    finally:
        store.close()


@pytest.mark.parametrize("text, values, shown", [
    ("attempt 1 on spot in zone 1a", ["1"], "attempt *** on spot in zone 1a"),
    ("token=ab;x=abc", ["ab"], "token=***;x=abc"),
    ("key hunter2 was refused; hunter2x too", ["hunter2"], "key *** was refused; ***x too"),
    ("a longer secret-with-short inside", ["secret-with-short", "sec"], "a longer *** inside"),
], ids=["a one-character secret is hidden where it stands alone, not inside 1a",
        "a two-character secret is hidden as a word, not inside a longer one",
        "a secret of four or more characters is hidden wherever it appears",
        "the longest value goes first, so a short one inside it leaves no piece behind"])
def test_redaction_hides_short_secrets_only_as_whole_words(text, values, shown):
    from broker.sealing import redact

    assert redact(text, values) == shown


def test_a_job_that_failed_for_a_secret_it_lacked_resumes_with_it_given_sealed_like_a_submits(backend, tmp_path,
                                                                                              redis_server):
    """The run needs HF_TOKEN and fails without it (named as credentials, the job's own: a plain resume is refused).
    `broker resume --secret HF_TOKEN` sets it from the next attempt on: no --force asked, as the job changed; the
    store holds it sealed; the attempt gets it; the events name it, never its value."""
    kind, settings_of, store = backend
    settings = settings_of()
    launcher = open_launcher(settings)
    service, engine = BrokerService(settings, store, launcher), Engine(settings, store, launcher)
    out = tmp_path / "seen.txt"
    needs = {"name": "needs-token", "resources": {"cpus": 1}, "secrets": {"WANDB_API_KEY": VALUE},
             "run": f'[ -n "$HF_TOKEN" ] || {{ echo "huggingface_hub.errors.HfHubHTTPError: 401 Client Error: '
                    f'Unauthorized for url: https://huggingface.co/api/x"; echo "Invalid user token"; exit 1; }}; '
                    f'printf "%s|%s|%s" "$WANDB_API_KEY" "$HF_TOKEN" "$EPOCHS" > {out}',
             "broker": {"budget_usd": 5}}
    job = service.submit(ADMIN, needs)[0]
    failed = run_until(engine, store, job.id, {"succeeded", "failed"})
    assert failed.state is JobState.FAILED and failed.diagnosis["class"] == "credentials", failed.diagnosis
    with pytest.raises(Exception, match=rf"Resume it with them \(broker resume {job.id} --secret HF_TOKEN\); resumed "
                                        "with force it runs again unchanged, which fails the same way unless the credentials "
                                        "outside the task changed"):
        service.resume(ADMIN, job.id)
    with pytest.raises(Invalid) as bad:
        service.resume(ADMIN, job.id, secrets={"HF TOKEN": OTHER})
    assert bad.value.field == "secrets.HF TOKEN"
    with pytest.raises(Invalid) as bad:
        service.resume(ADMIN, job.id, secrets={"HF_TOKEN": None})
    assert bad.value.field == "secrets.HF_TOKEN" and "`broker resume --secret HF_TOKEN=...`" in bad.value.reason
    resumed = service.resume(ADMIN, job.id, secrets={"HF_TOKEN": OTHER}, envs={"EPOCHS": "3"})
    assert resumed.state is JobState.QUEUED and "secrets HF_TOKEN set" in resumed.reason, resumed.reason
    stored = store.get_job(job.id).spec
    assert stored["envs"] == {"EPOCHS": "3"} and set(stored["secrets"]) == {"WANDB_API_KEY", "HF_TOKEN"}
    assert all(v.startswith("sealed:v1:") for v in stored["secrets"].values())
    final = run_until(engine, store, job.id, {"succeeded", "failed"})
    assert final.state is JobState.SUCCEEDED, final.reason
    assert out.read_text() == f"{VALUE}|{OTHER}|3"
    event = next(e for e in store.events(job.id) if e.event == "resume")
    assert event.data["secrets_set"] == ["HF_TOKEN"] and event.data["envs_set"] == ["EPOCHS"]
    assert OTHER.encode() not in raw_bytes(kind, store, tmp_path, redis_server)


def test_a_resume_refused_after_a_credentials_failure_names_the_secrets_to_give_not_a_resubmit(make_settings, tmp_path):
    """A job that failed for wandb's missing API key was refused a plain resume with "Change the job and resubmit, or
    resume with force": a new submit, or the same failure again. It names the resume that goes on now."""
    from broker.diagnosis import Ending, diagnose
    from broker.service import Conflict

    store = open_store(f"sqlite://{tmp_path / 'creds.db'}")
    service = BrokerService(make_settings(), store)
    admin = Principal("admin", None, admin=True)
    try:
        job = service.submit(admin, {"run": "python train.py", "broker": {"budget_usd": "1"}})[0]
        found = diagnose(Ending(phase="failed", exit_code=1, log_tail="wandb.errors.UsageError: api_key not configured"))
        assert found.secrets == ("WANDB_API_KEY",)
        store.commit(Change(job=replace(job, state=JobState.FAILED, reason=found.text, diagnosis=found.to_dict()),
                            expected_version=job.version))
        with pytest.raises(Conflict) as refused:
            service.resume(admin, job.id)
        said = str(refused.value)
        assert f"Resume it with them (broker resume {job.id} --secret WANDB_API_KEY)" in said, said
        assert "resubmit" not in said, said
        assert service.resume(admin, job.id, secrets={"WANDB_API_KEY": "k-123"}).state is JobState.QUEUED
    finally:
        store.close()


def test_a_resume_whose_envs_with_the_jobs_sealed_secrets_are_too_large_together_is_refused_and_nothing_changes(
        make_settings, tmp_path):
    """Each map a resume sets was held to the 1 MiB environment limit alone; with the job's stored (sealed) secrets it
    could come to more, accepted and then failed at every launch ("Argument list too long"). The sealed values are
    opened to be counted; refused naming the field and the limit, the job left as it was."""
    from broker.spec import MAX_ARG_BYTES, MAX_ENV_BYTES

    store = open_store(f"sqlite://{tmp_path / 'envs.db'}")
    service = BrokerService(make_settings(), store)
    big = "x" * (MAX_ARG_BYTES - 20)  # one variable, under the per-string limit
    stored_secrets = {f"S{i}": big for i in range(5)}  # ~640 KiB, sealed in the store
    try:
        job = service.submit(ADMIN, {"run": "python train.py", "secrets": stored_secrets,
                                     "broker": {"budget_usd": "1"}})[0]
        assert all(v.startswith("sealed:v1:") for v in store.get_job(job.id).spec["secrets"].values())
        failed = replace(job, state=JobState.FAILED, reason="node lost", diagnosis={"infrastructure": True})
        store.commit(Change(job=failed, expected_version=job.version))
        envs = {f"E{i}": big for i in range(4)}  # ~512 KiB: under the limit alone, over it with the secrets
        with pytest.raises(Invalid) as bad:
            service.resume(ADMIN, job.id, envs=envs)
        assert bad.value.field == "envs" and f"{MAX_ENV_BYTES:,}" in bad.value.reason, bad.value.reason
        assert "with the job's other envs and secrets" in bad.value.reason, bad.value.reason
        after = store.get_job(job.id)
        assert after.state is JobState.FAILED and "envs" not in after.spec
        assert service.resume(ADMIN, job.id, envs={"E0": big}).state is JobState.QUEUED  # within it together
    finally:
        store.close()


def test_a_failure_quoting_a_line_that_printed_a_secret_hides_its_value_in_the_reason_and_events(make_settings,
                                                                                                   tmp_path):
    """`set -x` prints the command with the token in it; the diagnosis quoted that last line into the job's reason,
    its events, Slack's notice and the dashboard, and the store kept it unsealed. The broker knows the values (it
    opens them at launch) and hides them as it does in a launcher's refusal; the log itself is the job's own."""
    settings = make_settings(store_url=f"sqlite://{tmp_path / 'quoted.db'}", config=CONFIG)
    store = open_store(settings.store_url)
    launcher = open_launcher(settings)
    service, engine = BrokerService(settings, store, launcher), Engine(settings, store, launcher)
    try:
        job = service.submit(ADMIN, {"name": "traced", "resources": {"cpus": 1}, "secrets": {"HF_TOKEN": VALUE},
                                     "run": 'set -x\nfalse --token "$HF_TOKEN"', "broker": {"budget_usd": 5}})[0]
        failed = run_until(engine, store, job.id, {"succeeded", "failed"})
        assert failed.state is JobState.FAILED
        assert "false --token ***" in failed.reason, failed.reason
        kept = json.dumps([failed.reason, failed.diagnosis, [e.reason for e in store.events(job.id)],
                           [a.stop_reason for a in store.attempts(job.id)]])
        assert VALUE not in kept, kept
    finally:
        store.close()


def _serve(tmp_path, **env):
    """A real ``broker serve`` (no engine: the job stays queued) on ``tmp_path``'s data dir; its process, URL and the
    start-up lines it wrote."""
    from broker_testing import start_broker

    before = set(tmp_path.glob("broker-*.log"))
    proc, url = start_broker(tmp_path, engine="off", config=CONFIG, env_extra=env)
    (log,) = set(tmp_path.glob("broker-*.log")) - before
    return proc, url, log


def _stop(proc) -> None:
    import signal

    proc.send_signal(signal.SIGTERM)  # not stop_broker: that cancels the queued job, which must stay not ended
    proc.wait(15)


def test_at_start_a_key_file_replaced_by_the_key_setting_and_a_queued_jobs_key_the_broker_lacks_are_said(tmp_path):
    """QA INCIDENT: a key file BROKER_SECRETS_KEY replaced stays a valid key (its job tokens pass, its secrets open)
    for as long as it is in the data dir, and nothing said so; and a broker given a new key without the old one in
    BROKER_SECRETS_OLD_KEYS started without a word, each queued job with secrets failing only at its launch."""
    import httpx

    from broker.sealing import key_id, parse_key

    proc, url, _ = _serve(tmp_path)  # no key set: serve makes the data dir's key file, and seals with it
    try:
        r = httpx.post(f"{url}/v1/jobs", json=task(tmp_path / "seen.txt"),
                       headers={"Authorization": f"Bearer {ADMIN_TOKEN}"})
        assert r.status_code == 201, r.text
    finally:
        _stop(proc)
    key_file = tmp_path / "data" / KEY_FILE
    old = key_file.read_text().strip()
    old_id, new = key_id(parse_key(old, "old")), key_text()

    proc, url, log = _serve(tmp_path, BROKER_SECRETS_KEY=new)  # the key rotated, the file left where it was
    _stop(proc)
    said = log.read_text()
    assert f"the key file {key_file} holds a key other than BROKER_SECRETS_KEY (key id {old_id})" in said, said
    assert "1 job not ended holds secrets sealed with it: keep the file until it has launched" in said, said
    assert "does not have" not in said and old not in said and new not in said

    key_file.unlink()  # the file gone (another host, a data dir not restored) and the old key not listed
    proc, url, log = _serve(tmp_path, BROKER_SECRETS_KEY=new)
    _stop(proc)
    said = log.read_text()
    assert (f"1 job not ended holds secrets sealed with a key this broker does not have (key id {old_id}): it fails "
            "when it is launched; list that key in BROKER_SECRETS_OLD_KEYS") in said, said
    assert "holds a key other than" not in said and old not in said

    proc, url, log = _serve(tmp_path, BROKER_SECRETS_KEY=new, BROKER_SECRETS_OLD_KEYS=old)  # as the docs say
    _stop(proc)
    said = log.read_text()
    assert "does not have" not in said and "holds a key other than" not in said, said

    # `broker worker` (an engine apart from the API) says the same at its start: it is the one that would launch it
    import subprocess
    import sys

    from broker_testing import REPO

    (tmp_path / "worker.yaml").write_text(CONFIG)
    err = tmp_path / "worker.err"
    worker = subprocess.Popen([sys.executable, "-m", "broker.cli", "worker", "--config", str(tmp_path / "worker.yaml")],
                              env={**os.environ, "BROKER_DATA_DIR": str(tmp_path / "data"), "BROKER_SECRETS_KEY": new,
                                   "BROKER_ADMIN_TOKEN": ADMIN_TOKEN}, cwd=REPO, stdout=subprocess.DEVNULL,
                              stderr=open(err, "wb"))
    try:
        wait_for(lambda: "does not have" in err.read_text() or worker.poll() is not None, timeout=30)
        assert f"sealed with a key this broker does not have (key id {old_id})" in err.read_text(), err.read_text()
    finally:
        worker.terminate()
        worker.wait(15)
