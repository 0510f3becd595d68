"""The manifest and commit marker, and the pure check of files against them.

A manifest records, for one checkpoint, every file's size and sha256, the step, the wall
time and the framework versions that wrote it. The commit marker holds the manifest's own
sha256, so a manifest that was damaged after commit is caught too.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from dataclasses import dataclass, field

FORMAT = 1


@dataclass(frozen=True)
class FileEntry:
    size: int
    sha256: str


@dataclass(frozen=True)
class Manifest:
    step: int
    created_at: float  # unix seconds, wall clock of the writer
    files: Mapping[str, FileEntry]
    versions: Mapping[str, str] = field(default_factory=dict)
    job: Mapping[str, str] = field(default_factory=dict)
    format: int = FORMAT

    @property
    def total_bytes(self) -> int:
        return sum(f.size for f in self.files.values())

    def to_json(self) -> bytes:
        doc = {
            "format": self.format,
            "step": self.step,
            "created_at": self.created_at,
            "files": {n: {"size": f.size, "sha256": f.sha256} for n, f in sorted(self.files.items())},
            "versions": dict(self.versions),
            "job": dict(self.job),
        }
        return json.dumps(doc, indent=1, sort_keys=True).encode()

    @classmethod
    def from_json(cls, data: bytes) -> Manifest:
        """Parse a manifest. Raises ``ValueError`` on anything malformed."""
        try:
            doc = json.loads(data)
            fmt = doc.get("format")
            if isinstance(fmt, int) and not isinstance(fmt, bool) and fmt > FORMAT:
                raise ValueError(f"written by a newer version of the checkpoint library (format {fmt}; this "
                                 f"version reads format {FORMAT}): upgrade spot-broker to restore it")
            if fmt != FORMAT:
                raise ValueError(f"unknown manifest format {fmt!r}")
            files = {
                str(n): FileEntry(int(f["size"]), str(f["sha256"])) for n, f in doc["files"].items()
            }
            return cls(
                step=int(doc["step"]),
                created_at=float(doc["created_at"]),
                files=files,
                versions={str(k): str(v) for k, v in doc.get("versions", {}).items()},
                job={str(k): str(v) for k, v in doc.get("job", {}).items()},
            )
        except (KeyError, TypeError, AttributeError, json.JSONDecodeError, UnicodeDecodeError) as e:
            raise ValueError(f"malformed manifest: {e}") from e


def sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def describe(data: bytes | list) -> FileEntry:
    """Size and sha256 of a file given whole or as a list of buffers (hashed without joining)."""
    if isinstance(data, (bytes, bytearray, memoryview)):
        data = [data]
    h = hashlib.sha256()
    size = 0
    for chunk in data:
        h.update(chunk)
        size += memoryview(chunk).nbytes
    return FileEntry(size, h.hexdigest())


def commit_marker(manifest_bytes: bytes) -> bytes:
    return json.dumps({"manifest_sha256": sha256(manifest_bytes)}).encode()


def check_marker(marker: bytes, manifest_bytes: bytes) -> str | None:
    """Why the manifest does not match its commit marker, or None if it does."""
    try:
        expected = json.loads(marker)["manifest_sha256"]
    except (ValueError, KeyError, TypeError):
        return "commit marker is unreadable"
    if expected != sha256(manifest_bytes):
        return "manifest does not match its commit marker (sha256 differs)"
    return None


def check_files(manifest: Manifest, observed: Mapping[str, FileEntry | None]) -> list[str]:
    """Problems with the files actually read, against the manifest; empty means verified.

    ``observed`` maps each manifest file name to what was read, or None if it was missing.
    """
    problems = []
    for name, want in sorted(manifest.files.items()):
        got = observed.get(name)
        problem = _size_problem(name, want, got.size if got is not None else None, got is not None)
        if problem is None and got is not None and got.sha256 != want.sha256:
            problem = f"{name} sha256 mismatch (corrupt)"
        if problem is not None:
            problems.append(problem)
    return problems


def check_sizes(manifest: Manifest, listed: Mapping[str, int | None]) -> list[str]:
    """Problems with a listing of the checkpoint's files against the manifest, with no byte read nor hashed: a file
    missing, or of another size, as :func:`check_files` says them. ``listed`` maps each name listed to its size, or
    None where the listing has no sizes (presence only)."""
    problems = [_size_problem(name, want, listed.get(name), name in listed)
                for name, want in sorted(manifest.files.items())]
    return [p for p in problems if p is not None]


def _size_problem(name: str, want: FileEntry, size: int | None, present: bool) -> str | None:
    """Why file ``name`` (``size`` bytes, None: not known) is not the one the manifest names, by presence and size."""
    if not present:
        return f"{name} is missing"
    if size is not None and size != want.size:
        return f"{name} is {size} bytes, manifest says {want.size}"
    return None
