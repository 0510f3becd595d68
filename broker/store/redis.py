"""Redis job store: for several broker processes sharing one server.

The only module that imports ``redis``. Each :meth:`RedisStore.commit` is one
``WATCH``/``MULTI``/``EXEC`` over the job key: the version check and every key
it touches (job, state and team indexes, attempts, events) change together or
not at all. Durability is the server's: run it with ``appendonly yes`` and
``appendfsync always`` for a commit that survives a crash.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import replace

import redis

from broker.models import Attempt, Event, Job
from broker.store.base import Change, DuplicateJob, StoreError, VersionConflict
from broker.store.redis_keys import Keys


class RedisStore:
    """:class:`~broker.store.base.JobStore` on a Redis server."""

    def __init__(self, url: str, *, prefix: str = "sb"):
        self.keys = Keys(prefix)
        self._r = redis.Redis.from_url(url, decode_responses=True, socket_timeout=10,
                                       health_check_interval=30)

    def commit(self, change: Change) -> Job:
        job, k = change.job, self.keys
        job_key = k.job(job.id)
        idem_key = k.idempotency(job.team, job.idempotency_key) if job.idempotency_key else None
        with self._r.pipeline() as p:
            watched = [job_key] + ([idem_key] if idem_key and change.expected_version is None else [])
            try:
                p.watch(*watched)
                current_raw = p.get(job_key)
                old_state = None
                if change.expected_version is None:
                    if current_raw is not None:
                        raise DuplicateJob(job.id)
                    if idem_key:
                        existing = p.get(idem_key)
                        if existing:
                            raise DuplicateJob(existing)
                    new_version = 1
                else:
                    current = json.loads(current_raw) if current_raw else None
                    if current is None or current["version"] != change.expected_version:
                        raise VersionConflict(f"job {job.id} is at version {current and current['version']}, "
                                              f"expected {change.expected_version}")
                    old_state = current["state"]
                    new_version = change.expected_version + 1
                event_base = p.llen(k.events(job.id)) if change.events else 0
                metric_base = p.llen(k.metrics(job.id)) if change.metrics else 0
                stored = replace(job, version=new_version)
                p.multi()
                p.set(job_key, json.dumps(stored.to_dict()))
                if change.expected_version is None:
                    p.zadd(k.all_jobs(), {job.id: job.submitted_at})
                    p.zadd(k.by_team(job.team), {job.id: job.submitted_at})
                    if idem_key:
                        p.set(idem_key, job.id)
                if old_state != stored.state.value:
                    if old_state:
                        p.srem(k.by_state(old_state), job.id)
                    p.sadd(k.by_state(stored.state.value), job.id)
                for attempt in change.attempts:
                    p.hset(k.attempts(job.id), str(attempt.n), json.dumps(attempt.to_dict()))
                if change.events:
                    p.rpush(k.events(job.id), *[
                        json.dumps({**e.to_dict(), "seq": event_base + i}) for i, e in enumerate(change.events, 1)
                    ])
                if change.metrics:
                    p.rpush(k.metrics(job.id), *[
                        json.dumps({**m, "seq": metric_base + i}) for i, m in enumerate(change.metrics, 1)
                    ])
                p.execute()
            except redis.WatchError:
                if change.expected_version is None:
                    existing = self._r.get(idem_key) if idem_key else None
                    raise DuplicateJob(existing or job.id) from None
                raise VersionConflict(f"job {job.id} changed while committing") from None
            except redis.RedisError as exc:
                raise StoreError(f"redis: {exc}") from exc
        return stored

    def get_job(self, job_id: str) -> Job | None:
        raw = self._r.get(self.keys.job(job_id))
        return Job.from_dict(json.loads(raw)) if raw else None

    def find_idempotent(self, team: str, key: str) -> Job | None:
        job_id = self._r.get(self.keys.idempotency(team, key))
        return self.get_job(job_id) if job_id else None

    def list_jobs(self, *, states: Sequence[str] | None = None, team: str | None = None,
                  limit: int = 1000) -> list[Job]:
        k = self.keys
        ids = self._r.zrevrange(k.by_team(team) if team else k.all_jobs(), 0, -1)
        if states:
            wanted: set[str] = set()
            for state in states:
                wanted |= self._r.smembers(k.by_state(state))
            ids = [i for i in ids if i in wanted]
        jobs = []
        for start in range(0, min(len(ids), limit), 500):
            chunk = ids[start:min(start + 500, limit)]
            for raw in self._r.mget([k.job(i) for i in chunk]):
                if raw:
                    jobs.append(Job.from_dict(json.loads(raw)))
        jobs.sort(key=lambda j: (j.submitted_at, j.id), reverse=True)
        return jobs[:limit]

    def events(self, job_id: str, *, after_seq: int = 0) -> list[Event]:
        raws = self._r.lrange(self.keys.events(job_id), after_seq, -1)
        return [Event.from_dict(json.loads(r)) for r in raws]

    def attempts(self, job_id: str) -> list[Attempt]:
        raws = self._r.hgetall(self.keys.attempts(job_id))
        return sorted((Attempt.from_dict(json.loads(v)) for v in raws.values()), key=lambda a: a.n)

    def metrics(self, job_id: str, *, limit: int = 10_000) -> list[dict]:
        return [json.loads(r) for r in self._r.lrange(self.keys.metrics(job_id), -limit, -1)]

    def ping(self) -> bool:
        return bool(self._r.ping())

    def close(self) -> None:
        self._r.close()
