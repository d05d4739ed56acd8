// Compiled by tsc only (never run): uses the declared API as an application would, so a
// broken or drifting index.d.ts fails `npm run typecheck`.
import { Client, Worker, LeaseLost, PermanentFailure, Interrupted, RetryAfter, Snooze, RawJson, MetricsError, WorkerOptionError, type Job,
  type WorkerOptions } from "..";
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
  await client.enqueue("render", { doc: 7 }, { queue: "pdf", timeout: 300_000, unique_for: "1 hour", idempotency_key: "doc-7" });
  const snoozed: "queued" | "failed" = await client.snooze(id, "t", 60_000);
  await client.set_queue_rate_limit("email", 10, { per: 1000 });
  await client.set_queue_timeout("pdf", "10 minutes");
  const first: Date = await client.schedule("nightly", { cron: "0 3 * * *", kind: "report", time_zone: "Europe/Paris" });
  const next: Date | null = await client.cron_next("*/5 * * * *", { after: first });
  console.log(snoozed, next, (await client.schedules())[0]?.next_fire_at, (await client.queue_limits())[0]?.claims_available);
  await client.mark_done(id, "charged: PSP ref 991", { result: { psp: 991 } });
  const acted = await client.act_on_filter("requeue", { status: "failed", queue: "email", max_jobs: 100, note: "PSP fixed" });
  const preview: number = (await client.preview_action("requeue", { status: "failed" })).jobs;
  const audit = await client.audit_of(id);
  const metric = (await client.metrics()).find((m) => m.name === "pgfence_jobs");
  console.log(acted.filter((a) => !a.acted).map((a) => a.detail), preview, audit[0]?.actor, metric?.labels.queue,
    (await client.requeue_many([id], { note: "again" }))[0]?.job_status);
  const worker = new Worker(client, {
    send_email: async (job: Job) => {
      if (job.shouldStop() || job.signal.aborted) throw new Interrupted();
      if (!job.payload.to) throw new PermanentFailure("no recipient");
      if (job.attempts < 2) throw new RetryAfter(10_000);
      if (job.payload.later) throw new Snooze("5 minutes");
      job.payload.seen = true; // the payload is the handler's to change
      // @ts-expect-error a handler's job is frozen: the worker reports with its id and token
      job.attempt_token = job.attempt_token;
      return { sent: true };
    },
  }, { concurrency: 8, lease: 30_000, queues: ["email"], metricsPort: 9100, metricsBind: "127.0.0.1" });
  try {
    await worker.run();
  } catch (err) {
    if (err instanceof MetricsError) console.log(err.message, err.hint);
  }
  const address: { host: string; port: number } | null = worker.metricsAddress;
  console.log(worker.counters.completed, address?.port, worker.metricsPort);
  // @ts-expect-error metricsPort is a number (or null), not a string
  const wrong: WorkerOptions = { metricsPort: "9100" };
  const off: WorkerOptions = { metricsPort: null };
  console.log(wrong, off);
  try {
    new Worker(client, {}, { queues: new Set(["email"]), pollInterval: -1 });
  } catch (err) {
    if (err instanceof WorkerOptionError) console.log(err.option, err.value, err.hint, err.message);
  }
  // @ts-expect-error queues is a list of names, not one name
  const letters: WorkerOptions = { queues: "abc" };
  // @ts-expect-error no such option (the constructor refuses it too)
  const typo: WorkerOptions = { concurency: 4 };
  console.log(letters, typo);
}
void example;
