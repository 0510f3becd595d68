"""A task's workdir shipped to a broker on another host: packed by the CLI, uploaded once, unpacked per attempt.

Real parts throughout: real directories packed with the ignore files SkyPilot honours, the HTTP API
in process (``TestClient``) and as a ``broker serve`` subprocess driven by the CLI, S3 through a moto
server over HTTP, hostile tar files built with ``tarfile`` itself.
"""

import gzip
import hashlib
import io
import json
import os
import signal
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from broker.api.app import create_app
from broker.cli import _on_this_host
from broker.store import open_store
from broker.workdir import PackError, pack

from broker_testing import ADMIN, start_broker, wait_for

H = {"Authorization": f"Bearer {ADMIN}"}
LIMIT = 64 * 1024


pytestmark = pytest.mark.usefixtures("packs_in_tmp_path")


def digest_of(data: bytes) -> str:
    return "sha256:" + hashlib.sha256(data).hexdigest()


def tar_gz(*members: tuple[tarfile.TarInfo, bytes | None]) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tar:
        for info, data in members:
            if data is not None:
                info.size = len(data)
            tar.addfile(info, io.BytesIO(data) if data is not None else None)
    return buf.getvalue()


def member(name: str, kind=tarfile.REGTYPE, link: str = "") -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.type, info.linkname, info.mode = kind, link, 0o644
    return info


def project(root: Path) -> Path:
    (root / "src" / "build").mkdir(parents=True)
    (root / "data").mkdir()
    (root / ".git" / "info").mkdir(parents=True)
    (root / "train.py").write_text("print('hi')\n")
    (root / "src" / "model.py").write_text("x = 1\n")
    (root / "src" / "build" / "out.o").write_text("o")
    (root / "src" / "w.ckpt").write_text("w")
    (root / "data" / "big.bin").write_text("d")
    (root / "notes.txt").write_text("n")
    (root / ".gitignore").write_text("# build products\n*.ckpt\n/data/\nbuild/\n")
    (root / ".git" / "info" / "exclude").write_text("notes.txt\n")
    (root / "link.py").symlink_to("train.py")
    return root


def names(p) -> list[str]:
    with tarfile.open(p.path) as t:
        return t.getnames()


# -- packing --------------------------------------------------------------------------------------


def test_a_pack_leaves_out_what_gitignore_leaves_out_or_skyignore_in_its_place(tmp_path):
    root = project(tmp_path / "p")
    p = pack(root)
    assert names(p) == [".git", ".git/info", ".git/info/exclude", ".gitignore", "link.py", "src", "src/model.py",
                        "train.py"]
    with tarfile.open(p.path) as t:
        assert t.getmember("link.py").issym() and t.getmember("link.py").linkname == "train.py"
    # a .skyignore at the top replaces the .gitignore files, as SkyPilot's sync does
    (root / ".skyignore").write_text("/.git\nmodel.py\n")
    p2 = pack(root)
    assert names(p2) == [".gitignore", ".skyignore", "data", "data/big.bin", "link.py", "notes.txt", "src",
                         "src/build", "src/build/out.o", "src/w.ckpt", "train.py"]
    for x in (p, p2):
        x.path.unlink()


def test_the_same_files_pack_to_the_same_digest_whenever_they_are_packed(tmp_path):
    root = project(tmp_path / "p")
    first = pack(root)
    os.utime(root / "train.py", (1, 1))  # a checkout touches files without changing them
    assert pack(root).digest == first.digest
    (root / "train.py").write_text("print('changed')\n")
    assert pack(root).digest != first.digest


def test_a_link_out_of_the_workdir_is_refused_naming_it(tmp_path):
    root = project(tmp_path / "p")
    (root / "datasets").symlink_to("/mnt")
    with pytest.raises(PackError, match=r"datasets is a link to /mnt, out of the workdir"):
        pack(root)


