"""Where uploaded workdir packs live: the object store the checkpoints use, read by every broker process.

A pack is stored once, under its SHA-256, at ``<checkpoint_root>/workdirs/sha256/<hex>.tar.gz`` — on
S3 or GCS in a deployment (every API process and engine reads the same bucket), on the local disk
in the embedded default. (Job ids start with ``j-``, so no job's checkpoint folder is ``workdirs``.)
At launch the engine fetches the pack once per host into ``<data dir>/workdirs/packs/``, checks its
digest, and unpacks a fresh copy per attempt into ``<data dir>/workdirs/attempts/<attempt id>/``:
the directory the launcher runs the job from (the local launcher) or syncs to the cluster (SkyPilot).

The only broker module that imports ``fsspec`` (``checkpoint/storage.py`` is the checkpoint
library's, which the broker does not import); S3 goes through s3fs, which reads the usual AWS
variables (``AWS_ENDPOINT_URL`` for an S3-compatible store).
"""

from __future__ import annotations

import hashlib
import logging
import os
import shutil
import uuid
from pathlib import Path

import fsspec

from broker.config import Settings
from broker.workdir import UNPACK_RATIO, PackError, unpack

log = logging.getLogger(__name__)


class PackMissing(FileNotFoundError):
    """No pack with that digest in the store."""


class WorkdirStore:
    def __init__(self, settings: Settings):
        self.settings = settings
        self.root = f"{settings.checkpoint_root.rstrip('/')}/workdirs/sha256"
        self._fs = None

    @property
    def fs(self):
        if self._fs is None:
            self._fs, self._root_path = fsspec.core.url_to_fs(self.root)
        return self._fs

    def uri(self, hex_digest: str) -> str:
        return f"{self.root}/{hex_digest}.tar.gz"

    def _path(self, hex_digest: str) -> str:
        self.fs  # noqa: B018 (opens it)
        return f"{self._root_path}/{hex_digest}.tar.gz"

    def size(self, hex_digest: str) -> int | None:
        """The stored pack's size in bytes, or ``None`` when there is none. ``OSError`` when the store fails."""
        try:
            self.fs.invalidate_cache()
            return int(self.fs.info(self._path(hex_digest))["size"])
        except FileNotFoundError:
            return None

    def put(self, hex_digest: str, local: Path) -> None:
        """Store the (checked) pack at ``local``. On a local disk it is written to a temporary name and
        renamed, so another process never reads half a pack; an object store's PUT is whole already."""
        final = self._path(hex_digest)
        protocols = self.fs.protocol if isinstance(self.fs.protocol, (tuple, list)) else (self.fs.protocol,)
        if "file" in protocols:
            os.makedirs(os.path.dirname(final), exist_ok=True)
            tmp = f"{final}.tmp-{uuid.uuid4().hex}"
            shutil.copyfile(local, tmp)
            with open(tmp, "rb") as fh:
                os.fsync(fh.fileno())
            os.replace(tmp, final)
            return
        self.fs.put_file(str(local), final)

    def fetch(self, hex_digest: str, local: Path) -> None:
        """Copy the pack to ``local`` (through a temporary name), checking its digest on the way."""
        tmp = local.with_name(f"{local.name}.tmp-{uuid.uuid4().hex}")
        local.parent.mkdir(parents=True, exist_ok=True)
        try:
            sha = hashlib.sha256()
            try:
                with self.fs.open(self._path(hex_digest), "rb") as src, open(tmp, "wb") as dst:
                    while chunk := src.read(1 << 20):
                        sha.update(chunk)
                        dst.write(chunk)
                    dst.flush()
                    os.fsync(dst.fileno())  # whole on disk before it takes the name a launch trusts
            except FileNotFoundError:
                raise PackMissing(f"no workdir pack sha256:{hex_digest} at {self.uri(hex_digest)}") from None
            if sha.hexdigest() != hex_digest:
                raise PackError(f"the stored pack {self.uri(hex_digest)} is damaged: its SHA-256 is {sha.hexdigest()}")
            os.replace(tmp, local)
        finally:
            tmp.unlink(missing_ok=True)

    # -- at launch ------------------------------------------------------------------------------

    def attempt_dir(self, hex_digest: str, attempt_id: str) -> Path:
        """The attempt's own unpacked copy of the pack (made once: a launch done again, after a broker
        restart, finds the directory the job already runs in). Raises :class:`PackMissing`,
        :class:`PackError` or ``OSError``."""
        base = self.settings.data_dir / "workdirs"
        target = base / "attempts" / attempt_id
        if target.is_dir():
            return target
        cached = base / "packs" / f"{hex_digest}.tar.gz"
        fetched = not cached.is_file()
        if fetched:
            self.fetch(hex_digest, cached)
        staging = base / "attempts" / f".{attempt_id}.tmp-{uuid.uuid4().hex}"
        staging.parent.mkdir(parents=True, exist_ok=True)
        limit = self.settings.max_workdir_bytes * UNPACK_RATIO
        try:
            unpack(cached, staging, max_bytes=limit)
        except PackError:
            if fetched:
                raise  # the store's copy, checked against its digest just now: the pack itself is bad
            # this host's copy went bad after it was checked (cut short by a crash or a full disk): the
            # host's fault, not the job's — the store's copy is fetched again rather than failing the job
            log.warning("workdir pack %s: this host's copy %s is damaged; fetching it again", hex_digest, cached)
            cached.unlink(missing_ok=True)
            self.fetch(hex_digest, cached)
            unpack(cached, staging, max_bytes=limit)
        try:
            os.rename(staging, target)
        except OSError:
            shutil.rmtree(staging, ignore_errors=True)
            if not target.is_dir():
                raise
        return target
