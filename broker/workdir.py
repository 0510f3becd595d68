"""A task's ``workdir`` shipped to a broker on another host: packed by the CLI, unpacked at launch.

``workdir: .`` means "my code here goes with the job", as with ``sky launch``. A broker on another
machine cannot read the submitter's disk, so ``broker submit`` packs the directory into a tar.gz
(:func:`pack`), uploads it once under its SHA-256 (``PUT /v1/workdirs/sha256:<hex>``: the same code
is never uploaded twice), and submits the task with ``broker.workdir: sha256:<hex>`` in place of its
``workdir``. Each attempt, a resume too, gets a fresh copy of that same pack (:func:`unpack`), so what
one attempt wrote into its directory never reaches the next.

A ``file_mounts`` entry whose source is a path on the submitter's machine (``/data/tokenizer: ./tokenizer``)
goes the same way: a directory packed as the workdir is, a single file as itself (:func:`pack_file`), and
the task names it in ``broker.file_mounts`` (``{"/data/tokenizer": "sha256:<hex>"}``; for a file, the name
of the file in the pack follows: ``sha256:<hex>/vocab.json``) in place of the entry, so that no path of
the submitter's machine is stored. Each attempt gets its own unpacked copy of it too.

What is packed follows SkyPilot's workdir sync (rsync with ``dir-merge`` filters): a ``.skyignore``
at the top of the directory, if there is one, else the ``.gitignore`` files (and ``.git/info/exclude``);
each ignore file applies to its own directory and below; ``!`` lines do not bring a file back (rsync's
``-`` filters, as SkyPilot documents). The pack is deterministic — sorted, with fixed times and owners
— so the same files give the same digest whenever they are packed.

Unpacking uses :func:`tarfile.data_filter` (no absolute paths, no ``..``, no links out of the tree,
no device files) and follows each member's path through the pack's own links in memory as well (:func:`_follow`):
the filter reads them with ``os.path.realpath``, which on Pythons before 3.11.13 / 3.12.11 / 3.13.4 stops
following links once a path is longer than ``PATH_MAX`` (CVE-2025-4517), and a pack of deepening links then
wrote a file anywhere the broker's user may. It bounds the unpacked size and what one read takes, so a pack is
checked by unpacking it the way a launch will. Standard library only: the CLI imports it.
"""

from __future__ import annotations

import errno
import gzip
import hashlib
import io
import os
import posixpath
import re
import shutil
import stat
import tarfile
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO

DEFAULT_MAX_BYTES = 100 * 2**20
"""A pack's largest size (compressed) by default: ``max_workdir_bytes`` in the broker's config."""
UNPACK_RATIO = 20
"""A pack may unpack to at most this many times its limit (code compresses 3-5x; a zip bomb far more)."""
MAX_FILES = 100_000
PACK_MTIME = 946_684_800  # 2000-01-01T00:00Z: every file's time in a pack, so its digest is the content's
DIGEST_RE = re.compile(r"^sha256:([0-9a-f]{64})$")
MOUNT_RE = re.compile(r"^sha256:([0-9a-f]{64})(?:/([^/\x00]+))?$")
"""A ``broker.file_mounts`` value: a pack, and for a single file the file's name in it."""
MAX_LINK_HOPS = 40
"""The most links one path may go through, as Linux counts them (``MAXSYMLINKS``): past it the kernel gives up too."""
MAX_READ = 2**20
"""The most one read of a pack takes: a member's data is read in 16 KiB pieces, a header (a long name, PAX
attributes) whole. A header of a gigabyte of one letter is 1 MiB packed, and unpacking it held 8 GiB."""
NOT_A_TREE = frozenset({errno.EEXIST, errno.ENOTDIR, errno.EISDIR, errno.ENAMETOOLONG, errno.ELOOP})
"""What unpacking a pack's own members raises when they make no tree (a file under a file, a name too
long): the pack's fault, not the disk's."""


class PackError(ValueError):
    """A workdir that cannot be packed, or a pack that cannot be unpacked safely: a sentence saying why."""


def parse_digest(text: object) -> str:
    """``sha256:<64 hex digits>`` → the hex digits, or :class:`PackError` saying what it should look like."""
    m = DIGEST_RE.match(text) if isinstance(text, str) else None
    if not m:
        raise PackError(f"must be sha256: and 64 lowercase hex digits (the pack's SHA-256), not {str(text)[:80]!r}")
    return m.group(1)