def test_a_pack_over_the_limit_is_refused_naming_its_size_the_limit_and_the_largest_files(tmp_path):
    root = project(tmp_path / "p")
    (root / "weights.bin").write_bytes(os.urandom(200 * 1024))
    with pytest.raises(PackError) as err:
        pack(root, limit=LIMIT)
    text = str(err.value)
    assert "more than the limit of 64.0 KiB" in text and "weights.bin (200.0 KiB)" in text, text
    assert ".skyignore" in text


@pytest.mark.parametrize("url, here", [
    ("http://127.0.0.1:8000", True), ("http://localhost:8000", True), ("http://[::1]:8000", True),
    ("http://127.3.4.5", True), ("https://broker.example.com", False), ("http://10.0.0.7:8000", False),
])
def test_the_workdir_is_uploaded_by_default_only_to_a_broker_on_another_host(url, here):
    assert _on_this_host(url) is here


# -- the API --------------------------------------------------------------------------------------


@pytest.fixture
def api(make_settings, tmp_path):
    settings = make_settings(config=f"max_workdir_bytes: {LIMIT}\n")
    app = create_app(settings, store=open_store(f"sqlite://{tmp_path / 'api.db'}"), engine=False)
    with TestClient(app, raise_server_exceptions=False) as c:
        yield c, settings


def test_a_pack_is_uploaded_once_then_named_at_submit(api, tmp_path):
    client, settings = api
    p = pack(project(tmp_path / "p"))
    data = p.path.read_bytes()
    assert client.get(f"/v1/workdirs/{p.digest}", headers=H).status_code == 404
    assert client.put(f"/v1/workdirs/{p.digest}", content=data).status_code == 401
    r = client.put(f"/v1/workdirs/{p.digest}", content=data, headers={**H, "Content-Type": "application/gzip"})
    assert r.status_code == 201, r.text
    assert r.json() == {"digest": p.digest, "bytes": len(data), "max_bytes": LIMIT, "files": 5}
    assert client.put(f"/v1/workdirs/{p.digest}", content=data, headers=H).status_code == 200
    assert client.get(f"/v1/workdirs/{p.digest}", headers=H).json()["bytes"] == len(data)
    assert client.get("/v1/workdirs", headers=H).json()["max_bytes"] == LIMIT
    stored = settings.data_dir / "checkpoints" / "workdirs" / "sha256" / f"{p.digest[7:]}.tar.gz"
    assert stored.read_bytes() == data  # in the object store under checkpoint_root (file:// here)
    r = client.post("/v1/jobs", json={"run": "python train.py", "broker": {"workdir": p.digest}}, headers=H)
    assert r.status_code == 201, r.text


@pytest.mark.parametrize("task, field", [
    pytest.param({"run": "x", "workdir": "/home/me/project"}, "workdir", id="a workdir on the broker's host"),
    pytest.param({"run": "x", "file_mounts": {"/root/.aws": "~/.aws"}}, "file_mounts./root/.aws",
                 id="a file_mounts source on the broker's host, such as its cloud credentials"),
    pytest.param({"run": "x", "file_mounts": {"/d": {"source": ["s3://b/x", "/etc"], "mode": "COPY"}}}, "file_mounts./d",
                 id="a local path among a bucket's sources"),
    pytest.param({"run": "x", "file_mounts": {"/k": "/srv/broker/x://../secrets-key"}}, "file_mounts./k",
                 id="a path holding :// further on, which SkyPilot normalises to the file beside it"),
    # "x:/../../../etc/broker/secrets-key" (a first part holding a colon, a URL with no host to SkyPilot) is a relative
    # path: refused for every caller, admins too (test_client_python.py)
    pytest.param({"run": "x", "file_mounts": {"/k": "~/x://../.aws/credentials"}}, "file_mounts./k",
                 id="a home path holding :// further on"),
])
def test_a_team_may_not_name_a_path_on_the_brokers_host_but_an_admin_may(api, task, field):
    """A team's token reaches the broker from anywhere, and the SkyPilot launcher would upload such a path from the
    broker's disk (its credentials, the secrets key) to the team's cluster: a team uploads its files instead."""
    client, _ = api
    team = {"Authorization": "Bearer vision-token"}
    r = client.post("/v1/jobs", json=task, headers=team)
    assert r.status_code == 403 and r.json()["field"] == field, r.text
    assert "a path on the broker's host" in r.json()["detail"] and "--upload-workdir" in r.json()["detail"]
    assert client.get("/v1/workdirs", headers=team).json()["host_paths"] is False
    assert client.get("/v1/workdirs", headers=H).json()["host_paths"] is True
    assert client.post("/v1/jobs", json=task, headers=H).status_code == 201, "an admin's submit may"
    bucket = {"run": "x", "file_mounts": {"/data": "s3://bucket/data", "/ckpt": "broker:checkpoint"}}
    assert client.post("/v1/jobs", json=bucket, headers=team).status_code == 201, "buckets are no host path"


