"""The launcher's contract over a scripted SkyPilot: idempotent launch, status, teardown, stop,
logs, sweep. Plans are SkyPilot's real dry run only where a test needs one; here they are skipped
(``real_plan=False``) — the planning path is covered by ``test_skypilot_plan``."""

from __future__ import annotations

import pytest
from skypilot_fakes import ScriptedSky
from test_skypilot_task import GPU_TASK, ONDEMAND_T4, SPOT_A100, request

import dataclasses
import re
import time

from launchers.base import Launcher, Phase
from launchers.skypilot import AUTODOWN_MARGIN_SECONDS, SkyPilotLauncher
from launchers.skypilot_status import Launch

AID = "j-0123456789-a2"
CLUSTER = "broker-j-0123456789-a2"


@pytest.fixture
def sky_client():
    return ScriptedSky(real_plan=False)


@pytest.fixture
def launcher(sky, tmp_path, sky_client):
    return SkyPilotLauncher(tmp_path / "state", client=sky_client)


def test_it_is_a_launcher(launcher):
    assert isinstance(launcher, Launcher)
    assert launcher.capabilities.preemption_notice is False


def test_a_repeated_launch_finds_the_same_attempt_and_launches_once(launcher, sky_client):
    launcher.launch(request(GPU_TASK, SPOT_A100))
    launcher.launch(request(GPU_TASK, SPOT_A100))
    assert [c for c, _ in sky_client.launched] == [CLUSTER]


def test_a_broker_restarted_without_its_state_adopts_the_cluster_instead_of_making_a_second(
        sky, tmp_path, sky_client):
    sky_client.provisioned(CLUSTER, spot=True)
    fresh = SkyPilotLauncher(tmp_path / "other-state", client=sky_client)
    fresh.launch(request(GPU_TASK, SPOT_A100))
    assert sky_client.launched == []
    assert fresh.status(AID).phase is Phase.RUNNING


def test_a_launch_request_still_in_flight_after_a_crash_is_not_sent_again(sky, tmp_path, sky_client):
    sky_client.in_flight.add(CLUSTER)
    fresh = SkyPilotLauncher(tmp_path / "other-state", client=sky_client)
    fresh.launch(request(GPU_TASK, SPOT_A100))
    assert sky_client.launched == []
    assert fresh.status(AID).phase is Phase.PENDING


def test_a_stop_after_a_crash_inside_the_launch_call_cancels_the_request_it_had_sent(sky, tmp_path, sky_client):
    # The broker saved its intent, sent the launch and died before it kept the request's id: the
    # request is found by the attempt's cluster name and cancelled, so no cluster is made after the stop.
    class DiesInLaunch(ScriptedSky):
        def launch(self, task, cluster, *, autostop_minutes):
            self.in_flight.add(cluster)  # the API server queued it
            raise KeyboardInterrupt("the broker process died here")

    dying = DiesInLaunch(real_plan=False)
    with pytest.raises(KeyboardInterrupt):
        SkyPilotLauncher(tmp_path / "state", client=dying).launch(request(GPU_TASK, SPOT_A100))
    restarted = SkyPilotLauncher(tmp_path / "state", client=dying)
    restarted.stop(AID, grace_seconds=30, reason="cancelled")
    assert dying.cancelled == [f"in-flight:{CLUSTER}"] and not dying.launch_in_flight(CLUSTER)
    assert CLUSTER in dying.downed


class DiesAfterSending(ScriptedSky):
    """The API server takes the launch request; the broker dies before the request's id comes back."""

    died = False

    def launch(self, task, cluster, *, autostop_minutes):
        request_id = super().launch(task, cluster, autostop_minutes=autostop_minutes)
        if not self.died:
            self.died = True
            raise KeyboardInterrupt("the broker process died here")
        return request_id


def died_inside_the_launch_call(state_dir) -> DiesAfterSending:
    """The SkyPilot a broker with ``state_dir`` sent a launch of :data:`AID` to, dying before its id came back."""
    dying = DiesAfterSending(real_plan=False)
    with pytest.raises(KeyboardInterrupt):
        SkyPilotLauncher(state_dir, client=dying).launch(request(GPU_TASK, SPOT_A100))
    return dying


@pytest.mark.parametrize("state_kept", [True, False], ids=["its state file kept", "its state file lost"])
def test_a_launch_sent_before_a_crash_that_ran_and_is_gone_is_not_sent_again(sky, tmp_path, state_kept):
    # While no broker watched, the request made the cluster, the attempt ran on it, and autodown took the
    # cluster: nothing in SkyPilot's cluster list says it ever ran. A second launch would run it again.
    dying = died_inside_the_launch_call(tmp_path / "state")
    [(sent, _)] = dying.requests.items()
    dying.requests[sent] = (Launch.DONE, "")
    restarted = SkyPilotLauncher(tmp_path / ("state" if state_kept else "fresh-state"), client=dying)
    restarted.launch(request(GPU_TASK, SPOT_A100))
    restarted.launch(request(GPU_TASK, SPOT_A100))
    assert [c for c, _ in dying.launched] == [CLUSTER], "launched once"
    status = restarted.status(AID)
    assert status.phase is Phase.LOST and "while no broker watched it" in status.reason


class SlowToRecord(ScriptedSky):
    """An API server slow to answer: the SDK's POST of the first launch gives up (5 s) before the server records
    the request, which it does later (:meth:`record`)."""

    late: str | None = None

    def launch(self, task, cluster, *, autostop_minutes):
        import requests

        if self.late is None and not self.launched:
            self.launched.append((cluster, task.to_yaml_config()))
            self.late = cluster
            raise requests.exceptions.ReadTimeout("HTTPConnectionPool(host='127.0.0.1', port=46580): Read timed out. "
                                                  "(read timeout=5)")
        return super().launch(task, cluster, autostop_minutes=autostop_minutes)

    def record(self) -> str:
        request_id = f"req-late-{self.late}"
        self.requests[request_id] = (Launch.IN_FLIGHT, "")
        self.request_cluster[request_id] = self.late
        return request_id