def parse_mount(text: object) -> tuple[str, str | None]:
    """``sha256:<hex>`` (a directory) or ``sha256:<hex>/<name>`` (the file ``name`` in the pack) → (hex, name)."""
    m = MOUNT_RE.match(text) if isinstance(text, str) else None
    if not m or m.group(2) in (".", ".."):
        raise PackError("must be an uploaded pack, sha256: and 64 lowercase hex digits, followed by /<name> for a "
                        f"single file (PUT /v1/workdirs/sha256:...; `broker submit` sets it), not {str(text)[:80]!r}")
    return m.group(1), m.group(2)


def packs_of(section: object) -> set[str]:
    """The packs (hex digests) a job's stored ``broker:`` section names: its workdir and its file_mounts'.
    What is not well formed names none (submit refused it; nothing to keep for it)."""
    if not isinstance(section, dict):
        return set()
    out = set()
    if m := DIGEST_RE.match(str(section.get("workdir") or "")):
        out.add(m.group(1))
    mounts = section.get("file_mounts")
    for value in (mounts.values() if isinstance(mounts, dict) else ()):
        if isinstance(value, str) and (m := MOUNT_RE.match(value)):
            out.add(m.group(1))
    return out


def human(n: int) -> str:
    """A size for people: ``12.3 MiB``."""
    size = float(n)
    for unit in ("bytes", "KiB", "MiB", "GiB"):
        if size < 1024 or unit == "GiB":
            return f"{int(size)} bytes" if unit == "bytes" else f"{size:.1f} {unit}"
        size /= 1024
    raise AssertionError("unreachable")


# -- what is packed: SkyPilot's ignore files ------------------------------------------------------


@dataclass(frozen=True)
class _Rule:
    base: str  # the ignore file's directory, relative to the workdir ("" at its top)
    pattern: re.Pattern[str]
    anchored: bool  # a "/" in the pattern: matched against the path below ``base``, else against the name
    dir_only: bool


def _glob(pattern: str) -> re.Pattern[str]:
    out, i = [], 0
    while i < len(pattern):
        c = pattern[i]
        if pattern.startswith("**/", i):
            out.append("(?:.*/)?")
            i += 3
            continue
        if pattern.startswith("**", i):
            out.append(".*")
            i += 2
            continue
        if c == "*":
            out.append("[^/]*")
        elif c == "?":
            out.append("[^/]")
        elif c == "[":
            end = pattern.find("]", i + 1)
            if end == -1:
                out.append(re.escape(c))
            else:
                body = pattern[i + 1:end].replace("\\", "\\\\")
                out.append("[" + ("^" + body[1:] if body.startswith("!") else body) + "]")
                i = end
        elif c == "\\" and i + 1 < len(pattern):
            i += 1
            out.append(re.escape(pattern[i]))
        else:
            out.append(re.escape(c))
        i += 1
    return re.compile("".join(out))


def _rules(text: str, base: str) -> list[_Rule]:
    rules = []
    for line in text.splitlines():
        line = line.rstrip("\n\r")
        if not line.strip() or line.startswith("#") or line.startswith("!"):
            continue
        line = line.rstrip() if not line.endswith("\\ ") else line
        dir_only = line.endswith("/")
        line = line.rstrip("/")
        if not line:
            continue
        anchored = "/" in line
        rules.append(_Rule(base, _glob(line.lstrip("/")), anchored, dir_only))
    return rules


def _ignored(rel: str, is_dir: bool, rules: list[_Rule]) -> bool:
    for r in rules:
        if r.base and not rel.startswith(r.base + "/"):
            continue
        below = rel[len(r.base) + 1:] if r.base else rel
        if r.dir_only and not is_dir:
            continue
        if r.pattern.fullmatch(below if r.anchored else below.rsplit("/", 1)[-1]):
            return True
    return False


def _read(path: Path) -> str:
    try:
        return path.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return ""


@dataclass(frozen=True)
class Entry:
    rel: str
    path: Path
    kind: str  # "dir", "file" or "link"
    size: int
    target: str = ""  # a link's, as listed (checked to lead inside the workdir)


