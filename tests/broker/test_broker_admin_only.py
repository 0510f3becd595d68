"""What only an admin's submit may set in a task: the SkyPilot settings that change whose credentials, network,
quota or host a job's cluster gets. A team's token reaches the broker from anywhere, and every team's cluster is
launched with the broker's own cloud and cluster credentials."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
from fastapi.testclient import TestClient

from broker.api.app import create_app
from broker.spec import TEAM_CONFIG_KEYS
from broker.store import open_store

from broker_testing import ADMIN

ADMIN_H = {"Authorization": f"Bearer {ADMIN}"}
TEAM_H = {"Authorization": "Bearer vision-token"}


@pytest.fixture
def client(make_settings, tmp_path):
    app = create_app(make_settings(), store=open_store(f"sqlite://{tmp_path / 'a.db'}"), engine=False)
    with TestClient(app, raise_server_exceptions=False) as c:
        yield c


@pytest.mark.parametrize("task, field", [
    pytest.param({"config": {"kubernetes": {"remote_identity": "LOCAL_CREDENTIALS"}}},
                 "config.kubernetes.remote_identity", id="the broker's kubeconfig in the team's pod"),
    pytest.param({"config": {"kubernetes": {"pod_config": {"spec": {"containers": [
        {"securityContext": {"privileged": True}, "volumeMounts": [{"name": "h", "mountPath": "/host"}]}],
        "volumes": [{"name": "h", "hostPath": {"path": "/"}}]}}}}},
                 "config.kubernetes.pod_config", id="a privileged pod with the node's disk, where other teams' pods run"),
    pytest.param({"config": {"active_workspace": "prod"}}, "config.active_workspace",
                 id="another SkyPilot workspace and its credentials"),
    pytest.param({"config": {"gcp": {"vpc_name": "internal"}}}, "config.gcp.vpc_name", id="another network"),
    pytest.param({"config": {"slurm": {"sbatch_options": {"account": "other-team"}}}}, "config.slurm.sbatch_options",
                 id="another team's Slurm account"),
    pytest.param({"resources": {"any_of": [{"cpus": 2}, {"_cluster_config_overrides": {"kubernetes": {
        "remote_identity": "LOCAL_CREDENTIALS"}}}]}}, "resources._cluster_config_overrides",
                 id="SkyPilot's internal overrides, in an any_of alternative too"),
])
def test_a_team_may_not_change_whose_credentials_or_host_its_cluster_gets_but_an_admin_may(client, task, field):
    r = client.post("/v1/jobs", json={"run": "echo hi", **task}, headers=TEAM_H)
    assert r.status_code == 403, r.text
    assert r.json()["field"] == field and "only an admin's submit may set" in r.json()["detail"], r.text
    assert "kubernetes.provision_timeout" in r.json()["detail"], "it says what a team may set"
    assert client.get("/v1/jobs", headers=ADMIN_H).json()["jobs"] == [], "nothing was stored"
    assert client.post("/v1/jobs", json={"run": "echo hi", **task}, headers=ADMIN_H).status_code == 201, \
        "an admin's submit may"


@pytest.mark.parametrize("config", [
    pytest.param({"kubernetes": {"provision_timeout": 900, "kueue": {"local_queue_name": "q"}}},
                 id="a provisioning timeout and a Kueue queue"),
    pytest.param({"docker": {"run_options": ["--shm-size=16g"]}}, id="docker run options on its own VM"),
    pytest.param({"hooks": [{"run": "echo bye", "events": ["preemption"], "timeout": 20}]},
                 id="lifecycle hooks on its own cluster"),
    pytest.param({"gcp": {"enable_gvnic": True, "placement_policy": "compact"}}, id="GCP network performance knobs"),
])
def test_a_teams_own_provisioning_settings_are_taken(client, config):
    r = client.post("/v1/jobs", json={"run": "echo hi", "config": config}, headers=TEAM_H)
    assert r.status_code == 201, r.text


def test_the_settings_a_team_may_give_are_ones_skypilot_takes_in_a_task(tmp_path):
    """The allow-list names real overrides: each is in the installed SkyPilot's list of task-level config keys (read
    in a process of its own: `import sky` fixes its home for the process)."""
    env = {**os.environ, "HOME": str(tmp_path), "SKY_RUNTIME_DIR": str(tmp_path / "sky"),
           "SKYPILOT_DISABLE_USAGE_COLLECTION": "1"}
    out = subprocess.run([sys.executable, "-c", "import json; from sky.skylet.constants import "
                          "OVERRIDEABLE_CONFIG_KEYS_IN_TASK as k; print(json.dumps(k))"],
                         env=env, capture_output=True, text=True, timeout=120, check=True).stdout
    assert TEAM_CONFIG_KEYS <= {tuple(key) for key in json.loads(out)}
