"""Every bad argument is refused before anything is written: the SQLSTATE
(22004 NULL, 22023 bad value), a message naming the argument, a HINT, and the
queue's rows exactly as they were."""
from __future__ import annotations

import datetime as dt
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import psycopg
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from support.api import claim, claim_job, complete, enqueue, fail, heartbeat
from support.db import assert_error, connection, one, queue_jobs, rows, sql_error

# Queue lookups scan only this test's jobs (by primary key range): see support.db.
pytestmark = pytest.mark.usefixtures("job_id_floor")

Conn = psycopg.Connection[Any]

BIG_PAYLOAD = '{"blob": "' + "x" * (1024 * 1024 + 1) + '"}'  # just over 1 MiB
NAME_129 = "n" * 129


@dataclass
class World:
    queue: str
    queued_id: int
    processing_id: int
    token: uuid.UUID


@pytest.fixture
def world(conn: Conn, queue: str) -> World:
    processing_id = enqueue(conn, queue, "p", priority=1)
    token = claim_job(conn, queue, processing_id, lease="1 hour")
    queued_id = enqueue(conn, queue, "q", run_at=one(conn, "SELECT clock_timestamp() + interval '1 hour'"))
    return World(queue, queued_id, processing_id, token)


# (id, SQL using %(queue)s / %(qid)s / %(pid)s / %(token)s / %(big)s, SQLSTATE, text the message must contain)
CASES: list[tuple[str, str, str, str]] = [
    # enqueue: names
    ("enqueue-kind-null", "SELECT pgfence.enqueue(NULL, queue => %(queue)s)", "22004", "kind"),
    ("enqueue-kind-empty", "SELECT pgfence.enqueue('', queue => %(queue)s)", "22023", "kind"),
    ("enqueue-kind-129", f"SELECT pgfence.enqueue('{NAME_129}', queue => %(queue)s)", "22023", "kind"),
    ("enqueue-queue-null", "SELECT pgfence.enqueue('k', queue => NULL)", "22004", "queue"),
    ("enqueue-queue-empty", "SELECT pgfence.enqueue('k', queue => '')", "22023", "queue"),
    ("enqueue-queue-129", f"SELECT pgfence.enqueue('k', queue => '{NAME_129}')", "22023", "queue"),
    # names with whitespace at either end: 'default ' would be a queue no 'default' worker claims from
    ("enqueue-queue-trailing-space", "SELECT pgfence.enqueue('k', queue => %(queue)s || ' ')", "22023", "queue"),
    ("enqueue-kind-leading-tab", "SELECT pgfence.enqueue(E'\\tk', queue => %(queue)s)", "22023", "kind"),
    ("enqueue-kind-blank", "SELECT pgfence.enqueue('   ', queue => %(queue)s)", "22023", "kind"),
    ("enqueue_many-kind-trailing-newline",
     "SELECT * FROM pgfence.enqueue_many(ARRAY['a', E'b\\n'], queue => %(queue)s)", "22023", "kinds[2]"),
    ("claim-worker-leading-space", "SELECT * FROM pgfence.claim(' w', ARRAY[%(queue)s])", "22023", "worker_id"),
    ("claim-queues-padded", "SELECT * FROM pgfence.claim('w', ARRAY[%(queue)s, ' q'])", "22023", "queues[2]"),
    # enqueue: options
    ("enqueue-policy-unknown", "SELECT pgfence.enqueue('k', queue => %(queue)s, recovery_policy => 'sometimes')",
     "22023", "recovery_policy"),
    ("enqueue-policy-null", "SELECT pgfence.enqueue('k', queue => %(queue)s, recovery_policy => NULL)",
     "22004", "recovery_policy"),
    ("enqueue-max_attempts-0", "SELECT pgfence.enqueue('k', queue => %(queue)s, max_attempts => 0)",
     "22023", "max_attempts"),
    ("enqueue-max_attempts-1001", "SELECT pgfence.enqueue('k', queue => %(queue)s, max_attempts => 1001)",
     "22023", "max_attempts"),
    ("enqueue-max_attempts-null", "SELECT pgfence.enqueue('k', queue => %(queue)s, max_attempts => NULL)",
     "22004", "max_attempts"),
    ("enqueue-priority-null", "SELECT pgfence.enqueue('k', queue => %(queue)s, priority => NULL)", "22004", "priority"),
    ("enqueue-key-empty", "SELECT pgfence.enqueue('k', queue => %(queue)s, idempotency_key => '')",
     "22023", "idempotency_key"),
    ("enqueue-key-256", f"SELECT pgfence.enqueue('k', queue => %(queue)s, idempotency_key => '{'k' * 256}')",
     "22023", "idempotency_key"),
    # enqueue: payload
    ("enqueue-payload-null", "SELECT pgfence.enqueue('k', NULL, queue => %(queue)s)", "22004", "payload"),
    ("enqueue-payload-array", "SELECT pgfence.enqueue('k', '[1, 2]', queue => %(queue)s)", "22023", "payload"),
    ("enqueue-payload-string", "SELECT pgfence.enqueue('k', '\"text\"', queue => %(queue)s)", "22023", "payload"),
    ("enqueue-payload-number", "SELECT pgfence.enqueue('k', '42', queue => %(queue)s)", "22023", "payload"),
    ("enqueue-payload-json-null", "SELECT pgfence.enqueue('k', 'null', queue => %(queue)s)", "22023", "payload"),
    ("enqueue-payload-over-1MiB", "SELECT pgfence.enqueue('k', %(big)s::jsonb, queue => %(queue)s)", "22023", "payload"),
    # enqueue_many
    ("enqueue_many-kinds-null", "SELECT * FROM pgfence.enqueue_many(NULL, queue => %(queue)s)", "22004", "kinds"),
    ("enqueue_many-kinds-empty", "SELECT * FROM pgfence.enqueue_many('{}', queue => %(queue)s)", "22023", "kinds"),
    ("enqueue_many-kinds-10001",
     "SELECT * FROM pgfence.enqueue_many(array_fill('k'::text, ARRAY[10001]), queue => %(queue)s)", "22023", "kinds"),
    ("enqueue_many-kind-null-element", "SELECT * FROM pgfence.enqueue_many(ARRAY['a', NULL], queue => %(queue)s)",
     "22004", "kinds[2]"),
    ("enqueue_many-kind-129-element",
     f"SELECT * FROM pgfence.enqueue_many(ARRAY['a', 'b', '{NAME_129}'], queue => %(queue)s)", "22023", "kinds[3]"),
    ("enqueue_many-queue-null", "SELECT * FROM pgfence.enqueue_many(ARRAY['a'], queue => NULL)", "22004", "queue"),
    ("enqueue_many-queue-empty", "SELECT * FROM pgfence.enqueue_many(ARRAY['a'], queue => '')", "22023", "queue"),
    ("enqueue_many-policy-unknown",
     "SELECT * FROM pgfence.enqueue_many(ARRAY['a'], queue => %(queue)s, recovery_policy => 'never')",
     "22023", "recovery_policy"),
    ("enqueue_many-max_attempts-0",
     "SELECT * FROM pgfence.enqueue_many(ARRAY['a'], queue => %(queue)s, max_attempts => 0)", "22023", "max_attempts"),
    ("enqueue_many-payloads-length",
     "SELECT * FROM pgfence.enqueue_many(ARRAY['a', 'b'], ARRAY['{}']::jsonb[], queue => %(queue)s)",
     "22023", "payloads"),
    ("enqueue_many-priorities-length",
     "SELECT * FROM pgfence.enqueue_many(ARRAY['a'], queue => %(queue)s, priorities => ARRAY[1, 2])",
     "22023", "priorities"),
    ("enqueue_many-keys-length",
     "SELECT * FROM pgfence.enqueue_many(ARRAY['a', 'b'], queue => %(queue)s, idempotency_keys => ARRAY['x'])",
     "22023", "idempotency_keys"),
    ("enqueue_many-run_ats-length",
     "SELECT * FROM pgfence.enqueue_many(ARRAY['a', 'b'], queue => %(queue)s, run_ats => ARRAY[now(), now(), now()])",
     "22023", "run_ats"),
    ("enqueue_many-payload-not-object",
     "SELECT * FROM pgfence.enqueue_many(ARRAY['a', 'b'], ARRAY['{}', '[]']::jsonb[], queue => %(queue)s)",
     "22023", "payloads[2]"),
    ("enqueue_many-payload-null-element",
     "SELECT * FROM pgfence.enqueue_many(ARRAY['a', 'b'], ARRAY[NULL, '{}']::jsonb[], queue => %(queue)s)",
     "22004", "payloads[1]"),
    ("enqueue_many-payload-over-1MiB",
     "SELECT * FROM pgfence.enqueue_many(ARRAY['a'], ARRAY[%(big)s::jsonb], queue => %(queue)s)",
     "22023", "payloads[1]"),
    ("enqueue_many-priority-null-element",
     "SELECT * FROM pgfence.enqueue_many(ARRAY['a', 'b'], queue => %(queue)s, priorities => ARRAY[1, NULL])",
     "22004", "priorities[2]"),
    ("enqueue_many-key-empty-element",
     "SELECT * FROM pgfence.enqueue_many(ARRAY['a', 'b'], queue => %(queue)s, idempotency_keys => ARRAY['x', ''])",
     "22023", "idempotency_keys[2]"),
    # claim
    ("claim-worker-null", "SELECT * FROM pgfence.claim(NULL, ARRAY[%(queue)s])", "22004", "worker_id"),
    ("claim-worker-empty", "SELECT * FROM pgfence.claim('', ARRAY[%(queue)s])", "22023", "worker_id"),
    ("claim-worker-129", f"SELECT * FROM pgfence.claim('{NAME_129}', ARRAY[%(queue)s])", "22023", "worker_id"),
    ("claim-queues-empty", "SELECT * FROM pgfence.claim('w', '{}'::text[])", "22023", "queues"),
    ("claim-queues-null-element", "SELECT * FROM pgfence.claim('w', ARRAY[%(queue)s, NULL])", "22004", "queues[2]"),
    ("claim-queues-empty-name", "SELECT * FROM pgfence.claim('w', ARRAY[''])", "22023", "queues[1]"),
    ("claim-queues-129", f"SELECT * FROM pgfence.claim('w', ARRAY[%(queue)s, '{NAME_129}'])", "22023", "queues[2]"),
    ("claim-lease-0", "SELECT * FROM pgfence.claim('w', ARRAY[%(queue)s], lease => '0 seconds')", "22023", "lease"),
    ("claim-lease-negative", "SELECT * FROM pgfence.claim('w', ARRAY[%(queue)s], lease => '-5 seconds')",
     "22023", "lease"),
    ("claim-lease-over-1-day", "SELECT * FROM pgfence.claim('w', ARRAY[%(queue)s], lease => '1 day 1 second')",
     "22023", "lease"),
    ("claim-lease-25-hours", "SELECT * FROM pgfence.claim('w', ARRAY[%(queue)s], lease => '25 hours')",
     "22023", "lease"),
    ("claim-lease-null", "SELECT * FROM pgfence.claim('w', ARRAY[%(queue)s], lease => NULL)", "22004", "lease"),
    ("claim-max_jobs-0", "SELECT * FROM pgfence.claim('w', ARRAY[%(queue)s], max_jobs => 0)", "22023", "max_jobs"),
    ("claim-max_jobs-1001", "SELECT * FROM pgfence.claim('w', ARRAY[%(queue)s], max_jobs => 1001)",
     "22023", "max_jobs"),
    ("claim-max_jobs-null", "SELECT * FROM pgfence.claim('w', ARRAY[%(queue)s], max_jobs => NULL)",
     "22004", "max_jobs"),
    # heartbeat
    ("heartbeat-job_id-null", "SELECT pgfence.heartbeat(NULL, %(token)s)", "22004", "job_id"),
    ("heartbeat-token-null", "SELECT pgfence.heartbeat(%(pid)s, NULL)", "22004", "attempt_token"),
    ("heartbeat-lease-0", "SELECT pgfence.heartbeat(%(pid)s, %(token)s, lease => '0')", "22023", "lease"),
    ("heartbeat-lease-negative", "SELECT pgfence.heartbeat(%(pid)s, %(token)s, lease => '-1 minute')",
     "22023", "lease"),
    ("heartbeat-lease-over-1-day", "SELECT pgfence.heartbeat(%(pid)s, %(token)s, lease => '2 days')",
     "22023", "lease"),
    ("heartbeat-lease-null", "SELECT pgfence.heartbeat(%(pid)s, %(token)s, lease => NULL)", "22004", "lease"),
    # complete
    ("complete-job_id-null", "SELECT pgfence.complete(NULL, %(token)s)", "22004", "job_id"),
    ("complete-token-null", "SELECT pgfence.complete(%(pid)s, NULL)", "22004", "attempt_token"),
    # fail
    ("fail-job_id-null", "SELECT pgfence.fail(NULL, %(token)s, 'e')", "22004", "job_id"),
    ("fail-token-null", "SELECT pgfence.fail(%(pid)s, NULL, 'e')", "22004", "attempt_token"),
    ("fail-error-null", "SELECT pgfence.fail(%(pid)s, %(token)s, NULL)", "22004", "error"),
    ("fail-error-too-long", "SELECT pgfence.fail(%(pid)s, %(token)s, repeat('e', 100001))", "22023", "error"),
    ("fail-permanent-null", "SELECT pgfence.fail(%(pid)s, %(token)s, 'e', permanent => NULL)", "22004", "permanent"),
    ("fail-retry_in-negative", "SELECT pgfence.fail(%(pid)s, %(token)s, 'e', retry_in => '-1 second')",
     "22023", "retry_in"),
    ("fail-retry_in-over-365-days", "SELECT pgfence.fail(%(pid)s, %(token)s, 'e', retry_in => '366 days')",
     "22023", "retry_in"),
    # release, requeue, cancel
    ("release-job_id-null", "SELECT pgfence.release(NULL, %(token)s)", "22004", "job_id"),
    ("release-token-null", "SELECT pgfence.release(%(pid)s, NULL)", "22004", "attempt_token"),
    ("release-started-null", "SELECT pgfence.release(%(pid)s, %(token)s, started => NULL)", "22004", "started"),
    ("requeue-job_id-null", "SELECT pgfence.requeue(NULL)", "22004", "job_id"),
    ("cancel-job_id-null", "SELECT pgfence.cancel(NULL)", "22004", "job_id"),
    # reclaim_expired, sweep
    ("reclaim_expired-max_jobs-0", "SELECT * FROM pgfence.reclaim_expired(0)", "22023", "max_jobs"),
    ("reclaim_expired-max_jobs-10001", "SELECT * FROM pgfence.reclaim_expired(10001)", "22023", "max_jobs"),
    ("reclaim_expired-max_jobs-null", "SELECT * FROM pgfence.reclaim_expired(NULL)", "22004", "max_jobs"),
    ("sweep-batch_size-0", "CALL pgfence.sweep(batch_size => 0)", "22023", "batch_size"),
    ("run_sweeper-pass_interval-0", "CALL pgfence.run_sweeper(pass_interval => '0')", "22023", "pass_interval"),
]

