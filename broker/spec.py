"""Read a job spec: a SkyPilot task (YAML or JSON) plus an optional ``broker:`` section.

Any valid SkyPilot task is accepted as it is; the broker reads only what it
needs to price and place the job (``resources``, ``num_nodes``) and keeps the
rest untouched for the launcher — but for the settings SkyPilot would read and
the broker decides itself or never runs (:data:`BROKER_DECIDED_RESOURCES`,
:data:`BROKER_DECIDED_TASK`), refused at submit under every launcher rather
than dropped without a word. Problems raise :class:`SpecError` naming the
field (``resources.accelerators``, ``broker.budget_usd``) and the reason,
which the API turns into a 422.
"""

from __future__ import annotations

import difflib
import math
import posixpath
import re
from dataclasses import dataclass, field, replace
from datetime import date, datetime, timezone
from decimal import Decimal, InvalidOperation
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError
from typing import TYPE_CHECKING, Any, Iterable, Mapping
from urllib.parse import urlsplit

from broker.workdir import DIGEST_RE, PackError, parse_mount
from launchers.skypilot_task import CHECKPOINT_MOUNT
from pricing.money import AmountTooLarge, DecimalComma, Micros, MoneyError, NotPlain, TooPrecise, typed_to_micros
from pricing.offers import LOCAL_DISK_FORMS, JobRequest, LocalDisk, ResourceRequest

if TYPE_CHECKING:
    from broker.models import Job

MAX_NAME = 128
MAX_CHECKPOINT_URI = 4096  # a checkpoint URL prefix; the job's environment carries it
MAX_ARG_BYTES = 131_071
"""Bytes (UTF-8) of one argument or one ``NAME=value`` environment string a process can be started with: Linux's
MAX_ARG_STRLEN (131,072, its closing NUL among them). A ``run`` or ``setup`` script is one argument
(``bash -c SCRIPT``), each of ``envs`` and ``secrets`` one environment string."""
MAX_ENV_BYTES = 1 << 20
"""Bytes of all of a task's ``envs`` and ``secrets`` together (``NAME=value`` each): Linux starts a process with about
2 MiB of arguments and environment in all (ARG_MAX), and the launcher's own variables and the script need the rest."""
NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]*$")
RESERVED_ENVS = frozenset({
    "BROKER_JOB_ID", "BROKER_ATTEMPT", "BROKER_CHECKPOINT_URI", "BROKER_PROGRESS_URL", "BROKER_PROGRESS_URLS",
    "BROKER_RESUME_FROM", "BROKER_JOB_TOKEN", "BROKER_CHECKPOINT_DIR", "BROKER_NOTICE_FILE",
})
"""The variables the broker sets for each attempt itself (``broker.engine.launch.broker_envs``, and the launchers'
``BROKER_CHECKPOINT_DIR`` and ``BROKER_NOTICE_FILE``), which a task's ``envs`` or ``secrets`` may not name: the
broker's value wins, so a task's was dropped without a word (``BROKER_JOB_TOKEN``), or where the broker sets none it
reached the job (``BROKER_RESUME_FROM`` naming another job's checkpoint, restored as this one's). The spot notice
settings (``BROKER_PREEMPTION_*``) are not here: the broker sets them only where the task left them out. A test holds
this set to what the engine and the launchers set."""
BROKER_KEYS = {
    "team", "budget_usd", "deadline", "priority", "max_price_per_hour", "checkpoint", "retry", "expected_hours", "workdir",
    "file_mounts",
}
RETRY_KEYS = {"max_restarts_on_errors", "recover_on_exit_codes"}
MAX_DEADLINE_DAYS = 366  # a deadline further away is a typo, not a training run's
ONE_SECOND_IN_HOURS = Decimal(1) / 3600  # a shorter expected length is no work at all to the spot policy
MAX_EXPECTED_HOURS = MAX_DEADLINE_DAYS * 24  # a longer expected length is a typo too (and overflows the quote)
# The keys SkyPilot 0.14.1's schema allows (sky.utils.schemas; a test compares them with the installed
# SkyPilot): a key outside them is a typo SkyPilot would refuse at launch, so it is refused at submit.
TASK_KEYS = frozenset({
    "name", "workdir", "num_nodes", "resources", "envs", "secrets", "file_mounts", "setup", "run", "service", "inputs",
    "outputs", "config", "volumes", "volume_mounts", "event_callback", "pool", "file_mounts_mapping", "managed_secrets",
    "api_server_access", "_metadata",
})
RESOURCE_KEYS = frozenset({
    "cloud", "region", "zone", "infra", "accelerators", "accelerator_args", "instance_type", "cpus", "memory", "use_spot",
    "job_recovery", "disk_size", "disk_tier", "network_tier", "ports", "labels", "image_id", "any_of", "ordered",
    "autostop", "priority", "priority_class", "max_hourly_cost", "local_disk", "ephemeral_storage", "volumes",
    "_cluster_config_overrides", "_docker_login_config", "_is_image_managed", "_no_missing_accel_warnings",
    "_requires_fuse",
})


BROKER_DECIDED_TASK = {
    "service": "cannot be run by the broker, which runs a task on a cluster of its own (as sky launch does), not as "
               "a SkyServe service (sky serve up): leave it out",
    "pool": "defines a SkyPilot pool of workers (sky jobs pool apply) that managed jobs share, which the broker "
            "neither makes nor runs on: it launches each attempt on a cluster of its own (as sky launch does) and "
            "tears it down after. Leave it out; an on-prem pool of the broker's is chosen by placement (pools: in "
            "its config)",
    "event_callback": "is run only by SkyPilot's managed-jobs controller (sky jobs launch), never on a cluster "
                      "launch (sky launch), which is how the broker runs each attempt: it would never run. Leave it "
                      "out; the job's events are at GET /v1/jobs/{id}/events (and in Slack where it is set up)",
}
"""SkyPilot task keys the broker does not honour on either launcher, refused at submit (``strict``) naming the key and
why, rather than accepted and silently dropped. (A stored job, admitted before, is read as it was.)"""
BROKER_DECIDED_RESOURCES = {
    "autostop": "cannot be set: the broker tears each cluster down itself when its job ends (on a SkyPilot cluster it "
                "also asks SkyPilot to tear it down after a few idle minutes should no broker be there to); a task's "
                "own autostop would change that (false: a cluster left up, billed without limit; wait_for: none: the "
                "cluster torn down while the job runs). Leave it out",
    "max_hourly_cost": "is not read by the broker, which picks the instance itself: give broker.max_price_per_hour "
                       "instead (US dollars an hour, for all the job's nodes together)",
    "priority": "is the priority of a SkyPilot managed job, which the broker does not read (it orders its own queue): "
                "give broker.priority instead (a whole number from -1000 to 1000, higher first)",
    "ephemeral_storage": "is no longer read by SkyPilot, which drops it without a word since 0.14 (it was removed in "
                         "favour of disk_size): give resources.disk_size instead (GB, such as 256)",
}
"""SkyPilot ``resources`` keys (in ``resources`` and in each ``any_of`` / ``ordered`` alternative) whose decision is
the broker's own, or that SkyPilot no longer reads, refused at submit (``strict``) under every launcher, naming the
field and where the setting is taken: ``max_hourly_cost`` was refused only under the SkyPilot launcher and silently
dropped under the local one, and ``ephemeral_storage`` accepted and dropped by SkyPilot's own parser. (A stored job,
admitted before, is read as it was.)"""


class SpecError(ValueError):
    """The spec is invalid: ``field`` is a dotted path, ``reason`` a sentence fragment."""

    def __init__(self, field: str, reason: str):
        self.field = field
        self.reason = reason
        super().__init__(f"{field}: {reason}")


def _name_like(text: str, strict: bool = True) -> bool:
    """Whether ``text`` is of :data:`NAME_RE`'s form, to its end: ``$`` also matches before a last newline, so
    ``"evil\n"`` was a name, shown as ``evil`` in a table. A stored spec (``strict=False``) is read as it was taken."""
    return bool(NAME_RE.fullmatch(text) if strict else NAME_RE.match(text))


def check_name(name: Any, field: str = "name", *, strict: bool = True) -> None:
    """A job's name (a task's ``name:``, ``broker submit --name``), or the start of one (``GET /v1/jobs?name=``, a
    prefix: every prefix of a name is one); refused with :class:`SpecError` naming ``field``."""
    if not isinstance(name, str) or not name or len(name) > MAX_NAME or not _name_like(name, strict):
        # ASCII, said so: "letters" read as any, and `café` was refused with no word of why
        raise SpecError(field, f"must be 1-{MAX_NAME} ASCII letters (a-z, A-Z), digits, '-', '_' or '.', starting "
                               "with a letter or digit")


@dataclass(frozen=True)
class RetryPolicy:
    """When an error exit (not a preemption) is retried. Preemptions always are."""

    max_restarts_on_errors: int = 0
    recover_on_exit_codes: tuple[int, ...] = ()


@dataclass(frozen=True)
class BrokerSection:
    team: str | None = None
    budget: Micros | None = None
    deadline: float | None = None
    priority: int = 0
    max_price_per_hour: Micros | None = None
    checkpoint: str | None = None
    retry: RetryPolicy = field(default_factory=RetryPolicy)
    expected_hours: Decimal | None = None
    workdir: str | None = None  # "sha256:<hex>": an uploaded workdir pack (broker/workdir.py), the task's workdir
    #: destination → "sha256:<hex>" (a directory) or "sha256:<hex>/<name>" (a file): uploaded file_mounts sources
    file_mounts: dict[str, str] | None = None


@dataclass(frozen=True)
class JobSpec:
    """A parsed spec: the task as given (``task``), the broker section, and the request to place."""

    task: dict[str, Any]
    broker: BrokerSection
    request: JobRequest
    #: for each of ``request.alternatives``, the index of the ``resources.any_of`` / ``ordered`` alternative it was
    #: read from (one alternative may give several: an accelerator set, an image per region); ``None`` without a list
    sources: tuple[int | None, ...] = ()

    @property
    def name(self) -> str:
        return self.task.get("name") or "job"


def typed_text(value: Any) -> str | None:
    """The text a JSON number was typed as, where :mod:`broker.task_text` kept it (one with an exponent) and YAML 1.1
    reads that text as text (``1e3``, ``1.0e2``), else None: the number it is. YAML reads a number with a point and a
    signed exponent (``1.0E-2``) as the number, and so does this, so that a task means the same in either."""
    typed = getattr(value, "typed", None) if isinstance(value, float) else None
    if not isinstance(typed, str) or re.fullmatch(r"-?\d+\.\d*[eE][-+]\d+", typed):
        return None
    return typed


def check_env_map(key: str, envs: Any, flag: str, *, strict: bool = True, command: str = "submit") -> None:
    """A task's ``envs`` or ``secrets`` (``key``): a mapping of environment variable names to strings or numbers; at
    submit (``strict``) each value runnable text, none left null (``flag``: the option that gives one) and no name the
    broker sets itself (:data:`RESERVED_ENVS`). Also what ``broker resume --env/--secret`` gives a job."""
    if not isinstance(envs, dict):
        raise SpecError(key, "must be a mapping of names to values")
    for k, v in envs.items():
        if not isinstance(k, str) or not re.match(r"^[A-Za-z_][A-Za-z0-9_]*$", k):
            if k == "" or not isinstance(k, str):  # "envs.: is not a valid ..." named nothing
                raise SpecError(key, f"has a name {k!r}, which is not a valid environment variable name "
                                     "(letters, digits and _, not starting with a digit)")
            raise SpecError(f"{key}.{k}", "is not a valid environment variable name (letters, digits and _, "
                                          "not starting with a digit)")
        if strict and k in RESERVED_ENVS:  # a stored spec that named one is read as it was admitted
            raise SpecError(f"{key}.{k}", f"is set by the broker itself for each attempt, so a task may not set it "
                                          f"(the job would run with the broker's value, or with yours where the "
                                          f"broker gives none): leave {k} out of {key}, or give yours another name")
        if isinstance(v, (dict, list)):
            raise SpecError(f"{key}.{k}", "must be a string or number")
        if strict and isinstance(v, str):
            _runnable_text(v, f"{key}.{k}", env_name=k)
        if v is None and strict:  # SkyPilot's "required": `sky launch` refuses the task until it is given
            raise SpecError(f"{key}.{k}", f"has no value, so the task requires it at {command}: "
                                          f"`broker {command} {flag} {k}=...` (or {k}: \"\" for an empty one)")
    if strict:
        _env_total(env_bytes(envs), key)


def env_bytes(envs: Any) -> int:
    """Bytes of the environment strings (``NAME=value``, UTF-8, each with its closing NUL) ``envs`` gives a process."""
    if not isinstance(envs, dict):
        return 0
    return sum(len(f"{k}={v}".encode("utf-8", "replace")) + 1 for k, v in envs.items() if v is not None)


def check_env_total(envs: Any, secrets: Any, where: str) -> None:
    """Refuse a task whose ``envs`` and (opened) ``secrets`` together are more than :data:`MAX_ENV_BYTES`, naming
    ``where`` (a resume that adds to a stored task: each map given alone was checked by :func:`check_env_map`)."""
    _env_total(env_bytes(envs) + env_bytes(secrets), where, what="with the job's other envs and secrets, the variables")


def _env_total(size: int, where: str, *, what: str = "the variables") -> None:
    """Refuse ``envs`` / ``secrets`` (``where``) whose environment strings come to more than :data:`MAX_ENV_BYTES`."""
    if size > MAX_ENV_BYTES:
        raise SpecError(where, f"{what} come to {size:,} bytes as NAME=value, more than the {MAX_ENV_BYTES:,} "
                               "(1 MiB) a job's environment may take: Linux starts a process with about 2 MiB of "
                               "arguments and environment in all, so every launch would fail. Put large values in "
                               "a file (file_mounts, or a bucket) and pass its path")