def test_a_launch_whose_id_never_came_back_is_not_sent_again_while_the_server_may_still_record_it(sky, tmp_path):
    # The POST timed out and the API server recorded the request only later. Before, the engine's next look read
    # the attempt gone and launched it again: two launches of one cluster name run the attempt twice
    slow = SlowToRecord(real_plan=False)
    launcher = SkyPilotLauncher(tmp_path / "state", client=slow)
    launcher.launch(request(GPU_TASK, SPOT_A100))  # no id came back: not an error for the engine to retry
    status = launcher.status(AID)
    assert status.phase is Phase.PENDING and "no request id came back" in status.reason
    launcher.launch(request(GPU_TASK, SPOT_A100))  # the engine's launch of an attempt it reads pending: a no-op
    late = slow.record()
    assert launcher.status(AID).phase is Phase.PENDING
    slow.requests[late] = (Launch.DONE, "")
    slow.provisioned(CLUSTER, spot=True, job="RUNNING")
    assert launcher.status(AID).phase is Phase.RUNNING
    assert [c for c, _ in slow.launched] == [CLUSTER], "sent once"


def test_a_launch_whose_id_never_came_back_and_that_never_showed_up_is_sent_again_after_the_settle_time(sky, tmp_path):
    slow = SlowToRecord(real_plan=False)
    launcher = SkyPilotLauncher(tmp_path / "state", client=slow)
    launcher.launch(request(GPU_TASK, SPOT_A100))
    assert launcher.status(AID).phase is Phase.PENDING
    launcher.launch_settle_seconds = 0  # the settle time passed, and the server has no such request
    assert launcher.status(AID).phase is Phase.GONE
    launcher.launch(request(GPU_TASK, SPOT_A100))  # what the engine does with a launching attempt read gone
    assert [c for c, _ in slow.launched] == [CLUSTER, CLUSTER]
    assert launcher.status(AID).phase is Phase.PENDING  # followed by its request id now


class FailsBeforeSending(ScriptedSky):
    """SkyPilot's SDK failing on the broker's host before its launch left (:class:`NotSent`), once."""

    def __init__(self, cause: Exception):
        super().__init__(real_plan=False)
        self.cause = cause

    def launch(self, task, cluster, *, autostop_minutes):
        from launchers.skypilot import NotSent

        if self.cause is not None:
            cause, self.cause = self.cause, None
            raise NotSent(f"SkyPilot sent nothing for {cluster}") from cause
        return super().launch(task, cluster, autostop_minutes=autostop_minutes)


def test_a_launch_that_failed_before_it_was_sent_is_refused_not_awaited_and_sent_when_tried_again(sky, tmp_path):
    # Taken for a launch sent whose id was lost, the attempt read pending, then gone after the settle time, and
    # the engine launched it again: for ever, when the failure was the same each time
    from sky import exceptions

    from launchers.base import LaunchError

    client = FailsBeforeSending(exceptions.ApiServerConnectionError("http://127.0.0.1:1"))
    launcher = SkyPilotLauncher(tmp_path / "state", client=client)
    with pytest.raises(LaunchError) as caught:
        launcher.launch(request(GPU_TASK, SPOT_A100))
    assert not caught.value.permanent, "the API server may answer again: the job goes back to the queue"
    assert "Could not connect to SkyPilot API server" in str(caught.value)
    assert launcher.status(AID).phase is Phase.GONE, "nothing was sent, so there is nothing to wait for"
    launcher.launch(request(GPU_TASK, SPOT_A100))
    assert [c for c, _ in client.launched] == [CLUSTER]


def _count_listings(client) -> list:
    """The cluster listings ``client`` is asked for from now on (each call's names)."""
    calls, listed = [], client.clusters
    client.clusters = lambda names=None: calls.append(names) or listed(names)
    return calls


@pytest.mark.parametrize("sent", [False, True], ids=["never launched", "sent before a crash inside the launch call"])
def test_the_status_of_an_attempt_with_no_request_id_lists_its_cluster_once(sky, tmp_path, sent):
    # With no request id kept, status() looked for a launch SkyPilot had (one listing of the cluster), then
    # observed the attempt (a second listing of the same cluster, a moment later): one listing serves both
    client = died_inside_the_launch_call(tmp_path / "state") if sent else ScriptedSky(real_plan=False)
    if sent:
        client.provisioned(CLUSTER, spot=True, job="RUNNING")
    listings = _count_listings(client)
    status = SkyPilotLauncher(tmp_path / "state", client=client).status(AID)
    assert status.phase is (Phase.RUNNING if sent else Phase.GONE)
    assert listings == [[CLUSTER]]


def test_a_launch_sent_before_a_crash_and_still_in_flight_is_followed_to_its_cluster(sky, tmp_path):
    dying = died_inside_the_launch_call(tmp_path / "state")
    restarted = SkyPilotLauncher(tmp_path / "state", client=dying)
    restarted.launch(request(GPU_TASK, SPOT_A100))
    assert restarted.status(AID).phase is Phase.PENDING
    [(sent, _)] = dying.requests.items()
    dying.requests[sent] = (Launch.DONE, "")
    dying.provisioned(CLUSTER, spot=True, job="RUNNING")
    assert restarted.status(AID).phase is Phase.RUNNING
    assert [c for c, _ in dying.launched] == [CLUSTER]


