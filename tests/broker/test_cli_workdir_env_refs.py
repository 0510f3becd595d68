"""``workdir: /tmp/x/${PROJ}`` with ``envs: {PROJ: proj}``: SkyPilot fills the task's envs into its workdir, where
``broker submit`` looked for the directory as written ("error: workdir /tmp/x/${PROJ}: no such directory"). The CLI
fills it from the envs (``--env`` over the YAML's) before checking and packing it, so the job runs in the directory
SkyPilot would sync.

A real ``broker serve`` (SQLite, one local pool slot) and the CLI as a user runs it, in a subprocess."""

from __future__ import annotations

import pytest

from broker_testing import cli_runner, start_broker, stop_broker

CONFIG = """
pools:
  - {name: local, slots: 1, price_per_slot_hour: "0.36"}
tick_seconds: 0.2
stop_grace_seconds: 2
"""


@pytest.fixture(scope="module")
def broker(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("envrefs")
    proc, url = start_broker(tmp, f"sqlite://{tmp / 'c.db'}", config=CONFIG)
    for name in ("proj", "other"):
        (tmp / "x" / name).mkdir(parents=True)
        (tmp / "x" / name / "marker.txt").write_text(f"this is {name}\n")
    task = tmp / "task.yaml"
    task.write_text(f"name: refs\nresources: {{cpus: 1}}\nworkdir: {tmp}/x/${{PROJ}}\nenvs: {{PROJ: proj}}\n"
                    "run: cat marker.txt\n")
    yield cli_runner(url), task
    stop_broker(proc, url)


@pytest.mark.parametrize("upload", [[], ["--upload-workdir"]], ids=["read on this host", "packed and uploaded"])
def test_a_workdir_naming_an_env_runs_in_the_directory_the_env_names(broker, upload):
    run, task = broker
    r = run("submit", str(task), "--wait", *upload, check=False)
    assert r.returncode == 0, r.stderr
    assert "this is proj" in r.stdout and "no such directory" not in r.stderr, (r.stdout, r.stderr)
    if upload:
        assert f"workdir {task.parent}/x/proj: " in r.stderr, r.stderr  # the filled path is the one packed


def test_an_env_given_on_the_command_line_fills_the_workdir_over_the_yamls(broker):
    run, task = broker
    r = run("submit", str(task), "--wait", "--env", "PROJ=other", "--upload-workdir", check=False)
    assert r.returncode == 0 and "this is other" in r.stdout, (r.stdout, r.stderr)
    assert f"workdir {task.parent}/x/other: " in r.stderr, r.stderr


def test_an_uploaded_mount_whose_destination_names_an_env_is_mounted_where_the_env_says(broker, tmp_path):
    """An uploaded file mount moves to ``broker.file_mounts``, which the broker does not fill: its destination
    ``~/mnt/${PROJ}/cfg.txt`` was mounted as written, and ``cat ~/mnt/proj/cfg.txt`` found nothing."""
    run, task = broker
    (tmp_path / "cfg.txt").write_text("config for the mount\n")
    mounted = tmp_path / "mounted.yaml"
    mounted.write_text(f"name: refs-mount\nresources: {{cpus: 1}}\nworkdir: {task.parent}/x/${{PROJ}}\n"
                       f"envs: {{PROJ: proj}}\nfile_mounts: {{'~/mnt-$PROJ/cfg.txt': {tmp_path / 'cfg.txt'}}}\n"
                       "run: cat ~/mnt-proj/cfg.txt\n")
    r = run("submit", str(mounted), "--wait", "--upload-workdir", check=False)
    assert r.returncode == 0 and "config for the mount" in r.stdout, (r.stdout, r.stderr)


def test_uploaded_mounts_that_fill_in_to_one_destination_are_refused(broker, tmp_path):
    """QA: without upload the broker refused two destinations that fill in to one; uploaded, they moved to
    ``broker.file_mounts`` unfilled and unchecked, and both were mounted at the literal ``$Y`` and ``${X}``."""
    run, task = broker
    (tmp_path / "f.txt").write_text("f\n")
    clash = tmp_path / "clash.yaml"
    clash.write_text(f"name: clash\nresources: {{cpus: 1}}\nenvs: {{X: b, Y: b}}\n"
                     f"file_mounts: {{'/tmp/m/${{X}}': {tmp_path / 'f.txt'}, '/tmp/m/$Y': {tmp_path / 'f.txt'}}}\n"
                     "run: 'true'\n")
    r = run("submit", str(clash), "--upload-workdir", check=False)
    assert r.returncode == 1 and "Traceback" not in r.stderr, r.stderr
    assert "are both '/tmp/m/b' once the task's envs are filled in" in r.stderr, r.stderr
    assert "submitted" not in r.stdout, r.stdout


def test_a_dry_run_uploading_file_mounts_with_no_workdir_checks_them_without_a_traceback(broker, tmp_path):
    """QA: ``Path(None)`` was built for the missing workdir before being dropped: a TypeError traceback."""
    run, task = broker
    (tmp_path / "t.txt").write_text("t\n")
    only = tmp_path / "only-mounts.yaml"
    only.write_text(f"name: only\nresources: {{cpus: 1}}\nfile_mounts: {{/tmp/mm2/x: {tmp_path / 't.txt'}}}\n"
                    "run: 'true'\n")
    r = run("submit", str(only), "--dry-run", "--upload-workdir", check=False)
    assert r.returncode == 0 and "Traceback" not in r.stderr, r.stderr
    assert "would be uploaded by a submit" in r.stderr, r.stderr


def test_a_workdir_naming_a_secret_says_why_it_was_not_filled_in(broker, tmp_path):
    """QA: ``workdir: …/${TOK}`` with ``TOK`` a secret said only "no such directory"."""
    run, task = broker
    sec = tmp_path / "sec.yaml"
    sec.write_text(f"name: sec\nresources: {{cpus: 1}}\nworkdir: {tmp_path}/proj/${{TOK}}\nsecrets: {{TOK: null}}\n"
                   f"envs: {{SUB: null}}\nrun: 'true'\n")
    r = run("submit", str(sec), "--secret", "TOK=sub", "--dry-run", check=False)
    assert r.returncode == 1, r.stderr
    assert "${TOK} is one of the task's secrets, which are never filled into a path" in r.stderr, r.stderr
