"""A verified file's bytes, read at offsets: in memory, or in a local file (the store's own, or a spooled copy).

Restore verifies every file of a checkpoint before anything is decoded, and then reads tensors one at a time from
these: a checkpoint on local disk is hashed and read in place; one on S3 or GCS is streamed to a temporary file
while it is hashed (:func:`checkpoint.restore.load_verified`), so a restore no longer holds the whole checkpoint in
memory next to the tensors decoded from it.
"""

from __future__ import annotations

import hashlib
import os
import tempfile
import weakref
from typing import Any

from checkpoint.manifest import FileEntry

#: How much is read (and hashed) at a time.
CHUNK = 2**20


class MemoryBlob:
    """Bytes already in memory (``memory://``, or a store that can only hand its objects over whole)."""

    def __init__(self, data: Any):
        self._view = memoryview(data).cast("B")
        self.size = self._view.nbytes

    def readinto(self, offset: int, out: memoryview) -> None:
        out = memoryview(out).cast("B")
        if offset + out.nbytes > self.size:
            raise ValueError(f"read past the end ({offset + out.nbytes} > {self.size} bytes)")
        out[:] = self._view[offset:offset + out.nbytes]

    def read(self, offset: int, n: int) -> bytes:
        return bytes(self._view[offset:offset + n])

    def describe(self) -> FileEntry:
        return FileEntry(self.size, hashlib.sha256(self._view).hexdigest())

    def close(self) -> None:
        self._view.release()


class FileBlob:
    """An open local file, read with ``pread``: the store's own file (kept open, so a file replaced or deleted
    after it was hashed is still the one read), or an unnamed temporary file holding a downloaded copy."""

    def __init__(self, fd: int):
        self._fd = fd
        self.size = os.fstat(fd).st_size
        self._closer = weakref.finalize(self, os.close, fd)  # closed when dropped, without a ResourceWarning

    @classmethod
    def open(cls, path: str) -> FileBlob:
        return cls(os.open(path, os.O_RDONLY | getattr(os, "O_CLOEXEC", 0)))

    def readinto(self, offset: int, out: memoryview) -> None:
        out = memoryview(out).cast("B")
        done = 0
        while done < out.nbytes:
            n = os.preadv(self._fd, [out[done:]], offset + done)
            if n == 0:
                raise ValueError(f"read past the end ({offset + out.nbytes} > {self.size} bytes)")
            done += n

    def read(self, offset: int, n: int) -> bytes:
        out = bytearray(max(0, min(n, self.size - offset)))
        self.readinto(offset, memoryview(out))
        return bytes(out)

    def describe(self) -> FileEntry:
        """Size and sha256, read through a buffer of :data:`CHUNK` bytes."""
        h = hashlib.sha256()
        buf = bytearray(CHUNK)
        view = memoryview(buf)
        offset = 0
        while True:
            n = os.preadv(self._fd, [view], offset)
            if n == 0:
                break
            h.update(view[:n])
            offset += n
        return FileEntry(offset, h.hexdigest())

    def close(self) -> None:
        self._closer()


class Spool:
    """An unnamed temporary file a download is written to, hashed as it is written; ``restart()`` empties it for
    a download tried again from its start. The file is gone when closed or when the process dies."""

    def __init__(self, directory: str | None):
        self._file = tempfile.TemporaryFile(dir=directory, buffering=0)
        self._hash = hashlib.sha256()
        self._size = 0

    def write(self, data: Any) -> None:
        view = memoryview(data).cast("B")
        while view.nbytes:
            n = self._file.write(view)
            self._hash.update(view[:n])
            view = view[n:]
            self._size += n

    def restart(self) -> None:
        self._file.seek(0)
        self._file.truncate()
        self._hash = hashlib.sha256()
        self._size = 0

    def finish(self) -> tuple[FileBlob, FileEntry]:
        """The blob to read the file back from, and what was written (size, sha256)."""
        blob = FileBlob(os.dup(self._file.fileno()))
        self._file.close()
        return blob, FileEntry(self._size, self._hash.hexdigest())

    def close(self) -> None:
        self._file.close()
