"""A launch that fails syncing the task's own files onto its cluster: the workdir, a ``file_mounts`` source.

SkyPilot 0.14.1 provisions the cluster first, then copies the workdir and the ``file_mounts`` onto its nodes (rsync
from the API server's host for a local path, ``aws s3 sync`` on the node for a bucket URL, a FUSE mount for a storage);
a failure there fails the launch request with the cluster UP and no job. The launcher read every such failure as lost,
so the engine placed the job again, up to 20 times, each time on a new cluster paid for until the sync failed: for a
file the broker's host cannot read, or a bucket that does not exist, no try ever succeeds. Such a failure now fails
the attempt (step ``file_mounts`` or ``workdir_sync``) with a sentence naming what could not be synced and what to do; a
network or ssh failure while syncing is still lost (another try may not meet it).

The errors are SkyPilot's own: its backend (``CloudVmRayBackend``) syncing onto a node that is a folder of this host
through its own command runner, rsync and all, or S3 (moto) refusing a bucket; each goes through SkyPilot's
serialization of a request's error (API server → SDK), and is read as :class:`~launchers.skypilot.SdkClient` reads
it (:func:`~launchers.skypilot.launch_error_text`).
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

import pytest
from skypilot_fakes import ScriptedSky
from test_skypilot_git_workdir import Cluster
from test_skypilot_task import SPOT_A100, request

from broker.diagnosis import Ending, diagnose
from launchers.base import Phase
from launchers.skypilot import SkyPilotLauncher, launch_error_text
from launchers.skypilot_status import Launch, Observation, next_status

AID = "j-0123456789-a2"
CLUSTER = "broker-j-0123456789-a2"


def as_the_sdk_reads(exc: BaseException) -> str:
    """``exc`` raised in a launch request on the API server, as the launcher reads it through the SDK: SkyPilot's
    own serialization of the request's error, its deserialization by ``sky.get``, then the launcher's text."""
    from sky import exceptions

    return launch_error_text(exceptions.deserialize_exception(exceptions.serialize_exception(exc)))


def failed_sync(file_mounts: dict, runners) -> str:
    """SkyPilot's backend syncing ``file_mounts`` onto a cluster whose nodes ``runners`` run commands: its error."""
    from sky.backends.cloud_vm_ray_backend import CloudVmRayBackend

    cluster = Cluster([Path("/nonexistent")] * len(runners))
    cluster.get_command_runners = lambda: list(runners)
    with pytest.raises(Exception) as failed:
        CloudVmRayBackend()._execute_file_mounts(cluster, file_mounts)
    return as_the_sdk_reads(failed.value)


def node(home: Path, *, reader_uid: int | None = None):
    """A cluster node that is a folder of this host, through SkyPilot's own runner. ``reader_uid``: its rsync reads the
    sources as that user (SkyPilot's own ``prefix_command``), standing for a broker that does not run as root."""
    from sky.utils import command_runner

    class Node(command_runner.LocalProcessCommandRunner):
        def __init__(self):
            super().__init__()
            self.node = (str(home),)

        def get_remote_home_dir(self) -> str:
            return str(home)

        def rsync(self, source, target, *, up, log_path=os.devnull, stream_logs=True, max_retry=1, timeout=None):
            prefix = None if reader_uid is None else \
                f"setpriv --reuid={reader_uid} --regid={reader_uid} --clear-groups"
            self._rsync(source, target, node_destination=None, up=up, rsh_option=None, log_path=log_path,
                        stream_logs=stream_logs, max_retry=max_retry, timeout=timeout, prefix_command=prefix)

    return Node()


def unreachable_node(tmp_path: Path):
    """A node whose ssh is refused (a closed loopback port): SkyPilot's own ssh runner, for real."""
    from sky.utils import command_runner

    key = tmp_path / "sky-key"
    key.write_text("not a key\n")
    key.chmod(0o600)
    return command_runner.SSHCommandRunner(("127.0.0.1", 1), "ubuntu", str(key))