def parse(raw: dict[str, Any], *, now: float, strict: bool = True) -> JobSpec:
    """Validate a task mapping and read the parts the broker needs.

    ``strict`` (at submit) adds checks that a stored spec need not pass again: a command to run,
    only SkyPilot's keys, a deadline at most ``MAX_DEADLINE_DAYS`` away and not sooner than the
    job's own ``expected_hours``. The engine re-reads stored specs with ``strict=False``, so a job
    accepted by an earlier version, before a check existed, is still read the same way."""
    if not isinstance(raw, dict):
        raise SpecError("body", "must be a mapping (a SkyPilot task)")
    task = {k: v for k, v in raw.items() if k != "broker"}
    if strict:
        _all_unknown_keys(raw)
        _known_keys(task, TASK_KEYS | {"broker"}, "")
        for key in (k for k in task if k in BROKER_DECIDED_TASK):
            raise SpecError(key, BROKER_DECIDED_TASK[key])
    if task.get("name") is not None:
        check_name(task["name"], strict=strict)
    for key in ("setup", "run"):
        if key in task and task[key] is not None and not isinstance(task[key], str):
            raise SpecError(key, "must be a shell script (a string)")
        if strict and isinstance(task.get(key), str):
            _runnable_text(task[key], key)
    for key, flag in (("envs", "--env"), ("secrets", "--secret")):
        if key not in task or task[key] is None:
            continue
        check_env_map(key, task[key], flag, strict=strict)
        if isinstance(task[key], dict) and any(typed_text(v) for v in task[key].values()):
            # a JSON number written with an exponent (broker.task_text.TypedFloat) is the text typed, as YAML reads
            # `1e3` (a string there): the same body sent as JSON set A=1000.0, and sent as text A=1e3
            task[key] = {k: typed_text(v) or v for k, v in task[key].items()}
    if strict and task.get("envs") and task.get("secrets"):  # each was held to the limit alone: now both together
        _env_total(env_bytes(task["envs"]) + env_bytes(task["secrets"]), "secrets",
                   what="with envs, the variables")
    if strict:  # a stored spec was filled in when it was admitted (a second fill would fill the values' own $refs)
        task = _filled_env_refs(task)
    num_nodes = task.get("num_nodes", 1)
    if isinstance(num_nodes, bool) or not isinstance(num_nodes, int) or num_nodes < 1:
        raise SpecError("num_nodes", "must be a whole number of at least 1")
    if strict and num_nodes > MAX_NODES:  # 10**3000 was refused on the budget, with a price thousands of digits long
        raise SpecError("num_nodes", f"must be at most {MAX_NODES}: a cluster larger than any a cloud or a pool gives")
    for key in ("file_mounts",):
        if key in task and task[key] is not None and not isinstance(task[key], dict):
            raise SpecError(key, "must be a mapping")
    for dest, source in (task.get("file_mounts") or {}).items() if strict else ():
        _file_mount_shape(dest, source)
        _shell_quotable(dest, f"file_mounts.{dest}")
        _shell_quotable(source, f"file_mounts.{dest}", "source")
    if strict:
        _config_shape(task.get("config"))
    if "workdir" in task and task["workdir"] is not None and not isinstance(task["workdir"], (str, dict)):
        raise SpecError("workdir", "must be a path, or a git repository as {url: ..., ref: ...}")
    if strict:
        _shell_quotable(task.get("workdir"), "workdir", "path")
        if isinstance(task.get("workdir"), dict):
            _git_workdir(task["workdir"])
        _not_relative(task.get("workdir"), "workdir")
        for dest, source in (task.get("file_mounts") or {}).items():
            inner = source.get("source") if isinstance(source, dict) else source
            for one in inner if isinstance(inner, list) else [inner]:
                _not_relative(one, f"file_mounts.{dest}" if isinstance(source, str) else f"file_mounts.{dest}.source")
    broker = _parse_broker(raw.get("broker"), now=now, strict=strict)
    if broker.workdir is not None and task.get("workdir") is not None:
        raise SpecError("broker.workdir", "names an uploaded workdir, but the task has a workdir of its own too: "
                                          "give one (`broker submit` uploads the task's workdir and sets this for you)")
    both = sorted(set(broker.file_mounts or {}) & set(task.get("file_mounts") or {}))
    if both:
        raise SpecError(f"broker.file_mounts.{both[0]}", "names an uploaded pack, but the task's file_mounts mount "
                                                         "something there too: give one")
    if strict and broker.deadline is not None and broker.expected_hours is not None \
            and now + float(broker.expected_hours) * 3600 > broker.deadline:
        need = float(broker.expected_hours) * 3600
        raise SpecError("broker.deadline", f"is {_span(broker.deadline - now)} away, but broker.expected_hours says "
                                           f"the job needs {broker.expected_hours} h"
                                           + (f" ({_span(need)})" if need < 3600 else "")
                                           + ": move the deadline or correct the estimate")
    sourced = _sourced_resources(task.get("resources"), strict=strict)
    alternatives = tuple(r for r, _ in sourced)
    broker = _retry_from_job_recovery(task.get("resources"), raw.get("broker"), broker, strict=strict)
    if strict and not (task.get("run") or "").strip() and not (task.get("setup") or "").strip():
        raise SpecError("run", "is required: the shell command that trains, such as 'python train.py'")
    resources = task.get("resources")
    request = JobRequest(
        alternatives=alternatives,
        ordered=_ordered(resources),
        num_nodes=num_nodes,
        max_price_per_hour=broker.max_price_per_hour,
        expected_hours=broker.expected_hours,
    )
    return JobSpec(task=task, broker=broker, request=request, sources=tuple(i for _, i in sourced))


def _ordered(resources: Any) -> bool:
    """Whether the alternatives are in the user's order of preference, as SkyPilot reads them: ``ordered``, or
    ``accelerators`` given as a list (``[A10G:1, T4:1]``: "tried in the listed order"; a mapping is a set)."""
    if not isinstance(resources, dict) or "any_of" in resources:
        return False
    return "ordered" in resources or isinstance(resources.get("accelerators"), list)


def _runnable_text(text: str, where: str, *, env_name: str | None = None) -> None:
    """A command or an environment value (of the variable ``env_name``) must reach the shell whole: a NUL byte
    cannot be passed to a process at all, a lone surrogate (``"\\ud800"`` in JSON) cannot be written as UTF-8, and
    Linux starts no process with one argument or environment string over :data:`MAX_ARG_BYTES` ("Argument list too
    long"). Each would be accepted, then fail every attempt at launch as if the node had been lost."""
    if "\x00" in text:
        raise SpecError(where, "contains a NUL character (\\u0000), which no command or environment variable can hold")
    try:
        size = len(text.encode("utf-8"))
    except UnicodeEncodeError as exc:
        raise SpecError(where, f"contains {text[exc.start]!r} at character {exc.start + 1}, which is not a Unicode "
                               "character (a lone surrogate) and cannot be written as UTF-8") from None
    if env_name is not None:
        size += len(env_name.encode("utf-8")) + 1  # NAME=value is one string
        if size > MAX_ARG_BYTES:
            raise SpecError(where, f"must be at most {MAX_ARG_BYTES:,} bytes as {env_name}=value (UTF-8), the most "
                                   f"Linux puts in one environment variable; it is {size:,}, so every launch would "
                                   "fail: put a large value in a file (file_mounts, or a bucket) and pass its path")
    elif size > MAX_ARG_BYTES:
        raise SpecError(where, f"must be at most {MAX_ARG_BYTES:,} bytes (UTF-8), the most Linux passes a command in "
                               f"one argument; it is {size:,}, so every launch would fail: put the script in a file "
                               "in the workdir and run that file")


# --- ${VAR} in paths -----------------------------------------------------------------------------

_ENV_REF = re.compile(r"\$\{?\b([a-zA-Z_][a-zA-Z0-9_]*)\b\}?")
"""A reference to a variable, as SkyPilot finds one in ``workdir``, ``file_mounts`` and ``volumes``
(``sky/task.py::_fill_in_env_vars``, 0.14.1): ``${VAR}`` or ``$VAR`` (and, as its pattern reads them, ``${VAR`` and
``$VAR}``)."""
ENV_FILLED_FIELDS = ("workdir", "file_mounts", "volumes")
"""The task fields SkyPilot fills the task's variables into when it reads the task (``Task.from_yaml_config``): every
string in them, a mount's destination (a key) among them, and a storage mapping's ``source`` and ``name``. (It fills
``service`` too, which the broker refuses.)"""


def fill_env_refs(text: str, envs: Mapping[str, Any]) -> str:
    """``text`` with each ``${VAR}`` or ``$VAR`` naming one of ``envs`` replaced by its value (a number as its text),
    as SkyPilot fills a task's ``workdir`` and ``file_mounts``; a reference to a variable not in ``envs`` (or set to
    null there) is left as written, as SkyPilot leaves it. One pass: a value that itself holds ``$OTHER`` is put in as
    it is. ``broker submit`` calls this to find a ``${VAR}`` workdir before packing it."""
    def value(match: re.Match[str]) -> str:
        given = envs.get(match.group(1))
        return match.group(0) if given is None else str(given)

    return _ENV_REF.sub(value, text)


def _filled_env_refs(task: dict[str, Any]) -> dict[str, Any]:
    """``task`` with its ``envs`` filled into :data:`ENV_FILLED_FIELDS` (:func:`fill_env_refs`), where SkyPilot fills
    them, so that both launchers and every check of the broker (a path on its host, a ``broker:`` or ``sha256:``
    source, a mount in use) see the paths the job uses: before, the local launcher made the mount
    ``~/mnt/llama-${SIZE}b`` as written and the job failed, while SkyPilot filled it in. The task's ``envs`` are its
    last ones (``broker submit --env`` sets them in the task it sends). SkyPilot fills in the task's ``secrets`` too;
    the broker refuses a reference to one, naming the field: it keeps secrets sealed, and filled in here the value
    would be stored, and shown with the job, in the clear."""
    envs = task.get("envs") if isinstance(task.get("envs"), dict) else {}
    secrets = task.get("secrets") if isinstance(task.get("secrets"), dict) else {}
    hidden = {k for k, v in secrets.items() if v is not None}
    out = dict(task)
    for key in ENV_FILLED_FIELDS:
        if task.get(key) is not None:
            out[key] = _fill_value(task[key], envs, hidden, key)
    return out


def _fill_value(value: Any, envs: Mapping[str, Any], hidden: set[str], where: str) -> Any:
    """:func:`fill_env_refs` over every string in ``value`` (a mapping's keys too), refusing a reference to one of
    the ``hidden`` (secret) names at ``where``."""
    if isinstance(value, str):
        for match in _ENV_REF.finditer(value):
            if match.group(1) in hidden:
                raise SpecError(where, f"refers to {match.group(0)}, one of the task's secrets: SkyPilot fills a "
                                       "secret in here, but the broker keeps secrets sealed, and filled in, its value "
                                       "would be stored and shown with the job in the clear: give it in envs "
                                       "instead, or write the value out")
        return fill_env_refs(value, envs)
    if isinstance(value, dict):
        out = {}
        for k, v in value.items():
            key = _fill_value(k, envs, hidden, f"{where}.{k}") if isinstance(k, str) else k
            if key in out:  # two destinations that fill in to one: the one read last was mounted, the other not
                raise SpecError(f"{where}.{k}", f"and another destination are both {key!r} once the task's envs are "
                                                "filled in: mount each at a path of its own")
            out[key] = _fill_value(v, envs, hidden, f"{where}.{key}")
        return out
    if isinstance(value, list):
        return [_fill_value(v, envs, hidden, f"{where}[{i}]") for i, v in enumerate(value)]
    return value


# --- resources ---------------------------------------------------------------------------------


def alternative_sources(resources: Any) -> tuple[int | None, ...]:
    """For each alternative placement reads from ``resources`` (a stored task's, read as the engine reads it), the
    index of the ``any_of`` / ``ordered`` entry it comes from, ``None`` without a list: see :attr:`JobSpec.sources`
    and :func:`broker.offers.placed_alternative`."""
    return tuple(i for _, i in _sourced_resources(resources, strict=False))


def _broker_decided(mapping: dict[str, Any], prefix: str) -> None:
    """Refuse a SkyPilot resources key whose decision is the broker's (:data:`BROKER_DECIDED_RESOURCES`)."""
    for key in (k for k in mapping if k in BROKER_DECIDED_RESOURCES):
        raise SpecError(f"{prefix}{key}", BROKER_DECIDED_RESOURCES[key])


def _sourced_resources(resources: Any, *, strict: bool = True) -> list[tuple[ResourceRequest, int | None]]:
    """The resource shapes placement chooses among, each with the index of the ``any_of`` / ``ordered`` alternative
    it was read from (``None``: there is no list)."""
    if resources is None:
        return [(ResourceRequest(), None)]
    if not isinstance(resources, dict):
        raise SpecError("resources", "must be a mapping")
    if strict:
        _known_keys(resources, RESOURCE_KEYS, "resources.")
        _broker_decided(resources, "resources.")
    if strict and "any_of" in resources and "ordered" in resources:
        # any_of was read and ordered dropped without a word (SkyPilot refuses the two together, at launch)
        raise SpecError("resources.ordered", "cannot be given with resources.any_of: give any_of for the cheapest of "
                                             "the alternatives, or ordered for them tried in the order listed")
    base = {k: v for k, v in resources.items() if k not in ("any_of", "ordered")}
    key = "any_of" if "any_of" in resources else "ordered"
    if key not in resources:
        return [(r, None) for r in _one_resource(base, "resources", strict=strict)]
    variants = resources[key]
    if not isinstance(variants, list) or not variants:
        raise SpecError(f"resources.{key}", "must be a non-empty list of resource mappings")
    out: list[tuple[ResourceRequest, int | None]] = []
    for i, variant in enumerate(variants):
        if not isinstance(variant, dict):
            raise SpecError(f"resources.{key}[{i}]", "must be a mapping")
        if strict:
            _known_keys(variant, RESOURCE_KEYS - {"any_of", "ordered"}, f"resources.{key}[{i}].")
            _broker_decided(variant, f"resources.{key}[{i}].")
        out.extend((r, i) for r in _one_resource({**base, **variant}, f"resources.{key}[{i}]", strict=strict))
    return out


