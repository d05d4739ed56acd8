#!/usr/bin/env node
// An example pgfence worker in Node.js (docs/node.md).
//
//   make deploy
//   node examples/node_worker.js            # DSN from PGFENCE_DSN, else the local dev database
//   python -m pgfence enqueue send_email '{"to": "a@example.com"}' --queue email
//
// Stop it with Ctrl-C or SIGTERM: it gives unstarted jobs back and waits for running ones.
"use strict";
const { Client, Worker, PermanentFailure, Interrupted } = require("../clients/node");

const sleep = (ms, signal) => new Promise((resolve, reject) => {
  const t = setTimeout(resolve, ms);
  signal.addEventListener("abort", () => { clearTimeout(t); reject(new Interrupted()); }, { once: true });
});

const handlers = {
  // The payload is the enqueue's JSON object; the return value is stored as the result.
  async send_email(job) {
    if (!job.payload.to) throw new PermanentFailure("no recipient");    // dead letter, no retry
    for (const step of ["connect", "send"]) {
      await sleep(200, job.signal);   // your work; job.signal aborts on a lost lease or a shutdown
      console.log(`job ${job.id}: ${step} to ${JSON.stringify(job.payload.to)}`);
    }
    return { sent: true, attempt: job.attempts };
  },
  // Any other throw fails the attempt: the database retries it with backoff, or dead-letters it.
  async flaky(job) {
    if (job.attempts < 2) throw new Error("temporary failure");
    return { ok: true };
  },
};

async function main() {
  const dsn = process.env.PGFENCE_DSN || "postgresql://postgres@127.0.0.1:54329/pgfence";
  const client = await Client.connect(dsn);
  const worker = new Worker(client, handlers, {
    queues: (process.env.PGFENCE_QUEUES || "email,default").split(","),
    concurrency: 8,
    lease: 30000,
    logger: { info: console.log, warn: console.warn, error: console.error },
  });
  await worker.run();   // until SIGTERM / Ctrl-C
  console.log("stopped:", worker.counters);
  await client.close();
  process.exit(0);
}

main().catch((err) => { console.error(err); process.exit(1); });
