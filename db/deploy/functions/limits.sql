-- Deploy pgfence:functions/limits to pg (reworked after @v0.7.0)
-- requires: functions/limits@v0.7.0
-- requires: functions/snooze
--
-- The limits a caller sizes its work by (batch and claim sizes, name, payload, result
-- and error sizes, leases, delays), as data a caller in any language can read instead
-- of copying numbers. The other argument ranges (history_summary's since,
-- run_sweeper's pass_interval, set_retention's intervals) are in each function's
-- COMMENT and error hint. The checks
-- themselves keep their literals (they sit in hot paths, where a literal costs
-- nothing); tests/test_sql_limits.py holds each row against the behaviour, at the
-- limit and one past it.
-- Changed after @v0.7.0: snooze_max_s and snoozes_per_job (functions/snooze), queue_sets
-- (functions/queue_sets: the most sets of queues stored; its refusal is 54000).

BEGIN;

CREATE OR REPLACE FUNCTION pgfence.limits()
RETURNS TABLE(name text, value bigint, description text)
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT * FROM (VALUES
        ('max_jobs',           1000::bigint, 'jobs one claim may return (claim max_jobs), request ids per claim_results call'),
        ('batch',              10000,        'elements of one batch call: enqueue_many kinds, heartbeat_many/complete_many/fail_many/release_many/snooze_many job_ids; reclaim_expired, purge_finished and sweep batches'),
        ('queues',             10000,        'queue names in one claim (claim queues), and in one set of queues (define_queue_set)'),
        ('queue_sets',         100,          'sets of queues stored at once (define_queue_set; past it 54000)'),
        ('name_chars',         128,          'characters of a kind, queue or worker_id'),
        ('key_chars',          255,          'characters of an idempotency key'),
        ('payload_bytes',      1048576,      'bytes of a payload (a JSON object), as jsonb, uncompressed'),
        ('result_bytes',       1048576,      'bytes of a result (any JSON value), as jsonb, uncompressed'),
        ('json_depth',         64,           'nesting levels of a payload or result'),
        ('error_chars',        100000,       'characters of an error text (fail, fail_many)'),
        ('max_attempts',       1000,         'attempts a job may be given (enqueue max_attempts)'),
        ('lease_min_ms',       1,            'shortest lease, in milliseconds'),
        ('lease_max_ms',       86400000,     'longest lease, in milliseconds (1 day)'),
        ('retry_in_max_s',     31536000,     'longest retry delay of fail, in seconds (365 days)'),
        ('rejections_per_job', 100,          'refused fenced calls stored per job (the rest are counted: rejections_not_stored)'),
        ('run_sweeper_ahead_s', 3600,        'how far ahead run_sweeper run_until may be, in seconds'),
        ('sweeper_stale_s',    120,          'seconds without a sweeper pass after which sweeper_health says stopped'),
        ('snooze_max_s',       31536000,     'longest delay of snooze, in seconds (365 days; the shortest is more than 0)'),
        ('snoozes_per_job',    100,          'snoozes a job may take; past them a snooze fails the attempt (snooze, snooze_many)')
    ) AS l(name, value, description)
$$;
COMMENT ON FUNCTION pgfence.limits() IS
$$The limits a caller sizes its work by (name, value, description): max_jobs, batch, queues, queue_sets, name_chars,
key_chars, payload_bytes, result_bytes, json_depth, error_chars, max_attempts, lease_min_ms, lease_max_ms,
retry_in_max_s, rejections_per_job, run_sweeper_ahead_s, sweeper_stale_s, snooze_max_s, snoozes_per_job. Read them rather than copy the
numbers; a later version may raise one.$$;

INSERT INTO pgfence.routine_grants (routine, roles) VALUES
    ('limits', '{pgfence_producer,pgfence_worker,pgfence_operator,pgfence_viewer}')
ON CONFLICT (routine) DO UPDATE SET roles = excluded.roles;
SELECT pgfence._apply_privileges();

COMMIT;