def unknown_key_hint(key: object, known: frozenset[str] | set[str]) -> str:
    """For a key that is not one of ``known``: the likely one (``did you mean 'x'?``), else the list
    (private ``_`` keys are never offered)."""
    public = sorted(k for k in known if not k.startswith("_"))
    close = difflib.get_close_matches(str(key), public, n=1)
    return f"did you mean '{close[0]}'?" if close else f"known: {', '.join(public)}"


EMPTY_KEY = "holds an empty key (\"\"), and an empty key is not a field: remove it, or name the one meant"


def unknown_key_refusal(where: str, key: object, reason: str) -> SpecError:
    """The refusal of ``key``, not one the mapping at ``where`` takes (``""``: the task itself), as ``where.key``;
    an empty key is refused as the mapping that holds it, which named no field (``broker.: is not a broker
    setting``, and a key of the task ``: is not a SkyPilot task key`` with no field at all)."""
    if key == "":
        return SpecError(where or "body", EMPTY_KEY)
    return SpecError(f"{where}.{key}" if where else str(key), reason)


def _unknown(mapping: Any, known: frozenset[str] | set[str], prefix: str, what: str) -> list[tuple[str, str, str]]:
    """The keys of ``mapping`` (when it is one) not in ``known``: (field, reason as :func:`_known_keys` says it, the
    field with the likely key when there is one) each."""
    if not isinstance(mapping, dict):
        return []
    out = []
    for key in sorted(mapping, key=str):
        if key == "":
            field = prefix.rstrip(".") or "body"
            out.append((field, EMPTY_KEY, f"an empty key in {field}"))
        elif key not in known:
            hint = unknown_key_hint(key, known)
            out.append((f"{prefix}{key}", f"is not a {what} ({hint})",
                        f"{prefix}{key}" + (f" ({hint})" if hint.startswith("did you mean") else "")))
    return out


def _all_unknown_keys(raw: dict[str, Any]) -> None:
    """Every misspelt key of a task at once, where there are several: the task's, its ``broker:`` section's, its
    resources' and their ``any_of`` / ``ordered`` alternatives'. Said one at a time, a task with `acelerators` and
    `dedline` took a submit to learn of each. One alone is left to the checks that meet it, in their order."""
    found = _unknown({k: v for k, v in raw.items() if k != "broker"}, TASK_KEYS | {"broker"}, "", "SkyPilot task key")
    found += _unknown(raw.get("broker"), BROKER_KEYS, "broker.", "broker setting")
    resources = raw.get("resources")
    found += _unknown(resources, RESOURCE_KEYS, "resources.", "SkyPilot resources key")
    for key in ("any_of", "ordered"):
        variants = resources.get(key) if isinstance(resources, dict) else None
        for i, variant in enumerate(variants if isinstance(variants, list) else []):
            found += _unknown(variant, RESOURCE_KEYS - {"any_of", "ordered"}, f"resources.{key}[{i}].",
                              "SkyPilot resources key")
    if len(found) > 1:
        (field, reason, _), rest = found[0], found[1:]
        raise SpecError(field, f"{reason}; other unknown keys: " + ", ".join(short for _, _, short in rest))


def _known_keys(mapping: dict[str, Any], known: frozenset[str] | set[str], prefix: str) -> None:
    """Refuse a key SkyPilot does not know (a typo would otherwise be dropped, or refused only at launch)."""
    for key in sorted(mapping, key=str):
        if key not in known:
            raise unknown_key_refusal(prefix.rstrip("."), key, f"is not a SkyPilot "
                                      f"{'resources' if prefix else 'task'} key ({unknown_key_hint(key, known)})")


def _one_resource(r: dict[str, Any], where: str, *, strict: bool = True) -> list[ResourceRequest]:
    cloud, region, zone = _location(r, where)
    use_spot = r.get("use_spot")
    if use_spot is not None and not isinstance(use_spot, bool):
        raise SpecError(f"{where}.use_spot", "must be true or false")
    cpus = _amount(r.get("cpus"), f"{where}.cpus", strict=strict)
    memory = _memory(r.get("memory"), f"{where}.memory", strict=strict)
    # SkyPilot reads a size without '+' as exact (`cpus: 16`: a 16-vCPU type, never 32): placement holds an
    # instance type to it, as SkyPilot refuses one of another size
    cpus_exact, memory_exact = cpus is not None and not _at_least(r["cpus"]), \
        memory is not None and not _at_least(r["memory"])
    instance_type = r.get("instance_type")
    if instance_type is not None and not isinstance(instance_type, str):
        raise SpecError(f"{where}.instance_type", "must be a string")
    accs = _accelerators(r.get("accelerators"), f"{where}.accelerators", strict=strict)
    local_disk = _local_disk(r.get("local_disk"), f"{where}.local_disk", strict=strict)
    if strict:
        _launch_settings(r, where)
    regions = _image_regions(r.get("image_id"), cloud, region, f"{where}.image_id", strict=strict)
    return [
        ResourceRequest(
            accelerator=name, accelerator_count=count, cpus=cpus, memory_gib=memory, use_spot=use_spot,
            cloud=cloud, region=in_region, zone=zone, instance_type=instance_type, cpus_exact=cpus_exact,
            memory_exact=memory_exact, local_disk=local_disk,
        )
        for name, count in accs for in_region in regions
    ]


def _local_disk(value: Any, where: str, *, strict: bool = True) -> LocalDisk | None:
    """``resources.local_disk`` as SkyPilot normalizes it (:meth:`pricing.offers.LocalDisk.parse`): placement gives
    it only an instance type known to have that disk (:func:`pricing.placement.local_disk_fits`), so a job no
    offer can give it is refused at submit (:func:`broker.admission.admit`), not placed on a type SkyPilot then
    refused to launch. SkyPilot's schema takes a string alone (``local_disk: 1000`` it refuses at launch). A stored
    job (``strict`` off) admitted before the check is read leniently: a value that is no local disk asks for none,
    as it was placed."""
    if value is None:
        return None
    if strict and not isinstance(value, str):
        raise SpecError(where, f"must be a string, one of {LOCAL_DISK_FORMS}")
    try:
        return LocalDisk.parse(value)
    except ValueError as exc:
        if strict:
            raise SpecError(where, str(exc)) from None
        return None


_DISK_SIZE = re.compile(r"^[0-9]+(?:[kmgtp][bi])?$", re.I)  # SkyPilot's schema: 100, "100", "100GB", "1Ti"
_PORT_RANGE = re.compile(r"^([0-9]{1,5})(?:-([0-9]{1,5}))?$")
MAX_DISK_GB = 65_536  # no cloud's boot disk is larger (AWS gp3 and GCP pd: 64 TiB)


TIERS = {"disk_tier": ("low", "medium", "high", "ultra", "best"), "network_tier": ("standard", "best")}
"""The names SkyPilot's ``Resources`` takes for each tier (``sky.utils.resources_utils.DiskTier``, ``NetworkTier``),
in any case, as it lowers them: any other it refuses at launch ("Invalid disk_tier 'superfast'"), after the job had
been queued and placed. Its schema takes any string."""


def _launch_settings(r: dict[str, Any], where: str) -> None:
    """The ``resources`` settings placement does not read but a launch hands to SkyPilot (``disk_size``,
    ``disk_tier``, ``network_tier``, ``ports``, ``labels``, ``image_id``), held to the types SkyPilot's schema takes:
    a value it refuses was accepted and stored, and failed only at launch, after the job was queued and placed."""
    size = r.get("disk_size")
    if size is not None:
        if isinstance(size, bool) or not isinstance(size, (int, str)) or \
                (isinstance(size, str) and not _DISK_SIZE.match(size)):
            raise SpecError(f"{where}.disk_size", "must be a size in GB (256), or with its unit (\"256GB\", \"1TB\")")
        if isinstance(size, int) and not 1 <= size <= MAX_DISK_GB:
            raise SpecError(f"{where}.disk_size", f"must be from 1 to {MAX_DISK_GB:,} (GB)")
    for key, names in TIERS.items():
        value = r.get(key)
        if value is not None and (not isinstance(value, str) or value.lower() not in names):
            shown = f", not {value!r}" if isinstance(value, str) and value.strip() and value.isprintable() else ""
            raise SpecError(f"{where}.{key}", f"must be {', '.join(names[:-1])} or {names[-1]} (SkyPilot's "
                                              f"{key.replace('_', ' ')}s){shown}")
    ports = r.get("ports")
    if ports is not None:
        for port in ports if isinstance(ports, list) else [ports]:
            text = str(port) if isinstance(port, int) and not isinstance(port, bool) else port
            match = _PORT_RANGE.match(text) if isinstance(text, str) else None
            if match is None or not all(1 <= int(p) <= 65_535 for p in match.groups() if p is not None) or \
                    (match.group(2) is not None and int(match.group(2)) < int(match.group(1))):
                raise SpecError(f"{where}.ports", "must be a port (8888), a range (\"10000-10010\") or a list of "
                                                  "them, each from 1 to 65535")
    labels = r.get("labels")
    if labels is not None and (not isinstance(labels, dict) or
                               not all(isinstance(k, str) and isinstance(v, str) for k, v in labels.items())):
        raise SpecError(f"{where}.labels", "must be a mapping of names to strings")
    image = r.get("image_id")
    if image is not None and not isinstance(image, (str, dict)):
        raise SpecError(f"{where}.image_id", "must be an image name, or a mapping of region to image name")


def _image_regions(image: Any, cloud: str | None, region: str | None, where: str, *,
                   strict: bool = True) -> list[str | None]:
    """The regions a resource may be placed in, given its ``image_id``: a mapping of region to image limits it to
    those regions, as SkyPilot's failover goes only through them (placed elsewhere, the launch failed). At submit
    (``strict``), what SkyPilot refuses is refused here: a cloud's own image (an AMI, a GCP image: not ``docker:``)
    with no cloud, or an AMI with no region (a ``skypilot:`` tag excepted), and a region the mapping has no
    image for."""
    regional = isinstance(image, dict) and bool(image) and None not in image
    values = list(image.values()) if isinstance(image, dict) else [image] if isinstance(image, str) else []
    if strict and cloud is None and any(not str(v).startswith("docker:") for v in values):
        raise SpecError(where, "names a cloud's own image, which SkyPilot runs only on that cloud: give its cloud in "
                               "resources.infra (aws/us-east-1 for an AMI), or a docker: image, which runs anywhere")
    if strict and cloud == "aws" and region is None and isinstance(image, str) \
            and not image.startswith(("docker:", "skypilot:")):
        raise SpecError(where, f"is an AMI, which lives in one AWS region: give it in resources.infra "
                               f"(aws/us-east-1), or a mapping of regions to images ({{us-east-1: {image}}})")
    if not regional:
        return [region]
    named = [str(k) for k in image]
    if region is None:
        return named
    if strict and region not in named:
        raise SpecError(where, f"has an image for {', '.join(named)} but none for {region}, the region the resources "
                               "ask for: add one, or ask for one of those regions")
    return [region]


def _location(r: dict[str, Any], where: str) -> tuple[str | None, str | None, str | None]:
    infra = r.get("infra")
    if infra is not None:
        if not isinstance(infra, str) or not infra.strip():
            raise SpecError(f"{where}.infra", "must look like 'aws', 'aws/us-east-1' or 'aws/us-east-1/us-east-1a'")
        first, _, context = infra.strip().partition("/")
        # a Kubernetes context may hold slashes itself (EKS: arn:aws:eks:...:cluster/name), as SkyPilot reads it
        text = [first, context] if _cloud(first) == "kubernetes" else infra.strip().split("/")
        parts = [None if p in ("", "*") else p for p in text]  # '*': any, as SkyPilot's wildcard
        if len(parts) > 3 or text[0] == "":
            raise SpecError(f"{where}.infra", "must look like 'aws', 'aws/us-east-1' or 'aws/us-east-1/us-east-1a'")
        parts += [None] * (3 - len(parts))
        return _cloud(parts[0]) if parts[0] else None, parts[1], parts[2]
    out = []
    for key in ("cloud", "region", "zone"):
        value = r.get(key)
        if value is not None and not isinstance(value, str):
            raise SpecError(f"{where}.{key}", "must be a string")
        out.append(_cloud(value) if key == "cloud" and value else value)
    return out[0], out[1], out[2]


def local_pool_refusal(resources: Any, pools: Iterable[str]) -> SpecError | None:
    """The refusal of an on-prem pool asked for (``infra: local/<pool>``, in ``resources`` or an alternative) that
    the broker has not, ``pools`` being the names of those it has (``local/<name>``: its config's ``pools``), in the
    words placement says it in (*"there is no pool gpu9 here: the only pool is gpu2"*); None where each pool asked
    for is one. For the service to ask before SkyPilot checks the task: ``local`` is no cloud to SkyPilot, and a
    broker with no pools (launcher skypilot, ``pools: []``) answered with SkyPilot's schema error and its whole
    pattern of clouds (``'local/dgx' does not match '^(?:(?i:(aws|azure|...``)."""
    names = sorted(set(pools))
    try:
        sourced = _sourced_resources(resources, strict=False)
    except SpecError:
        return None  # a shape parse refuses itself
    for alt, index in sourced:
        if (alt.cloud or "").lower() != "local":
            continue
        if alt.region is not None and alt.region.lower() in {n.lower() for n in names}:
            continue
        if alt.region is None and names:
            continue
        where = "resources" if index is None else \
            f"resources.{'any_of' if 'any_of' in resources else 'ordered'}[{index}]"
        merged = {**resources, **(resources.get("any_of") or resources.get("ordered"))[index]} \
            if index is not None else resources
        field = f"{where}.infra" if "infra" in merged else f"{where}.{'region' if alt.region else 'cloud'}"
        if not names:
            asked = f"the pool {alt.region}, but there is no pool {alt.region} here, nor any" if alt.region else \
                "an on-prem pool (local), but there is none here"
            return SpecError(field, f"asks for {asked}: `pools` in the broker's config has none; name a cloud "
                                    "(infra: aws) or leave infra out")
        close = difflib.get_close_matches(alt.region, names, n=1, cutoff=0.75) if len(names) > 1 else []
        meant = f"did you mean local/{close[0]}? " if close else ""
        listed = f"the pools are {', '.join(names[:-1])} and {names[-1]}" if len(names) > 1 else \
            f"the only pool is {names[0]}"
        return SpecError(field, f"asks for the pool {alt.region}, but there is no pool {alt.region} here: "
                                f"{meant}{listed}")
    return None


