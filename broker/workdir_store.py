"""Where uploaded workdir packs live: the object store the checkpoints use, read by every broker process.

A pack is stored once, under its SHA-256, at ``<checkpoint_root>/workdirs/sha256/<hex>.tar.gz`` — on
S3 or GCS in a deployment (every API process and engine reads the same bucket), on the local disk
in the embedded default. (Job ids start with ``j-``, so no job's checkpoint folder is ``workdirs``.)
At launch the engine fetches the pack once per host into ``<data dir>/workdirs/packs/``, checks its
digest, and unpacks a fresh copy per attempt into ``<data dir>/workdirs/attempts/<attempt id>/``:
the directory the launcher runs the job from (the local launcher) or syncs to the cluster (SkyPilot).
A job's uploaded ``file_mounts`` sources (``broker.file_mounts``: packs in the same store) are unpacked
likewise, each into ``<data dir>/workdirs/mounts/<attempt id>/<n>/`` (a single file is given to the launcher
as ``<n>.file`` beside it, never under the submitter's name), and go with the attempt's workdir.

Nothing here is kept for ever (docs/deploy.md, "Workdir packs: what is kept, and for how long"):

* An attempt's directory is removed once the attempt is final (:meth:`WorkdirStore.remove_attempt_dir`),
  and the engine's sweep (:meth:`WorkdirStore.sweep_local`) removes those of attempts that are final
  or unknown to the store — a broker stopped before it could remove one leaves it for the next
  sweep, not for ever. A directory some process of this host still has as its working directory
  (a job's process that outlived its runner) is kept until that process is gone.
* The host's copy of a pack is removed when no launch has used it for ``PACK_CACHE_SECONDS``.
* A pack in the object store that no job refers to any more (the engine says which are referred
  to: jobs not final, and final ones younger than ``workdir_retention_seconds``) is collected in
  two steps, ``workdir_grace_seconds`` apart (:meth:`WorkdirStore.collect`): set aside under
  ``<root>/workdirs/trash/``, then removed if still nobody refers to it. Any read of a pack set
  aside (a submit or resume naming it, a launch, ``GET /v1/workdirs/...``) puts it back first. This
  is what makes a collection safe with several brokers and against a submit racing it: a submit
  that found the pack just before it was set aside still finds it at launch, and the second step
  sees that submit's job; a submit that comes after the removal is refused (422: upload it again),
  never accepted with its code gone. (That holds while a submit takes less than the grace period
  between looking at the pack and storing its job: milliseconds against a day.)
* What an upload or a copy cut short leaves in the object store (a broker killed while it wrote
  ``<hex>.tar.gz.tmp-<id>``, on a local disk: an object store's PUT or copy makes no object unless whole) is
  removed by the collection once it is ``workdir_grace_seconds`` old, and at least ``STALE_SECONDS``: a
  write still under way moves its file's time with each block, so none that old is being written. On
  the host, a fetch cut short (``packs/<hex>.tar.gz.tmp-<id>``) goes with the sweep, as any copy unused
  for ``PACK_CACHE_SECONDS``.

The only broker module that imports ``fsspec`` (``checkpoint/storage.py`` is the checkpoint
library's, which the broker does not import); S3 goes through s3fs, which reads the usual AWS
variables (``AWS_ENDPOINT_URL`` for an S3-compatible store).
"""

from __future__ import annotations

import hashlib
import logging
import os
import re
import shutil
import time
import uuid
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path

import fsspec

from broker.config import Settings
from broker.workdir import UNPACK_RATIO, PackError, unpack

log = logging.getLogger("broker.workdirs")