# The batch functions share _check_batch: check each of them with every array problem.
BATCH_CALLS = {
    "heartbeat_many": "SELECT * FROM pgfence.heartbeat_many({ids}, {tokens})",
    "complete_many": "SELECT * FROM pgfence.complete_many({ids}, {tokens})",
    "fail_many": "SELECT * FROM pgfence.fail_many({ids}, {tokens}, errors => {errors})",
    "release_many": "SELECT * FROM pgfence.release_many({ids}, {tokens})",
}
ERRORS_FOR = {  # fail_many needs an errors array as long as the ids
    1: "ARRAY['e']", 2: "ARRAY['e', 'e']", 10001: "array_fill('e'::text, ARRAY[10001])", 0: "'{}'::text[]",
}
BATCH_PROBLEMS = [
    # (name, ids, tokens, n for errors, SQLSTATE, named argument)
    ("ids-null", "NULL::bigint[]", "ARRAY[%(token)s::uuid]", 1, "22004", "job_ids"),
    ("tokens-null", "ARRAY[%(pid)s::bigint]", "NULL::uuid[]", 1, "22004", "attempt_tokens"),
    ("empty", "'{}'::bigint[]", "'{}'::uuid[]", 0, "22023", "job_ids length"),
    ("over-10000", "ARRAY(SELECT g::bigint FROM generate_series(1, 10001) g)",
     "ARRAY(SELECT gen_random_uuid() FROM generate_series(1, 10001))", 10001, "22023", "job_ids length"),
    ("length-mismatch", "ARRAY[%(pid)s::bigint, %(qid)s::bigint]", "ARRAY[%(token)s::uuid]", 2,
     "22023", "attempt_tokens length"),
    ("duplicate-ids", "ARRAY[%(pid)s::bigint, %(pid)s::bigint]", "ARRAY[%(token)s::uuid, %(token)s::uuid]", 2,
     "22023", "job_ids"),
    ("null-id-element", "ARRAY[%(pid)s::bigint, NULL]", "ARRAY[%(token)s::uuid, gen_random_uuid()]", 2,
     "22004", "job_ids[2]"),
    ("null-token-element", "ARRAY[%(pid)s::bigint, %(qid)s::bigint]", "ARRAY[NULL, %(token)s::uuid]", 2,
     "22004", "attempt_tokens[1]"),
]
for fn, template in BATCH_CALLS.items():
    for name, ids, tokens, n, state, arg in BATCH_PROBLEMS:
        CASES.append((f"{fn}-{name}", template.format(ids=ids, tokens=tokens, errors=ERRORS_FOR[n]), state, arg))