@pytest.mark.parametrize("task, detail", [
    pytest.param({"run": "x", "broker": {"workdir": "sha256:" + "ab" * 32}}, "no uploaded workdir sha256:abab",
                 id="a pack that was never uploaded"),
    pytest.param({"run": "x", "broker": {"workdir": "abc"}}, "must be the digest of an uploaded workdir pack",
                 id="not a digest"),
    pytest.param({"run": "x", "workdir": "/src", "broker": {"workdir": "sha256:" + "ab" * 32}}, "give one",
                 id="a workdir and a pack both"),
])
def test_submit_refuses_a_pack_it_does_not_hold_naming_broker_workdir(api, task, detail):
    client, _ = api
    r = client.post("/v1/jobs", json=task, headers=H)
    assert r.status_code == 422 and r.json()["field"] == "broker.workdir", r.text
    assert detail in r.json()["detail"]
    assert client.get("/v1/jobs", headers=H).json()["jobs"] == []


def test_a_pack_over_the_limit_is_a_413_naming_its_size_and_the_limit(api):
    client, _ = api
    data = os.urandom(LIMIT + 1)
    r = client.put(f"/v1/workdirs/{digest_of(data)}", content=data, headers=H)  # Content-Length tells at once
    assert r.status_code == 413 and r.json()["field"] == "body"
    assert f"is 64.0 KiB ({LIMIT + 1} bytes), over this broker's limit of 64.0 KiB ({LIMIT} bytes" in r.json()["detail"]
    r = client.put(f"/v1/workdirs/{digest_of(data)}", content=iter([data[:40_000], data[40_000:]]), headers=H)  # chunked
    assert r.status_code == 413 and f"over this broker's limit of 64.0 KiB ({LIMIT} bytes" in r.json()["detail"]


def test_a_broker_disk_too_full_to_check_a_pack_is_a_503_to_retry_not_a_500(api, monkeypatch):
    """Not the pack's fault: the broker's own disk (its temporary folder full) is the failure to name."""
    import errno

    import broker.service

    def full(*args, **kwargs):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(broker.service, "unpack", full)  # the disk, the one part that cannot fill up here
    client, _ = api
    good = tar_gz((member("train.py"), b"print(1)\n"))
    r = client.put(f"/v1/workdirs/{digest_of(good)}", content=good, headers=H)
    assert r.status_code == 503 and r.json()["field"] == "body", r.text
    assert "could not unpack it to check it (No space left on device); retry in a moment" in r.json()["detail"]
    assert client.get(f"/v1/workdirs/{digest_of(good)}", headers=H).status_code == 404  # nothing half-stored


