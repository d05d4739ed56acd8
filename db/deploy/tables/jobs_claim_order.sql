-- Deploy pgfence:tables/jobs_claim_order to pg
-- requires: tables/jobs
--
-- (No transaction: CREATE INDEX CONCURRENTLY cannot run in one, and it does not hold
-- up enqueues and claims while it reads the table. If the build fails, the invalid
-- index it leaves makes `sqitch verify` fail: DROP INDEX CONCURRENTLY
-- pgfence.jobs_claim_order_idx and deploy again.)

-- The claim order over all queues: queued jobs by priority DESC, available_at, id.
-- A claim over all queues (queues => NULL), or over a long list of them, walks it and
-- locks only the rows it returns, whatever the number of queues; jobs_claim_idx
-- (queue first) serves claims over one queue or a few.
CREATE INDEX CONCURRENTLY IF NOT EXISTS jobs_claim_order_idx ON pgfence.jobs (priority DESC, available_at, id)
    WHERE status = 'queued';
