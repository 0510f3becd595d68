"""Task secrets sealed at rest: a job's ``secrets:`` values are kept in the store encrypted.

Anyone who can read the SQLite file, a Redis dump or a backup would otherwise read every team's
API keys. The values are sealed at submit with AES-GCM under the broker's key and opened only
when an attempt is launched, for the launch request handed to the launcher; the names stay
readable (the store, views and events never hold a value).

A sealed value is text (a stored spec still parses as a task): ``sealed:v1:<key id>:<base64 of
nonce + ciphertext>``. The key id (the first 8 hex digits of the key's SHA-256) says which key
sealed it, so a broker given a new key (``BROKER_SECRETS_KEY``) still opens what the old one
sealed when the old key is listed in ``BROKER_SECRETS_OLD_KEYS``. The job id and the secret's
name are the cipher's associated data: a sealed value copied into another job, or under
another name, does not open. A value that is not sealed is one stored before sealing existed,
and is used as it is.

The key: ``BROKER_SECRETS_KEY`` (or ``secrets_key`` in the config file), 32 random bytes in
base64; when none is set, a key file created once in the broker's data directory (mode 0600),
which serves every broker on that host. Brokers on several hosts must share one key
(docs/deploy.md).
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import json
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import AESGCM

PREFIX = "sealed:v1:"
KEY_FILE = "secrets-key"
KEY_BYTES = 32
NONCE_BYTES = 12
SETTING = "BROKER_SECRETS_KEY"
OLD_SETTING = "BROKER_SECRETS_OLD_KEYS"


class KeyInvalid(ValueError):
    """A key given in a setting is not one; the message names the setting."""


class Unsealable(Exception):
    """A job's secrets cannot be opened by this broker: the message says why and names the setting."""


def parse_key(text: str, where: str) -> bytes:
    """A key as the settings give it: 32 bytes in base64 (standard or URL-safe, as ``openssl rand
    -base64 32`` or Fernet's ``generate_key`` print it)."""
    cleaned = "".join(str(text).split()).replace("-", "+").replace("_", "/")
    try:
        key = base64.b64decode(cleaned + "=" * (-len(cleaned) % 4), validate=True)
    except (binascii.Error, ValueError):
        key = b""
    if len(key) != KEY_BYTES:
        raise KeyInvalid(f"{where}: must be {KEY_BYTES} random bytes in base64 (make one with `openssl rand -base64 32`)")
    return key


def new_key_text() -> str:
    return base64.urlsafe_b64encode(os.urandom(KEY_BYTES)).decode()


def key_id(key: bytes) -> str:
    return hashlib.sha256(key).hexdigest()[:8]


def data_dir_key(data_dir: Path, *, create: bool) -> bytes | None:
    """The key file in the broker's data directory: read it, or (``create``) make it once.

    It is written whole to a file of its own (mode 0600) and then linked into place, which fails if
    another broker on this host linked its own first: every broker reads the one key, never half of one."""
    path = Path(data_dir) / KEY_FILE
    if path.exists() or not create:
        return _read_key_file(path) if path.exists() else None
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)  # a data dir made here (`broker worker`) is private too
    tmp = path.with_name(f".{KEY_FILE}.{os.getpid()}.{os.urandom(4).hex()}")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        with os.fdopen(fd, "w") as fh:
            fh.write(new_key_text() + "\n")
            fh.flush()
            os.fsync(fh.fileno())
        try:
            os.link(tmp, path)
        except FileExistsError:
            pass  # another broker on this host made it first: use theirs
    finally:
        tmp.unlink(missing_ok=True)
    return _read_key_file(path)


def _read_key_file(path: Path) -> bytes:
    try:
        return parse_key(path.read_text(), f"{path} (the key file {SETTING} defaults to)")
    except OSError as exc:
        raise KeyInvalid(f"{path}: cannot read the secrets key file ({exc.strerror})") from None


