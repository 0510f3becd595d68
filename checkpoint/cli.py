"""``checkpoint ls URI`` and ``checkpoint verify URI``. Parses, calls, renders; no rules here.

``ls`` lists every checkpoint directory under a base URI with its state (committed, incomplete, or
damaged with why: by :func:`checkpoint.restore.read_listed`, restore's own commit rule and the listing's names and
sizes against the manifest, with no file hashed), step, creation time and size. ``verify`` checks files against
manifests — every committed checkpoint under a base URI, or one checkpoint given by its own URI — and exits 1 if any
fails (naming it and why), 0 if all verify, 2 if the store cannot be read or a local path does not exist.
"""

from __future__ import annotations

import argparse
import datetime as dt
import os
import sys
from concurrent.futures import ThreadPoolExecutor
from typing import TextIO

from checkpoint import layout
from checkpoint.errors import CorruptCheckpoint
from checkpoint.restore import NOT_COMMITTED, load_verified, read_listed
from checkpoint.storage import Storage, open_storage


DESCRIPTION = """\
List and verify the checkpoints a training script wrote with the checkpoint library
(checkpoint.Checkpointer), under a base URI: a local directory, s3://… or gs://…."""
EPILOG = """\
examples:
  checkpoint ls s3://bucket/runs/j-3fa9c1b2e0
      every checkpoint directory, newest first: step, created, size, and state
      (committed; incomplete: a save not finished; damaged: restore skips it, and why)
  checkpoint verify s3://bucket/runs/j-3fa9c1b2e0
      hash every committed checkpoint against its manifest (exit 1 if any fails)
  checkpoint verify s3://bucket/runs/j-3fa9c1b2e0/step-000000000320-1733011200123
      just that one checkpoint

exit status: 0 all well, 1 a checkpoint failed verification, 2 the store could not be read
(or the path does not exist).
"""


def main(argv: list[str] | None = None, out: TextIO | None = None) -> int:
    out = out or sys.stdout
    parser = argparse.ArgumentParser(prog="checkpoint", description=DESCRIPTION, epilog=EPILOG,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True, metavar="{ls,verify}")
    ls = sub.add_parser("ls", help="list the checkpoints under a base URI, with their state",
                        description="List every checkpoint directory under a base URI, newest first.")
    ls.add_argument("uri", help="the run's checkpoint base (BROKER_CHECKPOINT_URI), e.g. s3://bucket/runs/j-1")
    verify = sub.add_parser("verify", help="verify checkpoints (a base URI or one checkpoint URI)",
                            description="Hash checkpoints against their manifests; exit 1 if any fails.")
    verify.add_argument("uri", help="a checkpoint base (every committed checkpoint) or one checkpoint's own URI")
    args = parser.parse_args(argv)
    try:
        if args.command == "ls":
            try:
                parent, _ = layout.split_checkpoint_uri(args.uri)
            except ValueError:
                return _ls(open_storage(args.uri), out)
            # taken as a base, a checkpoint holds no checkpoints: "no checkpoints under …" and 0 read as an empty run
            print(f"error: {args.uri} is a checkpoint, not a checkpoint base: list its base, checkpoint ls {parent} "
                  f"(or check this one: checkpoint verify {args.uri})", file=sys.stderr)
            return 2
        return _verify(args.uri, out)
    except BrokenPipeError:
        # the reader went away (`checkpoint ls URI | head -2`): stop quietly, as Unix tools do, not "error: [Errno 32]
        # Broken pipe" and status 2 as though the store had failed; stdout points at /dev/null for the final flush
        if out is sys.stdout:
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 141  # 128 + SIGPIPE, what a shell reports for a tool killed by it
    except (OSError, ValueError) as e:  # a store that cannot be reached, a URL that cannot be read
        print(f"error: {e}", file=sys.stderr)
        return 2


#: Manifests ``ls`` reads at once: one after another, 320 checkpoints on S3 took 9 s to list. ``verify`` still goes
#: one checkpoint at a time: each is downloaded whole to local disk to be hashed, and several at once needed that
#: much more disk.
READERS = 8


