#!/usr/bin/env node
// graphile-worker side of the benchmark. Runs with NODE_PATH=bench/.peers/node/node_modules.
//
//   single  --dsn D --n N                  N sequential workerUtils.addJob(), pg pool of 1
//   batch   --dsn D --n N --batch B        N jobs, B per workerUtils.addJobs()
//   worker  --dsn D --concurrency 8 --variant default|batched [--local-queue 80 --complete-delay 50]
//           [--mode noop|latency --out F]
//   latency --dsn D --n N --rate R         N addJob() at R/s, payload {t: Date.now()/1000}
//
// Timed subcommands print one JSON line {"seconds": ..., "n": ...}.
// The schema is installed by run.py with graphile-worker's own CLI (--schema-only).
// Worker: run({connectionString, concurrency, taskList: {noop}}); variant "batched"
// adds preset.worker {localQueue: {size: L}, completeJobBatchDelay: D,
// failJobBatchDelay: D} (graphile-worker >= 0.17; defaults L=80, D=50 ms). Prints READY <epoch> right before run().
"use strict";

const fs = require("fs");
const { Pool } = require("pg");
const { run, makeWorkerUtils, Logger } = require("graphile-worker");

const quietLogger = new Logger(() => (level, message) => {
  if (level === "error" || level === "warning") console.error(`[${level}] ${message}`);
});

function args() {
  const a = { cmd: process.argv[2], n: 0, batch: 1000, rate: 20, concurrency: 8, variant: "default", mode: "noop",
    localQueue: 80, completeDelay: 50 };
  for (let i = 3; i < process.argv.length; i += 2) {
    const k = process.argv[i].replace(/^--/, "").replace(/-([a-z])/g, (_, c) => c.toUpperCase());
    const v = process.argv[i + 1];
    a[k] = ["n", "batch", "rate", "concurrency", "localQueue", "completeDelay"].includes(k) ? Number(v) : v;
  }
  if (!a.dsn) throw new Error("--dsn is required");
  return a;
}

async function utils(dsn) {
  const pgPool = new Pool({ connectionString: dsn, max: 1 });
  pgPool.on("error", (e) => console.error(`[pool error] ${e.message}`));
  const wu = await makeWorkerUtils({ pgPool, logger: quietLogger });
  return { wu, pgPool };
}

async function single(a) {
  const { wu, pgPool } = await utils(a.dsn);
  const t0 = performance.now();
  for (let i = 0; i < a.n; i++) await wu.addJob("noop", { i });
  const seconds = (performance.now() - t0) / 1000;
  await wu.release(); await pgPool.end();
  return { seconds, n: a.n };
}

async function batch(a) {
  const { wu, pgPool } = await utils(a.dsn);
  const t0 = performance.now();
  for (let start = 0; start < a.n; start += a.batch) {
    const k = Math.min(a.batch, a.n - start);
    const specs = [];
    for (let j = 0; j < k; j++) specs.push({ identifier: "noop", payload: { i: start + j } });
    await wu.addJobs(specs);
  }
  const seconds = (performance.now() - t0) / 1000;
  await wu.release(); await pgPool.end();
  return { seconds, n: a.n };
}

async function latency(a) {
  const { wu, pgPool } = await utils(a.dsn);
  const t0 = Date.now() / 1000;
  for (let i = 0; i < a.n; i++) {
    const delay = t0 + i / a.rate - Date.now() / 1000;
    if (delay > 0) await new Promise((r) => setTimeout(r, delay * 1000));
    await wu.addJob("noop", { t: Date.now() / 1000, i });
  }
  const seconds = Date.now() / 1000 - t0;
  await wu.release(); await pgPool.end();
  return { seconds, n: a.n };
}

async function worker(a) {
  let noop;
  if (a.mode === "latency") {
    if (!a.out) throw new Error("--out is required with --mode latency");
    const fd = fs.openSync(a.out, "a");
    noop = async (payload) => { fs.writeSync(fd, `${(Date.now() / 1000 - payload.t).toFixed(6)}\n`); };
  } else {
    noop = async () => {};
  }
  const options = {
    connectionString: a.dsn,
    concurrency: a.concurrency,
    noHandleSignals: false,
    logger: quietLogger,
    taskList: { noop },
  };
  if (a.variant === "batched") {
    options.preset = {
      worker: {
        localQueue: { size: a.localQueue },
        completeJobBatchDelay: a.completeDelay,
        failJobBatchDelay: a.completeDelay,
      },
    };
  }
  console.log(`READY ${(Date.now() / 1000).toFixed(6)} graphile-worker`);
  const runner = await run(options);
  await runner.promise;
}

async function main() {
  const a = args();
  const f = { single, batch, latency, worker }[a.cmd];
  if (!f) throw new Error(`unknown command ${a.cmd}`);
  const r = await f(a);
  if (r) console.log(JSON.stringify(r));
}

main().catch((e) => { console.error(e); process.exit(1); });
