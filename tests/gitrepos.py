"""A real git repository on this host for the tests of a task's ``workdir: {url, ref}`` (the local launcher clones
it): made with ``git init`` and commits, a tag and a branch, each commit's ``version.txt`` saying which it is."""

from __future__ import annotations

import os
import subprocess
from dataclasses import dataclass
from pathlib import Path

_ENV = {"GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@example.com", "GIT_COMMITTER_NAME": "t",
        "GIT_COMMITTER_EMAIL": "t@example.com", "GIT_CONFIG_NOSYSTEM": "1", "HOME": "/nonexistent"}


@dataclass(frozen=True)
class Repo:
    path: Path
    first: str  # the commit tagged v1 ("v1"), behind main's tip
    feature: str  # the tip of branch `feature` ("feature")
    main: str  # the tip of `main`, the default branch ("v2")

    @property
    def url(self) -> str:
        return f"file://{self.path}"


def _git(path: Path, *args: str) -> str:
    return subprocess.run(["git", *args], cwd=path, env={**os.environ, **_ENV}, check=True, capture_output=True,
                          text=True).stdout.strip()


def make_repo(path: Path) -> Repo:
    """main: v1 (tagged ``v1``) → v2; branch ``feature`` off v1: feature. Each commit has train.py printing its
    version.txt."""
    path.mkdir(parents=True)
    _git(path, "init", "-q", "-b", "main")
    (path / "train.py").write_text("print('trained at', open('version.txt').read().strip())\n")
    (path / "version.txt").write_text("v1\n")
    _git(path, "add", ".")
    _git(path, "commit", "-q", "-m", "v1")
    _git(path, "tag", "v1")
    first = _git(path, "rev-parse", "HEAD")
    _git(path, "checkout", "-q", "-b", "feature")
    (path / "version.txt").write_text("feature\n")
    _git(path, "commit", "-q", "-am", "feature")
    feature = _git(path, "rev-parse", "HEAD")
    _git(path, "checkout", "-q", "main")
    (path / "version.txt").write_text("v2\n")
    _git(path, "commit", "-q", "-am", "v2")
    return Repo(path, first, feature, _git(path, "rev-parse", "HEAD"))
