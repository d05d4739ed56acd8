"""A claim locks only the jobs it returns, over any number of queues, in claim order.

Before the rework after @v0.3.0, ``claim(queues => NULL)`` locked up to max_jobs
rows in every queue (2,000 queues of 50 jobs: a claim of 10 locked 19,990 extra
rows, until it committed, so concurrent claimers skipped jobs they could have
taken). Each shape of ``queues`` has its own path now (NULL, one queue, a list); each
is checked here for what it locks and reads (a list reads no job of a queue it does
not name), and hypothesis checks that every path
returns exactly the first max_jobs runnable jobs in claim order (priority DESC,
available_at, id). A database of this module's own, so that a claim over all queues
sees only these jobs.
"""
from __future__ import annotations

from collections.abc import Iterator
from datetime import timedelta
from typing import Any, Optional, Sequence

import psycopg
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from support.db import assert_error, connect, scratch_database, sqitch_deploy, sql_error
from support.roles import connect_as, login_roles

Conn = psycopg.Connection[Any]


@pytest.fixture(scope="module")
def own_dsn(dsn: str) -> Iterator[str]:
    with scratch_database(dsn, "pgfence_claims") as the_dsn:
        sqitch_deploy(the_dsn)
        # No autovacuum here: a vacuumed page is all-visible, and an index-only scan then
        # skips the heap, so the rows-read counts below would depend on its timing.
        with connect(the_dsn) as c:
            c.execute("ALTER TABLE pgfence.jobs SET (autovacuum_enabled = false)")
        yield the_dsn


@pytest.fixture
def db(own_dsn: str) -> Iterator[Conn]:
    """An autocommit connection to the module's database; its jobs are deleted after the test."""
    c = connect(own_dsn)
    try:
        yield c
    finally:
        c.execute("TRUNCATE pgfence.jobs, pgfence.attempts, pgfence.rejections")
        c.close()


def fill(conn: Conn, queues: int, per_queue: int) -> list[str]:
    names = [f"q{i:05d}" for i in range(queues)]
    conn.execute("""INSERT INTO pgfence.jobs (queue, kind) SELECT q, 'k' FROM unnest(%s::text[]) q,
                    generate_series(1, %s)""", (names, per_queue))
    conn.execute("ANALYZE pgfence.jobs")
    return names


def lockable(conn: Conn) -> int:
    """Queued jobs no other transaction holds a lock on (this one may lock them: SKIP LOCKED)."""
    with conn.transaction(force_rollback=True):
        return int(conn.execute("SELECT count(*) FROM (SELECT id FROM pgfence.jobs WHERE status = 'queued'"
                                " FOR UPDATE SKIP LOCKED) x").fetchone()[0])  # type: ignore[index]


def claim_sql(via: str, queues: Optional[list[str]], conn: Conn) -> tuple[str, tuple[Any, ...]]:
    """claim's queues argument as SQL: the list itself, or (via "set") a set of those
    names defined first (in conn's transaction) and named with queue_set."""
    if via == "set" and queues is not None:
        conn.execute("SELECT pgfence.define_queue_set('the-set', %s)", (queues,))
        return "NULL, queue_set => 'the-set'", ()
    return "%s::text[]", (queues,)


@pytest.mark.parametrize("via", ["list", "set"])
@pytest.mark.parametrize("shape", ["all", "one", "few", "many"])
def test_a_claim_locks_only_the_jobs_it_returns(own_dsn: str, db: Conn, shape: str, via: str) -> None:
    names = fill(db, 200, 5)
    queues: Optional[list[str]] = {"all": None, "one": names[:1], "few": names[:5], "many": names[:50]}[shape]
    with connect(own_dsn, autocommit=False) as claimer:
        arg, params = claim_sql(via, queues, claimer)
        got = claimer.execute(f"SELECT id FROM pgfence.claim('w', {arg}, lease => '1 minute', max_jobs => 10)",
                              params).fetchall()
        assert len(got) == {"one": 5}.get(shape, 10)
        # still in the claim's transaction: only what it returned is locked
        assert lockable(db) == 1000 - len(got)
        claimer.rollback()
    assert lockable(db) == 1000


