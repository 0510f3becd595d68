"""The SkyPilot task config for one attempt: the user's task with the broker's choices pinned. Pure.

Works on plain dicts (the YAML form of a ``sky.Task``); :mod:`launchers.skypilot`
turns the result into a real ``sky.Task`` with ``sky.Task.from_yaml_config``.

What the broker changes, and nothing else:

| part | becomes |
|---|---|
| ``resources`` (``any_of`` / ``ordered`` resolved to the alternative the placement was made from: its index, the placement's ``alternative``; for a placement stored without one, the alternative its location, ``use_spot`` and accelerator fit; ``autostop`` left out, the broker's autodown being the cluster's only one) | pinned to the placement: ``infra: cloud/region/zone``, ``instance_type`` (on GCP the host VM of ``n1-highmem-8+V100:1``, none for a TPU: :func:`host_instance_type`), ``accelerators``, ``use_spot`` (tier ``spot``) |
| ``resources.labels`` | plus ``broker-job`` / ``broker-attempt``, so a console shows who launched what |
| ``num_nodes`` | the placement's ``num_nodes`` when given |
| ``envs`` | the task's own, with the broker's (``BROKER_*``) over them — but for :data:`SECRET_ENVS`; on spot in AWS or GCP also ``BROKER_PREEMPTION_METADATA`` (the cloud) and ``BROKER_PREEMPTION_GRACE_S`` (110 / 25 s) unless the task sets them: the checkpoint library then saves on the cloud's own interruption notice |
| ``secrets`` | the task's own, with the broker's credentials (:data:`SECRET_ENVS`: the job token) over them: SkyPilot sets them in the job's environment as it does ``envs``, but keeps ``envs`` in plain text wherever it shows or stores the task (the API server's requests, ``sky status``'s cluster record, the dashboard) and redacts ``secrets`` |
| ``config.hooks`` | on Kubernetes, the task's own lifecycle hooks after one of the broker's: on the ``preemption`` event (the pod deleted: a spot node drained, an eviction) it writes the notice file the job's ``BROKER_NOTICE_FILE`` names and waits, up to the grace, while a checkpointer listens (:func:`notice_hook`); SkyPilot makes the pod's ``preStop`` hook run it and sets ``terminationGracePeriodSeconds`` from the hooks' timeouts |
| ``envs`` of a git ``workdir`` (``{url, ref}``) | ``GIT_URL``, and the ref as ``GIT_BRANCH`` or ``GIT_COMMIT_HASH`` (:func:`git_clone_envs`): SkyPilot's clone of the repository on each node reads them alone, and clones nothing without them — its CLI sets them, its SDK and API server do not; the task's own ``GIT_URL``/``GIT_BRANCH``/``GIT_TAG``/``GIT_COMMIT_HASH`` give way (``GIT_TOKEN`` and ``GIT_SSH_KEY`` in its ``secrets`` reach the clone as they are); a URL holding a credential goes as a secret |
| ``file_mounts`` entry whose value is ``broker:checkpoint`` | the checkpoint bucket mounted there (``MOUNT`` mode, persistent), and ``BROKER_CHECKPOINT_DIR`` = the job's folder under it |
| ``run`` | the same script in a subshell, then one line reporting its exit status (:func:`reporting_exit_code`): SkyPilot's job status says only ``FAILED``, so the launcher reads the code from the logs (:func:`exit_code_in`) for the failure diagnosis; with a budget limit (``stop_at``), the subshell runs in its own process group under a guard that stops it there — SIGTERM, SIGKILL after the grace period — and says so in the logs (:func:`budget_stop_in`) |
| ``setup`` | unchanged without a budget limit; with one, guarded as ``run`` is, to the same limit (:func:`guarded_run` with ``step="setup"``): stopped there, it says so in the logs and ends the job ``FAILED_SETUP``, which the launcher reads as a budget stop, and the run is never started |
"""

from __future__ import annotations

import copy
import re
import shlex
from collections.abc import Mapping
from typing import Any
from urllib.parse import urlsplit

from launchers.git_workdir import GitWorkdir, commit_like

