"""A pool's job run as another Unix user (``pools[].run_as``): what the runner, as root, gives that user.

A job run as the broker's user reads all the broker reads: its ``/proc/<pid>/environ``, the data dir
(``admin-token``, ``secrets-key``, the store, every attempt's run folder with its job token). Run as another user,
a job reaches only what is given to it here, each folder owned by the user, mode 0700:

* its working directory: the attempt's copy of the job's workdir (``<data>/workdirs/attempts/<attempt>``) or,
  without one, a fresh ``<data>/workdirs/jobs/<attempt>/work`` — never the run folder; a workdir given as a git
  repository is cloned there by the runner as the user, so the clone is the user's;
* the attempt's copies of its uploaded file_mounts (``<data>/workdirs/mounts/<attempt>``);
* ``<data>/workdirs/jobs/<attempt>/``, which holds the notice file (``BROKER_NOTICE_FILE``, written by the runner
  from the run folder with a rename, so a link the job puts there is replaced, not written through) and the
  ``notice.json.listeners/`` folder the checkpoint library registers in (:mod:`checkpoint.notice_file`);
* the folders the engine names (:class:`launchers.base.RunAs`): the job's checkpoint folder on this host.

The folders above them, from the data dir (or a ``file://`` checkpoint root) down, let others pass and no more
(0711); everything else in those folders is closed to others (group and others: no access) — the run folders,
the store, ``admin-token``, ``secrets-key``, the packs, other attempts' copies and other jobs' checkpoints —
since a name known is a name reachable. Folders above the data dir are the host's: config loading checks that
others may pass them (``broker/config.py``). Jobs that share one user can read each other's given folders.
"""

from __future__ import annotations

import os
import pwd
import signal
import stat
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

JOB_DIRS = "workdirs/jobs"
"""``<data>/workdirs/jobs/<attempt>``: the notice file and, without a workdir, the job's working directory. Removed
with the attempt's workdir copies once the attempt is final (``broker.workdir_store.FOLDERS``)."""
PASSAGE = 0o711


def job_folder(data_dir: str | Path, attempt_id: str) -> Path:
    """The folder an attempt run as another user is given: its notice file, and its working directory without a
    workdir."""
    return Path(data_dir) / JOB_DIRS / attempt_id


@dataclass(frozen=True)
class JobUser:
    name: str
    uid: int
    gid: int
    home: str

    @classmethod
    def named(cls, name: str) -> JobUser:
        entry = pwd.getpwnam(name)
        return cls(entry.pw_name, entry.pw_uid, entry.pw_gid, entry.pw_dir)

    def env(self, env: dict[str, str]) -> dict[str, str]:
        """The job's environment with this user's ``HOME``, ``USER`` and ``LOGNAME`` (not the broker's)."""
        return {**env, "HOME": self.home, "USER": self.name, "LOGNAME": self.name}

    def popen(self) -> dict:
        """``subprocess.Popen`` arguments that start the process as this user: its primary group, no others."""
        return {"user": self.uid, "group": self.gid, "extra_groups": []}


@contextmanager
def acting_as(user: JobUser | None) -> Iterator[None]:
    """File work done in ``user``'s name (its uid and primary group, no other groups) by the runner, which is
    root: the links of the job's file_mounts, made and removed at destinations the job's team names. As root,
    a link at ``/etc/ld.so.preload`` to the team's uploaded copy (which is the job user's) would hand the job
    the host; as the user, a link goes only where the user itself may write. Signals wait until it is done (a
    stop's handler writes the broker's files). ``None``: the runner's own user, nothing changes."""
    if user is None:
        yield
        return
    mask = signal.pthread_sigmask(signal.SIG_BLOCK, signal.valid_signals())
    euid, egid, groups = os.geteuid(), os.getegid(), os.getgroups()
    try:
        os.setgroups([])
        os.setegid(user.gid)
        os.seteuid(user.uid)
        yield
    finally:
        os.seteuid(euid)
        os.setegid(egid)
        os.setgroups(groups)
        signal.pthread_sigmask(signal.SIG_SETMASK, mask)


@dataclass(frozen=True)
class Prepared:
    cwd: str
    notice: Path


def prepare(request: dict, user: JobUser, task_workdir: str | None) -> Prepared:
    """Give ``user`` what the attempt of ``request`` (its ``run_as`` written by the launcher) needs, and
    close the rest of the way to others. Idempotent: a runner started again for the attempt does it again."""
    spec = request["run_as"]
    data = Path(spec["data_dir"])
    attempt = str(request["attempt_id"])
    job_dir = job_folder(data, attempt)
    given = [job_dir]
    copies = [data / "workdirs" / folder / attempt for folder in ("attempts", "mounts")]
    given += [c for c in copies if c.is_dir() and not c.is_symlink()]
    own = [Path(f) for f in spec.get("folders") or []]
    for folder in [job_dir, *own]:
        folder.mkdir(parents=True, exist_ok=True)
    (job_dir / "work").mkdir(exist_ok=True)
    for folder in given + own:
        give(folder, user)
    tops = [(data, g) for g in given] + [(data if _under(f, data) else f.parent, f) for f in own]
    open_ways(tops)
    # a workdir is the attempt's copy, given above, or a host path an admin named: left as it is
    cwd = task_workdir if task_workdir is not None and os.path.isdir(task_workdir) else str(job_dir / "work")
    return Prepared(cwd=cwd, notice=job_dir / "notice.json")


def _under(path: Path, folder: Path) -> bool:
    return path == folder or folder in path.parents


def give(folder: Path, user: JobUser) -> None:
    """Make ``folder`` and what is in it the user's (links themselves, never what they point at; a walk by
    file descriptors, so a folder swapped for a link meanwhile is not followed), the folder mode 0700. A
    folder the user already owns is taken as given (a checkpoint folder of many files is not walked again)."""
    if folder.is_symlink():
        raise OSError(f"{folder} is a link, not the folder it should be")
    if folder.lstat().st_uid != user.uid:
        for _root, dirs, files, root_fd in os.fwalk(folder, follow_symlinks=False):
            for name in dirs + files:
                os.chown(name, user.uid, user.gid, dir_fd=root_fd, follow_symlinks=False)
        os.chown(folder, user.uid, user.gid, follow_symlinks=False)
    os.chmod(folder, 0o700)


def open_ways(ways: list[tuple[Path, Path]]) -> None:
    """For each (top, given folder): let others pass (0711) every folder from ``top`` down to the given
    folder's parent, and close to others everything else in them (what is not on a way nor given)."""
    passage: set[Path] = set()
    given = {g for _, g in ways}
    for top, folder in ways:
        passage.update(p for p in folder.parents if _under(p, top))
    for folder in sorted(passage):
        os.chmod(folder, PASSAGE)
        for entry in os.scandir(folder):
            path = Path(entry.path)
            if path in passage or path in given or entry.is_symlink():
                continue
            mode = stat.S_IMODE(entry.stat(follow_symlinks=False).st_mode)
            if mode & 0o077:
                os.chmod(path, mode & ~0o077)