@pytest.mark.parametrize("queues", [3, 40])
def test_a_claim_over_a_list_goes_past_the_jobs_another_claim_holds(own_dsn: str, db: Conn, queues: int) -> None:
    names = fill(db, queues, 10)
    with connect(own_dsn, autocommit=False) as first, connect(own_dsn) as second:
        a = [r[0] for r in first.execute("SELECT id FROM pgfence.claim('a', %s, '1 minute', 5)", (names,))]
        b = [r[0] for r in second.execute("SELECT id FROM pgfence.claim('b', %s, '1 minute', 5)", (names,))]
        assert len(a) == len(b) == 5 and not set(a) & set(b)
        # the second got the next five in claim order
        order = [r[0] for r in db.execute("SELECT id FROM pgfence.jobs WHERE queue = ANY (%s)"
                                           " ORDER BY priority DESC, available_at, id LIMIT 10", (names,))]
        assert (a, sorted(b)) == (order[:5], sorted(order[5:]))
        first.rollback()


def heap_rows_read(conn: Conn) -> int:
    """Rows of pgfence.jobs this transaction has read so far (by index and by scan; an
    index-only scan of an all-visible page reads none: the module's table is never
    vacuumed)."""
    row = conn.execute("SELECT coalesce(idx_tup_fetch, 0) + coalesce(seq_tup_read, 0) FROM pg_stat_xact_user_tables"
                       " WHERE relid = 'pgfence.jobs'::regclass").fetchone()
    return int(row[0]) if row else 0


@pytest.mark.parametrize("via", ["list", "set"])
@pytest.mark.parametrize("listed", [2, 16, 17, 1000, 10000])
def test_a_list_reads_few_jobs_of_the_queues_it_does_not_name(own_dsn: str, db: Conn, listed: int,
                                                              via: str) -> None:
    """A claim over 17 or more names walked the claim order over all queues, reading
    every queued job of the queues it did not name when its own were idle: beside
    20,000 jobs queued elsewhere, 25 ms for 17 names and 5 s for 10,000. Now a long
    list reads at most a window of 4 * max_jobs + 64 of them, and 16 names or fewer
    none. A stored set of the same names (queue_set) reads the same."""
    fill(db, 1, 5000)  # q00000: the backlog elsewhere
    idle = [f"idle{i}" for i in range(listed)]
    window = 0 if listed <= 16 else 4 * 10 + 64
    if via == "set":
        db.execute("SELECT pgfence.define_queue_set('idle', %s)", (idle,))
    arg, params = ("NULL, queue_set => 'idle'", ()) if via == "set" else ("%s::text[]", (idle,))
    with connect(own_dsn, autocommit=False) as c:
        assert c.execute(f"SELECT count(*) FROM pgfence.claim('w', {arg}, lease => '1 minute', max_jobs => 10)",
                         params).fetchone() == (0,)
        assert heap_rows_read(c) == window
        c.rollback()
    # two of the listed queues with three jobs each: the claim reads about what it takes
    db.execute("SELECT pgfence.enqueue('k', '{}', q) FROM unnest(%s::text[]) q, generate_series(1, 3)",
               (idle[-2:],))
    want = [r[0] for r in db.execute("SELECT id FROM pgfence.jobs WHERE queue = ANY (%s)"
                                      " ORDER BY priority DESC, available_at, id LIMIT 5", (idle[-2:],))]
    with connect(own_dsn, autocommit=False) as c:
        got = [r[0] for r in c.execute(f"SELECT id FROM pgfence.claim('w', {arg}, lease => '1 minute', max_jobs => 5)",
                                       params)]
        read = heap_rows_read(c)
        c.rollback()
    assert got == want
    # the window (none for 16 names or fewer), the heads, the ranked queues' jobs, the locks, the claim
    assert read == (0 if listed <= 16 else 4 * 5 + 64) + 2 + 6 + 5 + 5, read


def test_queues_holds_at_most_10000_names(db: Conn) -> None:
    too_many = [f"q{i}" for i in range(10001)]
    err = sql_error(db, "SELECT * FROM pgfence.claim('w', %s)", (too_many,))
    assert_error(err, "22023", "queues length")
    assert db.execute("SELECT count(*) FROM pgfence.claim('w', %s)", (too_many[:10000],)).fetchone() == (0,)