def _ls(storage: Storage, out: TextIO) -> int:
    paths = storage.list()
    entries = layout.scan(paths)
    if not entries:
        print(f"no checkpoints under {storage.uri()}{' (it does not exist)' if _gone(storage, paths) else ''}",
              file=out)
        return 0

    def state_of(e: layout.Entry) -> tuple[str, str, str]:
        """(size, state, why not committed): the commit checked as restore checks it, and its files listed against
        the manifest (:func:`read_listed`): a file deleted or of another size is damaged, as restore skips it."""
        if not e.committed:
            return "", "incomplete", ""
        try:
            manifest = read_listed(storage, e.id)
        except CorruptCheckpoint as why:  # an empty commit marker was "committed" here, and skipped by restore
            return "?", "incomplete" if str(why) == NOT_COMMITTED else "damaged", f"  ({why})"
        return _human(manifest.total_bytes), "committed", ""

    newest_first = list(reversed(entries))
    print(f"{'STEP':>10}  {'CREATED (UTC)':<19}  {'SIZE':>10}  {'STATE':<10}  URI", file=out)
    pool = ThreadPoolExecutor(READERS)
    try:  # in order, each row printed once it and those above it are read
        for e, (size, state, why) in zip(newest_first, pool.map(state_of, newest_first)):
            created = dt.datetime.fromtimestamp(e.id.created_ms / 1000, dt.timezone.utc).strftime("%Y-%m-%d %H:%M:%S")
            print(f"{e.id.step:>10}  {created:<19}  {size:>10}  {state:<10}  {storage.uri(e.name)}{why}", file=out)
    finally:  # a reader gone (`| head -2`) or a store failing: the reads not started are not made
        pool.shutdown(cancel_futures=True)
    return 0


def _verify(uri: str, out: TextIO) -> int:
    try:
        parent, cid = layout.split_checkpoint_uri(uri)
    except ValueError:
        storage = open_storage(uri)
        paths = storage.list()
        targets = layout.committed_newest_first(layout.scan(paths))
        if not targets and _gone(storage, paths):  # nothing failed verification: there is nothing there (exit 2)
            print(f"error: no committed checkpoints under {storage.uri()} (it does not exist)", file=sys.stderr)
            return 2
        if not targets:
            print(f"no committed checkpoints under {storage.uri()}", file=out)
            return 1
        ids = [e.id for e in targets]
    else:
        storage, ids = open_storage(parent), [cid]
        if _gone(storage, [], cid.name):
            print(f"error: {storage.uri(cid.name)} is no checkpoint (it does not exist)", file=sys.stderr)
            return 2
    failed = 0
    for cid in ids:
        try:
            loaded = load_verified(storage, cid)
        except CorruptCheckpoint as e:
            failed += 1
            print(f"CORRUPT  {storage.uri(cid.name)}: {e}", file=out)
        else:
            loaded.close()  # its files (a remote checkpoint's downloaded copies) are not needed past the check
            n = len(loaded.manifest.files)
            print(f"OK       {loaded.uri} (step {cid.step}, {n} files, "
                  f"{_human(loaded.manifest.total_bytes)})", file=out)
    print(f"{len(ids) - failed} of {len(ids)} verified", file=out)
    return 1 if failed else 0


def _gone(storage: Storage, paths: list[str], path: str = "") -> bool:
    """Whether ``path`` under a local store does not exist, its listing (``paths``) empty: a mistyped path, told
    apart from an empty run. A remote store has no directories: a prefix with nothing under it is only empty."""
    local = storage.local_path(path) if hasattr(storage, "local_path") else None
    return not paths and local is not None and not os.path.exists(local)


def _human(n: int) -> str:
    size = float(n)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if size < 1024 or unit == "GiB":
            return f"{size:.0f} {unit}" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1024
    return f"{n} B"


if __name__ == "__main__":
    raise SystemExit(main())