@dataclass(frozen=True)
class _Found:
    """A directory, file or link :func:`_tree` found, with its ``lstat`` (read once) and, for a link, its target."""

    rel: str
    path: Path
    st: os.stat_result
    target: str = ""


def _tree(root: Path, *, skip: frozenset[str] = frozenset(), skip_unreadable: bool = False) -> Iterator[_Found]:
    """What under ``root`` a pack may hold, lazily, in order (a directory before what is in it, names sorted): the
    ``.skyignore`` rules, else ``.gitignore``'s (and ``.git/info/exclude``), leave out what they ignore; directories
    named in ``skip`` are left out too. Sockets and pipes are left out, as are entries that vanish while the tree is
    read, and a directory is given only once it could be listed. A directory that cannot be listed raises the
    ``OSError`` (``root`` always; another, unless ``skip_unreadable``: then it is left out). :func:`files_of` and
    :func:`fingerprint` both walk it."""
    ignore_name = ".skyignore" if (root / ".skyignore").is_file() else ".gitignore"
    top_rules = [] if ignore_name == ".skyignore" else _rules(_read(root / ".git" / "info" / "exclude"), "")

    def walk(directory: Path, rel_dir: str, rules: list[_Rule], names: list[str]) -> Iterator[_Found]:
        here = directory / ignore_name
        if here.is_file():
            rules = rules + _rules(_read(here), rel_dir)
        for name in names:
            path = directory / name
            rel = f"{rel_dir}/{name}" if rel_dir else name
            try:  # what it is, once: each of is_dir, is_file looked again, and a file gone since was a traceback
                st = path.lstat()
                target = os.readlink(path) if stat.S_ISLNK(st.st_mode) else ""
            except FileNotFoundError:
                continue  # vanished since the directory was listed
            if stat.S_ISLNK(st.st_mode):
                if not _ignored(rel, False, rules):
                    yield _Found(rel, path, st, target)
            elif stat.S_ISDIR(st.st_mode):
                if name in skip or _ignored(rel, True, rules):
                    continue
                try:
                    inner = sorted(os.listdir(path))
                except FileNotFoundError:
                    continue  # vanished since its parent was listed: not there to take
                except OSError:
                    if skip_unreadable:
                        continue
                    raise
                yield _Found(rel, path, st)
                yield from walk(path, rel, rules, inner)
            elif stat.S_ISREG(st.st_mode) and not _ignored(rel, False, rules):
                yield _Found(rel, path, st)

    yield from walk(root, "", top_rules, sorted(os.listdir(root)))


def files_of(root: Path) -> list[Entry]:
    """What a pack of ``root`` holds, in order: directories, files and links, the ignored ones left out (:func:`_tree`).

    A link is kept as a link when it points inside the directory; one that points out of it
    (``data -> /mnt/datasets``) is refused, naming it: it could not be unpacked on another host.
    Sockets and pipes are left out, as they cannot be copied. A file or directory that vanishes while the directory is
    read (a build writing and deleting files as it runs) is left out, as rsync says of a file that vanished: it is
    not there to pack."""
    ignore_name = ".skyignore" if (root / ".skyignore").is_file() else ".gitignore"
    out: list[Entry] = []
    try:
        for found in _tree(root):
            mode = found.st.st_mode
            if stat.S_ISLNK(mode):
                rel, target = found.rel, found.target
                inside = os.path.normpath(os.path.join(os.path.dirname(rel), target))
                if os.path.isabs(target) or inside == ".." or inside.startswith("../"):
                    raise PackError(f"{rel} is a link to {target}, out of the workdir, which cannot be shipped to "
                                    f"the broker: leave it out ({ignore_name}) or mount it with file_mounts")
                out.append(Entry(rel, found.path, "link", 0, target))
            elif stat.S_ISDIR(mode):
                out.append(Entry(found.rel, found.path, "dir", 0))
            else:
                out.append(Entry(found.rel, found.path, "file", found.st.st_size))
    except FileNotFoundError as exc:
        raise PackError(f"cannot read {exc.filename or root}: it is not there") from None
    except OSError as exc:
        raise PackError(f"cannot read {exc.filename or root}: {exc.strerror}") from None
    return out


