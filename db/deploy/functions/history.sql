-- Deploy pgfence:functions/history to pg (reworked after @v0.7.0)
-- requires: functions/history@v0.7.0
-- requires: tables/metric_totals
-- requires: tables/history
--
-- The partitions of pgfence.finished_jobs: created ahead, dropped once their range has
-- passed, by one private routine (the only DDL pgfence runs after deployment), which
-- the sweeper's purge calls every 10 s and operators can call through
-- maintain_history(). Its table names come only from dates, quoted with %I; it takes
-- no argument.
-- Changed after @v0.7.0: what a partition holds is added to pgfence.metric_totals (done
-- jobs, their ended attempts by outcome) in the transaction that drops or truncates it,
-- with the partition locked first (nothing lands in it between the count and the
-- drop), and so are the default partition's rows it deletes: the counters of
-- pgfence.metrics() never go backwards when history goes. A partition is made with
-- autovacuum_vacuum_insert_threshold = -1 (no vacuum for its inserts) and
-- autovacuum_analyze_scale_factor = 4 (analyzed when it has grown fivefold), and its own
-- BRIN index on finished_at with autosummarize = on, attached to the parent's; the
-- partitions made before get the same settings (and lose them on revert).

\ir ../../include/lock_retry.sql

BEGIN;

-- Widths are whole seconds from this change on (set_history_partition_width): one set
-- before with a fraction of a second is rounded up to the next second (a revert keeps it).
UPDATE pgfence.history_settings
   SET partition_width = make_interval(secs => ceil(extract(epoch FROM partition_width)))
 WHERE extract(epoch FROM partition_width) <> floor(extract(epoch FROM partition_width));

-- The name of the history partition whose range starts at lower_bound (UTC).
CREATE OR REPLACE FUNCTION pgfence._history_partition_name(lower_bound timestamptz) RETURNS text
LANGUAGE sql STABLE AS $$
    SELECT 'finished_jobs_' || to_char(lower_bound AT TIME ZONE 'UTC', 'YYYYMMDD"_"HH24MISS')
$$;
COMMENT ON FUNCTION pgfence._history_partition_name(timestamptz) IS
  'Private: finished_jobs_YYYYMMDD_HH24MISS, the partition of pgfence.finished_jobs whose range starts at lower_bound (UTC).';

