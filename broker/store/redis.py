"""Redis job store: for several broker processes sharing one server.

The only module that imports ``redis``. Each change is one run of a Lua script:
the version check and every key it touches (job, state and team indexes,
idempotency key, attempts, events, metrics) change together or not at all. An
event's and a metric point's ``seq`` is its place in its list, so it is not
stored. Durability is the server's: run it with ``appendonly yes`` and
``appendfsync always`` for a commit that survives a crash.

Commits are grouped, as in the SQLite store: changes that arrive while another
commit is in flight are sent together, one script run each, in one pipelined
round trip on one connection; each caller returns only when the server has
answered its own script.

The retention policy's deletion (``prune``) is a script of its own, one run per
job: the version check and every key of the job (its body, attempts, events,
metrics, idempotency key, and its place in each index), with what the job adds to
the pruned count and totals and to the pruned-cost ledger, go together or not at all.
"""

from __future__ import annotations

import itertools
import json
import time
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import replace

import redis
from redis.exceptions import MasterDownError, NoScriptError, OutOfMemoryError, ReadOnlyError

from broker import costs, totals
from broker.lifecycle import FINAL_STATES, JobState, attempt_state, job_state
from broker.models import COST_PLACEMENT_KEYS, Attempt, CostAttempt, CostJob, Event, Job
from broker.store.base import (BATCH_IDS, Change, DuplicateJob, Expired, Pruned, PrunedCosts, StoreError,
                               StoreUnavailable, VersionConflict, check_writable, unavailable_on)
from broker.store.group_commit import GroupCommit, Slot
from broker.store.redis_keys import Keys, escaped, ledger_part, month_start


COMMIT_SCRIPT = """
-- KEYS: job, all jobs, team jobs, idempotency key (or the job key again), attempts, events, metrics,
--       jobs by update time, state names, placements, the idempotency key as written before team names were
--       escaped (or the job key again: none, or the same key), the team's admissions count (or the job key again)
-- ARGV: expected version ('' = create), job JSON, job id, submitted_at, new state, state-set prefix,
--       has idempotency key ('1'/'0'), team, idempotency key, job-key prefix, idempotency-key prefix,
--       n attempts, (n, JSON)..., n events, JSON..., n metrics, JSON..., updated_at,
--       expected placements ('' = not a placement), expected team admissions ('' = no team fence)
local function stored(id)
  local body = redis.call('GET', ARGV[10] .. id)
  return body and cjson.decode(body)
end
local function ours(job)  -- this team's job with this idempotency key
  return job and job['team'] == ARGV[8] and job['idempotency_key'] == ARGV[9]
end
local function escaped(team)  -- as Keys.idempotency escapes a team's name
  local s = string.gsub(team, '%%', '%%25')
  s = string.gsub(s, ':', '%%3A')
  return s
end
local current = redis.call('GET', KEYS[1])
local old_state = false
-- a key written before team names were escaped may name another team's job ('a:b' + 'c' was 'a' + 'b:c'): only a
-- job of this team with this key is a duplicate; another team's job moves to its own key as this job takes the key
local foreign, foreign_id = false, false
if ARGV[1] == '' then
  if current then return {'DUP', ARGV[3]} end
  if ARGV[7] == '1' then
    local existing = redis.call('GET', KEYS[4])
    local job = existing and stored(existing)
    if ours(job) then return {'DUP', existing} end
    if job and type(job['team']) == 'string' and type(job['idempotency_key']) == 'string' then
      foreign, foreign_id = job, existing
    end
    if KEYS[11] ~= KEYS[4] then
      local legacy = redis.call('GET', KEYS[11])
      if legacy and ours(stored(legacy)) then return {'DUP', legacy} end
    end
  end
else
  if not current then return {'CONFLICT', ''} end
  local stored = cjson.decode(current)
  if tostring(stored['version']) ~= ARGV[1] then return {'CONFLICT', tostring(stored['version'])} end
  old_state = stored['state']
end
local placements = ARGV[#ARGV - 1]
if placements ~= '' then
  local placed = redis.call('GET', KEYS[10]) or '0'
  if placed ~= placements then return {'PLACED', placed} end
end
local admissions = ARGV[#ARGV]
if admissions ~= '' then
  local admitted = redis.call('GET', KEYS[12]) or '0'
  if admitted ~= admissions then return {'TEAM', admitted} end
  redis.call('INCR', KEYS[12])
end
if placements ~= '' then redis.call('INCR', KEYS[10]) end
redis.call('SET', KEYS[1], ARGV[2])
if ARGV[1] == '' then
  redis.call('ZADD', KEYS[2], ARGV[4], ARGV[3])
  redis.call('ZADD', KEYS[3], ARGV[4], ARGV[3])
  if ARGV[7] == '1' then
    if foreign then
      redis.call('SET', ARGV[11] .. escaped(foreign['team']) .. ':' .. foreign['idempotency_key'], foreign_id, 'NX')
    end
    redis.call('SET', KEYS[4], ARGV[3])
  end
end
if old_state ~= ARGV[5] then
  if old_state then redis.call('SREM', ARGV[6] .. old_state, ARGV[3]) end
  redis.call('SADD', ARGV[6] .. ARGV[5], ARGV[3])
  redis.call('SADD', KEYS[9], ARGV[5])
end
local i = 13
for _ = 1, tonumber(ARGV[12]) do redis.call('HSET', KEYS[5], ARGV[i], ARGV[i + 1]); i = i + 2 end
local n = tonumber(ARGV[i]); i = i + 1
for _ = 1, n do redis.call('RPUSH', KEYS[6], ARGV[i]); i = i + 1 end
n = tonumber(ARGV[i]); i = i + 1
for _ = 1, n do redis.call('RPUSH', KEYS[7], ARGV[i]); i = i + 1 end
redis.call('ZADD', KEYS[8], ARGV[i], ARGV[3])
return {'OK', ''}
"""

