"""One settings object for the broker, read from a YAML file and the environment.

Precedence: environment variables (the names ``terraform/`` outputs and
``docs/deploy.md`` documents) over the config file over built-in defaults; but a
team's tokens are those of both ``BROKER_TEAM_TOKENS`` and the file, with a warning
at start where the two may disagree (:func:`_add_env_team_tokens`). The
built-in default runs out of the box: an embedded SQLite store under the
user's data dir, the local launcher with one CPU pool, and a generated admin
token the local CLI picks up by itself.
"""

from __future__ import annotations

import difflib
import hashlib
import json
import logging
import os
import pwd
import re
import secrets
import stat
import sys
from dataclasses import dataclass, field, replace
from decimal import Decimal
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit, urlunsplit

import yaml

from broker.sealing import OLD_SETTING, SETTING, KeyInvalid, parse_key
from broker.spec import SpecError, unknown_key_hint
from launchers.simzones import SimZone, zones_from_config
from pricing.catalog import PRICED_CLOUDS
from pricing.money import (
    MAX_DOLLARS,
    MICROS_PER_DOLLAR,
    AmountTooLarge,
    DecimalComma,
    Micros,
    MoneyError,
    NotPlain,
    fmt_limit,
    typed_to_micros,
)

if TYPE_CHECKING:
    from broker.slack.config import SlackConfig


log = logging.getLogger(__name__)

MAX_CONFIG_BYTES = 10_000_000
"""What a config file's aliases may expand to."""


class ConfigError(ValueError):
    """The config file or an environment variable is invalid; the message names it. ``config_path``: the config file
    :func:`load_settings` read when it was raised (``None``: none was read), which :meth:`located` adds to the
    message: ``pools[0].slots: must be at least 1`` said which setting, not in which of a host's files."""

    config_path: Path | None = None

    def located(self) -> str:
        """The message, led by the config file when it names one of that file's settings (not an environment
        variable's, ``BROKER_PORT: ...``, nor a message that names the file already)."""
        text = str(self)
        if self.config_path is None or text.startswith(str(self.config_path)) or text.startswith("config file ") \
                or _ENV_NAMED.match(text):
            return text
        return f"{self.config_path}: {text}"


_ENV_NAMED = re.compile(r"^[A-Z][A-Z0-9_]*[A-Z0-9]\b")  # BROKER_PORT, BROKER_TEAM_TOKENS: an environment variable


@dataclass(frozen=True)
class Pool:
    """An on-prem pool: ``slots`` GPUs (or CPU job slots when ``accelerator`` is None), on this host, or
    on a Kubernetes cluster reached through SkyPilot when ``kubernetes_context`` names its kubeconfig
    context (the launcher must then be ``skypilot``).

    ``price_per_slot_hour`` is what a slot costs the company per hour (power,
    amortized hardware): never $0, so on-prem is compared honestly with cloud.

    ``run_as``: (team, user) pairs, ``"*"`` for every other team: the Unix user a team's jobs on this pool
    run as (``launchers/run_as.py``); empty: the broker's own user, as without it.
    """

    name: str
    slots: int
    accelerator: str | None
    price_per_slot_hour: Micros
    cpus_per_slot: Decimal = Decimal(2)
    memory_gib_per_slot: Decimal = Decimal(8)
    kubernetes_context: str | None = None
    run_as: tuple[tuple[str, str], ...] = ()

    def user_for(self, team: str) -> str | None:
        """The user ``team``'s jobs run as on this pool; ``None``: the broker's own."""
        users = dict(self.run_as)
        return users.get(team, users.get("*"))


@dataclass(frozen=True)
class Team:
    name: str
    token_hashes: frozenset[str] = frozenset()
    default_budget: Micros | None = None
    # what the team's jobs may spend in a calendar month (UTC) at most, all of them together: a submit, resume or
    # budget raise that could take the month past it is refused (broker/team_budget.py); None: no cap
    monthly_budget: Micros | None = None
    # the highest broker.priority the team's own token may give (a pool shared with other teams: a team that could
    # give 1000 went ahead of every other team's queued jobs); an admin may give any; None: up to 1000
    max_priority: int | None = None


@dataclass(frozen=True)
class Settings:
    data_dir: Path
    store_url: str
    pools: tuple[Pool, ...]
    teams: dict[str, Team]
    admin_token_hashes: frozenset[str]
    default_budget: Micros
    checkpoint_root: str
    public_url: str
    launcher: str = "local"
    engine: bool = True
    tick_seconds: float = 1.0
    stop_grace_seconds: float = 30.0
    max_body_bytes: int = 1_000_000
    max_workdir_bytes: int = 100 * 2**20  # an uploaded workdir pack (tar.gz) at most; broker.workdir.DEFAULT_MAX_BYTES
    # an uploaded pack is kept while a job not final refers to it, and this long after the last such job ended
    # (a one-click resume of a failed job finds its code); broker/workdir_store.py
    workdir_retention_seconds: float = 30 * 86400.0
    # a pack no job refers to is set aside after this long (an upload whose submit has not come yet is kept),
    # and removed this long after that; what an upload cut short left is removed this old (and at least an hour)
    workdir_grace_seconds: float = 86400.0
    # a job in a final state last updated more than this many days ago is deleted with everything of it
    # (broker/retention.py); None: every job is kept for ever
    job_retention_days: float | None = None
    default_team: str = "default"
    zones: tuple[SimZone, ...] = ()
    heartbeat_timeout_seconds: float = 0.0  # 0: off; else a running job silent this long is treated as lost
    zone_cooldown_seconds: float = 1800.0
    # an engine silent this long (several brokers, each seeing only its own launches) no longer owns its attempts
    owner_timeout_seconds: float = 300.0
    # how far this host's clock may be from the shared store's (Redis ``TIME``) before its engine stops ticking
    # (BROKER_MAX_CLOCK_OFFSET_S): every time it stamps (deadlines, queue order, billing) would be off by that much
    max_clock_offset_seconds: float = 30.0
    changeover_seconds: float = 120.0  # provisioning + restore, until the broker has measured it
    # the clouds whose SkyPilot catalog the broker prices (with launcher skypilot): each found catalog's offers
    clouds: tuple[str, ...] = PRICED_CLOUDS
    # names this deployment's SkyPilot clusters (``<prefix>-<attempt id>``); the sweep tears down only its own
    cluster_prefix: str = "broker"
    # what its cloud role may launch (terraform's gpu_instance_types and launch_regions): instance type patterns
    # (fnmatch, ``g5.*``) and region names; a cloud offer outside them is never quoted nor placed
    # (:func:`broker.offers.cloud_offers`). Empty: no limit
    instance_types: tuple[str, ...] = ()
    launch_regions: tuple[str, ...] = ()
    # seals the task's secrets at rest (broker/sealing.py); None: the data directory's key file
    secrets_key: bytes | None = field(default=None, repr=False)
    secrets_old_keys: tuple[bytes, ...] = field(default=(), repr=False)  # still open what they sealed
    extra: dict[str, Any] = field(default_factory=dict)
    # the config file read (None: none was there, the defaults and the environment): said at start
    config_file: Path | None = None
    # what in the settings is taken but may not be meant (a team named only in BROKER_TEAM_TOKENS): load_settings
    # says each when it reads them (_say), so that `broker serve` and `broker worker` say them at start
    warnings: tuple[str, ...] = ()
    # the slack: and notifications: sections as load_settings read them, with its environment (None: Settings
    # built in code, read from extra where used: broker.slack.config.slack_of)
    slack: SlackConfig | None = field(default=None, repr=False, compare=False)

    def team_for_token(self, token: str) -> str | None:
        digest = hash_token(token)
        for team in self.teams.values():
            if any(secrets.compare_digest(digest, h) for h in team.token_hashes):
                return team.name
        return None

    def is_admin_token(self, token: str) -> bool:
        digest = hash_token(token)
        return any(secrets.compare_digest(digest, h) for h in self.admin_token_hashes)

    def budget_for(self, team: str) -> Micros:
        t = self.teams.get(team)
        return t.default_budget if t and t.default_budget is not None else self.default_budget


def hash_token(token: str) -> str:
    """Tokens are random and long, so one SHA-256 is the right hash (no password stretching needed)."""
    return hashlib.sha256(token.encode()).hexdigest()