CASES += [
    ("complete_many-results-length",
     "SELECT * FROM pgfence.complete_many(ARRAY[%(pid)s::bigint], ARRAY[%(token)s::uuid], ARRAY['{}', '{}']::jsonb[])",
     "22023", "results length"),
    ("fail_many-errors-null", "SELECT * FROM pgfence.fail_many(ARRAY[%(pid)s::bigint], ARRAY[%(token)s::uuid], NULL)",
     "22004", "errors"),
    ("fail_many-errors-length",
     "SELECT * FROM pgfence.fail_many(ARRAY[%(pid)s::bigint], ARRAY[%(token)s::uuid], ARRAY['a', 'b'])",
     "22023", "errors"),
    ("fail_many-retry_ins-length",
     "SELECT * FROM pgfence.fail_many(ARRAY[%(pid)s::bigint], ARRAY[%(token)s::uuid], ARRAY['a'],"
     " retry_ins => ARRAY['1 s', '2 s']::interval[])", "22023", "retry_ins"),
    ("fail_many-permanents-length",
     "SELECT * FROM pgfence.fail_many(ARRAY[%(pid)s::bigint], ARRAY[%(token)s::uuid], ARRAY['a'],"
     " permanents => ARRAY[true, false])", "22023", "permanents"),
    ("fail_many-error-null-element",
     "SELECT * FROM pgfence.fail_many(ARRAY[%(pid)s::bigint], ARRAY[%(token)s::uuid], ARRAY[NULL::text])",
     "22004", "errors[1]"),
    ("fail_many-retry_in-negative-element",
     "SELECT * FROM pgfence.fail_many(ARRAY[%(pid)s::bigint], ARRAY[%(token)s::uuid], ARRAY['a'],"
     " retry_ins => ARRAY['-1 s']::interval[])", "22023", "retry_ins[1]"),
    ("heartbeat_many-lease-0",
     "SELECT * FROM pgfence.heartbeat_many(ARRAY[%(pid)s::bigint], ARRAY[%(token)s::uuid], lease => '0')",
     "22023", "lease"),
    ("fail_many-permanent-null-element",
     "SELECT * FROM pgfence.fail_many(ARRAY[%(pid)s::bigint], ARRAY[%(token)s::uuid], ARRAY['a'],"
     " permanents => ARRAY[NULL::boolean])", "22004", "permanents[1]"),
    ("sweep-batch_size-null", "CALL pgfence.sweep(0, NULL)", "22004", "batch_size"),
    ("run_sweeper-pass_interval-null", "CALL pgfence.run_sweeper(NULL)", "22004", "pass_interval"),
    # run_at: a finite timestamp ('infinity' would never run, '-infinity' broke stats())
    ("enqueue-run_at-infinity", "SELECT pgfence.enqueue('k', queue => %(queue)s, run_at => 'infinity')",
     "22023", "run_at"),
    ("enqueue-run_at-minus-infinity", "SELECT pgfence.enqueue('k', queue => %(queue)s, run_at => '-infinity')",
     "22023", "run_at"),
    ("enqueue_many-run_at-infinity-element",
     "SELECT * FROM pgfence.enqueue_many(ARRAY['a', 'b'], queue => %(queue)s,"
     " run_ats => ARRAY[NULL, '-infinity']::timestamptz[])", "22023", "run_ats[2]"),
]