# -- packing (the CLI) ----------------------------------------------------------------------------


@dataclass(frozen=True)
class Pack:
    """A packed workdir: the tar.gz at ``path`` (a temporary file; the caller removes it)."""

    path: Path
    digest: str  # "sha256:<hex>"
    size: int
    files: int


class _Capped(io.RawIOBase):
    """A file that refuses to grow past ``limit`` bytes, hashing what it is given."""

    def __init__(self, fh: BinaryIO, limit: int):
        self.fh, self.limit, self.written = fh, limit, 0
        self.sha = hashlib.sha256()

    def writable(self) -> bool:
        return True

    def write(self, data) -> int:
        self.written += len(data)
        if self.written > self.limit:
            raise _TooLarge()
        self.sha.update(data)
        return self.fh.write(data)


class _TooLarge(Exception):
    pass


def pack(directory: str | Path, *, limit: int = DEFAULT_MAX_BYTES, what: str | None = None) -> Pack:
    """Pack ``directory`` into a deterministic tar.gz of at most ``limit`` bytes. ``what`` names it in an
    error (``workdir <directory>`` when not given).

    Raises :class:`PackError` for a directory that is not one, a link out of it, or a pack over the
    limit — saying how large its files are, the limit, and the largest files, to leave out."""
    what = what or f"workdir {directory}"
    root = Path(directory).expanduser()
    if not root.is_dir():
        raise PackError(f"{what}: not a directory")
    ignore = ".skyignore" if (root / ".skyignore").is_file() else ".gitignore"  # the file whose rules it follows
    return _write(files_of(root.resolve()), limit=limit, what=what, ignore=ignore)


def pack_file(file: str | Path, *, limit: int = DEFAULT_MAX_BYTES, what: str | None = None) -> Pack:
    """Pack the single file ``file`` as itself: one member, named as the file (``vocab.json``), in a
    deterministic tar.gz of at most ``limit`` bytes. A mounted file is one file, not a directory holding it."""
    what = what or f"file {file}"
    path = Path(file).expanduser().resolve()
    try:
        st = path.stat()
    except FileNotFoundError:
        st = None
    if st is None or not stat.S_ISREG(st.st_mode):
        raise PackError(f"{what}: not a file")
    packed = _write([Entry(path.name, path, "file", st.st_size)], limit=limit, what=what)
    if not packed.files:  # it vanished before it was read: a pack of nothing is no mount of it
        packed.path.unlink(missing_ok=True)
        raise PackError(f"{what}: not a file (it was removed while it was packed)")
    return packed


def _write(entries: list[Entry], *, limit: int, what: str, ignore: str | None = None) -> Pack:
    fd, name = tempfile.mkstemp(prefix="broker-workdir-", suffix=".tar.gz")
    path = Path(name)
    try:
        with os.fdopen(fd, "wb") as raw:
            capped = _Capped(raw, limit)
            # filename="" and mtime=0: the gzip header names no temporary file and no time
            with gzip.GzipFile(filename="", fileobj=capped, mode="wb", mtime=0) as gz:  # type: ignore[arg-type]
                with tarfile.open(fileobj=gz, mode="w", format=tarfile.PAX_FORMAT) as tar:
                    added = [e for e in entries if _add(tar, e)]
    except _Changed as exc:
        path.unlink(missing_ok=True)
        # (the ignore file its rules come from: a .skyignore made beside .gitignore files replaces them all)
        leave = f", or leave it out ({ignore}) if it keeps changing" if ignore else ""
        raise PackError(f"{what}: file {exc.rel} changed while it was packed; try again{leave}") from None
    except _TooLarge:
        path.unlink(missing_ok=True)
        total = sum(e.size for e in entries)
        largest = sorted((e for e in entries if e.kind == "file"), key=lambda e: -e.size)[:3]
        names = ", ".join(f"{e.rel} ({human(e.size)})" for e in largest)
        raise PackError(f"{what}: packs to more than the limit of {human(limit)} (its files come to "
                        f"{human(total)}; the largest: {names}); leave large files out with .skyignore or "
                        f".gitignore, and put data in a bucket (file_mounts)") from None
    except BaseException:
        path.unlink(missing_ok=True)
        raise
    return Pack(path=path, digest=f"sha256:{capped.sha.hexdigest()}", size=capped.written,
                files=sum(1 for e in added if e.kind != "dir"))


