"""The sqitch changes: `sqitch verify` passes on the test database, and
deploy -> verify -> revert -y -> deploy round-trips on a scratch database
(without pg_cron, where cron/reclaim deploys with a NOTICE)."""
from __future__ import annotations

import os
import subprocess
import time
import uuid
from typing import Any

import psycopg
import pytest
from psycopg.conninfo import conninfo_to_dict

from support.db import connect, sqitch, sqitch_target

Conn = psycopg.Connection[Any]


def _ok(r: subprocess.CompletedProcess[str], what: str) -> str:
    out = r.stdout + r.stderr
    assert r.returncode == 0, f"sqitch {what} exited {r.returncode}:\n{out}"
    return out


def test_sqitch_verify_passes_on_the_test_database(dsn: str) -> None:
    out = _ok(sqitch("verify", target=sqitch_target(dsn)), "verify")
    assert "Verify successful" in out


def _has_jobs_table(dsn: str) -> bool:
    with connect(dsn) as c:
        return c.execute("SELECT to_regclass('pgfence.jobs') IS NOT NULL").fetchone() == (True,)


def test_sqitch_deploy_verify_revert_deploy_round_trips(scratch_dsn: str) -> None:
    target = sqitch_target(scratch_dsn)
    dbname = conninfo_to_dict(scratch_dsn)["dbname"]
    with connect(scratch_dsn) as c:
        assert c.execute("SELECT count(*) FROM pg_extension WHERE extname = 'pg_cron'").fetchone() == (0,)

    out = _ok(sqitch("deploy", target=target), "deploy")
    notice = f"NOTICE:  pgfence: pg_cron is not installed in database {dbname}, so no sweep is scheduled"
    assert notice in out, out
    assert _has_jobs_table(scratch_dsn)

    out = _ok(sqitch("verify", target=target), "verify")
    assert "Verify successful" in out

    _ok(sqitch("revert", "-y", target=target), "revert -y")
    with connect(scratch_dsn) as c:
        assert c.execute("SELECT count(*) FROM pg_namespace WHERE nspname = 'pgfence'").fetchone() == (0,)

    out = _ok(sqitch("deploy", target=target), "deploy (again)")
    assert notice in out, out
    assert _has_jobs_table(scratch_dsn)
    _ok(sqitch("verify", target=target), "verify (again)")
    # the redeployed schema works
    with connect(scratch_dsn) as c:
        [job_id] = c.execute("SELECT pgfence.enqueue('k', queue => 'roundtrip')").fetchall()[0]
        [token] = c.execute("SELECT attempt_token FROM pgfence.claim('w', ARRAY['roundtrip'])").fetchall()[0]
        c.execute("SELECT pgfence.complete(%s, %s)", (job_id, token))
        assert c.execute("SELECT status FROM pgfence.all_jobs WHERE id = %s", (job_id,)).fetchone() == ("done",)


# claim's signature at the head of the plan (the tags' claims have no queue_set)
CLAIM_NOW = "pgfence.claim(text, text[], interval, integer, uuid, text)"


def worker_may(c: Conn, routine: str) -> bool:
    """pgfence_worker may EXECUTE routine, and it runs SECURITY DEFINER."""
    row = c.execute("SELECT has_function_privilege('pgfence_worker', %s, 'EXECUTE')"
                    " AND (SELECT prosecdef FROM pg_proc WHERE oid = %s::regprocedure)", (routine, routine)).fetchone()
    return row == (True,)


def test_sqitch_upgrades_a_database_deployed_at_v0_1_0_and_reverts_to_it(scratch_dsn: str) -> None:
    """The plan is tagged: a database deployed at @v0.1.0 (API version 1) is upgraded by
    `sqitch deploy` in place, its jobs kept, and `sqitch revert --to @v0.1.0` takes it back,
    each side passing `sqitch verify` and keeping the roles' privileges."""
    target = sqitch_target(scratch_dsn)
    _ok(sqitch("deploy", "--to", "@v0.1.0", target=target), "deploy --to @v0.1.0")

    with connect(scratch_dsn) as c:
        assert c.execute("SELECT pgfence.schema_version()").fetchone() == (1,)
        [held] = c.execute("SELECT pgfence.enqueue('k', queue => 'upgrade')").fetchall()[0]
        [token] = c.execute("SELECT attempt_token FROM pgfence.claim('w', ARRAY['upgrade'])").fetchall()[0]
        [waiting] = c.execute("SELECT pgfence.enqueue('k', queue => 'upgrade')").fetchall()[0]

    out = _ok(sqitch("deploy", target=target), "deploy (upgrade)")
    assert "+ functions/claim" in out and "+ functions/sweep" in out, out
    _ok(sqitch("verify", target=target), "verify (upgraded)")
    with connect(scratch_dsn) as c:
        assert c.execute("SELECT pgfence.schema_version()").fetchone() == (3,)
        assert worker_may(c, CLAIM_NOW)
        assert worker_may(c, "pgfence.claimed(text, uuid[], interval)")
        c.execute("SELECT pgfence.complete(%s, %s)", (held, token))  # an attempt from before the upgrade
        request = "00000000-0000-4000-8000-000000000001"
        [(job_id, new_token)] = c.execute("SELECT id, attempt_token FROM pgfence.claim('w', ARRAY['upgrade'],"
                                          " request_id => %s)", (request,)).fetchall()
        assert job_id == waiting
        assert c.execute("SELECT attempt_token FROM pgfence.claimed('w', ARRAY[%s]::uuid[])",
                         (request,)).fetchall() == [(new_token,)]

    _ok(sqitch("revert", "-y", "--to", "@v0.1.0", target=target), "revert --to @v0.1.0")
    _ok(sqitch("verify", target=target), "verify (reverted)")
    with connect(scratch_dsn) as c:
        assert c.execute("SELECT pgfence.schema_version()").fetchone() == (1,)
        assert c.execute("SELECT to_regprocedure('pgfence.claimed(text, uuid[], interval)')").fetchone() == (None,)
        assert worker_may(c, "pgfence.claim(text, text[], interval, integer)")
        assert c.execute("SELECT status FROM pgfence.jobs ORDER BY id").fetchall() == [("done",), ("processing",)]
        c.execute("SELECT pgfence.complete(%s, %s)", (waiting, new_token))