JOB = st.tuples(st.integers(0, 19), st.integers(-2, 2), st.sampled_from([-3600, -60, 0, 3600]))  # queue, priority, run_at


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(jobs=st.lists(JOB, min_size=0, max_size=60), shape=st.sampled_from(["all", "one", "few", "many"]),
       pick=st.lists(st.integers(0, 19), min_size=1, max_size=19, unique=True), max_jobs=st.integers(1, 25),
       via=st.sampled_from(["list", "set"]))
def test_every_path_returns_the_first_runnable_jobs_in_claim_order(
        own_dsn: str, jobs: list[tuple[int, int, int]], shape: str, pick: list[int], max_jobs: int,
        via: str) -> None:
    assert_first_runnable_in_claim_order(own_dsn, jobs, queues_of(shape, pick), max_jobs, via)


def queues_of(shape: str, pick: list[int]) -> Optional[list[str]]:
    """claim's queues of a shape: all (NULL), one, a few (16 or fewer names), or many (more
    than 16 names, some with no jobs at all), from the picked queue numbers."""
    if shape == "all":
        return None
    if shape == "one":
        return [f"h{pick[0]}"]
    if shape == "few":
        return [f"h{i}" for i in pick[:16]]
    return [f"h{i}" for i in range(20)] if len(pick) <= 16 else [f"h{i}" for i in pick] + ["none1", "none2"]


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(jobs=st.lists(JOB, min_size=60, max_size=160), pick=st.lists(st.integers(0, 19), min_size=1, max_size=3,
                                                                      unique=True),
       max_jobs=st.integers(1, 25), via=st.sampled_from(["list", "set"]))
def test_a_long_list_of_rare_queues_returns_the_first_runnable_jobs_in_claim_order(
        own_dsn: str, jobs: list[tuple[int, int, int]], pick: list[int], max_jobs: int, via: str) -> None:
    """A long list whose queues hold few of the jobs at the front: the window over all
    queues fills without enough of them, and the heads are read instead."""
    queues = [f"h{i}" for i in pick] + [f"none{i}" for i in range(20)]
    assert_first_runnable_in_claim_order(own_dsn, jobs, queues, max_jobs, via)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(jobs=st.lists(JOB, min_size=0, max_size=60), shape=st.sampled_from(["all", "one", "few", "many"]),
       pick=st.lists(st.integers(0, 19), min_size=1, max_size=19, unique=True),
       paused=st.sets(st.integers(0, 19), max_size=6), max_jobs=st.integers(1, 25),
       capped=st.one_of(st.none(), st.tuples(st.integers(0, 19), st.integers(1, 3))), repeat=st.booleans(),
       via=st.sampled_from(["list", "set"]))
def test_with_queue_controls_every_path_returns_the_first_runnable_jobs_of_unpaused_queues(
        own_dsn: str, jobs: list[tuple[int, int, int]], shape: str, pick: list[int], paused: set[int],
        max_jobs: int, capped: Optional[tuple[int, int]], repeat: bool, via: str) -> None:
    """While a queue has a control (a cap on a queue no claim names, paused queues,
    listed or not, maybe a cap on one of them), claims pick through _claim_controlled: a
    stored set whole, a list (maybe with names repeated) or one queue as a set, every
    queue by its window. Each returns the first runnable jobs of its unpaused, uncapped
    queues in claim order, then as many of a capped queue's first ones as its cap and
    max_jobs allow, all in claim order."""
    queues = queues_of(shape, pick)
    if repeat and queues is not None:
        queues = queues + queues[:3]
    assert_first_runnable_in_claim_order(own_dsn, jobs, queues, max_jobs, via,
                                         paused=[f"h{i}" for i in sorted(paused)], controlled=True,
                                         capped=None if capped is None else (f"h{capped[0]}", capped[1]))