def test_a_body_that_is_not_the_digest_or_not_a_pack_is_a_422_saying_why(api):
    client, _ = api
    good = tar_gz((member("train.py"), b"print(1)\n"))
    r = client.put("/v1/workdirs/md5:abc", content=good, headers=H)
    assert r.status_code == 422 and r.json()["field"] == "digest" and "sha256:" in r.json()["detail"]
    r = client.put(f"/v1/workdirs/{digest_of(good + b'x')}", content=good, headers=H)
    assert r.status_code == 422 and r.json()["field"] == "digest"
    assert f"the body's SHA-256 is {digest_of(good)}" in r.json()["detail"]
    junk = b"not a tar at all"
    r = client.put(f"/v1/workdirs/{digest_of(junk)}", content=junk, headers=H)
    assert r.status_code == 422 and r.json()["field"] == "body" and "not a whole tar.gz" in r.json()["detail"]
    r = client.put(f"/v1/workdirs/{digest_of(b'')}", content=b"", headers=H)
    assert r.status_code == 422 and "is empty" in r.json()["detail"]


HOSTILE = [
    pytest.param((member("../evil.sh"), b"rm -rf ~"), "'../evil.sh' would be written outside the workdir", id="dot-dot"),
    pytest.param((member("a/../../evil.sh"), b"x"), "outside the workdir", id="dot-dot inside a path"),
    pytest.param((member("/etc/cron.d/evil"), b"x"), "'/etc/cron.d/evil' is an absolute path", id="absolute path"),
    pytest.param((member("passwd", tarfile.SYMTYPE, "/etc/passwd"), None), "link to the absolute path '/etc/passwd'",
                 id="link to an absolute path"),
    pytest.param((member("up", tarfile.SYMTYPE, "../../outside"), None), "'up' is a link to '../../outside', out of",
                 id="link out of the tree"),
    pytest.param((member("hard", tarfile.LNKTYPE, "../outside"), None), "out of the workdir", id="hard link out"),
    pytest.param((member("null", tarfile.CHRTYPE), None), "'null' is a device file", id="device file"),
    pytest.param((member("fifo", tarfile.FIFOTYPE), None), "'fifo' is a device file or a pipe", id="pipe"),
    pytest.param((member("a\nb"), b"x"), "'a\\nb' has a control character in its name: rename it, or leave it out "
                 "with .skyignore", id="a newline in a name (was stored: it reads as two names in a listing)"),
    pytest.param((member("./train.py"), b"print(2)\n"), "'./train.py' is in the pack twice",
                 id="a file twice (was stored: the second silently replaced the first)"),
]


@pytest.mark.parametrize("bad, detail", HOSTILE)
def test_a_pack_that_would_unpack_out_of_its_directory_is_a_422_naming_the_member(api, bad, detail, tmp_path):
    client, settings = api
    data = tar_gz((member("train.py"), b"print(1)\n"), bad)
    r = client.put(f"/v1/workdirs/{digest_of(data)}", content=data, headers=H)
    assert r.status_code == 422 and r.json()["field"] == "body", r.text
    assert detail in r.json()["detail"]
    assert client.get(f"/v1/workdirs/{digest_of(data)}", headers=H).status_code == 404  # nothing stored
    assert not (tmp_path / "evil.sh").exists() and not (tmp_path.parent / "evil.sh").exists()


NOT_A_TREE = [
    pytest.param([(member("a"), b"x"), (member("a/b"), b"y")], "'a/b'", id="a file under a file"),
    pytest.param([(member("a", tarfile.DIRTYPE), None), (member("a"), b"x")], "'a'", id="a file over a directory"),
    pytest.param([(member("l", tarfile.SYMTYPE, "l"), None), (member("l/x"), b"x")], "'l/x'", id="a link to itself"),
    pytest.param([(member("h", tarfile.LNKTYPE, "nothere"), None)], "'h'", id="a hard link to no member"),
    pytest.param([(member("a" * 300), b"x")], "'aaaa", id="a name too long"),
    pytest.param([(member("/".join(["d"] * 2000)), b"x")], "'d/d/d", id="a path too deep"),
]


