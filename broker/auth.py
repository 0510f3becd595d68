"""Who is asking: bearer tokens per team (stored hashed) and admin tokens."""

from __future__ import annotations

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
