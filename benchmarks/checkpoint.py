"""Checkpoint benchmark: a ~250 MB PyTorch state dict against one moto S3 server.

    .venv/bin/python benchmarks/checkpoint.py [--repeats 3] [--mb 250]

Measured side by side in one run (medians of ``--repeats``), against the same endpoint:

* blocking — how long ``Checkpointer.save`` holds the training loop, vs a plain in-memory
  clone of the state dict (target ≤ 1.5×) and vs a synchronous ``torch.save`` to the same
  S3 URL (target ≤ 0.1×);
* upload — MB/s of a whole save (encode, hash, multipart upload, manifest, commit) vs a raw
  boto3 multipart upload of the same bytes (target ≥ 0.9×);
* restore — ``Checkpointer.restore`` (list, download, sha256-verify, decode) vs a raw boto3
  download of the same bytes with ``download_fileobj`` (target ≤ 1.2×); a bare single-stream
  ``get_object().read()`` is shown too, for reference.

* memory (``--memory-mb``, default 256 and 1024) — peak RSS a restore adds above the process before it (the
  kernel's high-water mark, reset just before), each in a fresh child process holding a model of that size: a
  ``restore(into=...)`` into the model and a plain ``restore()``, from local files and from the moto server, vs
  ``torch.load`` of the same state dict from a local file into the model (``load_state_dict``), and the
  checkpoint's size.

The moto server runs as its own process on 127.0.0.1; nothing leaves the machine.
"""

from __future__ import annotations

import argparse
import io
import os
import socket
import statistics
import subprocess
import sys
import time
import uuid
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