@pytest.mark.parametrize("members, detail", NOT_A_TREE)
def test_a_pack_whose_members_make_no_tree_is_a_422_naming_the_member_not_a_500(api, members, detail):
    client, _ = api
    data = tar_gz(*members)
    r = client.put(f"/v1/workdirs/{digest_of(data)}", content=data, headers=H)
    assert r.status_code == 422 and r.json()["field"] == "body", r.text
    assert detail in r.json()["detail"] and "cannot be unpacked" in r.json()["detail"], r.text
    assert client.get(f"/v1/workdirs/{digest_of(data)}", headers=H).status_code == 404  # nothing stored


TEAM = {"Authorization": "Bearer vision-token"}


def deepening_links(outside: Path) -> list[tuple[tarfile.TarInfo, bytes | None]]:
    """CVE-2025-4517's pack: sixteen links ``a``..``p``, each to a directory of a 247-letter name inside the one
    before, make ``a/b/.../p/lll...`` a path longer than PATH_MAX, past which ``os.path.realpath`` (and so
    ``tarfile.data_filter``, before Python 3.11.13) stops following links and reads the rest as plain names:
    ``lll... -> ../../..`` is the top of the tree to the kernel, and ``escape`` a link up and out of it."""
    deep, steps, path, members = "d" * 247, "abcdefghijklmnop", "", []
    for step in steps:
        members += [(member(f"{path}{deep}", tarfile.DIRTYPE), None),
                    (member(f"{path}{step}", tarfile.SYMTYPE, deep), None)]
        path += deep + "/"
    top = "/".join(steps) + "/" + "l" * 254
    members.append((member(top, tarfile.SYMTYPE, "../" * len(steps)), None))
    members.append((member("escape", tarfile.SYMTYPE, top + "/" + "../" * len(steps) + str(outside).lstrip("/")), None))
    members.append((member("escape/pwned.sh"), b"echo pwned\n"))
    return members


def test_a_teams_pack_whose_links_run_past_path_max_writes_nothing_outside_its_directory(api, tmp_path):
    client, _ = api
    outside = tmp_path / "outside"
    outside.mkdir()
    data = tar_gz(*deepening_links(outside))
    r = client.put(f"/v1/workdirs/{digest_of(data)}", content=data, headers=TEAM)
    assert r.status_code == 422 and r.json()["field"] == "body", r.text
    assert "'escape' is a link to" in r.json()["detail"] and "out of the workdir" in r.json()["detail"]
    assert list(outside.iterdir()) == []  # was outside/pwned.sh, written by the broker's user, then a 201
    assert client.get(f"/v1/workdirs/{digest_of(data)}", headers=TEAM).status_code == 404


def test_a_link_that_a_later_link_turns_out_of_the_tree_is_refused(api):
    client, _ = api
    # `up` leads to the top while `w` is a plain name; once `w` is a link to `.`, `up` is `./x/../..`: the top's parent
    data = tar_gz((member("up", tarfile.SYMTYPE, "w/x/../.."), None), (member("w", tarfile.SYMTYPE, "."), None))
    r = client.put(f"/v1/workdirs/{digest_of(data)}", content=data, headers=TEAM)
    assert r.status_code == 422 and "'up' is a link to 'w/x/../..', out of the workdir" in r.json()["detail"], r.text


def test_links_to_links_inside_the_tree_unpack_as_before(api, tmp_path):
    client, _ = api
    data = tar_gz((member("lib/real.so"), b"elf"), (member("lib/v1.so", tarfile.SYMTYPE, "real.so"), None),
                  (member("lib/cur.so", tarfile.SYMTYPE, "v1.so"), None), (member("libs", tarfile.SYMTYPE, "lib"), None),
                  (member("docs/so", tarfile.SYMTYPE, "../libs/cur.so"), None),
                  (member("docs/self", tarfile.SYMTYPE, "self"), None))
    r = client.put(f"/v1/workdirs/{digest_of(data)}", content=data, headers=TEAM)
    assert r.status_code == 201, r.text


