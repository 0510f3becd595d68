"""Where checkpoint bytes live: one small port and its fsspec implementation.

This is the only module that imports ``fsspec`` (and, through it, ``s3fs`` / ``gcsfs``).
Everything above it speaks in paths relative to a checkpoint *base* URI, so the commit
protocol, retention and restore can be tested against ``memory://`` and run unchanged on
S3, GCS or a local disk.

Backends are chosen by URL:

* plain paths and ``file://`` — written to a temporary name, fsynced, then renamed, so a
  file is either absent or whole;
* ``s3://`` — s3fs; the endpoint comes from the usual AWS variables (``AWS_ENDPOINT_URL``,
  ``AWS_ENDPOINT_URL_S3``), so any S3-compatible store works. Large objects go up as a
  multipart upload with several parts in flight;
* ``gs://`` / ``gcs://`` — gcsfs; large objects go up as a parallel composite upload
  (parts uploaded concurrently, then composed server-side). With ``STORAGE_EMULATOR_HOST``
  set and no token given, requests are anonymous, as the emulator expects;
* ``memory://`` — fsspec's in-process store, for tests and dry runs.
"""

from __future__ import annotations

import os
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, Protocol

import fsspec

#: Objects at least twice this size are uploaded in parts of this size.
DEFAULT_PART_SIZE = 32 * 2**20
#: Parts (or files) in flight at once.
DEFAULT_CONCURRENCY = 8
#: GCS compose accepts at most 32 source objects per call.
_GCS_MAX_COMPOSE = 32


class Storage(Protocol):
    """A flat namespace of immutable objects under one base URI.

    Paths are ``/``-separated and relative to the base. Implementations are thread-safe:
    the committer writes several files at once from worker threads.
    """

    base_uri: str

    def write(self, path: str, data: bytes) -> None:
        """Store ``data`` at ``path``, replacing any previous object.

        Atomic: a reader sees either the previous object (or none) or all of ``data``,
        never a prefix, even if this process is killed mid-call. Blocks until durable.
        Raises ``OSError`` when the store refuses after retries.
        """

    def read(self, path: str) -> bytes:
        """Return the whole object. Raises ``FileNotFoundError`` if there is none."""

    def list(self) -> list[str]:
        """Every object path under the base, recursively, freshly listed (no cache).

        An absent base is an empty list, not an error.
        """

    def delete(self, paths: list[str]) -> None:
        """Remove the objects. Idempotent: paths already gone are ignored."""

    def uri(self, path: str = "") -> str:
        """The full URI of ``path`` (or of the base), for messages and for the broker."""


@dataclass(frozen=True)
class TransferOptions:
    """How large objects are moved: part size and parts in flight."""

    part_size: int = DEFAULT_PART_SIZE
    concurrency: int = DEFAULT_CONCURRENCY
    retries: int = 3
    retry_backoff_s: float = 0.2


def open_storage(
    uri: str,
    storage_options: dict[str, Any] | None = None,
    transfer: TransferOptions | None = None,
) -> FsspecStorage:
    """Open the store for a base URI (``s3://b/run``, ``gs://b/run``, ``/tmp/run``, ...)."""
    uri = uri.rstrip("/")
    options = dict(storage_options or {})
    protocol = fsspec.core.split_protocol(uri)[0] or "file"
    if protocol in ("gs", "gcs") and os.environ.get("STORAGE_EMULATOR_HOST"):
        options.setdefault("token", "anon")
    fs, root = fsspec.core.url_to_fs(uri, **options)
    return FsspecStorage(fs, root.rstrip("/"), uri, transfer or TransferOptions())


def _protocol(fs: Any) -> str:
    proto = fs.protocol
    return proto[0] if isinstance(proto, (tuple, list)) else proto