CLOUD_ALIASES = {"k8s": "kubernetes"}
"""Other names SkyPilot takes for a cloud (``infra: k8s/<context>``), to the name offers carry."""


def _cloud(name: str) -> str:
    return CLOUD_ALIASES.get(name.lower(), name.lower())


def _accelerators(value: Any, where: str, *, strict: bool = True) -> list[tuple[str | None, int]]:
    if value is None:
        return [(None, 0)]
    if isinstance(value, str):
        return [_one_accelerator(value, where)]
    if isinstance(value, dict):
        if not value:
            raise SpecError(where, "must name at least one accelerator")
        out = []
        for name, count in value.items():
            if strict and (not isinstance(name, str) or not name.strip()):
                # `{"": 1}` was "no offer has the resources asked", naming resources; YAML's `{~: 1}` asked for "None"
                raise SpecError(where, f"must map each accelerator's name to its count, like {{A100: 8}}; {name!r} is "
                                       "not a name")
            if count is None:  # `{A100:1, V100:1}`, SkyPilot's set: YAML reads each "A100:1" as a key with no value
                out.append(_one_accelerator(str(name), where))
                continue
            if isinstance(count, bool) or not isinstance(count, (int, float)) or not math.isfinite(count) \
                    or count <= 0 or int(count) != count:
                raise SpecError(f"{where}.{name}", "count must be a positive whole number")
            if count > MAX_ACCELERATORS:
                raise SpecError(f"{where}.{name}", TOO_MANY_ACCELERATORS)
            out.append((str(name), int(count)))
        return out
    if isinstance(value, (list, set, tuple)):
        if not value:
            raise SpecError(where, "must name at least one accelerator")
        return [_one_accelerator(v, where) for v in value]
    raise SpecError(where, "must be like 'A100:8', a mapping {A100: 8}, or a list of those")


MAX_ACCELERATORS = 1024
MAX_NODES = 10_000
TOO_MANY_ACCELERATORS = f"count must be at most {MAX_ACCELERATORS}: it is per node, and no node has more"


def _one_accelerator(text: Any, where: str) -> tuple[str, int]:
    if not isinstance(text, str) or not text.strip():
        raise SpecError(where, "must be like 'A100' or 'A100:8'")
    name, _, count = text.strip().partition(":")
    if not name:
        raise SpecError(where, "must be like 'A100' or 'A100:8'")
    if not count:
        return name, 1
    try:
        n = Decimal(count)
    except InvalidOperation:
        raise SpecError(where, f"count {count!r} is not a number") from None
    if not n.is_finite() or n <= 0 or n != n.to_integral_value():  # 'A100:inf' and 'A100:nan' were 500s
        raise SpecError(where, "count must be a positive whole number")
    if n > MAX_ACCELERATORS:  # 'A100:1e400' was refused later, its 401 digits written out in the sentence
        raise SpecError(where, TOO_MANY_ACCELERATORS)
    return name, int(n)


def _at_least(value: Any) -> bool:
    """Whether a ``cpus`` / ``memory`` value says "at least" (``4+``, ``"32GB+"``); without the '+' SkyPilot takes
    the size as exact (``sky/catalog/common.py``, ``_filter_with_cpus`` / ``_filter_with_mem``; ``sky.Resources``
    refuses an instance type of another size)."""
    return isinstance(value, str) and value.strip().endswith("+")


MAX_CPUS = 10_000
MAX_MEMORY_GB = 2**20  # 1 PB; the largest instance types have 2,000 vCPUs and 32 TB


def _amount(value: Any, where: str, unreadable: str = "must be a number, optionally followed by '+'", *,
            most: int = MAX_CPUS, unit: str = "vCPUs", strict: bool = True) -> Decimal | None:
    """cpus / memory: ``4``, ``"4"`` (exactly) or ``"4+"`` (at least: :func:`_at_least`). ``unreadable``: what a
    value that is no number is told; ``most``: the largest taken at submit (``strict``), in ``unit``."""
    if value is None:
        return None
    # one '+' at most, as SkyPilot's Resources takes ("2++" raises there, and was admitted here to fail at launch);
    # a job stored before that was refused is read as it was admitted
    text = str(value).strip().removesuffix("+") if strict else str(value).strip().rstrip("+")
    if isinstance(value, bool):
        raise SpecError(where, unreadable)
    try:
        amount = Decimal(text)
    except InvalidOperation:
        raise SpecError(where, unreadable) from None
    if not amount.is_finite() or amount <= 0:
        raise SpecError(where, "must be positive")
    return _at_most(amount, most, where, unit, strict)


def _at_most(amount: Decimal, most: int, where: str, unit: str, strict: bool) -> Decimal:
    """A size no node has is refused at submit, as an accelerator count is: ``cpus: "1e999999999"`` was a 500 (the
    refusal wrote the number out, past what Decimal holds), and ``cpus: 1e300`` a refusal 300 digits long. (An offer
    of unknown size takes any, so a stored job may ask for more: it is read as it was admitted.)"""
    if strict and amount > most:
        raise SpecError(where, f"must be at most {most} {unit}: it is per node, and no node has more")
    return amount


MEMORY_UNITS = {"k": 2**-20, "m": 2**-10, "g": 1, "t": 2**10, "p": 2**20}
"""SkyPilot's memory units (``KB``/``Ki`` ... ``PB``/``Pi``, in any case, all powers of 2), in GB."""
_MEMORY = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([kmgtp])[bi]\s*\+?\s*$", re.I)


def _memory(value: Any, where: str, *, strict: bool = True) -> Decimal | None:
    """memory: as :func:`_amount` (GB), or with one of SkyPilot's units (``64GB``, ``1024MB``, ``32GB+``)."""
    m = _MEMORY.match(value) if isinstance(value, str) else None
    if m is None:
        return _amount(value, where, "must be a number of GB (64), or a size with its unit (64GB, 1024MB), "
                                     "optionally followed by '+'", most=MAX_MEMORY_GB, unit="GB (1 PB)", strict=strict)
    amount = Decimal(m.group(1)) * Decimal(MEMORY_UNITS[m.group(2).lower()])
    if amount <= 0:
        raise SpecError(where, "must be positive")
    return _at_most(amount, MAX_MEMORY_GB, where, "GB (1 PB)", strict)


# --- broker section ----------------------------------------------------------------------------


SETTING_FIELDS = {"budget_usd": "budget", "max_price_per_hour": "max_price_per_hour", "priority": "priority",
                  "deadline": "deadline", "expected_hours": "expected_hours", "team": "team"}
"""The ``broker:`` settings a submit's options may set (the CLI's ``--budget``, Slack's ``budget=``), and the field
of the parsed section each sets."""


def same_setting(key: str, a: Any, b: Any, *, now: float) -> bool:
    """Whether ``a`` and ``b``, two values of ``broker.<key>``, read as one setting (``$2`` and ``2.00``, ``6h`` and
    ``360min`` at ``now``): what the API reads each as, or the text itself where one reads as nothing (refused later,
    in the API's words)."""
    def meaning(value: Any) -> Any:
        try:
            return getattr(_parse_broker({key: value}, now=now, strict=False), SETTING_FIELDS[key])
        except (ValueError, TypeError, KeyError, ArithmeticError, AttributeError):  # SpecError is a ValueError
            return str(value).strip()

    return meaning(a) == meaning(b)


def _parse_broker(section: Any, *, now: float, strict: bool = True) -> BrokerSection:
    if section is None:
        return BrokerSection()
    if not isinstance(section, dict):
        raise SpecError("broker", "must be a mapping")
    unknown = sorted(set(section) - BROKER_KEYS, key=str)  # YAML keys may be numbers too: `{1: a, x: b}` was a 500
    if unknown and strict:  # a stored spec may hold a newer broker's setting: read leniently, it is left as it is
        raise unknown_key_refusal("broker", unknown[0],
                                  f"is not a broker setting ({unknown_key_hint(unknown[0], BROKER_KEYS)})")
    team = section.get("team")
    if team is not None and (not isinstance(team, str) or not _name_like(team, strict)):
        raise SpecError("broker.team", "must be a team name (letters, digits, '-', '_', '.')")
    budget = _money(section.get("budget_usd"), "broker.budget_usd", strict=strict)
    if budget is not None and budget <= 0:
        raise SpecError("broker.budget_usd", "must be more than $0")
    max_price = _money(section.get("max_price_per_hour"), "broker.max_price_per_hour", strict=strict)
    if max_price is not None and max_price <= 0:
        raise SpecError("broker.max_price_per_hour", "must be more than $0")
    priority = section.get("priority", 0)
    if isinstance(priority, bool) or not isinstance(priority, int) or not -1000 <= priority <= 1000:
        raise SpecError("broker.priority", "must be a whole number from -1000 to 1000")
    checkpoint = section.get("checkpoint")
    if checkpoint is not None and (not isinstance(checkpoint, str) or not checkpoint.strip()):
        raise SpecError("broker.checkpoint", "must be a URL prefix such as s3://bucket/runs")
    if strict and checkpoint is not None and (len(checkpoint) > MAX_CHECKPOINT_URI
                                              or any(ord(c) < 32 or ord(c) == 127 for c in checkpoint)):
        # each attempt is given it in BROKER_CHECKPOINT_*: a NUL, or more than the kernel takes in an environment
        # string, failed every launch, each read as a lost node and retried (20 attempts, each billed)
        raise SpecError("broker.checkpoint", f"must be at most {MAX_CHECKPOINT_URI} characters, with no control "
                                             "characters: each attempt is given it in its environment")
    problem = checkpoint_uri_problem(checkpoint.strip()) if strict and checkpoint is not None else None
    if problem:
        raise SpecError("broker.checkpoint", problem)
    expected = section.get("expected_hours")
    expected_hours = None
    if expected is not None:
        if strict and isinstance(expected, str):  # Decimal("٥") is 5 too
            _ascii_digits(expected, "broker.expected_hours")
        try:
            expected_hours = Decimal(str(expected))
        except InvalidOperation:
            raise SpecError("broker.expected_hours", _hours_and_minutes(expected) or "must be a number of hours") \
                from None
        if isinstance(expected, bool) or not expected_hours.is_finite() or expected_hours <= 0:
            raise SpecError("broker.expected_hours", "must be a positive number of hours")
        if strict and expected_hours < ONE_SECOND_IN_HOURS:  # 1e-30 h planned as no work: the spot policy waited for ever
            raise SpecError("broker.expected_hours", "is less than a second; leave it out if the job's length is "
                                                     "not known")
        if strict and expected_hours > MAX_EXPECTED_HOURS:
            raise SpecError("broker.expected_hours", f"is more than {MAX_EXPECTED_HOURS} hours ({MAX_DEADLINE_DAYS} days); "
                                                     "leave it out if the job's length is not known")
    workdir = section.get("workdir")
    if workdir is not None:
        if not isinstance(workdir, str) or not DIGEST_RE.match(workdir):
            raise SpecError("broker.workdir", "must be the digest of an uploaded workdir pack, sha256: and 64 "
                                              "lowercase hex digits (PUT /v1/workdirs/sha256:...; `broker submit` "
                                              "uploads the task's workdir and sets it)")
    deadline = None
    if section.get("deadline") is not None:
        deadline = parse_deadline(section["deadline"], now=now, where="broker.deadline", bounded=strict)
    return BrokerSection(
        team=team, budget=budget, deadline=deadline, priority=priority, max_price_per_hour=max_price,
        checkpoint=checkpoint.strip() if checkpoint else None, retry=_retry(section.get("retry")),
        expected_hours=expected_hours, workdir=workdir,
        file_mounts=_uploaded_mounts(section.get("file_mounts"), strict=strict),
    )


def _uploaded_mounts(mounts: Any, *, strict: bool = True) -> dict[str, str] | None:
    """``broker.file_mounts``: where each uploaded pack is mounted (a path on the node, as SkyPilot's
    destinations: absolute or under ``~``) → the pack (``broker/workdir.py``)."""
    if mounts is None:
        return None
    if not isinstance(mounts, dict) or not mounts:
        raise SpecError("broker.file_mounts", "must be a mapping of destinations to uploaded packs (`broker submit` "
                                              "uploads the task's local file_mounts sources and sets it)")
    for dest, value in mounts.items():
        where = f"broker.file_mounts.{dest}"
        _mount_destination(dest, where, strict=strict)
        if strict:  # a check added after the field: a stored spec is read as it was admitted
            _shell_quotable(dest, where)
        try:
            parse_mount(value)
        except PackError as exc:
            raise SpecError(where, str(exc)) from None
    return dict(mounts)


def _mount_destination(dest: Any, where: str, *, strict: bool = True) -> None:
    """A ``file_mounts`` destination (the task's or ``broker.file_mounts``'): a path on the node, absolute or under
    ``~`` — SkyPilot's rule for a mount's destination (``Task._validate_mount_dest_is_absolute``) — and, as SkyPilot
    refuses at launch, with no trailing slash. A relative one (``../../../tmp/x``) is read from wherever the job
    runs: on the local launcher, the broker's own host."""
    if not isinstance(dest, str) or not dest.startswith(("/", "~")) or (dest.endswith("/") and dest != "/") \
            or "\x00" in dest:
        raise SpecError(where, "must be mounted at an absolute path or one under ~, with no trailing slash (as "
                               "SkyPilot's file_mounts)")
    if strict and dest == "/":  # SkyPilot refuses it at launch, after the job waited its turn
        raise SpecError(where, "cannot be / itself: mount the files at a folder, such as /data")