def test_sqitch_upgrades_a_database_deployed_at_v0_2_0_and_reverts_to_it(scratch_dsn: str) -> None:
    """The claim rework after @v0.2.0 (CREATE OR REPLACE) keeps claim's owner, grants,
    SECURITY DEFINER and search_path both ways, and a lease taken before it still fences."""
    target = sqitch_target(scratch_dsn)
    _ok(sqitch("deploy", "--to", "@v0.2.0", target=target), "deploy --to @v0.2.0")
    claim = "pgfence.claim(text, text[], interval, integer, uuid)"
    probe = "%IF EXISTS (SELECT FROM pgfence.jobs j WHERE j.status = 'processing'%"

    def claim_state(c: Conn) -> tuple[Any, ...]:
        row = c.execute("SELECT proowner::regrole::text, proacl::text, proconfig, prosrc LIKE %s FROM pg_proc"
                        " WHERE oid = %s::regprocedure", (probe, claim)).fetchone()
        assert row is not None
        return tuple(row)

    with connect(scratch_dsn) as c:
        before = claim_state(c)
        assert before[3] is False
        [held] = c.execute("SELECT pgfence.enqueue('k', queue => 'upgrade')").fetchall()[0]
        [token] = c.execute("SELECT attempt_token FROM pgfence.claim('w', ARRAY['upgrade'])").fetchall()[0]

    out = _ok(sqitch("deploy", "--to", "@v0.3.0", target=target), "deploy --to @v0.3.0 (upgrade)")
    assert "+ functions/claim" in out, out
    _ok(sqitch("verify", target=target), "verify (upgraded)")
    with connect(scratch_dsn) as c:
        assert claim_state(c)[:3] == before[:3] and claim_state(c)[3] is True
        assert worker_may(c, claim)
        # an expired lease is still reclaimed by the next claim, then claimed again
        c.execute("UPDATE pgfence.jobs SET lease_expires_at = clock_timestamp() - interval '1 second' WHERE id = %s",
                  (held,))
        [(job_id, attempts, new_token)] = c.execute(
            "SELECT id, attempts, attempt_token FROM pgfence.claim('w', ARRAY['upgrade'])").fetchall()
        assert (job_id, attempts) == (held, 2) and new_token != token
        with pytest.raises(psycopg.Error) as refused:
            c.execute("SELECT pgfence.complete(%s, %s)", (held, token))  # the attempt from before the upgrade
        assert refused.value.sqlstate == "PF001"

    _ok(sqitch("revert", "-y", "--to", "@v0.2.0", target=target), "revert --to @v0.2.0")
    _ok(sqitch("verify", target=target), "verify (reverted)")
    with connect(scratch_dsn) as c:
        assert claim_state(c) == before
        assert worker_may(c, claim)
        c.execute("SELECT pgfence.complete(%s, %s)", (held, new_token))
        assert c.execute("SELECT status FROM pgfence.jobs WHERE id = %s", (held,)).fetchone() == ("done",)


def test_sqitch_upgrades_a_database_deployed_at_v0_3_0_and_reverts_to_it(scratch_dsn: str) -> None:
    """The security reworks after @v0.3.0 upgrade in place: rows the new rules would
    refuse (names with control characters, deep payloads, a forged rejection) survive
    and keep working, a lease from before the upgrade still completes, the rules apply
    to new calls; `sqitch revert --to @v0.3.0` restores claim exactly, with its owner,
    grants and settings, and the jobs stay."""
    target = sqitch_target(scratch_dsn)
    _ok(sqitch("deploy", "--to", "@v0.3.0", target=target), "deploy --to @v0.3.0")
    claim = "pgfence.claim(text, text[], interval, integer, uuid)"

    def state(c: Conn, routine: str) -> tuple[Any, ...]:
        row = c.execute("SELECT proowner::regrole::text, proacl::text, proconfig, prosecdef, md5(prosrc) FROM pg_proc"
                        " WHERE oid = %s::regprocedure", (routine,)).fetchone()
        assert row is not None
        return tuple(row)

    deep = '{"a": ' * 99 + "{}" + "}" * 99
    with connect(scratch_dsn) as c:
        assert c.execute("SELECT pgfence.schema_version()").fetchone() == (2,)
        before = {r: state(c, r) for r in (claim, "pgfence.complete(bigint, uuid, jsonb)",
                                            "pgfence.report_rejection(bigint, uuid, text)")}
        legacy_queue = c.execute("SELECT pgfence.enqueue('k', queue => E'legacy\\nqueue')").fetchone()[0]  # type: ignore[index]
        legacy_deep = c.execute("SELECT pgfence.enqueue(E'kind\\u00a0', %s::jsonb, 'upgrade')", (deep,)).fetchone()[0]  # type: ignore[index]
        [(held, token)] = c.execute("SELECT id, attempt_token FROM pgfence.claim('w', ARRAY['upgrade'],"
                                    " '1 hour')").fetchall()
        assert held == legacy_deep
        c.execute("SELECT pgfence.report_rejection(%s, gen_random_uuid(), 'complete')", (held,))  # forged, accepted

    out = _ok(sqitch("deploy", target=target), "deploy (upgrade)")
    assert "+ functions/sweep" in out and "+ functions/claim" in out, out
    _ok(sqitch("verify", target=target), "verify (upgraded)")
    with connect(scratch_dsn) as c:
        assert c.execute("SELECT pgfence.schema_version()").fetchone() == (3,)
        assert worker_may(c, CLAIM_NOW)
        assert c.execute("SELECT has_function_privilege('pgfence_operator', 'pgfence.pause_sweeper()', 'EXECUTE'),"
                         " has_function_privilege('pgfence_worker', 'pgfence.pause_sweeper()', 'EXECUTE')"
                         ).fetchone() == (True, False)
        # the lease from before the upgrade completes; the legacy rows are claimed and run
        c.execute("SELECT pgfence.complete(%s, %s)", (held, token))
        got = dict(c.execute("SELECT id, attempt_token FROM pgfence.claim('w', NULL, '1 hour', 10)").fetchall())
        assert set(got) == {legacy_queue}
        c.execute("SELECT pgfence.complete(%s, %s)", (legacy_queue, got[legacy_queue]))
        assert c.execute("SELECT id, status, queue FROM pgfence.all_jobs ORDER BY id").fetchall() == [
            (legacy_queue, "done", "legacy\nqueue"), (legacy_deep, "done", "upgrade")]
        # the forged row stays (the rule is for new calls), with no slot
        assert c.execute("SELECT count(*), count(slot) FROM pgfence.rejections").fetchone() == (1, 0)
        # the rules apply to new calls
        for call, params in (("SELECT pgfence.enqueue('k', queue => E'new\\nqueue')", None),
                             ("SELECT pgfence.enqueue('k', %s::jsonb, 'upgrade')", ('{"a": ' * 64 + "{}" + "}" * 64,)),
                             ("SELECT pgfence.report_rejection(%s, gen_random_uuid(), 'complete')", (held,)),
                             ("CALL pgfence.run_sweeper('10 ms', 'infinity')", None)):
            with pytest.raises(psycopg.Error) as refused:
                c.execute(call, params)
            assert refused.value.sqlstate == "22023", call

    _ok(sqitch("revert", "-y", "--to", "@v0.3.0", target=target), "revert --to @v0.3.0")
    _ok(sqitch("verify", target=target), "verify (reverted)")
    with connect(scratch_dsn) as c:
        assert c.execute("SELECT pgfence.schema_version()").fetchone() == (2,)
        assert {r: state(c, r) for r in before} == before
        assert c.execute("SELECT to_regprocedure('pgfence.pause_sweeper()'), to_regclass('pgfence.routine_grants'),"
                         " to_regclass('pgfence.rejection_overflow')").fetchone() == (None, None, None)
        assert c.execute("SELECT count(*) FROM pgfence.jobs").fetchone() == (2,)
        c.execute("SELECT pgfence.enqueue('k', queue => E'new\\nqueue')")  # the old rules again
        assert worker_may(c, claim)


