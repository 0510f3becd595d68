"""One contract suite, run against local files, memory://, S3 (moto server) and GCS (emulator)."""

from __future__ import annotations

import os
import warnings

import pytest
import torch

from checkpoint import Checkpointer, CheckpointError, CheckpointWarning, GlobalRNG, TransferOptions
from checkpoint import layout
from checkpoint.storage import open_storage

FRESH = object()


def small_state(seed: int = 0) -> dict:
    torch.manual_seed(seed)
    model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.ReLU(), torch.nn.Linear(8, 3))
    optim = torch.optim.Adam(model.parameters(), lr=1e-2)
    sched = torch.optim.lr_scheduler.StepLR(optim, step_size=2, gamma=0.5)
    scaler = torch.amp.GradScaler("cpu", init_scale=1024.0)
    for _ in range(3):
        loss = model(torch.randn(5, 4)).pow(2).mean()
        optim.zero_grad()
        scaler.scale(loss).backward()
        scaler.step(optim)
        scaler.update()
        sched.step()
    return {"model": model, "optim": optim, "sched": sched, "scaler": scaler,
            "data": {"epoch": 2, "pos": 17, "seen": (3, 4.5)}}


def checkpointer(uri: str, **kw) -> Checkpointer:
    kw.setdefault("env", {})
    kw.setdefault("handle_sigterm", False)
    kw.setdefault("every_steps", 1)
    return Checkpointer(uri, **kw)


def save_steps(uri: str, steps: list[int], **kw) -> list[str]:
    with checkpointer(uri, **kw) as ckpt:
        uris = []
        for s in steps:
            ckpt.save(s, {"w": torch.full((64,), float(s)), "step": s}, wait=True)
            uris.append(ckpt.last_committed)
    return uris


def test_a_fresh_run_restores_the_default(store_uri):
    with checkpointer(store_uri) as ckpt:
        assert ckpt.restore(default=FRESH) is FRESH


def test_save_then_restore_round_trips_model_optimizer_scheduler_scaler_and_data(store_uri):
    state = small_state()
    with checkpointer(store_uri) as ckpt:
        ckpt.save(30, state)
        assert ckpt.wait().startswith(store_uri.rstrip("/") + "/step-000000000030-")

    fresh = small_state(seed=1)
    with checkpointer(store_uri) as ckpt:
        restored = ckpt.restore(into=fresh)
    assert restored.step == 30
    for name, tensor in state["model"].state_dict().items():
        assert torch.equal(fresh["model"].state_dict()[name], tensor), name
    assert fresh["optim"].state_dict()["param_groups"] == state["optim"].state_dict()["param_groups"]
    for i, s in state["optim"].state_dict()["state"].items():
        for k, v in s.items():
            assert torch.equal(fresh["optim"].state_dict()["state"][i][k], v), (i, k)
    assert fresh["sched"].state_dict() == state["sched"].state_dict()
    assert fresh["scaler"].state_dict() == state["scaler"].state_dict()
    assert restored["data"] == {"epoch": 2, "pos": 17, "seen": (3, 4.5)}


def test_restore_takes_the_newest_and_retention_keeps_only_the_last_n(store_uri):
    uris = save_steps(store_uri, [10, 20, 30, 40], keep_last=2)
    storage = open_storage(store_uri)
    assert [e.id.step for e in layout.scan(storage.list())] == [30, 40]
    with checkpointer(store_uri) as ckpt:
        restored = ckpt.restore()
    assert (restored.step, restored.uri, restored["step"]) == (40, uris[-1], 40)


def _flip_byte(data: bytes) -> bytes:
    i = len(data) // 2
    return data[:i] + bytes([data[i] ^ 0xFF]) + data[i + 1:]


DAMAGE = [
    ("a flipped byte in a tensor file", "00-w.safetensors", lambda s, p: s.write(p, _flip_byte(s.read(p))),
     "sha256 mismatch"),
    ("a truncated tensor file", "00-w.safetensors", lambda s, p: s.write(p, s.read(p)[:-7]), "manifest says"),
    ("a deleted tensor file", "00-w.safetensors", lambda s, p: s.delete([p]), "is missing"),
    ("a deleted manifest", "manifest.json", lambda s, p: s.delete([p]), "manifest.json is missing"),
    ("an edited manifest", "manifest.json",
     lambda s, p: s.write(p, s.read(p).replace(b'"step": 20', b'"step": 21')), "does not match its commit marker"),
    ("no commit marker (a save that never finished)", "COMMITTED", lambda s, p: s.delete([p]), None),
]