def test_a_claim_over_a_stored_set_passes_it_whole_to_the_controlled_pick(own_dsn: str, db: Conn) -> None:
    """With a queue control present, claim(queue_set) hands the stored set to
    _claim_controlled(jsonb, ...) as it is: the set is not turned back into a list of
    its names (which made a claim over 10,000 names as slow as sending the list)."""
    names = fill(db, 40, 2)
    db.execute("SELECT pgfence.define_queue_set('whole', %s)", (names,))
    with connect(own_dsn, autocommit=False) as c:
        c.execute("SET LOCAL track_functions = 'all'")
        c.execute("SELECT pgfence.pause_queue(%s)", (names[0],))
        got = c.execute("SELECT queue FROM pgfence.claim('w', queue_set => 'whole', max_jobs => 5)").fetchall()
        calls = dict(c.execute("SELECT f.funcid::regprocedure::text, f.calls FROM pg_stat_xact_user_functions f"
                               " WHERE f.funcname = '_claim_controlled'").fetchall())
        c.rollback()
    assert len(got) == 5 and names[0] not in {q for (q,) in got}
    assert calls == {"pgfence._claim_controlled(jsonb,integer,integer,timestamp with time zone)": 1}, calls


def assert_first_runnable_in_claim_order(own_dsn: str, jobs: list[tuple[int, int, int]],
                                         queues: Optional[list[str]], max_jobs: int, via: str,
                                         paused: Sequence[str] = (), controlled: bool = False,
                                         capped: Optional[tuple[str, int]] = None) -> None:
    """Enqueue jobs (queue h<n>, priority, run_at offset), claim max_jobs from queues (the
    list, or via "set" a set of those names) in a transaction that is rolled back: the
    claim returns the first runnable ones. controlled: with a cap on a queue the claim
    does not name (so the claim picks through _claim_controlled), the queues `paused`
    paused, whose jobs it must not return, and `capped` (queue, max_running): that
    queue's first jobs come after the others', at most max_running of them (none run)."""
    with connect(own_dsn, autocommit=False) as c:
        if controlled:
            c.execute("SELECT pgfence.set_queue_limit('elsewhere', 5)")
            for q in paused:
                c.execute("SELECT pgfence.pause_queue(%s)", (q,))
            if capped is not None:
                c.execute("SELECT pgfence.set_queue_limit(%s, %s)", capped)
        inserted = []
        for q, priority, offset in jobs:
            job_id = c.execute("SELECT pgfence.enqueue('k', queue => %s, priority => %s,"
                               " run_at => clock_timestamp() + %s)",
                               (f"h{q}", priority, timedelta(seconds=offset))).fetchone()[0]  # type: ignore[index]
            row = c.execute("SELECT id, available_at, available_at <= clock_timestamp() FROM pgfence.jobs"
                            " WHERE id = %s", (job_id,)).fetchone()
            assert row is not None
            inserted.append((row[0], f"h{q}", priority, row[1], row[2]))
        runnable = sorted((j for j in inserted if j[4] and (queues is None or j[1] in queues) and j[1] not in paused),
                          key=lambda j: (-j[2], j[3], j[0]))
        cap_queue, cap = capped if capped is not None else (None, 0)
        first = [j for j in runnable if j[1] != cap_queue][:max_jobs]
        then = [j for j in runnable if j[1] == cap_queue][:min(cap, max_jobs - len(first))]
        want = [j[0] for j in sorted(first + then, key=lambda j: (-j[2], j[3], j[0]))]
        arg, params = claim_sql(via, queues, c)
        got = [r[0] for r in c.execute(f"SELECT id FROM pgfence.claim('w', {arg}, lease => '1 minute',"
                                       " max_jobs => %s)", (*params, max_jobs))]
        c.rollback()
    assert got == want


@pytest.mark.parametrize(("shape", "index"), [("one", "jobs_claim_idx"), ("few", "jobs_claim_idx"),
                                              ("many", "jobs_claim_order_idx"), ("all", "jobs_claim_order_idx")])
def test_each_path_reads_the_index_made_for_it(own_dsn: str, db: Conn, shape: str, index: str) -> None:
    """Claims over one queue or a few read each queue's claim order (queue first); those
    over all queues, or over a long list that holds the work at the front, the claim
    order over all queues. (The generic plans once chose the latter for one queue,
    passing over every other queue's jobs: 4 ms for an empty claim instead of 0.35.)"""
    names = fill(db, 30, 20)
    queues: Optional[list[str]] = {"all": None, "one": ["q00003"], "few": names[:4], "many": names}[shape]
    picks, _ = claim_picks(own_dsn, "SELECT count(*) FROM pgfence.claim('w', %s, '1 minute', 5)", (queues,))
    used = {name for p in picks for name in ("jobs_claim_order_idx", "jobs_claim_idx") if f"using {name} " in p}
    assert used == {index}, picks


