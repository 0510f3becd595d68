"""A task's workdir given as a git repository, ``workdir: {url: ..., ref: ...}``, cloned on this host. Pure.

SkyPilot clones such a workdir into ``~/sky_workdir`` on every node and runs ``setup`` and ``run`` there: a branch
or a tag as a shallow clone of it, a commit hash (4 to 40 hex digits that name no branch nor tag) as a full clone
checked out at it, no ``ref`` as the default branch; ``GIT_TOKEN`` authenticates an ``https`` URL and
``GIT_SSH_KEY_PATH`` names the key for an ``ssh`` one (``sky/utils/git.py``, ``sky/utils/git_clone.sh``). The local
runner does the same for each attempt, in the attempt's own folder (:mod:`launchers.local_runner`): this module says
what to run and how to read what git answers; the runner runs it, bounded by :data:`CLONE_TIMEOUT_S`.

What git prints goes to the job's log, so a credential never does: a token given in the URL
(``https://<token>@host/...``) or as ``GIT_TOKEN`` is shown as ``***`` (:func:`redact`), and ``GIT_TOKEN`` reaches git
through a credential helper reading the environment — not the URL, which the clone would keep in ``.git/config``.
"""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass

CLONE_TIMEOUT_S = 600.0
"""The most a clone may take, all its git commands together: past it the clone is stopped and the attempt fails
saying so (a host without network, or a server that never answers, would otherwise hold it forever)."""
SSH_CONNECT_TIMEOUT_S = 30
TOKEN_ENV = "GIT_TOKEN"
SSH_KEY_PATH_ENV = "GIT_SSH_KEY_PATH"
HIDDEN = "***"

_COMMIT = re.compile(r"^[0-9a-fA-F]{4,40}$")
_USERINFO = re.compile(r"\b((?:https?|ftps?|git|file)://)[^/@\s'\"]+@", re.I)
_USERINFO_ONLY = re.compile(r"\b(?:https?|ftps?|git|file)://([^/@\s'\"]+)@", re.I)
# the token as git's credential protocol asks for it; read from the environment, never from an argument
_HELPER = ("!f() { test \"$1\" = get && test -n \"$GIT_TOKEN\" || return 0; "
           "echo username=x-access-token; echo \"password=$GIT_TOKEN\"; }; f")


@dataclass(frozen=True)
class GitWorkdir:
    url: str
    ref: str | None = None

    @classmethod
    def of(cls, workdir: object) -> GitWorkdir | None:
        """The git repository a task's ``workdir`` names (SkyPilot's ``{url, ref}`` form), or None (a path, none)."""
        if not isinstance(workdir, dict) or not isinstance(workdir.get("url"), str) or not workdir["url"]:
            return None
        ref = workdir.get("ref")
        return cls(workdir["url"], str(ref) if ref not in (None, "") else None)

    @property
    def shown(self) -> str:
        """The URL as the log and the job's reason show it: a token in it hidden."""
        return _USERINFO.sub(lambda m: m.group(1) + HIDDEN + "@", self.url)

    @property
    def secrets(self) -> list[str]:
        """The credentials written in the URL: a password, or a user name that is a token (``https://<token>@``)."""
        found = []
        for userinfo in _USERINFO_ONLY.findall(self.url):
            user, _, password = userinfo.partition(":")
            found += [password] if password else [user] if len(user) >= 8 else []
        return found

    @property
    def at(self) -> str:
        return f"{self.shown} at {self.ref}" if self.ref else f"{self.shown} (its default branch)"


def redact(text: str, secrets: list[str]) -> str:
    """``text`` with every credential in a URL, and each of ``secrets``, shown as ``***``."""
    for secret in sorted((s for s in secrets if s), key=len, reverse=True):
        text = text.replace(secret, HIDDEN)
    return _USERINFO.sub(lambda m: m.group(1) + HIDDEN + "@", text)


def commit_like(ref: str) -> bool:
    """Whether ``ref`` may be a commit hash, full or short: 4 to 40 hex digits (SkyPilot's rule). A branch or a tag
    may be named so too: only the repository's listing tells (:func:`ref_kind`)."""
    return _COMMIT.match(ref) is not None


def ref_kind(listing: str, ref: str) -> str | None:
    """What ``ref`` is in the repository ``git ls-remote`` listed: ``"branch"``, ``"tag"``, ``"commit"`` (hex that
    names neither: only the clone can tell whether the commit is there), or None (no such ref), as SkyPilot reads it."""
    names = {line.split("\t", 1)[1].strip() for line in listing.splitlines() if "\t" in line}
    if f"refs/heads/{ref}" in names:
        return "branch"
    if f"refs/tags/{ref}" in names:
        return "tag"
    return "commit" if commit_like(ref) else None


def git(*args: str) -> list[str]:
    """A git command that never asks anyone anything, with ``GIT_TOKEN`` offered only through the helper."""
    return ["git", "-c", "credential.helper=", "-c", f"credential.helper={_HELPER}", "-c", "core.askPass=",
            "-c", "protocol.ext.allow=never", *args]


def listing_command(repo: GitWorkdir) -> list[str]:
    """Reads the repository's branches and tags: whether it can be reached at all, and what its ref is."""
    return git("ls-remote", "--", repo.url)


def clone_commands(repo: GitWorkdir, kind: str | None) -> list[list[str]]:
    """The commands that make the current folder (empty) a clone of ``repo`` at its ref of ``kind``
    (:func:`ref_kind`; None without a ref: the default branch). Never hard links to a repository on this host:
    the job could write through them into it."""
    if kind == "commit":
        return [git("clone", "--no-hardlinks", "--no-checkout", "--", repo.url, "."),
                git("-c", "advice.detachedHead=false", "checkout", "--quiet", f"{repo.ref}^{{commit}}")]
    branch = ["--branch", repo.ref] if repo.ref else []
    return [git("-c", "advice.detachedHead=false", "clone", "--no-hardlinks", "--depth", "1", *branch, "--",
                repo.url, ".")]


def git_env(env: dict[str, str]) -> dict[str, str]:
    """The job's environment for git: no prompt (a clone waiting on one would hang the attempt), ssh in batch mode
    with ``GIT_SSH_KEY_PATH``'s key when there is one (a host key seen first is accepted, as SkyPilot does with none
    checked), and the token for the credential helper."""
    out = {k: v for k, v in env.items() if k not in ("GIT_ASKPASS", "SSH_ASKPASS")}
    out["GIT_TERMINAL_PROMPT"] = "0"
    if "GIT_SSH_COMMAND" not in env:
        ssh = ["ssh", "-o", "BatchMode=yes", "-o", f"ConnectTimeout={SSH_CONNECT_TIMEOUT_S}",
               "-o", "StrictHostKeyChecking=accept-new"]
        if env.get(SSH_KEY_PATH_ENV):
            ssh += ["-i", env[SSH_KEY_PATH_ENV], "-o", "IdentitiesOnly=yes"]
        out["GIT_SSH_COMMAND"] = shlex.join(ssh)
    return out


_BOILERPLATE = ("fatal: Could not read from remote repository.", "Please make sure you have the correct access rights",
                "and the repository exists.")


def last_words(output: str) -> str:
    """What git said of why it failed: its first ``fatal:`` or ``error:`` line that is not its closing boilerplate
    (without the prefix), else its first other line (ssh's own, say)."""
    lines = [line.strip() for line in output.splitlines() if line.strip() and not line.strip().startswith(_BOILERPLATE)]
    said = [line.split(":", 1)[1].strip() for line in lines if line.startswith(("fatal:", "error:"))]
    return (said or lines or [""])[0]
