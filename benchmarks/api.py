"""Submit throughput and latency of the broker API, next to a bare FastAPI endpoint.

    .venv/bin/python benchmarks/api.py [--quick]

Every target is a real ``uvicorn`` server in its own process on 127.0.0.1:

* ``bare``: one ``POST`` that parses the JSON body and returns 201 (the ceiling);
* ``sqlite``: ``broker serve --no-engine`` on a fresh SQLite file (WAL, ``synchronous=FULL``);
* ``redis everysec`` / ``redis always``: the same on our own ``redis-server``
  (``appendonly yes``, ``appendfsync everysec`` / ``always``, no RDB snapshots).

Two measurements, each on a freshly started server with an empty store:

* closed loop: ``--count`` submits from ``--clients`` concurrent clients as fast as they go, cut
  at ``--cap`` seconds (req/s, and the rate over the first and the last tenth of the run);
* open loop: ``--rate`` submits/s for ``--seconds`` at fixed send times over ``--open-clients``
  connections; each latency runs from the *scheduled* send time, so a stalled server is charged
  for the requests it delays (no coordinated omission). Submits unanswered ``--grace`` seconds
  after the last send time count with the wait they had reached: the table marks such a p99 ``>=``.

Every target is bounded in time, so the whole run takes about 3 minutes and touches only 127.0.0.1.

The targets run interleaved, ``--repeat`` rounds; the table gives medians over rounds, and the
ratio to bare is taken within each round (side by side), then the median. The load generator
(``httpx.AsyncClient``) shares the 2 cores with the server, so the bare ceiling is partly the
client's: ratios are conservative for the broker, not generous.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import textwrap
import time
from dataclasses import dataclass, field
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parent.parent
VENV_BIN = Path(sys.executable).parent
TOKEN = "bench-admin"
HEADERS = {"Authorization": f"Bearer {TOKEN}", "Content-Type": "application/json"}
BODY = {"name": "bench", "resources": {"cpus": 1}, "run": "echo hi",
        "broker": {"budget_usd": "5", "expected_hours": "0.1"}}

BARE_APP = textwrap.dedent("""
    import itertools
    from fastapi import FastAPI, Request
    from fastapi.responses import JSONResponse

    app = FastAPI()
    ids = itertools.count(1)

    @app.get("/healthz")
    def healthz():
        return {"ok": True}

    @app.post("/v1/jobs", status_code=201)
    async def submit(request: Request):
        data = await request.json()
        n = next(ids)
        return JSONResponse(status_code=201, content={"id": f"job-{n}", "name": data.get("name")},
                            headers={"Location": f"/v1/jobs/job-{n}"})