# Intervals whose parts (months, days, time) have opposite signs compare as one length
# (a month counts as 30 days, a day as 24 hours) and add another: the first is a lease
# of 1 hour by comparison and of 1,436 years when added; the second 25 hours on 2026-11-29.
MIXED_SIGNS = ["1200000 mons -36000000 days 1 hour", "2 mons -60 days 1 hour",
               "-1 day 24:00:00.5"]  # 0.5 s by comparison; -59 min the day after a DST change
for i, mixed in enumerate(MIXED_SIGNS):
    CASES += [
        (f"claim-lease-mixed-signs-{i}",
         f"SELECT * FROM pgfence.claim('w', ARRAY[%(queue)s], lease => '{mixed}')", "22023", "lease"),
        (f"heartbeat-lease-mixed-signs-{i}",
         f"SELECT pgfence.heartbeat(%(pid)s, %(token)s, lease => '{mixed}')", "22023", "lease"),
        (f"heartbeat_many-lease-mixed-signs-{i}",
         f"SELECT * FROM pgfence.heartbeat_many(ARRAY[%(pid)s::bigint], ARRAY[%(token)s::uuid], lease => '{mixed}')",
         "22023", "lease"),
        (f"fail-retry_in-mixed-signs-{i}",
         f"SELECT pgfence.fail(%(pid)s, %(token)s, 'e', retry_in => '{mixed}')", "22023", "retry_in"),
        (f"fail_many-retry_in-mixed-signs-{i}",
         f"SELECT * FROM pgfence.fail_many(ARRAY[%(pid)s::bigint], ARRAY[%(token)s::uuid], ARRAY['a'],"
         f" retry_ins => ARRAY['{mixed}']::interval[])", "22023", "retry_ins[1]"),
    ]