def test_a_launch_that_failed_before_a_crash_is_sent_again(sky, tmp_path):
    # nothing ran: the attempt is launched, not left lost
    dying = died_inside_the_launch_call(tmp_path / "state")
    [(sent, _)] = dying.requests.items()
    dying.requests[sent] = (Launch.FAILED, "ResourcesUnavailableError: no capacity")
    restarted = SkyPilotLauncher(tmp_path / "state", client=dying)
    restarted.launch(request(GPU_TASK, SPOT_A100))
    assert [c for c, _ in dying.launched] == [CLUSTER, CLUSTER]
    assert restarted.status(AID).phase is Phase.PENDING


def test_after_a_crash_inside_the_launch_call_the_first_look_follows_the_request_it_had_sent(sky, tmp_path):
    # the restarted engine asks for the attempt's status before it launches anything: a request in flight, its
    # cluster INIT, is provisioning (it read gone, so the engine launched it again and billed it from then, or
    # read lost and its cluster was torn down)
    dying = died_inside_the_launch_call(tmp_path / "state")
    restarted = SkyPilotLauncher(tmp_path / "state", client=dying)
    assert restarted.status(AID).phase is Phase.PENDING
    dying.provisioned(CLUSTER, status="INIT", job=None, spot=True, request_done=False)
    assert restarted.status(AID).phase is Phase.PENDING and dying.downed == []
    dying.provisioned(CLUSTER, spot=True, job="RUNNING")
    assert restarted.status(AID).phase is Phase.RUNNING
    restarted.launch(request(GPU_TASK, SPOT_A100))
    assert [c for c, _ in dying.launched] == [CLUSTER]


def test_a_launch_request_its_api_server_forgot_with_no_cluster_left_is_lost_not_pending_for_ever(launcher, sky_client):
    # the API server restarted (it clears its requests) after the cluster ran and was autodowned: the request's
    # id reads unknown; before, the attempt read gone, the engine launched it again, and the launcher, holding
    # the id, did nothing: launching for ever
    launcher.launch(request(GPU_TASK, SPOT_A100))
    sky_client.forget_requests()
    status = launcher.status(AID)
    assert status.phase is Phase.LOST and "no longer knows this attempt's launch request" in status.reason
    assert "has no cluster for it" in status.reason
    launcher.launch(request(GPU_TASK, SPOT_A100))
    assert len(sky_client.launched) == 1


def test_a_cluster_left_init_by_a_forgotten_request_is_lost_and_torn_down(launcher, sky_client):
    launcher.launch(request(GPU_TASK, SPOT_A100))
    sky_client.provisioned(CLUSTER, status="INIT", job=None, spot=True, request_done=False)
    sky_client.forget_requests()  # the request died with its server: SkyPilot leaves the cluster INIT
    status = launcher.status(AID)
    assert status.phase is Phase.LOST and "its cluster is INIT" in status.reason
    assert sky_client.downed == [CLUSTER]


def test_a_cluster_its_dead_request_left_init_after_a_crash_is_lost_and_torn_down(sky, tmp_path):
    # the broker died inside the launch call, then the API server restarted: the request died with it, leaving
    # the cluster INIT (no skylet, so no autodown either). Adopted as a launch, it read pending for ever
    dying = died_inside_the_launch_call(tmp_path / "state")
    dying.provisioned(CLUSTER, status="INIT", job=None, spot=True, request_done=False)
    dying.forget_requests()
    restarted = SkyPilotLauncher(tmp_path / "state", client=dying)
    status = restarted.status(AID)
    assert status.phase is Phase.LOST and "its cluster is INIT" in status.reason
    assert dying.downed == [CLUSTER]
    restarted.launch(request(GPU_TASK, SPOT_A100))
    assert len(dying.launched) == 1


def test_a_request_id_the_server_does_not_answer_for_is_lost_only_when_nothing_of_the_launch_is_left(
        launcher, sky_client):
    # the id it kept reads unknown, yet a launch of its cluster is in flight (found by its name): not a loss
    launcher.launch(request(GPU_TASK, SPOT_A100))
    [(sent, _)] = sky_client.requests.items()
    del sky_client.requests[sent], sky_client.request_cluster[sent]
    sky_client.in_flight.add(CLUSTER)
    assert launcher.status(AID).phase is Phase.PENDING and sky_client.downed == []
    sky_client.provisioned(CLUSTER, spot=True, job="RUNNING")
    assert launcher.status(AID).phase is Phase.RUNNING


def test_a_broker_that_lost_its_state_file_follows_the_launch_it_had_sent_from_its_first_look(sky, tmp_path):
    dying = died_inside_the_launch_call(tmp_path / "state")
    fresh = SkyPilotLauncher(tmp_path / "fresh-state", client=dying)
    assert fresh.status(AID).phase is Phase.PENDING  # was gone: launched again, and billed from then
    dying.provisioned(CLUSTER, spot=True, job="RUNNING")
    assert fresh.status(AID).phase is Phase.RUNNING
    fresh.launch(request(GPU_TASK, SPOT_A100))
    assert len(dying.launched) == 1


def test_the_launch_asks_for_autodown_as_the_safety_net(launcher, sky_client):
    launcher.launch(request(GPU_TASK, ONDEMAND_T4))
    [(cluster, dumped)] = sky_client.launched
    assert not dumped["resources"].get("use_spot")
    assert sky_client.autostop[cluster] == launcher.autostop_minutes > 0


def test_an_unknown_attempt_is_gone_and_stopping_it_is_silent(launcher, sky_client):
    assert launcher.status("j-ffffffffff-a1").phase is Phase.GONE
    launcher.stop("j-ffffffffff-a1", grace_seconds=5)
    assert sky_client.downed == []


