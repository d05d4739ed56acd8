-- Deploy pgfence:functions/stats to pg (reworked after @v0.7.0)
-- requires: functions/stats@v0.7.0
-- requires: tables/history
--
-- Changed after @v0.5.0: done jobs are counted in the history (pgfence.finished_jobs),
-- where they now are. Changed after @v0.7.0: pgfence_viewer may call it (its grant is
-- applied by the change viewer, which creates the role).

BEGIN;

-- Operator view: jobs per queue and status, the age of the oldest runnable
-- queued job, and how many processing jobs hold an expired lease.
CREATE OR REPLACE FUNCTION pgfence.stats()
RETURNS TABLE(queue text, status text, jobs bigint, oldest_runnable_age interval, expired_leases bigint)
LANGUAGE sql STABLE AS $$
    SELECT s.queue, s.status, sum(s.jobs)::bigint, min(s.oldest), sum(s.expired)::bigint
      FROM (SELECT j.queue, j.status, count(*) AS jobs,
                   clock_timestamp() - min(j.available_at)
                       FILTER (WHERE j.status = 'queued' AND j.available_at <= clock_timestamp()) AS oldest,
                   count(*) FILTER (WHERE j.status = 'processing' AND j.lease_expires_at < clock_timestamp()) AS expired
              FROM pgfence.jobs j
             GROUP BY j.queue, j.status
            UNION ALL
            SELECT h.queue, 'done', count(*), NULL::interval, 0
              FROM pgfence.finished_jobs h
             GROUP BY h.queue) s
     GROUP BY s.queue, s.status
     ORDER BY s.queue, s.status
$$;

COMMENT ON FUNCTION pgfence.stats() IS
$$Jobs per (queue, status), with the age of the oldest runnable queued job and the number of processing
jobs whose lease has expired (waiting for the sweep); done jobs are counted in the history
(pgfence.finished_jobs). Scans both tables: an operator query, not a hot path.$$;

-- The privilege rule's rows for this change's routines, applied.
INSERT INTO pgfence.routine_grants (routine, roles) VALUES
    ('stats', '{pgfence_operator,pgfence_viewer}')
ON CONFLICT (routine) DO UPDATE SET roles = excluded.roles;
SELECT pgfence._apply_privileges();

COMMIT;