def test_a_pack_with_a_header_of_a_gigabyte_is_refused_before_it_is_read(api):
    client, _ = api
    longname = tarfile.TarInfo("././@LongLink")
    longname.type, longname.size = tarfile.GNUTYPE_LONGNAME, 2**30
    buf = io.BytesIO()
    with gzip.GzipFile(fileobj=buf, mode="wb", compresslevel=9) as gz:
        gz.write(longname.tobuf(format=tarfile.GNU_FORMAT))
        for _ in range(16):  # 16 MiB of the name is enough to show it: the reader refuses it at its header
            gz.write(b"a" * 2**20)
    data = buf.getvalue()
    assert len(data) < LIMIT
    r = client.put(f"/v1/workdirs/{digest_of(data)}", content=data, headers=TEAM)
    assert r.status_code == 422 and "holds a header (a member's name or attributes) of more than 1.0 MiB" \
        in r.json()["detail"], r.text  # was read whole into memory: 1 MiB packed held 8 GiB


def test_a_pack_that_unpacks_to_far_more_than_its_size_is_refused(api):
    client, _ = api
    data = tar_gz((member("zeros"), bytes(30 * 2**20)))  # 30 MiB of zeros: a few KiB packed, > 20 x 64 KiB unpacked
    assert len(data) < LIMIT
    r = client.put(f"/v1/workdirs/{digest_of(data)}", content=data, headers=H)
    assert r.status_code == 422 and "unpacks to more than 1.2 MiB" in r.json()["detail"], r.text


def test_a_pack_gone_from_the_store_before_launch_fails_the_job_saying_so(api, tmp_path):
    from broker.engine.reconcile import Engine
    from broker.lifecycle import JobState

    client, settings = api
    p = pack(project(tmp_path / "p"))
    assert client.put(f"/v1/workdirs/{p.digest}", content=p.path.read_bytes(), headers=H).status_code == 201
    job = client.post("/v1/jobs", json={"run": "python train.py", "broker": {"workdir": p.digest}}, headers=H).json()
    (settings.data_dir / "checkpoints" / "workdirs" / "sha256" / f"{p.digest[7:]}.tar.gz").unlink()  # a bucket rule
    service = client.app.state.service
    engine = Engine(settings, service.store, service.launcher)
    failed = wait_for(lambda: engine.tick() or (j := service.store.get_job(job["id"])).state is JobState.FAILED and j)
    assert f"its workdir {p.digest} cannot be unpacked: no workdir pack" in failed.reason, failed.reason


def test_a_damaged_copy_of_a_pack_in_the_hosts_cache_is_fetched_again_not_the_jobs_end(api, tmp_path):
    """The host keeps one copy of each pack it fetched (``<data dir>/workdirs/packs``); a copy cut short (the
    host lost power before it reached the disk, the disk filled) is the host's fault, not the job's: it is
    fetched again from the store, where the pack is whole, and the attempt runs."""
    from broker.workdir_store import WorkdirStore

    client, settings = api
    p = pack(project(tmp_path / "p"))
    assert client.put(f"/v1/workdirs/{p.digest}", content=p.path.read_bytes(), headers=H).status_code == 201
    store = WorkdirStore(settings)
    cached = settings.data_dir / "workdirs" / "packs" / f"{p.digest[7:]}.tar.gz"
    cached.parent.mkdir(parents=True)
    cached.write_bytes(p.path.read_bytes()[:40])  # cut short
    got = store.attempt_dir(p.digest[7:], "j-1-a1")
    assert (got / "train.py").read_text() == "print('hi')\n"
    assert cached.read_bytes() == p.path.read_bytes()
    cached.write_bytes(b"")  # and empty
    assert (store.attempt_dir(p.digest[7:], "j-1-a2") / "train.py").is_file()


# -- S3, through moto's server over HTTP ------------------------------------------------------------


