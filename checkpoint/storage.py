"""Where checkpoint bytes live: one small port and its fsspec implementation.

This is the only module that imports ``fsspec`` (and, through it, ``gcsfs``) or ``boto3``.
Everything above it speaks in paths relative to a checkpoint *base* URI, so the commit
protocol, retention and restore can be tested against ``memory://`` and run unchanged on
S3, GCS or a local disk.

Backends are chosen by URL:

* plain paths and ``file://`` — written to a temporary name, fsynced, then renamed, so a
  file is either absent or whole;
* ``s3://`` — boto3, the SDK the ``s3`` extra installs with s3fs; the endpoint comes from
  the usual AWS variables (``AWS_ENDPOINT_URL``, ``AWS_ENDPOINT_URL_S3``), so any
  S3-compatible store works. Large objects go up as a multipart upload with several parts
  in flight, each request body reading the caller's buffers in place (boto3's transfer manager
  copied every part into memory first); an object appears only when the upload completes.
  A restore streams each object with one GET into a local file as it arrives (``download``).
  boto3 rather than s3fs because s3fs's single aiohttp event loop moved checkpoint-sized
  objects at about 0.7× boto3's speed in ``benchmarks/checkpoint.py``. ``storage_options``
  take s3fs's names (``endpoint_url``, ``key``, ``secret``, ``token``, ``client_kwargs``);
* ``gs://`` / ``gcs://`` — gcsfs; large objects go up as a parallel composite upload
  (parts uploaded concurrently, then composed server-side), each request (a whole small file, or one part) sent by
  the library through gcsfs's session from a reader over the caller's buffers, never joined into one ``bytes``. With ``STORAGE_EMULATOR_HOST``
  set and no token given, requests are anonymous, as the emulator expects;
* ``memory://`` — fsspec's in-process store, for tests and dry runs.
"""

from __future__ import annotations

import bisect
import errno
import io
import json
import logging
import os
import re
import threading
import time
import uuid
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from dataclasses import dataclass
from collections.abc import Sequence
from typing import Any, Protocol, Union

import fsspec

from checkpoint import arguments

log = logging.getLogger("checkpoint")

#: Objects at least twice this size are uploaded in parts of this size.
DEFAULT_PART_SIZE = 32 * 2**20
#: Parts (or files) in flight at once.
DEFAULT_CONCURRENCY = 8
#: Block size of a streamed download (restore writes it to a local file as it comes).
_DOWNLOAD_BLOCK = 2**20
#: GCS compose accepts at most 32 source objects per call.
_GCS_MAX_COMPOSE = 32
#: S3 and GCS: seconds to wait for a connection, and for each read from one (a reply's first byte, or the next block
#: of a download), not for a whole object: a multi-GB upload or download is never cut short by them, a store that
#: takes the connection and never answers is given up on (botocore's own default waits 60 s a try, gcsfs's 300 s
#: a request, each retried). urllib3 sends a request body under the connect timeout too: it is also the longest a
#: send may make no progress at all. A user's botocore ``Config`` (``client_kwargs={"config": ...}``) or gcsfs
#: ``requests_timeout`` overrides them.
CONNECT_TIMEOUT_S = 10
READ_TIMEOUT_S = 20
#: S3: how long one request rides out a store it cannot reach — the connection refused, dropped or not made within
#: ``CONNECT_TIMEOUT_S`` (an endpoint restarting, a network blip) — counted from its first such failure: after
#: botocore's own 3 tries, tried again after 2, 4, then every ``UNREACHABLE_BACKOFF_MAX_S`` seconds. Each of the
#: library's ``TransferOptions.retries`` tries of a call does so: 3 × 20 s, about a minute, by default (gcsfs's own
#: 6 tries of a request, some 33 s, are what each try rides out on GCS). botocore alone gave up within 3 s, and the
#: library's 3 tries within about 10 s: a restart of the store failed the save. ``retries=0``: not ridden out.
UNREACHABLE_RIDE_OUT_S = 20.0
UNREACHABLE_BACKOFF_MAX_S = 5.0
#: Disk errors a retry cannot get past: a full disk or quota, a file over the size limit, a read-only file system.
_GCS_FORBIDDEN = "Forbidden: "
"""How gcsfs's error for an HTTP 403 begins (``gcsfs.retry.validate_response``): a permission, not retried."""

_PERMANENT_ERRNOS = frozenset(getattr(errno, name) for name in ("ENOSPC", "EDQUOT", "EFBIG", "EROFS", "ENAMETOOLONG")
                              if hasattr(errno, name))


class Storage(Protocol):
    """A flat namespace of immutable objects under one base URI.

    Paths are ``/``-separated and relative to the base. Implementations are thread-safe:
    the committer writes several files at once from worker threads.
    """

    base_uri: str

    def write(self, path: str, data: Data) -> None:
        """Store ``data`` (bytes, or a list of buffers to concatenate) at ``path``, replacing
        any previous object.

        Atomic: a reader sees either the previous object (or none) or all of ``data``,
        never a prefix, even if this process is killed mid-call. Blocks until durable.
        Raises ``OSError`` when the store refuses after retries.
        """

    def read(self, path: str) -> bytes:
        """Return the whole object. Raises ``FileNotFoundError`` if there is none."""

    def list(self) -> list[str]:
        """Every object path under the base, recursively, freshly listed (no cache).

        An absent base is an empty list, not an error; an absent bucket is an ``OSError`` saying so
        (a typo in its name must not read as a fresh start).
        """

    def sizes(self, directory: str) -> dict[str, int]:
        """Every object under ``directory`` (a path relative to the base: one checkpoint's directory) → its size
        in bytes, paths relative to the base, freshly listed (no cache). One listing of that directory alone, not
        of the base: the commit checks a checkpoint's files with it before writing its marker. An absent directory
        is an empty dict.
        """

    def delete(self, paths: list[str]) -> None:
        """Remove the objects. Idempotent: paths already gone are ignored."""

    def uri(self, path: str = "") -> str:
        """The full URI of ``path`` (or of the base), for messages and for the broker."""