CHECKPOINT_MOUNT = "broker:checkpoint"
#: Spot notice lead time by cloud, seconds, less a margin: AWS gives two minutes' warning in
#: instance metadata, GCP 30 s (their docs); the grace to a forced exit is set a little under.
SPOT_NOTICE = {"aws": 110, "gcp": 25}
"""A ``file_mounts`` value that asks for the job's checkpoint bucket mounted at that path."""

MOUNTABLE_SCHEMES = ("s3", "gs", "r2")
"""Checkpoint stores SkyPilot can mount as a bucket."""

PLACEMENT_KEYS = ("infra", "cloud", "region", "zone", "instance_type", "accelerators", "use_spot",
                  "any_of", "ordered")
"""Resource keys the broker decides; the user's values for them are replaced, the rest kept."""

BROKER_OWNED_RESOURCES = ("autostop", "max_hourly_cost")
"""Resource keys of SkyPilot's that the broker decides itself and a task may not set (:func:`broker_owned_fields`):
``autostop`` (the launcher sets autodown on every cluster, and SkyPilot's SDK merges a task's own into it, so
``autostop: false`` turned it off and ``wait_for: none`` tore a running job's cluster down) and ``max_hourly_cost``
(the broker pins the instance type it placed, at whatever price: its cap is ``broker.max_price_per_hour``). A task
queued before they were refused loses its ``autostop`` at launch (:func:`pinned_resources`)."""

BROKER_OWNED_TASK = ("service",)
"""Task keys the broker does not run: ``service`` (SkyServe) is read by ``sky serve up`` alone, and the launcher runs
a cluster (``sky launch``), which ignores it."""

KUBERNETES_CLOUDS = {"kubernetes": "k8s"}
"""An offer's cloud for a Kubernetes pool, to SkyPilot's ``infra`` prefix (``broker.spec`` reads a task's ``k8s`` as
``kubernetes``, so no offer carries ``k8s``)."""

K8S_NOTICE_FILE = "/tmp/spot-broker-notice.json"
"""Where the preemption hook writes the notice on a Kubernetes pod: the ``ray-node`` container's own
``/tmp``, which the skylet (that runs the hook) and the job share."""
K8S_NOTICE_MARGIN = 5
"""Seconds of the hook's timeout the notice keeps back from the job: after the hook, the skylet exits, the
``preStop`` hook ends and the kubelet still has to stop the container within the pod's grace period."""

K8S_HOOKS_MAX = 600
"""SkyPilot 0.14.1 caps a pod's ``terminationGracePeriodSeconds`` (the preemption hooks' timeouts summed) at
600 s, the cluster autoscaler's ``--max-graceful-termination-sec`` default: a longer stop grace would promise
the job more time than the pod gets."""

SECRET_ENVS = ("BROKER_JOB_TOKEN",)
"""The broker's variables that are credentials (the job token lets whoever holds it report the job's progress and
the checkpoint it resumes from): handed to SkyPilot as ``secrets``, which it redacts, never as ``envs``, which it
shows and stores as they are."""

GIT_URL_ENV = "GIT_URL"
GIT_REF_ENVS = ("GIT_BRANCH", "GIT_TAG", "GIT_COMMIT_HASH")
"""The variables SkyPilot 0.14.1's ``sky/utils/git_clone.sh`` reads the ref of a git workdir from, in this order: the
first one set wins."""

GUARDED_STEPS = ("setup", "run")
"""The task's commands a budget limit guards (:func:`guarded_run`), in the order SkyPilot runs them."""


def exit_marker(step: str = "run") -> str:
    """The line a wrapped ``step`` prints last: the marker, then bash's exit status (128 + N: killed by signal N)."""
    return f"[spot-broker] {step} exited with status "


def budget_marker(step: str = "run") -> str:
    """The line a guarded ``step`` prints when its limit stopped it: the marker, then the time (epoch seconds)."""
    return f"[spot-broker] {step} stopped at its budget at "