def test_sqitch_upgrades_a_database_deployed_at_v0_4_0_and_reverts_to_it(scratch_dsn: str) -> None:
    """The structure reworks after @v0.4.0 upgrade in place and change no behaviour: a
    claim made before the upgrade is found by claim_results (and by claimed, its old
    name), the read API and limits() appear; `sqitch revert --to @v0.4.0` restores every
    reworked routine exactly (body, owner, grants, settings), the additions go, and the
    jobs stay."""
    target = sqitch_target(scratch_dsn)
    _ok(sqitch("deploy", "--to", "@v0.4.0", target=target), "deploy --to @v0.4.0")
    reworked = ["pgfence.claim(text, text[], interval, integer, uuid)", "pgfence.claimed(text, uuid[], interval)",
                "pgfence.fail_many(bigint[], uuid[], text[], interval[], boolean[])",
                "pgfence.fail(bigint, uuid, text, interval, boolean)",
                "pgfence.enqueue_many(text[], jsonb[], text, integer[], timestamptz[], integer, text, text[])",
                "pgfence.heartbeat_many(bigint[], uuid[], interval)", "pgfence.release(bigint, uuid, boolean)",
                "pgfence.stats()"]

    def state(c: Conn) -> dict[str, tuple[Any, ...]]:
        out = {}
        for routine in reworked:
            row = c.execute("SELECT proowner::regrole::text, proacl::text, proconfig, prosecdef, prolang, md5(prosrc)"
                            " FROM pg_proc WHERE oid = %s::regprocedure", (routine,)).fetchone()
            assert row is not None, routine
            out[routine] = tuple(row)
        out["grants"] = tuple(c.execute("SELECT routine, roles FROM pgfence.routine_grants ORDER BY 1").fetchall())
        out["policies"] = tuple(c.execute("SELECT polname, polroles::regrole[]::text FROM pg_policy"
                                          " WHERE polrelid = 'pgfence.jobs'::regclass ORDER BY 1").fetchall())
        return out

    request = uuid.uuid4()
    with connect(scratch_dsn) as c:
        assert c.execute("SELECT pgfence.schema_version()").fetchone() == (3,)
        before = state(c)
        job_id = c.execute("SELECT pgfence.enqueue('k', queue => 'upgrade')").fetchone()[0]  # type: ignore[index]
        [(held, token)] = c.execute("SELECT id, attempt_token FROM pgfence.claim('w', ARRAY['upgrade', 'other'],"
                                    " '1 hour', 5, %s)", (request,)).fetchall()
        assert held == job_id

    out = _ok(sqitch("deploy", target=target), "deploy (upgrade)")
    assert "+ functions/claim" in out and "+ functions/read_api" in out, out
    _ok(sqitch("verify", target=target), "verify (upgraded)")
    with connect(scratch_dsn) as c:
        assert c.execute("SELECT pgfence.schema_version()").fetchone() == (3,)
        for name in ("claim_results", "claimed"):
            assert worker_may(c, f"pgfence.{name}(text, uuid[], interval)")
            assert c.execute(f"SELECT id, attempt_token FROM pgfence.{name}('w', ARRAY[%s]::uuid[])",
                             (request,)).fetchall() == [(held, token)]
        assert c.execute("SELECT value FROM pgfence.limits() WHERE name = 'max_jobs'").fetchone() == (1000,)
        assert c.execute("SELECT status FROM pgfence.job(%s)", (held,)).fetchone() == ("processing",)
        c.execute("SELECT pgfence.complete(%s, %s)", (held, token))
        assert c.execute("SELECT outcome FROM pgfence.attempts_of(%s)", (held,)).fetchall() == [("done",)]

    _ok(sqitch("revert", "-y", "--to", "@v0.4.0", target=target), "revert --to @v0.4.0")
    _ok(sqitch("verify", target=target), "verify (reverted)")
    with connect(scratch_dsn) as c:
        assert state(c) == before
        assert c.execute("SELECT to_regprocedure('pgfence.claim_results(text, uuid[], interval)'),"
                         " to_regprocedure('pgfence.limits()'), to_regprocedure('pgfence.job(bigint)'),"
                         " to_regprocedure('pgfence._claim_from_list(text[], integer, timestamptz)')"
                         ).fetchone() == (None, None, None, None)
        assert c.execute("SELECT status FROM pgfence.jobs WHERE id = %s", (held,)).fetchone() == ("done",)
        assert worker_may(c, "pgfence.claimed(text, uuid[], interval)")


def test_sqitch_upgrades_a_database_deployed_at_v0_5_0_and_reverts_to_it(scratch_dsn: str) -> None:
    """Done jobs leave the hot table in place: `sqitch deploy` from @v0.5.0 moves the done
    jobs the older version kept in pgfence.jobs (with their attempts, their keys held)
    into the history, deletes the one already past its retention, and leaves live
    leases valid; `sqitch revert --to @v0.5.0` brings the done jobs back into
    pgfence.jobs with their attempts (the ones completed after the upgrade too), and
    the history's tables go."""
    target = sqitch_target(scratch_dsn)
    _ok(sqitch("deploy", "--to", "@v0.5.0", target=target), "deploy --to @v0.5.0")

    def attempts(c: Conn, table: str, job_id: int) -> list[tuple[Any, ...]]:
        return c.execute(f"SELECT attempt, attempt_token, worker, outcome, error FROM {table}"
                         " WHERE job_id = %s ORDER BY attempt, ended_at", (job_id,)).fetchall()

    with connect(scratch_dsn) as c:
        keyed = c.execute("SELECT pgfence.enqueue('k', queue => 'up', idempotency_key => 'K')").fetchone()[0]  # type: ignore[index]
        [(first,)] = c.execute("SELECT attempt_token FROM pgfence.claim('w1', ARRAY['up'])").fetchall()
        c.execute("SELECT pgfence.fail(%s, %s, 'boom', '0 seconds')", (keyed, first))
        [(second,)] = c.execute("SELECT attempt_token FROM pgfence.claim('w2', ARRAY['up'])").fetchall()
        c.execute("SELECT pgfence.complete(%s, %s, '{\"r\": 1}')", (keyed, second))
        old = c.execute("SELECT pgfence.enqueue('k', queue => 'up')").fetchone()[0]  # type: ignore[index]
        [(tok_old,)] = c.execute("SELECT attempt_token FROM pgfence.claim('w1', ARRAY['up'])").fetchall()
        c.execute("SELECT pgfence.complete(%s, %s)", (old, tok_old))
        c.execute("UPDATE pgfence.jobs SET finished_at = finished_at - interval '2 days' WHERE id = %s", (old,))
        plain = [c.execute("SELECT pgfence.enqueue('k', queue => 'up')").fetchone()[0] for _ in range(25)]  # type: ignore[index]
        for j in plain:
            [(t,)] = c.execute("SELECT attempt_token FROM pgfence.claim('w1', ARRAY['up'])").fetchall()
            c.execute("SELECT pgfence.complete(%s, %s)", (j, t))
        held = c.execute("SELECT pgfence.enqueue('k', queue => 'live')").fetchone()[0]  # type: ignore[index]
        [(token,)] = c.execute("SELECT attempt_token FROM pgfence.claim('w3', ARRAY['live'], '1 hour')").fetchall()
        keyed_attempts = attempts(c, "pgfence.attempts", keyed)
        assert [a[3] for a in keyed_attempts] == ["failed", "done"]

    out = _ok(sqitch("deploy", target=target), "deploy (upgrade)")
    assert "+ tables/history" in out and "+ data/finished_jobs" in out, out
    _ok(sqitch("verify", target=target), "verify (upgraded)")
    with connect(scratch_dsn) as c:
        assert c.execute("SELECT count(*) FROM pgfence.jobs WHERE status = 'done'").fetchone() == (0,)
        assert c.execute("SELECT count(*) FROM pgfence.finished_jobs").fetchone() == (26,)
        assert c.execute("SELECT count(*) FROM pgfence.all_jobs WHERE id = %s", (old,)).fetchone() == (0,)  # expired
        assert attempts(c, "pgfence.all_attempts", keyed) == keyed_attempts
        assert c.execute("SELECT count(*) FROM pgfence.attempts WHERE job_id = %s", (keyed,)).fetchone() == (0,)
        assert c.execute("SELECT status, result FROM pgfence.job(%s)", (keyed,)).fetchone() == ("done", {"r": 1})
        assert c.execute("SELECT pgfence.enqueue('k', queue => 'up', idempotency_key => 'K')").fetchone() == (keyed,)
        c.execute("SELECT pgfence.complete(%s, %s, '{\"r\": 1}')", (keyed, second))  # a repeat: accepted
        with pytest.raises(psycopg.Error) as refused:
            c.execute("SELECT pgfence.complete(%s, %s)", (keyed, first))
        assert refused.value.sqlstate == "PF001"
        assert refused.value.diag.message_detail == "the job was completed by another attempt"
        c.execute("SELECT pgfence.complete(%s, %s)", (held, token))  # the lease from before the upgrade
        assert c.execute("SELECT count(*) FROM pgfence.finished_jobs WHERE id = %s", (held,)).fetchone() == (1,)

    _ok(sqitch("revert", "-y", "--to", "@v0.5.0", target=target), "revert --to @v0.5.0")
    _ok(sqitch("verify", target=target), "verify (reverted)")
    with connect(scratch_dsn) as c:
        assert c.execute("SELECT to_regclass('pgfence.finished_jobs'), to_regclass('pgfence.held_keys'),"
                         " to_regprocedure('pgfence.maintain_history()')").fetchone() == (None, None, None)
        assert c.execute("SELECT count(*) FROM pgfence.jobs WHERE status = 'done'").fetchone() == (27,)
        assert attempts(c, "pgfence.attempts", keyed) == keyed_attempts
        assert [a[3] for a in attempts(c, "pgfence.attempts", held)] == ["done"]
        assert c.execute("SELECT pgfence.enqueue('k', queue => 'up', idempotency_key => 'K')").fetchone() == (keyed,)