@pytest.mark.parametrize("target, damage, reason", [d[1:] for d in DAMAGE],
                         ids=[f"{d[0]} in the newest checkpoint → restore falls back and says why" for d in DAMAGE])
def test_damaged_newest_checkpoint_is_skipped_for_the_previous_one(store_uri, target, damage, reason):
    uris = save_steps(store_uri, [10, 20])
    storage = open_storage(store_uri)
    damage(storage, f"{uris[-1].rsplit('/', 1)[1]}/{target}")

    with checkpointer(store_uri) as ckpt, warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        restored = ckpt.restore()
    assert (restored.step, restored["step"]) == (10, 10)
    torch.testing.assert_close(restored["w"], torch.full((64,), 10.0), rtol=0, atol=0)
    skipped = [str(w.message) for w in caught if issubclass(w.category, CheckpointWarning)]
    if reason is None:  # uncommitted: simply not a checkpoint, nothing to warn about
        assert skipped == []
    else:
        assert len(skipped) == 1 and uris[-1] in skipped[0] and reason in skipped[0], skipped

    with checkpointer(store_uri) as ckpt:  # the resumed run commits: a damaged checkpoint goes, debris of a
        assert ckpt.restore().step == 10  # newer save stays (a writer may still be committing it)
        ckpt.save(11, {"w": torch.full((64,), 11.0), "step": 11}, wait=True)
    left = {e.id.step for e in layout.scan(storage.list())}
    assert left == ({10, 11} if reason else {10, 11, 20}), left


def test_when_every_checkpoint_is_corrupt_restore_returns_the_default(store_uri):
    uris = save_steps(store_uri, [10])
    storage = open_storage(store_uri)
    storage.delete([f"{uris[0].rsplit('/', 1)[1]}/state.json"])
    with checkpointer(store_uri, keep_last=1) as ckpt, pytest.warns(CheckpointWarning, match="state.json is missing"):
        with pytest.raises(CheckpointError, match="every checkpoint under .* is damaged"):  # not FRESH: no start over
            ckpt.restore(default=FRESH)
        ckpt.save(1, {"w": torch.full((64,), 1.0), "step": 1}, wait=True)  # training starts afresh
    # counted as the newest (keep_last=1), the corrupt step 10 had the fresh run's checkpoints deleted as each
    # committed, until the run passed step 10: a preemption before then lost everything
    assert [(e.id.step, e.committed) for e in layout.scan(storage.list())] == [(1, True), (10, True)]
    with checkpointer(store_uri) as ckpt:
        assert ckpt.restore().step == 1


def test_broker_resume_from_picks_that_checkpoint_over_the_newest(store_uri):
    uris = save_steps(store_uri, [10, 20, 30])
    with checkpointer(store_uri, env={"BROKER_RESUME_FROM": uris[1]}) as ckpt:
        restored = ckpt.restore()
    assert (restored.step, restored.uri) == (20, uris[1])


def test_a_corrupt_resume_from_falls_back_to_an_older_one_not_a_newer_one(store_uri):
    uris = save_steps(store_uri, [10, 20, 30])
    open_storage(store_uri).delete([f"{uris[1].rsplit('/', 1)[1]}/00-w.safetensors"])
    with checkpointer(store_uri, env={"BROKER_RESUME_FROM": uris[1]}) as ckpt, \
            pytest.warns(CheckpointWarning, match="00-w.safetensors is missing"):
        assert ckpt.restore().step == 10


def test_a_commit_the_broker_never_heard_of_is_resumed_from_not_thrown_away(store_uri):
    """Job j-1 committed step 30 while the broker was down, so the broker names step 20: the job's own newer
    checkpoint wins (the work is not lost), and the broker is told of it."""
    job = {"BROKER_JOB_ID": "j-1"}
    uris = save_steps(store_uri, [10, 20, 30], env={**job, "BROKER_ATTEMPT": "1"})
    with checkpointer(store_uri, env={**job, "BROKER_ATTEMPT": "2", "BROKER_RESUME_FROM": uris[1]}) as ckpt:
        reported = []
        ckpt._reporter.report_checkpoint = lambda step, uri, **kw: reported.append((step, uri))
        restored = ckpt.restore()
    assert (restored.step, restored.uri) == (30, uris[2]) and reported == [(30, uris[2])]