class _Changed(Exception):
    """A file changed (its size, its time, what it is) while it was read into the pack."""

    def __init__(self, rel: str):
        super().__init__(rel)
        self.rel = rel


class _Exactly(io.RawIOBase):
    """``fh`` read as tarfile reads a member's data, for ``size`` bytes: :class:`_Changed` if it ends sooner (the file
    shrank as it was read; tarfile said "unexpected end of data")."""

    def __init__(self, fh: BinaryIO, size: int, rel: str):
        self.fh, self.left, self.rel = fh, size, rel

    def readable(self) -> bool:
        return True

    def read(self, n: int = -1) -> bytes:
        want = self.left if n is None or n < 0 else min(n, self.left)
        data = self.fh.read(want)
        if len(data) < want:
            raise _Changed(self.rel)
        self.left -= len(data)
        return data


def _add(tar: tarfile.TarFile, e: Entry) -> bool:
    """Add ``e`` to the pack; ``False`` when it vanished since it was listed (left out, as by rsync). A file that
    changes while it is read raises :class:`_Changed`: what was packed would be neither its old content nor its
    new (a checkpoint being written, a log growing), and the digest would name content that never was."""
    info = tarfile.TarInfo(e.rel)
    info.mtime, info.uid, info.gid, info.uname, info.gname = PACK_MTIME, 0, 0, "", ""
    if e.kind == "dir":
        try:
            if not stat.S_ISDIR(os.lstat(e.path).st_mode):
                raise _Changed(e.rel)
        except FileNotFoundError:
            return False
        info.type, info.mode = tarfile.DIRTYPE, 0o755
        tar.addfile(info)
    elif e.kind == "link":
        try:
            target = os.readlink(e.path)
        except FileNotFoundError:
            return False
        except OSError:  # no longer a link (EINVAL): something else is there now
            raise _Changed(e.rel) from None
        if target != e.target:  # pointed elsewhere since it was checked to lead inside the workdir
            raise _Changed(e.rel)
        info.type, info.mode, info.linkname = tarfile.SYMTYPE, 0o777, target
        tar.addfile(info)
    else:
        try:
            fh = open(e.path, "rb")
        except FileNotFoundError:
            return False
        except OSError as exc:  # a directory now (EISDIR), or no longer readable: not the file listed
            if exc.errno == errno.EISDIR:
                raise _Changed(e.rel) from None
            raise
        with fh:
            before = os.fstat(fh.fileno())
            if not stat.S_ISREG(before.st_mode):
                raise _Changed(e.rel)
            info.mode = 0o755 if before.st_mode & 0o100 else 0o644
            info.size = before.st_size
            tar.addfile(info, _Exactly(fh, info.size, e.rel))
            after = os.fstat(fh.fileno())
            if (after.st_size, after.st_mtime_ns) != (before.st_size, before.st_mtime_ns) or fh.read(1):
                raise _Changed(e.rel)
    return True


# -- unpacking (the broker: to check an upload, and at each launch) -------------------------------