def test_on_s3_a_pack_uploaded_to_one_broker_is_unpacked_for_an_attempt_by_another(s3_endpoint, make_settings,
                                                                                   tmp_path, monkeypatch):
    import boto3

    from broker.workdir_store import WorkdirStore

    for k, v in {"AWS_ENDPOINT_URL": s3_endpoint, "AWS_ACCESS_KEY_ID": "test", "AWS_SECRET_ACCESS_KEY": "test",
                 "AWS_DEFAULT_REGION": "us-east-1", "AWS_EC2_METADATA_DISABLED": "true"}.items():
        monkeypatch.setenv(k, v)
    settings = make_settings(BROKER_CHECKPOINT_ROOT=f"s3://runs/t-{tmp_path.name}")
    app = create_app(settings, store=open_store(f"sqlite://{tmp_path / 'api.db'}"), engine=False)
    p = pack(project(tmp_path / "p"))
    with TestClient(app, raise_server_exceptions=False) as client:
        r = client.put(f"/v1/workdirs/{p.digest}", content=p.path.read_bytes(), headers=H)
        assert r.status_code == 201, r.text
        assert client.post("/v1/jobs", json={"run": "x", "broker": {"workdir": p.digest}}, headers=H).status_code == 201
    s3 = boto3.client("s3", endpoint_url=s3_endpoint, region_name="us-east-1")
    key = f"t-{tmp_path.name}/workdirs/sha256/{p.digest[7:]}.tar.gz"
    assert s3.get_object(Bucket="runs", Key=key)["Body"].read() == p.path.read_bytes()
    # another broker process, on another host (its own data dir), sharing only the bucket
    other = make_settings(BROKER_CHECKPOINT_ROOT=f"s3://runs/t-{tmp_path.name}", BROKER_DATA_DIR=str(tmp_path / "other"))
    got = WorkdirStore(other).attempt_dir(p.digest[7:], "j-1-a1")
    assert (got / "train.py").read_text() == "print('hi')\n" and (got / "link.py").is_symlink()
    assert got.is_relative_to(tmp_path / "other")


# -- end to end: the CLI, a broker serve, a preemption ---------------------------------------------

CONFIG = f"""
pools: []
zones:
  - {{name: sim-a, tier: spot, instance_type: g5.xlarge, cloud_zone: us-east-1a, grace_seconds: 2,
     schedule: ["preempt attempt 1 at +6s"]}}
  - {{name: sim-b, tier: spot, instance_type: g5.xlarge, cloud_zone: us-east-1f, grace_seconds: 2}}
tick_seconds: 0.2
stop_grace_seconds: 2
changeover_seconds: 2
zone_cooldown_seconds: 600
max_workdir_bytes: {LIMIT}
"""

TRAIN = """\
import os, time
print(f"code v1, attempt {os.environ['BROKER_ATTEMPT']}, from {os.getcwd()}", flush=True)
print(f"ignored ckpt/ unpacked: {os.path.exists('ckpt')}", flush=True)
if os.environ["BROKER_ATTEMPT"] == "1":
    with open(__file__, "a") as fh:  # what an attempt writes into its directory stays its own
        fh.write("print('changed by attempt 1')\\n")
    print(f"attempt 1 wrote into its copy: {'changed by attempt 1' in open(__file__).read()}", flush=True)
    time.sleep(120)
"""

TASK = """\
name: shipped
workdir: .
resources: {accelerators: "A10G:1"}
run: python train.py
broker: {budget_usd: 5}
"""