@pytest.mark.parametrize("writer, reader", [
    pytest.param({"BROKER_JOB_ID": "j-old"}, {"BROKER_JOB_ID": "j-new"}, id="the newer ones are another job's"),
    pytest.param({"BROKER_JOB_ID": "j-1"}, {}, id="a run started by hand (no job id) rolls back on purpose"),
])
def test_a_named_checkpoint_is_taken_as_asked_when_the_newer_ones_are_not_this_jobs(store_uri, writer, reader):
    uris = save_steps(store_uri, [10, 20, 30], env=writer)
    with checkpointer(store_uri, env={**reader, "BROKER_RESUME_FROM": uris[1]}) as ckpt:
        assert ckpt.restore().step == 20


def test_a_run_rolled_back_to_an_older_step_keeps_its_new_checkpoints(store_uri):
    """Three later steps (keep_last=3) are abandoned by a rollback to step 20: the run's new checkpoints are
    kept, not deleted right after their commits as older than the abandoned ones."""
    uris = save_steps(store_uri, [10, 20, 50, 60, 70], keep_last=5)
    with checkpointer(store_uri, env={"BROKER_RESUME_FROM": uris[1]}, keep_last=3) as ckpt:
        assert ckpt.restore().step == 20
        for step in (21, 22):
            ckpt.save(step, {"w": torch.full((64,), float(step)), "step": step}, wait=True)
        newest = ckpt.last_committed
    kept = sorted(e.id.step for e in layout.scan(open_storage(store_uri).list()) if e.committed)
    assert kept == [20, 21, 22, 50, 60, 70]  # the run's own newest 3 (10 went); the abandoned untouched
    with checkpointer(store_uri, env={"BROKER_RESUME_FROM": newest}) as ckpt:
        assert ckpt.restore().step == 22


def test_a_large_file_goes_up_in_parts_and_comes_back_intact(store_uri):
    # 11 MiB in 5 MiB parts (S3's minimum part size): a 3-part multipart upload on S3,
    # a 3-part composite upload on GCS.
    big = torch.arange(11 * 2**18, dtype=torch.float32)
    transfer = TransferOptions(part_size=5 * 2**20, concurrency=3)
    with checkpointer(store_uri, transfer=transfer) as ckpt:
        ckpt.save(1, {"big": big}, wait=True)
    with checkpointer(store_uri, transfer=transfer) as ckpt:
        assert torch.equal(ckpt.restore()["big"], big)
    names = open_storage(store_uri).list()
    assert not [n for n in names if ".part-" in n], "temporary parts must be cleaned up"
    if store_uri.startswith("s3://"):  # a multipart object's ETag ends in -<number of parts>
        import boto3

        bucket, prefix = store_uri[5:].split("/", 1)
        key = next(n for n in names if n.endswith("big.safetensors"))
        etag = boto3.client("s3").head_object(Bucket=bucket, Key=f"{prefix}/{key}")["ETag"]
        assert etag.strip('"').endswith("-3"), etag


def test_storage_contract(store_uri):
    storage = open_storage(store_uri)
    assert storage.list() == []  # an absent base is empty, not an error
    storage.write("d/a", b"one")
    storage.write("d/a", b"two")  # overwrite
    storage.write("d/b", b"")
    assert storage.read("d/a") == b"two" and storage.read("d/b") == b""
    assert storage.list() == ["d/a", "d/b"]
    with pytest.raises(FileNotFoundError):
        storage.read("d/nope")
    storage.delete(["d/a", "d/nope"])  # idempotent
    storage.delete(["d/a"])
    assert storage.list() == ["d/b"]
    assert storage.uri("d/b") == store_uri.rstrip("/") + "/d/b"


