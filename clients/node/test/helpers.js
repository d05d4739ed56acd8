"use strict";
// Shared by the tests: the test database (PGFENCE_TEST_DSN, set by tests/test_node_client.py
// to the pytest session's database), a queue per test, waits with deadlines, child workers.
const crypto = require("node:crypto");
const path = require("node:path");
const { spawn } = require("node:child_process");
const pg = require("pg");
const { Client } = require("../lib");

const DSN = process.env.PGFENCE_TEST_DSN;
if (!DSN) throw new Error("PGFENCE_TEST_DSN is not set (run through `make test`, or set it to a deployed test database)");

const ZERO_TOKEN = "00000000-0000-0000-0000-000000000000";
const UNKNOWN_ID = "9223372036854775000";

/** The queues this test file made (removed by deleteQueues in its after hook). */
const madeQueues = new Set();
const queueName = (name) => {
  const q = `n_${name.replace(/[^a-z0-9]+/gi, "_").slice(0, 60)}_${crypto.randomBytes(4).toString("hex")}`;
  madeQueues.add(q);
  return q;
};

/**
 * Remove the jobs of this file's queues with their history (as the superuser, as
 * tests/support/db.py's delete_queues), so that no job of ours is left for a claim over
 * all queues in a Python test.
 */
async function deleteQueues(client) {
  const queues = [...madeQueues];
  if (!queues.length) return;
  await client.query(`
    WITH gone AS (DELETE FROM pgfence.jobs WHERE queue = ANY($1::text[]) RETURNING id),
         a AS (DELETE FROM pgfence.attempts USING gone WHERE job_id = gone.id),
         done AS (DELETE FROM pgfence.finished_jobs WHERE queue = ANY($1::text[]) RETURNING id),
         r AS (DELETE FROM pgfence.rejections WHERE job_id IN (SELECT id FROM gone UNION ALL SELECT id FROM done))
    SELECT count(*) FROM gone`, [queues]);
  await client.query("DELETE FROM pgfence.retention WHERE queue = ANY($1::text[])", [queues]);
  madeQueues.clear();
}
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

async function waitFor(predicate, timeoutMs, what) {
  const until = Date.now() + timeoutMs;
  for (;;) {
    const v = await predicate();
    if (v) return v;
    if (Date.now() > until) throw new Error(`timed out after ${timeoutMs} ms waiting for ${what}`);
    await sleep(25);
  }
}

async function connect() {
  return Client.connect(DSN, { max: 4 });
}

/** A plain pg connection (a caller's own, or another session). */
async function rawConnection() {
  const c = new pg.Client({ connectionString: DSN });
  await c.connect();
  return c;
}

/** Accepted completions per job: 'done' attempts in the history. */
async function doneAttempts(client, queue) {
  const { rows } = await client.query(
    "SELECT j.id::text AS id, j.status, (SELECT count(*) FROM pgfence.all_attempts a WHERE a.job_id = j.id AND a.outcome = 'done')::int AS done"
    + " FROM pgfence.all_jobs j WHERE j.queue = $1 ORDER BY j.id", [queue]);
  return rows;
}

/** The fixture worker (test/fixtures/worker.js) as a child process in its own process group. */
function workerProcess(queue, ...extra) {
  const child = spawn(process.execPath, [path.join(__dirname, "fixtures", "worker.js"), "--dsn", DSN, "--queue", queue, ...extra],
    { stdio: ["ignore", "pipe", "pipe"], detached: true });
  let log = "";
  child.stdout.on("data", (d) => { log += d; });
  child.stderr.on("data", (d) => { log += d; });
  const exited = new Promise((resolve) => child.on("exit", (code, signal) => resolve({ code, signal })));
  return {
    child, exited, log: () => log,
    signal(sig) { try { process.kill(-child.pid, sig); } catch (_) { /* gone */ } },
    async kill() { if (child.exitCode === null && child.signalCode === null) { this.signal("SIGKILL"); } await exited; },
  };
}

module.exports = { DSN, ZERO_TOKEN, UNKNOWN_ID, queueName, deleteQueues, sleep, waitFor, connect, rawConnection, doneAttempts, workerProcess };