PRUNE_SCRIPT = """
-- KEYS: job, all jobs, team jobs, idempotency key (or the job key again), attempts, events, metrics,
--       jobs by update time, pruned count, pruned totals, the idempotency key as written before team names were
--       escaped (or the job key again), pruned-cost ledger (its job count), the ledger's parts
-- ARGV: expected version, job id, state-set prefix, n final states, the final states...,
--       m, then m (totals field, integer increment) pairs: what the job adds to the counters of /metrics,
--       then the parts' key prefix, then (part, its score, field, integer increment) quadruples: the job's
--       costs by kind, team, tier and hour, each in the part of its team and the hour's month
-- At a server's maxmemory a script is refused a command that may add data only while it has written nothing:
-- here every deletion comes first, so the counts after them run too, and pruning is how a store that filled up
-- gets back under it (they add a few bytes, or none, for the job just freed).
local current = redis.call('GET', KEYS[1])
if not current then return 'GONE' end
local stored = cjson.decode(current)
if tostring(stored['version']) ~= ARGV[1] then return 'CONFLICT' end
local state = stored['state']
local final = false
local n = tonumber(ARGV[4])
for i = 5, 4 + n do
  if ARGV[i] == state then final = true end
end
if not final then return 'LIVE' end
for _, idem in ipairs({KEYS[4], KEYS[11]}) do  -- each only while it names this job
  if idem ~= KEYS[1] and redis.call('GET', idem) == ARGV[2] then redis.call('UNLINK', idem) end
end
redis.call('UNLINK', KEYS[1], KEYS[5], KEYS[6], KEYS[7])
redis.call('ZREM', KEYS[2], ARGV[2])
redis.call('ZREM', KEYS[3], ARGV[2])
redis.call('ZREM', KEYS[8], ARGV[2])
redis.call('SREM', ARGV[3] .. state, ARGV[2])
redis.call('INCR', KEYS[9])
local m = tonumber(ARGV[5 + n])
local j = 6 + n
for _ = 1, m do redis.call('HINCRBY', KEYS[10], ARGV[j], ARGV[j + 1]); j = j + 2 end
for i = j + 1, #ARGV, 4 do
  redis.call('HINCRBY', ARGV[j] .. ARGV[i], ARGV[i + 2], ARGV[i + 3])
  redis.call('ZADD', KEYS[13], ARGV[i + 1], ARGV[i])
end
redis.call('HINCRBY', KEYS[12], 'jobs', 1)
return 'OK'
"""
_FINAL = tuple(sorted(s.value for s in FINAL_STATES))

LEDGER_SCRIPT = """
-- The pruned-cost ledger's parts a report's window reads, at one moment (no prune script runs between the reads).
-- KEYS: pruned count, pruned-cost ledger (its job count, and the entries of a broker from before the parts),
--       the ledger's parts
-- ARGV: the parts' key prefix, the first and last month start to read, the team escaped ('' for every team)
local parts = {}
for _, part in ipairs(redis.call('ZRANGEBYSCORE', KEYS[3], ARGV[2], ARGV[3])) do
  if ARGV[4] == '' or string.sub(part, 9) == ARGV[4] then  -- after 'YYYY-MM:'
    parts[#parts + 1] = redis.call('HGETALL', ARGV[1] .. part)
  end
end
return {redis.call('GET', KEYS[1]) or '0', redis.call('HGETALL', KEYS[2]), parts}
"""

MOVE_LEDGER_SCRIPT = """
-- Entries of the pruned-cost ledger as a broker from before its parts wrote them, moved to their parts: each one
-- still there is added to its part and deleted, in one step (a report reads it in one place or the other).
-- KEYS: pruned-cost ledger, the ledger's parts
-- ARGV: the parts' key prefix, then (field, part, its score) triples
local moved = 0
for i = 2, #ARGV, 3 do
  local value = redis.call('HGET', KEYS[1], ARGV[i])
  if value then
    redis.call('HINCRBY', ARGV[1] .. ARGV[i + 1], ARGV[i], value)
    redis.call('ZADD', KEYS[2], ARGV[i + 2], ARGV[i + 1])
    redis.call('HDEL', KEYS[1], ARGV[i])
    moved = moved + 1
  end
end
return moved
"""