def test_a_spot_attempt_runs_then_is_preempted_and_its_cluster_is_torn_down(launcher, sky_client):
    launcher.launch(request(GPU_TASK, SPOT_A100))
    assert launcher.status(AID).phase is Phase.PENDING
    sky_client.provisioned(CLUSTER, spot=True, job="RUNNING")
    assert launcher.status(AID).phase is Phase.RUNNING
    sky_client.cluster_status[CLUSTER] = sky_client.cluster_status[CLUSTER].__class__(CLUSTER, "STOPPED", True)
    assert launcher.status(AID).phase is Phase.PREEMPTED
    assert sky_client.downed == [CLUSTER], "no idle GPU is billed after the attempt ends"
    assert launcher.status(AID).phase is Phase.PREEMPTED
    assert sky_client.downed == [CLUSTER], "torn down once"


def init(sky_client, spot=False):
    sky_client.cluster_status[CLUSTER] = sky_client.cluster_status[CLUSTER].__class__(CLUSTER, "INIT", spot)


@pytest.mark.parametrize("placement, spot", [(ONDEMAND_T4, False), (SPOT_A100, True)], ids=["on demand", "spot"])
def test_a_cluster_init_while_its_job_runs_is_not_lost_while_skypilots_health_check_may_recover(
        launcher, sky_client, placement, spot):
    launcher.launch(request(GPU_TASK, placement))
    sky_client.provisioned(CLUSTER, spot=spot, job="RUNNING")
    assert launcher.status(AID).phase is Phase.RUNNING
    init(sky_client, spot)  # a failed health check: SkyPilot's API server will not read the job meanwhile
    for _ in range(2):
        status = launcher.status(AID)
        assert status.phase is Phase.RUNNING and "INIT" in status.reason
    sky_client.health_recovers.add(CLUSTER)  # the next check finds it healthy: its job is read as still running
    assert launcher.status(AID).phase is Phase.RUNNING
    assert sky_client.downed == [] and sky_client.cluster_status[CLUSTER].status == "UP"


def test_a_cluster_init_during_the_setup_keeps_the_setup_as_the_step_while_its_job_is_unreadable(launcher,
                                                                                                   sky_client):
    launcher.launch(request(GPU_TASK, ONDEMAND_T4))
    sky_client.provisioned(CLUSTER, job="SETTING_UP")
    assert launcher.status(AID).step == "setup"
    init(sky_client)
    status = launcher.status(AID)
    assert (status.phase, status.step) == (Phase.RUNNING, "setup")


def test_a_cluster_left_init_past_the_wait_is_lost_and_torn_down(launcher, sky_client):
    launcher.init_wait_seconds = 0.3
    launcher.launch(request(GPU_TASK, ONDEMAND_T4))
    sky_client.provisioned(CLUSTER, job="RUNNING")
    assert launcher.status(AID).phase is Phase.RUNNING
    init(sky_client)
    assert launcher.status(AID).phase is Phase.RUNNING
    time.sleep(0.35)
    status = launcher.status(AID)
    assert status.phase is Phase.LOST and "INIT" in status.reason
    assert sky_client.downed == [CLUSTER]


def test_the_wait_for_a_cluster_init_starts_again_after_it_was_up(launcher, sky_client):
    launcher.init_wait_seconds = 0.3
    launcher.launch(request(GPU_TASK, ONDEMAND_T4))
    sky_client.provisioned(CLUSTER, job="RUNNING")
    launcher.status(AID)
    init(sky_client)
    assert launcher.status(AID).phase is Phase.RUNNING
    time.sleep(0.35)
    sky_client.provisioned(CLUSTER, job="RUNNING")  # healthy again before the next poll
    assert launcher.status(AID).phase is Phase.RUNNING
    init(sky_client)
    assert launcher.status(AID).phase is Phase.RUNNING, "a new INIT gets the whole wait"


def test_an_unknown_job_status_keeps_the_running_attempt_running_and_is_logged_once(launcher, sky_client, caplog):
    launcher.launch(request(GPU_TASK, ONDEMAND_T4))
    sky_client.provisioned(CLUSTER, job="SETTING_UP")
    assert launcher.status(AID).step == "setup"
    sky_client.jobs[CLUSTER] = "SOME_NEW_STATE"  # a newer SkyPilot's state
    with caplog.at_level("WARNING", logger="launchers.skypilot"):
        for _ in range(3):
            status = launcher.status(AID)
            assert (status.phase, status.step) == (Phase.RUNNING, "setup")
            assert "SOME_NEW_STATE" in status.reason
    logged = [r for r in caplog.records if "SOME_NEW_STATE" in r.getMessage()]
    assert len(logged) == 1 and CLUSTER in logged[0].getMessage()
    assert sky_client.downed == []


def test_a_job_whose_driver_failed_says_what_happened_instead_of_an_exit_code_of_none(launcher, sky_client):
    from broker.engine.monitor import describe_end

    launcher.launch(request(GPU_TASK, ONDEMAND_T4))
    sky_client.provisioned(CLUSTER, job="RUNNING")
    launcher.status(AID)
    sky_client.output[CLUSTER] = b"step 10\n"  # the driver died: no exit status line in the logs
    sky_client.jobs[CLUSTER] = "FAILED_DRIVER"
    status = launcher.status(AID)
    assert status.phase is Phase.FAILED and status.exit_code is None
    end = describe_end(status)
    assert "None" not in end and "driver" in end and "no exit code" in end
    assert describe_end(launcher.status(AID)) == end, "kept once the cluster is torn down"