def unpack(source: str | Path | BinaryIO, destination: str | Path, *, max_bytes: int) -> tuple[int, int]:
    """Unpack the tar.gz at ``source`` (a path, or a file open for reading) into the new directory ``destination``; returns (files, bytes).

    Safe against a hostile pack: :func:`tarfile.data_filter` refuses absolute paths, ``..``, links
    out of the tree and device files, and :func:`_check_in_tree` the same paths again through the pack's own
    links, as the kernel follows them, where ``realpath`` may stop (CVE-2025-4517); no read takes more than
    ``MAX_READ`` (a header of a gigabyte); the files' sizes are counted before each is written, so a pack
    that unpacks to more than ``max_bytes`` (or more than ``MAX_FILES`` entries) stops there. ``files``
    counts files and links, not directories, as :class:`Pack` does. Raises
    :class:`PackError` naming the member; ``destination`` is then removed."""
    dest = Path(destination)
    dest.mkdir(parents=True)
    counted = {"entries": 0, "files": 0, "bytes": 0}
    at = {"member": ""}  # the member being unpacked, for a message (its name cut short: it may be 4 KiB)
    links: dict[str, str] = {}  # the symbolic links made so far: where each is in the tree → its target
    seen: set[str] = set()  # the files and links unpacked so far, by their place in the tree

    def check(member: tarfile.TarInfo, path: str) -> tarfile.TarInfo:
        at["member"] = member.name if len(member.name) <= 100 else member.name[:100] + "…"
        counted["entries"] += 1
        counted["files"] += 0 if member.isdir() else 1
        counted["bytes"] += member.size if member.isfile() else 0
        if counted["entries"] > MAX_FILES:
            raise PackError(f"holds more than {MAX_FILES} files")
        if counted["bytes"] > max_bytes:
            raise PackError(f"unpacks to more than {human(max_bytes)} (at {member.name!r})")
        if member.name.startswith(("/", os.sep)):  # data_filter would strip the slash; a pack of ours has none
            raise PackError(f"{member.name!r} is an absolute path")
        if member.isdev():
            raise PackError(f"{member.name!r} is a device file or a pipe")
        if any(ord(c) < 32 or ord(c) == 127 for c in member.name):
            # unpacked, such a name ("a\nb") reads as two in a listing, a log line or a shell loop over the files
            raise PackError(f"{member.name!r} has a control character in its name: rename it, or leave it out "
                            "with .skyignore")
        place = posixpath.normpath(member.name)
        if not member.isdir():
            if place in seen:  # the second silently replaced the first: which one the job runs cannot be told
                raise PackError(f"{member.name!r} is in the pack twice")
            seen.add(place)
        try:
            checked = tarfile.data_filter(member, path)
        except tarfile.FilterError as exc:
            raise PackError(_plain(member, exc)) from None
        _check_in_tree(member, links)
        return checked

    try:
        with _BoundedGzip(source) as gz, tarfile.open(fileobj=gz, mode="r:") as tar:
            tar.extractall(dest, filter=check)
        for where, target in links.items():  # a link made later may have turned an earlier one out of the tree
            if not _leads_in(where, target, links):
                raise PackError(f"{where!r} is a link to {target!r}, out of the workdir (through the pack's other "
                                "links)")
    except PackError:
        shutil.rmtree(dest, ignore_errors=True)
        raise
    except (KeyError, RecursionError) as exc:  # a hard link to no member; a path nested deeper than Python recurses
        shutil.rmtree(dest, ignore_errors=True)
        why = "is a hard link to no earlier member" if isinstance(exc, KeyError) else "is nested too deep"
        raise PackError(f"{at['member']!r} cannot be unpacked: it {why}") from None
    except (tarfile.TarError, EOFError, OSError, gzip.BadGzipFile, UnicodeError) as exc:
        shutil.rmtree(dest, ignore_errors=True)
        if isinstance(exc, OSError) and exc.errno in NOT_A_TREE:
            raise PackError(f"{at['member']!r} cannot be unpacked: {exc.strerror} (its members make no tree of "
                            "files: a file under a file, a name used twice, a name too long)") from None
        if isinstance(exc, OSError) and not isinstance(exc, gzip.BadGzipFile) and exc.errno is not None:
            raise  # the disk, not the pack
        raise PackError(f"is not a whole tar.gz file ({type(exc).__name__}: {exc})") from None
    return counted["files"], counted["bytes"]


class _TooDeep(Exception):
    """A path goes through more than ``MAX_LINK_HOPS`` links (a loop, or a chain the kernel would not follow)."""


def _parts(path: str) -> list[str]:
    return [p for p in path.split("/") if p not in ("", ".")]


def _follow(path: str, links: dict[str, str], *, last: bool = True) -> str | None:
    """Where ``path`` (relative to the top of the tree) leads once the tree's ``links`` are followed, as the kernel
    follows them, in memory: its place in the tree, or None when it leads out of it. ``last``: follow a link at the
    path itself too (a file written there is written through it; a link made there replaces it). Raises
    :class:`_TooDeep` past ``MAX_LINK_HOPS`` links."""
    todo, at, hops = _parts(path)[::-1], [], 0
    while todo:
        part = todo.pop()
        if part == "..":
            if not at:
                return None
            at.pop()
            continue
        at.append(part)
        target = links.get("/".join(at))
        if target is None or (not todo and not last):
            continue
        hops += 1
        if hops > MAX_LINK_HOPS:
            raise _TooDeep()
        if target.startswith("/"):
            return None
        at.pop()
        todo.extend(_parts(target)[::-1])
    return "/".join(at)