@pytest.fixture
def no_backoff(monkeypatch):
    from sky.utils import common_utils

    monkeypatch.setattr(common_utils.Backoff, "current_backoff", lambda self: 0.0)  # SkyPilot's retries, no waits


@pytest.fixture
def readable_dir():
    """A folder others may enter (pytest's own are the test user's only): what an unprivileged reader reaches."""
    path = Path(tempfile.mkdtemp(prefix="sky-sync-"))
    path.chmod(0o755)
    yield path
    import shutil

    shutil.rmtree(path, ignore_errors=True)


def unreadable_file(folder: Path) -> tuple[Path, int | None]:
    """A file in ``folder`` the broker cannot read, and the user whose rsync reads it (None: this test's own user,
    who is not root). Root reads any file, so as root the read is done as ``nobody``."""
    data = folder / "train.jsonl"
    data.write_text('{"x": 1}\n')
    data.chmod(0o000 if os.geteuid() else 0o600)
    return data, (65534 if os.geteuid() == 0 else None)


def failed_launch(error: str, mounts=(), cluster="UP") -> Observation:
    return Observation(launch=Launch.FAILED, cluster=cluster, launch_error=error, mounts=tuple(mounts))


# --- what each failure means ------------------------------------------------------------------------------------


def test_a_local_file_mounts_source_the_broker_cannot_read_fails_the_attempt_naming_it(
        sky, no_backoff, readable_dir):
    data, reader = unreadable_file(readable_dir)
    home = readable_dir / "node"
    home.mkdir()
    home.chmod(0o777)
    # a destination under /tmp is copied to as it is (others are copied under ~ and linked, as root on this host)
    error = failed_sync({f"{home}/data/train.jsonl": str(data)}, [node(home, reader_uid=reader)])
    assert "return code 23" in error, error

    status = next_status(Phase.PENDING, failed_launch(error, [("/data/train.jsonl", str(data))]))

    assert (status.phase, status.step, status.exit_code) == (Phase.FAILED, "file_mounts", None), status.reason
    assert status.reason.startswith(f"file_mounts /data/train.jsonl: {data} could not be copied onto the cluster "
                                    f'(send_files failed to open "{data}": Permission denied (13)): make it '
                                    "readable by the user the broker runs as"), status.reason
    assert status.reason.endswith("then submit the job again, or resume it with --force")


def test_a_bucket_url_source_whose_bucket_does_not_exist_fails_the_attempt_naming_it(sky, bucket, no_backoff,
                                                                                       tmp_path):
    """Neither ``broker submit`` nor SkyPilot's dry run looks at a bucket URL source: its cluster is up by the time
    SkyPilot finds (on its API server) that there is no such bucket."""
    error = failed_sync({"~/data": "s3://no-such-bucket-42/data"}, [node(tmp_path)])
    assert error.startswith("CloudError: botocore error (NoSuchBucket)"), error

    status = next_status(Phase.PENDING, failed_launch(error, [("/data", "s3://no-such-bucket-42/data"),
                                                              ("/code", "/srv/code")]))

    assert (status.phase, status.step) == (Phase.FAILED, "file_mounts"), status.reason
    assert status.reason == ("file_mounts /data (s3://no-such-bucket-42/data) could not be read from its bucket "
                             "(NoSuchBucket: The specified bucket does not exist): check that the bucket and path "
                             "exist and that SkyPilot's cloud credentials may read them, then submit the job again, "
                             "or resume it with --force")