def test_a_finished_attempt_keeps_its_logs_after_its_cluster_is_torn_down(launcher, sky_client):
    launcher.launch(request(GPU_TASK, SPOT_A100))
    sky_client.provisioned(CLUSTER, spot=True, job="RUNNING")
    sky_client.output[CLUSTER] = b"step 1\nstep 2\n"
    assert launcher.status(AID).phase is Phase.RUNNING
    sky_client.jobs[CLUSTER] = "SUCCEEDED"
    sky_client.output[CLUSTER] = b"step 1\nstep 2\ndone\n"
    status = launcher.status(AID)
    assert (status.phase, status.exit_code) == (Phase.SUCCEEDED, 0)
    assert CLUSTER in sky_client.downed
    assert launcher.logs(AID) == (b"step 1\nstep 2\ndone\n", 19)
    assert launcher.logs(AID, offset=7, limit=6) == (b"step 2", 13)


def test_a_failed_run_reports_its_exit_status_and_signal_from_the_logs(launcher, sky_client):
    # SkyPilot's job status says only FAILED; the wrapped run printed its status last.
    launcher.launch(request(GPU_TASK, ONDEMAND_T4))
    sky_client.provisioned(CLUSTER, job="RUNNING")
    assert launcher.status(AID).phase is Phase.RUNNING
    sky_client.jobs[CLUSTER] = "FAILED"
    sky_client.output[CLUSTER] = b"step 1200\nKilled\n[spot-broker] run exited with status 137\n"
    status = launcher.status(AID)
    assert (status.phase, status.exit_code, status.signal, status.step) == (Phase.FAILED, 137, 9, "run")
    again = launcher.status(AID)  # after teardown, from the attempt's saved state
    assert (again.exit_code, again.signal) == (137, 9)


def test_a_launch_skypilot_cannot_provision_is_lost_so_the_engine_requeues(launcher, sky_client):
    launcher.launch(request(GPU_TASK, SPOT_A100))
    [rid] = sky_client.requests
    sky_client.requests[rid] = (Launch.FAILED, "ResourcesUnavailableError: no spot capacity in us-east-1b")
    status = launcher.status(AID)
    assert status.phase is Phase.LOST
    assert "no spot capacity in us-east-1b" in status.reason


def test_stop_tears_down_without_waiting_and_the_attempt_ends_stopped(launcher, sky_client):
    launcher.launch(request(GPU_TASK, ONDEMAND_T4))
    sky_client.provisioned(CLUSTER, job="RUNNING")
    assert launcher.status(AID).phase is Phase.RUNNING
    launcher.stop(AID, grace_seconds=30, reason="cancelled")
    launcher.stop(AID, grace_seconds=30, reason="cancelled")
    assert sky_client.downed == [CLUSTER]
    status = launcher.status(AID)
    assert (status.phase, status.reason) == (Phase.STOPPED, "cancelled")


def test_skypilot_unreachable_reports_the_last_phase_instead_of_raising(launcher, sky_client):
    launcher.launch(request(GPU_TASK, SPOT_A100))
    sky_client.provisioned(CLUSTER, spot=True)
    assert launcher.status(AID).phase is Phase.RUNNING

    def unreachable(*_a, **_k):
        raise ConnectionError("API server at http://127.0.0.1:46580 is not reachable")

    sky_client.clusters = unreachable
    status = launcher.status(AID)
    assert status.phase is Phase.RUNNING and "not reachable" in status.reason


def test_the_sweep_tears_down_only_this_brokers_clusters_it_no_longer_knows(launcher, sky_client):
    for name in ("broker-j-aaaaaaaaaa-a1", "broker-j-bbbbbbbbbb-a3", "teammate-notebook"):
        sky_client.provisioned(name)
    torn = launcher.sweep(["j-aaaaaaaaaa-a1"])
    assert torn == ["broker-j-bbbbbbbbbb-a3"]
    assert sorted(sky_client.cluster_status) == ["broker-j-aaaaaaaaaa-a1", "teammate-notebook"]


def test_two_deployments_and_a_persons_own_clusters_on_one_skypilot_user_sweep_only_their_own(sky, tmp_path,
                                                                                                 sky_client):
    prod = SkyPilotLauncher(tmp_path / "prod", client=sky_client)  # the default prefix: today's names
    staging = SkyPilotLauncher(tmp_path / "staging", client=sky_client, prefix="broker-staging")
    prod.launch(request(GPU_TASK, ONDEMAND_T4, attempt_id="j-aaaaaaaaaa-a1"))
    staging.launch(request(GPU_TASK, ONDEMAND_T4, attempt_id="j-bbbbbbbbbb-a1"))
    launched = [c for c, _ in sky_client.launched]
    assert launched == ["broker-j-aaaaaaaaaa-a1", "broker-staging-j-bbbbbbbbbb-a1"]
    for name in (*launched, "broker-dev", "broker-j-cccccccccc-a2", "broker-staging-j-dddddddddd-a1"):
        sky_client.provisioned(name)
    assert prod.sweep(["j-aaaaaaaaaa-a1"]) == ["broker-j-cccccccccc-a2"]
    assert staging.sweep(["j-bbbbbbbbbb-a1"]) == ["broker-staging-j-dddddddddd-a1"]
    assert sorted(sky_client.cluster_status) == ["broker-dev", *launched]


def test_the_broker_names_its_clusters_with_the_deployments_prefix(sky, tmp_path, monkeypatch):
    from broker.config import load_settings
    from broker.runtime import open_launcher

    monkeypatch.setenv("SKYPILOT_API_SERVER_ENDPOINT", "http://127.0.0.1:1")
    settings = load_settings({"BROKER_DATA_DIR": str(tmp_path / "data"), "BROKER_LAUNCHER": "skypilot",
                              "BROKER_ADMIN_TOKEN": "t", "BROKER_CLUSTER_PREFIX": "prod"})
    cloud = open_launcher(settings).cloud
    assert cloud.cluster(AID) == "prod-j-0123456789-a2"
    # one API server, two prefixes: two views of attempts; the default keeps the view it always had
    assert cloud.domain == "skypilot:http://127.0.0.1:1#prod"
    assert SkyPilotLauncher(tmp_path / "s", client=ScriptedSky()).domain == "skypilot:http://127.0.0.1:1"


