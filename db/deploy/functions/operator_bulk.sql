-- Deploy pgfence:functions/operator_bulk to pg
-- requires: functions/mark_done
-- requires: functions/requeue
-- requires: functions/cancel
-- requires: functions/audit
-- requires: functions/retention
--
-- Bulk operator actions, for the console's selections and "everything matching this
-- filter": requeue_many, cancel_many, mark_done_many, purge_many (delete failed or
-- cancelled jobs before their retention ends; fenced: a job requeued meanwhile is
-- refused) over a list of ids, and
-- preview_action / act_on_filter over typed filters (queue, kind, status, a substring
-- of the last error, a range of updated_at; no SQL is built from any argument; each
-- job selected is checked against the filter again once it is locked, so a job that
-- changed meanwhile, a queued job a worker claimed say, is refused, not acted on). At
-- most 10,000 jobs per call (act_on_filter refuses a filter matching more than its
-- max_jobs with 22023 and acts on none). Each call writes one pgfence.operator_audit
-- row with the ids it acted on (none when it acted on none).

BEGIN;

-- Job ids of a bulk call: 1..10,000, one-dimensional, no NULL, no duplicate.
CREATE OR REPLACE FUNCTION pgfence._check_job_ids(job_ids bigint[]) RETURNS void
LANGUAGE plpgsql AS $$
DECLARE
    v_bad bigint;
BEGIN
    IF job_ids IS NULL THEN
        PERFORM pgfence._raise_null('job_ids', 'pass an array of 1..10000 job ids');
    END IF;
    PERFORM pgfence._check_array('job_ids', job_ids);
    IF cardinality(job_ids) NOT BETWEEN 1 AND 10000 THEN
        PERFORM pgfence._raise_invalid('job_ids length', cardinality(job_ids)::text, 'outside 1..10000',
            'pass 1..10000 job ids per call (act_on_filter selects them for you, up to 10000)');
    ELSIF array_position(job_ids, NULL) IS NOT NULL THEN
        -- (22004, as every batch call answers a NULL element)
        PERFORM pgfence._raise_null(format('job_ids[%s]', array_position(job_ids, NULL)),
            'pass the id of every job to act on');
    END IF;
    SELECT u.id INTO v_bad FROM unnest(job_ids) u(id) GROUP BY u.id HAVING count(*) > 1 ORDER BY u.id LIMIT 1;
    IF v_bad IS NOT NULL THEN
        PERFORM pgfence._raise_invalid('job_ids', v_bad::text, 'appears more than once', 'pass each job id once');
    END IF;
END $$;
COMMENT ON FUNCTION pgfence._check_job_ids(bigint[]) IS
  'Private: check the ids of a bulk operator call (22004: NULL, or a NULL element; 22023: not 1..10000, not one-dimensional, a duplicate).';

-- The statuses an operator action applies to.
CREATE OR REPLACE FUNCTION pgfence._action_statuses(action text) RETURNS text[]
LANGUAGE sql IMMUTABLE AS $$
    SELECT CASE action WHEN 'requeue' THEN ARRAY['failed', 'manual_review', 'cancelled']
                       WHEN 'cancel' THEN ARRAY['queued', 'processing', 'manual_review']
                       WHEN 'mark_done' THEN ARRAY['manual_review']
                       WHEN 'purge' THEN ARRAY['failed', 'cancelled'] END
$$;
COMMENT ON FUNCTION pgfence._action_statuses(text) IS
  'Private: the statuses requeue, cancel, mark_done and purge apply to (NULL for another action).';

