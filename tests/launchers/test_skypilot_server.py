"""The launcher through a real SkyPilot API server: ``SdkClient`` against ``sky api start``.

The server is SkyPilot 0.14.1's own, started with ``sky api start --foreground`` on a free loopback
port, with its own HOME (the catalog subset, a ``config.yaml``) and AWS pointed at the package's moto
server. Nothing in it is patched: its ``sky check`` for AWS is the real one (STS, EC2 and S3 answered
by moto; it needs the ``aws`` CLI on PATH, as SkyPilot does), and every launch, status and teardown
below is a request to it from the real SDK. The test prepares only what an AWS account would have:

* the instance profile the VMs get (``aws.remote_identity``), so SkyPilot does not attach AWS managed
  policies moto does not carry;
* in us-east-2, a default VPC with a route to an internet gateway (moto's has none): SkyPilot finds a
  public subnet there, moto's ``RunInstances`` makes the instance, and SkyPilot then waits for SSH —
  as far as it goes without a VM. ``aws.ssh_proxy_command`` is ``/bin/false``, so ssh never opens a
  connection to moto's made-up public address; the launch stays in flight until it is torn down;
* us-west-2 left as moto makes it, without that route: SkyPilot finds no public subnet, the launch
  fails and the launcher reports the attempt LOST with SkyPilot's reason.

The server's proxies are a loopback listener that records whoever calls it; a valid version cache
keeps its PyPI check from running. The last test checks that nothing tried to leave the machine.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.request
from pathlib import Path

import pytest
from skyports import clear_server_caches, sky_api_port
from test_skypilot_task import request

from launchers.base import Phase
from launchers.skypilot import SdkClient, SkyPilotLauncher

PROFILE = "broker-test-instance-profile"
UP_ZONE = {"tier": "ondemand", "cloud": "aws", "region": "us-east-2", "zone": "us-east-2a",
           "instance_type": "m6i.2xlarge", "accelerator": None, "accelerator_count": 0, "num_nodes": 1}
NO_ROUTE_ZONE = {**UP_ZONE, "region": "us-west-2", "zone": "us-west-2a"}
TASK = {"name": "hello", "run": "echo hello"}
ENVS = {"BROKER_JOB_ID": "j-5e7e000001", "BROKER_ATTEMPT": "1"}
# Limits, not waits (each poll returns as soon as its condition holds): a real API server and moto are CPU-heavy
# Python, slow to start and to provision beside the other test worker on a loaded 2-core host.
SERVER_START_SECONDS = 240
PORT_TRIES = 3  # starts on a fresh port pair when the server exits because one of its ports was taken
PROVISION_SECONDS = 150


class Trap:
    """A loopback listener standing in for the server's HTTP(S) proxy: records each caller's first line."""

    def __init__(self):
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(16)
        self.sock.settimeout(0.2)
        self.url = f"http://127.0.0.1:{self.sock.getsockname()[1]}"
        self.calls: list[str] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self._thread.start()

    def _serve(self):
        while not self._stop.is_set():
            try:
                conn, _ = self.sock.accept()
            except OSError:
                continue
            with conn:
                conn.settimeout(1)
                try:
                    self.calls.append(conn.recv(256).split(b"\r\n", 1)[0].decode(errors="replace"))
                except OSError:
                    self.calls.append("(no request line)")

    def close(self):
        self._stop.set()
        self._thread.join(timeout=5)
        self.sock.close()


def _prepare_moto(endpoint: str) -> None:
    import boto3

    iam = boto3.client("iam", endpoint_url=endpoint, region_name="us-east-1")
    if PROFILE not in [p["InstanceProfileName"] for p in iam.list_instance_profiles()["InstanceProfiles"]]:
        iam.create_instance_profile(InstanceProfileName=PROFILE)
    for region, routed in (("us-east-2", True), ("us-west-2", False)):
        ec2 = boto3.client("ec2", endpoint_url=endpoint, region_name=region)
        vpc = ec2.describe_vpcs(Filters=[{"Name": "is-default", "Values": ["true"]}])["Vpcs"][0]["VpcId"]
        [table] = ec2.describe_route_tables(Filters=[{"Name": "vpc-id", "Values": [vpc]},
                                                     {"Name": "association.main", "Values": ["true"]}])["RouteTables"]
        has_igw = any(r.get("GatewayId", "").startswith("igw-") for r in table["Routes"])
        if routed and not has_igw:
            igw = ec2.create_internet_gateway()["InternetGateway"]["InternetGatewayId"]
            ec2.attach_internet_gateway(InternetGatewayId=igw, VpcId=vpc)
            ec2.create_route(RouteTableId=table["RouteTableId"], DestinationCidrBlock="0.0.0.0/0", GatewayId=igw)
        assert routed or not has_igw, f"moto's default VPC in {region} has a route to the internet now"


def _healthy(url: str) -> bool:
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    try:
        with opener.open(f"{url}/api/health", timeout=2) as response:
            return response.status == 200
    except OSError:
        return False


@pytest.fixture(scope="module")
def server(sky_env, sky, tmp_path_factory):
    """A SkyPilot API server of its own on loopback; the SDK in this process pointed at it."""
    assert shutil.which("aws"), "SkyPilot's `sky check` for AWS runs the aws CLI; it is not on PATH"
    home = tmp_path_factory.mktemp("skyserver")
    shutil.copytree(sky_env["catalog"], home / ".sky" / "catalogs" / "v8")
    (home / ".sky" / "config.yaml").write_text(json.dumps({
        "allowed_clouds": ["aws"],
        "aws": {"remote_identity": PROFILE, "ssh_proxy_command": "/bin/false"},
    }))
    # sky/server/version_check.py asks PyPI only when this cache is missing or a day old.
    (home / ".sky" / "version_cache.json").write_text(json.dumps({"release_version": None, "cached_at": time.time()}))
    _prepare_moto(sky_env["endpoint"])

    trap = Trap()
    sky_cli = Path(sys.executable).with_name("sky")
    log = home / "server.out"
    for tries_left in reversed(range(PORT_TRIES)):
        port = sky_api_port()
        url = f"http://127.0.0.1:{port}"
        env = {**os.environ, "HOME": str(home), "SKY_RUNTIME_DIR": str(home), "SKYPILOT_API_SERVER_LOCAL_PORT": str(port),
               "HTTP_PROXY": trap.url, "HTTPS_PROXY": trap.url, "http_proxy": trap.url, "https_proxy": trap.url,
               "SKYPILOT_DISABLE_USAGE_COLLECTION": "1"}
        env.pop("SKYPILOT_API_SERVER_ENDPOINT", None)
        with open(log, "wb") as out:
            proc = subprocess.Popen([str(sky_cli), "api", "start", "--foreground", "--host", "127.0.0.1", "--port",
                                     str(port)], env=env, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                    start_new_session=True)
        deadline = time.monotonic() + SERVER_START_SECONDS
        while not _healthy(url) and proc.poll() is None and time.monotonic() <= deadline:
            time.sleep(0.3)
        if proc.poll() is None or not tries_left or "already in use" not in log.read_text(errors="replace"):
            break
        # Its queue manager's port lies in the ephemeral range, where a client socket of any process (the other
        # xdist worker's servers and clients) may take it between sky_api_port's check and the server's bind.
        _stop_group(proc)
    mp = pytest.MonkeyPatch()
    try:
        if not _healthy(url):
            pytest.fail(f"the SkyPilot API server did not start:\n{log.read_text()[-3000:]}")
        mp.setenv("SKYPILOT_API_SERVER_ENDPOINT", url)
        mp.setenv("SKYPILOT_API_SERVER_LOCAL_PORT", str(port))
        clear_server_caches()
        yield {"url": url, "proc": proc, "trap": trap, "home": home, "endpoint": sky_env["endpoint"]}
    finally:
        mp.undo()
        clear_server_caches()
        _stop_group(proc)
        trap.close()


def _stop_group(proc: subprocess.Popen) -> None:
    """The server, its executors and its request processes: one process group, started above.

    Its state is a temporary folder, so it gets a moment to stop and is then killed (a graceful
    shutdown waits for the in-flight launches and takes many seconds).
    """
    for sig, wait in ((signal.SIGTERM, 3), (signal.SIGKILL, 10)):
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            return
        try:
            proc.wait(timeout=wait)
        except subprocess.TimeoutExpired:
            pass
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass


@pytest.fixture
def launcher(server, tmp_path):
    return SkyPilotLauncher(tmp_path / "state", client=SdkClient())


def _requests(cluster: str) -> list[tuple[str, str]]:
    import sky

    return sorted((p.name, p.status) for p in sky.api_status(cluster_name=cluster, all_status=True)
                  if p.cluster_name == cluster)


def _instances(endpoint: str, cluster: str, region: str = "us-east-2") -> list[str]:
    import boto3

    ec2 = boto3.client("ec2", endpoint_url=endpoint, region_name=region)
    return [i["State"]["Name"] for r in ec2.describe_instances()["Reservations"] for i in r["Instances"]
            if any(t["Key"] == "skypilot-cluster-name" and t["Value"].startswith(cluster + "-")
                   for t in i.get("Tags", []))]


def _until(what: str, check, seconds: float = PROVISION_SECONDS, every: float = 0.5):
    deadline = time.monotonic() + seconds
    while True:
        value = check()
        if value:
            return value
        if time.monotonic() > deadline:
            pytest.fail(f"not within {seconds}s: {what}")
        time.sleep(every)


def test_an_unknown_attempt_is_gone_and_stopping_it_sends_nothing(launcher):
    assert launcher.status("j-5e7e0000ff-a1").phase is Phase.GONE
    launcher.stop("j-5e7e0000ff-a1", grace_seconds=5)
    launcher.stop("j-5e7e0000ff-a1", grace_seconds=5)
    assert [n for n, _ in _requests(launcher.cluster("j-5e7e0000ff-a1")) if n == "sky.down"] == []
    assert launcher.sweep(["j-5e7e0000ff-a1"]) == []


def test_a_launch_the_cloud_cannot_provision_is_lost_with_skypilots_reason(launcher, server):
    aid = "j-5e7e000001-a1"
    cluster = launcher.cluster(aid)
    launcher.launch(request(TASK, NO_ROUTE_ZONE, envs=ENVS, attempt_id=aid))
    launcher.launch(request(TASK, NO_ROUTE_ZONE, envs=ENVS, attempt_id=aid))
    assert [n for n, _ in _requests(cluster)] == ["sky.launch", "sky.launch"], "the dry run and one launch"

    seen = []

    def ended():
        status = launcher.status(aid)
        seen.append(status.phase)
        return status if status.phase.is_final else None

    status = _until("the launch in us-west-2a fails", ended)
    assert set(seen) <= {Phase.PENDING, Phase.LOST}
    assert status.phase is Phase.LOST
    assert status.reason.startswith("SkyPilot could not provision the cluster: ResourcesUnavailableError: ")
    assert "us-west-2" in status.reason and "m6i.2xlarge" in status.reason
    assert ("sky.launch", "FAILED") in _requests(cluster)
    # a broker that lost its state would send it again: the dry run (succeeded) and the failed launch ran nothing
    assert launcher.client.earlier_launch(cluster) is None

    launcher.stop(aid, grace_seconds=5)
    launcher.stop(aid, grace_seconds=5)
    again = launcher.status(aid)
    assert (again.phase, again.reason) == (Phase.LOST, status.reason), "a final phase stays"
    assert launcher.client.clusters([cluster]) == []
    assert _instances(server["endpoint"], cluster, "us-west-2") == []


def test_stop_during_provisioning_cancels_the_launch_and_terminates_the_instance(launcher, server):
    aid = "j-5e7e000002-a1"
    cluster = launcher.cluster(aid)
    launcher.launch(request(TASK, UP_ZONE, envs=ENVS, attempt_id=aid))
    _until("moto runs the cluster's instance", lambda: _instances(server["endpoint"], cluster) == ["running"])
    status = launcher.status(aid)
    assert status.phase is Phase.PENDING, status
    assert [(c.name, c.status) for c in launcher.client.clusters([cluster])] == [(cluster, "INIT")]
    assert launcher.client.launch_in_flight(cluster)
    # what a broker that died inside the launch call finds by the cluster's name: this request, not the dry run
    sent = json.loads(launcher._path(aid, ".json").read_text())["request_id"]
    assert launcher.client.earlier_launch(cluster) == sent

    launcher.stop(aid, grace_seconds=30, reason="cancelled")
    launcher.stop(aid, grace_seconds=30, reason="cancelled")
    status = launcher.status(aid)
    assert (status.phase, status.reason) == (Phase.STOPPED, "cancelled")

    _until("the instance is terminated", lambda: _instances(server["endpoint"], cluster) == ["terminated"])
    _until("SkyPilot forgets the cluster", lambda: launcher.client.clusters([cluster]) == [])
    _until("the launch request ends", lambda: not launcher.client.launch_in_flight(cluster))
    assert [r for r in _requests(cluster) if r[0] == "sky.down"] == [("sky.down", "SUCCEEDED")], "torn down once"
    assert launcher.status(aid).phase is Phase.STOPPED


def test_the_sweep_tears_down_a_cluster_the_broker_no_longer_knows(launcher, server):
    aid = "j-5e7e000003-a1"
    cluster = launcher.cluster(aid)
    launcher.launch(request(TASK, UP_ZONE, envs=ENVS, attempt_id=aid))
    _until("moto runs the cluster's instance", lambda: _instances(server["endpoint"], cluster) == ["running"])
    assert launcher.sweep([aid]) == []
    assert launcher.sweep(["j-5e7e000004-a1"]) == [cluster]
    _until("the instance is terminated", lambda: _instances(server["endpoint"], cluster) == ["terminated"])
    _until("SkyPilot forgets the cluster", lambda: launcher.client.clusters([cluster]) == [])
    assert launcher.sweep([]) == []


def test_nothing_tried_to_leave_the_machine(server):
    import psutil

    assert server["trap"].calls == [], "the server called out through its proxy"
    remote = set()
    root = psutil.Process(server["proc"].pid)
    for proc in [root, *root.children(recursive=True)]:
        try:
            remote |= {c.raddr.ip for c in proc.net_connections(kind="inet") if c.raddr}
        except psutil.Error:
            continue
    assert remote <= {"127.0.0.1"}, remote
