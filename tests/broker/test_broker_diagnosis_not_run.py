"""Three gaps of the diagnosis: a credentials failure named the secret to give only in its hint's words (now the
diagnosis carries the names, ``"secrets"`` in its dict, which the CLI turns into ``broker resume JOB --secret NAME``);
an attempt the local launcher did not run at all (its workdir missing on the host, its pool's run_as user missing, a
mount another job holds) read as "The setup command exited with code 1. Read the end of its log for the cause.",
though the task had no setup and its log said why; and "Read the end of its log" for a job that printed nothing.

The "not run" logs are the ones the real local runner writes (launchers/local_runner.py), run here.
"""

from __future__ import annotations

import json
import os
import sys

import pytest

from broker.diagnosis import AWS_KEYS, Diagnosis, Ending, diagnose
from broker.models import Job, JobState
from launchers.local_runner import MountTaken, Runner, link_mounts

OLD_KEYS = {"class", "sentence", "hint", "infrastructure", "step", "text"}


def _failed(log_tail: str, code: int = 1, command: str = "run") -> Diagnosis:
    return diagnose(Ending("failed", code, log_tail=log_tail, command=command))


# -- 1. the secrets a credentials failure names ------------------------------------------------------------------

CREDENTIALS = [
    ("boto3 without credentials",
     "step 9\nTraceback (most recent call last):\n  File \"train.py\", line 30, in save\n"
     "botocore.exceptions.NoCredentialsError: Unable to locate credentials\n",
     ["AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"]),
    ("an AWS key AWS does not know",
     "botocore.exceptions.ClientError: An error occurred (InvalidAccessKeyId) when calling the PutObject operation: "
     "The AWS Access Key Id you provided does not exist in our records.\n",
     ["AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"]),
    ("an expired temporary AWS credential: its session token too",
     "botocore.exceptions.ClientError: An error occurred (ExpiredToken) when calling the GetObject operation: The "
     "provided token has expired.\n",
     ["AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN"]),
    ("a gated Hugging Face model",
     "huggingface_hub.errors.GatedRepoError: 403 Client Error.\n\nCannot access gated repo for url "
     "https://huggingface.co/google/gemma-7b/resolve/main/config.json.\nAccess to model google/gemma-7b is "
     "restricted and you are not in the authorized list.\n",
     ["HF_TOKEN"]),
    ("a Hugging Face token the Hub refuses",
     "huggingface_hub.errors.HfHubHTTPError: 401 Client Error: Unauthorized for url: "
     "https://huggingface.co/api/whoami-v2\n\nInvalid credentials in Authorization header\n",
     ["HF_TOKEN"]),
    ("wandb without an API key",
     "wandb: ERROR api_key not configured (no-tty). call wandb.login(key=[your_api_key])\n"
     "wandb.errors.errors.UsageError: api_key not configured (no-tty).\n",
     ["WANDB_API_KEY"]),
]


@pytest.mark.parametrize("log_tail,names", [c[1:] for c in CREDENTIALS], ids=[c[0] for c in CREDENTIALS])
def test_a_credentials_failure_names_the_secrets_to_give_in_its_dict(log_tail, names):
    d = _failed(log_tail)
    assert d.cls == "credentials"
    assert list(d.secrets) == names
    stored = d.to_dict()
    assert stored["secrets"] == names
    assert all(name in d.hint for name in names)  # the names its hint already says, no other
    assert OLD_KEYS <= set(stored) and set(stored) - OLD_KEYS == {"secrets"}
    assert json.loads(json.dumps(stored))["secrets"] == names  # stored as JSON, as a job's diagnosis is


def test_google_credentials_name_no_secret_a_resume_could_give():
    """Its key is a file in the task's file_mounts (GOOGLE_APPLICATION_CREDENTIALS names its path): the hint says to
    submit the task again, which `broker resume --secret` cannot stand in for."""
    d = _failed("google.auth.exceptions.DefaultCredentialsError: Your default credentials were not found.\n")
    assert d.cls == "credentials" and d.secrets == ()
    assert "secrets" not in d.to_dict() and "GOOGLE_APPLICATION_CREDENTIALS" in d.hint


@pytest.mark.parametrize("log_tail", [
    "ModuleNotFoundError: No module named 'transformers'\n",
    "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB\n",
    "ValueError: bad record 5\n",
    "",
])
def test_a_diagnosis_that_names_no_secret_keeps_its_dict_as_it_was(log_tail):
    stored = _failed(log_tail).to_dict()
    assert set(stored) == OLD_KEYS


def test_a_stored_diagnosis_keeps_its_secrets_and_one_from_an_older_broker_reads_without_them():
    d = _failed("wandb.errors.errors.UsageError: api_key not configured (no-tty).\n")
    job = Job(id="j-1", name="n", team="t", state=JobState.FAILED, spec={"run": "x"}, budget=10**9, priority=0,
              submitted_at=0.0, updated_at=0.0, diagnosis={**d.to_dict(), "attempt": 1})
    again = Job.from_dict(json.loads(json.dumps(job.to_dict())))
    assert again.diagnosis["secrets"] == ["WANDB_API_KEY"]
    older = {k: v for k, v in again.diagnosis.items() if k != "secrets"}  # as an older broker stored it
    assert Job.from_dict({**job.to_dict(), "diagnosis": older}).diagnosis.get("secrets", []) == []


