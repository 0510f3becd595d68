"""The status mapping, as recorded SkyPilot sequences: each poll's view → the attempt's phase. Pure."""

from __future__ import annotations

import pytest

from launchers.base import Phase
from launchers.skypilot_status import Launch, Observation, next_status

IN_FLIGHT = Observation(launch=Launch.IN_FLIGHT)
CLONE_ERROR = ("Command export EPOCHS=3 && export BROKER_JOB_ID=j-0123456789 && export BROKER_ATTEMPT=2 && export "
               "BROKER_CHECKPOINT_URI=s3://b... failed with return code 128. Git clone failed on 10.0.0.7:22: "
               "/home/ubuntu/sky_workdir None")
"""SkyPilot 0.14.1's message for a launch whose clone of the git workdir failed (``CommandRunner.git_clone``)."""


def obs(cluster=None, job=None, *, spot=False, launch=Launch.DONE, stop=None, error="", past_limit=False,
        init_for=0.0):
    return Observation(launch=launch, cluster=cluster, job=job, spot=spot, stop_reason=stop, launch_error=error,
                       limit_passed=past_limit, init_seconds=init_for, init_wait_seconds=180)


SEQUENCES = [
    ("launch in flight → INIT → UP and RUNNING → SUCCEEDED: pending, pending, running, succeeded",
     [IN_FLIGHT, obs("INIT"), obs("UP", "RUNNING"), obs("UP", "SUCCEEDED")],
     [Phase.PENDING, Phase.PENDING, Phase.RUNNING, Phase.SUCCEEDED]),
    ("init → up with the job setting up is running (setup counts)",
     [obs("INIT"), obs("UP", "SETTING_UP")], [Phase.PENDING, Phase.RUNNING]),
    ("up with the job still pending in the cluster's queue is pending",
     [obs("UP", "PENDING"), obs("UP", "INIT")], [Phase.PENDING, Phase.PENDING]),
    ("spot: up and running → cluster gone is a preemption",
     [obs("UP", "RUNNING", spot=True), obs(None, spot=True)], [Phase.RUNNING, Phase.PREEMPTED]),
    ("spot: up and running → cluster INIT past the wait (a node was reclaimed) is a preemption",
     [obs("UP", "RUNNING", spot=True), obs("INIT", spot=True, init_for=180)], [Phase.RUNNING, Phase.PREEMPTED]),
    ("on-demand: up and running → cluster INIT past the wait, its job unreadable, is lost",
     [obs("UP", "RUNNING"), obs("INIT", init_for=60), obs("INIT", init_for=181)],
     [Phase.RUNNING, Phase.RUNNING, Phase.LOST]),
    ("up and running → INIT with its job still RUNNING (a failed health check) → UP: running throughout",
     [obs("UP", "RUNNING"), obs("INIT", "RUNNING"), obs("INIT", "RUNNING", init_for=170), obs("UP", "RUNNING")],
     [Phase.RUNNING, Phase.RUNNING, Phase.RUNNING, Phase.RUNNING]),
    ("spot: up and running → INIT, its job unreadable, within the wait: still running",
     [obs("UP", "RUNNING", spot=True), obs("INIT", spot=True, init_for=30)], [Phase.RUNNING, Phase.RUNNING]),
    ("up and running → INIT with its job read as ended: the job's end, not a wait",
     [obs("UP", "RUNNING"), obs("INIT", "SUCCEEDED")], [Phase.RUNNING, Phase.SUCCEEDED]),
    ("up and running → a job status this mapping does not know → RUNNING: running throughout, never pending",
     [obs("UP", "RUNNING"), obs("UP", "SOME_NEW_STATE"), obs("UP", "RUNNING")],
     [Phase.RUNNING, Phase.RUNNING, Phase.RUNNING]),
    ("up and running → no job status read: still running",
     [obs("UP", "RUNNING"), obs("UP", None)], [Phase.RUNNING, Phase.RUNNING]),
    ("up, a job status not known before it ever ran: pending",
     [obs("UP", "SOME_NEW_STATE")], [Phase.PENDING]),
    ("still provisioning (INIT, never ran) is pending, not running",
     [obs("INIT", init_for=0)], [Phase.PENDING]),
    ("spot: up and running → cluster STOPPED is a preemption",
     [obs("UP", "RUNNING", spot=True), obs("STOPPED", spot=True)], [Phase.RUNNING, Phase.PREEMPTED]),
    ("on-demand: up and running → cluster gone is a lost node, not a preemption",
     [obs("UP", "RUNNING"), obs(None)], [Phase.RUNNING, Phase.LOST]),
    ("the run command fails: failed, at the run step",
     [obs("UP", "RUNNING"), obs("UP", "FAILED")], [Phase.RUNNING, Phase.FAILED]),
    ("the setup command fails: failed, at the setup step",
     [obs("UP", "SETTING_UP"), obs("UP", "FAILED_SETUP")], [Phase.RUNNING, Phase.FAILED]),
    ("launch in flight → launch failed (no spot capacity): pending, then lost so the engine requeues",
     [IN_FLIGHT, obs(launch=Launch.FAILED, error="no capacity")], [Phase.PENDING, Phase.LOST]),
    ("stop requested while running → cluster gone: stopped",
     [obs("UP", "RUNNING"), obs(None, stop="cancelled")], [Phase.RUNNING, Phase.STOPPED]),
    ("stop for preemption while running (spot) → cluster gone: preempted",
     [obs("UP", "RUNNING", spot=True), obs(None, spot=True, stop="preempted")], [Phase.RUNNING, Phase.PREEMPTED]),
    ("a job cancelled outside the broker is stopped",
     [obs("UP", "RUNNING"), obs("UP", "CANCELLED")], [Phase.RUNNING, Phase.STOPPED]),
    ("succeeded, then the cluster torn down: still succeeded (final phases are sticky)",
     [obs("UP", "SUCCEEDED", spot=True), obs(None, spot=True)], [Phase.SUCCEEDED, Phase.SUCCEEDED]),
    ("no launch and no cluster: gone",
     [obs(None, launch=Launch.NONE)], [Phase.GONE]),
    ("launched spot cluster gone before its job ran (broker restarted, no memory): preempted",
     [obs(None, spot=True)], [Phase.PREEMPTED]),
    ("launched on-demand cluster gone, no job seen: lost",
     [obs(None)], [Phase.LOST]),
    ("past its budget limit, the cluster gone (its guard stopped the run, autodown took it): stopped, not lost",
     [obs("UP", "RUNNING"), obs(None, past_limit=True)], [Phase.RUNNING, Phase.STOPPED]),
    ("spot, past its budget limit, the cluster gone: stopped, not preempted (no resume beyond the budget)",
     [obs("UP", "RUNNING", spot=True), obs(None, spot=True, past_limit=True)], [Phase.RUNNING, Phase.STOPPED]),
    ("past its budget limit with the cluster still up and its job running: running (the guard is stopping it)",
     [obs("UP", "RUNNING", past_limit=True)], [Phase.RUNNING]),
    ("past its budget limit, the broker's own stop tore it down: stopped for the broker's reason",
     [obs("UP", "RUNNING"), obs(None, stop="cancelled", past_limit=True)], [Phase.RUNNING, Phase.STOPPED]),
    ("a cluster left INIT after the launch request finished (provisioning broke) is pending until it resolves",
     [obs("INIT"), obs("UP", "RUNNING")], [Phase.PENDING, Phase.RUNNING]),
    ("launch in flight → launch failed leaving its cluster UP with no job (a sync failed, no autostop set): lost",
     [IN_FLIGHT, obs("UP", launch=Launch.FAILED, error="CommandError: rsync failed")], [Phase.PENDING, Phase.LOST]),
    ("launch in flight → SkyPilot's clone of the git workdir failed, its cluster UP with no job: failed",
     [IN_FLIGHT, obs("UP", launch=Launch.FAILED, error=CLONE_ERROR)], [Phase.PENDING, Phase.FAILED]),
    ("a stop while the launch failed leaving its cluster UP: stopped for the stop's reason",
     [IN_FLIGHT, obs("UP", launch=Launch.FAILED, error=CLONE_ERROR, stop="cancelled")], [Phase.PENDING, Phase.STOPPED]),
    ("up and running, then its launch request reads failed with no job read: still running, not ended",
     [obs("UP", "RUNNING"), obs("UP", None, launch=Launch.FAILED, error="lost the log stream")],
     [Phase.RUNNING, Phase.RUNNING]),
]


