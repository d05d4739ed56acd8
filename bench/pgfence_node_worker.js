#!/usr/bin/env node
// One pgfence Node.js worker OS process for the benchmark (the Node twin of
// bench/pgfence_worker.py, same arguments):
//
//   node bench/pgfence_node_worker.js --dsn DSN --queue Q [--concurrency 8] [--prefetch P]
//        [--poll-interval 0.05] [--mode noop]
//
// A pgfence Worker (clients/node) over Client.connect(DSN), handler `noop` returning
// nothing. Prints `READY <epoch>` right before worker.run(); SIGTERM/SIGINT stop it.
"use strict";
const { Client, Worker } = require("../clients/node");

function args() {
  const a = { concurrency: 8, prefetch: 8, pollInterval: 0.05, mode: "noop" };
  for (let i = 2; i < process.argv.length; i += 2) {
    const k = process.argv[i].replace(/^--/, "").replace(/-([a-z])/g, (_, c) => c.toUpperCase());
    const v = process.argv[i + 1];
    a[k] = ["concurrency", "prefetch", "pollInterval"].includes(k) ? Number(v) : v;
  }
  if (!a.dsn || !a.queue) throw new Error("--dsn and --queue are required");
  if (a.mode !== "noop") throw new Error("only --mode noop");
  return a;
}

(async () => {
  const a = args();
  const client = await Client.connect(a.dsn);
  const worker = new Worker(client, { noop: async () => undefined }, {
    queues: [a.queue], concurrency: a.concurrency, prefetch: a.prefetch, pollInterval: a.pollInterval * 1000,
  });
  process.stdout.write(`READY ${(Date.now() / 1000).toFixed(6)}\n`);
  await worker.run();
  await client.close();
  process.exit(0);
})().catch((err) => { console.error(err); process.exit(1); });