def test_sqitch_upgrades_a_database_deployed_at_v0_6_0_and_reverts_to_it(scratch_dsn: str) -> None:
    """Keys ready for distribution, and queue controls, in place: `sqitch deploy` from @v0.6.0 gives the
    attempts, rejections and overflow counts written before it their job's queue (those
    of a done job from its history row), puts queue into every key that refers to a job,
    and leaves live leases valid; `sqitch revert --to @v0.6.0` restores the keys without
    queue and the reworked writers exactly, and the rows stay."""
    target = sqitch_target(scratch_dsn)
    _ok(sqitch("deploy", "--to", "@v0.6.0", target=target), "deploy --to @v0.6.0")
    reworked = ["pgfence._recover(bigint[], uuid[], text, boolean)", "pgfence.cancel(bigint)",
                "pgfence.fail_many(bigint[], uuid[], text[], interval[], boolean[])",
                "pgfence._record_rejection(bigint, uuid, text, text)",
                "pgfence.claim(text, text[], interval, integer, uuid)"]
    keys = {"pgfence.jobs_pkey": ["id"], "pgfence.rejections_slot_idx": ["job_id", "slot"],
            "pgfence.rejection_overflow_pkey": ["job_id"]}

    def state(c: Conn) -> dict[str, Any]:
        out: dict[str, Any] = {r: c.execute("SELECT proacl::text, proconfig, md5(prosrc) FROM pg_proc"
                                            " WHERE oid = %s::regprocedure", (r,)).fetchone() for r in reworked}
        for index in keys:
            out[index] = key_columns(c, index)
        return out

    def key_columns(c: Conn, index: str) -> list[str]:
        return [r[0] for r in c.execute(
            "SELECT a.attname FROM pg_index i, unnest(i.indkey) WITH ORDINALITY k(attnum, n)"
            " JOIN pg_attribute a ON a.attnum = k.attnum"
            " WHERE i.indexrelid = %s::regclass AND a.attrelid = i.indrelid AND i.indisunique AND i.indisvalid"
            " ORDER BY k.n", (index,)).fetchall()]

    with connect(scratch_dsn) as c:
        before = state(c)
        assert before["pgfence.jobs_pkey"] == keys["pgfence.jobs_pkey"]
        c.execute("SELECT pgfence.pause_sweeper()")
        retried = c.execute("SELECT pgfence.enqueue('k', queue => 'q1')").fetchone()[0]  # type: ignore[index]
        [(first,)] = c.execute("SELECT attempt_token FROM pgfence.claim('w1', ARRAY['q1'])").fetchall()
        c.execute("SELECT pgfence.fail(%s, %s, 'boom', '0 seconds')", (retried, first))
        c.execute("SELECT pgfence.complete_many(ARRAY[%s]::bigint[], ARRAY[%s]::uuid[])", (retried, first))
        done = c.execute("SELECT pgfence.enqueue('k', queue => 'q2')").fetchone()[0]  # type: ignore[index]
        [(t1,)] = c.execute("SELECT attempt_token FROM pgfence.claim('w1', ARRAY['q2'])").fetchall()
        c.execute("SELECT pgfence.release(%s, %s)", (done, t1))
        [(t2,)] = c.execute("SELECT attempt_token FROM pgfence.claim('w2', ARRAY['q2'])").fetchall()
        c.execute("SELECT pgfence.complete(%s, %s)", (done, t2))
        c.execute("SELECT pgfence.complete_many(ARRAY[%s]::bigint[], ARRAY[%s]::uuid[])", (done, t1))
        c.execute("UPDATE pgfence.rejections SET slot = NULL WHERE job_id = %s", (done,))  # from before the cap
        c.execute("INSERT INTO pgfence.rejection_overflow (job_id, not_stored, last_rejected_at)"
                  " VALUES (%s, 3, now())", (done,))
        c.execute("INSERT INTO pgfence.attempts (job_id, attempt, attempt_token, worker, claimed_at, ended_at, outcome)"
                  " VALUES (-1, 1, gen_random_uuid(), 'w', now(), now(), 'released')")  # its job long purged
        [(live, token)] = c.execute("SELECT id, attempt_token FROM pgfence.claim('w3', ARRAY['q1'], '1 hour')"
                                    ).fetchall()
        assert live == retried
        rows = {t: c.execute(f"SELECT count(*) FROM pgfence.{t}").fetchone()[0]  # type: ignore[index]
                for t in ("attempts", "rejections", "rejection_overflow")}
        # (the released attempt of the done job went into its history row)
        assert rows == {"attempts": 2, "rejections": 2, "rejection_overflow": 1}

    out = _ok(sqitch("deploy", target=target), "deploy (upgrade)")
    assert "+ tables/job_queue_keys" in out and "+ data/job_queue_keys" in out, out
    _ok(sqitch("verify", target=target), "verify (upgraded)")
    with connect(scratch_dsn) as c:
        assert key_columns(c, "pgfence.jobs_pkey") == ["id", "queue"]
        assert key_columns(c, "pgfence.rejections_slot_idx") == ["job_id", "queue", "slot"]
        assert key_columns(c, "pgfence.rejection_overflow_pkey") == ["job_id", "queue"]
        assert c.execute("SELECT job_id, queue, outcome FROM pgfence.attempts ORDER BY job_id, attempt").fetchall() \
            == [(retried, "q1", "failed")]  # the orphan went
        assert c.execute("SELECT job_id, queue FROM pgfence.rejections ORDER BY job_id").fetchall() \
            == [(retried, "q1"), (done, "q2")]
        assert c.execute("SELECT job_id, queue FROM pgfence.rejection_overflow").fetchall() == [(done, "q2")]
        # a lease from before the upgrade completes; a refusal now is stored with its queue
        c.execute("SELECT pgfence.complete(%s, %s)", (live, token))
        c.execute("SELECT pgfence.complete_many(ARRAY[%s]::bigint[], ARRAY[%s]::uuid[])", (live, first))
        assert c.execute("SELECT queue, slot FROM pgfence.rejections WHERE job_id = %s ORDER BY slot",
                         (live,)).fetchall() == [("q1", 1), ("q1", 2)]
        assert c.execute("SELECT outcome FROM pgfence.attempts_of(%s)", (live,)).fetchall() == [("failed",), ("done",)]

    _ok(sqitch("revert", "-y", "--to", "@v0.6.0", target=target), "revert --to @v0.6.0")
    _ok(sqitch("verify", target=target), "verify (reverted)")
    with connect(scratch_dsn) as c:
        assert state(c) == before
        assert c.execute("SELECT to_regclass('pgfence.queue_controls'),"
                         " to_regprocedure('pgfence.pause_queue(text)')").fetchone() == (None, None)
        assert c.execute("SELECT count(*) FROM pg_attribute WHERE attname = 'queue' AND attrelid IN"
                         " ('pgfence.attempts'::regclass, 'pgfence.rejections'::regclass,"
                         " 'pgfence.rejection_overflow'::regclass)").fetchone() == (0,)
        assert c.execute("SELECT count(*) FROM pgfence.rejections").fetchone() == (3,)  # the live job is done
        fresh = c.execute("SELECT pgfence.enqueue('k', queue => 'q3')").fetchone()[0]  # type: ignore[index]
        [(t,)] = c.execute("SELECT attempt_token FROM pgfence.claim('w', ARRAY['q3'])").fetchall()
        c.execute("SELECT pgfence.fail(%s, %s, 'again', '0 seconds')", (fresh, t))
        c.execute("SELECT pgfence.complete_many(ARRAY[%s]::bigint[], ARRAY[%s]::uuid[])", (fresh, t))
        assert c.execute("SELECT count(*) FROM pgfence.rejections WHERE job_id = %s", (fresh,)).fetchone() == (1,)


