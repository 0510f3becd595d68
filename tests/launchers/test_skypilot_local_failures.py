"""A launch SkyPilot fails on the broker's host before sending it is refused or tried again, never awaited as sent.

SkyPilot's SDK checks a task's local paths (its workdir, each ``file_mounts`` source), and for an API server on
another host packs and uploads them, all on the broker's host before its ``POST /launch``. A path that host lacks or
cannot read fails there: the job fails with a sentence naming the entry and the fix (it was requeued, placed and
refused for ever, or — when the dry run had read the files — taken for a request sent whose id was lost, read gone
120 s later and launched again, for ever). A launch whose POST may have reached the server stays awaited, never sent
twice.

The SDK is SkyPilot 0.14.1's own, unpatched, against a loopback HTTP server standing in for a remote API server: it
answers the few routes a launch takes (health, ``/validate``, the upload, ``/launch``, ``/api/get``) as SkyPilot's
server does, with SkyPilot's own encoding of a request, and records what it was sent. A real one (``sky api start``)
takes minutes to start; it is on loopback, so the SDK takes it for local and uploads nothing
(test_skypilot_server.py)."""

from __future__ import annotations

import http.server
import json
import threading
import time
import urllib.parse

import pytest
from skyports import clear_server_caches
from test_skypilot_task import ONDEMAND_CPU, request

from launchers.base import LaunchError, Phase
from launchers.skypilot import NotSent, SdkClient, SkyPilotLauncher, build_task, unsent_refusal

TASK = {"name": "hello", "run": "echo hello"}
UNREADABLE = "/proc/sys/vm/drop_caches"
"""A file no user may read, root included (mode 0200 in procfs, which checks it for root too): a file the broker's
user cannot read, on a host where the tests may run as root."""


class ApiServer(http.server.ThreadingHTTPServer):
    """SkyPilot's API server as a launch from the SDK meets it; ``launches``: the bodies of each ``POST /launch``."""

    daemon_threads = True

    def __init__(self):
        super().__init__(("127.0.0.1", 0), _Routes)
        self.url = f"http://127.0.0.1:{self.server_address[1]}"
        self.calls: list[str] = []
        self.launches: list[dict] = []
        self.drop_launch = False  # close the connection on a real launch, unanswered: it may have been taken
        self.after_dry_run = lambda: None  # what happens once the dry run is answered (a file changing)


class _Routes(http.server.BaseHTTPRequestHandler):
    server: ApiServer

    def _answer(self, code: int, body, headers: dict | None = None) -> None:
        import sky
        from sky.server import constants

        data = json.dumps(body).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header(constants.API_VERSION_HEADER, str(constants.API_VERSION))
        self.send_header(constants.VERSION_HEADER, sky.__version__)
        for key, value in (headers or {}).items():
            self.send_header(key, value)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def _body(self) -> bytes:
        if self.headers.get("Transfer-Encoding") == "chunked":  # the upload's chunks
            data = b""
            while size := int(self.rfile.readline().strip(), 16):
                data += self.rfile.read(size)
                self.rfile.readline()
            self.rfile.readline()
            return data
        return self.rfile.read(int(self.headers.get("Content-Length") or 0))

    def do_GET(self):
        import sky
        from sky.server import constants
        from sky.server.requests import requests as requests_lib

        path, _, query = self.path.partition("?")
        asked = urllib.parse.parse_qs(query)
        self.server.calls.append(f"GET {path}")
        if path == "/api/health":
            self._answer(200, {"status": "healthy", "api_version": str(constants.API_VERSION),
                               "version": sky.__version__, "commit": sky.__commit__})
        elif path == "/upload_v2/blob":
            self._answer(200, {"exists": False})
        elif path == "/api/get":  # a dry run or a listing of clusters, finished: none listed
            request_id = asked["request_id"][0]
            dry = request_id.startswith("dry-")
            self._answer(200, _request(request_id, "sky.launch" if dry else "sky.status",
                                       requests_lib.RequestStatus.SUCCEEDED, (None, None) if dry else []))
            if dry:
                self.server.after_dry_run()
        elif path == "/api/status":  # the launches taken, all still in flight
            pending = requests_lib.RequestStatus.PENDING
            listed = [_request(f"launch-{n}", "sky.launch", pending, None, sent["cluster_name"])
                      for n, sent in enumerate(self.server.launches, 1)]
            self._answer(200, [r for r in listed if r["request_id"] in asked.get("request_ids", [r["request_id"]])
                               and r["cluster_name"] in asked.get("cluster_name", [r["cluster_name"]])])
        else:
            self._answer(404, {"detail": path})

    def do_POST(self):
        path = self.path.split("?")[0]
        body = self._body()
        self.server.calls.append(f"POST {path}")
        if path == "/validate":
            self._answer(200, None)
        elif path.startswith("/upload"):
            self._answer(200, {"status": "completed"})
        elif path == "/status":
            self._answer(200, None, {"X-Skypilot-Request-ID": f"status-{len(self.server.calls)}"})
        elif path == "/launch":
            sent = json.loads(body)
            if sent.get("dryrun"):
                self._answer(200, None, {"X-Skypilot-Request-ID": "dry-1"})
                return
            self.server.launches.append(sent)
            if self.server.drop_launch:
                self.close_connection = True  # taken, and the answer lost on the way
                return
            self._answer(200, None, {"X-Skypilot-Request-ID": f"launch-{len(self.server.launches)}"})
        else:
            self._answer(404, {"detail": path})

    def log_message(self, *args):
        pass