@pytest.mark.parametrize("observed, expected", [(o, e) for _, o, e in SEQUENCES], ids=[s[0] for s in SEQUENCES])
def test_sequence(observed, expected):
    phases, previous = [], None
    for o in observed:
        previous = next_status(previous, o).phase
        phases.append(previous)
    assert phases == expected


def test_failed_setup_names_the_setup_step():
    status = next_status(Phase.RUNNING, obs("UP", "FAILED_SETUP"))
    assert (status.phase, status.step) == (Phase.FAILED, "setup")


def test_a_failed_launch_carries_skypilots_reason():
    status = next_status(Phase.PENDING, obs(launch=Launch.FAILED, error="InsufficientInstanceCapacity in us-east-1b"))
    assert "InsufficientInstanceCapacity in us-east-1b" in status.reason


def test_a_failed_clone_of_the_git_workdir_fails_the_attempt_at_its_workdir_step_naming_the_repository():
    status = next_status(Phase.PENDING, Observation(launch=Launch.FAILED, cluster="UP", launch_error=CLONE_ERROR,
                                                    git_workdir="https://github.com/org/train.git at v3"))
    assert (status.phase, status.step, status.exit_code) == (Phase.FAILED, "workdir", None)
    assert status.reason == ("the git repository https://github.com/org/train.git at v3 could not be cloned on the "
                             "cluster (no such repository, branch, tag or commit, no access to it, or no network "
                             "there; SkyPilot: Git clone failed on 10.0.0.7:22: /home/ubuntu/sky_workdir)")
    assert "BROKER_" not in status.reason, "the command SkyPilot ran, with the job's variables, is left out"


def test_a_cluster_gone_past_its_limit_is_a_budget_stop():
    status = next_status(Phase.RUNNING, obs(None, spot=True, past_limit=True))
    assert (status.phase, status.reason) == (Phase.STOPPED, "budget")
    assert next_status(Phase.RUNNING, obs(None, stop="cancelled", past_limit=True)).reason == "cancelled"