_BUCKET_URL = re.compile(r"[A-Za-z][A-Za-z0-9+.-]*://[^/]")
"""A bucket URL with its bucket at the start of a source (``s3://b/...``): what SkyPilot reads as a store, a URL with
a host part."""
CHECKPOINT_SOURCE = CHECKPOINT_MOUNT
"""The one ``broker:`` value a ``file_mounts`` source may be: the job's checkpoint folder, which the SkyPilot
launcher mounts at launch."""
_BROKER_PREFIXES = ("broker:", "sha256:")


def _broker_value(source: str) -> bool:
    """Whether ``source`` is, exactly, a value the broker resolves itself: ``broker:checkpoint`` or an uploaded pack
    (``sha256:<hex>``, or ``sha256:<hex>/<name>`` for one file, as :func:`broker.workdir.parse_mount` reads it)."""
    if source == CHECKPOINT_SOURCE:
        return True
    try:
        parse_mount(source)
    except PackError:
        return False
    return True


def is_local_path(source: Any) -> bool:
    """Whether a ``workdir`` or ``file_mounts`` source is a path on the machine that reads the task: not a bucket
    URL (``s3://...``) nor a value the broker resolves (``broker:checkpoint``, ``sha256:<hex>``). Read as SkyPilot
    reads it: a ``://`` or a ``:`` elsewhere (``/data/x://../key``, ``x:/../../etc/key``) is part of a path, which
    SkyPilot normalises and uploads from the broker's host — a team's submit named the broker's own secrets that
    way. Only the exact values count, for the same reason: SkyPilot reads ``sha256:/../../etc/hosts`` as the path
    ``/etc/hosts``."""
    return isinstance(source, str) and bool(source) and not _BUCKET_URL.match(source) and not _broker_value(source)


def _not_relative(path: Any, where: str) -> None:
    """A path on the broker's host (a ``workdir``, a ``file_mounts`` source) given relative is refused at submit: the
    broker would read it from its own folder (the local launcher runs there), not the submitter's — a notebook's
    ``workdir: .`` ran, and could write into, the broker's install. ``broker submit`` and ``BrokerClient.submit`` make
    one absolute from where they run before sending it; a body posted by hand must. ``~`` (the broker's user's home),
    a bucket URL and a value the broker resolves (``broker:checkpoint``, ``sha256:…``) are not relative paths."""
    if not is_local_path(path) or path.startswith(("/", "~")):
        return
    raise SpecError(where, f"is {path[:200]!r}, a relative path, which the broker would read from its own folder, not "
                           "from the folder you submit from: give an absolute path (`broker submit` and "
                           "BrokerClient.submit make a relative one absolute from the folder they run in)")


def _broker_source(source: str, where: str, *, storage: bool = False) -> None:
    """A ``file_mounts`` source that starts as a broker value (``broker:``, ``sha256:``) must be one exactly: anything
    else there is a path to SkyPilot, read on the broker's host. In a storage mapping (``storage``) it is never one:
    the broker resolves only a mount's value given alone."""
    if not source.startswith(_BROKER_PREFIXES):
        return
    if storage:
        raise SpecError(where, f"is {source[:80]!r}, but a storage mapping's source is a path or a bucket URL: give "
                               f"{CHECKPOINT_SOURCE} or an uploaded pack as the mount's value itself "
                               f"(file_mounts: {{/data: {CHECKPOINT_SOURCE}}})")
    if source.startswith("broker:") and source != CHECKPOINT_SOURCE:
        raise SpecError(where, f"is {source[:80]!r}, but the only broker: source is {CHECKPOINT_SOURCE} (the job's "
                               "checkpoint folder); give that, a path or a bucket URL (s3://bucket/data)")
    if source.startswith("sha256:"):
        try:
            parse_mount(source)
        except PackError as exc:
            raise SpecError(where, str(exc)) from None


STORAGE_STORES = ("S3", "GCS", "AZURE", "R2", "IBM", "OCI", "NEBIUS", "COREWEAVE", "VASTDATA", "HF", "VOLUME")
STORAGE_MODES = ("MOUNT", "COPY", "MOUNT_CACHED")
STORAGE_TYPES = ("MODEL_CHECKPOINT_RO", "MODEL_CHECKPOINT_RW", "DATASET_RO", "DATASET_RW")
STORAGE_KEYS = frozenset({"name", "source", "store", "persistent", "mode", "type", "config", "_is_sky_managed",
                          "_bucket_sub_path", "_force_delete"})
"""SkyPilot 0.14.1's storage mapping, a ``file_mounts`` source given as ``{source: ..., mode: ...}``
(``sky.utils.schemas.get_storage_schema``; a test holds these to the installed SkyPilot)."""
_MOUNT_SOURCE = "a path, a bucket URL (s3://bucket/data) or a storage mapping such as {source: s3://bucket/data, mode: MOUNT}"


def _file_mount_shape(dest: Any, source: Any) -> None:
    """One ``file_mounts`` entry held at submit to what SkyPilot takes: a destination path and a source that is a
    string or a storage mapping. Under the local launcher nothing else checked it, and ``{/x: null}``, ``{/x: 5}``
    or ``{/x: {source: 5}}`` were accepted and run with the mount skipped without a word (under SkyPilot the job
    failed at launch, after it had waited its turn and been placed). A destination SkyPilot would take as a number
    (``{5: s3://b/x}``) is refused too: the local launcher could only skip it, and a path is what was meant."""
    if not isinstance(dest, str) or not dest:
        raise SpecError(f"file_mounts.{dest}" if dest != "" else "file_mounts",
                        f"must be mounted at a path on the node, such as /data: {dest!r} is not one")
    where = f"file_mounts.{dest}"
    _mount_destination(dest, where)
    if source is None:
        raise SpecError(where, f"has no source: give {_MOUNT_SOURCE}")
    if isinstance(source, str):
        _bucket_named(source, where)
        _broker_source(source, where)
        return
    if not isinstance(source, dict):
        raise SpecError(where, f"must be {_MOUNT_SOURCE}, not {source!r}")
    unknown = sorted(set(map(str, source)) - STORAGE_KEYS)
    if unknown:
        raise unknown_key_refusal(where, unknown[0], "is not a setting of a storage mount "
                                                     f"({unknown_key_hint(unknown[0], STORAGE_KEYS)})")
    inner = source.get("source")
    if "source" in source and not (isinstance(inner, str) or (
            isinstance(inner, list) and inner and all(isinstance(s, str) for s in inner))):
        raise SpecError(f"{where}.source", f"must be a path or a bucket URL, or a list of them, not {inner!r}")
    for one in [inner] if isinstance(inner, str) else inner if isinstance(inner, list) else []:
        _bucket_named(one, f"{where}.source")
        _broker_source(one, f"{where}.source", storage=True)
    for key, values in (("store", STORAGE_STORES), ("mode", STORAGE_MODES), ("type", STORAGE_TYPES)):
        if key in source and not (isinstance(source[key], str) and source[key].upper() in values):
            raise SpecError(f"{where}.{key}", f"must be one of {', '.join(values)}, not {source[key]!r}")
    for key in ("persistent", "_is_sky_managed", "_force_delete"):
        if key in source and not isinstance(source[key], bool):
            raise SpecError(f"{where}.{key}", f"must be true or false, not {source[key]!r}")
    for key in ("name", "_bucket_sub_path"):
        if key in source and not isinstance(source[key], str):
            raise SpecError(f"{where}.{key}", f"must be a string, not {source[key]!r}")
    if "config" in source and not isinstance(source["config"], dict):
        raise SpecError(f"{where}.config", f"must be a mapping of the store's settings, not {source['config']!r}")


_NO_BUCKET = re.compile(r"^([A-Za-z][A-Za-z0-9+.-]*)://(?:/|$)")


def _bucket_named(source: str, where: str) -> None:
    """A bucket URL that names no bucket (``s3://``, ``gs:///data``) is refused as such: read as a path on the broker's
    host, it was a 403 saying only an admin's submit may name one. A ``file:`` URL is no bucket at all: SkyPilot reads
    ``file:///data`` as a path named so in the broker's folder, and ``file://host/data`` as a store it does not know."""
    if source[:5].lower() == "file:":
        path = urlsplit(source).path or "/data"
        raise SpecError(where, f"is {source[:80]!r}, a file: URL, which SkyPilot does not read as a file_mounts "
                               f"source: give the path itself ({path[:80]}; `broker submit` uploads a path on your "
                               "machine) or a bucket URL (s3://bucket/data)")
    if m := _NO_BUCKET.match(source):
        raise SpecError(where, f"is {source!r}, a bucket URL that names no bucket: write "
                               f"{m.group(1)}://BUCKET or {m.group(1)}://BUCKET/path")


def _is_int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _is_strings(v: Any) -> bool:
    return isinstance(v, list) and all(isinstance(s, str) for s in v)


CONFIG_SECTIONS = {"docker": True, "nvidia_gpus": True, "gcp": True, "azure": True, "ssh": True, "vast": True,
                   "kubernetes": False, "slurm": False}
"""The ``config:`` sections a task may give (SkyPilot's ``OVERRIDEABLE_CONFIG_KEYS_IN_TASK``), each a mapping, and
whether SkyPilot's schema refuses a key in it that is not its own (``True``: ``docker: {run_option: ...}``)."""
CONFIG_VALUES = {
    ("docker", "run_options"): (lambda v: isinstance(v, str) or _is_strings(v), "a string or a list of strings"),
    ("nvidia_gpus", "disable_ecc"): (lambda v: isinstance(v, bool), "true or false"),
    ("ssh", "custom_metadata"): (lambda v: isinstance(v, dict), "a mapping"),
    ("ssh", "pod_config"): (lambda v: isinstance(v, dict), "a mapping"),
    ("ssh", "provision_timeout"): (_is_int, "a whole number of seconds"),
    ("kubernetes", "custom_metadata"): (lambda v: isinstance(v, dict), "a mapping"),
    ("kubernetes", "pod_config"): (lambda v: isinstance(v, dict), "a mapping"),
    ("kubernetes", "provision_timeout"): (_is_int, "a whole number of seconds"),
    ("kubernetes", "dws"): (lambda v: isinstance(v, dict), "a mapping"),
    ("kubernetes", "kueue"): (lambda v: isinstance(v, dict), "a mapping"),
    ("kubernetes", "quota"): (lambda v: isinstance(v, dict), "a mapping"),
    ("kubernetes", "remote_identity"): (lambda v: isinstance(v, (str, dict)), "a string or a mapping"),
    ("kubernetes", "set_pod_resource_limits"): (lambda v: isinstance(v, bool) or (
        isinstance(v, (int, float)) and v >= 1), "true, false or a number of at least 1"),
    ("kubernetes", "enable_docker"): (lambda v: isinstance(v, (bool, dict)) or v in ("ALL", "BUILD"),
                                      "true, false, ALL, BUILD or a mapping"),
    ("azure", "remote_identity"): (lambda v: (isinstance(v, str) and bool(v)) or (
        isinstance(v, list) and all(isinstance(i, dict) for i in v)), "a string or a list of mappings"),
    ("azure", "vpc_name"): (lambda v: v is None or isinstance(v, str), "a string"),
    ("gcp", "vpc_name"): (lambda v: v is None or isinstance(v, str), "a string"),
    ("gcp", "subnet_names"): (lambda v: v is None or isinstance(v, str) or _is_strings(v),
                              "a string or a list of strings"),
    ("gcp", "managed_instance_group"): (lambda v: isinstance(v, dict), "a mapping"),
    ("gcp", "enable_gvnic"): (lambda v: isinstance(v, bool), "true or false"),
    ("gcp", "enable_gpu_direct"): (lambda v: isinstance(v, bool), "true or false"),
    ("gcp", "placement_policy"): (lambda v: isinstance(v, str), "a string"),
    ("vast", "datacenter_only"): (lambda v: isinstance(v, bool), "true or false"),
    ("vast", "create_instance_kwargs"): (lambda v: isinstance(v, dict), "a mapping"),
    ("slurm", "sbatch_options"): (lambda v: isinstance(v, dict), "a mapping"),
    ("slurm", "quota"): (lambda v: isinstance(v, dict), "a mapping"),
    ("slurm", "cpu_partition"): (lambda v: isinstance(v, str), "a string"),
}
"""The type SkyPilot 0.14.1's schema gives each task-level ``config:`` setting (the outer shape only: what lies
inside a ``pod_config`` is Kubernetes's)."""
HOOK_EVENTS = ("stop", "preemption", "down")
HOOK_KEYS = frozenset({"run", "events", "timeout"})
MAX_TASK_HOOKS = 31  # SkyPilot takes 32, and on Kubernetes the broker's notice hook goes first
MAX_HOOK_RUN = 16 * 1024


def _config_shape(config: Any) -> None:
    """A task's ``config:`` held at submit to the shapes SkyPilot's schema gives it: a mapping, each section a
    mapping of its own settings of their types, and ``hooks`` a list of ``{run, events, timeout}``. The local
    launcher reads none of it, so ``config: []`` or ``docker: {run_options: 5}`` were accepted there and refused by
    SkyPilot only at launch, after the job was placed. A section SkyPilot does not know is left to it (it passes
    them on to a server that may know them), and admin-only settings are :func:`admin_only_settings`'s."""
    if config is None:
        return
    if not isinstance(config, dict):
        raise SpecError("config", "must be a mapping of SkyPilot settings, such as {docker: {run_options: ...}}")
    for section, inner in config.items():
        where = f"config.{section}"
        if section == "hooks":
            _hooks_shape(inner)
        elif section == "active_workspace":
            if not isinstance(inner, str):
                raise SpecError(where, f"must be a workspace's name, not {inner!r}")
        elif section in CONFIG_SECTIONS:
            if not isinstance(inner, dict):
                raise SpecError(where, f"must be a mapping of {section} settings, not {inner!r}")
            known = {key for sec, key in CONFIG_VALUES if sec == section}
            for key, value in inner.items():
                if (section, key) in CONFIG_VALUES:
                    check, words = CONFIG_VALUES[(section, key)]
                    if not check(value):
                        raise SpecError(f"{where}.{key}", f"must be {words}, not {value!r}")
                elif CONFIG_SECTIONS[section]:
                    raise unknown_key_refusal(where, key, f"is not a setting a task may give in {where} "
                                                          f"({unknown_key_hint(key, known)})")