@pytest.mark.parametrize("kind", ["s3", "gcs"])
def test_a_bucket_that_does_not_exist_is_an_error_at_restore_not_a_fresh_start(make_uri, kind):
    uri = make_uri(kind).replace("ckpt-tests", "no-such-bucket-7")
    with Checkpointer(uri, env={}, handle_sigterm=False) as ckpt:
        with pytest.raises(OSError, match=r"no-such-bucket-7.*(does not exist|NoSuchBucket)"):
            ckpt.restore(default="fresh start")
        ckpt.save(1, {"x": 1})
        with pytest.raises(CheckpointError, match=r"no-such-bucket-7.*(does not exist|NoSuchBucket)"):
            ckpt.wait()


@pytest.mark.parametrize("kind", ["s3"], ids=["s3 endpoint comes from AWS_ENDPOINT_URL alone"])
def test_s3_endpoint_is_taken_from_the_environment(make_uri, kind):
    uri = make_uri(kind)
    assert os.environ["AWS_ENDPOINT_URL"].startswith("http://127.0.0.1:")
    save_steps(uri, [1])
    import boto3

    keys = boto3.client("s3", endpoint_url=os.environ["AWS_ENDPOINT_URL"]).list_objects_v2(
        Bucket=uri.split("/")[2], Prefix=uri.split("/", 3)[3])["Contents"]
    assert any(k["Key"].endswith("/COMMITTED") for k in keys)


def test_global_rng_round_trip(store_uri):
    import random

    import numpy as np

    with checkpointer(store_uri) as ckpt:
        ckpt.save(1, {"rng": GlobalRNG()}, wait=True)
        expected = (random.random(), np.random.rand(), torch.rand(1).item())
        random.random(), np.random.rand(), torch.rand(3)  # move on
        ckpt.restore(into={"rng": GlobalRNG()})
    assert (random.random(), np.random.rand(), torch.rand(1).item()) == expected


def test_a_checkpoint_from_a_newer_format_is_skipped_saying_to_upgrade(store_uri):
    from checkpoint.manifest import commit_marker

    uris = save_steps(store_uri, [10, 20])
    storage = open_storage(store_uri)
    newest = uris[-1].rsplit("/", 1)[1]
    manifest = storage.read(f"{newest}/manifest.json").replace(b'"format": 1', b'"format": 2')
    storage.write(f"{newest}/manifest.json", manifest)
    storage.write(f"{newest}/COMMITTED", commit_marker(manifest))  # committed whole by that newer version

    with checkpointer(store_uri) as ckpt, pytest.warns(CheckpointWarning) as caught:
        assert ckpt.restore().step == 10
    (message,) = [str(w.message) for w in caught]
    assert uris[-1] in message and "newer version" in message and "format 2" in message and "upgrade" in message

    storage.delete([f"{uris[0].rsplit('/', 1)[1]}/state.json"])  # now nothing this version can read is left
    with checkpointer(store_uri, keep_last=1) as ckpt, pytest.warns(CheckpointWarning):
        with pytest.raises(CheckpointError, match="no checkpoint under .* can be restored, and some are damaged"):
            ckpt.restore(default=FRESH)
        ckpt.save(1, {"w": torch.full((64,), 1.0), "step": 1}, wait=True)
    # the newer version's checkpoint is neither deleted (it is not damaged) nor counted: counted (keep_last=1),
    # it had the fresh run's own checkpoint deleted right after its commit
    assert [e.id.step for e in layout.scan(storage.list())] == [1, 10, 20]


def test_an_s3_part_size_under_5_mib_goes_up_in_5_mib_parts_as_boto3_sent_it(make_uri):
    """S3 refuses a part under 5 MiB but the last (EntityTooSmall): boto3's transfer manager raised a smaller
    part_size to 5 MiB, and the library's own multipart upload must too, or every large save fails."""
    import boto3

    uri = make_uri("s3")
    storage = open_storage(uri, transfer=TransferOptions(part_size=2**20, concurrency=2, retries=1))
    data = bytes(range(256)) * (11 * 2**12)  # 11 MiB
    storage.write("step-000000000001-1733011200123/00-w.safetensors", [memoryview(data)])
    assert storage.read("step-000000000001-1733011200123/00-w.safetensors") == data
    bucket, prefix = uri.split("://", 1)[1].split("/", 1)
    s3 = boto3.client("s3", endpoint_url=os.environ["AWS_ENDPOINT_URL"])
    etag = s3.head_object(Bucket=bucket, Key=f"{prefix}/step-000000000001-1733011200123/00-w.safetensors")["ETag"]
    assert etag.strip('"').endswith("-3"), etag  # 5 + 5 + 1 MiB