def claim_picks(own_dsn: str, query: str, params: Any = None) -> tuple[list[str], list[tuple[Any, ...]]]:
    """Run query (a claim) in a transaction rolled back, with auto_explain logging every
    nested statement: the plans of its pick queries (the queued jobs read), and its rows."""
    with connect(own_dsn) as c:
        plans: list[str] = []
        c.add_notice_handler(lambda d: plans.append(d.message_primary or ""))
        c.execute("LOAD 'auto_explain'")
        for setting in ("auto_explain.log_min_duration = 0", "auto_explain.log_nested_statements = on",
                        "auto_explain.log_level = notice", "client_min_messages = notice"):
            c.execute(f"SET {setting}")
        with c.transaction(force_rollback=True):
            got = [tuple(r) for r in c.execute(query, params).fetchall()]
    picks = [p for p in plans if "status = 'queued'" in p and "Query Text" in p and "FROM pgfence.jobs j" in p]
    assert picks, plans
    return picks, got


# -- sets of queues stored on the server (define_queue_set, claim(queue_set => ...)) ----------

def sets(conn: Conn) -> list[tuple[Any, ...]]:
    return [tuple(r) for r in conn.execute("SELECT queue_set, queue_count, names FROM pgfence.queue_sets()")]


def test_a_set_is_defined_listed_replaced_and_dropped(db: Conn) -> None:
    db.execute("DELETE FROM pgfence.queue_sets")
    assert db.execute("SELECT pgfence.define_queue_set('s-b', ARRAY['q2', 'q1', 'q2'])").fetchone() == (2,)
    assert db.execute("SELECT pgfence.define_queue_set('s-a', ARRAY['x'])").fetchone() == (1,)
    assert sets(db) == [("s-a", 1, ["x"]), ("s-b", 2, ["q1", "q2"])]
    who = db.execute("SELECT defined_by FROM pgfence.queue_sets() WHERE queue_set = 's-b'").fetchone()
    assert who == (db.execute("SELECT current_user").fetchone() or [None])[0:1]
    # defined again: its names replaced
    assert db.execute("SELECT pgfence.define_queue_set('s-b', ARRAY['q3'])").fetchone() == (1,)
    assert sets(db) == [("s-a", 1, ["x"]), ("s-b", 1, ["q3"])]
    assert db.execute("SELECT pgfence.drop_queue_set('s-b'), pgfence.drop_queue_set('s-b')").fetchone() == (True, False)
    assert sets(db) == [("s-a", 1, ["x"])]


def test_defining_or_dropping_a_set_notifies_its_own_tag_and_a_refused_change_does_not(own_dsn: str, db: Conn) -> None:
    """What a worker's listener wakes on to read its set again: the wake-up tag of
    chr(1) || the set's name (no queue's tag can equal it), on commit of a define or of a
    drop that dropped a set; nothing for a drop of no set or a refused define."""
    tag = db.execute("SELECT tag FROM pgfence.wakeup_tags(ARRAY[chr(1) || 's-tagged'])").fetchone()[0]
    assert tag not in {t for (t,) in db.execute("SELECT tag FROM pgfence.wakeup_tags(ARRAY['s-tagged', ''])")}
    with connect(own_dsn) as listen:
        listen.execute("LISTEN pgfence_enqueue")

        def heard() -> list[str]:
            return [n.payload for n in listen.notifies(timeout=1.0)]
        db.execute("SELECT pgfence.define_queue_set('s-tagged', ARRAY['q1'])")
        db.execute("SELECT pgfence.define_queue_set('s-tagged', ARRAY['q1', 'q2'])")
        assert heard() == [tag, tag]
        with db.transaction():
            db.execute("SELECT pgfence.define_queue_set('s-tagged', ARRAY['q3'])")
            assert heard() == []  # (not before the commit)
        assert heard() == [tag]
        assert sql_error(db, "SELECT pgfence.define_queue_set('s-tagged', ARRAY[NULL::text])").sqlstate == "22004"
        assert db.execute("SELECT pgfence.drop_queue_set('s-tagged'), pgfence.drop_queue_set('s-tagged')"
                          ).fetchone() == (True, False)
        assert heard() == [tag]