#: A file's content: bytes, or buffers (bytes / memoryviews of tensor memory) written in order,
#: so large tensors are uploaded straight from memory without first being joined.
Data = Union[bytes, bytearray, memoryview, Sequence[Any]]


def _chunks(data: Data) -> list[memoryview]:
    if isinstance(data, (bytes, bytearray, memoryview)):
        data = [data]
    return [memoryview(c).cast("B") for c in data if memoryview(c).nbytes]


def _joined(data: Data) -> bytes:
    chunks = _chunks(data)
    return bytes(chunks[0]) if len(chunks) == 1 else b"".join(chunks)


class _ViewReader(io.RawIOBase):
    """A seekable, read-only file over buffers that never copies them whole: the body of one S3 or GCS request.

    botocore reads it in small blocks (to hash it, then to send it) and seeks back to retry, so a part in flight
    costs a few blocks, not a copy of the part (boto3's transfer manager read each part into memory first).
    """

    def __init__(self, chunks: list[memoryview]):
        self._chunks = chunks
        self._starts = []
        offset = 0
        for c in chunks:
            self._starts.append(offset)
            offset += c.nbytes
        self._size = offset
        self._pos = 0

    @property
    def size(self) -> int:
        """Its length in bytes (a request's ``Content-Length``)."""
        return self._size

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def tell(self) -> int:
        return self._pos

    def seek(self, offset: int, whence: int = io.SEEK_SET) -> int:
        base = {io.SEEK_SET: 0, io.SEEK_CUR: self._pos, io.SEEK_END: self._size}[whence]
        if base + offset < 0:
            raise ValueError("negative seek position")
        self._pos = base + offset
        return self._pos

    def _views(self, n: int) -> list[memoryview]:
        """The next ``n`` bytes (fewer at the end) as views of the buffers; moves the position past them."""
        views = []
        i = bisect.bisect_right(self._starts, self._pos) - 1
        while n > 0 and 0 <= i < len(self._chunks) and self._pos < self._size:
            chunk, at = self._chunks[i], self._pos - self._starts[i]
            take = min(n, chunk.nbytes - at)
            views.append(chunk[at:at + take])
            n -= take
            self._pos += take
            i += 1
        return views

    def readinto(self, b) -> int:
        out = memoryview(b).cast("B")
        done = 0
        for view in self._views(out.nbytes):
            out[done:done + view.nbytes] = view
            done += view.nbytes
        return done

    def read(self, n: int | None = -1) -> bytes:
        return b"".join(self._views(self._size - self._pos if n is None or n < 0 else n))


S3_MIN_PART = 5 * 2**20  # every part but the last (EntityTooSmall at completion otherwise)
S3_MAX_PART = 5 * 2**30  # a part, and a single PUT
S3_MAX_PARTS = 10_000