PACK_CACHE_SECONDS = 3600.0
"""A host's copy of a pack (``<data dir>/workdirs/packs/``) unused by any launch this long is removed."""
STALE_SECONDS = 3600.0
"""A half-made file or directory (a fetch or unpack cut short by a crash) this old is removed."""
FOLDERS = ("attempts", "mounts", "jobs")
"""Where an attempt's own folders are, under ``<data dir>/workdirs``: ``attempts/<attempt>`` its workdir's copy,
``mounts/<attempt>/<n>`` its file_mounts' (in the order of their destinations), ``jobs/<attempt>`` the folder a job
run as another user is given (``launchers.run_as``: its notice file and, without a workdir, its working directory)
and, for any job on this host without a workdir, its working directory (``jobs/<attempt>/work``) — for a job whose
workdir is a git repository, its clone there (``launchers.local_runner``)."""
_PACK_NAME = re.compile(r"^([0-9a-f]{64})\.tar\.gz$")
_LEFTOVER_NAME = re.compile(r"^[0-9a-f]{64}\.tar\.gz\.tmp-[0-9a-f]{32}$")  # what put or _copy wrote before its rename


class PackMissing(FileNotFoundError):
    """No pack with that digest in the store."""


def storage_schemes() -> frozenset[str]:
    """Every storage scheme fsspec knows (``s3``, ``gs``, ``file``, ...), whether or not its package is installed
    here: a job's own environment may have it (:func:`broker.spec.checkpoint_uri_problem` refuses the others)."""
    return frozenset(fsspec.available_protocols())


@dataclass
class Collected:
    """What one :meth:`WorkdirStore.collect` did itself, by digest (hex): a step another broker's collection was
    first to take is not counted here."""

    set_aside: list[str] = field(default_factory=list)  # no job refers to it: moved to the trash
    removed: list[str] = field(default_factory=list)  # in the trash for the grace period, still unreferred: gone
    put_back: list[str] = field(default_factory=list)  # in the trash, but a job refers to it again: restored
    leftovers: list[str] = field(default_factory=list)  # temporary copies a write cut short left (names): removed


def _mtime(info: dict) -> float | None:
    """When an object was written, from an ``fs.ls`` entry: local disk (``mtime``), S3 (``LastModified``),
    GCS (``updated``)."""
    for key in ("mtime", "LastModified", "updated", "last_modified"):
        value = info.get(key)
        if value is None:
            continue
        if isinstance(value, (int, float)):
            return float(value)
        if isinstance(value, datetime):
            return value.timestamp()
        try:
            return datetime.fromisoformat(str(value).replace("Z", "+00:00")).timestamp()
        except ValueError:
            continue
    return None


def in_use_dirs() -> set[Path]:
    """The working directories of this host's processes (those this user may see; none where there is no
    ``/proc``): a directory a process still runs in is not removed under it."""
    out: set[Path] = set()
    try:
        entries = os.listdir("/proc")
    except OSError:
        return out
    for pid in entries:
        if not pid.isdigit():
            continue
        try:
            out.add(Path(os.readlink(f"/proc/{pid}/cwd")))
        except OSError:
            continue
    return out


def _busy(directory: Path, cwds: set[Path]) -> bool:
    return any(c == directory or c.is_relative_to(directory) for c in cwds)


def _copy_whole(src, dst: str) -> None:
    """Copy a file on the local disk to ``dst`` whole or not at all: written to a temporary name beside it,
    synced, then renamed, so another process never reads half of it. On a failure (a full disk) nothing
    half written stays; what a killed broker left (``<dst>.tmp-<hex>``) is the collection's to remove."""
    os.makedirs(os.path.dirname(dst), exist_ok=True)
    tmp = f"{dst}.tmp-{uuid.uuid4().hex}"
    try:
        shutil.copyfile(src, tmp)
        with open(tmp, "rb") as fh:
            os.fsync(fh.fileno())
        os.replace(tmp, dst)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)