# --- the budget's limit on the cluster itself ----------------------------------------------------------


def limited(stop_in_seconds, placement=ONDEMAND_T4):
    return dataclasses.replace(request(GPU_TASK, placement), stop_in_seconds=stop_in_seconds, stop_grace_seconds=30)


def test_the_cluster_stops_its_run_early_enough_to_pay_for_the_idle_minutes_and_the_teardown(launcher, sky_client):
    before = time.time()
    launcher.launch(limited(3600))
    [(_, dumped)] = sky_client.launched
    stop_at = int(re.match(r"broker_stop_at=(\d+)\n", dumped["run"]).group(1))
    after_run = sky_client.autostop[CLUSTER] * 60 + AUTODOWN_MARGIN_SECONDS
    assert launcher.after_run_seconds() == after_run == 10 * 60 + 300
    assert int(before) + 3600 - after_run <= stop_at <= int(time.time()) + 3600 - after_run


def test_a_run_its_guard_stopped_is_a_budget_stop_billed_until_its_teardown(launcher, sky_client):
    launcher.launch(limited(3600))
    sky_client.provisioned(CLUSTER, job="RUNNING")
    assert launcher.status(AID).phase is Phase.RUNNING
    stopped = int(time.time()) - 30
    sky_client.jobs[CLUSTER] = "FAILED"
    sky_client.output[CLUSTER] = (b"step 900\n[spot-broker] the budget's limit came: SIGTERM to the run\n"
                                  b"[spot-broker] run exited with status 0\n"
                                  b"[spot-broker] run stopped at its budget at %d\n" % stopped)
    status = launcher.status(AID)
    assert (status.phase, status.reason) == (Phase.STOPPED, "budget")
    assert CLUSTER in sky_client.downed, "torn down at once by the broker that saw it"
    assert stopped < status.ended_at <= time.time()  # billed until now, the teardown
    assert launcher.status(AID) == status  # final, from the saved state


def test_a_setup_its_guard_stopped_is_a_budget_stop_of_the_setup_not_a_failed_setup(launcher, sky_client):
    launcher.launch(limited(3600))
    sky_client.provisioned(CLUSTER, job="SETTING_UP")
    assert (launcher.status(AID).phase, launcher.status(AID).step) == (Phase.RUNNING, "setup")
    stopped = int(time.time()) - 30
    sky_client.jobs[CLUSTER] = "FAILED_SETUP"  # what SkyPilot makes of the guard's exit 124
    sky_client.output[CLUSTER] = (b"(setup pid=2101) Collecting torch\n"
                                  b"(setup pid=2101) [spot-broker] the budget's limit came: SIGTERM to the setup\n"
                                  b"(setup pid=2101) [spot-broker] setup exited with status 143\n"
                                  b"(setup pid=2101) [spot-broker] setup stopped at its budget at %d\n" % stopped)
    status = launcher.status(AID)
    assert (status.phase, status.reason, status.step) == (Phase.STOPPED, "budget", "setup")
    assert CLUSTER in sky_client.downed
    assert stopped < status.ended_at <= time.time()


def test_a_guarded_setup_that_fails_by_itself_is_a_failed_setup_with_its_exit_status(launcher, sky_client):
    launcher.launch(limited(3600))
    sky_client.provisioned(CLUSTER, job="FAILED_SETUP")
    sky_client.output[CLUSTER] = (b"(setup pid=2101) ERROR: No matching distribution found for torch==9.9\n"
                                  b"(setup pid=2101) [spot-broker] setup exited with status 1\n")
    status = launcher.status(AID)
    assert (status.phase, status.exit_code, status.signal, status.step) == (Phase.FAILED, 1, None, "setup")


def test_a_cluster_autodowned_past_its_limit_while_no_broker_watched_is_a_budget_stop(sky, tmp_path, sky_client):
    launcher = SkyPilotLauncher(tmp_path / "state", client=sky_client, autostop_minutes=1)
    launcher.launch(limited(launcher.after_run_seconds() + 1, placement=SPOT_A100))  # its run stops in 1 s
    sky_client.provisioned(CLUSTER, spot=True, job="RUNNING")
    assert launcher.status(AID).phase is Phase.RUNNING
    time.sleep(1.2)
    sky_client.down(CLUSTER)  # autodown: the cluster and its logs are gone
    status = launcher.status(AID)
    assert (status.phase, status.reason) == (Phase.STOPPED, "budget"), "not a preemption to resume from"
    assert status.ended_at <= time.time()


ONDEMAND_GCP_T4 = {**ONDEMAND_T4, "cloud": "gcp", "region": "us-central1", "zone": "us-central1-a",
                   "instance_type": "n1-standard-8+T4:1"}
KUBERNETES_POOL = {"tier": "onprem", "cloud": "kubernetes", "region": "lab-gpus", "zone": "lab",
                   "instance_type": "lab-1slot", "accelerator": "T4", "accelerator_count": 1, "num_nodes": 1,
                   "price_per_hour": 1_100_000, "simulated": False}


