"""Who is asking: bearer tokens per team (stored hashed) and admin tokens."""

from __future__ import annotations

import hashlib
import hmac
from dataclasses import dataclass

from broker.config import Settings


@dataclass(frozen=True)
class Principal:
    """The caller: a team member (sees only that team's jobs) or an admin (sees all)."""

    name: str
    team: str | None
    admin: bool = False

    def can_see(self, team: str) -> bool:
        return self.admin or self.team == team


class Unauthorized(Exception):
    """No token, or a token that matches nobody."""


def authenticate(settings: Settings, authorization: str | None) -> Principal:
    if not authorization or not authorization.lower().startswith("bearer "):
        raise Unauthorized("send 'Authorization: Bearer <token>' (a team token or the admin token)")
    token = authorization[7:].strip()
    if settings.is_admin_token(token):
        return Principal(name="admin", team=None, admin=True)
    team = settings.team_for_token(token)
    if team is None:
        raise Unauthorized("the token is not valid")
    return Principal(name=f"team:{team}", team=team)


JOB_TOKEN_V2 = "v2."
"""The prefix of a job token keyed by the broker's secrets key (version 2)."""


def job_token(settings: Settings, job_id: str) -> str:
    """A job's own bearer token for its progress reports (``BROKER_JOB_TOKEN``).

    An HMAC of the job id, so nothing is stored and the token lets a job report only on itself. Keyed by a key
    derived from the broker's secrets key (``BROKER_SECRETS_KEY``, else the data directory's key file, made at
    start: every broker process sharing the store shares it, as sealed secrets need): ``v2.<hex>``. Version 1 was keyed by
    the admin tokens' SHA-256 hashes, which a config may hold in the open (``admin_token_sha256``), and anyone
    reading them could mint any job's token; it is still what a broker without a secrets key mints, and what
    jobs launched before version 2 hold (:func:`job_token_valid`).
    """
    keys = _token_keys(settings)
    if not keys:
        return _legacy_job_token(settings, job_id)
    return JOB_TOKEN_V2 + _mac(keys[0][1], job_id)


def job_token_version(settings: Settings) -> int:
    """The version of the tokens :func:`job_token` mints on this broker (recorded on the job at each launch)."""
    return 2 if _token_keys(settings) else 1


def job_token_key(settings: Settings) -> str | None:
    """The key id (:func:`broker.sealing.key_id`) of the secrets key the tokens :func:`job_token` mints on this broker
    are keyed by, recorded on the job at each launch (``Job.job_token_key``) beside :func:`job_token_version`; ``None``
    where it mints version 1."""
    keys = _token_keys(settings)
    return keys[0][0] if keys else None


def job_token_valid(settings: Settings, job_id: str, token: str, *, legacy_allowed: bool,
                    key: str | None = None) -> bool:
    """Whether ``token`` is the job's: a version 2 token under the secrets key that ``key`` names — the key id
    recorded when the job's current attempt was launched (:func:`job_token_key`) — so a key rotated out checks only the
    tokens of jobs launched before the rotation, not those of every job launched since (a leaked old key, kept listed
    in ``BROKER_SECRETS_OLD_KEYS`` for the secrets it sealed, forged any new job's reports); with ``key`` ``None`` (a
    job launched before the key was recorded) under any of the broker's keys, as before. A version 1 token only while
    ``legacy_allowed`` (the job's current attempt was launched with one). Compared as bytes in constant time: a header
    is latin-1, and ``compare_digest`` raises on a str outside ASCII."""
    given = token.encode("utf-8", "surrogateescape")
    if token.startswith(JOB_TOKEN_V2):
        return any(hmac.compare_digest(given, (JOB_TOKEN_V2 + _mac(derived, job_id)).encode())
                   for kid, derived in _token_keys(settings) if key is None or kid == key)
    return legacy_allowed and hmac.compare_digest(given, _legacy_job_token(settings, job_id).encode())


def _legacy_job_token(settings: Settings, job_id: str) -> str:
    return _mac("".join(sorted(settings.admin_token_hashes)).encode() or b"spot-broker", job_id)


def _mac(key: bytes, job_id: str) -> str:
    return hmac.new(key, f"job:{job_id}".encode(), hashlib.sha256).hexdigest()


def _token_keys(settings: Settings) -> list[tuple[str, bytes]]:
    """Job-token keys derived from the secrets key and the old ones (newest first), each with the key id of the secrets
    key it is derived from; none without a key. Never makes the key file: ``broker serve`` and ``broker worker`` make
    it at start, and an engine that made one would hold a key that opens no job's secrets."""
    from broker.sealing import KeyInvalid, key_id, sealer_for

    try:
        sealer = sealer_for(settings, create=False)
    except KeyInvalid:  # the broker refuses such a key for secrets, saying so; tokens fall back to version 1
        return []
    if sealer is None:
        return []
    return [(key_id(key), hmac.new(key, b"spot-broker job tokens", hashlib.sha256).digest())
            for key in (sealer.key, *sealer.old)]