@pytest.mark.parametrize(("call", "params", "sqlstate", "names"), [
    ("SELECT pgfence.define_queue_set(%s, %s)", (None, ["q"]), "22004", "queue_set"),
    ("SELECT pgfence.define_queue_set(%s, %s)", ("", ["q"]), "22023", "queue_set"),
    ("SELECT pgfence.define_queue_set(%s, %s)", ("s\n", ["q"]), "22023", "queue_set"),
    ("SELECT pgfence.define_queue_set(%s, %s::text[])", ("s", None), "22004", "queues"),
    ("SELECT pgfence.define_queue_set(%s, %s::text[])", ("s", []), "22023", "queues"),
    ("SELECT pgfence.define_queue_set(%s, %s)", ("s", ["ok", None]), "22004", "queues[2]"),
    ("SELECT pgfence.define_queue_set(%s, %s)", ("s", ["ok", "bad\x1b[31m"]), "22023", "queues[2]"),
    ("SELECT pgfence.define_queue_set(%s, %s)", ("s", ["ok", " lead"]), "22023", "queues[2]"),
    ("SELECT pgfence.define_queue_set(%s, %s)", ("s", [f"q{i}" for i in range(10001)]), "22023", "queues length"),
    ("SELECT pgfence.define_queue_set(%s, '[0:0]={q}'::text[])", ("s",), "22023", "queues"),
    ("SELECT pgfence.drop_queue_set(%s)", (None,), "22004", "queue_set"),
    ("SELECT pgfence.drop_queue_set(%s)", ("x" * 129,), "22023", "queue_set"),
    ("SELECT * FROM pgfence.claim('w', queue_set => %s)", ("never-defined",), "22023", "queue_set"),
    ("SELECT * FROM pgfence.claim('w', queue_set => %s)", ("bad\u202e",), "22023", "queue_set"),
    ("SELECT * FROM pgfence.claim('w', ARRAY['q'], queue_set => %s)", ("s-kept",), "22023", "queue_set"),
])
def test_bad_sets_are_refused_and_change_nothing(db: Conn, call: str, params: tuple[Any, ...], sqlstate: str,
                                                 names: str) -> None:
    db.execute("SELECT pgfence.define_queue_set('s-kept', ARRAY['kept'])")
    db.execute("SELECT pgfence.define_queue_set('s', ARRAY['before'])")
    before = sets(db)
    err = sql_error(db, call, params)
    assert_error(err, sqlstate, names)
    assert err.diag.message_hint
    assert sets(db) == before


def test_a_claim_over_a_set_sees_it_redefined_and_refuses_it_dropped(own_dsn: str, db: Conn) -> None:
    fill(db, 3, 2)  # q00000..q00002
    db.execute("SELECT pgfence.define_queue_set('moving', ARRAY['q00001'])")
    got = db.execute("SELECT queue FROM pgfence.claim('w', queue_set => 'moving', max_jobs => 10)").fetchall()
    assert got == [("q00001",), ("q00001",)]
    db.execute("SELECT pgfence.define_queue_set('moving', ARRAY['q00000', 'q00002', 'none'])")
    got = db.execute("SELECT queue FROM pgfence.claim('w', queue_set => 'moving', max_jobs => 10)").fetchall()
    assert sorted(got) == [("q00000",), ("q00000",), ("q00002",), ("q00002",)]
    db.execute("SELECT pgfence.drop_queue_set('moving')")
    assert_error(sql_error(db, "SELECT * FROM pgfence.claim('w', queue_set => 'moving')"), "22023", "queue_set")