# Arrays not indexed from 1, or of two dimensions: the element checks name (and
# read) arr[position], which is another element of such an array, so bad elements
# got through. Refused whole, up front, even when every element is valid.
T2 = "ARRAY[%(token)s::uuid, %(token)s::uuid]"
ODD_ARRAYS = [  # (case, SQL with {arr}, two valid elements, their type, named argument)
    ("enqueue_many-kinds", "SELECT * FROM pgfence.enqueue_many({arr}, queue => %(queue)s)", "'a'", "'b'", "text",
     "kinds"),
    ("enqueue_many-payloads", "SELECT * FROM pgfence.enqueue_many(ARRAY['a', 'b'], {arr}, queue => %(queue)s)",
     "'{}'", "'{}'", "jsonb", "payloads"),
    ("enqueue_many-priorities",
     "SELECT * FROM pgfence.enqueue_many(ARRAY['a', 'b'], queue => %(queue)s, priorities => {arr})",
     "1", "2", "integer", "priorities"),
    ("enqueue_many-run_ats", "SELECT * FROM pgfence.enqueue_many(ARRAY['a', 'b'], queue => %(queue)s, run_ats => {arr})",
     "now()", "now()", "timestamptz", "run_ats"),
    ("enqueue_many-keys",
     "SELECT * FROM pgfence.enqueue_many(ARRAY['a', 'b'], queue => %(queue)s, idempotency_keys => {arr})",
     "'k1'", "'k2'", "text", "idempotency_keys"),
    ("claim-queues", "SELECT * FROM pgfence.claim('w', {arr})", "%(queue)s", "'q'", "text", "queues"),
    ("complete_many-job_ids", "SELECT * FROM pgfence.complete_many({arr}, " + T2 + ")",
     "%(pid)s", "%(qid)s", "bigint", "job_ids"),
    ("heartbeat_many-attempt_tokens", "SELECT * FROM pgfence.heartbeat_many(ARRAY[%(pid)s::bigint, %(qid)s::bigint], {arr})",
     "%(token)s", "%(token)s", "uuid", "attempt_tokens"),
    ("complete_many-results", "SELECT * FROM pgfence.complete_many(ARRAY[%(pid)s::bigint, %(qid)s::bigint], " + T2
     + ", {arr})", "'{}'", "'{}'", "jsonb", "results"),
    ("fail_many-errors", "SELECT * FROM pgfence.fail_many(ARRAY[%(pid)s::bigint, %(qid)s::bigint], " + T2 + ", {arr})",
     "'e'", "'e'", "text", "errors"),
    ("fail_many-retry_ins", "SELECT * FROM pgfence.fail_many(ARRAY[%(pid)s::bigint, %(qid)s::bigint], " + T2
     + ", ARRAY['a', 'b'], {arr})", "'1 s'", "'1 s'", "interval", "retry_ins"),
    ("fail_many-permanents", "SELECT * FROM pgfence.fail_many(ARRAY[%(pid)s::bigint, %(qid)s::bigint], " + T2
     + ", ARRAY['a', 'b'], permanents => {arr})", "false", "false", "boolean", "permanents"),
]
for case, template, e1, e2, typ, arg in ODD_ARRAYS:
    CASES += [
        (f"{case}-from-index-0",
         template.format(arr=f"('[0:1]=' || ARRAY[{e1}::{typ}, {e2}::{typ}]::text)::{typ}[]"), "22023", arg),
        (f"{case}-two-dimensions",
         template.format(arr=f"ARRAY[ARRAY[{e1}::{typ}], ARRAY[{e2}::{typ}]]"), "22023", arg),
    ]


@pytest.mark.parametrize(("sql", "sqlstate", "arg"), [pytest.param(s, st, a, id=i) for i, s, st, a in CASES])
def test_bad_argument_is_refused_and_changes_nothing(conn: Conn, world: World, sql: str, sqlstate: str,
                                                      arg: str) -> None:
    before = queue_jobs(conn, world.queue)
    params = {"queue": world.queue, "qid": world.queued_id, "pid": world.processing_id, "token": world.token,
              "big": BIG_PAYLOAD}
    err = sql_error(conn, sql, {k: v for k, v in params.items() if f"%({k})s" in sql})
    assert_error(err, sqlstate, arg)
    assert queue_jobs(conn, world.queue) == before


# ------------------------------------------------------- accepted boundaries --
def test_boundary_values_are_accepted(conn: Conn, queue: str) -> None:
    name128 = "n" * 128
    a = enqueue(conn, queue, name128, max_attempts=1)
    b = enqueue(conn, queue, "k", max_attempts=1000, idempotency_key="k" * 255)
    got = rows(conn, "SELECT * FROM pgfence.claim(%s, ARRAY[%s], lease => '1 day', max_jobs => 1000)",
               (name128, queue))
    assert sorted(g["id"] for g in got) == sorted([a, b])
    assert {r["id"]: r["lease_expires_at"] - r["reserved_at"] for r in queue_jobs(conn, queue)} == {
        a: dt.timedelta(days=1), b: dt.timedelta(days=1)}
    long_queue = queue + "q" * (128 - len(queue))
    c = enqueue(conn, long_queue, "k", payload={"blob": "x" * (1024 * 1024 - 100)})  # just under 1 MiB
    assert one(conn, "SELECT status FROM pgfence.jobs WHERE id = %s", (c,)) == "queued"


def test_batch_of_10000_is_accepted(conn: Conn) -> None:
    res = conn.execute(
        "SELECT count(*), count(*) FILTER (WHERE NOT accepted) FROM pgfence.heartbeat_many("
        " ARRAY(SELECT -g::bigint FROM generate_series(1, 10000) g),"
        " ARRAY(SELECT gen_random_uuid() FROM generate_series(1, 10000)))").fetchone()
    assert res == (10000, 10000)


@pytest.mark.parametrize("call", ["claim", "heartbeat"])
def test_sub_millisecond_lease_is_refused(conn: Conn, world: World, call: str) -> None:
    before = queue_jobs(conn, world.queue)
    if call == "claim":
        sql = "SELECT * FROM pgfence.claim('w', ARRAY[%(queue)s], lease => '500 microseconds')"
    else:
        sql = "SELECT pgfence.heartbeat(%(pid)s, %(token)s, lease => '500 microseconds')"
    err: psycopg.Error | None = None
    try:
        conn.execute(sql, {"queue": world.queue, "pid": world.processing_id, "token": world.token})
    except psycopg.Error as e:
        err = e
    after = queue_jobs(conn, world.queue)
    assert err is not None, f"lease '500 microseconds' accepted by {call}"
    assert_error(err, "22023", "lease")
    assert after == before