EXIT_MARKER = exit_marker("run")
"""The line the wrapped ``run`` prints last: the marker, then bash's exit status (128 + N: killed by signal N)."""
BUDGET_MARKER = budget_marker("run")
"""The line a guarded ``run`` prints when its limit stopped it: the marker, then the time (epoch seconds)."""
_EXIT_LINE = re.compile(rb"\[spot-broker\] (setup|run) exited with status (\d+)\s*$", re.MULTILINE)
_BUDGET_LINE = re.compile(rb"\[spot-broker\] (setup|run) stopped at its budget at (\d+)\s*$", re.MULTILINE)
BUDGET_EXIT_CODE = 124
"""What a guarded ``setup`` or ``run`` stopped at its limit exits with (as ``timeout`` does), whatever the
script's own status was: never 0, so SkyPilot never records the job as succeeded (nor a setup as done: its
job ends ``FAILED_SETUP``, and the run is not started)."""


class TaskConfigError(ValueError):
    """The placement or the checkpoint mount cannot be expressed as a SkyPilot task."""


def infra(placement: Mapping[str, Any]) -> str:
    """``cloud/region/zone`` (``k8s/<context>`` for Kubernetes) from a placement."""
    cloud = str(placement.get("cloud") or "").lower()
    if not cloud or cloud == "local":
        raise TaskConfigError(f"the placement's cloud {cloud or 'none'!r} is not one SkyPilot provisions")
    parts = [KUBERNETES_CLOUDS.get(cloud, cloud)]
    if cloud in KUBERNETES_CLOUDS:  # a Kubernetes pool: its context; the zone is the broker's pool name
        return "/".join(parts + ([str(placement["region"])] if placement.get("region") else []))
    for key in ("region", "zone"):
        if placement.get(key):
            parts.append(str(placement[key]))
        else:
            break
    return "/".join(parts)


def pinned_resources(resources: Mapping[str, Any] | None, placement: Mapping[str, Any]) -> dict[str, Any]:
    """The user's resources with every placement decision replaced by the broker's."""
    resources = dict(resources or {})
    variants = resources.get("any_of") or resources.get("ordered") or []
    base = {k: v for k, v in resources.items() if k not in PLACEMENT_KEYS}
    chosen = _placed_variant(variants, placement)
    merged = {**base, **{k: v for k, v in chosen.items() if k not in PLACEMENT_KEYS}}
    merged.pop("autostop", None)  # the broker's autodown, never the task's (refused at submit since)
    merged["infra"] = infra(placement)
    kubernetes = str(placement.get("cloud") or "").lower() in KUBERNETES_CLOUDS
    instance_type = None if kubernetes else host_instance_type(placement)  # a pool's shape names no Kubernetes type
    if instance_type:
        merged["instance_type"] = instance_type
    if kubernetes:  # the pod gets the slots' share of the pool's CPUs and memory, not SkyPilot's small default
        for key, shape in (("cpus", "vcpus"), ("memory", "memory_gib")):
            if merged.get(key) is None and placement.get(shape) is not None:
                merged[key] = str(placement[shape])
    if placement.get("accelerator"):
        merged["accelerators"] = {str(placement["accelerator"]): int(placement.get("accelerator_count") or 1)}
    merged["use_spot"] = placement.get("tier") == "spot"
    return merged


def host_instance_type(placement: Mapping[str, Any]) -> str | None:
    """The VM type SkyPilot is asked for. GCP prices a GPU apart from the VM it rides, so the broker's
    GCP offers name both, ``n1-highmem-8+V100:1`` (the host, then the GPUs, which ``accelerators``
    pins): SkyPilot takes the host's name. A GCP TPU's offer is named after the TPU alone
    (``tpu-v6e-1``, the accelerator): SkyPilot picks its VM from ``accelerators``, so there is none."""
    name = str(placement.get("instance_type") or "")
    host = name.split("+", 1)[0]
    if not host or host == str(placement.get("accelerator") or ""):
        return None
    return host