def _leads_in(place: str, target: str, links: dict[str, str]) -> bool:
    """Whether the link at ``place`` to ``target`` leads into the tree (read from the link's own directory). A
    loop leads nowhere: the kernel refuses any path through it, as :func:`_follow` refuses a member's."""
    if target.startswith("/"):
        return False
    try:
        return _follow(f"{place.rpartition('/')[0]}/{target}", links) is not None
    except _TooDeep:
        return True


def _check_in_tree(member: tarfile.TarInfo, links: dict[str, str]) -> None:
    """Refuse a member that the links made so far would take out of the tree, then record it if it is a link.

    A symbolic link replaces what is at its place (tarfile unlinks it first), so its own place is not followed,
    and its target must lead into the tree from its directory (:func:`_leads_in`). A file, a directory and a hard
    link are made through a link at their place (which stays), and a hard link's target is read from the top of
    the tree, its links followed."""
    name = member.name
    try:
        if member.issym():
            place = _follow(name, links, last=False)
            if place is None:
                raise PackError(f"{name!r} would be written outside the workdir (through the pack's links)")
            if not _leads_in(place, member.linkname, links):
                raise PackError(f"{name!r} is a link to {member.linkname!r}, out of the workdir (through the pack's "
                                "other links)")
            links[place] = member.linkname
            return
        place = _follow(name, links)
        if place is None:
            raise PackError(f"{name!r} would be written outside the workdir (through the pack's links)")
        if member.islnk() and _follow(member.linkname, links) is None:
            raise PackError(f"{name!r} is a link to {member.linkname!r}, out of the workdir (through the pack's links)")
    except _TooDeep:
        raise PackError(f"{name[:100]!r} cannot be unpacked: its path goes through more than {MAX_LINK_HOPS} links "
                        "(links in a loop)") from None


class _BoundedGzip(gzip.GzipFile):
    """A tar.gz read as :func:`unpack` reads it: from a path or an open file (left open), ``MAX_READ`` at most a
    read, so that no header, however long, is held in memory whole."""

    def __init__(self, source: str | Path | BinaryIO):
        self._own = None if hasattr(source, "read") else open(source, "rb")
        super().__init__(fileobj=self._own or source, mode="rb")

    def read(self, size: int | None = -1) -> bytes:
        if size is None or size < 0 or size > MAX_READ:
            raise PackError(f"holds a header (a member's name or attributes) of more than {human(MAX_READ)}, at byte "
                            f"{self.tell()} unpacked: no workdir has one")
        return super().read(size)

    def close(self) -> None:
        try:
            super().close()
        finally:
            if self._own is not None:
                self._own.close()


def _plain(member: tarfile.TarInfo, exc: tarfile.FilterError) -> str:
    name = member.name
    if isinstance(exc, tarfile.AbsolutePathError):
        return f"{name!r} is an absolute path"
    if isinstance(exc, tarfile.OutsideDestinationError):
        return f"{name!r} would be written outside the workdir ('..')"
    if isinstance(exc, tarfile.SpecialFileError):
        return f"{name!r} is a device file or a pipe"
    if isinstance(exc, tarfile.AbsoluteLinkError):
        return f"{name!r} is a link to the absolute path {member.linkname!r}"
    if isinstance(exc, tarfile.LinkOutsideDestinationError):
        return f"{name!r} is a link to {member.linkname!r}, out of the workdir"
    return f"{name!r}: {exc}"


# -- a workdir on the broker's host, read at each launch: its fingerprint -------------------------

FINGERPRINT_MAX_FILES = 10_000
"""The most files (and links) of a host workdir :func:`fingerprint` looks at, in the order it walks them: a workdir
that is a folder of datasets would otherwise hold the engine's tick. Past it the fingerprint is ``partial``."""
FINGERPRINT_LISTED = 300
"""The most files whose own fingerprints are kept beside the digest, to say how many differ and which: a workdir with
more keeps its digest only (an attempt's record stays small)."""
NOT_FINGERPRINTED = frozenset({".git", "__pycache__"})
"""Folders a fingerprint leaves out: git's own records (a fetch is no change of the code) and Python's byte-code
caches, which a job importing its own modules writes into its workdir each run."""