class FsspecStorage:
    """:class:`Storage` over any fsspec filesystem, with per-backend fast paths."""

    def __init__(self, fs: Any, root: str, base_uri: str, transfer: TransferOptions):
        self._fs = fs
        self._root = root
        self.base_uri = base_uri
        self._transfer = transfer
        protocol = _protocol(fs)
        self._kind = {
            "file": "local",
            "local": "local",
            "s3": "s3",
            "s3a": "s3",
            "gs": "gcs",
            "gcs": "gcs",
        }.get(protocol, "generic")

    # -- the port -------------------------------------------------------------------

    def uri(self, path: str = "") -> str:
        return f"{self.base_uri}/{path}" if path else self.base_uri

    def write(self, path: str, data: bytes) -> None:
        full = self._full(path)
        writer = {
            "local": self._write_local,
            "s3": self._write_s3,
            "gcs": self._write_gcs,
        }.get(self._kind, self._write_generic)
        self._retrying(lambda: writer(full, data))

    def read(self, path: str) -> bytes:
        full = self._full(path)
        if self._kind == "s3":
            call = lambda: self._fs.cat_file(  # noqa: E731
                full, chunksize=self._transfer.part_size,
                max_concurrency=self._transfer.concurrency,
            )
        elif self._kind == "gcs":
            call = lambda: self._fs.cat_file(  # noqa: E731
                full, concurrency=self._transfer.concurrency
            )
        else:
            call = lambda: self._fs.cat_file(full)  # noqa: E731
        return self._retrying(call)

    def list(self) -> list[str]:
        self._fs.invalidate_cache()
        try:
            found = self._retrying(lambda: self._fs.find(self._root, detail=False))
        except FileNotFoundError:
            return []
        prefix = self._root + "/"
        return sorted(p[len(prefix):] for p in found if p.startswith(prefix))

    def delete(self, paths: list[str]) -> None:
        if not paths:
            return
        full = [self._full(p) for p in paths]
        if self._kind == "local":
            for p in full:
                try:
                    os.remove(p)
                except FileNotFoundError:
                    pass
            self._prune_empty_dirs({os.path.dirname(p) for p in full})
            return
        try:
            self._retrying(lambda: self._fs.rm(full))
        except FileNotFoundError:
            pass
        self._fs.invalidate_cache()

    # -- helpers --------------------------------------------------------------------

    def _full(self, path: str) -> str:
        return f"{self._root}/{path}"

    def _retrying(self, call):
        """Run ``call``, retrying transient ``OSError`` s; a missing object is not transient."""
        attempts = max(1, self._transfer.retries)
        for attempt in range(attempts):
            try:
                return call()
            except (FileNotFoundError, IsADirectoryError, NotADirectoryError, PermissionError):
                raise
            except OSError:
                if attempt == attempts - 1:
                    raise
                time.sleep(self._transfer.retry_backoff_s * (4**attempt))
        raise AssertionError("unreachable")

    def _write_local(self, full: str, data: bytes) -> None:
        directory = os.path.dirname(full)
        os.makedirs(directory, exist_ok=True)
        tmp = os.path.join(directory, f".tmp-{uuid.uuid4().hex}")
        try:
            with open(tmp, "wb") as f:
                f.write(data)
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, full)
        except BaseException:
            try:
                os.remove(tmp)
            except FileNotFoundError:
                pass
            raise
        _fsync_dir(directory)

    def _write_s3(self, full: str, data: bytes) -> None:
        # s3fs sends objects >= 2 parts as a multipart upload, `concurrency` parts at once;
        # the object only appears when CompleteMultipartUpload succeeds.
        self._fs.pipe_file(
            full, data, chunksize=self._transfer.part_size,
            max_concurrency=self._transfer.concurrency,
        )

    def _write_gcs(self, full: str, data: bytes) -> None:
        size = len(data)
        part = self._transfer.part_size
        if size < 2 * part:
            self._fs.pipe_file(full, data)
            return
        # Parallel composite upload: parts land as temporary objects, then one compose
        # call makes the destination appear whole. Temporary parts sit beside it and are
        # removed afterwards (or with the checkpoint directory if we die first).
        part = max(part, -(-size // _GCS_MAX_COMPOSE))
        view = memoryview(data)
        token = uuid.uuid4().hex[:8]
        names = [f"{full}.part-{token}-{i:03d}" for i in range(-(-size // part))]
        with ThreadPoolExecutor(self._transfer.concurrency) as pool:
            list(pool.map(
                lambda iv: self._fs.pipe_file(iv[1], bytes(view[iv[0] * part:(iv[0] + 1) * part])),
                enumerate(names),
            ))
        try:
            self._fs.merge(full, names)
        finally:
            try:
                self._fs.rm(names)
            except FileNotFoundError:
                pass

    def _write_generic(self, full: str, data: bytes) -> None:
        self._fs.pipe_file(full, data)

    def _prune_empty_dirs(self, directories: set[str]) -> None:
        for d in sorted(directories, key=len, reverse=True):
            try:
                for leftover in os.listdir(d):
                    if leftover.startswith(".tmp-"):
                        os.remove(os.path.join(d, leftover))
                os.rmdir(d)
            except OSError:
                pass


def _fsync_dir(directory: str) -> None:
    try:
        fd = os.open(directory, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)