@pytest.mark.parametrize("placement, named", [
    pytest.param(ONDEMAND_T4, "an AWS cluster", id="on AWS the log names an AWS cluster"),
    pytest.param(ONDEMAND_GCP_T4, "a GCP cluster", id="on GCP the log names a GCP cluster"),
    pytest.param(KUBERNETES_POOL, "a Kubernetes pool", id="on Kubernetes the log names a Kubernetes pool"),
])
def test_a_budget_that_cannot_pay_for_the_billing_after_a_run_launches_no_cluster(launcher, sky_client, placement,
                                                                                  named):
    launcher.launch(limited(launcher.after_run_seconds(), placement=placement))
    assert sky_client.launched == [] and sky_client.planned == []
    status = launcher.status(AID)
    assert (status.phase, status.reason) == (Phase.STOPPED, "budget")
    assert (f"not launched: the budget left pays for 900 s on this placement, no more than {named} may be billed "
            f"after its run ends").encode() in launcher.logs(AID)[0]
    launcher.launch(limited(launcher.after_run_seconds(), placement=placement))  # launching again changes nothing
    assert sky_client.launched == []


class FailingTeardowns(ScriptedSky):
    """``sky.down`` answers with a request id at once; the request itself fails later on the API server
    (a cloud API error, expired credentials): the cluster stays, its job running."""

    def __init__(self, failures: int):
        super().__init__(real_plan=False)
        self.failures = failures

    def down(self, cluster):
        if self.failures:
            self.failures -= 1
            self.downed.append(cluster)
            return
        super().down(cluster)


def test_a_stopped_attempts_cluster_that_outlives_its_failed_teardown_is_torn_down_again(sky, tmp_path):
    client = FailingTeardowns(failures=1)
    launcher = SkyPilotLauncher(tmp_path / "state", client=client)
    launcher.launch(request(GPU_TASK, ONDEMAND_T4))
    client.provisioned(CLUSTER, job="RUNNING")
    launcher.stop(AID, grace_seconds=30, reason="cancelled")
    assert launcher.status(AID).phase is Phase.RUNNING, "the teardown asked for has not happened"
    assert client.downed == [CLUSTER], "not asked again at once: a teardown takes minutes"
    launcher.down_retry_seconds = 0  # ... as if that long had passed
    launcher.status(AID)
    assert client.downed == [CLUSTER, CLUSTER] and CLUSTER not in client.cluster_status
    status = launcher.status(AID)
    assert (status.phase, status.reason) == (Phase.STOPPED, "cancelled")


def test_a_stop_sent_while_the_api_server_was_unreachable_tears_the_cluster_down_once_it_answers(launcher, sky_client):
    launcher.launch(request(GPU_TASK, ONDEMAND_T4))
    sky_client.provisioned(CLUSTER, job="RUNNING")
    reachable_down = sky_client.down

    def unreachable(*_a, **_k):
        raise ConnectionError("API server at http://127.0.0.1:46580 is not reachable")

    sky_client.down = unreachable
    launcher.stop(AID, grace_seconds=30, reason="cancelled")
    sky_client.down = reachable_down  # back
    launcher.status(AID)
    assert sky_client.downed == [CLUSTER] and CLUSTER not in sky_client.cluster_status
    assert launcher.status(AID).phase is Phase.STOPPED


def test_a_stop_sent_while_the_api_server_was_unreachable_keeps_the_jobs_logs_when_it_tears_the_cluster_down(
        launcher, sky_client):
    """The stop could fetch neither the logs nor the teardown; the retry tore the cluster down without keeping its
    logs (and took them with it): `broker logs` of the cancelled job showed nothing of its run."""
    launcher.launch(request(GPU_TASK, ONDEMAND_T4))
    sky_client.provisioned(CLUSTER, job="RUNNING")
    sky_client.output[CLUSTER] = b"step 1\nstep 2\n"
    reachable = sky_client.down, sky_client.logs

    def unreachable(*_a, **_k):
        raise ConnectionError("API server at http://127.0.0.1:46580 is not reachable")

    sky_client.down = sky_client.logs = unreachable
    launcher.stop(AID, grace_seconds=30, reason="cancelled")
    sky_client.down, sky_client.logs = reachable  # back
    launcher.status(AID)
    assert launcher.status(AID).phase is Phase.STOPPED
    assert launcher.logs(AID)[0] == b"step 1\nstep 2\n"


def test_a_job_that_ended_while_no_broker_watched_is_read_from_its_cluster_on_its_way_down(launcher, sky_client):
    """Back after the idle minutes, the broker finds the cluster AUTOSTOPPING (SkyPilot 0.14.1 still answers for
    its jobs then): the job succeeded, it was not preempted, and is not resumed."""
    launcher.launch(request(GPU_TASK, SPOT_A100))
    sky_client.provisioned(CLUSTER, job="RUNNING", spot=True)
    assert launcher.status(AID).phase is Phase.RUNNING
    sky_client.provisioned(CLUSTER, status="AUTOSTOPPING", job="SUCCEEDED", spot=True)
    status = launcher.status(AID)
    assert (status.phase, status.exit_code) == (Phase.SUCCEEDED, 0)
    assert sky_client.downed == [CLUSTER]


RECLAIM_NOTICE_LOG = (b"step 412\nWARNING:checkpoint.cloud_notice:aws metadata announces a spot reclaim\n"
                      b"[spot-broker] run exited with status 143\n")


def test_a_spot_job_that_saved_on_the_clouds_notice_and_exited_is_preempted_when_its_vms_go(launcher, sky_client):
    """AWS warns two minutes ahead: the checkpoint library saves and exits 143, SkyPilot says FAILED while the
    VMs still run; then the cloud takes them. A preemption to resume, not a failure that ends the job."""
    launcher.launch(request(GPU_TASK, SPOT_A100))
    sky_client.provisioned(CLUSTER, job="RUNNING", spot=True)
    assert launcher.status(AID).phase is Phase.RUNNING
    sky_client.provisioned(CLUSTER, job="FAILED", spot=True)
    sky_client.output[CLUSTER] = RECLAIM_NOTICE_LOG
    assert launcher.status(AID).phase is Phase.RUNNING, "not failed while the cluster may still be reclaimed"
    assert sky_client.downed == []
    del sky_client.cluster_status[CLUSTER]  # reclaimed
    assert launcher.status(AID).phase is Phase.PREEMPTED