def _request(request_id: str, name: str, status, return_value, cluster: str | None = None) -> dict:
    """A request as SkyPilot's server lists it: its own encoding."""
    from sky.server.requests import payloads
    from sky.server.requests import requests as requests_lib
    from sky.server.requests.serializers import encoders

    return requests_lib.Request(request_id=request_id, name=name, entrypoint=print, request_body=payloads.RequestBody(),
                                status=status, created_at=time.time(), user_id="broker",
                                return_value=None if return_value is None else encoders.get_encoder(name)(return_value),
                                cluster_name=cluster).encode().model_dump()


@pytest.fixture
def remote(sky, monkeypatch):
    """An API server on another host, as the SDK in this process sees it."""
    server = ApiServer()
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    monkeypatch.setenv("SKYPILOT_API_SERVER_ENDPOINT", server.url)
    clear_server_caches()
    try:
        yield server
    finally:
        monkeypatch.delenv("SKYPILOT_API_SERVER_ENDPOINT")
        clear_server_caches()
        server.shutdown()
        server.server_close()


@pytest.fixture
def launcher(remote, tmp_path):
    return SkyPilotLauncher(tmp_path / "state", client=SdkClient())


def with_mount(source: str, destination: str = "/data") -> dict:
    return {**TASK, "file_mounts": {destination: source}}


def test_the_sdk_uploads_a_tasks_files_to_this_api_server_before_sending_the_launch(launcher, remote, tmp_path):
    """What the others rely on: this server is remote to the SDK (it packs and uploads), and answers a launch."""
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "a.txt").write_text("a")
    launcher.launch(request(with_mount(str(tmp_path / "data")), ONDEMAND_CPU))
    assert remote.calls[-3:] == ["GET /upload_v2/blob", "POST /upload_v2", "POST /launch"]
    assert len(remote.launches) == 1 and "file_mounts" in remote.launches[0]["task"]
    assert launcher.status("j-0123456789-a2").phase is Phase.PENDING


def test_a_file_mounts_source_the_broker_cannot_read_fails_the_job_naming_it(launcher, remote):
    with pytest.raises(LaunchError) as caught:
        launcher.launch(request(with_mount(UNREADABLE), ONDEMAND_CPU))
    assert caught.value.permanent, "requeued, it is placed, read and refused again, for ever"
    assert str(caught.value) == (f"file_mounts /data: {UNREADABLE} cannot be read on the broker's host, where SkyPilot "
                                 f"reads the task's files (Permission denied): make it readable by the user the broker "
                                 f"runs as")
    assert remote.launches == []


def test_a_file_unreadable_or_gone_inside_the_workdir_names_the_workdir_and_the_file(tmp_path):
    """As SkyPilot's packing raises it for a file inside the workdir (not made here: root reads any file it owns)."""
    config = {**TASK, "workdir": str(tmp_path / "work"), "file_mounts": {"/data": "s3://bucket/data"}}
    inside = str(tmp_path / "work" / "keys" / "id_rsa")

    def refused(error: OSError) -> LaunchError:
        unsent = NotSent("SkyPilot sent nothing")
        unsent.__cause__ = error
        return unsent_refusal(unsent, config)

    unreadable = refused(PermissionError(13, "Permission denied", inside))
    assert unreadable.permanent
    assert str(unreadable) == (f"the workdir: {tmp_path / 'work'} cannot be read on the broker's host, where SkyPilot "
                               f"reads the task's files (Permission denied, at {inside}): make it readable by the user "
                               f"the broker runs as")
    vanished = refused(FileNotFoundError(2, "No such file or directory", inside))
    assert not vanished.permanent, "a file that went while it was packed: the next placement reads them again"
    assert str(vanished).startswith(f"the workdir: {tmp_path / 'work'} could not be read on the broker's host")
    elsewhere = refused(OSError(28, "No space left on device", "/tmp/tmpabc.zip"))  # the pack itself, not the task
    assert not elsewhere.permanent and str(elsewhere).startswith("SkyPilot cannot satisfy ")