def redacted_url(url: str) -> str:
    """``url`` with its password shown as ``***``, for logs: ``BROKER_STORE_URL`` carries Redis's AUTH token."""
    parts = urlsplit(url)
    if parts.password is None:
        return url
    host = parts.netloc.rsplit("@", 1)[1]
    return urlunsplit(parts._replace(netloc=f"{parts.username or ''}:***@{host}"))


def default_data_dir(env: dict[str, str] | os._Environ = os.environ) -> Path:
    if env.get("BROKER_DATA_DIR"):
        return Path(env["BROKER_DATA_DIR"]).expanduser()
    base = env.get("XDG_DATA_HOME") or str(Path.home() / ".local" / "share")
    return Path(base) / "spot-broker"


CONFIG_KEYS = frozenset({
    "data_dir", "store_url", "pools", "teams", "admin_token_sha256", "default_budget_usd", "checkpoint_root", "public_url",
    "launcher", "engine", "tick_seconds", "stop_grace_seconds", "max_body_bytes", "max_workdir_bytes",
    "workdir_retention_seconds", "workdir_grace_seconds", "job_retention_days", "zones", "heartbeat_timeout_seconds",
    "zone_cooldown_seconds", "owner_timeout_seconds", "changeover_seconds", "failure_rules", "slack", "notifications",
    "clouds", "cluster_prefix", "instance_types", "launch_regions",
    "secrets_key", "secrets_old_keys",
})
"""The config file's top-level settings (docs/deploy.md); anything else is refused, naming the likely one."""

DEFAULT_POOLS = ({"name": "local", "slots": 2, "accelerator": None, "price_per_slot_hour": "0.20"},)

POOL_KEYS = frozenset({"name", "slots", "gpus", "accelerator", "price_per_slot_hour", "price_per_gpu_hour",
                       "cpus_per_slot", "memory_gib_per_slot", "kubernetes_context", "run_as"})
TEAM_KEYS = frozenset({"tokens", "token_sha256", "default_budget_usd", "monthly_budget_usd", "max_priority"})
STORE_SCHEMES = ("sqlite://", "redis://", "rediss://", "unix://")

MAX_POOL_SLOTS = 4096
"""The most ``slots`` (``gpus``) a pool takes. A pool is offered in every size from 1 to all its slots
(:func:`broker.offers.pool_offers`), rebuilt at start and at each engine tick, so the time both take grows with it:
100,000,000 hung the start. 4096 is a large on-prem cluster (512 eight-GPU nodes) and far above one host's GPUs or
cores; and at most $1,000,000,000 an hour a slot, a whole pool's price per hour stays within a 64-bit integer of
micro-dollars, as the stores keep it."""


def load_settings(env: dict[str, str] | os._Environ | None = None, *, config_path: str | Path | None = None,
                  create_admin_token: bool = False) -> Settings:
    """Read settings. With ``create_admin_token`` (``broker serve``), make one if none is set. A
    :class:`ConfigError` carries the config file read (``config_path``), when there was one."""
    env = os.environ if env is None else env
    path = Path(config_path or env.get("BROKER_CONFIG") or default_data_dir(env) / "config.yaml").expanduser()
    try:
        settings = _load_settings(env, path, config_path, create_admin_token)
        from broker.slack.config import slack_config  # (it imports this module)

        # read once, here: a mistake is refused at start naming its setting and the file, and the edges use this
        slack = slack_config(settings.extra, env)
        if settings.teams:  # a member mapped to a team the config lacks was refused only at their first command
            known = {*settings.teams, settings.default_team}
            for user, team in sorted(slack.users.items()):
                if team not in known:
                    raise ConfigError(f"slack.users.{user}: {team!r} is not a team of this config "
                                      f"({unknown_key_hint(team, known)})")
        _say(settings.warnings)
        return replace(settings, slack=slack)
    except ConfigError as exc:
        try:
            if exc.config_path is None and path.is_file():
                exc.config_path = path
        except OSError:  # a file this user may not look at: said by the error itself
            pass
        raise


def _say(warnings: tuple[str, ...]) -> None:
    """Each warning as a WARNING of this module's logger (``broker worker``'s log); where no logging is set up yet
    (``broker serve`` reads its settings before its log lines are), as ``warning: ...`` on stderr, as serve's other
    start-up warnings are said."""
    for warning in warnings:
        if log.hasHandlers():
            log.warning("%s", warning)
        else:
            print(f"warning: {warning}", file=sys.stderr)