def _pages(fields: Iterable[tuple[str, str]], size: int) -> Iterator[list[str]]:
    """The names of ``fields`` (an ``HSCAN``), ``size`` at a time."""
    it = iter(fields)
    while page := [field for field, _ in itertools.islice(it, size)]:
        yield page


class _Change:
    """A change ready to send: its script keys and arguments."""

    __slots__ = ("change", "keys", "args")

    def __init__(self, change: Change, keys: list[str], args: list):
        self.change = change
        self.keys = keys
        self.args = args


def _cost_job(d: dict, state) -> CostJob:
    return CostJob(d["id"], d["name"], d["team"], state, d["submitted_at"], d["priority"], d.get("reason", ""),
                   d["budget"], d.get("spent", 0), {"price_per_hour": (d.get("placement") or {}).get("price_per_hour")},
                   (d.get("quote") or {}).get("tiers"), d.get("updated_at"), d.get("queued_at"))


def _cost_attempt(d: dict) -> CostAttempt:
    place = d.get("placement") or {}
    return CostAttempt(d["n"], attempt_state(d["state"]), {key: place.get(key) for key in COST_PLACEMENT_KEYS},
                       d["price_per_hour"], d["created_at"], d.get("started_at"), d.get("ended_at"),
                       d.get("billed_until"), d.get("cost", 0))


REFUSED = (OutOfMemoryError, ReadOnlyError, MasterDownError)
"""What a server that takes no writes for now answers (at its ``maxmemory``, a replica since a failover, cut off from
its master): a store that is unavailable, as a full disk is to SQLite. The commit script is refused at its first
write, so nothing of the change was stored."""


def _written(exc: BaseException) -> bool | None:
    """Refused: nothing stored; a lost reply: the script may have run (unknown)."""
    return False if isinstance(exc, REFUSED) else None