def fingerprint(directory: str) -> dict[str, Any]:
    """What a workdir given as a path on the broker's host (an admin's submit, never packed) holds when an attempt
    is launched, cheaply: the digest of each file's (path, size, mtime) and each link's target, walked as a pack
    is (:func:`files_of`: the same ``.skyignore``/``.gitignore`` rules; links out of the tree are fine here, their
    target is what counts), ``.git`` and ``__pycache__`` left out. ``{"path", "digest", "files"}``, with ``listing``
    (path → 8 hex digits of its size and mtime) for at most :data:`FINGERPRINT_LISTED` files and ``partial`` when
    it stopped at :data:`FINGERPRINT_MAX_FILES`. ``{}`` when it is no directory this host can read. The contents
    are not read: an edit that keeps a file's size and time (rare) is not seen, a ``touch`` is."""
    root = Path(os.path.expanduser(directory))
    if not root.is_dir():
        return {}
    digest = hashlib.sha256()
    listing: dict[str, str] | None = {}
    count, whole = 0, True
    try:
        for found in _tree(root, skip=NOT_FINGERPRINTED, skip_unreadable=True):
            if stat.S_ISDIR(found.st.st_mode):
                continue
            if count >= FINGERPRINT_MAX_FILES:
                whole = False
                break
            count += 1
            what = ("link " + found.target if stat.S_ISLNK(found.st.st_mode) else
                    f"{found.st.st_size} {found.st.st_mtime_ns}")
            digest.update(f"{found.rel}\0{what}\n".encode("utf-8", "surrogateescape"))
            if count > FINGERPRINT_LISTED:
                listing = None
            elif listing is not None:
                listing[found.rel] = hashlib.sha256(what.encode("utf-8", "surrogateescape")).hexdigest()[:8]
    except (OSError, RecursionError):  # a folder that could not be read, or nested deeper than Python recurses: what
        whole = False                  # was walked till then is the fingerprint
    out: dict[str, Any] = {"path": directory, "digest": digest.hexdigest(), "files": count}
    if listing is not None:
        out["listing"] = listing
    if not whole:
        out["partial"] = True
    return out


def fingerprint_changes(before: dict[str, Any], after: dict[str, Any]) -> str | None:
    """How the workdir of fingerprint ``after`` differs from that of ``before``, in a few words (``2 files differ:
    train.py changed, notes.txt added``); ``None`` when it is the same, or when either is not known (``{}``: not a
    host workdir, or a broker before fingerprints recorded none)."""
    if not before.get("digest") or not after.get("digest") or before["digest"] == after["digest"]:
        return None
    a, b = before.get("listing"), after.get("listing")
    if a is None or b is None:
        many = max(before.get("files", 0), after.get("files", 0))
        looked = f"; only its first {FINGERPRINT_MAX_FILES:,} files were compared" \
            if before.get("partial") or after.get("partial") else ""
        return f"it has {many:,} files, too many to say which differ{looked}"
    changed = [f"{k} changed" for k in sorted(a.keys() & b.keys()) if a[k] != b[k]]
    added = [f"{k} added" for k in sorted(b.keys() - a.keys())]
    removed = [f"{k} removed" for k in sorted(a.keys() - b.keys())]
    said = changed + added + removed
    more = f", and {len(said) - 3} more" if len(said) > 3 else ""
    return f"{len(said)} file{' differs' if len(said) == 1 else 's differ'}: {', '.join(said[:3])}{more}"


def changed_note(before: dict[str, Any], after: dict[str, Any], *, since: int, resumes: str) -> str | None:
    """The sentence an attempt's launch (its event, the job's reason, the first lines of its log) says when its host
    workdir is not what attempt ``since`` read: the code it runs is the code as it is now, not the code that made the
    checkpoint. ``resumes``: how it starts (``on the checkpoint from step 40``). ``None`` when nothing differs."""
    changes = fingerprint_changes(before, after)
    if changes is None:
        return None
    return (f"the workdir {after.get('path') or before.get('path')} changed since attempt {since} ({changes}): this "
            f"attempt runs the code as it is now, {resumes}")