def broker_owned_fields(task: Mapping[str, Any]) -> list[tuple[str, str]]:
    """``(field, key)`` for each setting of the task the broker decides itself (:data:`BROKER_OWNED_TASK`, and
    :data:`BROKER_OWNED_RESOURCES` in ``resources`` and in each of its ``any_of`` / ``ordered`` alternatives),
    in the task's order; ``field`` is the dotted path (``resources.any_of[1].autostop``)."""
    found = [(key, key) for key in BROKER_OWNED_TASK if key in task]
    resources = task.get("resources")
    if not isinstance(resources, Mapping):
        return found
    found += [(f"resources.{key}", key) for key in BROKER_OWNED_RESOURCES if key in resources]
    for list_key in ("any_of", "ordered"):
        variants = resources.get(list_key)
        for i, variant in enumerate(variants if isinstance(variants, list) else []):
            if isinstance(variant, Mapping):
                found += [(f"resources.{list_key}[{i}].{key}", key) for key in BROKER_OWNED_RESOURCES if key in variant]
    return found


def _placed_variant(variants: Any, placement: Mapping[str, Any]) -> Mapping[str, Any]:
    """The ``any_of`` / ``ordered`` alternative to launch: the one the placement was made from, by the index it
    carries (``alternative``: :func:`broker.offers.placed_alternative`), so that two alternatives placement told
    apart by what :func:`_variant_for` does not look at (``cpus``, ``memory``, ``instance_type``, the regions of an
    ``image_id`` mapping) each launch with their own settings (``disk_size``, ``image_id``, ...). A placement stored
    before it carried one, or whose index the task has no alternative at, falls back to :func:`_variant_for`."""
    if not isinstance(variants, list):
        return {}
    index = placement.get("alternative")
    if isinstance(index, int) and not isinstance(index, bool) and 0 <= index < len(variants) \
            and isinstance(variants[index], Mapping):
        return variants[index]
    return _variant_for(variants, placement)


def _variant_for(variants: list[Any], placement: Mapping[str, Any]) -> Mapping[str, Any]:
    """The ``any_of`` alternative the placement satisfies: among those whose cloud, region, zone (``infra`` or
    ``cloud``/``region``/``zone``) and ``use_spot`` allow it (none: all of them), the one naming its accelerator
    and count, else its accelerator (with none: one asking for none), else the first. Names are compared whole
    (``A100`` is not ``A100-80GB``, ``L4`` not ``L40S``): the alternative's other settings (``memory``,
    ``disk_size``, ``image_id``) go with the shape chosen, so two alternatives of one accelerator in two regions
    each keep their own image and disk."""
    mappings = [v for v in variants if isinstance(v, Mapping)]
    variants = [v for v in mappings if _allows(v, placement)] or variants
    mappings = [v for v in variants if isinstance(v, Mapping)]
    wanted = str(placement.get("accelerator") or "").lower()
    if wanted:
        count = int(placement.get("accelerator_count") or 1)
        named = [v for v in mappings if wanted in {n for n, _ in _accelerators_of(v.get("accelerators"))}]
        exact = [v for v in named if (wanted, count) in _accelerators_of(v.get("accelerators"))]
        if exact or named:
            return (exact or named)[0]
    else:  # a CPU-only placement: an alternative asking for no accelerator
        cpu_only = [v for v in mappings if not v.get("accelerators")]
        if cpu_only:
            return cpu_only[0]
    return variants[0] if variants and isinstance(variants[0], Mapping) else {}


def _allows(variant: Mapping[str, Any], placement: Mapping[str, Any]) -> bool:
    """Whether an alternative's location and ``use_spot`` allow the placement (what it leaves out allows any)."""
    cloud, region, zone = _location_of(variant)
    placed = (_cloud_name(placement.get("cloud")), str(placement.get("region") or "").lower(),
              str(placement.get("zone") or "").lower())
    for asked, at in zip((cloud, region, zone), placed):
        if asked and asked != at:
            return False
    use_spot = variant.get("use_spot")
    if isinstance(use_spot, bool) and use_spot != (placement.get("tier") == "spot"):
        return False
    return True


def _location_of(variant: Mapping[str, Any]) -> tuple[str, str, str]:
    """``(cloud, region, zone)`` an alternative asks for, lowercased, ``""`` for any: from ``infra``
    (``aws/us-east-1/us-east-1a``, ``*`` for any, a Kubernetes context whole) or ``cloud``/``region``/``zone``."""
    text = variant.get("infra")
    if isinstance(text, str) and text.strip():
        first, _, rest = text.strip().partition("/")
        parts = [first, rest] if _cloud_name(first) == "kubernetes" else text.strip().split("/")
        parts = ["" if p == "*" else p for p in parts] + ["", "", ""]
        return _cloud_name(parts[0]), parts[1].lower(), parts[2].lower()
    return (_cloud_name(variant.get("cloud")), str(variant.get("region") or "").lower(),
            str(variant.get("zone") or "").lower())


