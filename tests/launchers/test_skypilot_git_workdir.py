"""A task whose workdir is a git repository (``workdir: {url, ref}``, SkyPilot's form) launched on a SkyPilot cluster:
every node gets the repository at that ref in ``~/sky_workdir``, where ``setup`` and ``run`` go.

SkyPilot 0.14.1 clones it on each node with its ``git_clone.sh``, which reads the repository and the ref from
variables only (``GIT_URL``, and ``GIT_BRANCH``, ``GIT_TAG`` or ``GIT_COMMIT_HASH``) and, without ``GIT_URL``, clones
nothing and succeeds. Its CLI sets them on the task (``Task.update_envs_and_secrets_from_workdir``); the SDK and the
API server, which the launcher goes through, never do. The launcher used to hand the task over without them: the
job ran on a cluster with an empty ``~/sky_workdir``, without its code.

Real parts all the way but the VM: the task the launcher hands to SkyPilot (as SkyPilot dumps it), rebuilt as the
API server does, and synced by SkyPilot's own backend (``CloudVmRayBackend.sync_workdir``) through its own command
runner — a local one, standing for the cluster's node, with a home of its own — running SkyPilot's own clone
script against a real repository served over HTTP on loopback by ``git http-backend``.
"""

from __future__ import annotations

import copy
import http.server
import os
import re
import subprocess
import threading
from dataclasses import dataclass, field
from pathlib import Path
from types import SimpleNamespace

import pytest
from gitrepos import _git, make_repo
from skypilot_fakes import ScriptedSky
from test_skypilot_task import ONDEMAND_CPU, ONDEMAND_T4, SPOT_A100, request

from broker.diagnosis import Ending, diagnose
from launchers.base import Phase
from launchers.skypilot import SkyPilotLauncher, attempt_config, build_task
from launchers.skypilot_status import Launch

AID = "j-0123456789-a2"
CLUSTER = "broker-j-0123456789-a2"
HEX_BRANCH = "cafe1234"  # a branch whose name is also a valid short commit hash


class _GitHttp(http.server.BaseHTTPRequestHandler):
    """Git's smart HTTP protocol, through ``git http-backend`` (CGI), for the repositories under the server's root."""

    def do_GET(self):
        self._backend()

    def do_POST(self):
        self._backend()

    def _backend(self):
        path, _, query = self.path.partition("?")
        self.server.seen.append(path)
        body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        env = {"PATH": os.environ["PATH"], "GIT_PROJECT_ROOT": self.server.root, "GIT_HTTP_EXPORT_ALL": "1",
               "PATH_INFO": path, "QUERY_STRING": query, "REQUEST_METHOD": self.command,
               "CONTENT_TYPE": self.headers.get("Content-Type", ""), "CONTENT_LENGTH": str(len(body)),
               "HTTP_CONTENT_ENCODING": self.headers.get("Content-Encoding", ""),
               "GIT_PROTOCOL": self.headers.get("Git-Protocol", ""), "REMOTE_ADDR": "127.0.0.1",
               "GIT_CONFIG_NOSYSTEM": "1", "HOME": self.server.root}
        out = subprocess.run(["git", "http-backend"], input=body, env=env, capture_output=True, timeout=60).stdout
        head, payload = re.split(rb"\r?\n\r?\n", out, maxsplit=1)
        status, headers = 200, []
        for line in head.decode().splitlines():
            name, _, value = line.partition(":")
            if name.lower() == "status":
                status = int(value.split()[0])
            else:
                headers.append((name, value.strip()))
        self.send_response(status)
        for name, value in headers:
            self.send_header(name, value)
        self.send_header("Content-Length", str(len(payload)))
        self.end_headers()
        self.wfile.write(payload)

    def log_message(self, *args):
        pass


@pytest.fixture
def served(tmp_path):
    """tests/gitrepos.py's repository (and a branch named like a commit hash, at ``feature``'s tip), served at
    ``http://127.0.0.1:<port>/train.git``; ``.seen``: the paths asked for."""
    repo = make_repo(tmp_path / "repo")
    _git(repo.path, "branch", HEX_BRANCH, repo.feature)
    root = tmp_path / "served"
    root.mkdir()
    _git(root, "clone", "-q", "--bare", str(repo.path), "train.git")
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _GitHttp)
    server.root, server.seen = str(root), []
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield SimpleNamespace(repo=repo, url=f"http://127.0.0.1:{server.server_address[1]}/train.git", seen=server.seen)
    server.shutdown()
    server.server_close()


# --- the cluster: SkyPilot's own sync, its own command runner, on nodes that are folders of this host -------------


def _node_runner(home: Path):
    from sky.utils import command_runner

    class Node(command_runner.LocalProcessCommandRunner):
        """A cluster node: SkyPilot's runner for commands on this host, whose home is a folder of its own, and whose
        name is that folder (SkyPilot names the clone script it copies to a node's /tmp after the node: nodes of
        one name, sharing this host's /tmp, would remove each other's)."""

        def __init__(self):
            super().__init__()
            self.node = (str(home),)

        def get_remote_home_dir(self) -> str:
            return str(home)

    return Node()