def test_a_storage_mount_the_node_cannot_make_fails_the_attempt_naming_the_bucket(sky, bucket, no_backoff, tmp_path,
                                                                                   monkeypatch):
    """SkyPilot's backend mounting a storage (``mode: MOUNT``, as the broker's checkpoint bucket is): the mount
    command is what runs on the node — here it fails as goofys does when the node's credentials may not list the
    bucket."""
    from sky.backends.cloud_vm_ray_backend import CloudVmRayBackend
    from sky.data import storage as storage_lib

    monkeypatch.setattr(storage_lib.S3Store, "mount_command", lambda self, mount_path, read_only=False: (
        "echo 'main ERRO Unable to access bucket: AccessDenied: Access Denied, status code: 403' >&2; exit 1"))
    store = storage_lib.Storage.from_yaml_config({"source": f"s3://{bucket}", "mode": "MOUNT", "persistent": True})
    cluster = Cluster([tmp_path])
    cluster.get_command_runners = lambda: [node(tmp_path)]
    with pytest.raises(Exception) as failed:
        CloudVmRayBackend()._execute_storage_mounts(cluster, {"/checkpoints": store})
    error = as_the_sdk_reads(failed.value)

    status = next_status(Phase.PENDING, failed_launch(error))  # a storage is named by SkyPilot's own words

    assert (status.phase, status.step) == (Phase.FAILED, "file_mounts"), status.reason
    assert status.reason.startswith(f"file_mounts /checkpoints: the bucket s3://{bucket} could not be mounted on the "
                                    "cluster ("), status.reason
    assert "Unable to access bucket: AccessDenied" in status.reason
    assert "check that the bucket exists and that the cluster's cloud credentials may read it" in status.reason
    assert "----- CMD" not in error and len(error) < 2000, "the mount script SkyPilot quotes whole is left out"


def test_a_workdir_the_node_cannot_write_fails_the_attempt_at_its_workdir_sync_step(sky, no_backoff, readable_dir,
                                                                              monkeypatch):
    """rsync failing on the receiving side (as for a full disk): every cluster of this task meets it again. The
    node's home is a folder its user may not write, so ``~/sky_workdir`` cannot be made."""
    from sky.backends.cloud_vm_ray_backend import CloudVmRayBackend

    workdir = readable_dir / "work"
    workdir.mkdir(mode=0o755)
    (workdir / "train.py").write_text("print('hi')\n")
    (workdir / "train.py").chmod(0o644)
    home = readable_dir / "node"
    home.mkdir()
    home.chmod(0o555)  # ~/sky_workdir cannot be made
    monkeypatch.setenv("HOME", str(home))  # where SkyPilot's local runner puts ~/sky_workdir
    cluster = Cluster([home])
    cluster.get_command_runners = lambda: [node(home, reader_uid=65534 if os.geteuid() == 0 else None)]
    with pytest.raises(Exception) as failed:
        CloudVmRayBackend()._sync_path_workdir(cluster, str(workdir))
    error = as_the_sdk_reads(failed.value)
    assert "Failed to rsync up" in error and "[Receiver]" in error, error

    status = next_status(Phase.PENDING, failed_launch(error))

    assert (status.phase, status.step) == (Phase.FAILED, "workdir_sync"), status.reason
    assert status.reason.startswith(f"the workdir could not be copied onto the cluster from {workdir} ("), \
        status.reason
    assert "Permission denied" in status.reason
    assert "the cluster's node could not write it" in status.reason


@pytest.mark.parametrize("how", ["rsync", "bucket copy"])
def test_a_sync_the_network_broke_stays_lost_so_the_job_is_placed_again(sky, bucket, no_backoff, tmp_path, how):
    """ssh to the node refused: rsync copying the workdir (its 12 or 255), or the command before a copy (255: ssh's own
    failure). Not the task's doing, and not always so: the engine places the job again."""
    from sky.backends.cloud_vm_ray_backend import CloudVmRayBackend

    unreachable = unreachable_node(tmp_path)
    if how == "rsync":
        workdir = tmp_path / "work"
        workdir.mkdir()
        cluster = Cluster([tmp_path])
        cluster.get_command_runners = lambda: [unreachable]
        with pytest.raises(Exception) as failed:
            CloudVmRayBackend()._sync_path_workdir(cluster, str(workdir))
        error = as_the_sdk_reads(failed.value)
        assert "Failed to rsync up" in error and "Connection refused" in error, error
    else:
        error = failed_sync({"~/data": f"s3://{bucket}/data"}, [unreachable])
        assert "return code 255" in error, error

    status = next_status(Phase.PENDING, failed_launch(error, [("/data", "s3://x")]))

    assert status.phase is Phase.LOST, status.reason
    assert status.reason.startswith("SkyPilot could not provision the cluster: CommandError: Command ")
    assert len(status.reason) <= len("SkyPilot could not provision the cluster: ") + 500, "a reason quotes 500 at most"