def _cloud_name(value: Any) -> str:
    """A cloud's name as offers carry it (``k8s`` is ``kubernetes``), lowercased; ``""`` for none."""
    name = str(value or "").strip().lower()
    return {short: cloud for cloud, short in KUBERNETES_CLOUDS.items()}.get(name, name)


def _accelerators_of(value: Any) -> set[tuple[str, int]]:
    """``(name, count)`` pairs, names lowercased, of a ``resources.accelerators`` value in any of SkyPilot's
    forms: ``"A100:8"``, ``{"A100": 8}``, a list of those (a count left out is 1)."""
    if isinstance(value, Mapping):
        return {(str(k).strip().lower(), _count(c)) for k, c in value.items()}
    if isinstance(value, str):
        name, _, count = value.partition(":")
        return {(name.strip().lower(), _count(count or 1))}
    if isinstance(value, (list, tuple, set)):
        return set().union(*(_accelerators_of(v) for v in value)) if value else set()
    return set()


def _count(value: Any) -> int:
    try:
        return int(float(value)) if value is not None else 1
    except (TypeError, ValueError):
        return 0  # matches no placement's count: the name alone decides


def checkpoint_mount(uri: str, destination: str) -> tuple[dict[str, str], str]:
    """The ``file_mounts`` value mounting ``uri``'s bucket, and the job's folder under ``destination``."""
    parts = urlsplit(uri)
    if parts.scheme not in MOUNTABLE_SCHEMES or not parts.netloc:
        raise TaskConfigError(
            f"the checkpoint store {uri!r} cannot be mounted; a mount needs a bucket URL "
            f"({', '.join(s + '://' for s in MOUNTABLE_SCHEMES)})"
        )
    folder = destination.rstrip("/") + ("/" + parts.path.strip("/") if parts.path.strip("/") else "")
    # persistent: tearing the cluster down must never delete the bucket holding the checkpoints
    return {"source": f"{parts.scheme}://{parts.netloc}", "mode": "MOUNT", "persistent": True}, folder