def test_a_spot_job_that_failed_on_a_cluster_that_stays_up_is_failed_after_the_wait(launcher, sky_client):
    launcher.launch(request(GPU_TASK, SPOT_A100))
    sky_client.provisioned(CLUSTER, job="RUNNING", spot=True)
    launcher.status(AID)
    sky_client.provisioned(CLUSTER, job="FAILED", spot=True)
    sky_client.output[CLUSTER] = b"Traceback ...\nValueError: bad batch\n[spot-broker] run exited with status 1\n"
    assert launcher.status(AID).phase is Phase.RUNNING
    launcher.reclaim_wait_seconds = 0  # ... as if the wait had passed with the cluster up
    status = launcher.status(AID)
    assert (status.phase, status.exit_code) == (Phase.FAILED, 1)
    assert sky_client.downed == [CLUSTER]


def test_a_spot_job_found_failed_on_a_cluster_already_autostopping_is_failed_at_once(launcher, sky_client):
    """Back after the idle minutes, the broker finds a spot job FAILED on a cluster AUTOSTOPPING: it has stayed up
    idle for autostop_minutes since the job ended, so the cloud did not reclaim it. Waiting RECLAIM_WAIT_SECONDS
    there, autodown took the cluster meanwhile and the failure read as a preemption: the job was resumed."""
    launcher.launch(request(GPU_TASK, SPOT_A100))
    sky_client.provisioned(CLUSTER, job="RUNNING", spot=True)
    assert launcher.status(AID).phase is Phase.RUNNING
    sky_client.provisioned(CLUSTER, status="AUTOSTOPPING", job="FAILED", spot=True)
    sky_client.output[CLUSTER] = b"Traceback ...\nValueError: bad batch\n[spot-broker] run exited with status 1\n"
    status = launcher.status(AID)
    assert (status.phase, status.exit_code) == (Phase.FAILED, 1)


def test_a_kubernetes_job_that_saved_on_its_pods_deletion_notice_is_preempted_when_the_pod_goes(launcher, sky_client):
    pool = {"tier": "onprem", "cloud": "kubernetes", "region": "lab-gpus", "zone": "lab", "instance_type": "lab-1slot",
            "accelerator": "T4", "accelerator_count": 1, "num_nodes": 1}
    launcher.launch(request(GPU_TASK, pool))
    sky_client.provisioned(CLUSTER, job="RUNNING")
    assert launcher.status(AID).phase is Phase.RUNNING
    sky_client.provisioned(CLUSTER, job="FAILED")  # the hook's notice: saved, exited 143; the pod still terminating
    sky_client.output[CLUSTER] = b"step 80\n[spot-broker] run exited with status 143\n"
    assert launcher.status(AID).phase is Phase.RUNNING
    del sky_client.cluster_status[CLUSTER]  # the pod is gone
    status = launcher.status(AID)
    assert status.phase is Phase.LOST, "recovered as a lost node, not failed"


def test_readers_of_a_live_clusters_log_fetch_it_from_skypilot_at_most_every_few_seconds(launcher, sky_client):
    """SkyPilot sends the whole log on each fetch, and every logs() call fetched it: `broker logs -f` on a long run
    (a poll a second, per reader) and paging through a 50 MiB log 1 MiB at a time each moved the whole log each call."""
    launcher.launch(request(GPU_TASK, SPOT_A100))
    sky_client.provisioned(CLUSTER, spot=True, job="RUNNING")
    sky_client.output[CLUSTER] = b"".join(b"step %d\n" % i for i in range(1000))
    fetches = []
    fetch = sky_client.logs
    sky_client.logs = lambda cluster: fetches.append(cluster) or fetch(cluster)
    page, offset = [], 0
    while True:  # paging from the start: one fetch, then the kept copy
        chunk, offset = launcher.logs(AID, offset=offset, limit=1000)
        page.append(chunk)
        if len(chunk) < 1000:
            break
    assert b"".join(page) == sky_client.output[CLUSTER] and len(fetches) == 1
    sky_client.output[CLUSTER] += b"step 1000\n"
    for _ in range(20):  # a reader following the end: no new fetch within the refresh interval
        assert launcher.logs(AID, offset=offset)[0] == b""
    assert len(fetches) == 1
    launcher.log_refresh_seconds = 0.0  # the interval passed
    assert launcher.logs(AID, offset=offset)[0] == b"step 1000\n" and len(fetches) == 2


def test_the_sweep_reads_what_the_broker_knows_after_listing_so_a_cluster_launched_meanwhile_stays(launcher,
                                                                                                   sky_client):
    """The broker's attempts were read before SkyPilot's clusters were listed: another broker recording an
    attempt and launching its cluster in between had the new cluster torn down as unknown."""
    recorded = ["j-aaaaaaaaaa-a1"]
    sky_client.provisioned("broker-j-aaaaaaaaaa-a1")
    sky_client.provisioned("broker-j-cccccccccc-a1")  # nobody's: goes
    listing = sky_client.clusters

    def clusters(names=None):  # while the list is taken, another broker records j-bbbbbbbbbb-a1 and launches it
        recorded.append("j-bbbbbbbbbb-a1")
        sky_client.provisioned("broker-j-bbbbbbbbbb-a1", status="INIT")
        return listing(names)

    sky_client.clusters = clusters
    assert launcher.sweep(lambda: list(recorded)) == ["broker-j-cccccccccc-a1"]
    assert sorted(sky_client.cluster_status) == ["broker-j-aaaaaaaaaa-a1", "broker-j-bbbbbbbbbb-a1"]
