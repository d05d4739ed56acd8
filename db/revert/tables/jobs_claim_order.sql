-- Revert pgfence:tables/jobs_claim_order from pg
-- (No transaction: DROP INDEX CONCURRENTLY does not hold up enqueues and claims.)

DROP INDEX CONCURRENTLY IF EXISTS pgfence.jobs_claim_order_idx;