@dataclass
class Cluster:
    """What SkyPilot's backend reads of the handle of a cluster it provisioned (the boundary: VMs)."""

    homes: list[Path]
    launched_resources: SimpleNamespace = field(default_factory=lambda: SimpleNamespace(cloud="AWS"))

    def __post_init__(self):
        from sky.provision.common import ProvisionRuntimeMetadata

        self.provision_runtime_metadata = ProvisionRuntimeMetadata()
        self.launched_nodes = len(self.homes)

    def external_ips(self) -> list[str]:
        return ["127.0.0.1"] * len(self.homes)

    def get_command_runners(self):
        return [_node_runner(home) for home in self.homes]


def skypilot_syncs_workdir(dumped: dict, homes: list[Path]) -> None:
    """What SkyPilot's API server does with the task of a launch (``sky/execution.py``, the ``SYNC_WORKDIR``
    stage): the task rebuilt from the config the SDK sent, then ``backend.sync_workdir(handle, task.workdir,
    plaintext envs_and_secrets)`` — for a git workdir, ``git_clone.sh`` on every node."""
    import sky
    from sky import task as task_lib
    from sky.backends.cloud_vm_ray_backend import CloudVmRayBackend

    task = sky.Task.from_yaml_config(copy.deepcopy(dumped))
    envs_and_secrets = task_lib.get_plaintext_envs_and_secrets(task.envs_and_secrets)
    CloudVmRayBackend().sync_workdir(Cluster(homes), task.workdir, envs_and_secrets)


def head_of(workdir: Path) -> tuple[str, str]:
    """What a node's ``~/sky_workdir`` holds: (its ``version.txt``, the commit checked out)."""
    assert workdir.is_dir(), f"{workdir} was never made: SkyPilot cloned nothing"
    version = (workdir / "version.txt").read_text().strip() if (workdir / "version.txt").exists() else "(no code)"
    return version, _git(workdir, "rev-parse", "HEAD")


@pytest.fixture
def launched(sky, tmp_path):
    """Launch a task through the launcher, its plan SkyPilot's real dry run: the config SkyPilot received."""

    def launch(task: dict, placement=ONDEMAND_CPU) -> dict:
        client = ScriptedSky(real_plan=True)
        SkyPilotLauncher(tmp_path / "state", client=client).launch(request(task, placement))
        [(cluster, dumped)] = client.launched
        assert cluster == CLUSTER
        return dumped

    return launch


@pytest.mark.parametrize("ref, version, commit", [
    ("feature", "feature", "feature"),
    ("v1", "v1", "first"),
    ("<first>", "v1", "first"),
    ("<first:10>", "v1", "first"),
    (HEX_BRANCH, "feature", "feature"),
    (None, "v2", "main"),
], ids=["a branch → its tip", "a tag → the commit it names", "a commit hash → that commit",
        "a short commit hash → that commit", "a branch named like a commit hash → its tip",
        "no ref → the default branch's tip"])
def test_the_cluster_gets_the_repository_at_its_ref_in_sky_workdir(served, launched, tmp_path, ref, version, commit):
    repo = served.repo
    ref = {"<first>": repo.first, "<first:10>": repo.first[:10]}.get(ref, ref)
    dumped = launched({"workdir": {"url": served.url, **({"ref": ref} if ref else {})}, "run": "python train.py"})
    assert served.seen == [], "the broker's host never reads the repository itself: the cluster clones it"

    skypilot_syncs_workdir(dumped, [tmp_path / "node"])

    assert head_of(tmp_path / "node" / "sky_workdir") == (version, getattr(repo, commit))
    assert repo.path.joinpath("version.txt").read_text() == "v2\n"


@pytest.mark.parametrize("placement", [ONDEMAND_CPU, SPOT_A100], ids=["on-demand", "spot: no wait for a reclaim"])
def test_a_ref_the_repository_lacks_fails_the_attempt_as_a_clone_failure_and_its_cluster_goes(
        served, sky, tmp_path, monkeypatch, placement):
    """SkyPilot's clone fails on the node, so its launch request fails once the cluster is up, before any job: no
    autostop is set then, and the attempt used to read pending while the cluster idled, billed, until the budget ran
    out. It ends as the local launcher's failed clone does (its step ``workdir``, no resume without ``--force``)."""
    from sky import exceptions
    from sky.utils import common_utils

    monkeypatch.setattr(common_utils.Backoff, "current_backoff", lambda self: 0.0)  # SkyPilot's 3 retries, no waits
    client = ScriptedSky(real_plan=False)
    launcher = SkyPilotLauncher(tmp_path / "state", client=client)
    launcher.launch(request({"workdir": {"url": served.url, "ref": "no-such-branch"}, "run": "python train.py"},
                            placement))
    [(cluster, dumped)] = client.launched
    with pytest.raises(exceptions.CommandError) as failed:  # the API server's sync, for real
        skypilot_syncs_workdir(dumped, [tmp_path / "node"])
    # what the API server then says of the launch request (its error's message), and of the cluster it made
    [request_id] = client.requests
    client.requests[request_id] = (Launch.FAILED, " ".join(str(failed.value).split()))
    client.provisioned(cluster, job=None, spot=placement["tier"] == "spot", request_done=False)

    status = launcher.status(AID)

    assert (status.phase, status.step, status.exit_code) == (Phase.FAILED, "workdir", None), status.reason
    assert status.reason.startswith(f"the git repository {served.url} at no-such-branch could not be cloned on the "
                                    "cluster")
    assert "BROKER_JOB_TOKEN" not in status.reason
    assert cluster in client.downed
    found = diagnose(Ending("failed", status.exit_code, status.signal, status.reason, "", command=status.step))
    assert found.cls == "workdir_clone" and not found.infrastructure