def _hooks_shape(hooks: Any) -> None:
    """``config.hooks``: SkyPilot's lifecycle hooks, each a shell script run on the job's cluster at ``events``."""
    if not isinstance(hooks, list):
        raise SpecError("config.hooks", "must be a list of hooks, each such as {run: ./save.sh, events: [preemption], "
                                        "timeout: 60}")
    if len(hooks) > MAX_TASK_HOOKS:
        raise SpecError("config.hooks", f"must hold at most {MAX_TASK_HOOKS} hooks: SkyPilot takes 32, and the "
                                        "broker's own preemption notice goes first")
    for i, hook in enumerate(hooks):
        where = f"config.hooks[{i}]"
        if not isinstance(hook, dict):
            raise SpecError(where, "must be a mapping such as {run: ./save.sh, events: [preemption], timeout: 60}")
        unknown = sorted(set(map(str, hook)) - HOOK_KEYS)
        if unknown:
            raise unknown_key_refusal(where, unknown[0],
                                      f"is not a setting of a hook ({unknown_key_hint(unknown[0], HOOK_KEYS)})")
        run = hook.get("run")
        if not isinstance(run, str) or not run or len(run) > MAX_HOOK_RUN:
            raise SpecError(f"{where}.run", f"is required: the shell script the hook runs, 1 to {MAX_HOOK_RUN} "
                                            "characters (a longer one belongs in a file the workdir brings)")
        events = hook.get("events", list(HOOK_EVENTS))
        if not isinstance(events, list) or not events or len(set(map(repr, events))) < len(events) \
                or any(e not in HOOK_EVENTS for e in events):
            raise SpecError(f"{where}.events", f"must be a list of distinct events from {', '.join(HOOK_EVENTS)}, "
                                               f"not {events!r}")
        timeout = hook.get("timeout", 1)
        if not _is_int(timeout) or timeout < 1:
            raise SpecError(f"{where}.timeout", f"must be a whole number of seconds, at least 1, not {timeout!r}")


TEAM_CONFIG_KEYS = frozenset({
    ("docker", "run_options"), ("nvidia_gpus", "disable_ecc"), ("kubernetes", "provision_timeout"),
    ("kubernetes", "dws"), ("kubernetes", "kueue"), ("kubernetes", "set_pod_resource_limits"),
    ("ssh", "provision_timeout"), ("gcp", "managed_instance_group"), ("gcp", "enable_gvnic"),
    ("gcp", "enable_gpu_direct"), ("gcp", "placement_policy"), ("vast", "datacenter_only"),
    ("slurm", "cpu_partition"),
})
"""The task-level ``config:`` overrides SkyPilot takes (``OVERRIDEABLE_CONFIG_KEYS_IN_TASK``) that a team's submit may
set: how its own cluster is provisioned. The rest change whose identity, network, quota or host the cluster gets —
``kubernetes.remote_identity: LOCAL_CREDENTIALS`` puts the broker's kubeconfig in the pod, ``kubernetes.pod_config``
can make it privileged with the node's disk mounted (other teams' pods run there), ``active_workspace`` switches to
another workspace's credentials, a VPC or an ``sbatch`` account is someone else's — and only an admin's submit may."""
TEAM_CONFIG_WHOLE = frozenset({"hooks"})
"""``config:`` entries a team's submit may give whole: ``hooks`` run on the job's own cluster (the broker's notice
hook goes first, :mod:`launchers.skypilot_task`)."""
ADMIN_TASK_KEYS = {"file_mounts_mapping": "SkyPilot's internal map of uploaded file mounts"}
ADMIN_RESOURCE_KEYS = {"_cluster_config_overrides": "SkyPilot's internal overrides of the cluster's provisioning "
                                                    "config"}


def admin_only_settings(task: dict[str, Any]) -> list[tuple[str, str]]:
    """The settings of ``task`` only an admin's submit may give, as (field, what it is): ``config:`` overrides
    outside :data:`TEAM_CONFIG_KEYS`, and SkyPilot's internal keys a task could use to the same end."""
    found = [(key, what) for key, what in ADMIN_TASK_KEYS.items() if key in task]
    config = task.get("config")
    if isinstance(config, dict):
        for section, inner in config.items():
            if section in TEAM_CONFIG_WHOLE:
                continue
            if not isinstance(inner, dict):  # active_workspace: a value, not a section
                found.append((f"config.{section}", "a SkyPilot setting that changes whose credentials, network or "
                                                   "host the job's cluster gets"))
                continue
            for key in inner:
                if (section, key) not in TEAM_CONFIG_KEYS:
                    found.append((f"config.{section}.{key}", "a SkyPilot setting that changes whose credentials, "
                                                             "network or host the job's cluster gets"))
    resources = task.get("resources")
    variants = [resources] if isinstance(resources, dict) else []
    for key in ("any_of", "ordered"):
        if isinstance(resources, dict) and isinstance(resources.get(key), list):
            variants += [v for v in resources[key] if isinstance(v, dict)]
    for variant in variants:
        for key, what in ADMIN_RESOURCE_KEYS.items():
            if key in variant:
                found.append((f"resources.{key}", what))
    return found


def _git_workdir(workdir: dict[str, Any]) -> None:
    """SkyPilot's git form of a workdir, ``{url, ref}`` (its schema: ``url`` required, both strings, nothing
    else), and each a single argument to git: a value starting with ``-`` would be read as an option."""
    for key in sorted(workdir, key=str):
        if key not in ("url", "ref"):
            raise unknown_key_refusal("workdir", key, "is not a key of a git workdir (url, and ref: a branch, a tag "
                                                      "or a commit hash)")
    for key in ("url", "ref"):
        value = workdir.get(key)
        if value is None and key == "ref":
            continue
        if not isinstance(value, str) or not value.strip():
            raise SpecError(f"workdir.{key}", "must be a git repository's URL" if key == "url" else
                                              "must be a branch, a tag or a commit hash")
        if value.startswith("-") or any(c.isspace() or ord(c) < 32 or ord(c) == 127 for c in value):
            raise SpecError(f"workdir.{key}", "cannot start with '-' nor hold spaces or control characters")


def host_paths(task: dict[str, Any]) -> list[tuple[str, str]]:
    """The paths on the broker's own host a task names, as (field, path): a ``workdir`` given as a path, or as a
    git repository on this host (SkyPilot's ``{url, ref}`` form with a ``file://`` URL or a path: the local
    launcher clones it from there), and each ``file_mounts`` source that is not a bucket URL, a ``broker:`` value
    or an uploaded pack's copy. The broker's launcher reads them there (SkyPilot uploads them to the job's
    cluster)."""
    found = []
    if isinstance(task.get("workdir"), str) and task["workdir"]:
        found.append(("workdir", task["workdir"]))
    url = task["workdir"].get("url") if isinstance(task.get("workdir"), dict) else None
    if isinstance(url, str) and (url.lower().startswith("file:") or is_local_path(url)):
        found.append(("workdir.url", url))
    mounts = task.get("file_mounts") if isinstance(task.get("file_mounts"), dict) else {}
    for dest, source in sorted(mounts.items(), key=lambda kv: str(kv[0])):
        inner = source.get("source") if isinstance(source, dict) else source
        for path in inner if isinstance(inner, list) else [inner]:
            if is_local_path(path):
                found.append((f"file_mounts.{dest}", path))
    return found


def _shell_quotable(path: object, where: str, what: str = "destination") -> None:
    """A path SkyPilot rsyncs (a mount's destination, a local source, a workdir) must reach a shell as written:
    SkyPilot runs rsync through a shell, quoting each path with Python's ``repr``. A path holding ``'`` is put in
    double quotes, where ``$(...)`` and backquotes run on the broker's host (and one holding ``"`` too breaks out of
    its quotes); a backslash or a control character comes out as an escape the shell keeps literally. A quote
    alone (``/home/o'brien``) reads as written."""
    if not isinstance(path, str):
        return
    quoted = repr(path)
    if quoted == f"'{path}'" or (quoted == f'"{path}"' and not any(c in path for c in "$`")):
        return
    raise SpecError(where, f"cannot be handed to a shell as written (SkyPilot runs rsync through one): its {what} "
                           f"holds a quote with $ or `, or a backslash or a control character")


def _retry_from_job_recovery(resources: Any, section: Any, broker: BrokerSection, *,
                             strict: bool = True) -> BrokerSection:
    """SkyPilot's ``resources.job_recovery`` retry settings (``max_restarts_on_errors``,
    ``recover_on_exit_codes``) count as the job's retry policy unless ``broker.retry`` gives one: a task
    written for ``sky jobs launch`` keeps its meaning. The ``strategy`` is SkyPilot's own (the broker
    always recovers preemptions, in a zone of its choosing).

    In ``any_of`` / ``ordered`` alternatives it is read from each, over the one in ``resources`` as SkyPilot merges
    them, and held to the same checks; SkyPilot requires every alternative's to be the same
    (:func:`_agreed_job_recovery`). Read only from ``resources``, an alternative's was dropped without a word: its
    ``max_restarts_on_errors: 2`` never retried, and ``strategy: FOO`` was accepted."""
    try:
        recovery, where = _agreed_job_recovery(resources, strict=strict)
    except SpecError:
        if strict:
            raise
        return broker  # a stored job is read as it was admitted (it keeps the retry it was admitted with)
    if not isinstance(recovery, dict) or (isinstance(section, dict) and "retry" in section):
        return broker
    given = {k: v for k, v in recovery.items() if k in RETRY_KEYS}
    if not given:
        return broker
    try:
        return replace(broker, retry=_retry(given, where))
    except SpecError:
        if strict:
            raise
        # a stored job accepted before job_recovery counted (it keeps the retry it was admitted with)
        return broker


def _agreed_job_recovery(resources: Any, *, strict: bool = True) -> tuple[Any, str]:
    """The job's ``job_recovery`` and the field it was read from: ``resources.job_recovery``, or with ``any_of`` /
    ``ordered`` alternatives each one's over it (SkyPilot's merge), which must all be the same, as
    ``sky jobs launch`` refuses them otherwise (``sky/jobs/recovery_strategy.py``: "The job recovery strategy should
    be the same for all resources"): compared as SkyPilot compares them, a strategy's name as a mapping of it and in
    capitals. At submit (``strict``) each is held to SkyPilot's schema and the retry checks, naming its field."""
    if not isinstance(resources, dict):
        return None, "resources.job_recovery"
    top = resources.get("job_recovery")
    if strict:
        _job_recovery_shape(top)
        _retry_shape(top, "resources.job_recovery")
    key = "any_of" if "any_of" in resources else "ordered"
    variants = resources.get(key)
    if not isinstance(variants, list) or not any(isinstance(v, dict) and "job_recovery" in v for v in variants):
        return top, "resources.job_recovery"
    first: tuple[Any, str, str] | None = None
    for i, variant in enumerate(variants):
        if not isinstance(variant, dict):
            continue
        own = "job_recovery" in variant
        recovery = variant["job_recovery"] if own else top
        where = f"resources.{key}[{i}].job_recovery" if own else "resources.job_recovery"
        if strict and own:
            _job_recovery_shape(recovery, where)
            _retry_shape(recovery, where)
        said = _recovery_said(recovery) + ("" if own or recovery is None else " (resources.job_recovery)")
        if first is None:
            first = (recovery, where, f"resources.{key}[{i}]'s {said}")
        elif _as_skypilot_compares(recovery) != _as_skypilot_compares(first[0]):
            this = f"resources.{key}[{i}].job_recovery"
            raise SpecError(this, f"{said}, but {first[2]}: SkyPilot requires the same job_recovery for every "
                                  f"alternative (a job recovers one way, wherever it runs) and refuses the task "
                                  f"otherwise: give the same in each, or give it once as resources.job_recovery")
    return (first[0], first[1]) if first is not None else (top, "resources.job_recovery")


def _as_skypilot_compares(recovery: Any) -> Any:
    """A ``job_recovery`` as SkyPilot holds it to compare alternatives' (``sky.Resources``): a strategy's name as
    ``{strategy: NAME}``, a mapping with no strategy as one with ``strategy: null``, a name in capitals."""
    if recovery is None:
        return None
    if isinstance(recovery, str):
        recovery = {"strategy": recovery}
    if not isinstance(recovery, dict):
        return recovery
    out = {"strategy": None, **recovery}
    if out["strategy"] == "none":
        return None
    if isinstance(out["strategy"], str):
        out["strategy"] = out["strategy"].upper()
    return out


def _recovery_said(recovery: Any) -> str:
    """A ``job_recovery`` in a refusal: "is" as written, or "is not given"."""
    if recovery is None:
        return "is not given"
    if isinstance(recovery, dict):
        return "is {" + ", ".join(f"{k}: {v}" for k, v in recovery.items()) + "}"
    return f"is {recovery!r}"


def _retry_shape(recovery: Any, where: str) -> None:
    """A ``job_recovery``'s retry settings held to :func:`_retry`'s checks at submit, wherever it is given: the same
    value refused in ``resources`` was taken in an alternative."""
    if isinstance(recovery, dict):
        given = {k: v for k, v in recovery.items() if k in RETRY_KEYS}
        if given:
            _retry(given, where)


RECOVERY_STRATEGIES = ("FAILOVER", "EAGER_NEXT_REGION")
"""The strategies SkyPilot 0.14 registers for ``resources.job_recovery`` (``sky/jobs/recovery_strategy.py``; read in
any case). The broker recovers every preemption itself, in a zone of its choosing and not the one lost (as
``EAGER_NEXT_REGION`` does), so either is taken as it is and neither changes what the broker does."""
RECOVERY_KEYS = frozenset({"strategy", *RETRY_KEYS})