def test_a_file_mounts_source_missing_on_the_broker_host_fails_the_job_naming_it(launcher, remote, tmp_path):
    gone = str(tmp_path / "datasets" / "imagenet")
    with pytest.raises(LaunchError) as caught:
        launcher.launch(request(with_mount(gone), ONDEMAND_CPU))
    assert caught.value.permanent
    assert str(caught.value) == (f"file_mounts /data: {gone} does not exist on the broker's host, where SkyPilot reads "
                                 f"the task's files: correct the path, or put the files there")
    assert remote.launches == []


def test_a_missing_workdir_fails_the_job_naming_it(launcher, remote, tmp_path):
    gone = str(tmp_path / "work")
    with pytest.raises(LaunchError) as caught:
        launcher.launch(request({**TASK, "workdir": gone}, ONDEMAND_CPU))
    assert caught.value.permanent
    assert str(caught.value).startswith(f"the workdir: {gone} does not exist on the broker's host")


def test_files_gone_between_the_dry_run_and_the_launch_fail_it_instead_of_waiting_for_a_launch_never_sent(
        launcher, remote, tmp_path):
    """The dry run read the files; the launch that follows cannot. Taken for a launch sent whose id was lost, the
    attempt read pending, then gone, and the engine launched it again — for ever, the files never coming back."""
    data = tmp_path / "data"
    data.mkdir()
    (data / "a.txt").write_text("a")
    remote.after_dry_run = lambda: (data / "a.txt").unlink() or data.rmdir()
    aid = "j-0123456789-a2"
    with pytest.raises(LaunchError) as caught:
        launcher.launch(request(with_mount(str(data)), ONDEMAND_CPU, attempt_id=aid))
    assert caught.value.permanent
    assert f"file_mounts /data: {data} does not exist on the broker's host" in str(caught.value)
    assert remote.launches == []
    state = json.loads(launcher._path(aid, ".json").read_text())
    assert "sent_at" not in state and "request_id" not in state


def test_a_launch_whose_answer_is_lost_is_awaited_and_never_sent_twice(launcher, remote, tmp_path):
    """The POST reached the server (it may have taken it): the launch stays awaited as before, not refused."""
    remote.drop_launch = True
    aid = "j-0123456789-a2"
    launcher.launch(request(TASK, ONDEMAND_CPU, attempt_id=aid))
    assert len(remote.launches) == 1
    assert "sent_at" in json.loads(launcher._path(aid, ".json").read_text())
    launcher.launch(request(TASK, ONDEMAND_CPU, attempt_id=aid))
    assert len(remote.launches) == 1, "sent again while the first may still show up"


def test_sdk_errors_raised_after_sending_are_not_taken_for_unsent(remote):
    """The classification itself, on SkyPilot's own errors: one raised by the POST (its connection cut) is SkyPilot's
    error as it is; one raised by the health check before anything is sent is :class:`NotSent`."""
    import requests

    remote.drop_launch = True
    with pytest.raises(requests.exceptions.ConnectionError):
        SdkClient().launch(build_task(TASK), "broker-j-0123456789-a2", autostop_minutes=10)
    remote.shutdown()
    remote.server_close()
    clear_server_caches()
    with pytest.raises(NotSent) as caught:
        SdkClient().launch(build_task(TASK), "broker-j-0123456789-a2", autostop_minutes=10)
    assert type(caught.value.__cause__).__name__ == "ApiServerConnectionError"


def test_the_engine_fails_a_job_whose_files_the_broker_cannot_read_instead_of_placing_it_for_ever(remote, tmp_path):
    """Requeued, the job was placed, planned and refused again at every tick, a new attempt each time, never ending."""
    from broker.auth import Principal
    from broker.config import load_settings
    from broker.engine.reconcile import Engine
    from broker.lifecycle import JobState
    from broker.service import BrokerService
    from broker.store import open_store
    from launchers.local import LocalLauncher
    from launchers.router import RoutingLauncher

    settings = load_settings({"BROKER_DATA_DIR": str(tmp_path / "data"), "BROKER_LAUNCHER": "skypilot",
                              "BROKER_ADMIN_TOKEN": "t"})
    launcher = RoutingLauncher(LocalLauncher(settings.data_dir / "runs"),
                               SkyPilotLauncher(settings.data_dir / "skypilot", client=SdkClient()))
    store = open_store(f"sqlite://{tmp_path / 'r.db'}")
    service, engine = BrokerService(settings, store, launcher), Engine(settings, store, launcher)
    try:
        job, _ = service.submit(Principal("admin", None, admin=True),
                                {"run": "true", "file_mounts": {"/data": UNREADABLE}, "broker": {"budget_usd": 5}})
        engine.tick()
        engine.tick()
        ended = store.get_job(job.id)
        assert ended.state is JobState.FAILED, (ended.state, ended.reason)
        assert f"file_mounts /data: {UNREADABLE} cannot be read on the broker's host" in ended.reason
        assert ended.attempts == 1 and remote.launches == []
    finally:
        if engine._housekeeping is not None:  # the tick's workdir sweep, beside it: done before the store closes
            engine._housekeeping.result(timeout=30)
        store.close()