def catalog(c: Conn) -> dict[str, Any]:
    """Schema pgfence as the catalog has it: every routine (signature, source, options,
    privileges), every table's columns, constraints, indexes, policies and grants. A
    revert restores the version before exactly when this compares equal."""
    def rows(sql: str) -> list[tuple[Any, ...]]:
        return c.execute(sql).fetchall()
    return {
        "routines": rows("SELECT p.oid::regprocedure::text, md5(p.prosrc), p.proconfig, p.proacl::text,"
                         " p.prosecdef, pg_get_function_result(p.oid),"
                         " obj_description(p.oid, 'pg_proc') IS NOT NULL"
                         " FROM pg_proc p WHERE p.pronamespace = 'pgfence'::regnamespace ORDER BY 1"),
        "columns": rows("SELECT a.attrelid::regclass::text, a.attname, format_type(a.atttypid, a.atttypmod),"
                        " a.attnotnull, pg_get_expr(d.adbin, d.adrelid)"
                        " FROM pg_attribute a JOIN pg_class r ON r.oid = a.attrelid"
                        " LEFT JOIN pg_attrdef d ON d.adrelid = a.attrelid AND d.adnum = a.attnum"
                        " WHERE r.relnamespace = 'pgfence'::regnamespace AND r.relkind IN ('r', 'p', 'v')"
                        " AND r.relispartition = false AND a.attnum > 0 AND NOT a.attisdropped ORDER BY 1, 2"),
        "constraints": rows("SELECT conrelid::regclass::text, conname, pg_get_constraintdef(oid)"
                            " FROM pg_constraint WHERE connamespace = 'pgfence'::regnamespace"
                            " AND conrelid IN (SELECT oid FROM pg_class WHERE NOT relispartition) ORDER BY 1, 2"),
        "indexes": rows("SELECT indexrelid::regclass::text, pg_get_indexdef(indexrelid) FROM pg_index i"
                        " JOIN pg_class r ON r.oid = i.indrelid WHERE r.relnamespace = 'pgfence'::regnamespace"
                        " AND NOT r.relispartition ORDER BY 1"),
        "policies": rows("SELECT tablename, policyname, roles::text, cmd, qual, with_check FROM pg_policies"
                         " WHERE schemaname = 'pgfence' ORDER BY 1, 2"),
        "grants": rows("SELECT oid::regclass::text, relacl::text FROM pg_class"
                       " WHERE relnamespace = 'pgfence'::regnamespace AND NOT relispartition ORDER BY 1"),
    }


# The history partitions' settings (functions/history after @v0.7.0), per partition: the
# table's reloptions and its BRIN index's, the default partition left out.
PARTITION_SETTINGS = """
    SELECT c.relname, c.reloptions::text, ic.reloptions::text
      FROM pg_inherits ii JOIN pg_class ic ON ic.oid = ii.inhrelid
      JOIN pg_index x ON x.indexrelid = ic.oid JOIN pg_class c ON c.oid = x.indrelid
     WHERE ii.inhparent = 'pgfence.finished_jobs_finished_idx'::regclass
       AND c.relname <> 'finished_jobs_default' ORDER BY 1"""


def test_sqitch_upgrades_a_database_deployed_at_v0_7_0_and_reverts_to_it(scratch_dsn: str) -> None:
    """The flow-control changes after @v0.7.0 deploy over a database in use and revert to
    it exactly: a lease taken before the upgrade completes after it, a paused and a
    capped queue keep their controls, and `sqitch revert --to @v0.7.0` leaves the
    catalog as @v0.7.0 made it, with the jobs still there and working."""
    target = sqitch_target(scratch_dsn)
    _ok(sqitch("deploy", "--to", "@v0.7.0", target=target), "deploy --to @v0.7.0")
    with connect(scratch_dsn) as c:
        before = catalog(c)
        c.execute("SELECT pgfence.pause_sweeper()")
        live = c.execute("SELECT pgfence.enqueue('k', queue => 'up7')").fetchone()[0]  # type: ignore[index]
        [(token,)] = c.execute("SELECT attempt_token FROM pgfence.claim('w1', ARRAY['up7'], '1 hour')").fetchall()
        queued = c.execute("SELECT pgfence.enqueue('k', queue => 'up7', idempotency_key => 'q')").fetchone()[0]  # type: ignore[index]
        c.execute("SELECT pgfence.pause_queue('paused7')")
        c.execute("SELECT pgfence.set_queue_limit('capped7', 2)")
        controls = c.execute("SELECT queue, paused_at IS NOT NULL, max_running FROM pgfence.queue_controls"
                             " ORDER BY queue").fetchall()

    _ok(sqitch("deploy", target=target), "deploy (upgrade)")
    _ok(sqitch("verify", target=target), "verify (upgraded)")
    with connect(scratch_dsn) as c:
        assert c.execute("SELECT queue, paused_at IS NOT NULL, max_running FROM pgfence.queue_controls"
                         " ORDER BY queue").fetchall() == controls
        c.execute("SELECT pgfence.complete(%s, %s)", (live, token))  # the lease from before the upgrade
        assert c.execute("SELECT status FROM pgfence.all_jobs WHERE id = %s", (live,)).fetchone() == ("done",)
        assert c.execute("SELECT pgfence.enqueue('k', queue => 'up7', idempotency_key => 'q')").fetchone() == (queued,)
        # The partitions @v0.7.0 made got the settings of those made from now on.
        parts = c.execute(PARTITION_SETTINGS).fetchall()
        assert parts and all(p[1:] == ("{autovacuum_vacuum_insert_threshold=-1,autovacuum_analyze_scale_factor=4}",
                                       "{autosummarize=on}") for p in parts), parts

    _ok(sqitch("revert", "-y", "--to", "@v0.7.0", target=target), "revert --to @v0.7.0")
    _ok(sqitch("verify", target=target), "verify (reverted)")
    with connect(scratch_dsn) as c:
        parts = c.execute(PARTITION_SETTINGS).fetchall()
        assert parts and all(p[1:] == (None, None) for p in parts), parts  # autovacuum's defaults again
        after = catalog(c)
        for part in before:
            assert after[part] == before[part], part
        assert c.execute("SELECT queue, paused_at IS NOT NULL, max_running FROM pgfence.queue_controls"
                         " ORDER BY queue").fetchall() == controls
        assert c.execute("SELECT status FROM pgfence.all_jobs WHERE id = %s", (live,)).fetchone() == ("done",)
        [(again, t)] = c.execute("SELECT id, attempt_token FROM pgfence.claim('w2', ARRAY['up7'])").fetchall()
        assert again == queued
        c.execute("SELECT pgfence.complete(%s, %s)", (again, t))