def test_names_that_merely_start_or_end_with_letters_are_accepted(conn: Conn, queue: str) -> None:
    """Control for the whitespace rule: only whitespace is trimmed (an escape string once
    listed \\v, which PostgreSQL reads as a plain v, so 'vm:123:abc' was refused)."""
    q = queue + "v"
    jid = enqueue(conn, q, "vtnrfb")
    got = rows(conn, "SELECT * FROM pgfence.claim('vm:123:fv', ARRAY[%s])", (q,))
    assert [g["id"] for g in got] == [jid]
    conn.execute("DELETE FROM pgfence.jobs WHERE id = %s", (jid,))


# ------------------------------------------------- the table's own rules --
# A write that goes around the API (only pgfence_owner and superusers can) still meets
# every rule of pgfence.jobs: the one-column rules are the columns' domains
# (tables/job_domains, tables/job_timeouts, tables/job_unique_for), the rest one CHECK
# calling pgfence._job_row_rules (tables/job_row_rules).
@pytest.mark.parametrize("column, value, domain", [
    ("status", "'running'", "job_status"), ("status", "''", "job_status"),
    ("recovery_policy", "'maybe'", "recovery_policy"),
    ("queue", "''", "job_name"), ("queue", f"'{NAME_129}'", "job_name"),
    ("kind", "''", "job_name"), ("kind", f"'{NAME_129}'", "job_name"),
    ("idempotency_key", "''", "idempotency_key"), ("idempotency_key", "repeat('k', 256)", "idempotency_key"),
    ("payload", "'[1]'::jsonb", "job_payload"), ("payload", "to_jsonb('x'::text)", "job_payload"),
    ("payload", "'null'::jsonb", "job_payload"),
    ("attempts", "-1", "job_count"), ("reclaim_count", "-1", "job_count"),
    ("max_attempts", "0", "max_attempts"), ("max_attempts", "-5", "max_attempts"),
    ("timeout", "'0'::interval", "run_timeout"), ("timeout", "'-1 second'::interval", "run_timeout"),
    ("timeout", "'30 days 00:00:00.001'::interval", "run_timeout"), ("timeout", "'1 day'::interval", "run_timeout"),
    ("timeout", "'1 mon'::interval", "run_timeout"), ("timeout", "'1 mon -30 days 1 hour'::interval", "run_timeout"),
    ("unique_for", "'-1 second'::interval", "unique_for_period"),
    ("unique_for", "'36525 days 00:00:01'::interval", "unique_for_period"),
    ("unique_for", "'1 day'::interval", "unique_for_period"),
    ("unique_for", "'1 mon -30 days'::interval", "unique_for_period"),
])
def test_the_table_itself_refuses_a_bad_value(conn: Conn, world: World, column: str, value: str,
                                              domain: str) -> None:
    """23514 naming the column's domain, and the queue's rows as they were."""
    before = queue_jobs(conn, world.queue)
    err = sql_error(conn, f"UPDATE pgfence.jobs SET {column} = {value} WHERE id = %s", (world.queued_id,))
    assert_error(err, "23514", f"pgfence.{domain}", hint=False)  # (around the API: no hint to give)
    assert queue_jobs(conn, world.queue) == before


def test_values_at_the_bounds_go_in(conn: Conn, world: World) -> None:
    """The domains' bounds are inclusive, as the checks of enqueue are."""
    conn.execute("UPDATE pgfence.jobs SET queue = %s, kind = %s, idempotency_key = repeat('k', 255),"
                 " payload = '{}', attempts = 0, reclaim_count = 0, max_attempts = 1, recovery_policy = 'manual',"
                 " timeout = '720:00:00', unique_for = '876600:00:00' WHERE id = %s",
                 ("q" * 128, "k" * 128, world.queued_id))
    conn.execute("UPDATE pgfence.jobs SET timeout = '1 millisecond', unique_for = '0' WHERE id = %s",
                 (world.queued_id,))
    assert one(conn, "SELECT char_length(queue) + char_length(kind) FROM pgfence.jobs WHERE id = %s",
               (world.queued_id,)) == 256


@pytest.mark.parametrize("q, job, rule", [
    ("UPDATE pgfence.jobs SET lease_expires_at = now() WHERE id = %s", "queued", "jobs_lease_only_when_processing"),
    ("UPDATE pgfence.jobs SET reserved_by = 'w' WHERE id = %s", "queued", "jobs_queued_has_no_lease"),
    ("UPDATE pgfence.jobs SET attempt_token = NULL WHERE id = %s", "processing", "jobs_processing_has_lease"),
    ("UPDATE pgfence.jobs SET attempts = 0 WHERE id = %s", "processing", "jobs_processing_has_lease"),
    ("UPDATE pgfence.jobs SET status = 'manual_review' WHERE id = %s", "processing",
     "jobs_lease_only_when_processing"),
    ("UPDATE pgfence.jobs SET finished_at = now() WHERE id = %s", "queued", "jobs_finished_at_terminal"),
    ("UPDATE pgfence.jobs SET timeout = '1 millisecond' WHERE id = %s", "processing", "jobs_lease_within_timeout"),
])
def test_the_rules_that_read_several_columns_name_the_rule_broken(conn: Conn, world: World, q: str, job: str,
                                                                   rule: str) -> None:
    """Each rule of the table's CHECK jobs_row_rules (pgfence._job_row_rules): 23514
    naming the rule (the first by name when a row breaks several, as PostgreSQL tried
    the five CHECKs: a queued row with a lease breaks two), and the queue's rows as they
    were."""
    before = queue_jobs(conn, world.queue)
    err = sql_error(conn, q, (world.queued_id if job == "queued" else world.processing_id,))
    assert_error(err, "23514", f'violates check constraint "{rule}"', hint=False)
    assert err.diag.constraint_name == rule and err.diag.table_name == "jobs"
    assert queue_jobs(conn, world.queue) == before


