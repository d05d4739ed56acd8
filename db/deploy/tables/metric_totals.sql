-- Deploy pgfence:tables/metric_totals to pg
-- requires: tables/history
--
-- What retention took away, so that the counters of pgfence.metrics() never go
-- backwards: the counter is what is still stored plus these totals. Written only where
-- rows leave for good (the history partitions _maintain_history drops, truncates or
-- empties, and the jobs, attempts and rejections purge_finished deletes), in the
-- transaction that deletes them; never by a completion (no hot row on the queue's path).

BEGIN;

CREATE TABLE pgfence.metric_totals (
    metric text   NOT NULL,
    queue  text   NOT NULL,
    label  text   NOT NULL DEFAULT '',
    value  bigint NOT NULL DEFAULT 0 CHECK (value >= 0),
    CONSTRAINT metric_totals_pkey PRIMARY KEY (metric, queue, label),
    CONSTRAINT metric_totals_metric CHECK (metric IN ('jobs_done', 'attempts_ended', 'rejections'))
);
COMMENT ON TABLE pgfence.metric_totals IS
$$Counts of rows retention deleted, per metric (jobs_done; attempts_ended, label = the outcome; rejections),
per queue: pgfence.metrics() adds them to what is still stored, so its counters never go backwards.$$;

ALTER TABLE pgfence.metric_totals OWNER TO pgfence_owner;
REVOKE ALL ON TABLE pgfence.metric_totals FROM PUBLIC;
GRANT SELECT ON TABLE pgfence.metric_totals TO pgfence_operator;
-- (pgfence_viewer's grant: in the change viewer, which creates it.)

COMMIT;