def task_config(task: Mapping[str, Any], placement: Mapping[str, Any], envs: Mapping[str, str], *,
                job_id: str = "", attempt_id: str = "", stop_at: int | None = None,
                grace_seconds: float = 30) -> dict[str, Any]:
    """The SkyPilot task config for one attempt (a new dict; ``task`` is not changed). ``stop_at``
    (epoch seconds, the cluster's clock): when the guarded ``setup`` and ``run`` are stopped (:func:`guarded_run`)."""
    config = copy.deepcopy(dict(task))
    config.pop("broker", None)
    resources = pinned_resources(config.get("resources"), placement)
    labels = dict(resources.get("labels") or {})
    if job_id:
        labels.setdefault("broker-job", job_id)
    if attempt_id:
        labels.setdefault("broker-attempt", attempt_id)
    if labels:
        resources["labels"] = labels
    config["resources"] = resources
    if placement.get("num_nodes"):
        config["num_nodes"] = int(placement["num_nodes"])
    merged_envs = {str(k): ("" if v is None else str(v)) for k, v in (config.get("envs") or {}).items()}
    merged_envs.update({k: str(v) for k, v in envs.items()})
    cloud = str(placement.get("cloud") or "").lower()
    if placement.get("tier") == "spot" and cloud in SPOT_NOTICE:
        # the checkpoint library watches the cloud's own interruption notice (checkpoint.cloud_notice)
        merged_envs.setdefault("BROKER_PREEMPTION_METADATA", cloud)
        merged_envs.setdefault("BROKER_PREEMPTION_GRACE_S", str(SPOT_NOTICE[cloud]))
    if cloud in KUBERNETES_CLOUDS:
        # nothing tells a pod's processes it is being deleted but the kubelet's SIGTERM to PID 1, which is
        # not the job: SkyPilot's preStop hook runs the task's preemption hooks, and this one writes the notice
        config["config"] = with_notice_hook(config.get("config"), K8S_NOTICE_FILE, grace_seconds)
        merged_envs["BROKER_NOTICE_FILE"] = K8S_NOTICE_FILE
    mounts = dict(config.get("file_mounts") or {})
    for destination, source in list(mounts.items()):
        if source == CHECKPOINT_MOUNT:
            uri = merged_envs.get("BROKER_CHECKPOINT_URI", "")
            mounts[destination], merged_envs["BROKER_CHECKPOINT_DIR"] = checkpoint_mount(uri, str(destination))
    if mounts:
        config["file_mounts"] = mounts
    own = config.get("secrets") or {}
    # a list holds managed-secret references, which SkyPilot itself reads as the dict form's null values
    secrets = {str(k): None for k in own} if isinstance(own, list) else {str(k): v for k, v in own.items()}
    clone = git_clone_envs(config.get("workdir"))
    if clone:  # the workdir's repository and ref, never the task's own variables of those names
        for name in (GIT_URL_ENV, *GIT_REF_ENVS):
            merged_envs.pop(name, None)
            secrets.pop(name, None)
        merged_envs.update(clone)
        if GitWorkdir.of(config["workdir"]).secrets:  # a token in the URL: not shown where SkyPilot shows envs
            secrets[GIT_URL_ENV] = merged_envs.pop(GIT_URL_ENV)
    for name in SECRET_ENVS:
        if name in merged_envs:
            secrets[name] = merged_envs.pop(name)
    if secrets:
        config["secrets"] = secrets
    config["envs"] = merged_envs
    if isinstance(config.get("run"), str) and config["run"].strip():
        config["run"] = reporting_exit_code(config["run"]) if stop_at is None else \
            guarded_run(config["run"], stop_at=stop_at, grace_seconds=grace_seconds)
    if stop_at is not None and isinstance(config.get("setup"), str) and config["setup"].strip():
        # a hanging pip install or download would keep a paid cluster up past the budget with no broker to stop it
        config["setup"] = guarded_run(config["setup"], stop_at=stop_at, grace_seconds=grace_seconds, step="setup")
    return config


def git_clone_envs(workdir: Any) -> dict[str, str]:
    """The variables SkyPilot needs to clone a git ``workdir`` (``{url, ref}``) into each node's ``~/sky_workdir``;
    ``{}`` for any other workdir.

    SkyPilot 0.14.1 clones it with ``sky/utils/git_clone.sh``, which reads only its environment: ``GIT_URL`` (none:
    it clones nothing, and the sync succeeds), then the ref — ``GIT_BRANCH`` (or ``GIT_TAG``): a shallow clone of
    it; ``GIT_COMMIT_HASH``: a full clone, then ``git checkout`` of it. Its CLI sets them from the workdir
    (``Task.update_envs_and_secrets_from_workdir``, after asking the repository with ``git ls-remote`` what the ref
    is); the SDK and the API server never do. The launcher tells the ref's kind from its form alone, so that the
    broker's host never reaches the repository (nor lends it its own credentials): a branch or a tag goes as
    ``GIT_BRANCH`` (``git clone --branch`` takes either, and the checkout that follows finds a tag's commit); 4 to 40
    hex digits as ``GIT_COMMIT_HASH``, whose full clone and checkout also find a branch or tag named so (a short
    hex name that is also the prefix of a commit's hash checks out that commit: git's own rule). No ref: the
    repository's default branch."""
    repo = GitWorkdir.of(workdir)
    if repo is None:
        return {}
    envs = {GIT_URL_ENV: repo.url}
    if repo.ref:
        envs["GIT_COMMIT_HASH" if commit_like(repo.ref) else "GIT_BRANCH"] = repo.ref
    return envs


def with_notice_hook(config: Any, notice_file: str, grace_seconds: float) -> dict[str, Any]:
    """The task's ``config:`` with :func:`notice_hook` first among its lifecycle ``hooks``, the task's own
    hooks (and every other setting) kept after it: SkyPilot runs an event's hooks one after the other, so
    the notice goes out at once and the save has the whole grace period."""
    merged = copy.deepcopy(dict(config)) if isinstance(config, Mapping) else {}
    own = merged.get("hooks")
    merged["hooks"] = [notice_hook(notice_file, grace_seconds)] + (list(own) if isinstance(own, list) else [])
    return merged