@pytest.mark.parametrize("error", [
    "ResourcesUnavailableError: Failed to acquire resources in all zones in us-east-1 for {p4d.24xlarge}.",
    "CloudError: botocore error (EndpointConnectionError): Could not connect to the endpoint URL: "
    '"http://s3.amazonaws.com/b?prefix=data"',
    "CommandError: Command rsync -Pavz x failed with return code 24. Failed to rsync up: /a -> /b. Ensure that the "
    "network is stable, then retry.",
], ids=["no capacity", "S3 unreachable from the API server", "rsync: files vanished while copied"])
def test_capacity_and_passing_failures_stay_lost(error):
    status = next_status(Phase.PENDING, failed_launch(error))
    assert status.phase is Phase.LOST, status.reason


def before_sync(output: str, rc: int = 1) -> str:
    """SkyPilot's error for a command it ran on a node before a ``file_mounts`` copy (``aws s3 sync``) that printed
    ``output`` and ended with ``rc``, as the launcher reads it."""
    from sky import exceptions

    return as_the_sdk_reads(exceptions.CommandError(
        rc, "aws s3 sync s3://b/data ~/data", "----- CMD -----\naws s3 sync s3://b/data ~/data\n----- CMD END -----\n"
        "Failed to run command before rsync s3://b/data -> ~/data. View logs: sky api logs -l sky-x", output))


@pytest.mark.parametrize("output", [
    "fatal error: An error occurred (InternalError) when calling the ListObjectsV2 operation: We encountered an "
    "internal error. Please try again.",
    "main ERRO Unable to mount file system: dial tcp 52.216.0.1:443: i/o timeout",
    "curl: (22) The requested URL returned error: 503",
    "Error: context deadline exceeded",
    "something this launcher has never seen",
    "Installing rclone...\nMount failed with exit code 1.\nLooking for rclone log files...\n"
    "Rclone log directory /root/.sky/rclone_log not found",
    "gsutil: command not found",
], ids=["S3 InternalError", "a mount's i/o timeout", "a 503", "a deadline exceeded", "words not known",
        "rclone with no log", "a tool not installed yet"])
def test_a_command_before_a_copy_that_failed_for_a_reason_that_may_pass_stays_lost(output):
    """Only words of the task's own fault (no such bucket, access refused, the disk full) fail the attempt; any other
    failure of a bucket's copy or a storage's mount may pass, and the job is placed again."""
    status = next_status(Phase.PENDING, failed_launch(before_sync(output), [("/data", "s3://b/data")]))
    assert status.phase is Phase.LOST, status.reason


@pytest.mark.parametrize("fresh", [True, False], ids=["on a new mount path", "on a path the node has"])
def test_a_mount_that_failed_for_a_reason_not_known_stays_lost_whatever_skypilots_script_printed(
        sky, bucket, no_backoff, tmp_path, monkeypatch, fresh):
    """SkyPilot's own mounting script, with only the mount binary failing with words not known (goofys logging to
    syslog). On a new path the script prints "Mount path … does not exist. Creating...", which read as the task's
    fault: the attempt failed for good, the broker's own checkpoint-bucket mount included."""
    from sky.backends.cloud_vm_ray_backend import CloudVmRayBackend
    from sky.data import mounting_utils
    from sky.data import storage as storage_lib

    destination = tmp_path / "checkpoints"
    if not fresh:
        destination.mkdir()
    monkeypatch.setattr(storage_lib.S3Store, "mount_command", lambda self, mount_path, read_only=False:
                        mounting_utils.get_mounting_command(str(destination), "true", (
                            # named goofys, so SkyPilot's script knows which binary's log it is
                            "echo 'main.FATAL Unable to mount file system, see syslog for details' >&2; false  # goofys"
                        )))
    store = storage_lib.Storage.from_yaml_config({"source": f"s3://{bucket}", "mode": "MOUNT", "persistent": True})
    cluster = Cluster([tmp_path])
    cluster.get_command_runners = lambda: [node(tmp_path)]
    with pytest.raises(Exception) as failed:
        CloudVmRayBackend()._execute_storage_mounts(cluster, {"/checkpoints": store})
    error = as_the_sdk_reads(failed.value)
    assert ("does not exist. Creating" in error) is fresh, error

    status = next_status(Phase.PENDING, failed_launch(error))

    assert status.phase is Phase.LOST, status.reason