def s3_part_size(size: int, wanted: int) -> int:
    """The part size for an S3 object of ``size`` bytes: ``wanted`` brought within S3's limits, as boto3's transfer
    manager did (s3transfer's ChunksizeAdjuster): at least 5 MiB, at most 5 GiB, and large enough for 10,000 parts."""
    return min(max(wanted, S3_MIN_PART, -(-size // S3_MAX_PARTS)), S3_MAX_PART)


def _parts(chunks: list[memoryview], part_size: int) -> list[list[memoryview]]:
    """``chunks`` cut into consecutive parts of ``part_size`` bytes (the last one shorter): views, no copies."""
    parts: list[list[memoryview]] = [[]]
    room = part_size
    for chunk in chunks:
        while chunk.nbytes:
            if room == 0:
                parts.append([])
                room = part_size
            take = min(room, chunk.nbytes)
            parts[-1].append(chunk[:take])
            chunk, room = chunk[take:], room - take
    return parts


@dataclass(frozen=True)
class TransferOptions:
    """How large objects are moved: part size and parts in flight."""

    part_size: int = DEFAULT_PART_SIZE
    concurrency: int = DEFAULT_CONCURRENCY
    #: Tries of each store call (0 is one try): a call that fails is tried again after ``retry_backoff_s``, then 4
    #: times that, and so on. On S3 each try also rides out a store it cannot reach for ``UNREACHABLE_RIDE_OUT_S``
    #: (about a minute in all by default); ``retries=0`` does not.
    retries: int = 3
    retry_backoff_s: float = 0.2

    def __post_init__(self) -> None:  # refused here, not as a TypeError mid-upload on the upload thread
        arguments.count("part_size", self.part_size)
        arguments.count("concurrency", self.concurrency)
        arguments.count("retries", self.retries, minimum=0)
        arguments.seconds("retry_backoff_s", self.retry_backoff_s, zero=True)


def open_storage(
    uri: str | os.PathLike[str],
    storage_options: dict[str, Any] | None = None,
    transfer: TransferOptions | None = None,
) -> Storage:
    """Open the store for a base URI (``s3://b/run``, ``gs://b/run``, ``/tmp/run``, ...).

    Raises ValueError for a URI that only looks like one: fsspec reads ``s3:/b/run``, ``s3//b/run`` or
    ``s3://`` as local paths, and a spot VM's local disk goes with the VM. Also for a scheme no store
    answers to (``s4://``, or ``https://``, which cannot be written), before fsspec is asked.
    The scheme is case-insensitive (``S3://`` is ``s3://``). ``uri`` may be an ``os.PathLike`` (a
    ``pathlib.Path``); anything else that is not a str is a TypeError (:func:`as_uri`)."""
    uri = as_uri(uri)
    check_uri(uri)
    m = _SCHEME.match(uri)
    if m and len(m.group(1)) > 1:
        uri = f"{m.group(1).lower()}:{m.group(2)}"
    uri = uri.rstrip("/")
    options = dict(storage_options or {})
    protocol = fsspec.core.split_protocol(uri)[0] or "file"
    if protocol in ("s3", "s3a"):
        return S3Storage(uri, options, transfer or TransferOptions())
    if protocol in ("gs", "gcs"):
        if os.environ.get("STORAGE_EMULATOR_HOST"):
            options.setdefault("token", "anon")
        try:
            import aiohttp  # gcsfs's HTTP client
        except ImportError:  # nor gcsfs, then: url_to_fs below says what to install
            aiohttp = None
        if aiohttp is not None and "requests_timeout" not in options:  # aiohttp's: 300 s a request, however large
            options["requests_timeout"] = aiohttp.ClientTimeout(
                total=None, sock_connect=CONNECT_TIMEOUT_S, sock_read=READ_TIMEOUT_S)
        if aiohttp is not None:  # gcsfs retries a request 6 times, saying nothing
            session = dict(options.get("session_kwargs") or {})
            session["trace_configs"] = [*session.get("trace_configs", []), _said_unanswered_gcs(uri)]
            options["session_kwargs"] = session
    try:
        fs, root = fsspec.core.url_to_fs(uri, **options)
    except ImportError as e:  # fsspec knows the scheme, but its package is not installed
        raise ValueError(f"{uri!r}: {protocol}:// needs a package that is not installed ({e})") from None
    except Exception as e:
        if protocol in ("gs", "gcs") and _gcs_credentials_error(e):
            raise OSError(_gcs_credentials_said(uri, options, e)) from None
        raise
    return FsspecStorage(fs, root.rstrip("/"), uri, transfer or TransferOptions())


_SCHEME = re.compile(r"^([A-Za-z][A-Za-z0-9+.-]*):(.*)$", re.S)
_BUCKET_STORES = ("s3", "s3a", "gs", "gcs")


def as_uri(uri: Any) -> str:
    """A base URI as a str: a str as it is, an ``os.PathLike`` (``pathlib.Path``) through ``os.fspath``.

    Raises:
        TypeError: anything else (a bytes path too: URIs are text), saying what is needed.
    """
    if isinstance(uri, os.PathLike):
        uri = os.fspath(uri)
    if not isinstance(uri, str):
        shown = repr(uri) if len(repr(uri)) <= 80 else repr(uri)[:77] + "..."
        raise TypeError(f"a checkpoint URI must be a str (s3://bucket/run, gs://bucket/run or a path) or an "
                        f"os.PathLike such as pathlib.Path, got {type(uri).__name__} {shown}")
    return uri


def check_uri(uri: str) -> None:
    """Refuse a checkpoint URI with a typo that would send checkpoints to the local disk (a TypeError for one
    that is not a str or an ``os.PathLike``: :func:`as_uri`)."""
    uri = as_uri(uri)
    if not uri.strip():
        raise ValueError("a checkpoint URI is needed (s3://bucket/run, gs://bucket/run or a path)")
    m = _SCHEME.match(uri)
    if m and len(m.group(1)) > 1:  # one letter is a Windows drive, not a scheme
        scheme, rest = m.group(1).lower(), m.group(2)
        if not rest.startswith("//"):
            raise ValueError(f"{uri!r}: a URL needs '//' after '{m.group(1)}:' (like {m.group(1)}://bucket/run)")
        if scheme in _BUCKET_STORES and not rest[2:].split("/", 1)[0]:
            raise ValueError(f"{uri!r}: no bucket (like {m.group(1)}://bucket/run)")
        if scheme in ("http", "https"):
            raise ValueError(f"{uri!r}: checkpoints cannot be written over plain HTTP; for an S3-compatible "
                             f"endpoint use s3://bucket/run with AWS_ENDPOINT_URL={scheme}://host:port")
        if scheme not in fsspec.available_protocols():
            raise ValueError(f"{uri!r}: unknown storage scheme '{m.group(1)}://' "
                             f"(use s3://bucket/run, gs://bucket/run, file:// or a local path)")
        return
    first = uri.split("/", 1)[0].lower()
    if first in _BUCKET_STORES and uri[len(first):].startswith("//"):
        raise ValueError(f"{uri!r}: looks like a URL missing ':' (like {first}://bucket/run)")


def _gcs_credentials_error(error: Exception) -> bool:
    """Whether gcsfs could not load the credentials it was told to use: google-auth's error (a key file that is not
    there: ``GOOGLE_APPLICATION_CREDENTIALS=/nope.json`` with ``token="google_default"``), or any raised in gcsfs's
    credentials module about a token it cannot read (a key file that is not JSON, a dict that is no credentials)."""
    try:
        from google.auth.exceptions import GoogleAuthError
    except ImportError:  # pragma: no cover - gcsfs brings it
        GoogleAuthError = ()  # noqa: N806
    if isinstance(error, GoogleAuthError):
        return True
    tb = error.__traceback__
    while tb is not None:  # raised in gcsfs's credentials module, or under it (json's error for a key file)
        if tb.tb_frame.f_code.co_filename.replace(os.sep, "/").endswith("gcsfs/credentials.py"):
            return True
        tb = tb.tb_next
    return False


def _gcs_credentials_said(uri: str, options: dict[str, Any], error: Exception) -> str:
    """A sentence for credentials gcsfs could not load, naming the checkpoint URI and the setting that chose them,
    with google-auth's own words: it was some 15 frames of gcsfs and google-auth traceback from ``Checkpointer()``,
    naming neither the URI nor the setting. A token given as a dict or credentials object is not printed."""
    token = options.get("token")
    key_file = os.environ.get("GOOGLE_APPLICATION_CREDENTIALS")
    if isinstance(token, str):
        setting = f"storage_options token {token!r}"
    elif token is None:
        setting = "no storage_options token"
    else:
        setting = f"storage_options token (a {type(token).__name__})"
    if token in (None, "google_default"):
        setting += (f", which reads GOOGLE_APPLICATION_CREDENTIALS={key_file}" if key_file else
                    ", which reads Application Default Credentials (GOOGLE_APPLICATION_CREDENTIALS is not set)")
    return (f"{uri}: the GCS credentials could not be loaded ({setting}): {type(error).__name__}: {str(error).rstrip('.')}; "
            f"point GOOGLE_APPLICATION_CREDENTIALS (or the token) at a service account key file (JSON) this process "
            f"can read")


def _said_unanswered_gcs(uri: str) -> Any:
    """An aiohttp trace that logs a GCS request that got no answer (a timeout, a connection refused or dropped), at
    most once every 10 s: gcsfs retries each request 6 times, logging only at DEBUG (and the last try's failure as
    a traceback, condensed to a line: :class:`_GcsfsCondensed`), so a store that hangs was silent for minutes.

    A request the client cancelled itself is no failure of the store (gcsfs's ``_info`` asks for an object and lists
    its prefix at once, and cancels the one it no longer needs): it was said as ``got no answer: CancelledError``
    after a listing or a read that went well."""
    import asyncio

    import aiohttp

    throttle = _Throttled(10.0)

    async def failed(session: Any, context: Any, params: Any) -> None:
        if isinstance(params.exception, asyncio.CancelledError):
            return
        if throttle.due():
            log.warning("%s: GCS %s %s got no answer: %s: %s; gcsfs tries again%s", uri, params.method,
                        params.url.path, type(params.exception).__name__, params.exception or "(no message)",
                        throttle.suppressed())

    trace = aiohttp.TraceConfig()
    trace.on_request_exception.append(failed)
    return trace


class _GcsfsCondensed(logging.Filter):
    """On gcsfs's logger while this library's GCS calls run: its ERROR with a traceback (``logger.exception``) when
    a request runs out of retries or fails for good becomes one WARNING line. During an outage the library then
    retries, or reports as a failed save, each gave some 60 lines of traceback, logged on fsspec's IO thread."""

    def __init__(self) -> None:
        super().__init__()
        self._lock = threading.Lock()
        self._calls = 0

    def __enter__(self) -> None:
        with self._lock:
            self._calls += 1

    def __exit__(self, *_: Any) -> None:
        with self._lock:
            self._calls -= 1

    def filter(self, record: logging.LogRecord) -> bool:
        if self._calls and record.levelno >= logging.ERROR and record.exc_info:
            error = record.exc_info[1]
            record.msg, record.args = "%s (%s; the checkpoint library says what it does next)", (
                record.getMessage(), type(error).__name__)
            record.exc_info = record.exc_text = None
            record.levelno, record.levelname = logging.WARNING, logging.getLevelName(logging.WARNING)
        return True


_gcsfs_condensed = _GcsfsCondensed()
logging.getLogger("gcsfs").addFilter(_gcsfs_condensed)


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
            "gs": "gcs",
            "gcs": "gcs",
            "memory": "memory",
        }.get(protocol, "generic")

    # -- the port -------------------------------------------------------------------

    def uri(self, path: str = "") -> str:
        return f"{self.base_uri}/{path}" if path else self.base_uri

    def write(self, path: str, data: Data) -> None:
        full = self._full(path)
        writer = {
            "local": self._write_local,
            "gcs": self._write_gcs,
        }.get(self._kind, self._write_generic)
        try:
            self._retrying(lambda: writer(full, data), path)
        except FileNotFoundError as e:
            if self._kind == "gcs":  # nothing to find on a write: the bucket is not there
                raise self._no_bucket(e) from e
            raise _naming(e, full if self._kind == "local" else self.uri(path)) from e
        except OSError as e:
            raise _naming(e, full if self._kind == "local" else self.uri(path)) from e

    def read(self, path: str) -> bytes:
        full = self._full(path)
        if self._kind == "gcs":
            call = lambda: self._fs.cat_file(  # noqa: E731
                full, concurrency=self._transfer.concurrency
            )
        else:
            call = lambda: self._fs.cat_file(full)  # noqa: E731
        try:
            return self._retrying(call, path)
        except OSError as e:
            raise _naming(e, full if self._kind == "local" else self.uri(path)) from e

    def local_path(self, path: str) -> str | None:
        """The file's own path on this machine (a local store), read in place by restore; else None."""
        return self._full(path) if self._kind == "local" else None

    @property
    def streams(self) -> bool:
        """Whether restore should :meth:`download` files to local disk: not for a local store (read in place,
        :meth:`local_path`) nor for ``memory://`` (its objects are in this process already)."""
        return self._kind not in ("local", "memory")

    def download(self, path: str, sink: Any) -> None:
        """Stream the object into ``sink`` (``write(bytes)``, and ``restart()`` before a retry) in blocks, without
        holding it whole."""
        full = self._full(path)

        def fetch() -> None:
            sink.restart()
            with self._fs.open(full, "rb", block_size=self._transfer.part_size) as f:
                while True:
                    chunk = f.read(_DOWNLOAD_BLOCK)
                    if not chunk:
                        return
                    sink.write(chunk)

        try:
            self._retrying(fetch, path)
        except OSError as e:
            raise _naming(e, self.uri(path)) from e

    def list(self) -> list[str]:
        self._fs.invalidate_cache()
        try:
            found = self._retrying(lambda: self._fs.find(self._root, detail=False))
        except FileNotFoundError as e:
            if self._kind == "gcs":  # gcsfs lists a missing prefix as empty, a missing bucket as not found
                raise self._no_bucket(e) from e
            return []
        except OSError as e:  # gcsfs's timeout, after its own retries, says nothing at all
            raise _naming(e, self.base_uri) from e
        prefix = self._root + "/"
        return sorted(p[len(prefix):] for p in found if p.startswith(prefix))

    def sizes(self, directory: str) -> dict[str, int]:
        full = self._full(directory.strip("/"))
        prefix = self._root + "/"
        if self._kind == "local":
            def scan() -> dict[str, int]:
                found = {}
                for dirpath, _, names in os.walk(full):
                    for name in names:
                        if not name.startswith(".tmp-"):  # a write in flight (renamed into place when whole)
                            path = os.path.join(dirpath, name)
                            found[path[len(prefix):].replace(os.sep, "/")] = os.stat(path).st_size
                return found

            try:
                return self._retrying(scan, directory)
            except OSError as e:
                raise _naming(e, full) from e
        self._fs.invalidate_cache()
        try:
            found = self._retrying(lambda: self._fs.find(full, detail=True), directory)
        except FileNotFoundError as e:
            if self._kind == "gcs":
                raise self._no_bucket(e) from e
            return {}
        except OSError as e:
            raise _naming(e, self.uri(directory)) from e
        return {p[len(prefix):]: int(info.get("size") or 0) for p, info in found.items()
                if p.startswith(full + "/") and info.get("type", "file") != "directory"}

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

    def _no_bucket(self, error: FileNotFoundError) -> OSError:
        bucket = self._root.split("/", 1)[0]
        return OSError(f"{self.base_uri}: bucket {bucket!r} does not exist, or these credentials cannot see it "
                       f"({type(error).__name__}: {error})")

    def _denied(self, error: OSError, path: str) -> PermissionError:
        """gcsfs's answer to a 403 (``OSError("Forbidden: <request URL>\n<GCS's message>")``) as a
        ``PermissionError`` naming the object and the bucket on one line, with what GCS said: it read
        ``OSError: Forbidden: http://…/upload/storage/v1/b/<bucket>/o`` and GCS's reason on the next line."""
        said = str(error)[len(_GCS_FORBIDDEN):].partition("\n")[2].strip()
        bucket = self._root.split("/", 1)[0]
        return PermissionError(f"{self.uri(path)}: GCS denied these credentials access to bucket {bucket!r} (403 "
                               f"Forbidden){': ' + ' '.join(said.split()) if said else ''}")

    def _full(self, path: str) -> str:
        return f"{self._root}/{path}"

    def _retrying(self, call, path: str = ""):
        """Run ``call``, retrying transient ``OSError`` s, each retry logged (a store that keeps failing is seen
        while it does). Not retried: a missing object, a permission, and a disk that is full, over a quota or a
        size limit, or read-only (``ENOSPC``, ``EDQUOT``, ``EFBIG``, ``EROFS``): a retry cannot pass, and backing
        off only delayed the error (and a preemption's last save)."""
        attempts = max(1, self._transfer.retries)
        started = time.monotonic()
        for attempt in range(attempts):
            try:
                if self._kind == "gcs":
                    with _gcsfs_condensed:
                        return call()
                return call()
            except (FileNotFoundError, IsADirectoryError, NotADirectoryError, PermissionError):
                raise
            except OSError as e:
                if self._kind == "gcs" and str(e).startswith(_GCS_FORBIDDEN):
                    raise self._denied(e, path) from e  # a permission: retried, it was refused the same way each time
                # the last try (gcsfs's TimeoutError: it has tried it 6 times already)
                if (attempt == attempts - 1 or e.errno in _PERMANENT_ERRNOS
                        or (self._kind == "gcs" and isinstance(e, TimeoutError))):
                    said = _unreachable_said(e, self.uri(path), started, attempt + 1)
                    if said is e:
                        raise
                    raise said from e
                delay = self._transfer.retry_backoff_s * (4**attempt)
                _log_retry(self.uri(path), e, delay, attempt + 2, attempts)
                time.sleep(delay)
        raise AssertionError("unreachable")

    def _write_local(self, full: str, data: Data) -> None:
        directory = os.path.dirname(full)
        os.makedirs(directory, exist_ok=True)
        tmp = os.path.join(directory, f".tmp-{uuid.uuid4().hex}")
        try:
            with open(tmp, "wb") as f:
                for chunk in _chunks(data):
                    f.write(chunk)
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, full)
        except BaseException as e:
            try:
                os.remove(tmp)
            except FileNotFoundError:
                pass
            if isinstance(e, OSError):  # f.write's "[Errno 27] File too large" named no file
                raise _naming(e, full) from e
            raise
        _fsync_dir(directory)

    def _write_gcs(self, full: str, data: Data) -> None:
        chunks = _chunks(data)
        size = sum(c.nbytes for c in chunks)
        part = self._transfer.part_size
        put = self._gcs_put if self._gcs_streams(full) else lambda name, views: self._fs.pipe_file(name, _joined(views))
        if size < 2 * part:
            put(full, chunks)
            return
        # Parallel composite upload: parts land as temporary objects, then one compose
        # call makes the destination appear whole. Temporary parts sit beside it and are
        # removed afterwards (or with the checkpoint directory if we die first).
        part = max(part, -(-size // _GCS_MAX_COMPOSE))
        parts = _parts(chunks, part)  # views of the caller's buffers: nothing copied
        token = uuid.uuid4().hex[:8]
        names = [f"{full}.part-{token}-{i:03d}" for i in range(len(parts))]
        with ThreadPoolExecutor(self._transfer.concurrency) as pool:
            # At most `concurrency` parts in flight: Executor.map takes its whole iterable at once (with gcsfs's
            # pipe_file, which needs bytes, that cut every part up front: a second copy of the file).
            in_flight: set[Future] = set()
            for name, views in zip(names, parts):
                if len(in_flight) >= self._transfer.concurrency:
                    done, in_flight = wait(in_flight, return_when=FIRST_COMPLETED)
                    for f in done:
                        f.result()
                in_flight.add(pool.submit(put, name, views))
            for f in in_flight:
                f.result()
        try:
            self._fs.merge(full, names)
        finally:
            try:
                self._fs.rm(names)
            except FileNotFoundError:
                pass

    def _gcs_streams(self, full: str) -> bool:
        """Whether an object can go up by :meth:`_gcs_put`: not to a zonal bucket, which gcsfs's experimental
        filesystem writes over gRPC (its own ``pipe_file`` then, which holds the object whole)."""
        zonal = getattr(self._fs, "_is_zonal_bucket", None)
        if zonal is None:
            return True
        from fsspec.asyn import sync

        return not sync(self._fs.loop, zonal, self._fs.split_path(full)[0])

    def _gcs_put(self, full: str, chunks: list[memoryview]) -> None:
        """One object in one request (GCS's multipart upload: its metadata, then its bytes, as gcsfs's
        ``simple_upload`` sends it), the body read from the caller's buffers in place, 64 KiB at a time, by aiohttp.

        gcsfs's ``pipe_file`` takes the object as one ``bytes`` (the library joined it: a copy), builds its body as
        ``head + data + tail`` (two more, one at a time) and hands it to aiohttp whole, whose transport kept what the
        socket had not taken yet (another): a 48 MiB file took 240 MiB above the process, the snapshot included, and
        a 200 MiB one in 32 MiB parts, 808 MiB. gcsfs's own retries of the request read the body again
        (``_request`` seeks it to 0); its ``consistency`` setting is checked as ``simple_upload`` does."""
        from urllib.parse import quote

        from gcsfs.checkers import get_consistency_checker

        bucket, key, _ = self._fs.split_path(full)
        head = ('--==0==\nContent-Type: application/json; charset=UTF-8\n\n' + json.dumps({"name": key})
                + '\n--==0==\nContent-Type: application/octet-stream\n\n').encode()
        body = _ViewReader([memoryview(head), *chunks, memoryview(b"\n--==0==--")])
        answer = self._fs.call("POST", f"{self._fs._location}/upload/storage/v1/b/{quote(bucket)}/o",
                               uploadType="multipart", data=body, json_out=True,
                               headers={"Content-Type": 'multipart/related; boundary="==0=="',
                                        "Content-Length": str(body.size)})
        checker = get_consistency_checker(getattr(self._fs, "consistency", None))
        for chunk in chunks:
            checker.update(chunk)
        checker.validate_json_response(answer)
        self._fs.invalidate_cache(self._fs._parent(full))

    def _write_generic(self, full: str, data: Data) -> None:
        self._fs.pipe_file(full, _joined(data))

    def _prune_empty_dirs(self, directories: set[str]) -> None:
        for d in sorted(directories, key=len, reverse=True):
            try:
                for leftover in os.listdir(d):
                    if leftover.startswith(".tmp-"):
                        os.remove(os.path.join(d, leftover))
                os.rmdir(d)
            except OSError:
                pass


class S3Storage:
    """:class:`Storage` on S3 or any S3-compatible endpoint, through boto3."""

    def __init__(self, uri: str, options: dict[str, Any], transfer: TransferOptions):
        import boto3
        from boto3.s3.transfer import TransferConfig
        from botocore.config import Config

        self.base_uri = uri
        bucket_and_key = uri.split("://", 1)[1]
        self._bucket, _, self._prefix = bucket_and_key.partition("/")
        self._transfer = transfer
        client_kwargs = dict(options.pop("client_kwargs", {}) or {})
        for ours, theirs in (("endpoint_url", "endpoint_url"), ("key", "aws_access_key_id"),
                             ("secret", "aws_secret_access_key"), ("token", "aws_session_token")):
            if options.get(ours) is not None:
                client_kwargs.setdefault(theirs, options.pop(ours))
        if options:
            raise ValueError(f"unsupported s3 storage options: {sorted(options)}")
        pool = max(10, transfer.concurrency * 4 + 4)
        config = Config(max_pool_connections=pool, retries={"mode": "standard"},
                        connect_timeout=CONNECT_TIMEOUT_S, read_timeout=READ_TIMEOUT_S)
        theirs = client_kwargs.pop("config", None)
        if theirs is not None:  # the user's settings win; ours fill in the rest (a second config= was a TypeError)
            if not isinstance(theirs, Config):
                raise TypeError(f"storage_options['client_kwargs']['config'] must be a botocore.config.Config, "
                                f"got {type(theirs).__name__}")
            config = config.merge(theirs)
        self._client = boto3.session.Session().client("s3", config=config, **client_kwargs)
        self._unanswered = _Throttled(10.0)
        self._quick = threading.local()  # .on: this thread's requests are not ridden out (a failed upload's abort)
        self._client.meta.events.register("needs-retry.s3", self._said_retry)
        self._config = TransferConfig(  # downloads (boto3's transfer manager); uploads are our own, see write
            multipart_threshold=2 * transfer.part_size, multipart_chunksize=transfer.part_size,
            max_concurrency=transfer.concurrency, use_threads=True,
        )
        # as boto3's transfer manager does: a CRC32 of each request, unless the client is told to send checksums
        # only where required (some S3-compatible stores refuse them: AWS_REQUEST_CHECKSUM_CALCULATION)
        when = getattr(self._client.meta.config, "request_checksum_calculation", None)
        self._checksum = {"ChecksumAlgorithm": "CRC32"} if when == "when_supported" else {}
        from botocore.exceptions import (BotoCoreError, ClientError, ConnectionClosedError, EndpointConnectionError,
                                         SSLError)

        self._errors = (BotoCoreError, ClientError)
        # no connection (refused, not made in time: ConnectTimeoutError is one) or one dropped before the answer; a
        # TLS handshake refused is no outage. A read timeout (a store that takes the request and hangs) is not either:
        # botocore's and the library's tries of READ_TIMEOUT_S each bound it (see docs/checkpoint.md)
        self._unreachable = (EndpointConnectionError, ConnectionClosedError)
        self._not_unreachable = (SSLError,)

    def uri(self, path: str = "") -> str:
        return f"{self.base_uri}/{path}" if path else self.base_uri

    def _said_retry(self, caught_exception: BaseException | None = None, attempts: int = 0,
                    operation: Any = None, request_dict: dict[str, Any] | None = None, **_: Any) -> float | None:
        """botocore's hook after each try of a request: a try that got no answer (a timeout, a connection refused
        or dropped) is logged, at most once every 10 s, so a store that hangs is seen while botocore retries it.

        Returns the seconds to wait before trying a store that could not be reached again (:meth:`_ride_out`), else
        None. botocore takes the first handler's answer that is not None: its own retry handler's, while it has tries
        left (3 in all), then this one's."""
        if caught_exception is None:
            return None
        delay = self._ride_out(caught_exception, attempts, request_dict)
        if self._unanswered.due():
            name = getattr(operation, "name", "request")
            more = f"; trying again for up to {delay[1]:.0f} s more" if delay else ""
            log.warning("%s: S3 %s got no answer on try %d: %s: %s%s%s", self.base_uri, name, attempts,
                        type(caught_exception).__name__, caught_exception, more, self._unanswered.suppressed())
        return delay[0] if delay else None

    def _ride_out(self, error: BaseException, attempts: int,
                  request_dict: dict[str, Any] | None) -> tuple[float, float] | None:
        """(seconds to wait, seconds left) before the next try of a request whose store could not be reached, for
        up to ``UNREACHABLE_RIDE_OUT_S`` from its first such failure; None once that has passed, for any other
        error, and with ``retries=0``. The time is kept in the request's own context, so each request (and each of
        the library's tries of a call, a new request) has the whole of it."""
        if (self._transfer.retries == 0 or not isinstance(error, self._unreachable)
                or isinstance(error, self._not_unreachable) or getattr(self._quick, "on", False)):
            return None
        context = (request_dict or {}).get("context")
        if context is None:
            return None
        now = time.monotonic()
        since = context.setdefault("checkpoint_unreachable_since", now)
        wait_s = unreachable_wait(since, now, attempts)
        return None if wait_s is None else (wait_s, since + UNREACHABLE_RIDE_OUT_S - now)

    def _key(self, path: str) -> str:
        return f"{self._prefix}/{path}" if self._prefix else path

    def write(self, path: str, data: Data) -> None:
        """One PUT, or a multipart upload of ``part_size`` parts (kept within S3's limits: ``s3_part_size``),
        ``concurrency`` in flight, whose request bodies read the caller's buffers in place. boto3's ``upload_fileobj``
        copied each part into memory first, up to 10 of them — a 192 MiB file was held twice. A failed upload is
        aborted and tried again from the start."""
        chunks = _chunks(data)
        size = sum(c.nbytes for c in chunks)
        key = self._key(path)
        part = s3_part_size(size, self._transfer.part_size)
        if size < 2 * part and size <= S3_MAX_PART:
            self._call(lambda: self._client.put_object(Bucket=self._bucket, Key=key, Body=_ViewReader(chunks),
                                                       **self._checksum), path)
        else:
            self._call(lambda: self._multipart(key, _parts(chunks, part)), path)

    def _multipart(self, key: str, parts: list[list[memoryview]]) -> None:
        upload_id = self._client.create_multipart_upload(Bucket=self._bucket, Key=key, **self._checksum)["UploadId"]
        algorithm = self._checksum.get("ChecksumAlgorithm")

        def put(number: int, part: list[memoryview]) -> dict[str, Any]:
            answer = self._client.upload_part(Bucket=self._bucket, Key=key, UploadId=upload_id, PartNumber=number,
                                              Body=_ViewReader(part), **self._checksum)
            done = {"ETag": answer["ETag"], "PartNumber": number}
            if algorithm and f"Checksum{algorithm}" in answer:
                done[f"Checksum{algorithm}"] = answer[f"Checksum{algorithm}"]
            return done

        try:
            with ThreadPoolExecutor(self._transfer.concurrency) as pool:
                done = list(pool.map(put, range(1, len(parts) + 1), parts))
            self._client.complete_multipart_upload(Bucket=self._bucket, Key=key, UploadId=upload_id,
                                                   MultipartUpload={"Parts": done})
        except BaseException:
            # the parts uploaded would otherwise be stored (and billed) until a lifecycle rule ends them. Not ridden
            # out (botocore's own tries only, a few seconds): a part that failed has ridden out the store's absence
            # already, and the abort's own 20 s made a save in an outage fail after 82 s, not the minute said
            self._quick.on = True
            try:
                self._client.abort_multipart_upload(Bucket=self._bucket, Key=key, UploadId=upload_id)
            except Exception:  # noqa: BLE001 - the upload's own error is the one to raise
                pass
            finally:
                self._quick.on = False
            raise

    def read(self, path: str) -> bytes:
        def get() -> bytes:
            body = self._client.get_object(Bucket=self._bucket, Key=self._key(path))["Body"]
            try:
                return body.read()
            finally:
                body.close()

        return self._call(get, path)

    streams = True

    def local_path(self, path: str) -> str | None:
        return None

    def download(self, path: str, sink: Any) -> None:
        """Stream the object into ``sink`` (``write(bytes)``, ``restart()`` before each try) in blocks: one GET,
        read as it arrives, so the object is never held whole (``read`` holds it, and its parts, at once)."""
        def fetch() -> None:
            sink.restart()
            body = self._client.get_object(Bucket=self._bucket, Key=self._key(path))["Body"]
            try:
                for chunk in body.iter_chunks(_DOWNLOAD_BLOCK):
                    sink.write(chunk)
            finally:
                body.close()

        self._call(fetch, path)

    def list(self) -> list[str]:
        prefix = f"{self._prefix}/" if self._prefix else ""

        def keys() -> list[str]:
            pages = self._client.get_paginator("list_objects_v2").paginate(Bucket=self._bucket, Prefix=prefix)
            return [o["Key"][len(prefix):] for page in pages for o in page.get("Contents", [])]

        return sorted(self._call(keys, ""))

    def sizes(self, directory: str) -> dict[str, int]:
        prefix = f"{self._prefix}/" if self._prefix else ""
        within = f"{prefix}{directory.strip('/')}/"

        def objects() -> dict[str, int]:
            pages = self._client.get_paginator("list_objects_v2").paginate(Bucket=self._bucket, Prefix=within)
            return {o["Key"][len(prefix):]: int(o["Size"]) for page in pages for o in page.get("Contents", [])}

        return self._call(objects, directory)

    def delete(self, paths: list[str]) -> None:
        """Delete in requests of at most 1,000 keys. S3 answers a DeleteObjects request 200 even when it deleted
        none of them, listing each key it could not delete (``Errors``): those are an ``OSError`` naming them, and
        no later batch is sent. They were ignored: a ``COMMITTED`` marker S3 kept while the data beside it went
        left a committed but partial checkpoint (:func:`checkpoint.commit.delete_entries` deletes each marker
        first, in a request of its own, and stops at its error). A key already gone is not an error."""
        for i in range(0, len(paths), 1000):
            batch = [{"Key": self._key(p)} for p in paths[i:i + 1000]]
            answer = self._call(lambda: self._client.delete_objects(
                Bucket=self._bucket, Delete={"Objects": batch, "Quiet": True}), "")
            failed = [e for e in (answer or {}).get("Errors", []) if e.get("Code") != "NoSuchKey"]
            if failed:
                prefix = f"{self._prefix}/" if self._prefix else ""
                shown = "; ".join(f"{self.uri(e.get('Key', '')[len(prefix):])}: {e.get('Code')} {e.get('Message', '')}"
                                  .rstrip() for e in failed[:5])
                more = f" (and {len(failed) - 5} more)" if len(failed) > 5 else ""
                raise OSError(f"{self.base_uri}: S3 did not delete {len(failed)} of {len(batch)} object(s): "
                              f"{shown}{more}")

    def _call(self, call, path: str):
        """Run a boto3 call; missing objects become FileNotFoundError, the rest OSError after retries (a store
        that could not be reached says for how long: each try rode it out, :meth:`_ride_out`)."""
        attempts = max(1, self._transfer.retries)
        started = time.monotonic()
        for attempt in range(attempts):
            try:
                return call()
            except self._errors as e:
                # a timeout or a dropped connection has ``response = None`` (a ClientError has the answer)
                code = (getattr(e, "response", None) or {}).get("Error", {}).get("Code", "")
                if code in ("NoSuchKey", "404", "NotFound"):
                    raise FileNotFoundError(self.uri(path)) from e
                if code in ("NoSuchBucket", "AccessDenied", "InvalidAccessKeyId") or attempt == attempts - 1:
                    unreachable = isinstance(e, self._unreachable) and not isinstance(e, self._not_unreachable)
                    said = (f" (the store could not be reached for {time.monotonic() - started:.0f} s, over "
                            f"{attempts} {'try' if attempts == 1 else 'tries'}: is the endpoint right, and up?)"
                            if unreachable else "")
                    raise OSError(f"{self.uri(path)}: {e}{said}") from e
                delay = self._transfer.retry_backoff_s * (4**attempt)
                _log_retry(self.uri(path), e, delay, attempt + 2, attempts)
                time.sleep(delay)
        raise AssertionError("unreachable")


def _unreachable(error: BaseException) -> bool:
    """Whether ``error`` says the store could not be reached (a connection refused, dropped or timed out): Python's
    own (a local mount's), or aiohttp's (gcsfs's)."""
    if isinstance(error, (ConnectionError, TimeoutError)):
        return True
    try:
        import aiohttp
    except ImportError:  # pragma: no cover - gcsfs brings it
        return False
    return isinstance(error, (aiohttp.ClientConnectionError, aiohttp.ServerTimeoutError))


def _unreachable_said(error: OSError, where: str, started: float, tries: int) -> OSError:
    """``error``, once a call's last try failed; one that says the store could not be reached also says for how long
    and over how many tries, as S3's does (:meth:`S3Storage._call`), in an ``OSError`` naming ``where``."""
    if not _unreachable(error):
        return error
    said = (f" (the store could not be reached for {time.monotonic() - started:.0f} s, over {tries} "
            f"{'try' if tries == 1 else 'tries'}: is the endpoint right, and up?)")
    return OSError(f"{where}: {type(error).__name__}: {error}{said}")


def unreachable_wait(since: float, now: float, attempts: int) -> float | None:
    """Seconds to wait before try ``attempts + 1`` of a request whose store could not be reached from ``since`` to
    ``now`` (monotonic seconds): 1 s after tries 1 and 2, then 2, 4, then ``UNREACHABLE_BACKOFF_MAX_S`` each time,
    never past ``since + UNREACHABLE_RIDE_OUT_S``; None once that has come: the request fails. Pure (no clock)."""
    left = since + UNREACHABLE_RIDE_OUT_S - now
    if left <= 0:
        return None
    return min(left, UNREACHABLE_BACKOFF_MAX_S, 2.0 ** min(max(0, attempts - 2), 16))


def _naming(error: OSError, where: str) -> OSError:
    """``error`` if it names a file already (but a temporary one), else the same kind of error naming ``where``:
    a write's ``OSError`` keeps the path it was for (``f.write`` raises ``[Errno 28] No space left on device``
    with no file at all)."""
    named = error.filename
    if named is not None and not os.path.basename(str(named)).startswith(".tmp-"):
        return error
    if error.errno is not None:  # OSError(errno, ...) is that errno's own subclass (ENOENT: FileNotFoundError)
        return OSError(error.errno, error.strerror or os.strerror(error.errno), where)
    if where in str(error):
        return error
    said = f"{where}: {type(error).__name__}" + (f": {error}" if str(error) else "")
    try:  # the same class (a FileNotFoundError stays one), with the path in its message
        return type(error)(said)
    except Exception:  # noqa: BLE001 - a class that wants other arguments
        return OSError(said)


class _Throttled:
    """``due()`` at most once every ``every_s`` seconds (thread-safe); ``suppressed()`` says how many it refused."""

    def __init__(self, every_s: float):
        self._every = every_s
        self._lock = threading.Lock()
        self._last = float("-inf")
        self._skipped = 0
        self._said_skipped = 0

    def due(self) -> bool:
        with self._lock:
            now = time.monotonic()
            if now - self._last < self._every:
                self._skipped += 1
                return False
            self._last, self._said_skipped, self._skipped = now, self._skipped, 0
            return True

    def suppressed(self) -> str:
        return f" ({self._said_skipped} more like it not logged)" if self._said_skipped else ""


def _log_retry(where: str, error: BaseException, delay: float, next_try: int, tries: int) -> None:
    """A warning that a request failed and is tried again: a store that fails or hangs shows in the log while it
    does, not only when the last try gives up minutes later."""
    log.warning("%s: %s: %s; trying again in %.1f s (try %d of %d)", where, type(error).__name__, error, delay,
                next_try, tries)


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