def notice_hook(notice_file: str, grace_seconds: float) -> dict[str, Any]:
    """A SkyPilot lifecycle hook for the ``preemption`` event that announces the stop as the local runner does
    (:mod:`checkpoint.notice_file`).

    On Kubernetes, SkyPilot 0.14.1 gives the pod a ``preStop`` hook that sends the skylet SIGTERM when the
    pod is deleted; the skylet runs the task's ``preemption`` hooks in order, each under its ``timeout``,
    and the pod's ``terminationGracePeriodSeconds`` is the sum of those timeouts. This one writes
    ``notice_file`` (atomically, JSON ``{"reason", "grace_seconds", "at"}``, the grace less
    :data:`K8S_NOTICE_MARGIN`), then waits while a live process is registered in
    ``<notice_file>.listeners/`` (a checkpointer saving at its next step, which then exits), up to the
    notice's grace: ending sooner lets the pod go as soon as the save is done.
    """
    timeout = min(max(int(grace_seconds), K8S_NOTICE_MARGIN + 1), K8S_HOOKS_MAX)
    grace = timeout - K8S_NOTICE_MARGIN
    run = (
        f"broker_notice={shlex.quote(notice_file)}\n"
        f"broker_grace={grace}\n"
        'broker_now=$(date +%s)\n'
        'printf \'{"reason": "the pod is being deleted", "grace_seconds": %s, "at": %s}\\n\' '
        '"$broker_grace" "$broker_now" > "$broker_notice.tmp.$$" && mv -f "$broker_notice.tmp.$$" "$broker_notice"\n'
        'broker_end=$((broker_now + broker_grace))\n'
        'while [ "$(date +%s)" -lt "$broker_end" ]; do\n'
        "  broker_live=\n"
        '  for broker_listener in "$broker_notice.listeners"/*; do\n'
        '    if kill -0 "${broker_listener##*/}" 2>/dev/null; then broker_live=1; break; fi\n'
        "  done\n"
        '  [ -n "$broker_live" ] || break\n'
        "  sleep 1\n"
        "done\n"
    )
    return {"run": run, "events": ["preemption"], "timeout": timeout}


def reporting_exit_code(run: str) -> str:
    """``run`` in a subshell (its own ``exit``, ``set -e`` or a signal end only the subshell),
    then a line with its exit status, which the script then exits with."""
    return f"(\n{run.rstrip()}\n)\nbroker_status=$?\necho \"{EXIT_MARKER}$broker_status\"\nexit $broker_status\n"