def test_a_claim_over_a_set_keeps_to_paused_and_capped_queues(own_dsn: str, db: Conn) -> None:
    """With queue controls, the set's names go through the controlled path as the list would."""
    fill(db, 4, 3)
    db.execute("SELECT pgfence.define_queue_set('ctl', ARRAY['q00000', 'q00001', 'q00002'])")
    db.execute("SELECT pgfence.pause_queue('q00000')")
    db.execute("SELECT pgfence.set_queue_limit('q00001', 1)")
    try:
        with connect(own_dsn, autocommit=False) as c:  # (the list's answer, rolled back)
            as_list = c.execute("SELECT id, queue FROM pgfence.claim('w', ARRAY['q00000', 'q00001', 'q00002'],"
                                " max_jobs => 10)").fetchall()
            c.rollback()
        got = db.execute("SELECT id, queue FROM pgfence.claim('w', queue_set => 'ctl', max_jobs => 10)").fetchall()
        assert got == as_list
        assert sorted(q for _, q in got) == ["q00001", "q00002", "q00002", "q00002"]
        db.execute("SELECT pgfence.define_queue_set('ctl', ARRAY['q00000'])")  # a set of one paused queue
        assert db.execute("SELECT count(*) FROM pgfence.claim('w', queue_set => 'ctl', max_jobs => 10)"
                          ).fetchone() == (0,)
    finally:
        db.execute("SELECT pgfence.resume_queue('q00000'), pgfence.set_queue_limit('q00001', NULL)")
        db.execute("DELETE FROM pgfence.queue_controls")


def test_claim_results_finds_what_a_claim_over_a_set_took(db: Conn) -> None:
    fill(db, 20, 2)
    db.execute("SELECT pgfence.define_queue_set('many', %s)", ([f"q{i:05d}" for i in range(0, 20, 2)],))
    request = "6a1f8c5e-8d2b-4b8e-9a55-0c1d2e3f4a5b"
    took = db.execute("SELECT id, attempt_token FROM pgfence.claim('w', queue_set => 'many', max_jobs => 5,"
                      " request_id => %s)", (request,)).fetchall()
    assert len(took) == 5
    again = db.execute("SELECT id, attempt_token FROM pgfence.claim_results('w', ARRAY[%s]::uuid[])",
                       (request,)).fetchall()
    assert sorted(again) == sorted(took)
    assert {r[0] for r in db.execute("SELECT queue FROM pgfence.jobs WHERE id = ANY (%s)",
                                     ([t[0] for t in took],))} <= {f"q{i:05d}" for i in range(0, 20, 2)}


def test_a_claim_reads_the_stored_set_once(own_dsn: str, db: Conn) -> None:
    """claim reads the set's value once ('{}' || members): left as the column's TOAST
    pointer, every ? of the search read and decompressed it again (a claim over 10,000
    names took 28 ms). Counted in TOAST blocks read by one claim over a window of 104 jobs
    of 10,000 listed queues: about the value's own chunks, not one pass per job."""
    names = fill(db, 10000, 1)
    db.execute("SELECT pgfence.define_queue_set('big', %s)", (names,))
    # (the pages its TOAST chunks fill: about 4 chunks of 2 kB a page)
    pages = db.execute("SELECT ceil(pg_column_size(members) / 8000.0)::int FROM pgfence.queue_sets"
                       " WHERE queue_set = 'big'").fetchone()[0]  # type: ignore[index]
    assert pages > 2

    def toast_blocks(c: Conn) -> int:
        c.execute("SELECT pg_stat_clear_snapshot()")
        return int(c.execute("SELECT coalesce(toast_blks_hit, 0) + coalesce(toast_blks_read, 0)"
                             " FROM pg_statio_user_tables WHERE relid = 'pgfence.queue_sets'::regclass"
                             ).fetchone()[0])  # type: ignore[index]

    def claim_once() -> None:
        """One claim over the set, rolled back, its statistics flushed."""
        with connect(own_dsn, autocommit=False) as c:
            assert c.execute("SELECT count(*) FROM pgfence.claim('w', queue_set => 'big', max_jobs => 10)"
                             ).fetchone() == (10,)
            c.rollback()
            c.execute("SELECT pg_stat_force_next_flush()")
            c.commit()

    claim_once()  # (so that the statistics entry exists before the claim measured)
    before = toast_blocks(db)
    claim_once()
    used = toast_blocks(db) - before
    assert 0 < used <= 4 * pages, (used, pages)