PART = 32 * 2**20
CONCURRENCY = 8
BUCKET = "bench"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_moto() -> tuple[subprocess.Popen, str]:
    port = free_port()
    proc = subprocess.Popen([sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
            return proc, f"http://127.0.0.1:{port}"
        except OSError:
            time.sleep(0.1)
    proc.kill()
    raise RuntimeError("moto server did not start")


def timed(fn) -> float:
    t = time.perf_counter()
    fn()
    return time.perf_counter() - t


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--mb", type=int, default=250, help="approximate state dict size")
    p.add_argument("--memory-mb", type=int, nargs="*", default=[256, 1024],
                   help="state dict sizes (MiB) whose restore memory is measured (none: skip)")
    args = p.parse_args()

    moto, endpoint = start_moto()
    os.environ.update(AWS_ENDPOINT_URL=endpoint, AWS_ACCESS_KEY_ID="bench", AWS_SECRET_ACCESS_KEY="bench",
                      AWS_DEFAULT_REGION="us-east-1", AWS_EC2_METADATA_DISABLED="true")
    try:
        run(args, endpoint)
        return memory(args)
    finally:
        moto.kill()
        moto.wait()


def run(args, endpoint: str) -> int:
    import boto3
    import fsspec
    import torch
    from boto3.s3.transfer import TransferConfig
    from safetensors.torch import save as st_save

    from checkpoint import Checkpointer, TransferOptions

    torch.set_num_threads(1)
    s3 = boto3.client("s3", endpoint_url=endpoint)
    s3.create_bucket(Bucket=BUCKET)
    transfer_cfg = TransferConfig(multipart_threshold=PART, multipart_chunksize=PART, max_concurrency=CONCURRENCY)

    width = 2048
    layers = max(1, round(args.mb * 2**20 / (width * width * 4)))
    model = torch.nn.Sequential(*[torch.nn.Linear(width, width) for _ in range(layers)])
    sd = model.state_dict()
    nbytes = sum(t.numel() * t.element_size() for t in sd.values())
    payload = st_save({k: v.contiguous() for k, v in sd.items()})
    print(f"state dict: {len(sd)} tensors, {nbytes / 2**20:.0f} MiB; moto S3 at {endpoint}; "
          f"parts {PART >> 20} MiB x {CONCURRENCY}", flush=True)

    base = f"s3://{BUCKET}/run-{uuid.uuid4().hex[:6]}"
    ckpt = Checkpointer(base, every_steps=1, keep_last=1, handle_sigterm=False, env={},
                        transfer=TransferOptions(part_size=PART, concurrency=CONCURRENCY))
    r: dict[str, list[float]] = {k: [] for k in
                                 ("clone", "save_blocking", "torch_save_sync", "save_total", "raw_upload",
                                  "restore", "raw_download", "raw_get")}
    fs = fsspec.filesystem("s3")
    for i in range(args.repeats):
        r["clone"].append(timed(lambda: {k: v.clone() for k, v in model.state_dict().items()}))

        t0 = time.perf_counter()
        ckpt.save(i + 1, {"model": model})
        r["save_blocking"].append(time.perf_counter() - t0)
        ckpt.wait()
        r["save_total"].append(ckpt.last_stats.commit_s)  # save() call → commit marker written

        key = f"raw/{uuid.uuid4().hex}"
        r["raw_upload"].append(timed(lambda: s3.upload_fileobj(io.BytesIO(payload), BUCKET, key, Config=transfer_cfg)))
        r["raw_download"].append(timed(lambda: s3.download_fileobj(BUCKET, key, io.BytesIO(), Config=transfer_cfg)))
        r["raw_get"].append(timed(lambda: s3.get_object(Bucket=BUCKET, Key=key)["Body"].read()))
        s3.delete_object(Bucket=BUCKET, Key=key)

        def sync_torch_save():
            with fs.open(f"{BUCKET}/sync/{uuid.uuid4().hex}.pt", "wb", block_size=PART) as f:
                torch.save(model.state_dict(), f)

        r["torch_save_sync"].append(timed(sync_torch_save))

        reader = Checkpointer(base, handle_sigterm=False, env={},
                              transfer=TransferOptions(part_size=PART, concurrency=CONCURRENCY))
        t0 = time.perf_counter()
        restored = reader.restore()
        r["restore"].append(time.perf_counter() - t0)
        assert restored.step == i + 1 and torch.equal(restored["model"]["0.weight"], sd["0.weight"])
        reader.close()
        print(f"  run {i + 1}: " + ", ".join(f"{k} {v[-1]:.3f}s" for k, v in r.items()), flush=True)
    ckpt.close()

    med = {k: statistics.median(v) for k, v in r.items()}
    mb = nbytes / 2**20
    rows = [
        ("save() blocks the loop", med["save_blocking"], "in-memory clone", med["clone"],
         med["save_blocking"] / med["clone"], "≤ 1.5×"),
        ("save() blocks the loop", med["save_blocking"], "sync torch.save → S3", med["torch_save_sync"],
         med["save_blocking"] / med["torch_save_sync"], "≤ 0.1×"),
        ("upload throughput (MiB/s)", mb / med["save_total"], "raw boto3 multipart", mb / med["raw_upload"],
         med["raw_upload"] / med["save_total"], "≥ 0.9×"),
        ("restore (verify + decode)", med["restore"], "raw boto3 download", med["raw_download"],
         med["restore"] / med["raw_download"], "≤ 1.2×"),
        ("restore (verify + decode)", med["restore"], "raw single GET (no verify)", med["raw_get"],
         med["restore"] / med["raw_get"], "(for reference)"),
    ]
    print()
    print(f"| measure ({args.repeats} runs, medians) | checkpoint | baseline | baseline value | ratio | target |")
    print("|---|---|---|---|---|---|")
    for name, ours, base_name, theirs, ratio, target in rows:
        unit = "" if "MiB/s" in name else " s"
        print(f"| {name} | {ours:.3f}{unit} | {base_name} | {theirs:.3f}{unit} | {ratio:.2f}× | {target} |")
    return 0


MEMORY_CHILD = """
import sys, torch
from checkpoint import Checkpointer

def rss(field):
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) * 1024 for line in f if line.startswith(field + ":"))

mode, uri, mib = sys.argv[1], sys.argv[2], int(sys.argv[3])
torch.manual_seed(0)
model = torch.nn.Sequential(*[torch.nn.Linear(2048, 2048, bias=False) for _ in range(mib // 16)])
if mode == "save":
    if not uri.startswith("s3://"):
        torch.save(model.state_dict(), uri + ".pt")
    ckpt = Checkpointer(uri, every_steps=1, handle_sigterm=False, env={})
    ckpt.save(1, {"model": model}, wait=True)
    ckpt.close()
    raise SystemExit
ckpt = Checkpointer(uri, handle_sigterm=False, env={})
with open("/proc/self/clear_refs", "w") as f:
    f.write("5")
before = rss("VmRSS")
if mode == "into":
    restored = ckpt.restore(into={"model": model})
elif mode == "plain":
    restored = ckpt.restore()
else:
    model.load_state_dict(torch.load(uri + ".pt", weights_only=True))
print(rss("VmHWM") - before)
ckpt.close()
"""


def memory(args) -> int:
    """Peak RSS a restore adds, each in a fresh child process (see the module's docstring)."""
    import tempfile

    if not args.memory_mb:
        return 0
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for mib in args.memory_mb:
            where = {"local files": f"{tmp}/run-{mib}", "moto S3": f"s3://{BUCKET}/mem-{uuid.uuid4().hex[:6]}"}
            peaks: dict[tuple[str, str], list[int]] = {}
            for store, uri in where.items():
                child(["save", uri, str(mib)], tmp)
                for _ in range(args.repeats):
                    for mode in ("into", "plain") + (("torch.load",) if store == "local files" else ()):
                        peak = int(child([mode, uri, str(mib)], tmp).split()[-1])
                        peaks.setdefault((store, mode), []).append(peak)
            for (store, mode), values in peaks.items():
                peak = statistics.median(values)
                rows.append((mib, store, mode, peak / 2**20, peak / (mib * 2**20)))
                print(f"  {mib} MiB, {store}, {mode}: +{peak / 2**20:.0f} MiB "
                      f"({', '.join(f'{v / 2**20:.0f}' for v in values)})", flush=True)
    names = {"into": "`restore(into=...)`", "plain": "`restore()`",
             "torch.load": "`torch.load` of a `.pt` + `load_state_dict`"}
    print()
    print(f"| state dict | store | load | peak RSS above the process before it ({args.repeats} runs, median) "
          f"| × the state dict |")
    print("|---|---|---|---|---|")
    for mib, store, mode, peak, ratio in rows:
        print(f"| {mib} MiB | {store} | {names[mode]} | +{peak:.0f} MiB | {ratio:.2f}× |")
    return 0


def child(argv: list[str], tmp: str) -> str:
    env = dict(os.environ, PYTHONPATH=str(Path(__file__).resolve().parents[1]))
    out = subprocess.run([sys.executable, "-c", MEMORY_CHILD, *argv], env=env, capture_output=True, text=True,
                         timeout=900)
    if out.returncode:
        raise RuntimeError(f"{argv}: {out.stderr[-2000:]}")
    return out.stdout


if __name__ == "__main__":
    raise SystemExit(main())