def _load_settings(env: dict[str, str] | os._Environ, path: Path, config_path: str | Path | None,
                   create_admin_token: bool) -> Settings:
    data_dir = default_data_dir(env)
    raw: dict[str, Any] = {}
    named = "--config" if config_path else "BROKER_CONFIG" if env.get("BROKER_CONFIG") else None
    try:
        there = path.exists()
    except PermissionError:  # a folder on its way the broker's user may not enter: a traceback, not the config's name
        raise ConfigError(f"config file {path.absolute()} cannot be read by this user"
                          f"{f' ({named} names it)' if named else ''}: let the broker's user read it and enter the "
                          "folders it is in (chmod, chown)") from None
    if there:
        from broker.task_text import load_yaml, yaml_error  # (task_text imports spec, as this module does)
        text = _config_text(path, named)
        try:
            # the tasks' own reader: a key given twice (two `teams:` blocks, the second silently replacing the
            # first), `1:30` read as base 60 and the like are refused naming the line, not read as something else
            raw = load_yaml(text, max_bytes=MAX_CONFIG_BYTES, task=False)  # a `name:` first is no chain
            _plain_money(text)
        except yaml.YAMLError as exc:
            raise ConfigError(f"{path}: {yaml_error(exc, task=False)}") from None
        except SpecError as exc:
            raise ConfigError(f"{path}: {exc.field.removeprefix('body').lstrip('.') or 'the file'}: {exc.reason}") \
                from None
        if raw is None:
            # an emptied file (a failed write, an editor's accident) was read as "all defaults": every team's token
            # answered 401 and the pools became the built-in `local`, without a word. The data dir's config.yaml
            # too: a file put there is one the broker reads (left out, the defaults)
            what = ("is empty" if not text.strip() else "is empty (comments only)"
                    if all(not line.strip() or line.lstrip().startswith("#") for line in text.splitlines())
                    else "holds no settings (YAML's null)")
            instead = "write {} in it" if named else "remove it (or write {} in it)"
            raise ConfigError(f"{path}: {what}: the broker reads its config file for its settings; restore them, or "
                              f"{instead} to run with the built-in defaults (pool local, no teams)")
        if not isinstance(raw, dict):
            raise ConfigError(f"{path}: must be a mapping")
        for key in sorted(map(str, raw)):
            if key not in CONFIG_KEYS:  # a typo would otherwise be dropped without a word
                raise ConfigError(f"{path}: {key} is not a setting ({unknown_key_hint(key, CONFIG_KEYS)})")
    elif config_path or env.get("BROKER_CONFIG"):
        named = "--config" if config_path else "BROKER_CONFIG"
        raise ConfigError(f"config file {path.absolute()} does not exist ({named} names it): correct the path, or "
                          f"leave {named} out to run with the defaults")
    data_dir = Path(_text(raw, "data_dir") or data_dir).expanduser() if not env.get("BROKER_DATA_DIR") else data_dir
    _no_null_sections(raw)
    raw_pools = raw.get("pools")
    if raw_pools is not None and not isinstance(raw_pools, list):
        raise ConfigError("pools: must be a list of pools ([] for none)")
    launcher = env.get("BROKER_LAUNCHER") or _text(raw, "launcher") or "local"
    if launcher not in ("local", "skypilot"):
        where = "BROKER_LAUNCHER" if env.get("BROKER_LAUNCHER") else "launcher"
        raise ConfigError(f"{where}: {launcher!r} is not a launcher: use 'local' or 'skypilot'")
    if raw_pools is None:
        # the CPU pool `local` runs jobs on this host as the broker's user, who can read its tokens and keys: a
        # default for a broker on one's own machine, not for a deployment's cloud broker (configure pools there)
        raw_pools = list(DEFAULT_POOLS) if launcher == "local" else []
    pools = tuple(_pool(p, i) for i, p in enumerate(raw_pools))
    names = [p.name for p in pools]
    _unique(names, "pools")
    teams = _teams(raw.get("teams") or {})
    warnings = _short_file_tokens(raw.get("teams") or {}) + \
        _add_env_team_tokens(teams, _json_env(env, "BROKER_TEAM_TOKENS"))
    admin_hashes = set(_sha256_list(raw.get("admin_token_sha256"), "admin_token_sha256"))
    if env.get("BROKER_ADMIN_TOKEN"):
        admin_hashes.add(hash_token(env["BROKER_ADMIN_TOKEN"]))
    token_file = data_dir / "admin-token"
    if create_admin_token:  # `broker serve`: its data dir the broker's user's alone (tokens, keys, store, jobs' output
        # and checkpoints) — made only with a token to write, one given in BROKER_ADMIN_TOKEN left it to the first
        # of the others to make it, and the secrets key's made it 0755
        data_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
    if not admin_hashes and token_file.exists():
        admin_hashes.add(hash_token(token_file.read_text().strip()))
    elif env.get("BROKER_ADMIN_TOKEN") and not raw.get("admin_token_sha256"):
        warnings += _replaced_admin_token(token_file, admin_hashes)
    if not admin_hashes and create_admin_token:
        token = secrets.token_urlsafe(32)
        fd = os.open(token_file, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w") as fh:
            fh.write(token + "\n")
        admin_hashes.add(hash_token(token))
    _tokens_apart(teams, admin_hashes)
    store_url = env.get("BROKER_STORE_URL") or _text(raw, "store_url") or f"sqlite://{data_dir / 'broker.db'}"
    if not store_url.startswith(STORE_SCHEMES):
        where = "BROKER_STORE_URL" if env.get("BROKER_STORE_URL") else "store_url"
        raise ConfigError(f"{where}: {store_url!r} is not a store URL: use sqlite:///path/to/broker.db "
                          "or redis://host:6379/0 (rediss:// for TLS)")
    for i, pool in enumerate(pools):
        if pool.kubernetes_context and launcher != "skypilot":
            raise ConfigError(f"pools[{i}].kubernetes_context: a Kubernetes pool is reached through SkyPilot: "
                              "set launcher: skypilot (or BROKER_LAUNCHER=skypilot)")
    checkpoint_root = (env.get("BROKER_CHECKPOINT_ROOT") or _text(raw, "checkpoint_root")
                       or (data_dir / "checkpoints").as_uri())
    _checkpoint_root_usable(checkpoint_root, "BROKER_CHECKPOINT_ROOT" if env.get("BROKER_CHECKPOINT_ROOT")
                            else "checkpoint_root")
    for i, pool in enumerate(pools):
        if pool.run_as:
            _reachable_by_others(data_dir, checkpoint_root, f"pools[{i}].run_as")
    default_budget = _money(raw.get("default_budget_usd", "10"), "default_budget_usd")
    if default_budget <= 0:
        raise ConfigError("default_budget_usd: must be more than $0")
    for t in teams.values():
        if t.monthly_budget is not None and t.default_budget is None and default_budget > t.monthly_budget:
            raise ConfigError(f"teams.{t.name}.monthly_budget_usd: is {fmt_limit(t.monthly_budget)}, less than "
                              f"default_budget_usd ({fmt_limit(default_budget)}), the budget of the team's jobs that "
                              f"give none: every such job would be refused; give the team a default_budget_usd")
    public_url = env.get("BROKER_PUBLIC_URL") or _text(raw, "public_url")
    if not public_url:  # this host's, on BROKER_PORT: the URL jobs report their progress to (`broker worker`'s too)
        port = (env.get("BROKER_PORT") or "").strip() or "8000"  # as the CLI reads it (broker.client.env_port)
        if not (port.isascii() and port.isdigit() and 0 <= int(port) < 65536):
            raise ConfigError(f"BROKER_PORT: {port!r} is not a port: give a number from 0 to 65535")
        public_url = f"http://127.0.0.1:{port}"
    secrets_key, secrets_old_keys = _secrets_keys(env, raw)
    _output_cap(env)
    clouds = _clouds(env, raw)
    instance_types = _limit_list(env, raw, "instance_types", "BROKER_INSTANCE_TYPES")
    launch_regions = _limit_list(env, raw, "launch_regions", "BROKER_LAUNCH_REGIONS")
    warnings += _limits_checked(env, instance_types, launch_regions, launcher, clouds)
    return Settings(
        data_dir=data_dir,
        store_url=store_url,
        pools=pools,
        teams=teams,
        admin_token_hashes=frozenset(admin_hashes),
        default_budget=default_budget,
        checkpoint_root=checkpoint_root,
        public_url=public_url,
        launcher=launcher,
        engine=_engine(env, raw),
        tick_seconds=_number(raw, "tick_seconds", 1.0, positive=True),
        stop_grace_seconds=_number(raw, "stop_grace_seconds", 30.0),
        max_body_bytes=int(_number(raw, "max_body_bytes", 1_000_000, positive=True, whole=True)),
        max_workdir_bytes=int(_number(raw, "max_workdir_bytes", 100 * 2**20, positive=True, whole=True)),
        workdir_retention_seconds=_number(raw, "workdir_retention_seconds", 30 * 86400.0),
        workdir_grace_seconds=_number(raw, "workdir_grace_seconds", 86400.0, positive=True),
        job_retention_days=_retention_days(raw),
        # relative paths in the file (a zone's trace, failure_rules) are the config file's folder's, wherever the
        # broker was started from: `cannot read nope.json` named no folder
        zones=_zones(raw.get("zones"), path.absolute().parent, names),
        heartbeat_timeout_seconds=_number(raw, "heartbeat_timeout_seconds", 0.0),
        zone_cooldown_seconds=_number(raw, "zone_cooldown_seconds", 1800.0),
        owner_timeout_seconds=_number(raw, "owner_timeout_seconds", 300.0, positive=True),
        max_clock_offset_seconds=_clock_offset_limit(env),
        changeover_seconds=_number(raw, "changeover_seconds", 120.0),
        clouds=clouds,
        cluster_prefix=_cluster_prefix(env, raw),
        instance_types=instance_types,
        launch_regions=launch_regions,
        secrets_key=secrets_key,
        secrets_old_keys=secrets_old_keys,
        extra={**{k: v for k, v in raw.items() if k in ("failure_rules", "slack", "notifications", "public_url")},
               **({"failure_rules": _failure_rules(raw, path.absolute().parent)} if "failure_rules" in raw else {})},
        config_file=path if path.exists() else None,
        warnings=tuple(warnings),
    )


ENGINE_ON = ("on", "true", "yes", "1")
ENGINE_OFF = ("off", "false", "no", "0")


NULL_SECTIONS = {
    "pools": "list the pools, or write [] for none",
    "zones": "list the zones, or write [] for none",
    "teams": "list the teams, or write {} for none",
    "clouds": "list the clouds to price, or write [] for none",
    "admin_token_sha256": "list the digests, or write [] for none",
    "secrets_old_keys": "list the keys, or write [] for none",
}
"""The config's lists and mappings, and what to write instead of YAML's null (:func:`_no_null_sections`)."""


def _no_null_sections(raw: dict[str, Any]) -> None:
    """Refuse a list or mapping section given as YAML's null: a ``pools:`` whose every entry was commented out is
    null, which read as "left out" and ran the built-in pool ``local`` at $0.20/h (``clouds:``, every cloud) where
    ``[]`` means none; and a section emptied by accident (``teams:``, each team's tokens then refused) is refused
    as an emptied config file is. A key left out still gives its default."""
    for key, fix in NULL_SECTIONS.items():
        if key in raw and raw[key] is None:
            raise ConfigError(f"{key}: is empty (null): {fix}")


def _engine(env: Any, raw: dict[str, Any]) -> bool:
    """``BROKER_ENGINE`` (else ``engine``): on or off. Anything else was read as on: `BROKER_ENGINE=disabled` ran an
    engine beside the worker, with this process's config, and it took queued jobs of the shared store."""
    where = "BROKER_ENGINE" if env.get("BROKER_ENGINE") else "engine"
    value = env.get("BROKER_ENGINE") or raw.get("engine", "on")
    text = str(value).strip().lower()  # YAML reads `engine: off` as false, `on` as true
    if text in ENGINE_ON:
        return True
    if text in ENGINE_OFF:
        return False
    raise ConfigError(f"{where}: {value!r} is neither on nor off: give on (this process runs the engine) or off (the "
                      "API only, beside a `broker worker`)")


def _tokens_apart(teams: dict[str, Team], admin_hashes: set[str]) -> None:
    """Refuse a token that two teams share, or that a team shares with the admin. Taken for the first team it was
    found for (or for the admin: the admin is asked first), the other team lost its jobs to it — a team whose token
    was also the admin's submitted as the admin, host paths and all."""
    owner: dict[str, str] = {}
    for name in sorted(teams):
        for digest in teams[name].token_hashes:
            if digest in admin_hashes:
                raise ConfigError(f"teams.{name}: one of its tokens is also an admin token (BROKER_ADMIN_TOKEN, "
                                  "admin_token_sha256 or the data dir's admin-token): it would act as the admin, not as "
                                  f"team {name}; give the team a token of its own")
            if digest in owner:
                raise ConfigError(f"teams.{name}: one of its tokens is also one of team {owner[digest]}'s (teams: or "
                                  f"BROKER_TEAM_TOKENS): it would be taken for {owner[digest]} alone; give each team a "
                                  "token of its own")
            owner[digest] = name


def _replaced_admin_token(token_file: Path, admin_hashes: set[str]) -> list[str]:
    """The start's warning when the data dir's ``admin-token`` (the token ``broker serve`` made at its first start)
    holds a token ``BROKER_ADMIN_TOKEN`` replaced: refused now, it is the admin token again for any broker started on
    this data dir without the variable (and without ``admin_token_sha256``) — a stolen one, silently. Names the file,
    never the token."""
    try:
        old = token_file.read_text().strip()
    except (OSError, UnicodeDecodeError):  # not ours to read: the broker never falls back to it then either
        return []
    if not old or hash_token(old) in admin_hashes:
        return []
    return [f"{token_file} holds an admin token other than BROKER_ADMIN_TOKEN: refused now, it is the admin token "
            "again for a broker started on this data dir without BROKER_ADMIN_TOKEN (or admin_token_sha256); delete "
            "the file to retire it"]


def _secrets_keys(env: Any, raw: dict[str, Any]) -> tuple[bytes | None, tuple[bytes, ...]]:
    """``BROKER_SECRETS_KEY`` (or ``secrets_key``) and ``BROKER_SECRETS_OLD_KEYS`` (comma-separated; or the
    list ``secrets_old_keys``): the key that seals, and the keys of before that still open."""
    try:
        if env.get(SETTING):
            key = parse_key(env[SETTING], SETTING)
        else:
            key = parse_key(raw["secrets_key"], "secrets_key") if _text(raw, "secrets_key") else None
        if env.get(OLD_SETTING):
            old = [parse_key(k, OLD_SETTING) for k in env[OLD_SETTING].split(",") if k.strip()]
        else:
            old = [parse_key(k, "secrets_old_keys") for k in _str_list(raw.get("secrets_old_keys"), "secrets_old_keys")]
    except KeyInvalid as exc:
        raise ConfigError(str(exc)) from None
    return key, tuple(old)


def _clock_offset_limit(env: Any) -> float:
    """``BROKER_MAX_CLOCK_OFFSET_S``: seconds, more than 0 (default 30). An environment variable, as
    ``BROKER_LOCAL_OUTPUT_CAP`` is: a property of the host the broker runs on, not of the deployment's config."""
    value = env.get("BROKER_MAX_CLOCK_OFFSET_S")
    if not value:
        return 30.0
    try:
        seconds = float(value)
    except ValueError:
        seconds = float("nan")
    if not seconds > 0 or seconds == float("inf"):
        raise ConfigError(f"BROKER_MAX_CLOCK_OFFSET_S: must be a number of seconds more than 0, not {value!r}")
    return seconds


def _number(raw: dict[str, Any], key: str, default: float, *, positive: bool = False, whole: bool = False,
            where: str = "") -> float:
    """A number of seconds (or bytes) from the config file: ``key: must be ...`` when it is not one."""
    value = raw.get(key)
    key = f"{where}.{key}" if where else key
    if value is None:
        return float(default)
    kind = "a whole number" if whole else "a number"
    if isinstance(value, bool) or not isinstance(value, (int, float)) or (whole and value != int(value)):
        raise ConfigError(f"{key}: must be {kind}, not {value!r}")
    if value < 0 or (positive and value == 0):
        raise ConfigError(f"{key}: must be {'more than 0' if positive else '0 or more'}, not {value!r}")
    return float(value)


MIN_RETENTION_DAYS = 1.0
"""The shortest ``job_retention_days``: a job that failed last night can still be resumed this morning."""


def _retention_days(raw: dict[str, Any]) -> float | None:
    """``job_retention_days``: left out (or ``null``), every job is kept for ever, as before the setting existed
    (an upgrade deletes nothing unasked); else at least :data:`MIN_RETENTION_DAYS`."""
    if raw.get("job_retention_days") is None:
        return None
    value = raw["job_retention_days"]
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value != value:  # NaN is no number of days
        raise ConfigError(f"job_retention_days: must be a number, not {value!r}")
    # one message below the floor, a negative number included (-3 said "must be 0 or more", as if 0 were allowed)
    if value < MIN_RETENTION_DAYS:
        raise ConfigError(f"job_retention_days: must be at least {MIN_RETENTION_DAYS:g} (days), not {value!r}; "
                          "leave it out to keep every job")
    return float(value)


def _clouds(env: Any, raw: dict[str, Any]) -> tuple[str, ...]:
    """The clouds to price, from ``BROKER_CLOUDS`` (``aws,gcp``) or ``clouds:`` (a list); each must be one
    whose catalog the broker can read (:data:`pricing.catalog.PRICED_CLOUDS`). An empty list prices none:
    the broker then places only on pools and simulated zones."""
    if env.get("BROKER_CLOUDS") is not None:
        where, value = "BROKER_CLOUDS", [c for c in env["BROKER_CLOUDS"].replace(" ", ",").split(",") if c]
    elif raw.get("clouds") is not None:
        where, value = "clouds", raw["clouds"]
        if not isinstance(value, list) or not all(isinstance(c, str) and c.strip() for c in value):
            raise ConfigError(f"clouds: must be a list of cloud names like [aws, gcp] ([] for none), not {value!r}")
    else:
        return PRICED_CLOUDS
    clouds = tuple(dict.fromkeys(c.strip().lower() for c in value))
    for cloud in clouds:
        if cloud not in PRICED_CLOUDS:
            why = (" (its catalog prices VMs per region, with no AvailabilityZone column the broker reads)"
                   if cloud == "azure" else "")
            raise ConfigError(f"{where}: the broker cannot price {cloud!r}{why}; "
                              f"it prices {', '.join(PRICED_CLOUDS)}")
    return clouds


LIMITS = {
    "instance_types": ("instance type patterns", "[g5.*, p4d.*]", "g5.*,p4d.*", "every instance type"),
    "launch_regions": ("region names", "[us-east-1, us-west-2]", "us-east-1,us-west-2", "every region"),
}
"""The broker's limits on cloud placement (:func:`_limit_list`): what each lists, and how it is written."""


def _limit_list(env: Any, raw: dict[str, Any], key: str, name: str) -> tuple[str, ...]:
    """``instance_types`` or ``launch_regions``, from the environment variable ``name`` (comma-separated, spaces
    around the commas allowed) or the config file's list ``key``; ``()`` when neither is given (no limit). An empty
    one is refused rather than read as "no limit" or "nothing": it would say the opposite of the other (a broker that
    may launch nothing), and an emptied variable is more likely a deployment's mistake than either."""
    what, listed, joined, every = LIMITS[key]
    if env.get(name) is not None:
        where, text = name, env[name]
        if not text.strip():
            raise ConfigError(f"{name}: is set but empty: give {what} separated by commas ({joined}), or leave it "
                              f"unset for {every}")
        value = [v.strip() for v in text.split(",")]
        if not all(value):
            raise ConfigError(f"{name}: {text!r} has an empty entry between its commas: give {what} separated by "
                              f"single commas ({joined})")
    elif key in raw:
        where, value = key, raw[key]
        if value is None or value == []:
            raise ConfigError(f"{key}: is empty: list the {what} ({key}: {listed}), or leave it out for {every}")
        if not isinstance(value, list) or not all(isinstance(v, str) and v.strip() for v in value):
            raise ConfigError(f"{key}: must be a list of {what} like {listed}, not {value!r}")
        value = [v.strip() for v in value]
    else:
        return ()
    for v in value:
        if re.search(r"[\s,]", v):
            raise ConfigError(f"{where}: {v!r} is not one of the {what}: it holds a space or a comma; give each as "
                              f"an entry of its own ({listed if where == key else joined})")
    return tuple(dict.fromkeys(value))


def _limits_checked(env: Any, instance_types: tuple[str, ...], launch_regions: tuple[str, ...], launcher: str,
                    clouds: tuple[str, ...]) -> list[str]:
    """Refuse a launch region that the price table of the ``clouds`` setting has no offer in, naming the close ones,
    as a zone's region is (``us-est-1``: every cloud offer would be outside the limits, and each job refused) — one
    written in another case too (``US-EAST-1``), naming its spelling: regions match exactly, as IAM's
    ``aws:RequestedRegion`` does. Warn of each instance type pattern that matches no instance type of that table
    (``p9.*``; matched case-sensitively, as ``ec2:InstanceType`` is), and, when none matches any, that every cloud
    job will be refused; a pattern is not refused, as a region is: a deployment's role may allow types a snapshot
    lacks (terraform's default ``g6.*``). Warn that the limits limit nothing where the launcher places on no cloud.
    A price table that cannot be read is left to the start's price check, which names its file."""
    given = [(name, key) for name, key, value in (("BROKER_INSTANCE_TYPES", "instance_types", instance_types),
                                                  ("BROKER_LAUNCH_REGIONS", "launch_regions", launch_regions)) if value]
    if not given:
        return []
    if launcher != "skypilot":
        return [f"{name if env.get(name) else key}: the {launcher} launcher places jobs on pools and simulated zones "
                "only, which no cloud role launches: it limits nothing here (it limits the cloud offers of "
                "launcher skypilot)" for name, key in given]
    from broker.offers import _price_table  # (it imports this module)
    from pricing.catalog import CatalogError

    try:
        table = _price_table(clouds)
    except CatalogError:
        return []
    if not table:
        return []
    regions = {o.region for o in table}
    where = "BROKER_LAUNCH_REGIONS" if env.get("BROKER_LAUNCH_REGIONS") else "launch_regions"
    known = {r.lower(): r for r in regions}
    for region in launch_regions:
        if region in regions:
            continue
        if region.lower() in known:
            raise ConfigError(f"{where}: the price table of {', '.join(clouds)} has no region {region!r} (did you mean "
                              f"{known[region.lower()]!r}? region names are case-sensitive, as the cloud role's "
                              f"aws:RequestedRegion is): the broker could place nothing there")
        raise ConfigError(f"{where}: the price table of {', '.join(clouds)} has no region {region!r}"
                          f"{_close(region, regions, list_them=True)}: the broker could place nothing there")
    return _patterns_unmatched(env, instance_types, {o.instance_type for o in table}, clouds)


def _patterns_unmatched(env: Any, instance_types: tuple[str, ...], types: set[str],
                        clouds: tuple[str, ...]) -> list[str]:
    """The start's warnings for the ``instance_types`` patterns that match none of ``types`` (the price table's), as
    :class:`pricing.placement.Limits` matches them: one per such pattern, and, when no pattern matches any, that
    every cloud job will be refused."""
    from pricing.placement import Limits

    where = "BROKER_INSTANCE_TYPES" if env.get("BROKER_INSTANCE_TYPES") else "instance_types"
    table = f"the price table of {', '.join(clouds)}"
    unmatched = [p for p in instance_types if not any(Limits(instance_types=(p,)).type_allowed(t) for t in types)]
    warnings = []
    for pattern in unmatched:
        lower = pattern.lower()
        case = (f" (did you mean {lower!r}? instance type names are case-sensitive, as the cloud role's "
                f"ec2:InstanceType is)" if lower != pattern
                and any(Limits(instance_types=(lower,)).type_allowed(t) for t in types) else "")
        warnings.append(f"{where}: {pattern!r} matches no instance type in {table}{case}: no job is placed by it")
    if unmatched and len(unmatched) == len(instance_types):
        warnings.append(f"{where}: no pattern of it ({', '.join(instance_types)}) matches an instance type in {table}: "
                        "every cloud job will be refused")
    return warnings


CLUSTER_PREFIX = re.compile(r"[a-z][a-z0-9]*(?:-[a-z0-9]+)*")


def _cluster_prefix(env: Any, raw: dict[str, Any]) -> str:
    """The first part of this deployment's SkyPilot cluster names, from ``BROKER_CLUSTER_PREFIX`` or
    ``cluster_prefix:`` (default ``broker``). Deployments that share one SkyPilot API server or identity
    need different ones: each sweep tears down the clusters of its own prefix that its store does not know."""
    where = "BROKER_CLUSTER_PREFIX" if env.get("BROKER_CLUSTER_PREFIX") else "cluster_prefix"
    value = env.get("BROKER_CLUSTER_PREFIX") or _text(raw, "cluster_prefix") or "broker"
    if len(value) > 20 or not CLUSTER_PREFIX.fullmatch(value):
        raise ConfigError(f"{where}: {value!r} is not a cluster name prefix: up to 20 lowercase letters, digits and "
                          "single hyphens, starting with a letter (broker-staging)")
    return value


def _text(raw: dict[str, Any], key: str) -> str | None:
    value = raw.get(key)
    if value is not None and not isinstance(value, str):
        raise ConfigError(f"{key}: must be a string, not {value!r}")
    return value or None


def _checkpoint_root_usable(root: str, where: str) -> None:
    """Refuse a checkpoint root no job could resume from, by the rules a task's own ``broker.checkpoint`` is held to
    at submit (:func:`broker.spec.checkpoint_uri_problem`): a relative path (``relative/ck``, ``file://relative/ck``)
    was read in each attempt's own run folder, so every resume started from scratch; a typo'd scheme, a file. A
    bucket (``s3://``, ``gs://``), ``file:///abs`` and an absolute path are taken as before."""
    from broker.spec import checkpoint_uri_problem

    problem = checkpoint_uri_problem(root.strip())
    if problem:
        raise ConfigError(f"{where}: {problem}")


def _failure_rules(raw: dict[str, Any], base: Path) -> str | None:
    """``failure_rules``: the path of the team's rules file, relative to the config file's folder (``base``) as a
    zone's ``trace`` is, read once here so that one that cannot be used stops the start naming the setting, the
    file and why: a missing file, or one with a key the rules do not have, was ignored without a word (the
    shipped rules alone diagnosed every failure). The engine reads it again when it changes
    (:class:`broker.diagnosis.RuleBook`). Returns the absolute path."""
    value = raw.get("failure_rules")
    if value is None:
        return None
    if not isinstance(value, str) or not value.strip():
        raise ConfigError(f"failure_rules: must be the path of a YAML file of rules, not {value!r}")
    path = Path(value.strip()).expanduser()
    read_from = ""
    if not path.is_absolute():
        path, read_from = base / path, f" (a relative path is read from the config file's folder, {base})"
    from broker.diagnosis import rules_from_yaml  # (it imports broker.spec, as this module does)

    try:
        text = path.read_text()
    except FileNotFoundError:
        raise ConfigError(f"failure_rules: {path} does not exist{read_from}: correct the path, or leave "
                          "failure_rules out") from None
    except IsADirectoryError:
        raise ConfigError(f"failure_rules: {path} is a directory: name the YAML file of rules itself") from None
    except UnicodeDecodeError:
        raise ConfigError(f"failure_rules: {path} is not UTF-8 text: is it the YAML file of rules?") from None
    except OSError as exc:
        raise ConfigError(f"failure_rules: {path} cannot be read: {exc.strerror or exc}") from None
    try:
        rules_from_yaml(text, where=str(path))  # a YAML error too, in one line: "<path>: is not valid YAML at line …"
    except ValueError as exc:
        raise ConfigError(f"failure_rules: {exc}") from None
    return str(path)


def _zones(raw: Any, base: Path, pools: list[str]) -> tuple[SimZone, ...]:
    if isinstance(raw, list):  # named with both places, before zones_from_config's "zones: names must be unique"
        _unique([str(z["name"]) if isinstance(z, dict) and z.get("name") else None for z in raw], "zones")
        for i, z in enumerate(raw):  # said as a pool's price is, with the value and the fix
            if isinstance(z, dict) and z.get("price_per_hour") is not None:
                _money(z["price_per_hour"], f"zones[{i}].price_per_hour")
    try:
        zones = zones_from_config(raw, base_dir=base)
    except ValueError as exc:
        raise ConfigError(str(exc)) from None
    for i, zone in enumerate(zones):
        # a pool's capacity and a zone's are kept by name: one name for both, and the zone's free nodes stood for the
        # pool's slots (a 1-slot pool ran three jobs at once)
        pool = next((p for p in pools if p.casefold() == zone.name.casefold()), None)  # as placement reads them
        if pool is not None:
            same = "" if pool == zone.name else f" (as {pool!r}, names are read ignoring case)"
            raise ConfigError(f"zones[{i}].name: {zone.name!r} is also a pool's name{same}: give the zone another "
                              "name")
        if zone.tier == "ondemand" and (zone.schedule or zone.trace):
            # preemptions are a spot zone's: on an on-demand zone the simulator never reads them, and the zone ran
            # every job through without the preemptions the operator scripted
            key = "schedule" if zone.schedule else "trace"
            raise ConfigError(f"zones[{i}].{key}: zone {zone.name!r} is on-demand, which is never preempted: a "
                              f"{key} is for a spot zone (tier: spot); take it out, or make the zone spot")
        if zone.price_per_hour is None:
            _zone_priced(zone, i)
    return zones


def _unique(names: list[str | None], where: str) -> None:
    """Refuse a name two entries of ``where`` (``pools``, ``zones``) share, ignoring case, naming it and both
    entries: capacity is kept by name, and "pool names must be unique" left the operator to find which two in a long
    list."""
    first: dict[str, tuple[int, str]] = {}
    for i, name in enumerate(names):
        if name is None:
            continue
        # placement reads a task's `infra: local/DGX` ignoring case: `dgx` and `DGX` were both that pool, and a job
        # quoted at one's price ran on the other
        if name.casefold() in first:
            j, other = first[name.casefold()]
            same = "" if other == name else f" (as {other!r}, names are read ignoring case)"
            raise ConfigError(f"{where}[{i}].name: {name!r} is also the name of {where}[{j}]{same}: each of "
                              f"the {where} needs a name of its own")
        first[name.casefold()] = (i, name)


def _zone_priced(zone: SimZone, i: int) -> None:
    """Refuse a simulated zone the price table has no price for, naming the setting that is likely wrong
    (``zones[0].instance_type: 'g5.xlarg' ... did you mean 'g5.xlarge'?``): "set price_per_hour" alone, for a typo,
    would have hidden it under a made-up price. A catalog that cannot be read is left to the start's price check
    (``broker serve``/``broker worker``), which names its file and line."""
    from broker.offers import zone_offer  # (it imports this module)
    from pricing.catalog import CatalogError

    try:
        zone_offer(zone)
    except CatalogError:
        return
    except ValueError:
        raise ConfigError(_no_price_words(zone, i)) from None


def _no_price_words(zone: SimZone, i: int) -> str:
    """Why the price table prices no ``zone``: its cloud, instance type, region or cloud zone is not one the table
    has (with the closest one it has), else its tier."""
    from pricing.loading import load_price_table

    where, tier = f"zones[{i}]", zone.tier
    rows = load_price_table(clouds=(zone.cloud,)) if zone.cloud in PRICED_CLOUDS else ()
    unless = "; set price_per_hour only for a zone that stands for an instance the table lacks"
    if not rows:
        return (f"{where}.cloud: there is no {zone.cloud} price table on this host to price {zone.instance_type} "
                f"from (the broker prices {', '.join(PRICED_CLOUDS)}): set price_per_hour")
    types = {o.instance_type for o in rows}
    if zone.instance_type not in types:
        return (f"{where}.instance_type: {zone.instance_type!r} is not an instance type of the {zone.cloud} price "
                f"table{_close(zone.instance_type, types)}{unless}")
    rows = [o for o in rows if o.instance_type == zone.instance_type]
    regions = {o.region for o in rows}
    if zone.region not in regions:
        return (f"{where}.region: the {zone.cloud} price table has no {zone.instance_type} in {zone.region!r}"
                f"{_close(zone.region, regions, list_them=True)}{unless}")
    rows = [o for o in rows if o.region == zone.region]
    if zone.cloud_zone is not None and zone.cloud_zone not in {o.zone for o in rows}:
        return (f"{where}.cloud_zone: the {zone.cloud} price table has no {zone.instance_type} in "
                f"{zone.cloud_zone!r}{_close(zone.cloud_zone, {o.zone for o in rows}, list_them=True)}{unless}")
    return (f"{where}.tier: the {zone.cloud} price table has no {tier} price for {zone.instance_type} in "
            f"{zone.region}: set price_per_hour")


def _close(given: str, known: set[str], *, list_them: bool = False) -> str:
    """`` (did you mean 'x'?)``, else with ``list_them`` the ones there are (`` (it has: a, b)``), else nothing."""
    close = difflib.get_close_matches(given, sorted(known), n=1)
    if close:
        return f" (did you mean {close[0]!r}?)"
    if list_them:
        shown = sorted(known)
        return f" (it has: {', '.join(shown[:8])}{', ...' if len(shown) > 8 else ''})"
    return ""


def _pool(p: Any, i: int) -> Pool:
    where = f"pools[{i}]"
    if not isinstance(p, dict) or not p.get("name"):
        raise ConfigError(f"{where}: needs a name")
    for key in sorted(map(str, p)):
        if key not in POOL_KEYS:
            raise ConfigError(f"{where}.{key}: is not a pool setting ({unknown_key_hint(key, POOL_KEYS)})")
    slots_key = _one_of(p, ("slots", "gpus"), where)
    slots = p.get(slots_key, 1)
    if isinstance(slots, bool) or not isinstance(slots, int):
        raise ConfigError(f"{where}.{slots_key}: must be a whole number, not {slots!r}")
    if slots < 1:
        raise ConfigError(f"{where}.{slots_key}: must be at least 1")
    if slots > MAX_POOL_SLOTS:
        raise ConfigError(f"{where}.{slots_key}: is {slots:,}, more than the {MAX_POOL_SLOTS:,} a pool takes at most: "
                          f"give the pool's real size, or split a larger cluster into pools of {MAX_POOL_SLOTS:,}")
    price_key = _one_of(p, ("price_per_slot_hour", "price_per_gpu_hour"), where)
    price = p.get(price_key)
    if price is None:
        raise ConfigError(f"{where}.price_per_slot_hour: required (what one slot costs the company per hour)")
    micros = _money(price, f"{where}.{price_key}")
    if micros <= 0:
        raise ConfigError(f"{where}.{price_key}: must be more than $0 (on-prem GPUs are not free)")
    accelerator = _accelerator(p, where, slots_key, price_key)
    context = p.get("kubernetes_context")
    if context is not None and (not isinstance(context, str) or not context.strip() or "/" in context):
        raise ConfigError(f"{where}.kubernetes_context: must be the name of a kubeconfig context, not {context!r}")
    if context is not None and p.get("run_as") is not None:
        raise ConfigError(f"{where}.run_as: a Kubernetes pool's jobs run in pods, not on this host: run_as is for "
                          "a pool on the broker's host (set the pod's user in the cluster instead)")
    return Pool(
        name=str(p["name"]), slots=slots, accelerator=accelerator, price_per_slot_hour=micros,
        cpus_per_slot=Decimal(str(_number(p, "cpus_per_slot", 2, positive=True, where=where))),
        memory_gib_per_slot=Decimal(str(_number(p, "memory_gib_per_slot", 8, positive=True, where=where))),
        kubernetes_context=context.strip() if context else None,
        run_as=_run_as(p.get("run_as"), f"{where}.run_as"),
    )


def _accelerator(p: dict[str, Any], where: str, slots_key: str, price_key: str) -> str | None:
    """A pool's ``accelerator``: the name of its GPU (``A10G``), or ``None`` for a CPU pool. Each mistake here
    started and then refused every GPU job: ``A10G:8`` (a count in the name) matched no task's ``A10G``, and a
    pool given ``gpus`` or ``price_per_gpu_hour`` but no accelerator was read as a CPU pool."""
    value = p.get("accelerator")
    if value is None:
        gpu_keys = [k for k in (slots_key, price_key) if k in ("gpus", "price_per_gpu_hour")]
        if gpu_keys:
            raise ConfigError(f"{where}.accelerator: is not given, but the pool has {' and '.join(gpu_keys)}: name "
                              "its GPU (accelerator: A100), or write slots and price_per_slot_hour for a CPU pool")
        return None
    if not isinstance(value, str) or not value.strip():
        raise ConfigError(f"{where}.accelerator: must be the GPU's name, like A100, not {value!r} (leave it out for "
                          "a CPU pool)")
    name, colon, count = value.strip().partition(":")
    if colon:
        raise ConfigError(f"{where}.accelerator: {value!r} is a name, not a count: write accelerator: "
                          f"{name.strip() or 'A100'} and gpus: {count.strip() or 8}")
    return name


def _one_of(p: dict[str, Any], keys: tuple[str, str], where: str) -> str:
    """Which of a pool's two names for one setting it gives (``slots`` or ``gpus``; ``price_per_slot_hour`` or
    ``price_per_gpu_hour``): the first when it gives neither. Both is refused naming both: the first was used and
    the other dropped without a word (``price_per_slot_hour: "0.50"`` with ``price_per_gpu_hour: "2.00"`` priced
    the pool at $0.50)."""
    given = [k for k in keys if p.get(k) is not None]
    if len(given) > 1:
        raise ConfigError(f"{where}: {given[0]} and {given[1]} are two names for one setting, and both are given "
                          f"({p[given[0]]!r} and {p[given[1]]!r}): keep one")
    return given[0] if given else keys[0]


def _run_as(value: Any, where: str) -> tuple[tuple[str, str], ...]:
    """``run_as``: one user name, or a mapping of team to user name with ``"*"`` for every other team (so
    no team's job falls back to the broker's own user unnoticed). Each user must exist on this host and be
    neither root nor the broker's own user, and switching to it needs the broker to run as root."""
    if value is None:
        return ()
    if isinstance(value, str):
        users, named = {"*": value}, lambda team: where
    elif isinstance(value, dict) and value and all(isinstance(k, str) and isinstance(v, str) for k, v in value.items()):
        users, named = dict(value), lambda team: f"{where}.{team}"
        if "*" not in users:
            raise ConfigError(f"{where}: name the user of every other team with '*' (a team not named would "
                              "otherwise run as the broker's own user)")
    else:
        raise ConfigError(f"{where}: must be a user name, or a mapping of team to user name with '*' for the other "
                          f"teams, not {value!r}")
    for team, name in users.items():
        try:
            uid = pwd.getpwnam(name.strip()).pw_uid
        except KeyError:
            raise ConfigError(f"{named(team)}: there is no user {name!r} on this host") from None
        if uid == 0:
            raise ConfigError(f"{named(team)}: {name!r} is root (uid 0): a job run as root is not kept from the broker")
        if uid == os.geteuid():
            raise ConfigError(f"{named(team)}: {name!r} is the broker's own user: its jobs would read the broker's "
                              "tokens and keys as before; name another user")
    if os.geteuid() != 0:
        raise ConfigError(f"{where}: switching a job to another user needs root: run the broker as root, or "
                          "leave run_as out")
    return tuple(sorted((team, name.strip()) for team, name in users.items()))


def _reachable_by_others(data_dir: Path, checkpoint_root: str, where: str) -> None:
    """A job run as another user is given folders under the data dir (and under a ``file://`` checkpoint
    root): every folder above them must let others pass (``o+x``), and they must be the broker's own (not
    written in by others, not ``/``), since the runner closes to others what else is in them. The runner opens the data dir and the
    root themselves (``launchers/run_as.py``); what is above them is the host's, and not changed by the broker."""
    data = data_dir.expanduser().absolute()
    tops = [("data_dir", data)]
    parts = urlsplit(checkpoint_root)
    if parts.scheme == "file" and parts.path:
        tops.append(("checkpoint_root", Path(parts.path)))
    for name, top in tops:
        try:
            own_mode = top.stat().st_mode
        except FileNotFoundError:
            own_mode = 0  # made by the broker
        if top == Path(top.anchor) or own_mode & (stat.S_IWOTH | stat.S_IWGRP):
            # the runner makes it 0711 and closes to others all else in it (launchers/run_as.py): /tmp would lose
            # its sticky bit and world-write, a shared /data everyone's access to what is in it
            raise ConfigError(f"{where}: {name} {top} is a folder other users write in (mode "
                              f"{stat.S_IMODE(own_mode):04o}), or the root: a job run as another user is given a "
                              f"folder in it, and the rest of it is then closed to others; give the broker a "
                              f"folder of its own (e.g. /var/lib/spot-broker)")
        for folder in top.parents:
            if folder == data or data in folder.parents:
                continue  # opened by the runner as the data dir is (the default root, <data dir>/checkpoints, in it)
            try:
                mode = folder.stat().st_mode
            except FileNotFoundError:
                continue  # made by the broker (root) with the default mode, which lets others pass
            if not mode & stat.S_IXOTH:
                raise ConfigError(f"{where}: a job run as another user cannot reach {name} {top}: {folder} does not "
                                  f"let other users pass (mode {stat.S_IMODE(mode):04o}); put {name} where they may "
                                  f"(e.g. /var/lib/spot-broker), or chmod o+x {folder}")


SHORT_TOKEN = 16
"""A token shorter than this is warned of at start (``broker serve``): anyone who can reach the port may guess it."""


def _short_file_tokens(raw: dict) -> list[str]:
    """A warning per team of the config file with a token (``teams.<team>.tokens``) shorter than :data:`SHORT_TOKEN`
    characters, naming the team, never the token: ``BROKER_ADMIN_TOKEN`` and ``BROKER_TEAM_TOKENS`` were warned of,
    and a three-letter token in the file started silently."""
    return [f"teams.{name}.tokens: a token is shorter than {SHORT_TOKEN} characters, which anyone who reaches the "
            f"broker's port may guess: give it 32 random characters (`openssl rand -hex 16`)"
            for name, t in sorted(raw.items(), key=lambda kv: str(kv[0])) if isinstance(t, dict)
            and isinstance(t.get("tokens"), list) and any(isinstance(x, str) and len(x) < SHORT_TOKEN
                                                           for x in t["tokens"])]


def _teams(raw: Any) -> dict[str, Team]:
    if not isinstance(raw, dict):
        raise ConfigError("teams: must be a mapping of team name to settings")
    out = {}
    for name, t in raw.items():
        if name is None or not str(name).strip():
            # a team named "" (or null) took tokens and budgets, and no command could name it (--team "")
            # YAML's null (`~`) said as YAML writes it, not Python's None
            raise ConfigError(f"teams: a team is named {'null' if name is None else repr(name)}: give each team a name")
        t = t or {}
        if not isinstance(t, dict):
            raise ConfigError(f"teams.{name}: must be a mapping like {{tokens: [...], default_budget_usd: \"200\"}}")
        for key in sorted(map(str, t)):
            if key not in TEAM_KEYS:
                raise ConfigError(f"teams.{name}.{key}: is not a team setting ({unknown_key_hint(key, TEAM_KEYS)})")
        hashes = set(_sha256_list(t.get("token_sha256"), f"teams.{name}.token_sha256"))
        tokens = _str_list(t.get("tokens"), f"teams.{name}.tokens")
        if not all(x.strip() for x in tokens):
            raise ConfigError(f"teams.{name}.tokens: a token must not be empty")
        hashes |= {hash_token(x) for x in tokens}
        budget = t.get("default_budget_usd")
        if budget is not None and _money(budget, f"teams.{name}.default_budget_usd") <= 0:
            raise ConfigError(f"teams.{name}.default_budget_usd: must be more than $0")
        default = _money(budget, f"teams.{name}.default_budget_usd") if budget is not None else None
        monthly = t.get("monthly_budget_usd")
        cap = _money(monthly, f"teams.{name}.monthly_budget_usd") if monthly is not None else None
        if cap is not None and cap <= 0:
            raise ConfigError(f"teams.{name}.monthly_budget_usd: must be more than $0")
        if cap is not None and default is not None and default > cap:
            raise ConfigError(f"teams.{name}.default_budget_usd: is {fmt_limit(default)}, more than the team's "
                              f"monthly_budget_usd ({fmt_limit(cap)}): every job given no budget would be refused")
        most = t.get("max_priority")
        if most is not None and (isinstance(most, bool) or not isinstance(most, int) or not -1000 <= most <= 1000):
            raise ConfigError(f"teams.{name}.max_priority: is {most!r}, not a whole number from -1000 to 1000 (the "
                              "range of broker.priority)")
        out[str(name)] = Team(str(name), frozenset(hashes), default, cap, most)
    return out


def _add_env_team_tokens(teams: dict[str, Team], given: dict[str, Any]) -> list[str]:
    """Add each of ``BROKER_TEAM_TOKENS``' tokens to its team's (``teams``, the file's): the file's tokens stay valid
    beside it, as deployments rely on (terraform/ puts every team's token in the variable, the file gives budgets
    and members' own tokens). Returns a warning (naming the team, never a token) where that union may not be what the
    operator means: a team given a token here besides other tokens in the file (a token rotated in the file alone
    still works from the variable), and, when the file names teams, a team it does not name (``nlpp`` for ``nlp``
    was made a team of its own, with the default budget and no monthly cap)."""
    warnings, in_file = [], frozenset(teams)
    for team, token in given.items():
        if not isinstance(token, str) or not token.strip():
            raise ConfigError(f"BROKER_TEAM_TOKENS: the token of team {team!r} must be a non-empty string")
        digest = hash_token(token)
        t = teams.get(team)
        if t is None and in_file:
            warnings.append(f"BROKER_TEAM_TOKENS: team {team!r} is not one of the config file's teams "
                            f"({unknown_key_hint(team, in_file)}): its token is taken as a team of that name, with "
                            f"the broker's default budget and no monthly cap; correct the name, or add the team to "
                            f"the file's teams:")
        elif t is not None and t.token_hashes and digest not in t.token_hashes:
            warnings.append(f"BROKER_TEAM_TOKENS: team {team!r} has a token there besides its tokens in the config "
                            f"file (teams.{team}): the tokens of both are accepted, so a token replaced in one of "
                            f"them alone still works from the other; keep each team's tokens in one of the two")
        t = t or Team(team)
        teams[team] = replace(t, token_hashes=t.token_hashes | {digest})
    return warnings


def _output_cap(env: Any) -> None:
    """Refuse a ``BROKER_LOCAL_OUTPUT_CAP`` that is no size at start, naming it: every local runner read ``inf`` as a
    crash (the job relaunched until its attempts ran out, "node lost"), and ``64X`` as the default, without a
    word. The runner reads it itself, from the broker's environment (:func:`launchers.local_runner.output_cap`)."""
    from launchers.local_runner import OUTPUT_CAP_ENV, parse_output_cap

    try:
        parse_output_cap(env.get(OUTPUT_CAP_ENV) or "")
    except ValueError as exc:
        raise ConfigError(f"{OUTPUT_CAP_ENV}: {exc}") from None


def _config_text(path: Path, named: str | None) -> str:
    """The config file's text, or a :class:`ConfigError` that says it is the config file (named by ``named``,
    ``--config`` or ``BROKER_CONFIG``; ``None``: the data dir's) and why it cannot be read: ``[Errno 21] Is a
    directory: 'cfgs'`` did not say which setting named it."""
    by = f" ({named} names it)" if named else ""
    try:
        return path.read_text()
    except IsADirectoryError:
        raise ConfigError(f"config file {path.absolute()} is a directory{by}: name the YAML file itself") from None
    except PermissionError:
        raise ConfigError(f"config file {path.absolute()} cannot be read by this user{by}: let the broker's user "
                          "read it (chmod, chown)") from None
    except UnicodeDecodeError:
        raise ConfigError(f"config file {path.absolute()} is not UTF-8 text{by}: is it the YAML config?") from None
    except OSError as exc:
        raise ConfigError(f"config file {path.absolute()} cannot be read{by}: {exc.strerror or exc}") from None


def _sha256_list(value: Any, where: str) -> list[str]:
    """SHA-256 digests (64 hex digits, as ``sha256sum`` prints them): a token pasted here by mistake matches nothing."""
    out = []
    for digest in _str_list(value, where):
        if not re.fullmatch(r"[0-9a-fA-F]{64}", digest.strip()):
            raise ConfigError(f"{where}: each entry must be a SHA-256 digest of a token, 64 hex digits "
                              "(printf %s \"$TOKEN\" | sha256sum), not the token itself")
        out.append(digest.strip().lower())
    return out


def _str_list(value: Any, where: str) -> list[str]:
    if value is None:
        return []
    if isinstance(value, str):
        return [value]
    if isinstance(value, list) and all(isinstance(v, str) for v in value):
        return value
    raise ConfigError(f"{where}: must be a string or a list of strings")


def _json_env(env: Any, name: str) -> dict[str, Any]:
    if not env.get(name):
        return {}
    try:
        value = json.loads(env[name])
    except json.JSONDecodeError:
        raise ConfigError(f"{name}: must be a JSON object like {{\"team\": \"token\"}}") from None
    if not isinstance(value, dict):
        raise ConfigError(f"{name}: must be a JSON object like {{\"team\": \"token\"}}")
    return value


CONFIG_MONEY = (("default_budget_usd",), ("teams", None, "default_budget_usd"), ("teams", None, "monthly_budget_usd"),
                ("pools", None, "price_per_slot_hour"), ("pools", None, "price_per_gpu_hour"),
                ("zones", None, "price_per_hour"))
"""Where the config file gives an amount of dollars (``None``: any team, any list entry)."""


def _plain_money(text: str) -> None:
    """Refuse an amount of dollars of the config file that YAML reads as a float from an exponent
    (``default_budget_usd: 1.0e+3``), in the words and by the rule a task's ``broker.budget_usd`` is refused with
    (:func:`broker.task_text._plain_amount`): YAML made it 1000.0, a $1,000.00 budget, where ``"1e3"`` was refused
    as written with an exponent. A float written plainly (``0.5``) is taken, as in a task."""
    from broker.task_text import _FLOAT, _Loader, _plain_amount

    def walk(node: yaml.Node, path: tuple) -> None:
        if isinstance(node, yaml.ScalarNode):
            if node.tag == _FLOAT and any(len(path) == len(m) and all(w is None or w == p for w, p in zip(m, path))
                                          for m in CONFIG_MONEY):
                _plain_amount(node, path)
        elif len(path) < 3 and isinstance(node, yaml.MappingNode):
            for key, value in node.value:
                if isinstance(key, yaml.ScalarNode):
                    walk(value, (*path, key.value))
        elif len(path) < 3 and isinstance(node, yaml.SequenceNode):
            for i, value in enumerate(node.value):
                walk(value, (*path, i))

    root = _Loader(text).get_single_node()
    if root is not None:
        walk(root, ())


PER = {"price_per_gpu_hour": "the price is per GPU-hour", "price_per_slot_hour": "the price is per slot-hour",
       "price_per_hour": "the price is per hour"}
"""What a price key's amount is of, said where one is written with its unit (``"$2.50/h"``)."""


def _money(value: Any, where: str) -> Micros:
    """An amount of dollars of the config, or a :class:`ConfigError` that says the value as written and how to write
    it: "must be an amount of dollars" alone left ``"$2.50/h"`` and ``99999999999999`` (an amount, too large) to
    be guessed at."""
    try:
        return typed_to_micros(value)
    except (DecimalComma, NotPlain) as exc:
        raise ConfigError(f"{where}: {exc}") from None
    except AmountTooLarge:
        most = fmt_limit(MAX_DOLLARS * MICROS_PER_DOLLAR)
        raise ConfigError(f"{where}: {value!r} is more than the most taken, {most}") from None
    except MoneyError:
        unit = PER.get(where.rsplit(".", 1)[-1], "in US dollars")
        amounts = re.findall(r"\d+(?:\.\d+)?", value) if isinstance(value, str) else []
        fix = f"write {amounts[0]}" if len(amounts) == 1 else "write digits with a point before the cents, like 2.50"
        raise ConfigError(f"{where}: {value!r} is not an amount of dollars: {fix} ({unit})") from None
