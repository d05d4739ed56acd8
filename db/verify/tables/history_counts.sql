-- Verify pgfence:tables/history_counts on pg

BEGIN;

SELECT part, metric, queue, label, n FROM pgfence.history_counts WHERE false;
SELECT part, filenode, lower_bound FROM pgfence.history_count_marks WHERE false;
SELECT counted_to, cand_t, cand_gate, deploy_xid, counted_at FROM pgfence.history_count_state WHERE false;
SELECT 1 / count(*)::int FROM pgfence.history_count_state;

ROLLBACK;