-- The inputs of a bulk action: the action's name, its note (required for mark_done and
-- purge) and result.
CREATE OR REPLACE FUNCTION pgfence._check_action(action text, note text, result jsonb) RETURNS void
LANGUAGE plpgsql AS $$
BEGIN
    IF action IS NULL THEN
        PERFORM pgfence._raise_null('action', 'pass requeue, cancel, mark_done or purge');
    ELSIF pgfence._action_statuses(action) IS NULL THEN
        PERFORM pgfence._raise_invalid('action', action, 'is not an operator action', 'pass requeue, cancel, mark_done or purge');
    END IF;
    PERFORM pgfence._check_note(note, action IN ('mark_done', 'purge'));
    IF result IS NOT NULL AND action <> 'mark_done' THEN
        PERFORM pgfence._raise_invalid('result', left(result::text, 200), format('%s takes no result', action),
            'pass result only with mark_done');
    END IF;
    PERFORM pgfence._check_result('result', result);
END $$;
COMMENT ON FUNCTION pgfence._check_action(text, text, jsonb) IS
  'Private: check a bulk action''s name, note (required for mark_done and purge) and result (mark_done only).';

-- Act on each job, in id order (a fixed lock order: two bulk calls do not deadlock),
-- each locked (FOR UPDATE to purge it, else FOR NO KEY UPDATE) and checked before the
-- action runs, so a job in another status (requeued by a concurrent call, say) is
-- refused without an exception, and so is a job act_on_filter selected that no longer
-- matches its filter (f_*, checked as _filtered checks it; all NULL for a call by ids):
-- the selection read the jobs as they were, and a job may change before it is locked
-- (claimed, failed again with another error), or have been changing, uncommitted, when
-- read (the lock waits for that change, and the check sees its result). Only the
-- requeue of a job with an idempotency key runs in a subtransaction (_requeue's, and,
-- when another job may hold its key, this one's around it), so a bulk call over jobs
-- without keys opens none. The jobs to purge are deleted together once all are checked
-- (still locked). One row per job, one audit row for the call (the ids
-- acted on; none written when none was).
CREATE OR REPLACE FUNCTION pgfence._act_on(action text, job_ids bigint[], note text, result jsonb, audit_detail jsonb,
                                           f_status text DEFAULT NULL, f_queue text DEFAULT NULL,
                                           f_kind text DEFAULT NULL, f_error_contains text DEFAULT NULL,
                                           f_updated_after timestamptz DEFAULT NULL,
                                           f_updated_before timestamptz DEFAULT NULL)
RETURNS TABLE(id bigint, acted boolean, job_status text, detail text)
LANGUAGE plpgsql AS $$
#variable_conflict use_variable
DECLARE
    v_id bigint;
    v_status text;
    v_key text;
    v_queue text;
    v_kind text;
    v_error text;
    v_updated timestamptz;
    v_allowed text[] := pgfence._action_statuses(action);
    v_done bigint[] := '{}'::bigint[];
    v_queues text[] := '{}'::text[];
    v_refused integer := 0;
BEGIN
    FOR v_id IN SELECT u.id FROM unnest(job_ids) AS u(id) ORDER BY u.id LOOP
        id := v_id;
        IF action = 'purge' THEN
            SELECT x.status, x.idempotency_key, x.queue, x.kind, x.last_error, x.updated_at
              INTO v_status, v_key, v_queue, v_kind, v_error, v_updated
              FROM pgfence.jobs x WHERE x.id = v_id FOR UPDATE;
        ELSE
            SELECT x.status, x.idempotency_key, x.queue, x.kind, x.last_error, x.updated_at
              INTO v_status, v_key, v_queue, v_kind, v_error, v_updated
              FROM pgfence.jobs x WHERE x.id = v_id FOR NO KEY UPDATE;
        END IF;
        IF NOT FOUND THEN
            acted := false;
            IF EXISTS (SELECT FROM pgfence.finished_jobs h WHERE h.id = v_id) THEN
                job_status := 'done';
                detail := format('%s applies only to jobs that are %s', action, array_to_string(v_allowed, ', '));
            ELSE
                job_status := NULL;
                detail := 'no job with this id';
            END IF;
        ELSIF NOT v_status = ANY (v_allowed) THEN
            acted := false;
            job_status := v_status;
            detail := format('%s applies only to jobs that are %s', action, array_to_string(v_allowed, ', '));
        ELSIF NOT pgfence._filter_matches(v_status, v_queue, v_kind, v_error, v_updated, f_status, f_queue, f_kind,
                                          f_error_contains, f_updated_after, f_updated_before) THEN
            acted := false;
            job_status := v_status;
            detail := 'no longer matches the filter';
        ELSIF action = 'requeue' AND v_key IS NOT NULL AND v_status <> 'manual_review' THEN
            BEGIN
                PERFORM pgfence._requeue(v_id);
                acted := true; job_status := 'queued'; detail := NULL;
            EXCEPTION WHEN SQLSTATE 'PF003' THEN
                acted := false; job_status := v_status; detail := SQLERRM;
            END;
        ELSE
            CASE action
                WHEN 'requeue' THEN PERFORM pgfence._requeue(v_id); job_status := 'queued';
                WHEN 'cancel' THEN PERFORM pgfence._cancel(v_id); job_status := 'cancelled';
                WHEN 'purge' THEN job_status := 'deleted';  -- (below, with the others)
                ELSE PERFORM pgfence._mark_done(v_id, result); job_status := 'done';
            END CASE;
            acted := true; detail := NULL;
        END IF;
        IF acted THEN
            v_done := v_done || v_id;
            IF NOT v_queue = ANY (v_queues) THEN
                v_queues := v_queues || v_queue;
            END IF;
        ELSE
            v_refused := v_refused + 1;
        END IF;
        RETURN NEXT;
    END LOOP;
    IF action = 'purge' AND cardinality(v_done) > 0 THEN
        PERFORM pgfence._forget_jobs(v_done);
    END IF;
    IF cardinality(v_done) > 0 THEN
        PERFORM pgfence._audit(action, v_queues, v_done, note,
            coalesce(audit_detail, '{}'::jsonb) || jsonb_build_object('asked', cardinality(job_ids), 'refused', v_refused)
            || CASE WHEN result IS NULL THEN '{}'::jsonb ELSE jsonb_build_object('result', result) END);
    END IF;
END $$;
COMMENT ON FUNCTION pgfence._act_on(text, bigint[], text, jsonb, jsonb, text, text, text, text, timestamptz, timestamptz) IS
  'Private: run requeue, cancel, mark_done or purge on each job (id order) that, locked, is in a status the action applies to and matches the filter f_* (if any), one row per job, one audit row for the ids acted on.';

CREATE OR REPLACE FUNCTION pgfence.requeue_many(job_ids bigint[], note text DEFAULT NULL)
RETURNS TABLE(id bigint, acted boolean, job_status text, detail text)
LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pgfence._check_job_ids(job_ids);
    PERFORM pgfence._check_note(note, false);
    RETURN QUERY SELECT * FROM pgfence._act_on('requeue', job_ids, note, NULL, jsonb_build_object('bulk', 'ids'));
END $$;
COMMENT ON FUNCTION pgfence.requeue_many(bigint[], text) IS
$$Operator: requeue each of 1..10000 jobs (failed, manual_review or cancelled -> queued), in id order. One row per job:
(id, acted, job_status: the new status or the one that refused it, detail: why not). One operator_audit row with the ids
acted on and the note (optional). Errors: 22004 (ids NULL or a NULL element), 22023 (ids: duplicate, length; a blank
note).$$;

CREATE OR REPLACE FUNCTION pgfence.cancel_many(job_ids bigint[], note text DEFAULT NULL)
RETURNS TABLE(id bigint, acted boolean, job_status text, detail text)
LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pgfence._check_job_ids(job_ids);
    PERFORM pgfence._check_note(note, false);
    RETURN QUERY SELECT * FROM pgfence._act_on('cancel', job_ids, note, NULL, jsonb_build_object('bulk', 'ids'));
END $$;
COMMENT ON FUNCTION pgfence.cancel_many(bigint[], text) IS
$$Operator: cancel each of 1..10000 jobs (queued, processing or manual_review -> cancelled), in id order; as
requeue_many otherwise. A failed job (the dead letter) is refused, as by cancel. Errors: 22004, 22023.$$;

CREATE OR REPLACE FUNCTION pgfence.mark_done_many(job_ids bigint[], note text, result jsonb DEFAULT NULL)
RETURNS TABLE(id bigint, acted boolean, job_status text, detail text)
LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pgfence._check_job_ids(job_ids);
    PERFORM pgfence._check_note(note, true);
    PERFORM pgfence._check_result('result', result);
    RETURN QUERY SELECT * FROM pgfence._act_on('mark_done', job_ids, note, result, jsonb_build_object('bulk', 'ids'));
END $$;
COMMENT ON FUNCTION pgfence.mark_done_many(bigint[], text, jsonb) IS
$$Operator: mark_done each of 1..10000 manual_review jobs (the same result for all), in id order; note required; as
requeue_many otherwise. Errors: 22004, 22023.$$;

CREATE OR REPLACE FUNCTION pgfence.purge_many(job_ids bigint[], note text)
RETURNS TABLE(id bigint, acted boolean, job_status text, detail text)
LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pgfence._check_job_ids(job_ids);
    PERFORM pgfence._check_note(note, true);
    RETURN QUERY SELECT * FROM pgfence._act_on('purge', job_ids, note, NULL, jsonb_build_object('bulk', 'ids'));
END $$;
COMMENT ON FUNCTION pgfence.purge_many(bigint[], text) IS
$$Operator: delete each of 1..10000 failed or cancelled jobs now, with their attempts and rejections (their counts kept
in pgfence.metric_totals), instead of waiting for retention; in id order, each locked and checked first, so a job
requeued meanwhile is refused (job_status: its status), never deleted. note required. Rows as requeue_many (job_status
'deleted' when acted); one operator_audit row with the ids, kept after the jobs. Errors: 22004, 22023.$$;

-- The filter of preview_action and act_on_filter, checked.
CREATE OR REPLACE FUNCTION pgfence._check_filter(status text, queue text, kind text, error_contains text,
                                                 updated_after timestamptz, updated_before timestamptz) RETURNS void
LANGUAGE plpgsql AS $$
BEGIN
    IF status IS NOT NULL AND status NOT IN ('queued', 'processing', 'manual_review', 'failed', 'cancelled') THEN
        PERFORM pgfence._raise_invalid('status', status, 'is not a status an operator acts on',
            'pass queued, processing, manual_review, failed or cancelled (or NULL: any)');
    END IF;
    IF queue IS NOT NULL THEN
        PERFORM pgfence._check_name('queue', queue);
    END IF;
    IF kind IS NOT NULL THEN
        PERFORM pgfence._check_name('kind', kind);
    END IF;
    IF error_contains IS NOT NULL AND char_length(error_contains) NOT BETWEEN 1 AND 1000 THEN
        PERFORM pgfence._raise_invalid('error_contains', error_contains, 'not 1..1000 characters',
            'pass a part of the last error (1..1000 characters, matched as is), or NULL');
    END IF;
    IF updated_after IS NOT NULL AND NOT isfinite(updated_after) THEN
        PERFORM pgfence._raise_invalid('updated_after', updated_after::text, 'is not finite', 'pass a timestamp or NULL');
    ELSIF updated_before IS NOT NULL AND NOT isfinite(updated_before) THEN
        PERFORM pgfence._raise_invalid('updated_before', updated_before::text, 'is not finite', 'pass a timestamp or NULL');
    ELSIF updated_before <= updated_after THEN
        PERFORM pgfence._raise_invalid('updated_before', updated_before::text,
            format('is not after updated_after %s', updated_after),
            'pass an updated_before later than updated_after (updated_at in [updated_after, updated_before)), '
            'or either one as NULL');
    END IF;
END $$;
COMMENT ON FUNCTION pgfence._check_filter(text, text, text, text, timestamptz, timestamptz) IS
  'Private: check the filter of preview_action / act_on_filter (22023; an empty updated range too).';

-- Whether a job (its status, queue, kind, last_error, updated_at) matches a filter (f_*):
-- the one statement of the rule, for _filtered's selection and _act_on's check of each
-- job it locks. No SQL is built: each filter is a typed comparison that holds when the
-- argument is NULL. (Plain SQL: inlined into _filtered's query.)
CREATE OR REPLACE FUNCTION pgfence._filter_matches(status text, queue text, kind text, last_error text,
                                                   updated_at timestamptz, f_status text, f_queue text, f_kind text,
                                                   f_error_contains text, f_updated_after timestamptz,
                                                   f_updated_before timestamptz) RETURNS boolean
LANGUAGE sql IMMUTABLE AS $$
    SELECT (f_status IS NULL OR status = f_status)
       AND (f_queue IS NULL OR queue = f_queue)
       AND (f_kind IS NULL OR kind = f_kind)
       AND (f_error_contains IS NULL OR coalesce(strpos(last_error, f_error_contains) > 0, false))
       AND (f_updated_after IS NULL OR updated_at >= f_updated_after)
       AND (f_updated_before IS NULL OR updated_at < f_updated_before)
$$;
COMMENT ON FUNCTION pgfence._filter_matches(text, text, text, text, timestamptz, text, text, text, text, timestamptz, timestamptz) IS
  'Private: whether a job (status, queue, kind, last_error, updated_at) matches the filter of preview_action / act_on_filter (f_*; NULL: any).';

-- The jobs a filter matches that the action applies to, in id order.
CREATE OR REPLACE FUNCTION pgfence._filtered(action text, status text, queue text, kind text, error_contains text,
                                             updated_after timestamptz, updated_before timestamptz, max_rows integer)
RETURNS SETOF bigint
LANGUAGE sql STABLE AS $$
    SELECT j.id FROM pgfence.jobs j
     WHERE j.status = ANY (pgfence._action_statuses(_filtered.action))
       AND pgfence._filter_matches(j.status, j.queue, j.kind, j.last_error, j.updated_at, _filtered.status,
                                   _filtered.queue, _filtered.kind, _filtered.error_contains,
                                   _filtered.updated_after, _filtered.updated_before)
     ORDER BY j.id
     LIMIT _filtered.max_rows
$$;
COMMENT ON FUNCTION pgfence._filtered(text, text, text, text, text, timestamptz, timestamptz, integer) IS
  'Private: ids of the jobs (pgfence.jobs) a filter matches that an action applies to, in id order, at most max_rows.';

-- Operators and viewers: how many jobs act_on_filter would act on now.
CREATE OR REPLACE FUNCTION pgfence.preview_action(action text, status text DEFAULT NULL, queue text DEFAULT NULL,
                                                  kind text DEFAULT NULL, error_contains text DEFAULT NULL,
                                                  updated_after timestamptz DEFAULT NULL,
                                                  updated_before timestamptz DEFAULT NULL)
RETURNS TABLE(jobs bigint, max_jobs integer)
LANGUAGE plpgsql STABLE AS $$
BEGIN
    IF action IS NULL THEN
        PERFORM pgfence._raise_null('action', 'pass requeue, cancel, mark_done or purge');
    ELSIF pgfence._action_statuses(action) IS NULL THEN
        PERFORM pgfence._raise_invalid('action', action, 'is not an operator action', 'pass requeue, cancel, mark_done or purge');
    END IF;
    PERFORM pgfence._check_filter(status, queue, kind, error_contains, updated_after, updated_before);
    RETURN QUERY SELECT count(*), 10000
                   FROM pgfence._filtered(action, status, queue, kind, error_contains, updated_after, updated_before,
                                          NULL);
END $$;
COMMENT ON FUNCTION pgfence.preview_action(text, text, text, text, text, timestamptz, timestamptz) IS
$$Operators and viewers: how many jobs act_on_filter(action, the same filter) would act on now (the jobs of
pgfence.jobs in a status action applies to, matching every filter given: status, queue, kind, error_contains a
substring of last_error, updated_at in [updated_after, updated_before): updated_before later than updated_after),
and the cap per call (10000). Counts only: jobs may change before the action. Errors: 22004, 22023.$$;

-- Operators: run an action on every job a filter matches, at most max_jobs.
CREATE OR REPLACE FUNCTION pgfence.act_on_filter(action text, note text DEFAULT NULL, result jsonb DEFAULT NULL,
                                                 status text DEFAULT NULL, queue text DEFAULT NULL,
                                                 kind text DEFAULT NULL, error_contains text DEFAULT NULL,
                                                 updated_after timestamptz DEFAULT NULL,
                                                 updated_before timestamptz DEFAULT NULL,
                                                 max_jobs integer DEFAULT 10000)
RETURNS TABLE(id bigint, acted boolean, job_status text, detail text)
LANGUAGE plpgsql AS $$
#variable_conflict use_variable
DECLARE
    v_ids bigint[];
BEGIN
    PERFORM pgfence._check_action(action, note, result);
    PERFORM pgfence._check_filter(status, queue, kind, error_contains, updated_after, updated_before);
    PERFORM pgfence._check_range('max_jobs', max_jobs, 1, 10000);
    v_ids := ARRAY(SELECT f FROM pgfence._filtered(action, status, queue, kind, error_contains, updated_after,
                                                  updated_before, max_jobs + 1) f);
    IF cardinality(v_ids) > max_jobs THEN
        PERFORM pgfence._raise_invalid('max_jobs', max_jobs::text, 'the filter matches more jobs',
            'narrow the filter (queue, kind, status, error_contains, updated_after/updated_before), or raise max_jobs '
            'up to 10000; preview_action counts them; nothing was changed');
    END IF;
    IF cardinality(v_ids) = 0 THEN
        RETURN;
    END IF;
    RETURN QUERY SELECT * FROM pgfence._act_on(action, v_ids, note, result, jsonb_build_object('bulk', 'filter',
        'filter', jsonb_strip_nulls(jsonb_build_object('status', status, 'queue', queue, 'kind', kind,
                                                       'error_contains', error_contains,
                                                       'updated_after', updated_after,
                                                       'updated_before', updated_before))),
        status, queue, kind, error_contains, updated_after, updated_before);
END $$;
COMMENT ON FUNCTION pgfence.act_on_filter(text, text, jsonb, text, text, text, text, timestamptz, timestamptz, integer) IS
$$Operator: run action (requeue, cancel, mark_done or purge) on every job the filter matches (as preview_action), in id
order, when they are at most max_jobs (1..10000, default 10000); more: 22023 and nothing changes. Each job is locked and
the filter checked again: one that no longer matches (a queued job claimed meanwhile, a failed job failed again with
another error) is refused (acted false, detail 'no longer matches the filter'). Rows as requeue_many;
one operator_audit row with the ids acted on, the note (required for mark_done and purge) and the filter. Errors: 22004,
22023.$$;

INSERT INTO pgfence.routine_grants (routine, roles) VALUES
    ('requeue_many',   '{pgfence_operator}'),
    ('cancel_many',    '{pgfence_operator}'),
    ('mark_done_many', '{pgfence_operator}'),
    ('purge_many',     '{pgfence_operator}'),
    ('preview_action', '{pgfence_operator,pgfence_viewer}'),
    ('act_on_filter',  '{pgfence_operator}')
ON CONFLICT (routine) DO UPDATE SET roles = excluded.roles;
SELECT pgfence._apply_privileges();

COMMIT;