def test_sqitch_upgrade_from_v0_7_0_runs_with_standard_conforming_strings_off(scratch_dsn: str) -> None:
    """A server or deployer with standard_conforming_strings off (docs/operations.md: the
    tagged scripts need it on, the changes after @v0.7.0 do not): the upgrade from
    @v0.7.0 deploys and verifies without a warning about escapes, and enqueue and claim
    then work from a session with it off (before the rework of functions/_checks, both
    failed with 22021 there)."""
    target = sqitch_target(scratch_dsn)
    _ok(sqitch("deploy", "--to", "@v0.7.0", target=target), "deploy --to @v0.7.0")
    env = dict(os.environ, PGOPTIONS="-c standard_conforming_strings=off -c escape_string_warning=on")
    out = _ok(sqitch("deploy", target=target, env=env), "deploy (upgrade, standard_conforming_strings off)")
    out += _ok(sqitch("verify", target=target, env=env), "verify (standard_conforming_strings off)")
    assert "escape" not in out, out
    with connect(scratch_dsn, options="-c standard_conforming_strings=off") as c:
        assert c.execute("SHOW standard_conforming_strings").fetchone() == ("off",)
        job = c.execute("SELECT pgfence.enqueue('k', queue => 'scs-off')").fetchone()
        assert c.execute("SELECT id FROM pgfence.claim('w', ARRAY['scs-off', 'scs-other'])").fetchall() == [job]


def test_sqitch_upgrade_from_v0_7_0_keeps_timeouts_and_unique_keys_working_and_reverts(scratch_dsn: str) -> None:
    """Run timeouts and unique_for: `sqitch deploy` from @v0.7.0 keeps a live lease valid and
    adds the arguments; `sqitch revert --to @v0.7.0` while a job has a timeout set, one has
    timed out and a done job's key has a held_until does not fail: enqueue and
    enqueue_many get their old signatures back (no overload left), the reworked routines
    their @v0.7.0 definitions, the timed-out attempt stays as reclaimed, the columns go."""
    target = sqitch_target(scratch_dsn)
    _ok(sqitch("deploy", "--to", "@v0.7.0", target=target), "deploy --to @v0.7.0")
    reworked = ["pgfence._recover(bigint[], uuid[], text, boolean)", "pgfence._fence_detail(text, uuid, uuid, text, text)",
                "pgfence.heartbeat_many(bigint[], uuid[], interval)", "pgfence.complete_many(bigint[], uuid[], jsonb[])",
                "pgfence.claim(text, text[], interval, integer, uuid)", "pgfence._held_key(text, text)",
                "pgfence.enqueue(text, jsonb, text, integer, timestamptz, integer, text, text)",
                "pgfence.enqueue_many(text[], jsonb[], text, integer[], timestamptz[], integer, text, text[])"]

    def state(c: Conn) -> dict[str, Any]:
        return {r: c.execute("SELECT proacl::text, proconfig, md5(prosrc), obj_description(oid, 'pg_proc')"
                             " FROM pg_proc WHERE oid = to_regprocedure(%s)", (r,)).fetchone() for r in reworked}

    with connect(scratch_dsn) as c:
        before = state(c)
        assert all(v is not None for v in before.values())
        c.execute("SELECT pgfence.pause_sweeper()")
        old = c.execute("SELECT pgfence.enqueue('k', queue => 'q1')").fetchone()[0]  # type: ignore[index]
        [(old_token,)] = c.execute("SELECT attempt_token FROM pgfence.claim('w', ARRAY['q1'], '1 hour')").fetchall()

    out = _ok(sqitch("deploy", target=target), "deploy (upgrade)")
    assert "+ tables/job_timeouts" in out and "+ functions/queue_timeouts" in out, out
    _ok(sqitch("verify", target=target), "verify (upgraded)")
    with connect(scratch_dsn) as c:
        c.execute("SELECT pgfence.heartbeat(%s, %s, '1 hour')", (old, old_token))  # a lease from before
        c.execute("SELECT pgfence.set_queue_timeout('q2', '1 hour')")
        timed = c.execute("SELECT pgfence.enqueue('k', queue => 'q3', timeout => '100 milliseconds')"
                          ).fetchone()[0]  # type: ignore[index]
        [(t,)] = c.execute("SELECT attempt_token FROM pgfence.claim('w', ARRAY['q3'])").fetchall()
        c.execute("SELECT pg_sleep(0.15)")
        assert c.execute("SELECT count(*) FROM pgfence.reclaim_expired()").fetchone() == (1,)
        assert c.execute("SELECT outcome FROM pgfence.attempts WHERE job_id = %s", (timed,)).fetchall() == [
            ("timed_out",)]
        c.execute("SELECT pgfence.enqueue('k', queue => 'q2')")  # the queue's default: a timeout set
        running = c.execute("SELECT pgfence.enqueue('k', queue => 'q4', timeout => '1 hour')"
                            ).fetchone()[0]  # type: ignore[index]
        c.execute("SELECT * FROM pgfence.claim('w', ARRAY['q4'], '1 minute')")
        keyed = c.execute("SELECT pgfence.enqueue('k', queue => 'q5', idempotency_key => 'x', unique_for => '1 day')"
                          ).fetchone()[0]  # type: ignore[index]
        [(kt,)] = c.execute("SELECT attempt_token FROM pgfence.claim('w', ARRAY['q5'])").fetchall()
        c.execute("SELECT pgfence.complete(%s, %s)", (keyed, kt))
        assert c.execute("SELECT count(*) FROM pgfence.jobs WHERE timeout IS NOT NULL").fetchone() == (3,)
        # a set of queues stored on the server, claimed from by name
        c.execute("SELECT pgfence.define_queue_set('set6', ARRAY['q6', 'q7'])")
        in_set = c.execute("SELECT pgfence.enqueue('k', queue => 'q7')").fetchone()[0]  # type: ignore[index]
        assert c.execute("SELECT id FROM pgfence.claim('w', queue_set => 'set6')").fetchall() == [(in_set,)]

    _ok(sqitch("revert", "-y", "--to", "@v0.7.0", target=target), "revert --to @v0.7.0")
    _ok(sqitch("verify", target=target), "verify (reverted)")
    with connect(scratch_dsn) as c:
        assert state(c) == before
        for gone in ("pgfence.enqueue(text, jsonb, text, integer, timestamptz, integer, text, text, interval, interval)",
                     "pgfence.set_queue_timeout(text, interval)", "pgfence._end_timed_out(bigint[], uuid[])",
                     CLAIM_NOW, "pgfence.define_queue_set(text, text[])", "pgfence._claim_from_set(jsonb, integer,"
                     " integer, timestamptz)", "pgfence._check_queues(text, text[], text)"):
            assert c.execute("SELECT to_regprocedure(%s)", (gone,)).fetchone() == (None,), gone
        assert c.execute("SELECT to_regclass('pgfence.queue_timeouts'), to_regclass('pgfence.queue_sets')"
                         ).fetchone() == (None, None)
        assert c.execute("SELECT count(*) FROM information_schema.columns WHERE table_schema = 'pgfence'"
                         " AND column_name IN ('timeout', 'unique_for', 'held_until')").fetchone() == (0,)
        assert c.execute("SELECT outcome FROM pgfence.attempts WHERE job_id = %s", (timed,)).fetchall() == [
            ("reclaimed",)]
        # the running job, whose lease the timeout capped, completes; the old key is still held
        [(rt,)] = c.execute("SELECT attempt_token FROM pgfence.jobs WHERE id = %s", (running,)).fetchall()
        c.execute("SELECT pgfence.complete(%s, %s)", (running, rt))
        assert c.execute("SELECT pgfence.enqueue('k', queue => 'q5', idempotency_key => 'x')").fetchone() == (keyed,)
        c.execute("SELECT pgfence.complete(%s, %s)", (old, old_token))
        c.execute("SELECT pgfence.resume_sweeper()")