# -- 2. an attempt the local launcher did not run ------------------------------------------------------------------


def _run_locally(tmp_path, task: dict, **request) -> tuple[dict, str]:
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    (run_dir / "request.json").write_text(json.dumps({"attempt_id": "j-1-a1", "task": task, "placement": {},
                                                      "envs": {}, **request}))
    result = Runner(run_dir).run()
    return result, (run_dir / "output.log").read_text()


def _ending(result: dict, log: str) -> Ending:
    """How the monitor reads the runner's result (broker/engine/reconcile.py: status.step is the command)."""
    return Ending("failed", result["exit_code"], result["signal"], result.get("reason", ""), log,
                  command=result["step"])


def test_a_workdir_missing_on_the_host_says_so_not_that_a_setup_failed(tmp_path):
    missing = tmp_path / "nonexistent"
    result, log = _run_locally(tmp_path, {"workdir": str(missing), "run": "echo never"})
    assert f"[spot-broker] workdir {missing}: not run: there is no such directory on this host" in log
    d = diagnose(_ending(result, log))
    assert d.cls == "workdir_missing", d.text
    assert f"its workdir {missing} is not a directory on the host" in d.sentence
    assert "setup" not in d.sentence and "Read the end of its log" not in d.hint
    assert "--upload-workdir" in d.hint and "exist" in d.hint and "resume" in d.hint
    assert not d.infrastructure  # a resume meets the same missing directory
    assert "secrets" not in d.to_dict()


def test_a_missing_workdir_with_a_setup_is_still_the_workdir(tmp_path):
    missing = tmp_path / "gone"
    result, log = _run_locally(tmp_path, {"workdir": str(missing), "setup": "pip install x", "run": "python t.py",
                                          "num_nodes": 2})
    assert "[spot-broker] num_nodes: 2" in log  # the host's notes come first
    d = diagnose(_ending(result, log))
    assert d.cls == "workdir_missing" and str(missing) in d.sentence


def test_a_pool_user_missing_on_the_host_says_so(tmp_path):
    result, log = _run_locally(tmp_path, {"run": "echo never"}, run_as={"user": "no-such-user-here"})
    assert (result["exit_code"], result["step"]) == (1, "setup")
    d = diagnose(_ending(result, log))
    assert d.cls == "run_as_user", d.text
    assert d.sentence == ("Nothing of the job ran: its pool runs its jobs as the user 'no-such-user-here', and there "
                          "is no such user on this host.")
    assert "run_as" in d.hint and not d.infrastructure


@pytest.mark.parametrize("inside", [False, True], ids=["the same destination", "a destination inside it"])
def test_a_mount_another_job_holds_says_so_and_resumes_without_force(tmp_path, inside):
    theirs = tmp_path / "data" / "workdirs" / "mounts" / "j-2-a1" / "0"
    theirs.mkdir(parents=True)
    dest = tmp_path / "mnt"
    os.symlink(theirs, dest)
    source = tmp_path / "mine"
    source.mkdir()
    wanted = str(dest / "tok") if inside else str(dest)
    with pytest.raises(MountTaken) as taken:
        link_mounts({"file_mounts": {wanted: str(source)}})
    log = f"[spot-broker] {taken.value}\n"  # as the runner writes it (Runner._steps)
    d = _failed(log, command="setup")
    assert d.cls == "mount_busy", d.text
    assert f"destination {wanted} is in use" in d.sentence
    assert d.infrastructure  # free once the other job ends


def test_the_brokers_other_lines_are_still_not_read_as_the_jobs(tmp_path):
    d = _failed("[spot-broker] run exited with status 3\n", code=3)
    assert d.sentence == "The job exited with code 3."


# -- 3. a job that printed nothing ----------------------------------------------------------------------------------


def test_a_job_that_printed_nothing_is_not_told_to_read_its_log(tmp_path):
    result, log = _run_locally(tmp_path, {"run": f"{sys.executable} -c 'raise SystemExit(3)'"})
    assert result["exit_code"] == 3 and not log.strip()
    d = diagnose(_ending(result, log))
    assert d.cls == "user_code_error"
    assert d.sentence == "The job exited with code 3."
    assert "Read the end of its log" not in d.hint
    assert d.hint.startswith("It printed nothing") and "by hand" in d.hint and "logging" in d.hint


@pytest.mark.parametrize("log_tail", ["", "   \n\n\t\n", "[spot-broker] num_nodes: 2 runs on this host as one node\n"],
                         ids=["empty", "blank", "only the broker's own lines"])
def test_a_log_with_nothing_of_the_job_is_read_as_it_printing_nothing(log_tail):
    for ending in (Ending("failed", 3, log_tail=log_tail), Ending("failed", None, 6, log_tail=log_tail),
                   Ending("failed", 2, log_tail=log_tail, command="setup")):
        d = diagnose(ending)
        assert d.hint.startswith("It printed nothing"), d.text


def test_a_job_that_printed_something_is_still_told_to_read_its_log():
    d = _failed("loading shards\n", code=3)
    assert d.sentence == 'The job exited with code 3: "loading shards".'
    assert d.hint == "Read the end of its log for the cause."


def test_aws_keys_are_the_pair_the_hints_name():
    assert AWS_KEYS == ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY")