@pytest.mark.parametrize("size, wanted, parts", [
    pytest.param(400 * 2**30, 32 * 2**20, 10_000, id="400 GiB in 32 MiB parts → larger parts, at most 10,000"),
    pytest.param(5 * 2**40, 32 * 2**20, 10_000, id="5 TiB, S3's largest object → 10,000 parts of at most 5 GiB"),
    pytest.param(11 * 2**30, 8 * 2**30, 3, id="8 GiB parts → 5 GiB, S3's largest part"),
    pytest.param(3 * 2**20, 2**20, 1, id="1 MiB parts → 5 MiB, S3's smallest but the last"),
])
def test_s3_parts_keep_to_s3s_limits(size, wanted, parts):
    from checkpoint.storage import S3_MAX_PART, S3_MIN_PART, s3_part_size

    part = s3_part_size(size, wanted)
    assert S3_MIN_PART <= part <= S3_MAX_PART
    assert -(-size // part) <= parts


def test_a_failed_s3_multipart_upload_is_aborted_not_left_stored(make_uri):
    """A part that fails (here: the connection refused for the second part, every try): the parts already uploaded
    must not stay behind as an incomplete upload, stored (and billed) until a lifecycle rule ends it."""
    import boto3
    from botocore.exceptions import EndpointConnectionError

    uri = make_uri("s3")
    storage = open_storage(uri, transfer=TransferOptions(part_size=5 * 2**20, concurrency=2, retries=2,
                                                         retry_backoff_s=0))

    def refuse_part_2(params, **_):  # botocore's own hook, run before each UploadPart request is built
        if params.get("PartNumber") == 2:
            raise EndpointConnectionError(endpoint_url=os.environ["AWS_ENDPOINT_URL"])

    storage._client.meta.events.register("provide-client-params.s3.UploadPart", refuse_part_2)
    with pytest.raises(OSError, match="Could not connect"):
        storage.write("step-000000000001-1733011200123/00-w.safetensors", [memoryview(bytearray(11 * 2**20))])
    bucket, prefix = uri.split("://", 1)[1].split("/", 1)
    s3 = boto3.client("s3", endpoint_url=os.environ["AWS_ENDPOINT_URL"])
    assert s3.list_multipart_uploads(Bucket=bucket, Prefix=prefix).get("Uploads", []) == []
    assert storage.list() == []


def test_an_s3_read_timeout_is_retried_then_raised_as_oserror(make_uri):
    """botocore's timeouts and dropped connections carry ``response = None``, not a dict: the error's code was read
    off that None, so a timeout outlasting botocore's own retries escaped as AttributeError, skipping the library's
    retries and the OSError its callers catch."""
    from botocore.exceptions import ReadTimeoutError

    uri = make_uri("s3")
    storage = open_storage(uri, transfer=TransferOptions(retries=3, retry_backoff_s=0))
    calls = []

    def time_out(**_):  # botocore's own hook, before each PutObject request is built
        calls.append(1)
        if len(calls) < 3:
            raise ReadTimeoutError(endpoint_url=os.environ["AWS_ENDPOINT_URL"])

    storage._client.meta.events.register("provide-client-params.s3.PutObject", time_out)
    storage.write("step-000000000001-1733011200123/00-w.safetensors", [memoryview(b"weights")])
    assert len(calls) == 3 and storage.read("step-000000000001-1733011200123/00-w.safetensors") == b"weights"
    calls.clear()
    storage._client.meta.events.unregister("provide-client-params.s3.PutObject", time_out)

    def always_time_out(**_):
        calls.append(1)
        raise ReadTimeoutError(endpoint_url=os.environ["AWS_ENDPOINT_URL"])

    storage._client.meta.events.register("provide-client-params.s3.PutObject", always_time_out)
    with pytest.raises(OSError, match="Read timeout"):
        storage.write("step-000000000002-1733011200124/00-w.safetensors", [memoryview(b"weights")])
    assert len(calls) == 3  # every one of the library's tries