def test_sqitch_upgrade_from_v0_7_0_keeps_snoozes_and_rate_limits_working_and_reverts(scratch_dsn: str) -> None:
    """Snooze and rate limits after @v0.7.0: `sqitch deploy` from @v0.7.0 adds snooze and the
    outcome snoozed (leases from before stay valid and can be snoozed) and the rate limit on
    pgfence.queue_controls (a cap from before stays); `sqitch revert --to @v0.7.0` restores
    the reworked routines, the outcome list and the table exactly, a snoozed attempt kept as
    released, a queue that had only a rate limit unlimited again, the cap kept."""
    target = sqitch_target(scratch_dsn)
    _ok(sqitch("deploy", "--to", "@v0.7.0", target=target), "deploy --to @v0.7.0")
    reworked = ["pgfence.report_rejection(bigint, uuid, text)", "pgfence.limits()", "pgfence.queue_limits()",
                "pgfence._claim_controlled(text[], integer, timestamptz)", "pgfence.resume_queue(text)",
                "pgfence.set_queue_limit(text, integer)"]

    def state(c: Conn) -> dict[str, Any]:
        out: dict[str, Any] = {r: c.execute("SELECT proacl::text, proconfig, md5(prosrc) FROM pg_proc"
                                            " WHERE oid = %s::regprocedure", (r,)).fetchone() for r in reworked}
        out["outcomes"] = c.execute("SELECT pg_get_constraintdef(oid) FROM pg_constraint"
                                    " WHERE conname = 'attempts_outcome_valid'").fetchone()
        out["controls"] = c.execute("SELECT array_agg(attname::text ORDER BY attnum) FROM pg_attribute"
                                    " WHERE attrelid = 'pgfence.queue_controls'::regclass AND attnum > 0"
                                    " AND NOT attisdropped").fetchone()
        out["controls_checks"] = c.execute("SELECT array_agg(pg_get_constraintdef(oid) ORDER BY conname)"
                                           " FROM pg_constraint WHERE conrelid = 'pgfence.queue_controls'::regclass"
                                           ).fetchone()
        return out

    with connect(scratch_dsn) as c:
        before = state(c)
        c.execute("SELECT pgfence.pause_sweeper()")
        job_id = c.execute("SELECT pgfence.enqueue('k', queue => 'q1')").fetchone()[0]  # type: ignore[index]
        [(token,)] = c.execute("SELECT attempt_token FROM pgfence.claim('w1', ARRAY['q1'], '1 hour')").fetchall()
        c.execute("SELECT pgfence.set_queue_limit('capped', 2)")

    out = _ok(sqitch("deploy", target=target), "deploy (upgrade)")
    assert "+ functions/snooze" in out and "+ tables/queue_rate_limits" in out, out
    _ok(sqitch("verify", target=target), "verify (upgraded)")
    with connect(scratch_dsn) as c:
        assert c.execute("SELECT pgfence.snooze(%s, %s, '1 hour')", (job_id, token)).fetchone() == ("queued",)
        assert c.execute("SELECT attempt, outcome FROM pgfence.attempts_of(%s)", (job_id,)).fetchall() == [
            (1, "snoozed")]
        c.execute("SELECT pgfence.set_queue_rate_limit('capped', 5, '1 minute')")
        c.execute("SELECT pgfence.set_queue_rate_limit('rated', 1, '1 minute')")
        c.execute("SELECT pgfence.enqueue_many(ARRAY['k', 'k'], queue => 'rated')")
        assert len(c.execute("SELECT * FROM pgfence.claim('w', ARRAY['rated'], max_jobs => 2)").fetchall()) == 1
        assert c.execute("SELECT queue, max_running, max_claims FROM pgfence.queue_limits()").fetchall() == [
            ("capped", 2, 5), ("rated", None, 1)]

    _ok(sqitch("revert", "-y", "--to", "@v0.7.0", target=target), "revert --to @v0.7.0")
    _ok(sqitch("verify", target=target), "verify (reverted)")
    with connect(scratch_dsn) as c:
        assert state(c) == before
        assert c.execute("SELECT to_regprocedure('pgfence.snooze(bigint, uuid, interval)')").fetchone() == (None,)
        assert c.execute("SELECT attempt, outcome FROM pgfence.attempts_of(%s)", (job_id,)).fetchall() == [
            (1, "released")]
        assert c.execute("SELECT status FROM pgfence.job(%s)", (job_id,)).fetchone() == ("queued",)
        assert c.execute("SELECT queue, max_running FROM pgfence.queue_limits()").fetchall() == [("capped", 2)]


def test_a_claim_over_a_stored_set_works_in_every_revert_step_of_the_controlled_pick(scratch_dsn: str) -> None:
    """While a queue has a control, claim(queue_set) hands the set to _claim_controlled over
    a set, which functions/queue_controls adds after functions/claim in the plan. A revert
    to a change between the two (functions/queue_controls reverted, the new claim kept,
    the sets still defined) leaves it as a wrapper of the @v0.7.0 list body: the claim
    still keeps to the paused queue; the revert to @v0.7.0 then drops it with the claim."""
    target = sqitch_target(scratch_dsn)
    _ok(sqitch("deploy", target=target), "deploy")
    set_pick = "pgfence._claim_controlled(jsonb, integer, integer, timestamptz)"
    with connect(scratch_dsn) as c:
        c.execute("SELECT pgfence.pause_sweeper()")
        c.execute("SELECT pgfence.enqueue('k', queue => q) FROM unnest(ARRAY['sa', 'sb', 'sp']) q")
        c.execute("SELECT pgfence.define_queue_set('ctl', ARRAY['sa', 'sb', 'sp'])")
        c.execute("SELECT pgfence.pause_queue('sp')")
        claim = "SELECT queue FROM pgfence.claim('w', queue_set => 'ctl', max_jobs => 5) ORDER BY queue"
        with c.transaction(force_rollback=True):
            assert c.execute(claim).fetchall() == [("sa",), ("sb",)]
    _ok(sqitch("revert", "-y", "--to", "tables/queue_rate_limits", target=target),
        "revert --to tables/queue_rate_limits (functions/queue_controls reverted, functions/claim kept)")
    with connect(scratch_dsn) as c:
        assert c.execute("SELECT l.lanname FROM pg_proc p JOIN pg_language l ON l.oid = p.prolang"
                         " WHERE p.oid = to_regprocedure(%s)", (set_pick,)).fetchone() == ("sql",)
        with c.transaction(force_rollback=True):
            assert c.execute(claim).fetchall() == [("sa",), ("sb",)]
    _ok(sqitch("revert", "-y", "--to", "@v0.7.0", target=target), "revert --to @v0.7.0")
    with connect(scratch_dsn) as c:
        assert c.execute("SELECT to_regprocedure(%s)", (set_pick,)).fetchone() == (None,)