def test_a_job_submitted_with_its_workdir_runs_from_the_pack_and_a_resume_runs_the_same_code(tmp_path):
    proc, url = start_broker(tmp_path, f"sqlite://{tmp_path / 'w.db'}", config=CONFIG)
    env = {**os.environ, "BROKER_URL": url, "BROKER_TOKEN": ADMIN}

    def cli(*args, cwd):
        return subprocess.run([sys.executable, "-m", "broker.cli", *args], env=env, cwd=cwd, capture_output=True,
                              text=True, timeout=90)

    try:
        code = tmp_path / "code"
        code.mkdir()
        (code / "train.py").write_text(TRAIN)
        (code / "task.yaml").write_text(TASK)
        (code / "ckpt").mkdir()
        (code / "ckpt" / "huge.pt").write_bytes(os.urandom(2 * LIMIT))
        r = cli("submit", "task.yaml", "--upload-workdir", "--json", cwd=code)
        assert r.returncode == 1 and "packs to more than the limit of 64.0 KiB" in r.stderr, r.stderr
        assert "ckpt/huge.pt (128.0 KiB)" in r.stderr
        (code / ".gitignore").write_text("ckpt/\n")  # not a git repository: SkyPilot's rsync honours it all the same
        r = cli("submit", "task.yaml", "--upload-workdir", "--wait", cwd=code)
        assert r.returncode == 0, r.stdout + r.stderr
        assert "workdir " in r.stderr and "uploaded" in r.stderr
        job = json.loads(cli("--json", "status", cwd=code).stdout)[0]
        assert job["state"] == "succeeded" and job["attempts"] == 2, job
        runs = tmp_path / "data" / "workdirs" / "attempts"
        for n in (1, 2):
            log = cli("logs", job["id"], "--attempt", str(n), cwd=code).stdout
            assert "changed by attempt 1" not in log, log
            assert f"code v1, attempt {n}, from {runs / (job['id'] + f'-a{n}')}" in log, log
            assert "ignored ckpt/ unpacked: False" in log, log
        assert "attempt 1 wrote into its copy: True" in cli("logs", job["id"], "--attempt", "1", cwd=code).stdout
        # each attempt's copy is removed once the attempt has ended: the broker's disk does not fill up
        wait_for(lambda: not (runs / f"{job['id']}-a1").exists() and not (runs / f"{job['id']}-a2").exists())
        assert not [p.name for p in runs.iterdir()], "nothing half-made is left either"
        assert (code / "train.py").read_text() == TRAIN  # the submitter's own copy untouched
        a2 = json.loads(cli("--json", "status", job["id"], cwd=code).stdout)["attempt_list"]
        assert [a["state"] for a in a2] == ["preempted", "succeeded"]
        # the same code again: not uploaded a second time
        r = cli("submit", "task.yaml", "--json", "--upload-workdir", cwd=code)
        assert r.returncode == 0, r.stderr
        again = json.loads(r.stdout)
        r2 = cli("submit", "task.yaml", "--upload-workdir", cwd=code)
        assert "already on the broker" in r2.stderr, r2.stderr
        for j in (again["id"], r2.stdout.split()[1]):
            cli("cancel", j, cwd=code)
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(15)


def test_a_team_submitting_on_the_brokers_own_host_uploads_its_workdir_by_itself(tmp_path):
    """On this host the CLI used to send the workdir's path, which a team may not name: it now asks the broker, and
    uploads for a team's token as for a remote broker."""
    proc, url = start_broker(tmp_path, f"sqlite://{tmp_path / 'w.db'}", config=CONFIG,
                             env_extra={"BROKER_TEAM_TOKENS": '{"vision": "vision-token"}'})
    env = {**os.environ, "BROKER_URL": url, "BROKER_TOKEN": "vision-token"}
    try:
        code = tmp_path / "code"
        code.mkdir()
        (code / "task.yaml").write_text("name: t\nworkdir: .\nresources: {cpus: 1}\nrun: cat hello.txt\n"
                                        "broker: {budget_usd: 5}\n")
        (code / "hello.txt").write_text("hello from the team's own files\n")
        r = subprocess.run([sys.executable, "-m", "broker.cli", "submit", "task.yaml", "--wait"], env=env, cwd=code,
                           capture_output=True, text=True, timeout=90)
        assert r.returncode == 0, r.stdout + r.stderr
        assert "uploaded" in r.stderr and "hello from the team's own files" in r.stdout
        r = subprocess.run([sys.executable, "-m", "broker.cli", "submit", "task.yaml", "--no-upload-workdir"],
                           env=env, cwd=code, capture_output=True, text=True, timeout=90)
        assert r.returncode == 1 and "a path on the broker's host" in r.stderr, r.stderr
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(15)
