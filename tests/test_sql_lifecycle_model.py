"""The job lifecycle as a model, checked against the real database by hypothesis.

A state machine enqueues a few jobs in a queue of its own and applies random sequences
of every call that moves a job: claim, heartbeat, complete, fail, snooze, release (both
kinds), an expired lease swept, requeue, cancel, mark_done, purge_many, and enqueues
with idempotency keys. The fenced calls carry the current token, a token of an attempt
that already ended, or a token that never held one. After every step each job's status,
attempts, max_attempts and token must be what the model says (docs/sql.md: States,
Lease semantics, Snooze), and its attempt history must hold each ended attempt's token
with its outcome. The model is written from the documentation, not from the code: a
difference is a defect in one of them.

What each call answers is checked too: accepted or refused, with the SQLSTATE (PF001 a
stale token, PF002 an unknown job, PF003 a transition the status does not allow), and
for fail, release and snooze the status they return, including the idempotent repeat of
complete, fail, snooze and release by the token whose outcome is recorded. A claim must
take the first runnable jobs in claim order (priority DESC, available_at, id).
"""
from __future__ import annotations

import dataclasses
import datetime as dt
import os
import uuid
from typing import Any, Optional

import psycopg
import pytest
from hypothesis import HealthCheck, Phase, event, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule, run_state_machine_as_test
from psycopg.types.json import Jsonb

from support.db import connect, delete_queues, unique_name

Conn = psycopg.Connection[Any]

#: The attempt outcome pgfence.attempts records for each way a token's attempt ends here.
OUTCOME = {"done": "done", "failed": "failed", "snoozed": "snoozed", "released": "released",
           "expired": "reclaimed", "cancelled": "cancelled"}
LIVE_KEY = ("queued", "processing", "manual_review", "done")  # statuses that hold an idempotency key


@dataclasses.dataclass
class Job:
    id: int
    policy: str
    max_attempts: int
    priority: int
    key: Optional[str]
    status: str = "queued"
    attempts: int = 0
    token: Optional[uuid.UUID] = None  # the current attempt's (processing only)
    ended: dict[uuid.UUID, str] = dataclasses.field(default_factory=dict)  # token -> how its attempt ended
    dead_lettered_by: Optional[uuid.UUID] = None  # the token whose fail dead-lettered the job
    done_by: Optional[uuid.UUID] = None  # the token whose complete finished it
    gone: bool = False  # purged

    def recovery(self) -> str:
        """The reclaim rule: manual -> manual_review, auto with attempts left -> queued, else failed."""
        if self.policy == "manual":
            return "manual_review"
        return "queued" if self.attempts < self.max_attempts else "failed"


def call(conn: Conn, sql: str, params: Any = None) -> tuple[Optional[str], Any]:
    """(None, the first column of the first row) or (SQLSTATE, None): each call autocommits,
    so a refused one changes nothing and the next call runs."""
    try:
        cur = conn.execute(sql, params)
        row = cur.fetchone() if cur.description else None
        return None, (row[0] if row else None)
    except psycopg.Error as exc:
        assert exc.sqlstate is not None, exc
        return exc.sqlstate, None