""")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_port(port: int, proc: subprocess.Popen, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"process on port {port} exited with {proc.returncode}")
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.2):
                return
        except OSError:
            time.sleep(0.05)
    raise RuntimeError(f"nothing listening on 127.0.0.1:{port} after {timeout}s")


def stop(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(3)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


class Redis:
    """Our own redis-server in a temp dir; flushed before each measurement."""

    def __init__(self, workdir: Path, fsync: str):
        self.port = free_port()
        self.dir = workdir / f"redis-{fsync}"
        self.dir.mkdir()
        self.proc = subprocess.Popen(
            ["redis-server", "--port", str(self.port), "--bind", "127.0.0.1", "--dir", str(self.dir),
             "--save", "", "--appendonly", "yes", "--appendfsync", fsync, "--protected-mode", "yes"],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        wait_port(self.port, self.proc)
        self.url = f"redis://127.0.0.1:{self.port}/0"

    def flush(self) -> None:
        import redis

        r = redis.Redis.from_url(self.url)
        r.flushall()
        r.close()

    def close(self) -> None:
        stop(self.proc)


@dataclass
class Target:
    name: str
    workdir: Path
    redis: Redis | None = None
    kind: str = "broker"  # or "bare"
    runs: int = 0

    def start(self) -> tuple[subprocess.Popen, str]:
        """A fresh server with an empty store; returns (process, base URL)."""
        self.runs += 1
        port = free_port()
        if self.kind == "bare":
            cmd = [str(VENV_BIN / "python"), "-m", "uvicorn", "bare_app:app", "--app-dir", str(self.workdir),
                   "--host", "127.0.0.1", "--port", str(port), "--log-level", "warning"]
            env = dict(os.environ)
        else:
            data = self.workdir / f"{self.name.replace(' ', '-')}-{self.runs}"
            data.mkdir()
            if self.redis:
                self.redis.flush()
                store_url = self.redis.url
            else:
                store_url = f"sqlite:///{data / 'broker.db'}"
            env = {**os.environ, "BROKER_DATA_DIR": str(data), "BROKER_STORE_URL": store_url,
                   "BROKER_ADMIN_TOKEN": TOKEN, "BROKER_ENGINE": "off"}
            env.pop("BROKER_CONFIG", None)
            cmd = [str(VENV_BIN / "broker"), "serve", "--host", "127.0.0.1", "--port", str(port), "--no-engine"]
        proc = subprocess.Popen(cmd, env=env, cwd=self.workdir, stdout=subprocess.DEVNULL,
                                stderr=subprocess.PIPE)
        try:
            wait_port(port, proc)
        except RuntimeError:
            stop(proc)
            raise RuntimeError(f"{self.name}: server did not start: {proc.stderr.read().decode()[-2000:]}")
        return proc, f"http://127.0.0.1:{port}"


def ms(seconds: float) -> str:
    return f"{seconds * 1e3:.1f}" if seconds < 1 else f"{seconds * 1e3:.0f}"


def pct(values: list[float], q: float) -> float:
    s = sorted(values)
    return s[min(len(s) - 1, max(0, round(q * len(s)) - 1))]


async def _post(client: httpx.AsyncClient) -> int:
    """Status of one submit; 0 for a transport error (counted as a failure, not retried)."""
    try:
        r = await client.post("/v1/jobs", json=BODY, headers=HEADERS)
    except httpx.TransportError:
        return 0
    return r.status_code


def _client(url: str, clients: int) -> httpx.AsyncClient:
    limits = httpx.Limits(max_connections=clients, max_keepalive_connections=clients)
    return httpx.AsyncClient(base_url=url, limits=limits, timeout=60.0)


async def closed_loop(url: str, count: int, clients: int, warmup: int, cap: float) -> dict:
    """``count`` submits from ``clients`` concurrent clients, or as many as finish in ``cap`` seconds."""
    async with _client(url, clients) as client:
        for _ in range(warmup):
            await _post(client)
        lat: list[float] = []
        done: list[float] = []
        bad: list[int] = []
        todo = iter(range(count))
        t0 = time.perf_counter()
        stop_at = t0 + cap

        async def worker() -> None:
            for _ in todo:
                if time.perf_counter() >= stop_at:
                    return
                t = time.perf_counter()
                code = await _post(client)
                end = time.perf_counter()
                lat.append(end - t)
                done.append(end)
                if code != 201:
                    bad.append(code)

        await asyncio.gather(*(worker() for _ in range(clients)))
        elapsed = time.perf_counter() - t0
    n = len(done)
    done.sort()
    tenth = max(1, n // 10)
    return {"n": n, "rps": n / elapsed, "p50": pct(lat, 0.5), "p99": pct(lat, 0.99), "errors": len(bad),
            # rate over the first and the last tenth of the run: shows cost growing with the queue
            "rps_first": tenth / (done[tenth - 1] - t0),
            "rps_last": tenth / (done[-1] - done[-tenth - 1]) if n > tenth else float("nan")}


async def open_loop(url: str, rate: float, seconds: float, warmup: int, grace: float, clients: int) -> dict:
    """``rate`` submits/s at fixed send times for ``seconds``; latency from each scheduled send time.

    ``clients`` connections take the next scheduled submit as they come free (wrk2-style): a slow
    server delays the sends after it, and those delays count. Submits not answered ``grace`` seconds
    after the last send time are abandoned and count with the latency they had reached (a lower
    bound); ``late`` says how many.
    """
    n = int(rate * seconds)
    async with _client(url, clients) as client:
        for _ in range(warmup):
            await _post(client)
        lat: list[float] = []
        bad: list[int] = []
        loop = asyncio.get_running_loop()
        t0 = loop.time() + 0.05
        todo = iter(range(n))

        async def worker() -> None:
            for i in todo:
                at = t0 + i / rate
                delay = at - loop.time()
                if delay > 0:
                    await asyncio.sleep(delay)
                code = await _post(client)
                lat.append(loop.time() - at)  # from the scheduled send time
                if code != 201:
                    bad.append(code)

        tasks = [asyncio.ensure_future(worker()) for _ in range(clients)]
        deadline = t0 + seconds + grace
        _, pending = await asyncio.wait(tasks, timeout=max(0.0, deadline - loop.time()))
        end = loop.time()
        for t in pending:
            t.cancel()
        await asyncio.gather(*pending, return_exceptions=True)
    answered = len(lat)
    # abandoned (in flight at the cut-off or never sent): charged as if they were the last ones
    # scheduled, which understates their wait, so the percentiles stay lower bounds
    values = lat + [end - (t0 + i / rate) for i in range(answered, n)]
    return {"rps": answered / (end - t0), "p50": pct(values, 0.5), "p99": pct(values, 0.99),
            "errors": len(bad), "late": n - answered}


@dataclass
class Results:
    closed: dict[str, list[dict]] = field(default_factory=dict)
    opened: dict[str, list[dict]] = field(default_factory=dict)


def measure(target: Target, fn, *args) -> dict:
    proc, url = target.start()
    try:
        return asyncio.run(fn(url, *args))
    finally:
        stop(proc)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--count", type=int, default=2000, help="submits per closed-loop run")
    p.add_argument("--clients", type=int, default=8, help="concurrent clients in the closed loop")
    p.add_argument("--rate", type=float, default=200.0, help="open-loop submits per second")
    p.add_argument("--seconds", type=float, default=5.0, help="open-loop duration")
    p.add_argument("--cap", type=float, default=5.0, help="closed loop: stop after this many seconds")
    p.add_argument("--grace", type=float, default=1.0, help="open loop: wait this long for late answers")
    p.add_argument("--open-clients", type=int, default=32, help="connections in the open loop")
    p.add_argument("--repeat", type=int, default=3)
    p.add_argument("--warmup", type=int, default=30, help="unmeasured submits before each run")
    p.add_argument("--no-always", action="store_true", help="skip redis with appendfsync always")
    p.add_argument("--quick", action="store_true", help="smoke run: 300 submits or 3 s, 2 s open loop, 1 round")
    args = p.parse_args(argv)
    if args.quick:
        args.count, args.seconds, args.cap, args.repeat = 300, 2.0, 3.0, 1
    if not shutil.which("redis-server"):
        print("redis-server not found on PATH", file=sys.stderr)
        return 2

    started = time.monotonic()
    workdir = Path(tempfile.mkdtemp(prefix="bench-api-"))
    (workdir / "bare_app.py").write_text(BARE_APP)
    servers: list[Redis] = []
    try:
        targets = [Target("bare", workdir, kind="bare"), Target("sqlite", workdir)]
        servers.append(Redis(workdir, "everysec"))
        targets.append(Target("redis everysec", workdir, redis=servers[-1]))
        if not args.no_always:
            servers.append(Redis(workdir, "always"))
            targets.append(Target("redis always", workdir, redis=servers[-1]))
        res = Results({t.name: [] for t in targets}, {t.name: [] for t in targets})
        for rnd in range(1, args.repeat + 1):
            for t in targets:
                c = measure(t, closed_loop, args.count, args.clients, args.warmup, args.cap)
                o = measure(t, open_loop, args.rate, args.seconds, args.warmup, args.grace, args.open_clients)
                res.closed[t.name].append(c)
                res.opened[t.name].append(o)
                print(f"round {rnd} {t.name:15s} closed {c['rps']:5.0f} req/s ({c['n']} submits; first/last "
                      f"tenth {c['rps_first']:.0f}/{c['rps_last']:.0f}) | open @{args.rate:.0f}/s: answered "
                      f"{o['rps']:.0f}/s, p50 {ms(o['p50'])} ms, p99 {ms(o['p99'])} ms, unanswered {o['late']} | "
                      f"failed {c['errors'] + o['errors']}", file=sys.stderr, flush=True)
    finally:
        for s in servers:
            s.close()
        shutil.rmtree(workdir, ignore_errors=True)

    med = statistics.median
    bare = res.closed["bare"]
    print(f"\nmedians of {args.repeat} rounds, {time.monotonic() - started:.0f} s in all. Closed loop: "
          f"{args.count} submits or {args.cap:.0f} s, {args.clients} clients. Open loop: {args.rate:.0f}/s "
          f"for {args.seconds:.0f} s (+{args.grace:.0f} s grace). Fresh server, empty store per run.\n")
    print(f"| target | req/s (closed) | x bare | req/s first / last tenth | answered/s @{args.rate:.0f}/s "
          f"| p50 ms @{args.rate:.0f}/s | p99 ms @{args.rate:.0f}/s | aim met | failed |")
    print("|---|---:|---:|---:|---:|---:|---:|---|---:|")
    for name in res.closed:
        cs, os_ = res.closed[name], res.opened[name]
        ratio = med([c["rps"] / b["rps"] for c, b in zip(cs, bare)])
        p99 = med([o["p99"] for o in os_])
        # more than 1% unanswered at the cut-off: the p99 is only a lower bound
        lower = ">=" if med([o["late"] for o in os_]) > 0.01 * args.rate * args.seconds else ""
        errors = sum(c["errors"] for c in cs) + sum(o["errors"] for o in os_)
        aim = "-" if name == "bare" else ("yes" if p99 < 0.025 and ratio >= 1 / 3 and not errors else "no")
        print(f"| {name} | {med([c['rps'] for c in cs]):.0f} | {ratio:.2f} | "
              f"{med([c['rps_first'] for c in cs]):.0f} / {med([c['rps_last'] for c in cs]):.0f} | "
              f"{med([o['rps'] for o in os_]):.0f} | {ms(med([o['p50'] for o in os_]))} | {lower}{ms(p99)} | "
              f"{aim} | {errors} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
