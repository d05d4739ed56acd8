// Compiled by tsc only (never run): uses the declared API as an application would, so a
// broken or drifting index.d.ts fails `npm run typecheck`.
import { Client, Worker, LeaseLost, PermanentFailure, Interrupted, RetryAfter, RawJson, type Job } from "..";
import pg from "pg";

async function example(): Promise<void> {
  const client = await Client.connect("postgresql://localhost/app", { prepared: false });
  const id: string = await client.enqueue("send_email", { to: "a@example.com" }, { queue: "email", idempotency_key: "k" });
  const conn = new pg.Client();
  await conn.query("BEGIN");
  await client.using(conn).enqueue("send_email", { to: "b@example.com" });
  const jobs = await client.claim("w1", ["email"], { lease: 30_000, max_jobs: 10, request_id: "00000000-0000-0000-0000-000000000000" });
  for (const job of jobs) {
    await client.heartbeat(job.id, job.attempt_token, { lease: "1 minute" });
    try {
      await client.complete(job.id, job.attempt_token, new RawJson("{\"ok\":true}"));
    } catch (err) {
      if (err instanceof LeaseLost) console.log(err.sqlstate, err.detail, err.hint);
    }
  }
  const outcomes = await client.complete_many(jobs.map((j) => j.id), jobs.map((j) => j.attempt_token), [1, "two", null]);
  outcomes.filter((o) => !o.accepted).forEach((o) => console.log(o.detail));
  const status: "queued" | "failed" = await client.fail(id, "t", "boom", { retry_in: 5000 });
  console.log(status, (await client.job(1n)).status, (await client.limits()).max_jobs);
  const worker = new Worker(client, {
    send_email: async (job: Job) => {
      if (job.shouldStop() || job.signal.aborted) throw new Interrupted();
      if (!job.payload.to) throw new PermanentFailure("no recipient");
      if (job.attempts < 2) throw new RetryAfter(10_000);
      return { sent: true };
    },
  }, { concurrency: 8, lease: 30_000, queues: ["email"] });
  await worker.run();
  console.log(worker.counters.completed);
}
void example;
