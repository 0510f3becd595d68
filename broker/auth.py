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


def job_token(settings: Settings, job_id: str) -> str:
    """A job's own bearer token for its progress reports (``BROKER_JOB_TOKEN``).

    An HMAC of the job id keyed by the admin tokens' hashes: every broker process
    sharing the admin secret mints and checks the same token, nothing is stored,
    and the token lets a job report only on itself.
    """
    key = "".join(sorted(settings.admin_token_hashes)).encode() or b"spot-broker"
    return hmac.new(key, f"job:{job_id}".encode(), hashlib.sha256).hexdigest()