-- A timestamp as an ISO 8601 literal in UTC, which reads back the same whatever the
-- session's DateStyle and TimeZone.
CREATE OR REPLACE FUNCTION pgfence._utc_literal(t timestamptz) RETURNS text
LANGUAGE sql STABLE AS $$
    SELECT to_char(t AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US"+00"')
$$;
COMMENT ON FUNCTION pgfence._utc_literal(timestamptz) IS
  'Private: t as an ISO 8601 UTC literal (for partition bounds).';

-- Partition maintenance, in three steps (after replacing the empty partitions ahead
-- whose width is not the setting's), each statement waiting at most 100 ms for a
-- lock (a DROP locks pgfence.finished_jobs ACCESS EXCLUSIVE and would queue every
-- completion behind it while it waited; giving up and trying again on a later pass
-- costs nothing, the partitions being made well ahead, and the sweeper tries sooner
-- while they run short):
-- 1. drop every partition whose range has passed (every row in it is past its
--    purge_at), and the idempotency keys of its jobs, after adding its counts to
--    pgfence.metric_totals (the partition locked SHARE first, then counted: one scan of
--    a partition whose range has passed, which nothing writes, before the parent is
--    locked; once a DROP holds the parent, partitions with rows wait for the next pass,
--    so no count runs while completions wait); when the parent cannot be locked,
--    TRUNCATE it (which locks only the partition) so that its space is freed now, and
--    drop it on a later pass; any other error is a WARNING, and the purge goes on;
-- 2. create the partitions from now to the longest retention of done jobs plus two
--    widths (at least a minute: under load a pass can miss its lock, and a 10 s width
--    would then leave completions only seconds before they land in the default
--    partition) ahead that do not exist yet (a slot no partition covers gets one), aligned
--    to multiples of the width since the epoch, at most 50 per call and 1,000 in all (a
--    completion beyond them lands in the default partition). Each is created as a
--    table of its own, filled with the rows the default partition holds for its range,
--    and attached, with the parent locked SHARE ROW EXCLUSIVE until the call commits
--    (a few ms for the one or two a pass makes; 0.3 s for 50, after a longer retention
--    is set; a completion already routed to the default partition for that range would
--    else fail its partition check);
-- 3. delete up to 10,000 rows of the default partition whose purge_at has passed
--    (their counts added to pgfence.metric_totals).
-- Returns what it did. Identifiers: only _history_partition_name(a date).
CREATE OR REPLACE FUNCTION pgfence._maintain_history()
RETURNS TABLE(created integer, dropped integer, truncated integer, moved bigint, deleted bigint)
LANGUAGE plpgsql
SET lock_timeout = '100ms' AS $$
DECLARE
    v_now timestamptz := clock_timestamp();
    v_width interval;
    v_ws double precision;
    v_horizon timestamptz;
    v_lower timestamptz;
    v_upper timestamptz;
    v_name text;
    v_n bigint;
    v_empty boolean;
    v_need integer := 0;
    v_parent_locked boolean := false;
    p record;
BEGIN
    -- READ COMMITTED only: whether a partition is empty, and what it holds, is read by
    -- statements that must see every completion committed before them; under
    -- REPEATABLE READ the transaction's snapshot hid those committed after it, and a
    -- partition within its retention was dropped with them (PF004 instead).
    PERFORM pgfence._check_isolation('maintain_history');
    created := 0; dropped := 0; truncated := 0; moved := 0; deleted := 0;
    SELECT s.partition_width INTO v_width FROM pgfence.history_settings s;
    v_ws := extract(epoch FROM v_width);

    -- A new width takes effect at once where it can: empty partitions that have not
    -- ended and are not what the creation below would make in their place (wider than
    -- the new width's slots, or not aligned to them) are dropped and made again below,
    -- as many as the creation below can make again in this call. One that is stays: a
    -- slot cut short by a neighbour, or partitions narrower than a wider new width that
    -- fill its slot (every partition of another width was replaced, and a slot cut short
    -- by a partition that holds rows was dropped and made again the same on every pass). A partition is looked at first without the parent's lock: only
    -- one that is empty then is checked again with the parent locked (so that no
    -- completion lands in it meanwhile) and dropped. (Every candidate locked the parent,
    -- those with rows too, and a parent locked here kept the loop below from dropping
    -- expired partitions with rows: after a width change, for as long as partitions of
    -- the old width with rows lay ahead, expired ones were kept and every pass held the
    -- completions.)
    v_horizon := pgfence._utc_plus(v_now, coalesce((SELECT max(r.retain_done) FROM pgfence.retention r), interval '0'))
                 + greatest(2 * v_width, interval '1 minute');
    FOR p IN SELECT x.lower_bound, x.upper_bound
               FROM (SELECT h.lower_bound, h.upper_bound, lag(h.upper_bound) OVER w AS prev_upper,
                            lead(h.lower_bound) OVER w AS next_lower,
                            floor(extract(epoch FROM h.lower_bound) / v_ws) AS slot
                       FROM pgfence.history_partitions h WINDOW w AS (ORDER BY h.lower_bound)) x
              WHERE x.upper_bound > v_now
                -- (not what the creation below would make again: from the start of the
                -- slot or the end of the partition before, to the end of the slot or the
                -- start of the partition after)
                AND (x.lower_bound <> greatest(to_timestamp(x.slot * v_ws), x.prev_upper)
                     OR x.upper_bound <> least(to_timestamp((x.slot + 1) * v_ws), x.next_lower))
              ORDER BY x.lower_bound LOOP
        v_name := pgfence._history_partition_name(p.lower_bound);
        IF to_regclass(format('pgfence.%I', v_name)) IS NOT NULL THEN
            BEGIN
                EXECUTE format('SELECT NOT EXISTS (SELECT FROM pgfence.%I)', v_name) INTO v_empty;
            EXCEPTION
                WHEN lock_not_available THEN
                    EXIT;  -- (held by someone else, a VACUUM FULL say) next pass
                WHEN undefined_table THEN
                    v_empty := true;  -- (dropped meanwhile: only the bookkeeping is left)
            END;
            CONTINUE WHEN NOT v_empty;
        END IF;
        -- (what it takes to make its range again, from now to the horizon: past the
        -- horizon nothing is needed, no purge_at reaching there)
        v_need := v_need + greatest(0, ceil(extract(epoch FROM least(p.upper_bound, v_horizon)
                                                        - greatest(p.lower_bound, v_now)) / v_ws))::integer;
        EXIT WHEN v_need > 40;
        BEGIN
            LOCK TABLE pgfence.finished_jobs IN ACCESS EXCLUSIVE MODE;
            v_parent_locked := true;
            IF to_regclass(format('pgfence.%I', v_name)) IS NULL THEN
                v_empty := true;  -- (dropped by hand: only the bookkeeping is left)
            ELSE
                EXECUTE format('SELECT NOT EXISTS (SELECT FROM pgfence.%I)', v_name) INTO v_empty;
            END IF;
            IF v_empty THEN
                EXECUTE format('DROP TABLE IF EXISTS pgfence.%I', v_name);
                DELETE FROM pgfence.history_partitions h WHERE h.lower_bound = p.lower_bound;
                dropped := dropped + 1;
            END IF;
        EXCEPTION
            WHEN lock_not_available THEN
                EXIT;  -- next pass
            WHEN OTHERS THEN
                RAISE WARNING 'pgfence: history partition % not replaced: % (SQLSTATE %)', v_name, SQLERRM, SQLSTATE;
                EXIT;
        END;
    END LOOP;

    -- Partitions whose range has passed go, with the idempotency keys of their jobs
    -- (held until purge_at, which is within the range: a key is never held by a job
    -- whose history is gone).
    FOR p IN SELECT h.lower_bound, h.upper_bound FROM pgfence.history_partitions h WHERE h.upper_bound <= v_now
              ORDER BY h.lower_bound LOOP
        v_name := pgfence._history_partition_name(p.lower_bound);
        -- Once a DROP holds the parent (until commit: every completion waits), no partition
        -- with rows is counted in this call: the next pass drops it, 10 s later.
        IF v_parent_locked AND to_regclass(format('pgfence.%I', v_name)) IS NOT NULL THEN
            BEGIN
                EXECUTE format('SELECT NOT EXISTS (SELECT FROM pgfence.%I)', v_name) INTO v_empty;
            EXCEPTION
                WHEN lock_not_available THEN
                    v_empty := false;  -- (held by someone else) next pass
                WHEN undefined_table THEN
                    v_empty := true;
            END;
            CONTINUE WHEN NOT v_empty;
        END IF;
        BEGIN
            -- (Counted once: with the drop, or with the truncate, after which it is empty.)
            IF to_regclass(format('pgfence.%I', v_name)) IS NOT NULL THEN
                EXECUTE format('LOCK TABLE pgfence.%I IN SHARE MODE', v_name);
                EXECUTE format('WITH p AS MATERIALIZED (SELECT h.queue, h.earlier_attempts FROM pgfence.%I h)'
                                   ' INSERT INTO pgfence.metric_totals AS t (metric, queue, label, value)'
                                   ' SELECT c.metric, c.queue, c.label, sum(c.n)::bigint FROM ('
                                   '  SELECT ''jobs_done''::text AS metric, p.queue, ''''::text AS label, count(*) AS n'
                                   '    FROM p GROUP BY p.queue'
                                   '  UNION ALL SELECT ''attempts_ended'', p.queue, ''done'', count(*) FROM p GROUP BY p.queue'
                                   '  UNION ALL SELECT ''attempts_ended'', p.queue, e.a->>''outcome'', count(*)'
                                   '    FROM p CROSS JOIN LATERAL jsonb_array_elements(p.earlier_attempts) e(a)'
                                   '   GROUP BY p.queue, e.a->>''outcome'') c GROUP BY 1, 2, 3'
                                   ' ON CONFLICT ON CONSTRAINT metric_totals_pkey'
                                   ' DO UPDATE SET value = t.value + excluded.value', v_name);
            END IF;
            EXECUTE format('DROP TABLE IF EXISTS pgfence.%I', v_name);
            v_parent_locked := true;
            DELETE FROM pgfence.history_partitions h WHERE h.lower_bound = p.lower_bound;
            DELETE FROM pgfence.held_keys k WHERE k.purge_at < p.upper_bound;
            dropped := dropped + 1;
        EXCEPTION
            WHEN lock_not_available THEN
                BEGIN
                    -- (the block's count was rolled back with it: counted again, locked)
                    EXECUTE format('LOCK TABLE pgfence.%I IN ACCESS EXCLUSIVE MODE', v_name);
                    EXECUTE format('WITH p AS MATERIALIZED (SELECT h.queue, h.earlier_attempts FROM pgfence.%I h)'
                                       ' INSERT INTO pgfence.metric_totals AS t (metric, queue, label, value)'
                                       ' SELECT c.metric, c.queue, c.label, sum(c.n)::bigint FROM ('
                                       '  SELECT ''jobs_done''::text AS metric, p.queue, ''''::text AS label, count(*) AS n'
                                       '    FROM p GROUP BY p.queue'
                                       '  UNION ALL SELECT ''attempts_ended'', p.queue, ''done'', count(*) FROM p GROUP BY p.queue'
                                       '  UNION ALL SELECT ''attempts_ended'', p.queue, e.a->>''outcome'', count(*)'
                                       '    FROM p CROSS JOIN LATERAL jsonb_array_elements(p.earlier_attempts) e(a)'
                                       '   GROUP BY p.queue, e.a->>''outcome'') c GROUP BY 1, 2, 3'
                                       ' ON CONFLICT ON CONSTRAINT metric_totals_pkey'
                                       ' DO UPDATE SET value = t.value + excluded.value', v_name);
                    EXECUTE format('TRUNCATE pgfence.%I', v_name);
                    DELETE FROM pgfence.held_keys k WHERE k.purge_at < p.upper_bound;
                    truncated := truncated + 1;
                EXCEPTION
                    WHEN lock_not_available THEN
                        NULL;  -- a reader holds it: next pass
                    WHEN OTHERS THEN
                        RAISE WARNING 'pgfence: history partition % not truncated: % (SQLSTATE %)',
                            v_name, SQLERRM, SQLSTATE;
                END;
            WHEN OTHERS THEN
                -- (e.g. an object built on it, or a partition made by another owner: the
                -- purge goes on, and says so every pass until someone looks)
                RAISE WARNING 'pgfence: history partition % not dropped: % (SQLSTATE %)', v_name, SQLERRM, SQLSTATE;
        END;
    END LOOP;

    v_lower := to_timestamp(floor(extract(epoch FROM v_now) / v_ws) * v_ws);
    WHILE v_lower < v_horizon AND created < 50
          AND (SELECT count(*) FROM pgfence.history_partitions) < 1000 LOOP
        -- Past the partitions that exist; a slot none covers (never made, or dropped by
        -- hand) gets one, up to the next multiple of the width or the next partition.
        SELECT max(h.upper_bound) INTO v_upper FROM pgfence.history_partitions h
         WHERE h.lower_bound <= v_lower AND h.upper_bound > v_lower;
        IF v_upper IS NOT NULL THEN
            v_lower := v_upper;
            CONTINUE;
        END IF;
        v_upper := least(to_timestamp((floor(extract(epoch FROM v_lower) / v_ws) + 1) * v_ws),
                         (SELECT min(h.lower_bound) FROM pgfence.history_partitions h WHERE h.lower_bound > v_lower));
        v_name := pgfence._history_partition_name(v_lower);
        BEGIN
            -- The parent first (completions wait, for the few ms this takes): a completion
            -- already routed to the default partition for this range would else fail its
            -- partition check once the attach commits.
            LOCK TABLE pgfence.finished_jobs IN SHARE ROW EXCLUSIVE MODE;
            LOCK TABLE pgfence.finished_jobs_default IN ACCESS EXCLUSIVE MODE;
            -- Never vacuumed for its inserts (it is only appended to, then dropped whole):
            -- such a vacuum reads every page the completions wrote, throttled, holding an
            -- autovacuum worker of the database meanwhile, while pgfence.jobs gathers dead
            -- rows (docs/performance.md, "Autovacuum that keeps up"). Analyzed when it has
            -- grown fivefold since the last ANALYZE (the first after 50 rows), not by a
            -- tenth: the planner needs its statistics to read a range of finished_at
            -- through the BRIN index, not all of it. Its BRIN index, made below and taken
            -- by the attach as the partition's of finished_jobs_finished_idx, summarizes
            -- each filled range of pages itself (autosummarize), which vacuum did.
            EXECUTE format('CREATE TABLE pgfence.%I (LIKE pgfence.finished_jobs INCLUDING DEFAULTS'
                           ' INCLUDING CONSTRAINTS INCLUDING STORAGE)'
                           ' WITH (autovacuum_vacuum_insert_threshold = -1, autovacuum_analyze_scale_factor = 4,'
                           ' toast.autovacuum_vacuum_insert_threshold = -1)',
                           v_name);
            EXECUTE format('WITH m AS (DELETE FROM pgfence.finished_jobs_default d'
                           ' WHERE d.purge_at >= $1 AND d.purge_at < $2 RETURNING d.*)'
                           ' INSERT INTO pgfence.%I SELECT * FROM m', v_name) USING v_lower, v_upper;
            GET DIAGNOSTICS v_n = ROW_COUNT;
            -- (after the move: building it summarizes the rows moved in)
            EXECUTE format('CREATE INDEX ON pgfence.%I USING brin (finished_at) WITH (autosummarize = on)', v_name);
            EXECUTE format('ALTER TABLE pgfence.finished_jobs ATTACH PARTITION pgfence.%I FOR VALUES FROM (%L) TO (%L)',
                           v_name, pgfence._utc_literal(v_lower), pgfence._utc_literal(v_upper));
            INSERT INTO pgfence.history_partitions (lower_bound, upper_bound, name) VALUES (v_lower, v_upper, v_name);
            created := created + 1;
            moved := moved + v_n;
        EXCEPTION
            WHEN lock_not_available THEN
                EXIT;  -- (the block's work is rolled back) next pass
            WHEN OTHERS THEN
                -- (e.g. a table the bookkeeping does not know overlaps or has the name,
                -- made or dropped by hand): make nothing more now, and say so.
                RAISE WARNING 'pgfence: history partition % not made: % (SQLSTATE %)', v_name, SQLERRM, SQLSTATE;
                EXIT;
        END;
        v_lower := v_upper;
    END LOOP;

    WITH del AS (
        DELETE FROM pgfence.finished_jobs_default d
         WHERE d.ctid = ANY (ARRAY(SELECT x.ctid FROM pgfence.finished_jobs_default x
                                    WHERE x.purge_at <= v_now LIMIT 10000))
        RETURNING d.queue, d.earlier_attempts
    ), totals AS (
        INSERT INTO pgfence.metric_totals AS t (metric, queue, label, value)
        SELECT c.metric, c.queue, c.label, sum(c.n)::bigint FROM (
            SELECT 'jobs_done'::text AS metric, del.queue, ''::text AS label, count(*) AS n FROM del GROUP BY del.queue
            UNION ALL SELECT 'attempts_ended', del.queue, 'done', count(*) FROM del GROUP BY del.queue
            UNION ALL SELECT 'attempts_ended', del.queue, e.a->>'outcome', count(*)
                        FROM del CROSS JOIN LATERAL jsonb_array_elements(del.earlier_attempts) e(a)
                       GROUP BY del.queue, e.a->>'outcome') c
         GROUP BY 1, 2, 3
        ON CONFLICT ON CONSTRAINT metric_totals_pkey DO UPDATE SET value = t.value + excluded.value
    )
    SELECT count(*) INTO v_n FROM del;
    deleted := v_n;
    IF dropped > 0 OR truncated > 0 OR deleted > 0 THEN
        UPDATE pgfence.history_settings SET cleanup_due = true WHERE NOT cleanup_due;
    END IF;
    RETURN NEXT;
END $$;
COMMENT ON FUNCTION pgfence._maintain_history() IS
$$Private (the owner's rights, through purge_finished and maintain_history): drop the history partitions whose
range has passed (TRUNCATE when the parent is busy), create those up to the longest retain_done plus two widths
(at least 1 minute) ahead (at most 50 per call, 1,000 in all) moving into them the default partition's rows of their range, and
delete up to 10,000 default-partition rows past purge_at. Lock waits at most 100 ms each. Table names only from
dates.$$;

-- Operators: run the partition maintenance now (the sweeper runs it every 10 s).
CREATE OR REPLACE FUNCTION pgfence.maintain_history()
RETURNS TABLE(created integer, dropped integer, truncated integer, moved bigint, deleted bigint)
LANGUAGE sql AS $$
    SELECT * FROM pgfence._maintain_history()
$$;
COMMENT ON FUNCTION pgfence.maintain_history() IS
$$Operator: maintain the partitions of pgfence.finished_jobs now (the background sweeper does it every 10 s with
purge_finished): drop those whose range has passed, create those ahead, empty the default partition of rows
past purge_at. Returns how many partitions were created, dropped, truncated (dropped later), and default rows
moved and deleted. Needs READ COMMITTED (PF004 otherwise).$$;

-- Operators: the width of the partitions made from now on (the ones that hold rows
-- keep theirs; empty ones ahead that reach across the new width's slots, wider ones,
-- are made again at the new width on the next pass; narrower ones stay until they end). Narrower partitions drop finished jobs closer to their retention and
-- make more tables: the longest retain_done may be at most 900 widths (refused else,
-- here and by set_retention), so the partitions ahead stay under the 1,000 made in all.
CREATE OR REPLACE FUNCTION pgfence.set_history_partition_width(width interval) RETURNS void
LANGUAGE plpgsql AS $$
DECLARE
    v_longest interval;
BEGIN
    PERFORM pgfence._check_interval('width', width, interval '10 seconds', interval '7 days', '10 seconds..7 days',
        'pass the width of a history partition, e.g. ''1 hour''');
    -- Whole seconds: a partition is named after the second its range starts in
    -- (_history_partition_name), and every bound is then a whole second (multiples of
    -- the width since the epoch, or a neighbour's bound), so no two partitions share a
    -- name. With '10.3 seconds' a slot could start in the same second as a bound of the
    -- width before, and its CREATE failed on every pass (completions into the default
    -- partition meanwhile).
    IF extract(epoch FROM width) <> floor(extract(epoch FROM width)) THEN
        PERFORM pgfence._raise_invalid('width', width::text, 'is not a whole number of seconds',
            'pass a width in whole seconds, e.g. ''10 seconds'' or ''1 hour''');
    END IF;
    SELECT max(r.retain_done) INTO v_longest FROM pgfence.retention r;
    IF v_longest / 900 > width THEN
        PERFORM pgfence._raise_invalid('width', width::text,
            format('the longest retain_done (%s) would need more than 900 partitions of it', v_longest),
            format('pass at least %s, or shorten the retention first', justify_interval(v_longest / 900)));
    END IF;
    UPDATE pgfence.history_settings SET partition_width = width;
END $$;
COMMENT ON FUNCTION pgfence.set_history_partition_width(interval) IS
$$Operator: the width (10 seconds..7 days in whole seconds, default 1 hour) of the history partitions created from now on (empty
ones ahead that are wider are made again at this width by the next maintenance; narrower ones stay until they
end); a done job is kept at least its retention and
at most one width longer. The longest retain_done must fit in 900 widths. Errors: 22004, 22023.$$;

INSERT INTO pgfence.routine_grants (routine, roles) VALUES
    ('maintain_history',            '{pgfence_operator}'),
    ('set_history_partition_width', '{pgfence_operator}')
ON CONFLICT (routine) DO UPDATE SET roles = excluded.roles;
SELECT pgfence._apply_privileges();

-- The partitions from now on exist as soon as the change is deployed, owned by
-- pgfence_owner (the public function runs with its rights), once the schema is the
-- owner's (change privileges). Before that (the newest scripts run alone, in plan
-- order, put privileges later) the sweeper's first purge makes them; completions meanwhile
-- land in the default partition, which that purge empties into them.
SELECT pgfence.maintain_history()
 WHERE (SELECT n.nspowner FROM pg_catalog.pg_namespace n WHERE n.nspname = 'pgfence') = 'pgfence_owner'::regrole;

COMMIT;

-- The partitions made before (by an earlier version, or by the earlier scripts of this
-- deploy) get the settings of those made from now on, each in a transaction of its own:
-- the table's (SHARE UPDATE EXCLUSIVE: completions go on; waits behind an autovacuum
-- of it) and then its BRIN index's (ACCESS EXCLUSIVE on that index for an instant:
-- completions into the partition wait that long), with pg_temp.locked's retries. Then
-- the ranges of pages filled since the partition's last vacuum are summarized.
SELECT format('SELECT pg_temp.locked(ARRAY[%L, %L])',
              format('ALTER TABLE %s SET (autovacuum_vacuum_insert_threshold = -1,'
                     ' autovacuum_analyze_scale_factor = 4, toast.autovacuum_vacuum_insert_threshold = -1)',
                     c.oid::regclass),
              format('ALTER INDEX %s SET (autosummarize = on)', ic.oid::regclass)),
       format('SELECT FROM pg_catalog.brin_summarize_new_values(%L::regclass)', ic.oid::regclass)
  FROM pg_catalog.pg_inherits ii
  JOIN pg_catalog.pg_class ic ON ic.oid = ii.inhrelid
  JOIN pg_catalog.pg_index x ON x.indexrelid = ic.oid
  JOIN pg_catalog.pg_class c ON c.oid = x.indrelid
 WHERE ii.inhparent = 'pgfence.finished_jobs_finished_idx'::regclass
   AND c.oid <> 'pgfence.finished_jobs_default'::regclass
 ORDER BY c.relname
\gexec