# The five CHECKs that tables/job_row_rules replaced, as they were written: the reference
# pgfence._job_row_rules must agree with on every row.
OLD_ROW_CHECKS = {
    "jobs_processing_has_lease": "status <> 'processing' OR (attempt_token IS NOT NULL AND lease_expires_at IS NOT NULL"
                                 " AND reserved_by IS NOT NULL AND reserved_at IS NOT NULL AND attempts >= 1)",
    "jobs_queued_has_no_lease": "status <> 'queued' OR (attempt_token IS NULL AND lease_expires_at IS NULL"
                                " AND reserved_by IS NULL AND reserved_at IS NULL AND heartbeat_at IS NULL)",
    "jobs_lease_only_when_processing": "(status = 'processing') = (lease_expires_at IS NOT NULL)",
    "jobs_finished_at_terminal": "(status IN ('done', 'failed', 'cancelled')) = (finished_at IS NOT NULL)",
    "jobs_lease_within_timeout": "timeout IS NULL OR lease_expires_at IS NULL OR lease_expires_at <= reserved_at + timeout",
}
T0 = dt.datetime(2026, 1, 1, tzinfo=dt.timezone.utc)
maybe_time = st.one_of(st.none(), st.sampled_from([T0, T0 + dt.timedelta(seconds=1), T0 + dt.timedelta(seconds=30)]))


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(status=st.sampled_from(["queued", "processing", "done", "failed", "manual_review", "cancelled"]),
       attempts=st.integers(0, 2), token=st.booleans(), worker=st.booleans(), reserved_at=maybe_time,
       heartbeat_at=maybe_time, lease=maybe_time, finished_at=maybe_time,
       timeout=st.one_of(st.none(), st.sampled_from([dt.timedelta(milliseconds=1), dt.timedelta(seconds=30)])))
def test_the_row_rules_agree_with_the_checks_they_replaced(conn: Conn, status: str, attempts: int, token: bool,
                                                            worker: bool, reserved_at: Any, heartbeat_at: Any,
                                                            lease: Any, finished_at: Any, timeout: Any) -> None:
    """For any row: pgfence._job_row_rules passes it exactly when the five old CHECKs
    did (a CHECK passes on NULL), and refuses it naming the old CHECK that PostgreSQL
    reported: the first, by name, that the row breaks."""
    params = {"status": status, "attempts": attempts, "attempt_token": uuid.uuid4() if token else None,
              "reserved_by": "w" if worker else None, "reserved_at": reserved_at, "heartbeat_at": heartbeat_at,
              "lease_expires_at": lease, "finished_at": finished_at, "timeout": timeout}
    values = ("(SELECT %(status)s::text AS status, %(attempts)s::int AS attempts, %(attempt_token)s::uuid AS attempt_token,"
              " %(reserved_by)s::text AS reserved_by, %(reserved_at)s::timestamptz AS reserved_at,"
              " %(heartbeat_at)s::timestamptz AS heartbeat_at, %(lease_expires_at)s::timestamptz AS lease_expires_at,"
              " %(finished_at)s::timestamptz AS finished_at, %(timeout)s::interval AS timeout) r")
    verdicts = one(conn, "SELECT ARRAY[" + ", ".join(f"({rule}) IS NOT FALSE" for rule in OLD_ROW_CHECKS.values())
                   + "] FROM " + values, params)
    broken = sorted(name for name, ok in zip(OLD_ROW_CHECKS, verdicts) if not ok)
    call = ("SELECT pgfence._job_row_rules(1, r.status, r.attempts, r.attempt_token, r.reserved_by, r.reserved_at,"
            " r.heartbeat_at, r.lease_expires_at, r.finished_at, r.timeout) FROM " + values)
    if not broken:
        assert one(conn, call, params) is True
    else:
        err = sql_error(conn, call, params)
        assert err.sqlstate == "23514" and err.diag.constraint_name == broken[0], (broken, err)


_INT32 = st.one_of(st.integers(-2**31, 2**31 - 1), st.sampled_from([0, 1, -1, 11, -11, 12, -12, 29, 30, 31, -30]))
_MICROS = st.one_of(st.integers(-2**63 + 1, 2**63 - 1),
                    st.sampled_from([0, 1, -1, 999_999, 1_000_000, -1_000_000, 86_400_000_000, -86_400_000_000,
                                     86_400_000_001, -86_399_999_999, 3_600_000_000, -59_999_999]))


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(months=_INT32, days=_INT32, micros=_MICROS)
def test_interval_signs_agree_is_true_exactly_when_the_parts_share_a_sign(conn: Conn, months: int, days: int,
                                                                          micros: int) -> None:
    """pgfence._interval_signs_agree (the bound checks of every lease, timeout, retry
    delay and retention inline it) is true exactly when the interval's months, days and
    time are all >= 0 or all <= 0, at the edges of each part's range too."""
    agree = one(conn, "SELECT pgfence._interval_signs_agree(make_interval(months => %s) + make_interval(days => %s)"
                      " + (%s::text || ' microseconds')::interval)", (months, days, micros))
    assert agree is ((months >= 0 and days >= 0 and micros >= 0) or (months <= 0 and days <= 0 and micros <= 0))


# Names for lists: mostly plain (the fast path), with what must fall back to the check of
# each name: the separator and the NULL marker of the joined text, NULL, '', 129
# characters, spaces at either end and inside, non-ASCII, a bidi control, a modifier.
_plain = st.text(alphabet=st.characters(min_codepoint=0x21, max_codepoint=0x7e), min_size=1, max_size=130)
_odd = st.sampled_from([None, "", "\x01", "a\x01b", "\x02", "a\x02", " a", "a ", "a b", "é", "a\u202eb", "\ufe0f",
                        "a\ufe0f", "\x7f", "n" * 128, "n" * 129, "\u3000a"])