@dataclass(frozen=True)
class Sealer:
    """Seals with ``key``; opens what ``key`` or one of ``old`` sealed."""

    key: bytes
    old: tuple[bytes, ...] = ()
    source: str = SETTING  # where the key came from, for messages

    def _keys(self) -> dict[str, bytes]:
        return {key_id(k): k for k in (*reversed(self.old), self.key)}

    def seal(self, job_id: str, name: str, value: Any) -> str:
        nonce = os.urandom(NONCE_BYTES)
        # as JSON: a number comes back a number (an Idempotency-Key retry compares the task as given)
        data = AESGCM(self.key).encrypt(nonce, json.dumps(value).encode("utf-8"), _aad(job_id, name))
        return f"{PREFIX}{key_id(self.key)}:{base64.urlsafe_b64encode(nonce + data).decode()}"

    def open(self, job_id: str, name: str, text: str) -> Any:
        _, _, rest = text.partition(PREFIX)
        kid, _, body = rest.partition(":")
        key = self._keys().get(kid)
        if key is None:
            raise Unsealable(f"secrets.{name} was sealed with a key this broker does not have (key id {kid}; its own "
                             f"is {key_id(self.key)}, from {self.source}): set {SETTING} to the key of the broker that "
                             f"accepted the job, or list that key in {OLD_SETTING}, then resume the job")
        try:
            raw = base64.urlsafe_b64decode(body.encode())
            return json.loads(AESGCM(key).decrypt(raw[:NONCE_BYTES], raw[NONCE_BYTES:], _aad(job_id, name)))
        except (InvalidTag, binascii.Error, ValueError):  # json's errors are ValueErrors too
            raise Unsealable(f"secrets.{name} does not open with the key {kid} it names: its stored value was altered "
                             "or copied from another job; submit the job again with the secret") from None


def _aad(job_id: str, name: str) -> bytes:
    return f"{job_id}\x00{name}".encode("utf-8")


def sealer_for(settings: Any, *, create: bool = False) -> Sealer | None:
    """The sealer of a broker's settings (``secrets_key``, ``secrets_old_keys``, ``data_dir``): its
    ``BROKER_SECRETS_KEY``, else the data directory's key file (made now with ``create``: at submit).
    With a key set, a key file left from before still opens the jobs it sealed, until it is deleted
    (:func:`key_file_left`: ``broker serve`` warns of it at start)."""
    if settings.secrets_key is not None:
        try:
            file_key = data_dir_key(settings.data_dir, create=False)
        except KeyInvalid:  # a leftover file that is not a key opens nothing: the setting decides
            file_key = None
        old = tuple(settings.secrets_old_keys) + ((file_key,) if file_key and file_key != settings.secrets_key else ())
        return Sealer(settings.secrets_key, old, SETTING)
    file_key = data_dir_key(settings.data_dir, create=create)
    if file_key is None:
        return None
    return Sealer(file_key, tuple(settings.secrets_old_keys), f"the key file {Path(settings.data_dir) / KEY_FILE}")


def key_file_left(settings: Any) -> tuple[Path, str] | None:
    """The data directory's key file and its key id, where ``BROKER_SECRETS_KEY`` is set and the file holds another
    key: :func:`sealer_for` keeps it as an old key (it opens the secrets it sealed, and checks the job tokens of jobs
    launched under it), for as long as it is there — removing the key from ``BROKER_SECRETS_OLD_KEYS`` does not retire
    it, deleting the file does. ``None`` otherwise (no key set, no file, the same key, a file that is no key)."""
    if settings.secrets_key is None:
        return None
    try:
        file_key = data_dir_key(settings.data_dir, create=False)
    except KeyInvalid:
        return None
    if file_key is None or file_key == settings.secrets_key:
        return None
    return Path(settings.data_dir) / KEY_FILE, key_id(file_key)


def is_sealed(value: Any) -> bool:
    return isinstance(value, str) and value.startswith(PREFIX)


