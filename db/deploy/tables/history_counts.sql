-- Deploy pgfence:tables/history_counts to pg
-- requires: tables/history
--
-- The counts of the history that the purge keeps for metrics() and stats(), per
-- partition, up to a watermark: the tables. What writes and reads them, and why the
-- watermark may move where it does: functions/history_counts.

BEGIN;

CREATE TABLE pgfence.history_counts (
    part   oid    NOT NULL,
    metric text   NOT NULL,
    queue  text   NOT NULL,
    label  text   NOT NULL DEFAULT '',
    n      bigint NOT NULL CHECK (n >= 0),
    CONSTRAINT history_counts_pkey PRIMARY KEY (part, metric, queue, label),
    CONSTRAINT history_counts_metric CHECK (metric IN ('jobs_done', 'attempts_ended'))
);
COMMENT ON TABLE pgfence.history_counts IS
$$Per history partition (part: its pg_class oid), the rows finished before history_count_state.counted_to:
done jobs (jobs_done) and their earlier attempts by outcome (attempts_ended, label = the outcome), per queue.
Valid while history_count_marks holds the partition with its current relfilenode. Written by _count_history
(the purge); read by metrics() and stats() through _history_stored().$$;

CREATE TABLE pgfence.history_count_marks (
    part        oid         PRIMARY KEY,
    filenode    oid         NOT NULL,
    lower_bound timestamptz NOT NULL
);
COMMENT ON TABLE pgfence.history_count_marks IS
$$The history partitions history_counts holds counts of, with the relfilenode and the lower bound they had when
counted: a partition truncated or rewritten since (another relfilenode) is counted again, a dropped one is
forgotten (a table made later with its oid has another lower bound).$$;

CREATE TABLE pgfence.history_count_state (
    one        boolean     PRIMARY KEY DEFAULT true CHECK (one),
    counted_to timestamptz NOT NULL DEFAULT '-infinity',
    cand_t     timestamptz,
    cand_gate  xid8,
    deploy_xid xid8,
    counted_at timestamptz,
    CHECK ((cand_t IS NULL) = (cand_gate IS NULL))
);
INSERT INTO pgfence.history_count_state DEFAULT VALUES;
COMMENT ON TABLE pgfence.history_count_state IS
$$One row: the watermark of history_counts (counted_to: the rows finished before it are counted, in the
partitions history_count_marks holds) and the next one (cand_t, with cand_gate a transaction id assigned after
it: the watermark once every transaction up to cand_gate has ended), as _count_history leaves them; deploy_xid:
the transaction that deployed functions/history_counts, until no statement begun before it committed runs (no
candidate before that); counted_at: its last run.$$;

DO $$
BEGIN
    IF EXISTS (SELECT 1 FROM pg_catalog.pg_roles WHERE rolname = 'pgfence_owner') THEN
        ALTER TABLE pgfence.history_counts OWNER TO pgfence_owner;
        ALTER TABLE pgfence.history_count_marks OWNER TO pgfence_owner;
        ALTER TABLE pgfence.history_count_state OWNER TO pgfence_owner;
    END IF;
END $$;
REVOKE ALL ON TABLE pgfence.history_counts, pgfence.history_count_marks, pgfence.history_count_state FROM PUBLIC;

COMMIT;