_names = st.lists(st.one_of(_plain, _plain, _plain, _odd), min_size=0, max_size=40)


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(names=_names)
def test_the_check_of_a_long_list_agrees_with_the_check_of_each_name(conn: Conn, names: list[Any]) -> None:
    """pgfence._names_ok (claim's check of a list of two or more queues: one regex
    over the joined names when all are plain) says exactly what _name_ok on each name
    says, NULL for an empty list; and a claim with the list (one name: claim's inline
    check; more: _names_ok), with its first name alone, and with it padded past 16
    names, is refused naming the first bad element, or runs."""
    each = one(conn, "SELECT bool_and(pgfence._name_ok(q)) FROM unnest(%s::text[]) q", (names,))
    assert one(conn, "SELECT pgfence._names_ok(%s::text[])", (names,)) is each
    for listed in ([names, names[:1]] if names else []) + [["plain-queue"] * 17 + names]:
        bad = next((i for i, n in enumerate(listed, 1) if not one(conn, "SELECT pgfence._name_ok(%s)", (n,))), None)
        if bad is None:
            with conn.transaction(force_rollback=True):
                conn.execute("SELECT * FROM pgfence.claim('w', %s::text[])", (listed,))
        else:
            err = sql_error(conn, "SELECT * FROM pgfence.claim('w', %s::text[])", (listed,))
            assert_error(err, "22004" if listed[bad - 1] is None else "22023", f"queues[{bad}]")


# A session with standard_conforming_strings off (a legacy client's setting, which any
# role may choose) parses the SQL bodies of the checks with backslashes as escapes: the
# checks must read their regexes the same (before, '\x9f' became a raw byte and every
# enqueue and claim failed with 22021). Names drawn from what the checks tell apart.
_legacy_char = st.one_of(
    st.characters(min_codepoint=0x21, max_codepoint=0x7e),
    st.sampled_from(["\x01", "\x02", "\t", "\n", "\x1b", "\x1f", "\x7f", "\x80", "\x9f", "\xa0", "\u00ad", "\u061c",
                     "\u200b", "\u200e", "\u2028", "\u202e", "\u2066", "\u3000", "\ufe0f", "\U000e0041", "\ufeff",
                     " ", "\\", "'", "é", "\U0001f600"]))
_legacy_names = st.lists(st.one_of(st.none(), st.text(alphabet=_legacy_char, max_size=10)), min_size=1, max_size=4)


@pytest.fixture
def legacy_conn(dsn: str) -> Iterator[tuple[Conn, list[str]]]:
    """A session with standard_conforming_strings off from its start (so every plan of
    it is made so), escape_string_warning on and an odd time zone (UTC+12:45), with the
    notices it gets."""
    with connection(dsn, options="-c standard_conforming_strings=off -c escape_string_warning=on"
                                 " -c TimeZone=Pacific/Chatham") as c:
        notices: list[str] = []
        c.add_notice_handler(lambda d: notices.append(f"{d.severity}: {d.message_primary}"))
        assert one(c, "SHOW standard_conforming_strings") == "off"
        yield c, notices


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(names=_legacy_names)
def test_the_checks_read_the_same_whatever_standard_conforming_strings(conn: Conn, legacy_conn: tuple[Conn, list[str]],
                                                                        names: list[Any]) -> None:
    """_name_ok, _names_ok, _printable and the message of a refused name are the same in
    a session with standard_conforming_strings off as with it on, and nothing warns."""
    legacy, notices = legacy_conn
    per_name = ("SELECT n.ord, pgfence._name_ok(n.v) AS ok, pgfence._printable(n.v)"
                " FROM unnest(%s::text[]) WITH ORDINALITY n(v, ord) ORDER BY 1")
    answers = rows(conn, per_name, (names,))
    assert rows(legacy, per_name, (names,)) == answers
    assert one(legacy, "SELECT pgfence._names_ok(%s::text[])", (names,)) is one(
        conn, "SELECT pgfence._names_ok(%s::text[])", (names,))
    for n, answer in zip(names, answers):
        if not answer["ok"]:
            on, off = (sql_error(c, "SELECT pgfence._check_name('queue', %s)", (n,)) for c in (conn, legacy))
            assert (off.sqlstate, off.diag.message_primary, off.diag.message_hint) == (
                on.sqlstate, on.diag.message_primary, on.diag.message_hint)
    assert notices == []


def test_the_api_works_with_standard_conforming_strings_off(legacy_conn: tuple[Conn, list[str]], queue: str) -> None:
    """Enqueue (with and without a key), claim (every queue, one, a list, a list of more
    than 16), heartbeat, fail, complete, a schedule's cron and a refused name, from a
    session with standard_conforming_strings off: they work, and nothing warns."""
    legacy, notices = legacy_conn
    other = queue + "-b"
    first = enqueue(legacy, queue, "a", priority=3)
    assert enqueue(legacy, queue, "k", idempotency_key="key\\1") == enqueue(legacy, queue, "k", idempotency_key="key\\1")
    enqueue(legacy, other, "b")
    assert claim_job(legacy, queue, first, "w\\1")
    got = claim(legacy, [queue, other], max_jobs=5)
    assert {r["queue"] for r in got} == {queue, other}
    assert claim(legacy, [f"pad-{i}" for i in range(17)] + [queue]) == []
    top = enqueue(legacy, queue + "-top", "t", priority=2147483647)  # (every queue: this job comes first)
    assert [r["id"] for r in claim(legacy, None, max_jobs=1)] == [top]
    j = next(r for r in got if r["queue"] == queue)
    assert heartbeat(legacy, j["id"], j["attempt_token"])
    fail(legacy, j["id"], j["attempt_token"], "a\\x9f\x1b[31mred")
    k = next(r for r in got if r["queue"] == other)
    complete(legacy, k["id"], k["attempt_token"], {"path": "C:\\tmp"})
    with legacy.transaction(force_rollback=True):
        nxt = one(legacy, "SELECT pgfence.schedule(%s, cron => '*/5  *\t* * *', kind => 'tick', queue => %s)",
                  (queue + "-sched", queue))
        assert nxt.minute % 5 == 0
    err = sql_error(legacy, "SELECT pgfence.enqueue('k', queue => %s)", (queue + "\x9f",))
    assert_error(err, "22023", "queue")
    assert "\\u009f" in err.diag.message_primary
    assert notices == []