class WorkdirStore:
    def __init__(self, settings: Settings):
        self.settings = settings
        self.root = f"{settings.checkpoint_root.rstrip('/')}/workdirs/sha256"
        self.trash = f"{settings.checkpoint_root.rstrip('/')}/workdirs/trash/sha256"
        self.local = settings.data_dir / "workdirs"
        self._fs = None

    @property
    def fs(self):
        if self._fs is None:
            self._fs, self._root_path = fsspec.core.url_to_fs(self.root)
            self._trash_path = fsspec.core.url_to_fs(self.trash)[1]
        return self._fs

    def _on_disk(self) -> bool:
        protocols = self.fs.protocol if isinstance(self.fs.protocol, (tuple, list)) else (self.fs.protocol,)
        return "file" in protocols

    def uri(self, hex_digest: str) -> str:
        return f"{self.root}/{hex_digest}.tar.gz"

    def _path(self, hex_digest: str) -> str:
        self.fs  # noqa: B018 (opens it)
        return f"{self._root_path}/{hex_digest}.tar.gz"

    def _trashed(self, hex_digest: str) -> str:
        self.fs  # noqa: B018 (opens it)
        return f"{self._trash_path}/{hex_digest}.tar.gz"

    def _info(self, path: str) -> dict | None:
        try:
            self.fs.invalidate_cache()
            return self.fs.info(path)
        except FileNotFoundError:
            return None

    def size(self, hex_digest: str) -> int | None:
        """The stored pack's size in bytes, or ``None`` when there is none; a pack the collector set aside
        is put back first (someone wants it). ``OSError`` when the store fails."""
        info = self._info(self._path(hex_digest))
        if info is None and self._put_back(hex_digest):
            info = self._info(self._path(hex_digest))
        return int(info["size"]) if info is not None else None

    def _copy(self, src: str, dst: str) -> None:
        """Copy one stored object to another name, whole or not at all (a reader never sees half of it): on
        a local disk through a temporary name and a rename, in an object store by its own copy. The
        copy is new: its time is now (the collector's clock for the trash). ``FileNotFoundError``
        when ``src`` is not there."""
        if self._on_disk():
            _copy_whole(src, dst)
            return
        self.fs.copy(src, dst)

    def _remove(self, path: str) -> bool:
        """Remove a stored object; whether this call removed it (False: another broker's collector was first,
        and counts it). Exact on a local disk; an object store's DELETE succeeds whether or not the object is
        there, so it is looked at just before: two brokers removing it within the same moment may both count it."""
        if not self._on_disk() and self._info(path) is None:
            return False
        try:
            self.fs.rm_file(path)
        except FileNotFoundError:
            return False
        return True

    def _restore(self, hex_digest: str) -> bool | None:
        """Restore a pack from the trash (copy back, then remove the trash's copy): True when this call did,
        False when it is back all the same (another broker was first), None when it is gone."""
        try:
            self._copy(self._trashed(hex_digest), self._path(hex_digest))
        except FileNotFoundError:
            return False if self._info(self._path(hex_digest)) is not None else None
        if not self._remove(self._trashed(hex_digest)):
            return False
        log.info("workdir pack sha256:%s put back from the trash: it is wanted again", hex_digest)
        return True

    def _put_back(self, hex_digest: str) -> bool:
        """Restore a pack from the trash if it is there; whether the pack is in the store now."""
        return self._restore(hex_digest) is not None

    def _listing(self, directory: str) -> tuple[dict[str, float], dict[str, float]]:
        """Each stored pack in ``directory`` (its digest, hex) and each leftover of a write cut short (its path),
        with when it was written."""
        try:
            self.fs.invalidate_cache()
            entries = self.fs.ls(directory, detail=True)
        except FileNotFoundError:
            return {}, {}
        packs, leftovers = {}, {}
        for e in entries:
            name = str(e.get("name", "")).rstrip("/")
            written = _mtime(e)
            if e.get("type") == "directory" or written is None:
                continue
            if m := _PACK_NAME.match(os.path.basename(name)):
                packs[m.group(1)] = written
            elif _LEFTOVER_NAME.match(os.path.basename(name)):
                leftovers[f"{directory}/{os.path.basename(name)}"] = written
        return packs, leftovers

    def _remove_leftovers(self, leftovers: dict[str, float], *, now: float, grace: float, done: Collected) -> None:
        """Remove the temporary copies that writes cut short left, once nobody can be writing them: older than
        ``grace`` and ``STALE_SECONDS`` (a write under way moves its file's time with each block)."""
        for path, written in sorted(leftovers.items()):
            if now - written >= max(grace, STALE_SECONDS) and self._remove(path):
                done.leftovers.append(os.path.basename(path))

    def collect(self, referenced: set[str], *, now: float, grace: float) -> Collected:
        """One collection of the object store's packs (see the module's docstring): a pack in the trash
        for ``grace`` seconds or more is removed if ``referenced`` (digests, hex) still lacks it, else put
        back; then a stored pack older than ``grace`` that ``referenced`` lacks goes to the trash.
        ``referenced`` must have been read from the job store just before. Several brokers may
        collect at once: each step is a copy or a removal that a second one repeats harmlessly.
        ``OSError`` when the store fails (what was done stays done; the next collection goes on)."""
        self.fs  # noqa: B018 (opens it)
        done = Collected()
        trashed, leftovers = self._listing(self._trash_path)
        for hex_digest, moved in sorted(trashed.items()):
            if hex_digest in referenced:
                if self._restore(hex_digest):
                    done.put_back.append(hex_digest)
            elif now - moved >= grace:
                info = self._info(self._trashed(hex_digest))  # looked at again: set aside anew since the listing?
                if info is None or now - (_mtime(info) or now) < grace:
                    continue
                if self._remove(self._trashed(hex_digest)):  # else another broker's collector removed it, and counts it
                    done.removed.append(hex_digest)
        self._remove_leftovers(leftovers, now=now, grace=grace, done=done)
        stored, leftovers = self._listing(self._root_path)
        for hex_digest, written in sorted(stored.items()):
            if hex_digest in referenced or now - written < grace:
                continue
            try:
                self._copy(self._path(hex_digest), self._trashed(hex_digest))
            except FileNotFoundError:
                continue  # set aside by another broker's collector
            if self._remove(self._path(hex_digest)):  # else another broker's collector set it aside too, and counts it
                done.set_aside.append(hex_digest)
        self._remove_leftovers(leftovers, now=now, grace=grace, done=done)
        if done.set_aside or done.removed or done.put_back or done.leftovers:  # what this broker did: others log theirs
            log.info("workdir packs: %d set aside (no job refers to them), %d removed, %d put back; "
                     "%d leftovers of writes cut short removed",
                     len(done.set_aside), len(done.removed), len(done.put_back), len(done.leftovers))
        return done

    def put(self, hex_digest: str, local: Path) -> None:
        """Store the (checked) pack at ``local``. On a local disk it is written to a temporary name and
        renamed, so another process never reads half a pack; an object store's PUT is whole already."""
        final = self._path(hex_digest)
        if self._on_disk():
            _copy_whole(local, final)
            return
        self.fs.put_file(str(local), final)

    def fetch(self, hex_digest: str, local: Path) -> None:
        """Copy the pack to ``local`` (through a temporary name), checking its digest on the way."""
        tmp = local.with_name(f"{local.name}.tmp-{uuid.uuid4().hex}")
        local.parent.mkdir(parents=True, exist_ok=True)
        try:
            sha = hashlib.sha256()
            for last in (False, True):
                try:
                    with self.fs.open(self._path(hex_digest), "rb") as src, open(tmp, "wb") as dst:
                        while chunk := src.read(1 << 20):
                            sha.update(chunk)
                            dst.write(chunk)
                        dst.flush()
                        os.fsync(dst.fileno())  # whole on disk before it takes the name a launch trusts
                    break
                except FileNotFoundError:
                    if last or not self._put_back(hex_digest):  # set aside by the collector: wanted after all
                        raise PackMissing(f"no workdir pack sha256:{hex_digest} at {self.uri(hex_digest)}") from None
            if sha.hexdigest() != hex_digest:
                raise PackError(f"the stored pack {self.uri(hex_digest)} is damaged: its SHA-256 is {sha.hexdigest()}")
            os.replace(tmp, local)
        finally:
            tmp.unlink(missing_ok=True)

    # -- at launch ------------------------------------------------------------------------------

    def ready_dir(self, attempt_id: str) -> Path | None:
        """The attempt's unpacked copy, if it has been made."""
        target = self.local / "attempts" / attempt_id
        return target if target.is_dir() else None

    def ready_mount(self, attempt_id: str, index: int) -> Path | None:
        """The attempt's unpacked copy of its ``index``-th uploaded file_mounts source, if it has been made."""
        target = self.local / "mounts" / attempt_id / str(index)
        return target if target.is_dir() else None

    def ready_mount_file(self, attempt_id: str, index: int) -> Path | None:
        """The file of the attempt's ``index``-th uploaded file_mounts source that is a single file, under the
        broker's own name (:meth:`mount_file`), if it has been made."""
        target = self.local / "mounts" / attempt_id / f"{index}.file"
        return target if target.is_file() else None

    def has_local(self, attempt_id: str) -> bool:
        """Whether this host holds an unpacked copy for the attempt: its workdir, or its file_mounts."""
        return any((self.local / folder / attempt_id).is_dir() for folder in FOLDERS)

    def attempt_dir(self, hex_digest: str, attempt_id: str) -> Path:
        """The attempt's own unpacked copy of the pack (made once: a launch done again, after a broker
        restart, finds the directory the job already runs in). Raises :class:`PackMissing`,
        :class:`PackError` or ``OSError``."""
        return self._unpacked(hex_digest, self.local / "attempts" / attempt_id)

    def mount_dir(self, hex_digest: str, attempt_id: str, index: int) -> Path:
        """The attempt's own unpacked copy of its ``index``-th uploaded file_mounts source (in the order of their
        destinations), beside its workdir's copy (``mounts/<attempt>``, not in it: SkyPilot would sync it
        twice) and removed with it; made once, as :meth:`attempt_dir`."""
        return self._unpacked(hex_digest, self.local / "mounts" / attempt_id / str(index))

    def mount_file(self, hex_digest: str, attempt_id: str, index: int, name: str) -> Path:
        """The file ``name`` of the attempt's copy of its ``index``-th file_mounts pack (:meth:`mount_dir`), given to
        the launcher as ``mounts/<attempt>/<n>.file``: a name of the broker's, never the submitter's. SkyPilot
        rsyncs a local source through a shell, quoted with Python's ``repr`` — a name holding ``'`` goes in double
        quotes, where ``$(...)`` runs on the broker's host. A hard link (a copy where the disk has none), made
        once; raises :class:`PackError` when the pack holds no such file, else as :meth:`mount_dir`."""
        source = self.mount_dir(hex_digest, attempt_id, index) / name
        if not source.is_file():
            raise PackError(f"holds no file {name!r} (the pack of a single file holds that file)")
        target = self.local / "mounts" / attempt_id / f"{index}.file"
        try:
            os.link(source, target)
        except FileExistsError:
            pass  # made before (a launch done again) or by another broker on this data dir: the same file
        except OSError:  # no hard links on this disk: a copy, whole or not at all
            _copy_whole(source.resolve(), str(target))
        return target

    def _unpacked(self, hex_digest: str, target: Path) -> Path:
        base = self.local
        if target.is_dir():
            return target
        cached = base / "packs" / f"{hex_digest}.tar.gz"
        staging = target.parent / f".{target.name}.tmp-{uuid.uuid4().hex}"
        staging.parent.mkdir(parents=True, exist_ok=True)
        limit = self.settings.max_workdir_bytes * UNPACK_RATIO
        for last in (False, True):
            fetched = not cached.is_file()
            if fetched:
                self.fetch(hex_digest, cached)
            try:  # held open while unpacked: the sweep may remove the host's copy, never from under a reader
                fh = open(cached, "rb")
            except FileNotFoundError:
                if last:
                    raise
                continue  # the sweep removed it between the two looks: fetched again
            with fh:
                os.utime(fh.fileno())  # used now: the sweep keeps it for PACK_CACHE_SECONDS more
                try:
                    unpack(fh, staging, max_bytes=limit)
                except PackError:
                    if fetched or last:
                        raise  # the store's copy, checked against its digest just now: the pack itself is bad
                    # this host's copy went bad after it was checked (cut short by a crash or a full disk): the
                    # host's fault, not the job's — the store's copy is fetched again rather than failing the job
                    log.warning("workdir pack %s: this host's copy %s is damaged; fetching it again", hex_digest, cached)
                    cached.unlink(missing_ok=True)
                    shutil.rmtree(staging, ignore_errors=True)
                    continue
            break
        try:
            os.rename(staging, target)
        except OSError:
            shutil.rmtree(staging, ignore_errors=True)
            if not target.is_dir():
                raise
        return target

    # -- when attempts end, and the sweep -----------------------------------------------------------

    def remove_attempt_dir(self, attempt_id: str, cwds: set[Path] | None = None) -> bool:
        """Remove an ended attempt's directories — its workdir's copy and its file_mounts' — (each renamed
        first, so that no half-removed directory is ever taken for a whole one); whether this call removed
        them, so that brokers sharing the data dir count each removal once: False when they were gone already
        (another broker removed them, and counts it) or are kept while a process of this host still runs in
        one of them (``cwds``: :func:`in_use_dirs`, looked up when not given)."""
        targets = [t for t in (self.local / folder / attempt_id for folder in FOLDERS) if t.is_dir()]
        if not targets:
            return False
        cwds = in_use_dirs() if cwds is None else cwds
        if any(_busy(t, cwds) for t in targets):  # its mounts too: what still runs may read them
            log.info("workdir of %s kept: a process of this host still runs in it", attempt_id)
            return False
        removed = False
        for target in targets:
            doomed = target.with_name(f".{attempt_id}.rm-{uuid.uuid4().hex}")
            try:
                os.rename(target, doomed)
            except FileNotFoundError:
                continue  # another broker on this data dir removed it, and counts it
            shutil.rmtree(doomed, ignore_errors=True)
            removed = True
        return removed

    def local_attempts(self) -> list[str]:
        """The attempt ids that have an unpacked directory (a workdir's or file_mounts') on this host."""
        found: set[str] = set()
        for folder in FOLDERS:
            try:
                found |= {e.name for e in os.scandir(self.local / folder)
                          if e.is_dir(follow_symlinks=False) and not e.name.startswith(".")}
            except FileNotFoundError:
                pass
        return sorted(found)

    def sweep_local(self, listed: list[str], keep: set[str], *, now: float | None = None) -> list[str]:
        """Remove the directories of the attempts ``listed`` (by :meth:`local_attempts`) that are not in
        ``keep`` (the attempts the store knows and that are not final, read *after* the listing: an
        attempt launched meanwhile is not in the listing, whatever the store said), what a crash left
        half made, and packs no launch used for ``PACK_CACHE_SECONDS``. Returns, and logs when there are
        any, the attempt ids whose directory this sweep removed (not one another broker on the data dir
        removed first: it counts it)."""
        now = time.time() if now is None else now
        cwds = in_use_dirs()
        removed = [a for a in listed if a not in keep and self.remove_attempt_dir(a, cwds)]
        for folder, age in [*((self.local / f, STALE_SECONDS) for f in FOLDERS),
                            (self.local / "packs", PACK_CACHE_SECONDS)]:
            try:
                entries = list(os.scandir(folder))
            except FileNotFoundError:
                continue
            for e in entries:
                half_made = e.name.startswith(".") or ".tmp-" in e.name
                if folder.name in FOLDERS and not half_made:
                    continue
                try:
                    old = now - e.stat(follow_symlinks=False).st_mtime >= (0 if ".rm-" in e.name else age)
                except FileNotFoundError:
                    continue
                if not old or _busy(Path(e.path), cwds):
                    continue
                if e.is_dir(follow_symlinks=False):
                    shutil.rmtree(e.path, ignore_errors=True)
                else:
                    Path(e.path).unlink(missing_ok=True)
        if removed:
            what = "the workdir of 1 ended attempt" if len(removed) == 1 else \
                f"the workdirs of {len(removed)} ended attempts"
            log.info("removed %s: %s", what, ", ".join(removed))
        return removed