def test_a_set_of_one_queue_reads_that_queues_index(own_dsn: str, db: Conn) -> None:
    """A set holding one name takes the one-queue path (jobs_claim_idx, that queue's jobs
    only), as a list of one does."""
    fill(db, 30, 20)
    db.execute("SELECT pgfence.define_queue_set('solo', ARRAY['q00003'])")
    picks, got = claim_picks(own_dsn, "SELECT queue FROM pgfence.claim('w', queue_set => 'solo', max_jobs => 5)")
    assert got == [("q00003",)] * 5
    assert all("using jobs_claim_idx " in p and "jobs_claim_order_idx" not in p for p in picks), picks


def test_a_list_with_repeats_claims_what_its_set_does(own_dsn: str, db: Conn) -> None:
    """20 entries holding 5 distinct names (the list takes the window, its set the heads):
    the same jobs in the same order."""
    names = fill(db, 8, 6)
    listed = (names[:5] * 4)
    db.execute("SELECT pgfence.define_queue_set('repeats', %s)", (listed,))
    with connect(own_dsn, autocommit=False) as c:
        as_list = c.execute("SELECT id FROM pgfence.claim('w', %s, max_jobs => 12)", (listed,)).fetchall()
        c.rollback()
        as_set = c.execute("SELECT id FROM pgfence.claim('w', queue_set => 'repeats', max_jobs => 12)").fetchall()
        c.rollback()
    assert as_list == as_set and len(as_list) == 12


def test_only_its_own_role_or_an_operator_changes_a_set(own_dsn: str, db: Conn) -> None:
    with login_roles(own_dsn, {"t_qs_a": "pgfence_worker", "t_qs_b": "pgfence_worker",
                               "t_qs_op": "pgfence_operator"}):
        with connect_as(own_dsn, "t_qs_a") as a, connect_as(own_dsn, "t_qs_b") as b, \
                connect_as(own_dsn, "t_qs_op") as op:
            assert a.execute("SELECT pgfence.define_queue_set('pool-a', ARRAY['x', 'y'])").fetchone() == (2,)
            for call in ("SELECT pgfence.define_queue_set('pool-a', ARRAY['z'])",
                         "SELECT pgfence.drop_queue_set('pool-a')"):
                err = sql_error(b, call)
                assert_error(err, "42501")
                assert "t_qs_a" in str(err) and err.diag.message_hint
            assert sets(db)[[s[0] for s in sets(db)].index("pool-a")] == ("pool-a", 2, ["x", "y"])
            assert a.execute("SELECT pgfence.define_queue_set('pool-a', ARRAY['x'])").fetchone() == (1,)
            assert op.execute("SELECT pgfence.define_queue_set('pool-a', ARRAY['w'])").fetchone() == (1,)
            assert op.execute("SELECT defined_by FROM pgfence.queue_sets() WHERE queue_set = 'pool-a'"
                              ).fetchone() == ("t_qs_op",)
            assert_error(sql_error(a, "SELECT pgfence.drop_queue_set('pool-a')"), "42501")  # the operator's now
            assert op.execute("SELECT pgfence.drop_queue_set('pool-a')").fetchone() == (True,)
            assert b.execute("SELECT pgfence.drop_queue_set('pool-a')").fetchone() == (False,)
            db.execute("SELECT pgfence.define_queue_set('pool-b', ARRAY['v'])")  # (a superuser's)
            assert op.execute("SELECT pgfence.drop_queue_set('pool-b')").fetchone() == (True,)


def test_at_most_limits_queue_sets_sets_are_stored(db: Conn) -> None:
    cap = db.execute("SELECT value FROM pgfence.limits() WHERE name = 'queue_sets'").fetchone()[0]  # type: ignore[index]
    db.execute("DELETE FROM pgfence.queue_sets")
    try:
        db.execute("SELECT pgfence.define_queue_set('cap-' || g, ARRAY['q']) FROM generate_series(1, %s) g", (cap,))
        err = sql_error(db, "SELECT pgfence.define_queue_set('one-more', ARRAY['q'])")
        assert_error(err, "54000")
        assert err.diag.message_hint
        assert db.execute("SELECT count(*) FROM pgfence.queue_sets").fetchone() == (cap,)
        # one already stored may still be defined again
        assert db.execute("SELECT pgfence.define_queue_set('cap-1', ARRAY['a', 'b'])").fetchone() == (2,)
    finally:
        db.execute("DELETE FROM pgfence.queue_sets")