def test_a_network_error_after_a_long_copy_is_still_read_so_the_attempt_stays_lost():
    """A bucket copy prints a line per file: the network error that ended it comes after thousands of characters,
    which the launcher cut off, then read the copy's failure as the task's and failed the job for good."""
    listing = "".join(f"download: s3://b/data/part-{i:05d}.json to data/part-{i:05d}.json\n" for i in range(200))
    error = before_sync(listing + "download failed: s3://b/data/part-00200.json Connection reset by peer")
    assert len(error) < 4100 and error.rstrip().endswith("Connection reset by peer"), error[-200:]
    status = next_status(Phase.PENDING, failed_launch(error, [("/data", "s3://b/data")]))
    assert status.phase is Phase.LOST, status.reason
    denied = before_sync(listing + "fatal error: An error occurred (AccessDenied) when calling the GetObject "
                                   "operation: Access Denied")
    assert next_status(Phase.PENDING, failed_launch(denied, [("/data", "s3://b/data")])).phase is Phase.FAILED


# --- through the launcher ---------------------------------------------------------------------------------------


def test_the_launcher_fails_the_attempt_tears_its_cluster_down_and_keeps_the_sentence_in_its_log(sky, no_backoff,
                                                                                                   tmp_path):
    """On spot too: no wait for a reclaim, since no job ran. ``broker logs`` shows the sentence, and the diagnosis
    reads it: a resume needs ``--force`` (the failure is the task's)."""
    client = ScriptedSky(real_plan=False)
    launcher = SkyPilotLauncher(tmp_path / "state", client=client)
    launcher.launch(request({"file_mounts": {"/data": "s3://no-such-bucket-42/data"}, "run": "python train.py"},
                            SPOT_A100))
    [(cluster, dumped)] = client.launched
    assert dumped["file_mounts"]["/data"] == "s3://no-such-bucket-42/data"
    error = failed_sync(dict(dumped["file_mounts"]), [node(tmp_path)])  # what the API server's launch meets
    [request_id] = client.requests
    client.requests[request_id] = (Launch.FAILED, error)
    client.provisioned(cluster, job=None, spot=True, request_done=False)

    status = launcher.status(AID)

    assert (status.phase, status.step, status.exit_code) == (Phase.FAILED, "file_mounts", None), status.reason
    assert status.reason.startswith("file_mounts /data (s3://no-such-bucket-42/data) could not be read from its "
                                    "bucket (NoSuchBucket")
    assert cluster in client.downed
    log, _ = launcher.logs(AID)
    assert log.decode().endswith(f"[spot-broker] the job was not started: {status.reason}\n")
    again = launcher.status(AID)
    assert (again.phase, again.step, again.reason) == (status.phase, status.step, status.reason), "final, and kept"
    found = diagnose(Ending("failed", status.exit_code, status.signal, status.reason, log.decode(),
                            command=status.step))
    assert not found.infrastructure, "a resume needs --force: the task's own failure"
    assert found.cls == "files_not_synced" and found.sentence.startswith(
        "Its files did not reach the cluster, so nothing of the job ran: file_mounts "), found.sentence