def _job_recovery_shape(recovery: Any, field: str = "resources.job_recovery") -> None:
    """``resources.job_recovery`` (or an alternative's, at ``field``) held to SkyPilot's schema at submit: a
    strategy's name, or a mapping of ``strategy`` and the retry settings. Under the local launcher no SkyPilot check
    runs, and ``job_recovery: 5``, a misspelt strategy or a misspelt retry setting (``max_restart_on_errors``, whose
    retries then never happened) were accepted without a word."""
    if recovery is None:
        return
    if isinstance(recovery, dict):
        unknown = sorted(set(map(str, recovery)) - RECOVERY_KEYS)
        if unknown:
            raise unknown_key_refusal(field, unknown[0],
                                      f"is not a job_recovery setting ({unknown_key_hint(unknown[0], RECOVERY_KEYS)})")
        strategy, where = recovery.get("strategy"), f"{field}.strategy"
    elif isinstance(recovery, str):
        strategy, where = recovery, field
    else:
        raise SpecError(field, "must be a strategy's name (FAILOVER or EAGER_NEXT_REGION) or a "
                               "mapping of strategy, max_restarts_on_errors and recover_on_exit_codes")
    if strategy is not None and (not isinstance(strategy, str) or strategy.strip().upper() not in RECOVERY_STRATEGIES):
        raise SpecError(where, f"{strategy!r} is not a recovery strategy: give FAILOVER or EAGER_NEXT_REGION (the broker "
                               "recovers a preemption in another zone either way)")


def _retry(value: Any, where: str = "broker.retry") -> RetryPolicy:
    if value is None:
        return RetryPolicy()
    if not isinstance(value, dict):
        raise SpecError(where, "must be a mapping")
    unknown = sorted(set(value) - RETRY_KEYS, key=str)
    if unknown:
        raise unknown_key_refusal(where, unknown[0],
                                  f"is not a retry setting ({unknown_key_hint(unknown[0], RETRY_KEYS)})")
    restarts = value.get("max_restarts_on_errors", 0)
    if isinstance(restarts, bool) or not isinstance(restarts, int) or not 0 <= restarts <= 100:
        raise SpecError(f"{where}.max_restarts_on_errors", "must be a whole number from 0 to 100")
    codes = value.get("recover_on_exit_codes", [])
    if isinstance(codes, int) and not isinstance(codes, bool):
        codes = [codes]
    if not isinstance(codes, list) or any(isinstance(c, bool) or not isinstance(c, int) or not 0 <= c <= 255 for c in codes):
        raise SpecError(f"{where}.recover_on_exit_codes", "must be a list of exit codes from 0 to 255")
    return RetryPolicy(max_restarts_on_errors=restarts, recover_on_exit_codes=tuple(codes))


_HOURS_AND_MINUTES = re.compile(r"\s*(\d+):([0-5]\d)(?::([0-5]\d))?\s*")


def _hours_and_minutes(value: Any) -> str | None:
    """Why ``expected_hours: 1:30`` (hours and minutes, which YAML 1.1 read as the base-60 number 90 and
    :mod:`broker.task_text` reads as the text) is refused, with the number it means. ``None`` for anything else."""
    found = _HOURS_AND_MINUTES.fullmatch(value) if isinstance(value, str) else None
    if found is None:
        return None
    hours = int(found[1]) + int(found[2]) / 60 + int(found[3] or 0) / 3600
    return (f"is {value.strip()}, hours and minutes: write the hours as a decimal number ({hours:.4g} for "
            f"{value.strip()})")


def _money(value: Any, where: str, *, strict: bool = True) -> Micros | None:
    """A cap the user gives, in micro-dollars; at submit (``strict``) a fraction of a micro-dollar is
    refused rather than rounded up past what the user wrote."""
    if value is None:
        return None
    try:
        return typed_to_micros(value, exact=strict)
    except (AmountTooLarge, TooPrecise, DecimalComma, NotPlain) as exc:
        raise SpecError(where, str(exc)) from None
    except MoneyError:
        raise SpecError(where, "must be an amount of dollars such as 20 or \"12.50\"") from None


# Each unit as people write it (``45min``, ``2 hours``, ``90sec``): `--deadline 45min` was refused while ``90m`` was
# accepted. The longer spellings come first, so ``min`` is not read as ``m`` followed by something else.
DURATION_UNITS = {"d": ("days", "day", "d"), "h": ("hours", "hour", "hrs", "hr", "h"),
                  "m": ("minutes", "minute", "mins", "min", "m"), "s": ("seconds", "second", "secs", "sec", "s")}
_URL = re.compile(r"^([A-Za-z][A-Za-z0-9+.-]+)://(.*)$", re.S)
_SAME_STORE = {"gcs": "gs", "s3a": "s3"}  # two spellings the checkpoint library opens as one store


_SCHEME = re.compile(r"^([A-Za-z][A-Za-z0-9+.-]*):(.*)$", re.S)
_BUCKET_STORES = ("s3", "s3a", "gs", "gcs")


def checkpoint_uri_problem(uri: str) -> str | None:
    """Why a job's checkpoints could not be kept at ``uri``, or None. The checkpoint library refuses a URI with a
    typo (``checkpoint/storage.py``, ``check_uri``), but inside the job: placed and paid for, it failed there with
    a ``ValueError`` read as the training script's error (a resume then needed ``--force``). The broker never
    imports the library (docs/architecture.md), so its rules are written again here, and
    ``tests/broker/test_broker_checkpoint_uri.py`` holds the two to one table. One more rule is the broker's:
    a relative path, which the library takes, is read in each attempt's own run folder, where a resume never
    finds the checkpoints of the attempt before."""
    m = _SCHEME.match(uri)
    if m and len(m.group(1)) > 1:  # one letter is a Windows drive, not a scheme
        scheme, rest = m.group(1).lower(), m.group(2)
        if not rest.startswith("//"):
            return f"{uri!r}: a URL needs '//' after '{m.group(1)}:' (like {m.group(1)}://bucket/run)"
        if scheme in _BUCKET_STORES and not rest[2:].split("/", 1)[0]:
            return f"{uri!r}: no bucket (like {m.group(1)}://bucket/run)"
        if scheme in ("http", "https"):
            return (f"{uri!r}: checkpoints cannot be written over plain HTTP; for an S3-compatible endpoint use "
                    f"s3://bucket/run with AWS_ENDPOINT_URL={scheme}://host:port")
        from broker.workdir_store import storage_schemes  # the broker's one fsspec module

        if scheme not in storage_schemes():
            return (f"{uri!r}: unknown storage scheme '{m.group(1)}://' (use s3://bucket/run, gs://bucket/run, "
                    "file:// or a local path)")
        if scheme != "file":
            return None
        path = rest[2:]
    else:
        first = uri.split("/", 1)[0].lower()
        if first in _BUCKET_STORES and uri[len(first):].startswith("//"):
            return f"{uri!r}: looks like a URL missing ':' (like {first}://bucket/run)"
        path = uri
    if path.startswith("/"):
        # the library's refusal when the checkpointer is made (checkpoint/checkpointer.py, _uncreatable), read on the
        # broker's host: /dev/null/run was taken, placed and paid for, and failed there at once
        import os

        if os.path.exists(path) and not os.path.isdir(path):
            return f"{uri!r}: checkpoint base {path} is a file, not a directory"
        parent = path
        while not os.path.exists(parent) and posixpath.dirname(parent) != parent:
            parent = posixpath.dirname(parent)
        if parent != path and not os.path.isdir(parent):
            return f"{uri!r}: checkpoint base {path} cannot be created: {parent} is a file, not a directory"
        return None
    if path.startswith("~"):
        return None
    return (f"{uri!r} is a relative path: each attempt runs in a folder of its own, so a resume would not find the "
            "checkpoints of the attempt before; give a bucket (s3://bucket/run, gs://bucket/run) or an absolute path "
            "every attempt can reach")


def checkpoint_base(uri: str) -> str:
    """A checkpoint base as the checkpoint library reads it, so that two spellings of one base compare equal:
    the scheme's case and its aliases (``GS://``, ``gcs://``, ``s3a://``), a trailing slash, and for a path
    (``file://`` or none) ``.``, ``..`` and doubled slashes. A base *inside* another is a different base: the
    library reads only the checkpoint directories right under its own."""
    text = uri.strip()
    m = _URL.match(text)
    if m and m.group(1).lower() != "file":
        scheme = m.group(1).lower()
        return f"{_SAME_STORE.get(scheme, scheme)}://{m.group(2).rstrip('/')}"
    return "file://" + posixpath.normpath(re.sub(r"/{2,}", "/", m.group(2) if m else text))


def in_own_base(job: Job, uri: str) -> bool:
    """Whether a reported checkpoint (``<base>/step-…``) lies right in ``job``'s own checkpoint base, the base the
    broker gave it or its ``broker.checkpoint`` — or in that base as a ``broker:checkpoint`` mount shows it on a
    SkyPilot node (``$BROKER_CHECKPOINT_DIR``, ``/ckpt/<the base's path in the bucket>``). The next attempt is handed
    the last one as ``BROKER_RESUME_FROM``: one anywhere the job's own token named — another team's job's base, a path
    on the broker's host that only an admin's submit may name as ``broker.checkpoint`` — was restored from as the
    job's own, and shown as its last checkpoint. A job stored with no base keeps what it reports, as it did."""
    if not job.checkpoint_uri:
        return True
    parent = checkpoint_base(uri).rpartition("/")[0]
    return parent in _report_bases(job)


def _report_bases(job: Job) -> set[str]:
    from launchers.skypilot_task import TaskConfigError, checkpoint_mount

    bases = {checkpoint_base(job.checkpoint_uri)}
    mounts = (job.spec or {}).get("file_mounts")
    for destination, source in (mounts.items() if isinstance(mounts, dict) else ()):
        if source == CHECKPOINT_MOUNT and isinstance(destination, str) and destination.startswith("/"):
            try:
                bases.add(checkpoint_base(checkpoint_mount(job.checkpoint_uri, destination)[1]))
            except TaskConfigError:  # a file:// store: the folder on this host is the base itself
                pass
    return bases


_DURATION = re.compile(r"^\s*" + r"\s*".join(rf"(?:(\d+(?:\.\d+)?)\s*(?:{'|'.join(spellings)})(?![a-z]))?"
                                              for spellings in DURATION_UNITS.values()) + r"\s*$", re.I)
_DURATION_EXAMPLES = "6h, 1d12h, 90m, 45min, 2 days"
_ISO_DURATION = re.compile(r"^P(?:(\d+(?:\.\d+)?)D)?(?:T(?:(\d+(?:\.\d+)?)H)?(?:(\d+(?:\.\d+)?)M)?(?:(\d+(?:\.\d+)?)S)?)?$", re.I)


def _ascii_digits(text: str, where: str) -> None:
    """A number the user writes is in the digits 0-9 alone, as every other number the broker reads: Python's
    ``\\d``, ``int`` and ``Decimal`` also read the digits of other scripts, and ``deadline: ٥h`` (an Arabic-Indic
    five) was taken as 5 hours, where a reader of the job sees a character they may not know as a number."""
    other = next((c for c in text if c.isnumeric() and c not in "0123456789"), None)
    if other is not None:
        raise SpecError(where, f"must be written in the digits 0-9 alone: {other!r} is not one of them "
                               "(write 6h, 90m or 2026-12-01T18:00:00Z)")


def is_duration(text: str) -> bool:
    """Whether ``text`` is a duration as a deadline reads one (``6h``, ``1d12h``, ``PT6H``), a sign before it or not."""
    rest = text.strip().removeprefix("-").strip()
    m = (_ISO_DURATION if rest.upper().startswith("P") else _DURATION).match(rest)
    return bool(m and any(m.groups()))


def negative_duration(text: str) -> str | None:
    """Why ``text`` is no deadline when it is a duration with a minus sign (``-2h``, ``-PT6H``), else ``None``: the
    broker's refusal of a task's and the CLI's of ``--deadline`` say the same."""
    shown = text.strip()
    rest = shown.removeprefix("-").strip()
    m = (_ISO_DURATION if rest.upper().startswith("P") else _DURATION).match(rest)
    if not shown.startswith("-") or not (m and any(m.groups())):
        return None
    return (f"{shown} is negative: a deadline is a duration from now (6h, 1d12h) or a time to come with its timezone "
            "(2026-12-01T18:00Z)")