def test_revert_to_v0_7_0_does_not_hold_again_a_key_whose_unique_for_passed(scratch_dsn: str) -> None:
    """A done job's key whose unique_for has passed is free; `sqitch revert --to @v0.7.0`
    must leave it free. Before the review the revert only dropped held_keys.held_until, so
    the @v0.7.0 enqueue (which reads held_keys without it) answered with the old done job
    again, until its retention passed (by default days later)."""
    target = sqitch_target(scratch_dsn)
    _ok(sqitch("deploy", target=target), "deploy")
    with connect(scratch_dsn) as c:
        c.execute("SELECT pgfence.pause_sweeper()")
        old = c.execute("SELECT pgfence.enqueue('k', queue => 'qu', idempotency_key => 'x', unique_for => '1 second')"
                        ).fetchone()[0]  # type: ignore[index]
        held = c.execute("SELECT pgfence.enqueue('k', queue => 'qu', idempotency_key => 'y', unique_for => '1 day')"
                         ).fetchone()[0]  # type: ignore[index]
        for _ in range(2):
            [(jid, tok)] = c.execute("SELECT id, attempt_token FROM pgfence.claim('w', ARRAY['qu'])").fetchall()
            c.execute("SELECT pgfence.complete(%s, %s)", (jid, tok))
        c.execute("SELECT pg_sleep(1.1)")
        with c.transaction(force_rollback=True):  # free now (a new job), but leave nothing behind
            assert c.execute("SELECT pgfence.enqueue('k', queue => 'qu', idempotency_key => 'x')").fetchone() != (old,)
    _ok(sqitch("revert", "-y", "--to", "@v0.7.0", target=target), "revert --to @v0.7.0")
    with connect(scratch_dsn) as c:
        new = c.execute("SELECT pgfence.enqueue('k', queue => 'qu', idempotency_key => 'x')").fetchone()
        assert new != (old,), "a key whose unique_for had passed is held again after the revert"
        # a key still held by its unique_for stays held (longer now: until its retention)
        assert c.execute("SELECT pgfence.enqueue('k', queue => 'qu', idempotency_key => 'y')").fetchone() == (held,)
        c.execute("SELECT pgfence.resume_sweeper()")


@pytest.mark.parametrize("change", ["tables/job_timeouts", "tables/job_unique_for", "tables/job_row_rules"])
def test_deploying_a_new_jobs_column_behind_a_long_transaction_does_not_stall_enqueues(
        scratch_dsn: str, change: str) -> None:
    """The changes that add a column and a CHECK to pgfence.jobs after @v0.7.0 must not
    queue an ACCESS EXCLUSIVE request behind a long transaction (every enqueue, claim
    and complete would wait behind it) nor scan the table under that lock. Before the
    review they ran a plain ALTER TABLE ... ADD CONSTRAINT (validated): an enqueue waited
    for as long as the reader's transaction stayed open."""
    import threading
    target = sqitch_target(scratch_dsn)
    _ok(sqitch("deploy", "--to", "@v0.7.0", target=target), "deploy --to @v0.7.0")
    reader = psycopg.connect(scratch_dsn)  # a long transaction that read pgfence.jobs
    reader.execute("SELECT count(*) FROM pgfence.jobs")
    result: dict[str, Any] = {}
    t = threading.Thread(target=lambda: result.update(
        r=sqitch("deploy", "--to", change, target=target, timeout=120)))
    t.start()
    try:
        with connect(scratch_dsn) as c:
            c.execute("SELECT pg_sleep(1)")  # the deploy is waiting for its lock by now
            c.execute("SET statement_timeout = '3s'")
            c.execute("SELECT pgfence.enqueue('k', queue => 'q')")  # 57014 when stalled
    finally:
        reader.rollback()
        reader.close()
        t.join()
    _ok(result["r"], f"deploy --to {change}")
    _ok(sqitch("verify", target=target), "verify")
    with connect(scratch_dsn) as c:
        assert c.execute("SELECT count(*) FROM pg_constraint WHERE conrelid IN ('pgfence.jobs'::regclass,"
                         " 'pgfence.attempts'::regclass) AND NOT convalidated").fetchone() == (0,)


def test_the_history_counts_deploy_over_a_history_and_revert_exactly(scratch_dsn: str) -> None:
    """functions/history_counts over a database with done jobs in its history: metrics()
    and stats() give the same numbers before, right after the deploy (nothing counted
    yet), after the purge has counted (the watermark past every job) and after
    `sqitch revert --to functions/purge_plans`, which leaves the catalog as it was."""
    target = sqitch_target(scratch_dsn)
    _ok(sqitch("deploy", "--to", "functions/purge_plans", target=target), "deploy --to functions/purge_plans")

    def figures(c: Conn) -> Any:
        return (c.execute("SELECT name, labels, value FROM pgfence.metrics() WHERE type = 'counter'"
                          " OR name = 'pgfence_jobs' ORDER BY 1, 2::text").fetchall(),
                c.execute("SELECT queue, status, jobs FROM pgfence.stats() ORDER BY 1, 2").fetchall())
    with connect(scratch_dsn) as c:
        c.execute("SELECT pgfence.pause_sweeper()")
        for queue, n in (("hc-a", 30), ("hc-b", 7)):
            c.execute("SELECT pgfence.enqueue_many(array_fill('k'::text, ARRAY[%s]), queue => %s)", (n, queue))
            c.execute("SELECT pgfence.release(id, attempt_token) FROM pgfence.claim('w', ARRAY[%s], max_jobs => 3)",
                      (queue,))
            c.execute("SELECT count(*) FROM pgfence.claim('w', ARRAY[%s], max_jobs => 100) x,"
                      " LATERAL pgfence.complete(x.id, x.attempt_token)", (queue,))
        before, catalog_before = figures(c), catalog(c)
        assert ("hc-a", "done", 30) in before[1] and ("hc-b", "done", 7) in before[1]
    _ok(sqitch("deploy", target=target), "deploy functions/history_counts")
    _ok(sqitch("verify", target=target), "verify (deployed)")
    with connect(scratch_dsn) as c:
        assert figures(c) == before
        # (purges until the watermark passes every job: a write transaction anywhere on
        # the cluster may hold it back a moment)
        for _ in range(100):
            c.execute("SELECT pgfence.purge_finished()")
            if c.execute("SELECT counted_to > (SELECT max(finished_at) FROM pgfence.finished_jobs)"
                         " FROM pgfence.history_count_state").fetchone() == (True,):
                break
            time.sleep(0.1)
        assert c.execute("SELECT counted_to > (SELECT max(finished_at) FROM pgfence.finished_jobs)"
                         " FROM pgfence.history_count_state").fetchone() == (True,)
        assert c.execute("SELECT sum(n) FROM pgfence.history_counts WHERE metric = 'jobs_done'").fetchone() == (37,)
        assert figures(c) == before
    _ok(sqitch("revert", "-y", "--to", "functions/purge_plans", target=target), "revert --to functions/purge_plans")
    _ok(sqitch("verify", target=target), "verify (reverted)")
    with connect(scratch_dsn) as c:
        assert figures(c) == before
        after = catalog(c)
        for part in catalog_before:
            assert after[part] == catalog_before[part], part
