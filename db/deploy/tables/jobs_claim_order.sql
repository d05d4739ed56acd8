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
-- (queue <> '' holds for every job, names being 1..128 characters, so the index has
-- every queued job; but only a query that says so can use it: claim's generic plans
-- for one queue or a few, where queue is compared with a value unknown when planning,
-- cannot prove it, and so never walk this index passing over other queues' jobs, which
-- they chose to do, 4 ms for an empty claim, when the two predicates were the same.)
CREATE INDEX CONCURRENTLY IF NOT EXISTS jobs_claim_order_idx ON pgfence.jobs (priority DESC, available_at, id)
    WHERE status = 'queued' AND queue <> '';
