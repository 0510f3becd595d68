"""A ``/metrics`` scrape of a broker whose teams have monthly caps, and one team's standing (what a submit is weighed
against), the way they are now beside the way they were (:func:`old_standing`, pinned below), in one run.

    .venv/bin/python benchmarks/metrics_caps.py [--jobs 20000] [--rounds 5] [--teams 3]

One SQLite store of ``--jobs`` jobs is made once (``tests/broker/cost_history.py``: five teams, 0–5 attempts each
over 120 days, about 4 % still running or queued; "now" is 2026-11-29, so the month read is November), with
``--teams`` of its teams capped. In one process, each round, both ways alternately (the first one changed each
round): a scrape after the first (``StoreCollector.collect``, which reads the jobs not ended and those updated since
the last one), and one team's standing (``BrokerService.team_standing``). Before, for each capped team a scrape ran
the month's cost report: ``costs.gather`` (a read of the team's month, a scan of the jobs table) and
``costs.report``, only for its total; now a scrape sums the month from the cost records it reads anyway and one read
of the pruned-cost ledger, and a standing read alone sums the report's read without the report (``costs.spent``).
The script stops if a figure differs between the two. Medians of the rounds; ratio = new ÷ old.
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests" / "broker"))

from broker import costs  # noqa: E402
from broker.api.metrics import StoreCollector  # noqa: E402
from broker.config import load_settings  # noqa: E402
from broker.service import BrokerService  # noqa: E402
from broker.store import open_store  # noqa: E402
from broker.team_budget import month_of, team_month  # noqa: E402

NOW = 1_796_000_000.0
"""The store's "now" (2026-11-29 UTC), as ``benchmarks/scale_reads.py``'s."""
TEAMS = ["vision", "nlp", "speech", "robotics", "research"]


def old_standing(service: BrokerService, team: str, now: float, spent: int | None = None):
    """``BrokerService.team_standing`` as it was at 6f22934: the month's whole cost report for its total (``spent``
    is ignored: the old scrape passed none)."""
    if not service._capped(team):
        return None
    cap = service.settings.teams[team].monthly_budget
    jobs = service.store.list_jobs(team=team, active_since=now, limit=100_000)
    month = month_of(now)
    win = costs.Window(month.since, month.until, month.name)
    history = costs.gather(service.store, team=team, win=win, retention_days=service.settings.job_retention_days)
    spent = costs.report(history.jobs, history.attempts, win=win, now=now, positions={}, team=team,
                         ledger=history.ledger)["totals"]["spent"]["micros"]
    return team_month(team, cap, month, jobs, spent)


class OldService(BrokerService):
    """The service, with the standing of before."""

    def team_standing(self, team, now, *, spent=None):
        return old_standing(self, team, now)


class OldCollector(StoreCollector):
    """The collector as it was at 6f22934: it held no month figures, and asked each capped team's standing to read
    its month."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self._keep = self.capped
        self.capped = frozenset()  # no job's month kept (its figures as before)

    def _caps(self, figures, settled):
        self.capped = self._keep
        try:
            yield from super()._caps(figures, False)  # settled=False: each standing reads its month itself
        finally:
            self.capped = frozenset()


def caps(families) -> dict:
    """The capped teams' month figures of a scrape, back in micro-dollars."""
    return {(f.name, s.labels["team"]): round(s.value * 1_000_000) for f in families
            if f.name.startswith("broker_team_month") for s in f.samples}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--jobs", type=int, default=20_000)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--teams", type=int, default=3, help="how many of the five teams are capped")
    args = ap.parse_args()
    where = Path(tempfile.mkdtemp(prefix="bench-caps-"))
    try:
        return run(args, where)
    finally:
        shutil.rmtree(where, ignore_errors=True)


def run(args, where: Path) -> int:
    from cost_history import history

    capped = TEAMS[:args.teams]
    (where / "c.yaml").write_text("pools:\n  - {name: a, slots: 4, price_per_slot_hour: '0.10'}\nteams:\n"
                                  + "".join(f"  {t}: {{monthly_budget_usd: '900000'}}\n" for t in capped))
    url = f"sqlite://{where}/broker.db"
    settings = load_settings({"BROKER_DATA_DIR": str(where / "data"), "BROKER_ADMIN_TOKEN": "x" * 20,
                              "BROKER_STORE_URL": url}, config_path=where / "c.yaml")
    seed = open_store(url)
    seed._db.execute("PRAGMA synchronous=OFF")
    t = time.perf_counter()
    history(seed, args.jobs, NOW)
    seed.close()
    print(f"seeded {args.jobs} jobs in {time.perf_counter() - t:.0f} s", file=sys.stderr, flush=True)

    store = open_store(url)
    ways = {"new": BrokerService(settings, store, clock=lambda: NOW),
            "old": OldService(settings, store, clock=lambda: NOW)}
    made = {"new": StoreCollector, "old": OldCollector}
    first = {name: caps(made[name](ways[name], settings=settings).collect()) for name in ways}
    if first["new"] != first["old"]:
        print(f"the scrapes differ: {first}", file=sys.stderr)
        return 1
    got: dict[tuple[str, str], list[float]] = {}
    for i in range(args.rounds):
        for name in (["new", "old"] if i % 2 == 0 else ["old", "new"]):
            collector = made[name](ways[name], settings=settings)
            t = time.perf_counter()
            seen = caps(collector.collect())  # the first scrape after a start: it reads every job
            got.setdefault(("first", name), []).append(time.perf_counter() - t)
            if seen != first["new"]:
                print(f"{name}: the first scrape differs: {seen}", file=sys.stderr)
                return 1
            t = time.perf_counter()
            seen = caps(collector.collect())
            got.setdefault(("scrape", name), []).append(time.perf_counter() - t)
            if seen != first["new"]:
                print(f"{name}: the scrape differs: {seen}", file=sys.stderr)
                return 1
            t = time.perf_counter()
            standing = ways[name].team_standing(capped[0], NOW)
            got.setdefault(("standing", name), []).append(time.perf_counter() - t)
            if standing.spent != first["new"][("broker_team_month_spent_dollars", capped[0])]:
                print(f"{name}: {capped[0]}'s standing differs from the scrape's", file=sys.stderr)
                return 1
    print(f"{args.jobs} jobs stored (sqlite), {args.teams} capped teams, month {month_of(NOW).name}, "
          f"{args.rounds} rounds; medians; ratio = new ÷ old; the same figures both ways\n")
    print("| measure | new, s | old, s | ratio |")
    print("|---|---:|---:|---:|")
    for label, what in ((f"the first scrape after a start, {args.teams} capped teams", "first"),
                        (f"a scrape after the first, {args.teams} capped teams", "scrape"),
                        ("one team's standing (a submit's weighing)", "standing")):
        new, old = statistics.median(got[(what, "new")]), statistics.median(got[(what, "old")])
        print(f"| {label} | {new:.3f} | {old:.3f} | {new / old:.2f} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