def test_every_node_of_a_cluster_gets_the_repository(served, launched, tmp_path):
    dumped = launched({"workdir": {"url": served.url, "ref": "v1"}, "run": "python train.py"}, ONDEMAND_T4)
    assert dumped["num_nodes"] == 2

    skypilot_syncs_workdir(dumped, [tmp_path / "head", tmp_path / "worker"])

    for node in ("head", "worker"):
        assert head_of(tmp_path / node / "sky_workdir") == ("v1", served.repo.first)


def test_the_tasks_own_git_variables_never_send_the_clone_elsewhere(served, launched, tmp_path):
    """``git_clone.sh`` takes ``GIT_BRANCH`` before ``GIT_TAG`` before ``GIT_COMMIT_HASH``, from the job's whole
    environment: a task's own ``GIT_BRANCH`` (its envs, or its secrets) would win over the workdir's commit."""
    dumped = launched({"workdir": {"url": served.url, "ref": served.repo.first},
                       "envs": {"GIT_BRANCH": "feature", "GIT_URL": "http://127.0.0.1:9/elsewhere.git"},
                       "secrets": {"GIT_TAG": "v1"}, "run": "python train.py"})

    skypilot_syncs_workdir(dumped, [tmp_path / "node"])

    assert head_of(tmp_path / "node" / "sky_workdir") == ("v1", served.repo.first)


def test_the_clone_variables_are_shown_in_skypilots_records_but_a_url_holding_a_credential_is_a_secret(sky):
    plain = attempt_config(request({"workdir": {"url": "https://github.com/org/train.git", "ref": "main"},
                                    "run": "python train.py"}, ONDEMAND_CPU))
    assert plain["envs"]["GIT_URL"] == "https://github.com/org/train.git"
    assert plain["envs"]["GIT_BRANCH"] == "main"
    assert "GIT_URL" not in plain.get("secrets", {})

    url = "https://x-access-token:ghp_s3cr3tT0k3nValue@github.com/org/train.git"
    with_token = build_task(attempt_config(request({"workdir": {"url": url, "ref": "main"}, "run": "true"},
                                                   ONDEMAND_CPU)))
    assert "GIT_URL" not in with_token.envs
    assert with_token.secrets["GIT_URL"].get_secret_value() == url
    shown = with_token.to_yaml_config(use_user_specified_yaml=True)  # as SkyPilot shows and stores it
    assert "ghp_s3cr3tT0k3nValue" not in str(shown.get("envs")) + str(shown.get("secrets"))


def test_a_private_repositorys_token_from_the_tasks_secrets_reaches_the_clone(sky):
    """``git_clone.sh`` puts ``GIT_TOKEN`` into an ``https`` URL; the task's own secret reaches the clone's
    environment as it is (SkyPilot's CLI reads it from the launching shell instead)."""
    from sky import task as task_lib

    config = attempt_config(request({"workdir": {"url": "https://github.com/org/private.git", "ref": "v3"},
                                     "secrets": {"GIT_TOKEN": "ghp_teamtoken"}, "run": "true"}, ONDEMAND_CPU))
    task = build_task(config)
    clone_env = task_lib.get_plaintext_envs_and_secrets(task.envs_and_secrets)
    assert {k: clone_env[k] for k in ("GIT_URL", "GIT_BRANCH", "GIT_TOKEN")} == {
        "GIT_URL": "https://github.com/org/private.git", "GIT_BRANCH": "v3", "GIT_TOKEN": "ghp_teamtoken"}
    assert "GIT_TOKEN" not in task.envs


@pytest.mark.parametrize("workdir", [None, "/srv/code"], ids=["no workdir", "a workdir that is a path"])
def test_a_task_without_a_git_workdir_gets_no_clone_variables(sky, workdir):
    task = {"run": "true", "envs": {"GIT_BRANCH": "the task's own"}, **({"workdir": workdir} if workdir else {})}
    envs = attempt_config(request(task, ONDEMAND_CPU))["envs"]
    assert "GIT_URL" not in envs and envs["GIT_BRANCH"] == "the task's own"
