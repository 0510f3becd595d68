"""Simulated cloud zones: local processes standing in for spot and on-demand capacity.

For demos, tests and benchmarks. A zone is labelled simulated everywhere it
shows (its offers carry ``simulated=True``). A spot zone's capacity follows
either a trace in the spot-traces format (``{"metadata": {"gap_seconds": G},
"data": [n0, n1, ...]}``, replayed ``speed`` times faster than real time) or a
scripted schedule (``"preempt attempt 1 at +40s"``), and an admin can take a
zone's capacity away by hand. A preemption is what a cloud does: the notice
(SIGTERM), the zone's grace period (AWS 120 s, GCP 30 s; shortened in tests),
then SIGKILL.

Pure except :func:`load_trace` and the override files read by the launcher.
"""

from __future__ import annotations

import difflib
import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pricing.money import DecimalComma, MoneyError, NotPlain, to_decimal, typed_to_micros

NOTICE_SECONDS = {"aws": 120.0, "gcp": 30.0, "azure": 30.0}
"""How long each cloud's spot preemption notice lasts."""

_SCHEDULE = re.compile(r"^\s*preempt\s+attempt\s+(\d+)\s+at\s+\+?(\d+(?:\.\d+)?)\s*s?\s*$", re.I)


@dataclass(frozen=True)
class ScriptedPreemption:
    """Preempt attempt ``attempt`` once it has run ``after_seconds`` in the zone."""

    attempt: int
    after_seconds: float


@dataclass(frozen=True)
class SimZone:
    name: str
    tier: str  # "spot" or "ondemand"
    cloud: str = "aws"
    region: str = "us-east-1"
    instance_type: str = "g5.xlarge"
    nodes: int = 4
    grace_seconds: float | None = None  # None: the cloud's notice
    trace: tuple[int, ...] = ()
    gap_seconds: float = 600.0
    speed: float = 1.0
    schedule: tuple[ScriptedPreemption, ...] = ()
    price_per_hour: str | None = None  # dollars; None: from the price table
    cloud_zone: str | None = None  # the real zone whose spot price it takes (default: the region's cheapest)
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def grace(self) -> float:
        return self.grace_seconds if self.grace_seconds is not None else NOTICE_SECONDS.get(self.cloud, 30.0)

    def trace_available(self, seconds_since_epoch: float) -> bool:
        """Whether the trace has spot capacity at this point of the replay (wraps around)."""
        if self.tier != "spot" or not self.trace:
            return True
        tick = int(seconds_since_epoch * self.speed / self.gap_seconds) % len(self.trace)
        return self.trace[tick] > 0

    def scripted_preemption(self, attempt: int, running_for: float) -> bool:
        return self.tier == "spot" and any(
            p.attempt == attempt and running_for >= p.after_seconds for p in self.schedule)


def parse_schedule(entries: Any, where: str) -> tuple[ScriptedPreemption, ...]:
    out = []
    for i, entry in enumerate(entries or []):
        if isinstance(entry, dict):
            try:
                out.append(ScriptedPreemption(int(entry["attempt"]), float(entry["at"])))
            except (KeyError, TypeError, ValueError):
                raise ValueError(f"{where}[{i}]: needs 'attempt' and 'at' (seconds)") from None
            continue
        m = _SCHEDULE.match(str(entry))
        if not m:
            raise ValueError(f"{where}[{i}]: write it as 'preempt attempt 1 at +40s'")
        out.append(ScriptedPreemption(int(m.group(1)), float(m.group(2))))
    return tuple(out)


def load_trace(path: str | Path) -> tuple[tuple[int, ...], float]:
    """A spot-traces file as (availability per tick, gap_seconds)."""
    raw = json.loads(Path(path).read_text())
    gap = float((raw.get("metadata") or {}).get("gap_seconds", 600))
    return tuple(int(x) for x in raw["data"]), gap


ZONE_KEYS = frozenset({"name", "tier", "cloud", "region", "instance_type", "nodes", "grace_seconds", "trace",
                       "gap_seconds", "speed", "schedule", "price_per_hour", "cloud_zone"})
"""A simulated zone's settings in the broker's config; anything else is refused, naming the likely one."""


def _number(z: dict, key: str, default: float | None, where: str, *, positive: bool = False) -> float | None:
    value = z.get(key)
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value < 0 or (positive and value == 0):
        raise ValueError(f"{where}.{key}: must be a number{' more than 0' if positive else ', 0 or more'}, not {value!r}")
    return float(value)


def zones_from_config(raw: Any, *, base_dir: Path | None = None) -> tuple[SimZone, ...]:
    """The ``zones:`` section of the broker's config."""
    if not raw:
        return ()
    if not isinstance(raw, list):
        raise ValueError("zones: must be a list of simulated zones")
    zones = []
    for i, z in enumerate(raw):
        where = f"zones[{i}]"
        if not isinstance(z, dict) or not z.get("name"):
            raise ValueError(f"{where}: needs a name")
        for key in sorted(map(str, z)):
            if key not in ZONE_KEYS:
                close = difflib.get_close_matches(key, sorted(ZONE_KEYS), n=1)
                hint = f"did you mean '{close[0]}'?" if close else f"known: {', '.join(sorted(ZONE_KEYS))}"
                raise ValueError(f"{where}.{key}: is not a zone setting ({hint})")
        tier = str(z.get("tier", "spot"))
        if tier not in ("spot", "ondemand"):
            raise ValueError(f"{where}.tier: must be spot or ondemand")
        trace, gap = (), _number(z, "gap_seconds", 600, where, positive=True)
        if z.get("trace"):
            path = Path(z["trace"]).expanduser()
            if not path.is_absolute() and base_dir is not None:
                path = base_dir / path
            try:
                trace, gap = load_trace(path)
            except (OSError, ValueError, KeyError) as exc:
                raise ValueError(f"{where}.trace: cannot read {path} ({exc})") from None
        nodes = z.get("nodes", 4)
        if isinstance(nodes, bool) or not isinstance(nodes, int) or nodes < 1:
            raise ValueError(f"{where}.nodes: must be a whole number, at least 1, not {nodes!r}")
        price = z.get("price_per_hour")
        if price is not None:
            try:
                micros = typed_to_micros(price)
                if micros <= 0:
                    raise MoneyError("not more than $0")
            except (DecimalComma, NotPlain) as exc:  # said as a pool's price says it: "0,45" is a decimal comma
                raise ValueError(f"{where}.price_per_hour: {exc}") from None
            except MoneyError:
                raise ValueError(f"{where}.price_per_hour: must be an amount of dollars, more than $0") from None
            # dollars as text with no exponent: YAML's 0.00005 is a float whose str() is "5e-05", which the price
            # table refuses as text (an amount with an exponent), and every offer failed
            price = str(to_decimal(micros))
        zones.append(SimZone(
            name=str(z["name"]), tier=tier, cloud=str(z.get("cloud", "aws")), region=str(z.get("region", "us-east-1")),
            instance_type=str(z.get("instance_type", "g5.xlarge")), nodes=nodes,
            grace_seconds=_number(z, "grace_seconds", None, where),
            trace=trace, gap_seconds=gap, speed=_number(z, "speed", 1.0, where, positive=True),
            schedule=parse_schedule(z.get("schedule"), f"{where}.schedule"),
            price_per_hour=price,
            cloud_zone=str(z["cloud_zone"]) if z.get("cloud_zone") else None,
        ))
    names = [z.name for z in zones]
    if len(set(names)) != len(names):
        raise ValueError("zones: names must be unique")
    return tuple(zones)