@unavailable_on((redis.ConnectionError, redis.TimeoutError, *REFUSED), written=_written)
class RedisStore:
    """:class:`~broker.store.base.JobStore` on a Redis server."""

    def __init__(self, url: str, *, prefix: str = "sb"):
        self.keys = Keys(prefix)
        self._r = redis.Redis.from_url(url, decode_responses=True, socket_timeout=10,
                                       health_check_interval=30)
        self._commit_script = self._r.register_script(COMMIT_SCRIPT)
        self._prune_script = self._r.register_script(PRUNE_SCRIPT)
        self._ledger_script = self._r.register_script(LEDGER_SCRIPT)
        self._move_ledger_script = self._r.register_script(MOVE_LEDGER_SCRIPT)
        self._updated_complete = False
        self._group = GroupCommit(self._write_batch)  # one group commit in flight at a time

    def commit(self, change: Change) -> Job:
        """Group commit: a caller that finds a commit in flight queues its change; the next leader
        sends every queued change in one pipelined round trip (one script run each, so one's
        conflict leaves the others alone). Every caller returns only after the server answered
        its own script, so durability is exactly the single-commit one."""
        return self._group.submit(self._prepare(change))

    def _prepare(self, change: Change) -> Slot:
        check_writable(change)
        job, k = change.job, self.keys
        new_version = 1 if change.expected_version is None else change.expected_version + 1
        stored = replace(job, version=new_version)
        args: list = [
            "" if change.expected_version is None else str(change.expected_version),
            json.dumps(stored.to_dict()), job.id, repr(job.submitted_at), stored.state.value, k.by_state(""),
            "1" if job.idempotency_key else "0", job.team, job.idempotency_key or "", k.job(""),
            k.idempotency_prefix(), len(change.attempts),
        ]
        for attempt in change.attempts:
            args += [str(attempt.n), json.dumps(attempt.to_dict())]
        args += [len(change.events), *(json.dumps(e.to_dict()) for e in change.events)]
        args += [len(change.metrics), *(json.dumps(m) for m in change.metrics)]
        args.append(repr(float(stored.updated_at)))
        args.append("" if change.expected_placements is None else str(change.expected_placements))
        args.append("" if change.team_fence is None else str(change.team_fence[1]))
        idem, legacy = self._idempotency_keys(job)
        keys = [k.job(job.id), k.all_jobs(), k.by_team(job.team), idem, k.attempts(job.id), k.events(job.id),
                k.metrics(job.id), k.updated(), k.state_names(), k.placements(), legacy,
                k.job(job.id) if change.team_fence is None else k.team_admissions(change.team_fence[0])]
        return Slot(_Change(change, keys, args), result=stored)

    def _idempotency_keys(self, job: Job) -> tuple[str, str]:
        """The job's idempotency key and where a broker from before team names were escaped stored it (each the
        job's own key when it has none, or the two are one: the scripts' way of saying none)."""
        k = self.keys
        if not job.idempotency_key:
            return k.job(job.id), k.job(job.id)
        idem, legacy = k.idempotency(job.team, job.idempotency_key), k.idempotency_unescaped(job.team,
                                                                                             job.idempotency_key)
        return idem, legacy if legacy != idem else k.job(job.id)

    def _write_batch(self, batch: Sequence[Slot]) -> None:
        script = self._commit_script
        todo = batch  # changes with no answer yet
        try:
            while todo:
                pipe = self._r.pipeline(transaction=False)
                for slot in todo:
                    pipe.evalsha(script.sha, len(slot.item.keys), *slot.item.keys, *slot.item.args)
                replies = pipe.execute(raise_on_error=False)
                unknown = []  # the server lost the script (restart, SCRIPT FLUSH): these did not run
                for slot, reply in zip(todo, replies):
                    if isinstance(reply, NoScriptError):
                        unknown.append(slot)
                    elif isinstance(reply, REFUSED):
                        slot.result, slot.error = None, StoreUnavailable(f"the job store refused the write: {reply}",
                                                                         written=False)
                        slot.error.__cause__ = reply
                    elif isinstance(reply, Exception):
                        slot.result, slot.error = None, StoreError(f"redis: {reply}")
                    else:
                        self._outcome(slot, *reply)
                todo = unknown
                if todo:
                    self._r.script_load(script.script)
        except BaseException as exc:
            error = exc
            if isinstance(exc, (redis.ConnectionError, redis.TimeoutError, *REFUSED)):  # sent, perhaps run, answer lost
                said = "refused the write" if isinstance(exc, REFUSED) else "did not answer"
                error = StoreUnavailable(f"the job store {said}: {exc}", written=_written(exc))
                error.__cause__ = exc
            elif isinstance(exc, redis.RedisError):
                error = StoreError(f"redis: {exc}")
                error.__cause__ = exc
            for slot in todo:
                slot.result, slot.error = None, error
            if not isinstance(exc, redis.RedisError):
                raise
        finally:
            for slot in batch:
                slot.done = True

    @staticmethod
    def _outcome(slot: Slot, outcome: str, detail: str) -> None:
        if outcome == "DUP":
            slot.result, slot.error = None, DuplicateJob(detail)
        elif outcome == "CONFLICT":
            change = slot.item.change
            slot.result, slot.error = None, VersionConflict(
                f"job {change.job.id} is at version {detail or None}, expected {change.expected_version}")
        elif outcome == "PLACED":
            change = slot.item.change
            slot.result, slot.error = None, VersionConflict(
                f"{int(detail) - (change.expected_placements or 0)} placement(s) were committed since the snapshot "
                f"job {change.job.id} was placed on")
        elif outcome == "TEAM":
            change = slot.item.change
            team, expected = change.team_fence or ("", 0)
            slot.result, slot.error = None, VersionConflict(
                f"{int(detail) - expected} change(s) to what team {team}'s jobs may spend were committed since job "
                f"{change.job.id}'s was weighed against its monthly cap")

    def get_job(self, job_id: str) -> Job | None:
        raw = self._r.get(self.keys.job(job_id))
        return Job.from_dict(json.loads(raw)) if raw else None

    def _backfill_updated(self) -> None:
        """Stores written before the update-time index existed get it once (idempotent, safe to race)."""
        k = self.keys
        if self._updated_complete or self._r.exists(k.updated_backfilled()):
            self._updated_complete = True
            return
        ids = self._r.zrange(k.all_jobs(), 0, -1)
        for start in range(0, len(ids), BATCH_IDS):
            chunk = ids[start:start + BATCH_IDS]
            scores = {}
            for job_id, raw in zip(chunk, self._r.mget([k.job(i) for i in chunk])):
                if raw:
                    scores[job_id] = float(json.loads(raw).get("updated_at") or 0.0)
            if scores:
                self._r.zadd(k.updated(), scores, gt=True)  # never move a newer score back
        self._r.set(k.updated_backfilled(), "1")
        self._updated_complete = True

    def find_idempotent(self, team: str, key: str) -> Job | None:
        """By the team's key; for a team whose name holds ``%`` or ``:``, then by where a broker from before the
        escaping stored it. Either names a job only of this team with this key: a key written before the escaping
        may name another team's (``a:b`` + ``c`` was ``a`` + ``b:c``)."""
        k = self.keys
        for name in dict.fromkeys((k.idempotency(team, key), k.idempotency_unescaped(team, key))):
            job_id = self._r.get(name)
            job = self.get_job(job_id) if job_id else None
            if job is not None and job.team == team and job.idempotency_key == key:
                return job
        return None

    def _ids(self, *, team: str | None, states: Sequence[str] | None, active_since: float | None,
             until: float | None = None, before: tuple[float, str] | None = None) -> list[str]:
        """The ids ``list_jobs`` (and ``cost_history``) may return, newest submitted first, from the indexes
        only: in the state sets, live or updated since ``active_since``, submitted before ``until``, and after
        the ``(submitted_at, id)`` key ``before`` in that order (a listing's next page)."""
        k = self.keys
        index = k.by_team(team) if team else k.all_jobs()
        if not (states or active_since is not None):
            if before is not None:  # from the key's score down; of the jobs at that very score, the lower ids
                top = before[0] if until is None else min(before[0], until)
                pairs = self._r.zrevrangebyscore(index, repr(float(top)), "-inf", withscores=True)
                return [i for i, sc in pairs if (until is None or sc < until) and (sc, i) < before]
            if until is None:
                return self._r.zrevrange(index, 0, -1)
            return self._r.zrevrangebyscore(index, f"({until!r}", "-inf")
        wanted: set[str] | None = None
        if states:
            wanted = set(self._r.sunion([k.by_state(state) for state in states]))
        if active_since is not None:  # live jobs, and jobs updated since: finished history is not read
            self._backfill_updated()
            # live: every state but this version's final ones, a newer broker's own states too (which may be
            # live; its jobs' workdir packs must not be collected), as the SQLite store's ``NOT IN`` reads them
            final = {st.value for st in JobState if st.is_final}
            names = {st.value for st in JobState} | set(self._r.smembers(k.state_names()))
            live = self._r.sunion([k.by_state(name) for name in sorted(names - final)])
            recent = live | set(self._r.zrangebyscore(k.updated(), active_since, "+inf"))
            wanted = recent if wanted is None else wanted & recent
        candidates = sorted(wanted)
        scores = self._r.zmscore(index, candidates) if candidates else []  # None: not the team's
        return [i for sc, i in sorted(((sc, i) for i, sc in zip(candidates, scores)
                                       if sc is not None and (until is None or sc < until)
                                       and (before is None or (sc, i) < before)), reverse=True)]

    def list_jobs(self, *, states: Sequence[str] | None = None, team: str | None = None,
                  limit: int = 1000, active_since: float | None = None,
                  before: tuple[float, str] | None = None, name_prefix: str | None = None) -> list[Job]:
        """Filters are answered from the indexes (state sets, the update-time index), so only the
        jobs that match are fetched and decoded; the team's (or all jobs') sorted set orders them, and
        a page's key (``before``) is a range of it."""
        k = self.keys
        if before is not None:
            before = (float(before[0]), str(before[1]))
        if states or active_since is not None:
            ids = self._ids(team=team, states=states, active_since=active_since, before=before)
            chunks = (ids[start:start + BATCH_IDS] for start in range(0, len(ids), BATCH_IDS))
        else:
            # a first read of a page's size when every id read is listed (no name to match): a page of one job
            # read and decoded one
            first = BATCH_IDS if name_prefix else max(1, min(limit, BATCH_IDS))
            chunks = self._index_pages(before, k.by_team(team) if team else None, first=first)
        jobs: list[Job] = []
        for chunk in chunks:  # ids are newest first: stop once ``limit`` matched
            for raw in self._r.mget([k.job(i) for i in chunk]):
                if raw:
                    job = Job.from_dict(json.loads(raw))
                    if (not states or job.state.value in states) and (
                            active_since is None or not job.state.is_final or job.updated_at >= active_since) and (
                            before is None or (job.submitted_at, job.id) < before) and (
                            not name_prefix or job.name.startswith(name_prefix)):
                        jobs.append(job)
            if len(jobs) >= limit:  # before the next round trip is read
                break
        jobs.sort(key=lambda j: (j.submitted_at, j.id), reverse=True)
        return jobs[:limit]

    def events(self, job_id: str, *, after_seq: int = 0) -> list[Event]:
        raws = self._r.lrange(self.keys.events(job_id), after_seq, -1)
        return [Event.from_dict({**json.loads(r), "seq": after_seq + i}) for i, r in enumerate(raws, 1)]

    def attempts(self, job_id: str) -> list[Attempt]:
        return self.attempts_of([job_id])[job_id]

    def attempts_of(self, job_ids: Sequence[str]) -> dict[str, list[Attempt]]:
        ids = list(dict.fromkeys(job_ids))
        out: dict[str, list[Attempt]] = {}
        for i in range(0, len(ids), BATCH_IDS):
            chunk = ids[i : i + BATCH_IDS]
            with self._r.pipeline(transaction=False) as p:
                for job_id in chunk:
                    p.hgetall(self.keys.attempts(job_id))
                for job_id, raws in zip(chunk, p.execute()):
                    out[job_id] = sorted((Attempt.from_dict(json.loads(v)) for v in raws.values()), key=lambda a: a.n)
        return out

    def cost_history(self, *, team: str | None, since: float,
                     until: float) -> tuple[list[CostJob], dict[str, list[CostAttempt]]]:
        k = self.keys
        ids = self._ids(team=team, states=None, active_since=since, until=until)
        jobs: list[CostJob] = []
        for start in range(0, len(ids), BATCH_IDS):
            chunk = ids[start:start + BATCH_IDS]
            for raw in self._r.mget([k.job(i) for i in chunk]):
                if raw:
                    d = json.loads(raw)
                    state = job_state(d["state"])
                    if not state.is_final or d["updated_at"] >= since:
                        jobs.append(_cost_job(d, state))
        jobs.sort(key=lambda j: (j.submitted_at, j.id), reverse=True)
        return jobs, self._cost_attempts([j.id for j in jobs])

    def _index_pages(self, before: tuple[float, str] | None, index: str | None = None, *,
                     first: int = BATCH_IDS) -> Iterator[list[str]]:
        """Every job's id (of the sorted set ``index``: a team's; every job's when none), newest submitted first,
        after the ``(submitted_at, id)`` key ``before``, ``BATCH_IDS`` at a time: each read goes on from the last pair
        read (its score, and how many ids of that score were read, for a run of jobs submitted at one time), so a page
        of a listing reads the ids it needs, where ``_ids`` reads every id after the key (a listing of one job of a
        store of 5,000 read all 5,000 ids first). ``first``: how many the first read reads (a short page's). A job
        deleted meanwhile at the very score read last may let one id be skipped: ``/metrics``, which reads its pages
        so, finds such a job by :meth:`job_count`."""
        index = index or self.keys.all_jobs()
        num = first
        top, skip = ("+inf", 0) if before is None else (repr(float(before[0])), 0)
        last: tuple[float, str] | None = before
        while True:
            pairs = self._r.zrevrangebyscore(index, top, "-inf", start=skip, num=num, withscores=True)
            ids = [i for i, sc in pairs if last is None or (sc, i) < last]
            if ids:
                yield ids
            if len(pairs) < num:
                return
            num = BATCH_IDS
            score = pairs[-1][1]
            ties = sum(1 for _, sc in pairs if sc == score)
            skip = skip + ties if repr(score) == top else ties
            top = repr(score)
            last = (score, pairs[-1][0]) if last is None or (score, pairs[-1][0]) < last else last

    def cost_page(self, *, limit: int, active_since: float | None = None,
                  before: tuple[float, str] | None = None) -> tuple[list[CostJob], dict[str, list[CostAttempt]]]:
        """Redis has no extraction of fields (see ``cost_history``): each job and attempt is decoded whole, and
        only the dataclasses are skipped."""
        k = self.keys
        if before is not None:
            before = (float(before[0]), str(before[1]))
        if active_since is None:
            pages: Iterable[list[str]] = self._index_pages(before)
        else:
            ids = self._ids(team=None, states=None, active_since=active_since, before=before)
            pages = (ids[i:i + BATCH_IDS] for i in range(0, len(ids), BATCH_IDS))
        jobs: list[CostJob] = []
        seen: set[str] = set()
        for chunk in pages:  # newest first: stop once ``limit`` matched
            if len(jobs) >= limit:
                break
            for raw in self._r.mget([k.job(i) for i in chunk]):
                if raw:
                    d = json.loads(raw)
                    state = job_state(d["state"])
                    if d["id"] not in seen and (
                            active_since is None or not state.is_final or d["updated_at"] >= active_since) and (
                            before is None or (d["submitted_at"], d["id"]) < before):
                        seen.add(d["id"])
                        jobs.append(_cost_job(d, state))
        jobs.sort(key=lambda j: (j.submitted_at, j.id), reverse=True)
        jobs = jobs[:limit]
        return jobs, self._cost_attempts([j.id for j in jobs])

    def cost_records(self, job_ids: Sequence[str]) -> tuple[list[CostJob], dict[str, list[CostAttempt]]]:
        k = self.keys
        ids = list(dict.fromkeys(job_ids))
        jobs: list[CostJob] = []
        for start in range(0, len(ids), BATCH_IDS):
            for raw in self._r.mget([k.job(i) for i in ids[start:start + BATCH_IDS]]):
                if raw:
                    d = json.loads(raw)
                    jobs.append(_cost_job(d, job_state(d["state"])))
        jobs.sort(key=lambda j: (j.submitted_at, j.id), reverse=True)
        return jobs, self._cost_attempts([j.id for j in jobs])

    def _cost_attempts(self, job_ids: Sequence[str]) -> dict[str, list[CostAttempt]]:
        attempts: dict[str, list[CostAttempt]] = {}
        for start in range(0, len(job_ids), BATCH_IDS):
            chunk = job_ids[start:start + BATCH_IDS]
            with self._r.pipeline(transaction=False) as p:
                for job_id in chunk:
                    p.hgetall(self.keys.attempts(job_id))
                for job_id, raws in zip(chunk, p.execute()):
                    attempts[job_id] = sorted((_cost_attempt(json.loads(v)) for v in raws.values()), key=lambda a: a.n)
        return attempts

    def job_count(self) -> int:
        return int(self._r.zcard(self.keys.all_jobs()))

    def job_ids(self) -> set[str]:
        return set(self._r.zrange(self.keys.all_jobs(), 0, -1))

    def metrics(self, job_id: str, *, limit: int = 10_000) -> list[dict]:
        key = self.keys.metrics(job_id)
        with self._r.pipeline(transaction=True) as p:
            total, raws = p.llen(key).lrange(key, -limit, -1).execute()
        first = total - len(raws)
        return [{**json.loads(r), "seq": first + i} for i, r in enumerate(raws, 1)]

    def placements(self) -> int:
        return int(self._r.get(self.keys.placements()) or 0)

    def team_admissions(self, team: str) -> int:
        return int(self._r.get(self.keys.team_admissions(team)) or 0)

    def expired(self, *, before: float, limit: int) -> list[Expired]:
        """Ids from the update-time index, scored before ``before``, a page at a time; each job is checked as
        stored, so one whose score lags its body (an older broker's commit does not move it) is not taken."""
        try:
            self._backfill_updated()
        except OutOfMemoryError:
            pass  # a server at its maxmemory: prune what the index holds, which frees room; the rest next time
        k = self.keys
        jobs: list[Job] = []
        offset = 0
        while len(jobs) < limit:
            ids = self._r.zrangebyscore(k.updated(), "-inf", f"({before!r}", start=offset, num=BATCH_IDS)
            if not ids:
                break
            offset += len(ids)  # live jobs this old (few: a job left queued for months) are paged past
            for raw in self._r.mget([k.job(i) for i in ids]):
                if raw:
                    d = json.loads(raw)  # (no extraction of fields in Redis: what prune needs is taken from it)
                    state = job_state(d["state"])
                    if state.is_final and d["updated_at"] < before:
                        jobs.append(Expired(d["id"], d["team"], state, d["version"], d["submitted_at"],
                                            d["updated_at"], d.get("idempotency_key"),
                                            (d.get("quote") or {}).get("tiers")))
        jobs.sort(key=lambda j: (j.updated_at, j.id))
        return jobs[:limit]

    def prune_sizes(self, jobs: Sequence[Job | Expired]) -> list[int]:
        """1 each: a job's script ``UNLINK``s its lists, which the server frees in the background, so what it holds
        does not make the script longer."""
        return [1] * len(jobs)

    def prune(self, jobs: Sequence[Job | Expired], *, rows: int | None = None) -> list[str]:
        """One script run per job (atomic: the version check, every key of the job, and what it adds to the pruned
        count and totals), sent in pipelined round trips. What a job adds is computed here from its attempts, read
        just before: a commit that changed them since also moved the job's version, and the script then deletes
        nothing and adds nothing. Two brokers pruning the same job: one script deletes it, the other finds it gone.
        Every point goes with its job, whatever ``rows`` says: nothing is left for :meth:`prune_leftovers`.
        The idempotency key goes in both forms (escaped, and as a broker before the escaping wrote it), each only
        while it names this job."""
        k = self.keys
        self._move_old_ledger()
        deleted: list[str] = []
        for start in range(0, len(jobs), BATCH_IDS):
            chunk = jobs[start:start + BATCH_IDS]
            tries = self._cost_attempts([job.id for job in chunk])  # all that of_job and ledger_of read of them
            with self._r.pipeline(transaction=False) as pipe:
                for job in chunk:
                    idem, legacy = self._idempotency_keys(job)
                    keys = [k.job(job.id), k.all_jobs(), k.by_team(job.team), idem, k.attempts(job.id),
                            k.events(job.id), k.metrics(job.id), k.updated(), k.pruned(), k.pruned_totals(), legacy,
                            k.pruned_costs(), k.pruned_costs_parts()]
                    adds = [x for key, value in sorted(totals.of_job(job, tries[job.id]).items())
                            for x in (totals.encode(key), str(value))]
                    ledger = [x for key, value in sorted(costs.ledger_of(job, tries[job.id]).items())
                              for x in (*ledger_part(key[1], key[3]), totals.encode(key), str(value))]
                    self._prune_script(keys=keys, args=[str(job.version), job.id, k.by_state(""), len(_FINAL),
                                                        *_FINAL, len(adds) // 2, *adds, k.pruned_costs_part(""),
                                                        *ledger], client=pipe)
                replies = pipe.execute()
            deleted += [job.id for job, reply in zip(chunk, replies) if reply == "OK"]
        return deleted

    def prune_leftovers(self, *, limit: int) -> int:
        return 0  # prune leaves none

    def pruned(self) -> int:
        return int(self._r.get(self.keys.pruned()) or 0)

    def pruned_totals(self) -> Pruned:
        with self._r.pipeline(transaction=True) as p:  # MULTI: no prune script runs between the two reads
            count, fields = p.get(self.keys.pruned()).hgetall(self.keys.pruned_totals()).execute()
        return Pruned(int(count or 0), {totals.decode(field): int(value) for field, value in fields.items()})

    def pruned_costs(self, *, team: str | None, since: float, until: float) -> PrunedCosts:
        """The parts of the window's months (the team's, or every team's), and whatever a broker from before the
        parts left in the ledger's own hash, in one script (one moment), filtered here to the window's hours."""
        k = self.keys
        count, legacy, parts = self._ledger_script(
            keys=[k.pruned(), k.pruned_costs(), k.pruned_costs_parts()],
            args=[k.pruned_costs_part(""), month_start(since), f"({until!r}",
                  "" if team is None else escaped(team)])
        jobs = 0
        buckets: dict[tuple[int, str, str], list[int]] = {}
        for flat in (legacy, *parts):
            for field, value in zip(flat[::2], flat[1::2]):
                if field == "jobs":
                    jobs = int(value)
                    continue
                kind, who, tier, hour = totals.decode(field)
                if (team is None or who == team) and since <= hour < until:
                    buckets.setdefault((hour, who, tier), [0, 0])[kind == costs.ODEQ] += int(value)
        return PrunedCosts(int(count or 0), jobs,
                           [(who, tier, hour, c, e) for (hour, who, tier), (c, e) in sorted(buckets.items())])

    def _move_old_ledger(self) -> None:
        """Entries a broker from before the ledger's parts wrote to its one hash (all but ``jobs``) go to their
        parts, a page at a time; a broker of that version still running may write more, which the next prune
        moves (until then reports read them where they are)."""
        k = self.keys
        if self._r.hlen(k.pruned_costs()) <= 1:  # ``jobs`` alone, or nothing
            return
        for page in _pages(self._r.hscan_iter(k.pruned_costs(), count=BATCH_IDS), BATCH_IDS):
            args = []
            for field in page:
                if field != "jobs":
                    _, team, _, hour = totals.decode(field)
                    args += [field, *ledger_part(team, hour)]
            if args:
                try:
                    self._move_ledger_script(keys=[k.pruned_costs(), k.pruned_costs_parts()],
                                             args=[k.pruned_costs_part(""), *args])
                except OutOfMemoryError:
                    return  # a server at its maxmemory: the prune frees room first, the move waits for a later one

    def existing(self, job_ids: Sequence[str]) -> set[str]:
        """From the index of all jobs, which the commit script adds a job to as it creates it and the prune script
        removes it from as it deletes it."""
        ids = list(dict.fromkeys(job_ids))
        found: set[str] = set()
        with self._r.pipeline(transaction=False) as p:
            chunks = [ids[i : i + BATCH_IDS] for i in range(0, len(ids), BATCH_IDS)]
            for chunk in chunks:
                p.zmscore(self.keys.all_jobs(), chunk)
            for chunk, scores in zip(chunks, p.execute()):
                found.update(i for i, score in zip(chunk, scores) if score is not None)
        return found

    def beat(self, domain: str, now: float) -> None:
        self._r.hset(self.keys.engines(), domain, repr(now))

    def beats(self) -> dict[str, float]:
        return {domain: float(seen) for domain, seen in self._r.hgetall(self.keys.engines()).items()}

    def clock_offset(self, clock) -> float:
        """``clock()`` less the Redis server's ``TIME``, as if both were read at once: the server's time is taken for
        the middle of the round trip (timed on a monotonic clock, which a step of the wall clock does not move)."""
        before, started = clock(), time.perf_counter()
        seconds, micros = self._r.time()
        return before + (time.perf_counter() - started) / 2 - (seconds + micros / 1e6)

    def ping(self) -> bool:
        return bool(self._r.ping())

    def durability_warning(self) -> str | None:
        """Why an accepted job may not survive a crash of the Redis server, or None when it will (``appendonly
        yes``, ``appendfsync always``) or the server does not say (a managed Redis that refuses ``CONFIG``
        has its persistence set elsewhere; a server that does not answer yet is checked by the first request)."""
        try:
            config = self._r.config_get("append*")
        except (redis.ResponseError, redis.ConnectionError, redis.TimeoutError):
            return None
        if config.get("appendonly", "yes") != "yes":
            return ("the Redis server runs with appendonly no: a restart of it loses every job accepted since its last "
                    "snapshot; run it with appendonly yes and appendfsync always")
        if config.get("appendfsync", "always") != "always":
            return (f"the Redis server runs with appendfsync {config['appendfsync']}: a crash of its host can lose jobs "
                    "the API already answered 201 for; run it with appendfsync always")
        return None

    def close(self) -> None:
        self._r.close()