def sealed_key_ids(spec: dict[str, Any]) -> set[str]:
    """The key ids of the keys that sealed ``spec``'s secrets (read from the sealed text: nothing is opened)."""
    secrets = spec.get("secrets")
    if not isinstance(secrets, dict):
        return set()
    return {v[len(PREFIX):].partition(":")[0] for v in secrets.values() if is_sealed(v)}


def seal_spec(spec: dict[str, Any], sealer: Sealer, job_id: str) -> dict[str, Any]:
    """``spec`` with each value of its ``secrets`` sealed (a null one stays null: there is nothing to hide)."""
    secrets = spec.get("secrets")
    if not isinstance(secrets, dict) or not secrets:
        return spec
    return {**spec, "secrets": {k: None if v is None else sealer.seal(job_id, k, v) for k, v in secrets.items()}}


def has_sealed(spec: dict[str, Any]) -> bool:
    """Whether ``spec`` holds a sealed secret: only then is a key needed to use it."""
    secrets = spec.get("secrets")
    return isinstance(secrets, dict) and any(is_sealed(v) for v in secrets.values())


def open_task(spec: dict[str, Any], settings: Any, job_id: str) -> dict[str, Any]:
    """``spec`` with its sealed secrets opened under the broker's key (``settings``, as
    :func:`sealer_for` reads them). The key is looked at only when there is something to open, so a job
    without secrets never depends on it; a key that cannot be read is :class:`Unsealable` too, naming it."""
    if not has_sealed(spec):
        return spec
    try:
        sealer = sealer_for(settings)
    except KeyInvalid as exc:
        raise Unsealable(str(exc)) from None
    return open_spec(spec, sealer, job_id)


def open_spec(spec: dict[str, Any], sealer: Sealer | None, job_id: str) -> dict[str, Any]:
    """``spec`` with its sealed secrets opened (a plain value, stored before sealing, as it is); raises
    :class:`Unsealable` naming the setting when this broker cannot open one."""
    if not has_sealed(spec):
        return spec
    secrets = spec["secrets"]
    if sealer is None:
        raise Unsealable(f"this broker has no key to open the job's secrets ({SETTING} is not set and its data "
                         f"directory has no {KEY_FILE} file): set {SETTING} to the key of the broker that accepted "
                         "the job, then resume the job")
    return {**spec, "secrets": {k: sealer.open(job_id, k, v) if is_sealed(v) else v for k, v in secrets.items()}}


def secret_values(spec: dict[str, Any]) -> list[str]:
    """The plain values of ``spec``'s secrets (sealed ones are not), longest first: what :func:`redact` hides."""
    secrets = spec.get("secrets")
    if not isinstance(secrets, dict):
        return []
    values = {str(v) for v in secrets.values() if v is not None and not is_sealed(v) and str(v)}
    return sorted(values, key=len, reverse=True)


def job_secret_values(spec: dict[str, Any], settings: Any, job_id: str) -> list[str]:
    """The values of a job's secrets, to hide in what the broker shows of its run (its log, a reason quoting it):
    opened where sealed (:func:`open_task`); only the plain ones where this broker cannot open them."""
    try:
        return secret_values(open_task(spec, settings, job_id))
    except Unsealable:
        return secret_values(spec)


SHORT_SECRET = 4
"""A secret value shorter than this is hidden only where it stands alone (not inside a longer word or number): a
secret ``1`` or ``on`` hidden everywhere turned ``attempt 1 on spot`` into ``attempt *** *** spot``, and what
so short a value gives away, standing in a word, is nothing."""


def redact(text: str, values: list[str]) -> str:
    """``text`` (a message the broker keeps or shows: a launcher's or SkyPilot's refusal) with every
    secret value in it replaced by ``***`` (one shorter than :data:`SHORT_SECRET` only as a whole word)."""
    for value in values:
        if len(value) >= SHORT_SECRET:
            text = text.replace(value, "***")
        else:
            text = re.sub(rf"(?<![\w]){re.escape(value)}(?![\w])", "***", text)
    return text