def guarded_run(run: str, *, stop_at: int, grace_seconds: float, step: str = "run") -> str:
    """:func:`reporting_exit_code`'s script, stopped at ``stop_at`` (epoch seconds) if still running.

    The script runs in a subshell of its own process group (``set -m``; SkyPilot runs ``run`` with
    ``bash -i`` and no terminal, where job control is off unless asked for), so that its background
    processes and their children are stopped with it. A watcher waits for ``stop_at``, then sends the
    group SIGTERM (the checkpoint library saves on it), and SIGKILL once ``grace_seconds`` have passed
    with any of it still alive. The script then reports the run's own status as usual, prints
    :data:`BUDGET_MARKER` with the time, and exits :data:`BUDGET_EXIT_CODE`. Past ``stop_at`` already
    (a long provisioning, a setup that ended just then), the run is not started at all.

    ``step="setup"`` guards the task's ``setup`` the same way, to the same limit: SkyPilot 0.14.1 runs it
    as the first part of the cluster's job (``detach_setup``), on every node, as ``/bin/bash -i`` of a
    script file with no terminal, as it runs ``run``; any exit status but 0 (and 137, which it takes for a
    cancel) ends the job ``FAILED_SETUP`` and the run is never started. Its lines name the setup
    (:func:`exit_marker`, :func:`budget_marker`), so that a setup stopped at the budget is read as a
    budget stop of the setup, not as the setup failing (:func:`budget_stop_in`).
    """
    if step not in GUARDED_STEPS:
        raise ValueError(f"step must be one of {', '.join(GUARDED_STEPS)}, not {step!r}")
    grace = max(int(grace_seconds), 0)
    return (
        f"broker_stop_at={int(stop_at)}\n"
        f"broker_grace={grace}\n"
        'if [ "$(date +%s)" -ge "$broker_stop_at" ]; then\n'
        f'  echo "[spot-broker] the budget\'s limit came before the {step} started: not starting it"\n'
        f'  echo "{budget_marker(step)}$(date +%s)"\n'
        f"  exit {BUDGET_EXIT_CODE}\n"
        "fi\n"
        'broker_fired="${TMPDIR:-/tmp}/spot-broker-budget.$$"\n'
        'rm -f "$broker_fired"\n'
        "set -m\n"
        f"(\n{run.rstrip()}\n) &\n"
        "broker_run=$!\n"
        "set +m\n"
        "(\n"
        '  while [ "$(date +%s)" -lt "$broker_stop_at" ]; do sleep 1; done\n'
        '  : > "$broker_fired"\n'
        f'  echo "[spot-broker] the budget\'s limit came: SIGTERM to the {step}, SIGKILL after $broker_grace s"\n'
        '  kill -TERM -- "-$broker_run" 2>/dev/null\n'
        "  broker_waited=0\n"
        '  while kill -0 -- "-$broker_run" 2>/dev/null && [ "$broker_waited" -lt "$broker_grace" ]; do\n'
        "    sleep 1\n"
        "    broker_waited=$((broker_waited + 1))\n"
        "  done\n"
        '  kill -KILL -- "-$broker_run" 2>/dev/null\n'
        ") &\n"
        "broker_guard=$!\n"
        'wait "$broker_run"\n'
        "broker_status=$?\n"
        'if [ -e "$broker_fired" ]; then\n'
        '  wait "$broker_guard"\n'
        "else\n"
        '  kill "$broker_guard" 2>/dev/null\n'
        '  wait "$broker_guard" 2>/dev/null\n'
        "fi\n"
        f'echo "{exit_marker(step)}$broker_status"\n'
        'if [ -e "$broker_fired" ]; then\n'
        '  rm -f "$broker_fired"\n'
        f'  echo "{budget_marker(step)}$(date +%s)"\n'
        f"  exit {BUDGET_EXIT_CODE}\n"
        "fi\n"
        "exit $broker_status\n"
    )


def budget_stop_in(logs: bytes, step: str | None = None) -> int | None:
    """When the guarded ``setup`` or ``run`` (``step``: that one only) was stopped at its budget, from its
    logs (epoch seconds; the first node to report), or None: it was not (or the logs were cut)."""
    times = [int(m.group(2)) for m in _BUDGET_LINE.finditer(logs) if step is None or m.group(1).decode() == step]
    return min(times) if times else None


def budget_stopped_step(logs: bytes) -> str | None:
    """Which command the budget's limit stopped, from the logs: ``"setup"`` (the run never started) or
    ``"run"``; None when neither was stopped at the budget (or the logs were cut)."""
    return next((s for s in GUARDED_STEPS if budget_stop_in(logs, s) is not None), None)


def exit_code_in(logs: bytes, step: str = "run") -> int | None:
    """The ``step``'s exit status from its logs (None: no report — it never ended on its own, or
    the logs were cut; a setup reports one only when guarded). With several nodes each reports;
    the first failure's status wins."""
    codes = [int(m.group(2)) for m in _EXIT_LINE.finditer(logs) if m.group(1).decode() == step]
    return next((c for c in codes if c != 0), codes[0] if codes else None)


def without_broker_mounts(task: Mapping[str, Any]) -> dict[str, Any]:
    """A copy of ``task`` without the ``broker:checkpoint`` mounts (they are resolved at launch)."""
    config = copy.deepcopy(dict(task))
    mounts = config.get("file_mounts")
    if isinstance(mounts, dict):
        kept = {k: v for k, v in mounts.items() if v != CHECKPOINT_MOUNT}
        if kept:
            config["file_mounts"] = kept
        else:
            config.pop("file_mounts")
    return config