def parse_deadline(value: Any, *, now: float, where: str = "deadline", bounded: bool = True) -> float:
    """A deadline as epoch seconds: an ISO time with its timezone (``2026-12-01T18:00Z``,
    ``2026-12-01T18:00+01:00``) or a duration from now (``6h``, ``1d12h``, ``90m``, ``PT6H``). Must lie
    in the future, at most ``MAX_DEADLINE_DAYS`` away (``bounded``, at submit). A time without a timezone
    is refused at submit: the broker cannot know the submitter's clock, and reading it as UTC would
    move the deadline by hours for most people (a stored one is read as UTC, as it was admitted)."""
    if bounded and isinstance(value, str):  # a stored deadline is read as it was admitted
        _ascii_digits(value, where)
    if bounded and isinstance(value, str) and re.fullmatch(r"\s*\d{4}-\d{2}-\d{2}\s*", value):  # the same, as JSON text
        try:
            value = date.fromisoformat(value.strip())
        except ValueError:
            pass
    if isinstance(value, date) and not isinstance(value, datetime):  # YAML reads `deadline: 2026-12-01` as a date
        raise SpecError(where, f"is a date ({value.isoformat()}); give the time and its timezone too, such as "
                               f"{value.isoformat()}T18:00:00Z")
    if not isinstance(value, bool) and isinstance(value, (int, float, str)) and \
            re.fullmatch(r"\s*\d+(?:\.\d+)?\s*", str(value)):  # `--deadline 6`: hours? days?
        number = str(value).strip()
        if float(number) >= 1e8:  # `--deadline 1733500000`: "write 1733500000h" pointed at 197,000 years
            raise SpecError(where, f"{number} has no unit, and looks like a Unix time: a deadline is an ISO time "
                                   "with its timezone (2026-12-01T18:00Z; `date -u -d @SECONDS +%FT%TZ` writes one) "
                                   "or a duration from now (6h, 90m)")
        if float(number) <= 168:  # up to a week of hours: the likely reading
            raise SpecError(where, f"{number} has no unit: write {number}h for hours from now (or d, m, s), or an ISO "
                                   "time with its timezone")

        def words(seconds: float) -> str:
            if seconds >= 2 * 86400:
                return f"{seconds / 86400:.3g} days"
            return f"{seconds / 3600:.3g} h" if seconds >= 3600 else f"{seconds / 60:.3g} min"

        readings = [f"{number}{u} is {words(float(number) * k)}" for u, k in (("h", 3600), ("m", 60), ("s", 1))
                    if float(number) * k <= MAX_DEADLINE_DAYS * 86400 and float(number) * k >= 60]
        raise SpecError(where, f"{number} has no unit: {', '.join(readings)} from now; write the one meant, or an "
                               "ISO time with its timezone")
    if isinstance(value, datetime):
        moment = _with_zone(value, where, bounded)
        seconds = moment.timestamp()
    elif isinstance(value, str) and value.strip():
        text = two_digit_hour(value.strip())
        if (negative := negative_duration(text)) is not None:  # "-2h" was "must be an ISO time ... or a duration"
            raise SpecError(where, negative)
        m = _ISO_DURATION.match(text) if text.upper().startswith("P") else _DURATION.match(text)
        if m and any(m.groups()):
            d, h, mi, s = (float(g) if g else 0.0 for g in m.groups())
            if d * 86400 + h * 3600 + mi * 60 + s <= 0:  # not "in the past: 03:35Z, and it is 03:35Z now"
                raise SpecError(where, f"{text} from now is now: give a deadline after now, such as 6h")
            seconds = now + d * 86400 + h * 3600 + mi * 60 + s
        elif (at := moment_of(text, where, strict=bounded)) is not None:
            seconds = at
        else:
            if bounded and (alone := _time_alone(text, now)) is not None:
                raise SpecError(where, alone)
            raise SpecError(where, f"must be an ISO time (2026-12-01T18:00:00Z) or a duration ({_DURATION_EXAMPLES})")
    else:
        raise SpecError(where, f"must be an ISO time (2026-12-01T18:00:00Z) or a duration ({_DURATION_EXAMPLES})")
    if seconds <= now:
        raise SpecError(where, f"is in the past: {_utc_minute(seconds)}, and it is {_utc_minute(now)} now; give a "
                               "later time with its timezone, or a duration from now such as 6h")
    if bounded and seconds > now + MAX_DEADLINE_DAYS * 86400:
        raise SpecError(where, f"is more than {MAX_DEADLINE_DAYS} days away; leave it out for a job with no deadline")
    return seconds


def moment_of(text: str, where: str, *, strict: bool = True) -> float | None:
    """The moment a time written as a deadline's is names, in epoch seconds: an ISO time with its offset
    (``2026-12-01T18:00Z``, ``+01:00``) or followed by the IANA name of its time zone (``2026-12-07 09:00
    Europe/Berlin``), a one-digit hour as people write one. ``None`` when ``text`` is no ISO time at all (a
    duration, a word); a time with neither offset nor zone is refused when ``strict`` (else read as UTC), and a
    zone the broker does not know always, each naming ``where``. The deadline and a cost window's ``since`` and
    ``until`` (:func:`broker.costs.window`) read a time so, one parser for both."""
    text = two_digit_hour(text.strip())
    if (named := _NAMED_ZONE.fullmatch(text)) is not None:
        return _in_named_zone(named["time"], named["zone"], where, strict=strict).timestamp()
    if (word := _WORD_ZONE.fullmatch(text)) is not None:  # `2026-12-08 09:00 CET`: "must be an ISO time" as if no time
        zone = _zone_of_word(word["time"], word["zone"], where)
        return _in_named_zone(word["time"], zone, where, strict=strict).timestamp()
    if text[-1:] == "z":  # `2026-12-07T18:00z`, as RFC 3339 allows (and `… utc` was taken): refused "not an ISO time"
        text = text[:-1] + "Z"
    try:
        moment = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        return None
    return _with_zone(moment, where, strict).timestamp()


_ONE_DIGIT_HOUR = re.compile(r"^(\s*\d{4}-\d{2}-\d{2}[Tt ])(\d:\d{2})")


def two_digit_hour(text: str) -> str:
    """``2026-12-07 9:00`` as ``2026-12-07 09:00``, the rest as given: :meth:`datetime.fromisoformat` takes an hour
    of two digits alone, and a one-digit hour, as people write one, was refused "must be an ISO time or a duration"
    as if the time were not one. The broker's deadline and the CLI's reading on this machine's clock
    (``broker.cli._on_this_clock``) both read it so."""
    return _ONE_DIGIT_HOUR.sub(r"\g<1>0\g<2>", text)


_TIME_ALONE = re.compile(r"(\d{1,2}):(\d{2})(?::(\d{2}))?\s*(Z|[+-]\d{2}:?\d{2})?", re.I)
"""A time of day with no date, its offset or not: ``9:00``, ``18:30Z``, ``09:00+01:00``."""


def _time_alone(text: str, now: float) -> str | None:
    """Why ``text``, a time of day with no date (``9:00``), is refused, with the form that gives it: its next
    coming after ``now`` (on its offset's clock, else UTC's), which "must be an ISO time or a duration" left to be
    worked out. ``None`` for anything else."""
    alone = _TIME_ALONE.fullmatch(text)
    if alone is None:
        return None
    hour, minute, second = (int(g) if g else 0 for g in alone.groups()[:3])
    offset = (alone[4] or "Z").upper()
    if hour > 23 or minute > 59 or second > 59:
        return None
    try:
        zone = timezone.utc if offset == "Z" else datetime.fromisoformat(f"2000-01-01T00:00{offset}").tzinfo
        today = datetime.fromtimestamp(now, zone)
    except (ValueError, OverflowError, OSError):
        return None
    at = today.replace(hour=hour, minute=minute, second=second, microsecond=0)
    day = datetime.fromtimestamp(at.timestamp() + (0 if at > today else 86400), zone).date().isoformat()
    clock = f"{hour:02d}:{minute:02d}" + (f":{second:02d}" if second else "")
    return (f"is a time alone ({text}): give its date too, such as {day}T{clock}{offset}, or a duration from now "
            "such as 6h")


def deadline_out_of_reach(left: float, work: float, done: float, changeover: float, short: float, *,
                          even: str = " even on on-demand") -> str:
    """Why a deadline ``left`` seconds away cannot be met even on on-demand, in the words of the submit's refusal of a
    deadline nearer than ``broker.expected_hours`` (:func:`parse`): the ``work`` the job needs (``done`` of it done
    already), the ``changeover`` a start takes (0: it runs on a reliable tier already) and how much it falls ``short``,
    as the engine's safety net counts them (``broker.service.BrokerService._out_of_reach``); ``even``: the tier it is
    out of reach on (none named for a job with no spot offer, which the safety net does not plan). Its first placement said
    "the deadline can no longer be met, even on on-demand (3 s short, counting a changeover of 5 s)" of a deadline
    the submit had accepted without a word."""
    def span(seconds: float) -> str:  # seconds up to 10 min: "is 3 min away, but the job needs 3 min" hid the gap
        return f"{round(seconds)} s" if seconds < 600 else _span(seconds)

    needs = span(work) if done <= 0 else f"{span(max(work - done, 0.0))} more of its {span(work)}"
    start = " again" if done > 0 else ""
    return (f"is {span(left)} away, but the job needs {needs} (broker.expected_hours)"
            + (f" and a changeover of {span(changeover)} to start{start}" if changeover > 0 else "")
            + f": it cannot be met{even} ({span(math.ceil(short))} short); move the deadline or correct "
              "the estimate")


def _span(seconds: float) -> str:
    """A length in a sentence, in the unit it reads best in: ``30 s``, ``25 min``, ``1.5 h`` (a deadline 30 s
    away read "0.0 h away" when every length was in hours)."""
    if seconds < 90:
        return f"{round(seconds)} s"
    if seconds < 3600:
        return f"{round(seconds / 60)} min"
    return f"{seconds / 3600:.1f} h"


def _utc_minute(seconds: float) -> str:
    """``2026-12-01T18:00Z``: a refused deadline and the time now side by side, so a slip of a timezone or a
    year shows at a glance (a minute's precision: the seconds would only hide the difference)."""
    try:
        return datetime.fromtimestamp(seconds, timezone.utc).strftime("%Y-%m-%dT%H:%MZ")
    except (ValueError, OverflowError, OSError):  # 0001-01-01T00:00+01:00 is in year 0, which datetime does not have
        return "before 0001-01-01T00:00Z" if seconds < 0 else "after 9999-12-31T23:59Z"


_NAMED_ZONE = re.compile(r"(?P<time>\S+(?:[ T]\S+)?)\s+(?P<zone>UTC|[A-Za-z][A-Za-z0-9_+-]*(?:/[A-Za-z0-9_+-]+)+)")
"""A local time and the IANA name of its time zone: ``2026-12-07T09:00 Europe/Berlin``, ``2026-12-07 09:00 UTC``."""


_WORD_ZONE = re.compile(r"(?P<time>\d{4}-\d{2}-\d{2}[T ]\d{1,2}:\d{2}\S*)\s+(?P<zone>[A-Za-z][A-Za-z0-9_+-]*)")
"""A date and time and one word after it, that may name its time zone: ``2026-12-08 09:00 CET``, ``… EST5EDT``,
``… utc``, ``… PST``. Only after a date and a time: ``in 6 hours`` names no zone."""

_NOT_ZONES = frozenset({"localtime", "Factory"})
"""Names :mod:`zoneinfo` knows that name no clock a deadline is written on: ``localtime`` is the broker host's own
(which the broker never assumes: it cannot know the submitter's), ``Factory`` a placeholder."""


def _zone_of_word(time: str, word: str, where: str) -> str:
    """The time zone a one-word name after a time names: any name :mod:`zoneinfo` knows (``CET``, ``EST``,
    ``EST5EDT``, ``Japan``; ``UTC`` and ``GMT`` in any case, and the others as written or in capitals), else refused
    naming the word. An abbreviation it does not know (``PST``, ``IST``, ``BST``) is often more than one zone's, and was
    refused "must be an ISO time or a duration", as if the time were none, where ``europe/berlin`` was named."""
    if word.upper() in ("UTC", "GMT"):
        return "UTC"
    for name in dict.fromkeys((word, word.upper())):
        if name in _NOT_ZONES:
            continue
        try:
            ZoneInfo(name)
        except (ZoneInfoNotFoundError, ValueError, OSError):
            continue
        return name
    shown = time.replace(" ", "T")
    raise SpecError(where, f"names the time zone {word!r}, which the broker does not know: an abbreviation may be "
                           "more than one zone's (IST is India's, Israel's and Ireland's; BST British summer time and "
                           "Bangladesh's), so give an IANA name such as Europe/London or America/Los_Angeles, or the "
                           f"time's offset ({shown}+01:00)")


def _in_named_zone(text: str, zone: str, where: str, *, strict: bool = True) -> datetime:
    """``text`` (an ISO time with no offset) as the wall clock of the IANA time zone ``zone`` reads it, that zone's
    summer time included. A time its clocks skip or repeat is no one moment: refused when ``strict``, with the offsets
    that say which is meant (:func:`_summer_time`), else read as before the change, as :mod:`zoneinfo` does (a time
    stored before this was refused is read as it was admitted)."""
    try:
        tz = ZoneInfo(zone)
    except (ZoneInfoNotFoundError, ValueError):
        raise SpecError(where, f"names the time zone {zone!r}, which the broker does not know: give an IANA name "
                               "such as Europe/Berlin or America/New_York, or the time's offset "
                               "(2026-12-01T18:00+01:00)") from None
    try:
        moment = datetime.fromisoformat(text)
    except ValueError:
        raise SpecError(where, f"must be an ISO time before its time zone ({text} {zone} is not: write "
                               f"2026-12-01T18:00 {zone})") from None
    if moment.tzinfo is not None:
        raise SpecError(where, f"gives both an offset and a time zone ({text} {zone}): give one of them")
    if strict and (why := _summer_time(moment, tz, f"{text} {zone}")) is not None:
        raise SpecError(where, why)
    return moment.replace(tzinfo=tz)


def _summer_time(moment: datetime, tz: ZoneInfo, shown: str) -> str | None:
    """Why the wall-clock time ``moment`` is no one moment in ``tz``, else ``None``: summer time skips it (the hour its
    clocks go forward) or it comes twice (the hour they go back), with the offsets to give. ``zoneinfo`` picked one
    without a word, while the CLI's reading of a time on this machine's clock says so (``broker.cli._summer_time``):
    for a cost window's bound at a month's end, an hour silently chosen is money counted in the wrong month."""
    first, second = moment.replace(tzinfo=tz, fold=0), moment.replace(tzinfo=tz, fold=1)
    try:
        back = first.astimezone(timezone.utc).astimezone(tz).replace(tzinfo=None)
    except (OverflowError, ValueError):  # at the ends of datetime's range: no summer time there
        return None
    spec = "minutes" if not (moment.second or moment.microsecond) else "auto"
    if back != moment:
        after = first.astimezone(timezone.utc).astimezone(tz)
        return (f"{shown}: that time does not exist on that clock (summer time skips it); give a time outside the "
                f"hour skipped, or its offset if one is meant ({first.isoformat(timespec=spec)} is "
                f"{after.isoformat(timespec=spec)} there)")
    if first.utcoffset() != second.utcoffset():
        return (f"{shown}: that time comes twice on that clock (summer time ends); give its offset: "
                f"{first.isoformat(timespec=spec)} for the first, {second.isoformat(timespec=spec)} for the second")
    return None


def _with_zone(moment: datetime, where: str, strict: bool) -> datetime:
    if moment.tzinfo is not None:
        return moment
    if strict:
        text = moment.isoformat(timespec="minutes")
        raise SpecError(where, f"has no timezone: write {text}Z for UTC, its offset such as {text}+01:00, or its "
                               f"time zone's name such as '{text} Europe/Berlin'")
    return moment.replace(tzinfo=timezone.utc)