class Lifecycle(RuleBasedStateMachine):
    dsn: str = ""

    def __init__(self) -> None:
        super().__init__()
        self.conn = connect(self.dsn, autocommit=True)
        self.queue = unique_name("t_lifecycle")
        self.jobs: list[Job] = []
        self.tokens: set[uuid.UUID] = set()  # every token claim handed out

    def teardown(self) -> None:
        try:
            delete_queues(self.conn, [self.queue])  # (with the history: no job of ours for another test)
        finally:
            self.conn.close()

    # -------------------------------------------------------------- helpers --
    def pick(self, data: st.DataObject, *statuses: str) -> Job:
        """A job, most often one the call is meant for (in one of `statuses`), else any job
        (a purged one too): the call must then be refused."""
        pool = [j for j in self.jobs if j.status in statuses and not j.gone]
        if not pool or data.draw(st.sampled_from(["meant"] * 4 + ["any"] * 2), label="which job") == "any":
            pool = self.jobs
        return data.draw(st.sampled_from(pool), label="job")

    def token_for(self, data: st.DataObject, job: Job) -> uuid.UUID:
        """Most often the current token, else one of an attempt that ended, one another
        job's attempt held, or one that never held an attempt."""
        kinds = ["never held"]
        if job.token is not None:
            kinds += ["current"] * 7
        if job.ended:
            kinds += ["ended"] * 2
        other = [t for j in self.jobs if j is not job for t in [j.token, *j.ended] if t is not None]
        if other:
            kinds.append("another job's")
        kind = data.draw(st.sampled_from(kinds), label="token")
        if kind == "current":
            assert job.token is not None
            return job.token
        if kind == "ended":
            return data.draw(st.sampled_from(sorted(job.ended, key=str)), label="ended token")
        if kind == "another job's":
            return data.draw(st.sampled_from(sorted(other, key=str)), label="other token")
        return uuid.uuid4()

    def refused(self, job: Job, state: Optional[str]) -> None:
        """A fenced call the model refuses: PF002 for a purged job, else PF001."""
        event(f"refused {state}")
        assert state == ("PF002" if job.gone else "PF001"), (job, state)

    def key_holder(self, key: Optional[str], but: Optional[Job] = None) -> Optional[Job]:
        if key is None:
            return None
        held = [j for j in self.jobs if j.key == key and j.status in LIVE_KEY and not j.gone and j is not but]
        assert len(held) <= 1, held
        return held[0] if held else None

    # ---------------------------------------------------------------- rules --
    @initialize(policies=st.lists(st.sampled_from(["auto", "manual"]), min_size=1, max_size=3),
                max_attempts=st.integers(1, 3))
    def first_jobs(self, policies: list[str], max_attempts: int) -> None:
        for policy in policies:
            self.enqueue(policy, max_attempts, 0, None)

    @precondition(lambda self: len(self.jobs) < 6)
    @rule(policy=st.sampled_from(["auto", "manual"]), max_attempts=st.integers(1, 3), priority=st.integers(0, 1),
          key=st.sampled_from([None, "k1", "k1", "k2"]))
    def enqueue(self, policy: str, max_attempts: int, priority: int, key: Optional[str]) -> None:
        holder = self.key_holder(key)
        state, job_id = call(self.conn, "SELECT pgfence.enqueue(kind => 'task', payload => %s, queue => %s,"
                                        " priority => %s, max_attempts => %s, recovery_policy => %s,"
                                        " idempotency_key => %s)",
                             (Jsonb({}), self.queue, priority, max_attempts, policy, key))
        assert state is None
        if holder is not None:
            assert job_id == holder.id, f"key {key} is held by job {holder.id}, enqueue answered {job_id}"
        else:
            assert job_id not in {j.id for j in self.jobs}
            self.jobs.append(Job(job_id, policy, max_attempts, priority, key))

    @precondition(lambda self: any(j.status == "queued" for j in self.jobs))
    @rule(max_jobs=st.integers(1, 3))
    def claim(self, max_jobs: int) -> None:
        before = self.conn.execute("SELECT clock_timestamp()").fetchone()[0]  # type: ignore[index]
        got = self.conn.execute("SELECT id, attempt_token, attempts FROM pgfence.claim(worker_id => 'model',"
                                " queues => ARRAY[%s], lease => '10 minutes', max_jobs => %s)",
                                (self.queue, max_jobs)).fetchall()
        after = self.conn.execute("SELECT clock_timestamp()").fetchone()[0]  # type: ignore[index]
        queued = [j for j in self.jobs if j.status == "queued" and not j.gone]
        at = dict(self.conn.execute("SELECT id, available_at FROM pgfence.jobs WHERE id = ANY(%s)",
                                    ([j.id for j in queued],)).fetchall())
        sure = [j for j in queued if at[j.id] <= before]  # runnable before the claim began
        maybe = [j for j in queued if at[j.id] <= after]
        ids = [r[0] for r in got]
        assert len(set(ids)) == len(ids)
        assert set(ids) <= {j.id for j in maybe}, f"claimed {ids}, runnable {[j.id for j in maybe]}"
        assert min(max_jobs, len(sure)) <= len(ids) <= min(max_jobs, len(maybe)), (ids, sure, maybe)

        def order(j: Job) -> tuple[int, dt.datetime, int]:
            return (-j.priority, at[j.id], j.id)
        by_id = {j.id: j for j in self.jobs}
        for j in sure:
            if j.id not in ids:
                assert all(order(by_id[i]) < order(j) for i in ids), f"claimed {ids} before job {j.id}"
        for job_id, token, attempts in got:
            j = by_id[job_id]
            assert token not in self.tokens, "a token handed out twice"
            self.tokens.add(token)
            j.status, j.token, j.attempts = "processing", token, j.attempts + 1
            assert attempts == j.attempts

    @precondition(lambda self: any(j.status == "processing" for j in self.jobs))
    @rule(data=st.data())
    def heartbeat(self, data: st.DataObject) -> None:
        j = self.pick(data, "processing")
        t = self.token_for(data, j)
        state, _ = call(self.conn, "SELECT pgfence.heartbeat(job_id => %s, attempt_token => %s,"
                                   " lease => '10 minutes')", (j.id, t))
        if j.status == "processing" and t == j.token:
            event("heartbeat: current token")
            assert state is None
        else:
            self.refused(j, state)

    @precondition(lambda self: self.jobs)  # (a repeat after a lost reply may come at any time)
    @rule(data=st.data())
    def complete(self, data: st.DataObject) -> None:
        j = self.pick(data, "processing")
        t = self.token_for(data, j)
        state, _ = call(self.conn, "SELECT pgfence.complete(job_id => %s, attempt_token => %s, result => %s)",
                        (j.id, t, Jsonb({"by": str(t)})))
        if j.status == "processing" and t == j.token:
            event("complete: current token")
            assert state is None
            j.status, j.done_by, j.token = "done", t, None
            j.ended[t] = "done"
        elif j.ended.get(t) == "done":
            event("complete: a repeat")
            assert state is None, "a repeat of the complete that finished the job is accepted"
        else:
            self.refused(j, state)

    @precondition(lambda self: self.jobs)  # (a repeat after a lost reply may come at any time)
    @rule(data=st.data(), permanent=st.booleans(), retry_in=st.sampled_from(["0 seconds", "1 hour"]))
    def fail(self, data: st.DataObject, permanent: bool, retry_in: str) -> None:
        j = self.pick(data, "processing")
        t = self.token_for(data, j)
        state, answer = call(self.conn, "SELECT pgfence.fail(job_id => %s, attempt_token => %s, error => 'boom',"
                                        " retry_in => %s::interval, permanent => %s)", (j.id, t, retry_in, permanent))
        if j.status == "processing" and t == j.token:
            event("fail: current token")
            assert state is None
            j.status = "failed" if permanent or j.attempts >= j.max_attempts else "queued"
            j.dead_lettered_by = t if j.status == "failed" else None
            j.token = None
            j.ended[t] = "failed"
            assert answer == j.status
        elif j.ended.get(t) == "failed" and not j.gone:
            event("fail: a repeat")
            assert state is None, "a repeat of a recorded fail is accepted"
            assert answer == ("failed" if j.status == "failed" and j.dead_lettered_by == t else "queued")
        else:
            self.refused(j, state)

    @precondition(lambda self: any(j.status == "processing" for j in self.jobs))
    @rule(data=st.data(), delay=st.sampled_from(["1 millisecond", "1 hour"]))
    def snooze(self, data: st.DataObject, delay: str) -> None:
        j = self.pick(data, "processing")
        t = self.token_for(data, j)
        state, answer = call(self.conn, "SELECT pgfence.snooze(job_id => %s, attempt_token => %s,"
                                        " delay => %s::interval)", (j.id, t, delay))
        if j.status == "processing" and t == j.token:
            event("snooze: current token")
            assert (state, answer) == (None, "queued")
            j.status, j.token, j.max_attempts = "queued", None, j.max_attempts + 1
            j.ended[t] = "snoozed"
        elif j.ended.get(t) == "snoozed" and not j.gone:
            event("snooze: a repeat")
            assert state is None, "a repeat of a recorded snooze is accepted"
        else:
            self.refused(j, state)

    @precondition(lambda self: any(j.status == "processing" for j in self.jobs))
    @rule(data=st.data(), started=st.booleans())
    def release(self, data: st.DataObject, started: bool) -> None:
        j = self.pick(data, "processing")
        t = self.token_for(data, j)
        state, answer = call(self.conn, "SELECT pgfence.release(job_id => %s, attempt_token => %s, started => %s)",
                             (j.id, t, started))
        if j.status == "processing" and t == j.token:
            event("release: current token")
            assert state is None
            if started:
                j.status = j.recovery()
                event(f"released: {j.policy} -> {j.status}")
                j.ended[t] = "released"
            else:  # (never handed to a handler: the attempt is undone, nothing recorded)
                j.status, j.attempts = "queued", j.attempts - 1
            j.token = None
            assert answer == j.status
        elif started and j.ended.get(t) == "released" and not j.gone:
            event("release: a repeat")
            assert (state, answer) == (None, j.status), "a repeat of a recorded release answers the status now"
        else:
            self.refused(j, state)

    @precondition(lambda self: any(j.status == "processing" for j in self.jobs))
    @rule(data=st.data())
    def lease_expires_and_is_swept(self, data: st.DataObject) -> None:
        j = data.draw(st.sampled_from([j for j in self.jobs if j.status == "processing"]), label="job")
        # (the clock moved on: the attempt began an hour ago and its lease ran out)
        self.conn.execute("UPDATE pgfence.jobs SET reserved_at = reserved_at - interval '1 hour',"
                          " heartbeat_at = reserved_at - interval '1 hour',"
                          " lease_expires_at = reserved_at - interval '1 hour' + interval '1 second'"
                          " WHERE id = %s", (j.id,))
        # Swept: by this CALL, or by the background sweeper, which may hold the row
        # (SKIP LOCKED: the CALL passes over it) until it commits; the FOR UPDATE waits for
        # that commit, so the next check sees the job reclaimed, whoever reclaimed it.
        for _ in range(50):
            self.conn.execute("CALL pgfence.sweep()")
            if self.conn.execute("SELECT status FROM pgfence.jobs WHERE id = %s FOR UPDATE",
                                 (j.id,)).fetchone() != ("processing",):
                break
        else:
            raise AssertionError(f"job {j.id}: its expired lease was never reclaimed")
        assert j.token is not None
        j.ended[j.token] = "expired"
        j.status, j.token = j.recovery(), None
        event(f"swept: {j.policy} -> {j.status}")

    @precondition(lambda self: self.jobs)
    @rule(data=st.data())
    def requeue(self, data: st.DataObject) -> None:
        j = self.pick(data, "failed", "manual_review", "cancelled")
        state, _ = call(self.conn, "SELECT pgfence.requeue(job_id => %s)", (j.id,))
        if j.gone:
            assert state == "PF002"
        elif j.status not in ("failed", "manual_review", "cancelled"):
            assert state == "PF003"
        elif j.status != "manual_review" and self.key_holder(j.key, but=j) is not None:
            assert state == "PF003", "requeue would make a second holder of the idempotency key"
        else:
            assert state is None
            j.status, j.max_attempts, j.dead_lettered_by = "queued", max(j.max_attempts, j.attempts + 1), None

    @precondition(lambda self: self.jobs)
    @rule(data=st.data())
    def cancel(self, data: st.DataObject) -> None:
        j = self.pick(data, "queued", "processing", "manual_review")
        state, _ = call(self.conn, "SELECT pgfence.cancel(job_id => %s)", (j.id,))
        if j.gone:
            assert state == "PF002"
        elif j.status in ("queued", "processing", "manual_review"):
            assert state is None
            if j.token is not None:
                j.ended[j.token] = "cancelled"
            j.status, j.token = "cancelled", None
        else:
            assert state == "PF003"

    @precondition(lambda self: self.jobs)
    @rule(data=st.data())
    def mark_done(self, data: st.DataObject) -> None:
        j = self.pick(data, "manual_review")
        state, _ = call(self.conn, "SELECT pgfence.mark_done(job_id => %s, note => 'checked by the model')", (j.id,))
        if j.gone:
            assert state == "PF002"
        elif j.status == "manual_review":
            assert state is None
            j.status = "done"
        else:
            assert state == "PF003"

    @precondition(lambda self: self.jobs)
    @rule(data=st.data())
    def purge(self, data: st.DataObject) -> None:
        j = self.pick(data, "failed", "cancelled")
        state, acted = call(self.conn, "SELECT acted FROM pgfence.purge_many(job_ids => ARRAY[%s]::bigint[],"
                                       " note => 'purged by the model')", (j.id,))
        assert state is None
        assert acted == (j.status in ("failed", "cancelled") and not j.gone)
        if acted:
            j.gone = True

    # ------------------------------------------------------------ the check --
    @invariant()
    def every_job_is_as_the_model_says(self) -> None:
        if not self.jobs:
            return
        rows = {r[0]: r[1:] for r in self.conn.execute(
            "SELECT id, status, attempts, max_attempts, attempt_token FROM pgfence.all_jobs WHERE id = ANY(%s)",
            ([j.id for j in self.jobs],)).fetchall()}
        history: dict[int, dict[Any, str]] = {}
        for job_id, token, outcome in self.conn.execute(
                "SELECT j.id, a.attempt_token, a.outcome FROM unnest(%s::bigint[]) j(id),"
                " LATERAL pgfence.attempts_of(j.id) a WHERE a.attempt_token IS NOT NULL",
                ([j.id for j in self.jobs],)).fetchall():
            history.setdefault(job_id, {})[token] = outcome
        for j in self.jobs:
            if j.gone:
                assert j.id not in rows, f"job {j.id} was purged but is still there"
                continue
            status, attempts, max_attempts, token = rows[j.id]
            assert (status, attempts, max_attempts) == (j.status, j.attempts, j.max_attempts), (j, rows[j.id])
            if j.status == "processing":
                assert token == j.token
            elif j.status == "done" and j.done_by is not None:
                assert token == j.done_by, "the finishing token stays on a done row"
            elif j.status == "failed" and j.dead_lettered_by is not None:
                assert token == j.dead_lettered_by, "the finishing token stays on a row fail dead-lettered"
            assert history.get(j.id, {}) == {t: OUTCOME[how] for t, how in j.ended.items()}, (j, history.get(j.id))


def test_the_job_lifecycle_follows_the_documented_model(dsn: str) -> None:
    # (PGFENCE_MODEL_EXAMPLES: more or fewer runs; PGFENCE_MODEL_NO_SHRINK=1: report the
    # first failure as found, without the minutes shrinking it can take)
    Lifecycle.dsn = dsn
    phases = [p for p in Phase if not (p is Phase.shrink and os.environ.get("PGFENCE_MODEL_NO_SHRINK"))]
    run_state_machine_as_test(Lifecycle, settings=settings(
        max_examples=int(os.environ.get("PGFENCE_MODEL_EXAMPLES", "150")), stateful_step_count=40, phases=phases,
        deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much]))


pytestmark = pytest.mark.usefixtures("dsn")
