"use strict";
// The Worker against the test database: the protocol of docs/worker-protocol.md.
const { test, before, after } = require("node:test");
const assert = require("node:assert/strict");
const fs = require("node:fs");
const http = require("node:http");
const net = require("node:net");
const os = require("node:os");
const path = require("node:path");
const { Client, Worker, PermanentFailure, Interrupted, RetryAfter, Snooze, LeaseLost, MetricsError, WorkerOptionError, RawJson } = require("../lib");
const { DSN, deleteQueues, queueName, sleep, waitFor, connect, doneAttempts, workerProcess } = require("./helpers");

let client;
before(async () => { client = await connect(); });
after(async () => { await deleteQueues(client); await client.close(); });

/** A Worker on its own pool, run until `stop()`; returns {worker, stop}. */
async function startWorker(queue, handlers, options = {}) {
  const wclient = await Client.connect(DSN, { max: 4 });
  const worker = new Worker(wclient, handlers, { queues: [queue], pollInterval: 100, handleSignals: false, ...options });
  const running = worker.run();
  return {
    worker,
    async stop() { worker.stop(); await running; await wclient.close(); },
  };
}

test("a worker drains the queue: completes, fails with the database's decision, dead-letters", async () => {
  const queue = queueName("drain");
  await client.enqueue_many(Array(30).fill("ok"), Array.from({ length: 30 }, (_, i) => ({ i })), { queue });
  const boom = await client.enqueue("boom", {}, { queue, max_attempts: 2 });
  const perm = await client.enqueue("perm", {}, { queue });
  const later = await client.enqueue("later", {}, { queue });
  const unknown = await client.enqueue("nobody", {}, { queue });
  const w = await startWorker(queue, {
    ok: async (job) => ({ twice: job.payload.i * 2 }),
    boom: async () => { throw new Error("boom"); },
    perm: async () => { throw new PermanentFailure("no recipient"); },
    later: async () => { throw new RetryAfter(60000); },
  }, { concurrency: 4, prefetch: 4 });
  try {
    await waitFor(async () => (await client.stats()).filter((s) => s.queue === queue && s.status === "done")
      .reduce((n, s) => n + s.jobs, 0) >= 30, 20000, "30 jobs done");
    await waitFor(async () => (await client.job(perm)).status === "failed", 10000, "perm dead-lettered");
    await waitFor(async () => (await client.job(boom)).status === "failed", 10000, "boom dead-lettered after 2 attempts");
  } finally {
    await w.stop();
  }
  assert.equal((await client.job(boom)).attempts, 2);
  assert.match((await client.job(perm)).last_error, /PermanentFailure: no recipient/);
  const l = await client.job(later);
  assert.equal(l.status, "queued");
  assert.ok((l.available_at - l.updated_at) / 1000 > 55, "RetryAfter(60000) is 60 s");
  const u = await client.job(unknown);
  assert.deepEqual([u.status, /UnknownKind/.test(u.last_error)], ["failed", true]);
  const rows = await doneAttempts(client, queue);
  assert.equal(rows.filter((r) => r.status === "done").length, 30);
  assert.ok(rows.filter((r) => r.status === "done").every((r) => r.done === 1));
  assert.equal(w.worker.counters.completed, 30);
});

test("a worker with queueSet claims from the set's queues only, woken by their notifications", async () => {
  const queue = queueName("qset");
  const other = queueName("qset_b");
  const name = `${queue}-set`;
  await client.define_queue_set(name, [queue, other]);
  assert.throws(() => new Worker(client, {}, { queues: [queue], queueSet: name }), /queueSet/);
  const outside = await client.enqueue("k", {}, { queue: queueName("qset_out") });
  const seen = [];
  // (a 30 s poll: only a wake-up runs the jobs within the wait below)
  const w = await startWorker(queue, { k: async (job) => { seen.push(job.queue); } },
    { queues: null, queueSet: name, pollInterval: 30000 });
  try {
    await sleep(500);
    const ids = [await client.enqueue("k", {}, { queue: other }), await client.enqueue("k", {}, { queue })];
    for (const id of ids) await waitFor(async () => (await client.job(id)).status === "done", 12000, `job ${id} done`);
  } finally {
    await w.stop();
    await client.drop_queue_set(name);
  }
  assert.deepEqual(seen.sort(), [queue, other].sort());
  assert.equal((await client.job(outside)).status, "queued");
});

test("a worker with queueSet wakes on the queues its set is defined again with (the set's own tag)", async () => {
  const queue = queueName("qset_again");
  const added = queueName("qset_added");
  const other = queueName("qset_other");
  const name = `${queue}-set`;
  await client.define_queue_set(name, [queue]);
  // (a 30 s poll: only a wake-up runs the jobs within the wait below)
  const w = await startWorker(queue, { k: async () => {} }, { queues: null, queueSet: name, pollInterval: 30000 });
  try {
    await sleep(500);
    await client.define_queue_set(name, [queue, added]);
    await sleep(500); // (the listener has read the set again)
    const first = await client.enqueue("k", {}, { queue: added });
    await waitFor(async () => (await client.job(first)).status === "done", 12000, `job ${first} done`);
    await client.define_queue_set(name, [other]);
    await sleep(500);
    const second = await client.enqueue("k", {}, { queue: other });
    await waitFor(async () => (await client.job(second)).status === "done", 12000, `job ${second} done`);
  } finally {
    await w.stop();
    await client.drop_queue_set(name);
  }
});

test("a flood of a set's tag costs a worker at most a read of the set a second", async () => {
  const queue = queueName("qset_flood");
  const name = `${queue}-set`;
  await client.define_queue_set(name, [queue]);
  const w = await startWorker(queue, { k: async () => {} }, { queues: null, queueSet: name, pollInterval: 30000 });
  let reads = 0;
  const real = w.worker.client.queue_sets.bind(w.worker.client);
  w.worker.client.queue_sets = async (...args) => { reads += 1; return real(...args); };
  try {
    await sleep(500);
    const [{ tag }] = await client.wakeup_tags(["\x01" + name]);
    const started = Date.now();
    // (one notification per transaction: the same payload twice in one is sent once)
    await client.query(`DO $$ BEGIN FOR i IN 1..3000 LOOP PERFORM pg_notify('pgfence_enqueue', '${tag}'); COMMIT; END LOOP; END $$`);
    await sleep(1500);
    const bound = (Date.now() - started) / 1000 + 3;
    assert.ok(reads >= 1 && reads <= bound, `${reads} reads of the set (at most ${bound.toFixed(1)})`);
    const id = await client.enqueue("k", {}, { queue });
    await waitFor(async () => (await client.job(id)).status === "done", 12000, `job ${id} done`);
  } finally {
    await w.stop();
    await client.drop_queue_set(name);
  }
});

test("a handler's signal aborts when its lease is lost (cancel), and its late result is void", async () => {
  const queue = queueName("abort");
  const id = await client.enqueue("wait", {}, { queue });
  let aborted = null;
  let started = false;
  const w = await startWorker(queue, {
    wait: async (job) => {
      started = true;
      await new Promise((resolve) => job.signal.addEventListener("abort", resolve, { once: true }));
      aborted = job.shouldStop();
      return { late: true };
    },
  }, { lease: 600 });
  try {
    await waitFor(() => started, 10000, "the handler to start");
    await client.cancel(id);
    await waitFor(() => aborted !== null, 5000, "the heartbeat to abort the handler");
  } finally {
    await w.stop();
  }
  assert.equal(aborted, true);
  const row = await client.job(id);
  assert.deepEqual([row.status, row.result], ["cancelled", null]);
  assert.equal(w.worker.counters.lease_lost, 1);
});

test("a handler's job is frozen: assigning to its id or token changes nothing the worker reports with", async () => {
  const queue = queueName("frozen");
  const other = await client.enqueue("other", {}, { queue, run_at: new Date(Date.now() + 3600e3) });
  const ids = await Promise.all([client.enqueue("strict", { n: 1 }, { queue }), client.enqueue("merge", { n: 2 }, { queue })]);
  const threw = [];
  const w = await startWorker(queue, {
    strict: async (job) => {
      // (this file is strict code: an assignment to a frozen property throws)
      try { job.id = other; } catch (err) { threw.push(err instanceof TypeError); }
      try { job.attempt_token = "00000000-0000-0000-0000-000000000000"; } catch (err) { threw.push(err instanceof TypeError); }
      job.payload.n += 10; // the payload stays the handler's
      return { n: job.payload.n };
    },
    merge: async (job) => {
      try { Object.assign(job, { id: other }); } catch (err) { threw.push(err instanceof TypeError); }
      return { id: job.id };
    },
  });
  try {
    await waitFor(async () => (await Promise.all(ids.map((id) => client.job(id)))).every((j) => j.status === "done"),
      10000, "both jobs done");
  } finally {
    await w.stop();
  }
  assert.deepEqual(threw, [true, true, true]);
  assert.deepEqual((await client.job(ids[0])).result, { n: 11 });
  assert.deepEqual((await client.job(ids[1])).result, { id: String(ids[1]) });
  assert.equal((await client.job(other)).status, "queued");
  assert.equal(w.worker.counters.completed, 2);
});

test("stop(): unstarted jobs go back uncounted, an interrupted one by the reclaim rule", async () => {
  const queue = queueName("shutdown");
  const first = await client.enqueue("hold", {}, { queue, priority: 10 });
  const rest = await client.enqueue_many(["hold", "hold"], null, { queue });
  let running = 0;
  const w = await startWorker(queue, {
    hold: async (job) => {
      running += 1;
      await new Promise((resolve) => job.signal.addEventListener("abort", resolve, { once: true }));
      throw new Interrupted();
    },
  }, { concurrency: 1, prefetch: 2 });
  await waitFor(() => running === 1, 10000, "one handler to run");
  await w.stop();
  const r1 = await client.job(first);
  assert.deepEqual([r1.status, r1.attempts], ["queued", 1]);
  for (const { id } of rest) {
    const r = await client.job(id);
    assert.deepEqual([r.status, r.attempts], ["queued", 0]);
  }
  assert.equal(w.worker.counters.released, 3);
});

test("a claim that got no connection is not looked up as a lost reply", async () => {
  // (a pool of one connection, held elsewhere: the claim times out waiting for it)
  const wclient = await Client.connect({ connectionString: DSN, connectionTimeoutMillis: 300 }, { max: 1 });
  const warnings = [];
  const worker = new Worker(wclient, { k: async () => {} }, {
    queues: [queueName("no_connection")], pollInterval: 100, handleSignals: false, listen: false, runSweeper: false,
    logger: { warn: (m) => warnings.push(m) } });
  const running = worker.run();
  let held;
  try {
    await waitFor(() => worker.limits !== undefined, 10000, "the worker to read its limits");
    held = await wclient.pool.connect();
    await waitFor(() => warnings.some((m) => m.includes("claim failed")), 10000, "a failed claim");
    assert.equal(worker.unanswered, null);
  } finally {
    held?.release();
    worker.stop();
    await running;
    await wclient.close();
  }
});

test("a lost claim reply: the worker asks claim_results and runs those jobs", async () => {
  const queue = queueName("lost_reply_worker");
  const ids = (await client.enqueue_many(["ok", "ok", "ok"], null, { queue })).map((r) => r.id);
  const wclient = await Client.connect(DSN, { max: 4 });
  let lost = true;
  const realClaim = wclient.claim.bind(wclient);
  wclient.claim = async (...args) => {
    const jobs = await realClaim(...args);
    if (lost && jobs.length) { lost = false; throw Object.assign(new Error("Connection terminated unexpectedly"), {}); }
    return jobs;
  };
  const worker = new Worker(wclient, { ok: async (job) => ({ attempt: job.attempts }) }, { queues: [queue], pollInterval: 100, handleSignals: false, lease: 30000 });
  const running = worker.run();
  try {
    await waitFor(async () => (await Promise.all(ids.map((id) => client.job(id)))).every((r) => r.status === "done"), 10000, "every job done");
  } finally {
    worker.stop();
    await running;
    await wclient.close();
  }
  for (const id of ids) assert.equal((await client.job(id)).attempts, 1, "run in the attempt the lost claim took");
});

test("SIGTERM: the worker process gives its jobs back and exits 0", async () => {
  const queue = queueName("sigterm");
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), "pgfence-node-"));
  const marker = path.join(dir, "hold");
  const started = path.join(dir, "started");
  fs.writeFileSync(marker, "");
  const id = await client.enqueue("hold_stubborn", { marker, started }, { queue });
  const queued = await client.enqueue("echo", {}, { queue, priority: -1 });
  const p = workerProcess(queue, "--concurrency", "1", "--prefetch", "1", "--shutdown-grace", "300");
  try {
    await waitFor(() => fs.existsSync(started), 15000, "the handler to start");
    await waitFor(async () => (await client.job(queued)).status === "processing", 5000, "the prefetched job to be claimed");
    p.signal("SIGTERM");
    const { code } = await p.exited;
    assert.equal(code, 0, p.log());
  } finally {
    await p.kill();
    fs.rmSync(dir, { recursive: true, force: true });
  }
  assert.match(p.log(), /SIGTERM received/);
  const held = await client.job(id);
  assert.deepEqual([held.status, held.attempts, held.last_error], ["queued", 1, "released by worker before completion"]);
  const q = await client.job(queued);
  assert.deepEqual([q.status, q.attempts], ["queued", 0]);
});

test("SIGKILL mid-batch: afterwards every job has exactly one accepted completion", async () => {
  const queue = queueName("sigkill");
  const n = 40;
  await client.enqueue_many(Array(n).fill("nap"), Array(n).fill({ ms: 150 }), { queue });
  const a = workerProcess(queue, "--concurrency", "4", "--prefetch", "4", "--lease", "1000", "--worker-id", "A");
  try {
    await waitFor(async () => {
      const rows = await doneAttempts(client, queue);
      return rows.filter((r) => r.status === "done").length >= 8;
    }, 20000, "worker A to complete some jobs");
    a.signal("SIGKILL");
    await a.exited;
  } finally {
    await a.kill();
  }
  const held = (await doneAttempts(client, queue)).filter((r) => r.status === "processing").length;
  assert.ok(held > 0, "A died holding jobs");
  const b = workerProcess(queue, "--concurrency", "8", "--lease", "5000", "--worker-id", "B");
  try {
    await waitFor(async () => (await doneAttempts(client, queue)).every((r) => r.status === "done"), 30000, "every job done");
    b.signal("SIGTERM");
    assert.equal((await b.exited).code, 0, b.log());
  } finally {
    await b.kill();
  }
  const rows = await doneAttempts(client, queue);
  assert.equal(rows.length, n);
  assert.deepEqual(rows.filter((r) => r.done !== 1), [], "exactly one accepted completion per job");
  const { rows: [{ reclaimed }] } = await client.query(
    "SELECT count(*)::int AS reclaimed FROM pgfence.all_attempts a JOIN pgfence.all_jobs j ON j.id = a.job_id"
    + " WHERE j.queue = $1 AND a.outcome = 'reclaimed' AND a.worker = 'A'", [queue]);
  // each job A held when it died was reclaimed (a heartbeat late under load may have lost one earlier too)
  assert.ok(reclaimed >= held, `${reclaimed} of A's attempts reclaimed, ${held} held at its death`);
});

test("the stand-in sweeper: runSweeper true calls sweep(); null leaves it to a running pg_cron sweeper", async () => {
  // (a fresh test cluster's pg_cron sweeper makes its first pass within seconds)
  await waitFor(async () => (await client.sweeper_health()).state === "running", 20000, "the pg_cron sweeper to run");
  const calls = { true: 0, null: 0 };
  for (const mode of [true, null]) {
    const wclient = await Client.connect(DSN, { max: 4 });
    const realSweep = wclient.sweep.bind(wclient);
    wclient.sweep = async (...args) => { calls[String(mode)] += 1; return realSweep(...args); };
    const worker = new Worker(wclient, {}, { queues: [queueName("sweeper")], runSweeper: mode, sweepInterval: 50,
      handleSignals: false, pollInterval: 100 });
    const running = worker.run();
    await sleep(600);
    worker.stop();
    await running;
    await wclient.close();
  }
  assert.ok(calls.true >= 3, `runSweeper true: ${calls.true} sweeps`);
  assert.equal((await client.sweeper_health()).state, "running", "the test cluster's pg_cron sweeper runs");
  assert.equal(calls.null, 0, "null: no sweep while the background sweeper runs");
});

test("heartbeats keep a lease alive past its length; a NOTIFY wakes an idle worker (unprepared statements)", async () => {
  const queue = queueName("heartbeats");
  const wclient = await Client.connect(DSN, { max: 4, prepared: false });
  const worker = new Worker(wclient, {
    long: async (job) => { await sleep(2000); return { attempt: job.attempts }; },
    quick: async () => ({ ok: true }),
  }, { queues: [queue], lease: 600, pollInterval: 20000, handleSignals: false });
  const running = worker.run();
  try {
    await sleep(300); // the worker is idle, listening, its next poll 10-20 s away
    const t0 = Date.now();
    const quick = await client.enqueue("quick", {}, { queue });
    await waitFor(async () => (await client.job(quick)).status === "done", 5000, "the NOTIFY to wake the worker");
    assert.ok(Date.now() - t0 < 5000);
    const long = await client.enqueue("long", {}, { queue });
    await waitFor(async () => (await client.job(long)).status === "done", 15000, "the long job");
    const row = await client.job(long);
    assert.deepEqual([row.attempts, row.reclaim_count, row.result], [1, 0, { attempt: 1 }]);
  } finally {
    worker.stop();
    await running;
    await wclient.close();
  }
});

test("a result the database refuses fails the attempt, alone in its batch; one jsonb cannot store fails at once", async () => {
  const queue = queueName("refused_result");
  const good = await client.enqueue("ok", { i: 1 }, { queue });
  const bad = await client.enqueue("raw", {}, { queue });
  const nul = await client.enqueue("nul", {}, { queue });
  const w = await startWorker(queue, {
    ok: async () => ({ fine: true }),
    raw: async () => new RawJson("{not json"), // sent as it is: the database refuses it
    nul: async () => ({ text: "a\u0000b" }), // JSON can say it, jsonb cannot store it: known before sending
  }, { concurrency: 3 });
  try {
    await waitFor(async () => (await client.job(bad)).status === "failed" && (await client.job(nul)).status === "failed",
      10000, "the refused results' jobs to fail");
  } finally {
    await w.stop();
  }
  const b = await client.job(bad);
  assert.match(b.last_error, /ResultNotStorable/);
  assert.equal(b.attempts, 1, "failed permanently: no retry");
  const n = await client.job(nul);
  assert.match(n.last_error, /^ResultNotJSON: .*NUL character/);
  assert.equal(n.attempts, 1, "failed permanently: no retry");
  assert.deepEqual((await client.job(good)).result, { fine: true });
});

test("a handler that throws something whose handling throws (a Proxy, a Snooze with a hostile delay) fails its attempt and frees its slot", async () => {
  const queue = queueName("hostile_throw");
  const proxy = await client.enqueue("proxy", {}, { queue, priority: 3, max_attempts: 1 });
  const snooze = await client.enqueue("snooze", {}, { queue, priority: 2, max_attempts: 1 });
  const ok = await client.enqueue("ok", {}, { queue, priority: 1 });
  const w = await startWorker(queue, {
    proxy: async () => { throw new Proxy({}, { getPrototypeOf() { throw new Error("trap"); } }); },
    snooze: async () => { const s = new Snooze(1000); Object.defineProperty(s, "delay", { get() { throw new Error("d"); } }); throw s; },
    ok: async () => ({ ran: true }),
  }, { concurrency: 1 });
  try {
    // (one handler at a time: before, each of the first two held it for ever, heartbeated)
    await waitFor(async () => (await client.job(ok)).status === "done", 10000, "the last job to run");
  } finally {
    await w.stop();
  }
  assert.match((await client.job(proxy)).last_error, /^thrown value: object (\(Object\) )?\(it could not be formatted: Error\)$/);
  assert.match((await client.job(snooze)).last_error, /^Snooze: snooze for 1000 ms/);
  assert.equal(w.worker.ledger.held.size, 0);
});

test("the worker's log messages write the database's strings safely; a logger that throws never stops the worker", async () => {
  const queue = queueName("log_escape");
  const kind = "zero\u200bwidth"; // (the database refuses controls and bidi marks in a kind, not this)
  const id = await client.enqueue(kind, {}, { queue });
  const infos = [];
  const w = await startWorker(queue, { [kind]: async () => ({ ok: 1 }) }, {
    logger: { info: (m) => { infos.push(m); throw new Error("the log is full"); }, warn: () => Promise.reject(new Error("async")) } });
  try {
    await waitFor(async () => (await client.job(id)).status === "done", 10000, "the job to complete");
  } finally {
    await w.stop();
  }
  const claimed = infos.find((m) => m.startsWith(`claimed job ${id} `));
  assert.ok(claimed, infos.join("\n"));
  assert.ok(claimed.includes('kind="zero\\u200bwidth"') && !claimed.includes("\u200b"), claimed);
  // a refusal's detail can carry another worker's last_error ("the attempt timed out after <it>"): printable() too
  const warned = [];
  const w2 = new Worker(w.worker.client, { k: () => {} }, { logger: { warn: (m) => warned.push(m) } });
  w2.log.warn("detail: timed out after \u001b[2J\u202e\n");
  assert.deepEqual(warned, ["detail: timed out after \\u001b[2J\\u202e\\u000a"]);
});

test("a NOTIFY flood makes the listener stop listening for a while (the worker polls meanwhile)", async () => {
  const queue = queueName("flood");
  const warnings = [];
  const wclient = await Client.connect(DSN, { max: 4 });
  const worker = new Worker(wclient, { ok: async () => null }, { queues: [queue], pollInterval: 200, handleSignals: false,
    logger: { warn: (m) => warnings.push(m) } });
  const running = worker.run();
  try {
    await sleep(300);
    await client.query("SELECT count(pg_notify('pgfence_enqueue', 'flood-' || i)) FROM generate_series(1, 2500) i");
    await waitFor(() => warnings.some((w) => /notifications in a second/.test(w)), 5000, "the flood warning");
    const id = await client.enqueue("ok", {}, { queue });
    await waitFor(async () => (await client.job(id)).status === "done", 5000, "the poll to find the job");
  } finally {
    worker.stop();
    await running;
    await wclient.close();
  }
});

test("a handler snoozes: reported with snooze_many, the attempt recorded snoozed and not counted", async () => {
  const queue = queueName("snooze_worker");
  const twice = await client.enqueue("twice", {}, { queue, max_attempts: 1 });
  const later = await client.enqueue("later", {}, { queue });
  const bad = await client.enqueue("bad", {}, { queue, max_attempts: 1 });
  const refused = await client.enqueue("refused", {}, { queue, max_attempts: 1 });
  let runs = 0;
  const w = await startWorker(queue, {
    // max_attempts 1: a snooze that counted would leave no attempt for the third run
    twice: async () => { runs += 1; if (runs <= 2) throw new Snooze(100); return { runs }; },
    later: async () => { throw new Snooze("1 hour"); },
    bad: async () => { throw new Snooze(0); }, // outside (0, 365 days]: fails with the default backoff
    refused: async () => { throw new Snooze("-1 hour"); }, // text: the database refuses it (22023), the attempt fails
  }, { pollInterval: 50 });
  try {
    await waitFor(async () => (await client.job(twice)).status === "done", 10000, "the twice-snoozed job to be done");
    await waitFor(async () => (await client.attempts_of(later)).length === 1, 5000, "the later job's snooze");
    await waitFor(async () => (await client.job(bad)).status === "failed", 5000, "the bad snooze to fail");
    await waitFor(async () => (await client.job(refused)).status === "failed", 5000, "the refused snooze to fail");
  } finally {
    await w.stop();
  }
  const t = await client.job(twice);
  assert.deepEqual([t.status, t.result, t.attempts, t.max_attempts], ["done", { runs: 3 }, 3, 3]);
  assert.deepEqual((await client.attempts_of(twice)).map((a) => a.outcome), ["snoozed", "snoozed", "done"]);
  const l = await client.job(later);
  assert.deepEqual([l.status, l.attempts, l.max_attempts], ["queued", 1, 4]);
  assert.ok((l.available_at - Date.now()) / 1000 > 3500, "Snooze(\"1 hour\") is an hour");
  assert.deepEqual((await client.attempts_of(later)).map((a) => a.outcome), ["snoozed"]);
  assert.match((await client.job(bad)).last_error, /Snooze with delay 0 outside/);
  assert.match((await client.job(refused)).last_error, /SnoozeNotStorable: .*delays/);
  assert.equal(w.worker.counters.snoozed, 3);
});

test("a handler outliving its 1 s run timeout: its signal aborts just after the deadline, its completion is refused", async () => {
  const queue = queueName("run_timeout");
  const id = await client.enqueue("slow", {}, { queue, timeout: 1000, max_attempts: 1 });
  let claimedAt = null;
  let abortedAfter = null;
  let token = null;
  const w = await startWorker(queue, {
    slow: async (job) => {
      claimedAt = Date.now();
      token = job.attempt_token;
      assert.ok(job.lease_expires_at - claimedAt < 1500, "the claim's lease is capped at the deadline");
      await new Promise((resolve) => job.signal.addEventListener("abort", resolve, { once: true }));
      abortedAfter = Date.now() - claimedAt;
      return { late: true }; // void: the lease is lost
    },
  }, { lease: 30000 }); // regular heartbeats every 10 s: only the deadline's round can abort in time
  try {
    await waitFor(() => abortedAfter !== null, 5000, "the handler's signal to abort after the deadline");
    await waitFor(async () => (await client.job(id)).status === "failed", 5000, "the timed-out job to be dead-lettered");
  } finally {
    await w.stop();
  }
  assert.ok(abortedAfter >= 900 && abortedAfter < 3000, `aborted ${abortedAfter} ms after the claim`);
  await assert.rejects(client.complete(id, token), (e) => e instanceof LeaseLost && /timed out/.test(e.detail));
  const row = await client.job(id);
  assert.deepEqual([row.status, row.result], ["failed", null]);
  assert.match(row.last_error, /timed out after/);
  assert.deepEqual((await client.attempts_of(id)).map((a) => a.outcome), ["timed_out"]);
  assert.equal(w.worker.counters.completed, 0);
  assert.equal(w.worker.counters.lease_lost, 1);
});

test("the claim hold-off follows only a claim a wake-up prompted and that found too little; Bell.wait says which", async () => {
  const { Bell, holdoff, CLAIM_HOLDOFF } = require("../lib/worker");
  assert.equal(holdoff(true, true, 1), CLAIM_HOLDOFF - 1);
  assert.equal(holdoff(true, true, CLAIM_HOLDOFF + 1), 0);
  assert.equal(holdoff(true, false, 0), 0); // after a poll's claim: a NOTIFY right after it is claimed at once
  assert.equal(holdoff(false, true, 0), 0);
  const bell = new Bell();
  assert.equal(await bell.wait(1), false);
  setTimeout(() => bell.ring(), 1);
  assert.equal(await bell.wait(10000), true);
  assert.equal(await bell.wait(10000), true); // still rung until cleared
  bell.clear();
  assert.equal(await bell.wait(1), false);
});

// -- the worker's own /metrics (metricsPort; lib/metrics.js) ---------------------------

/** GET (or `method`) http://host:port`path` on a connection of its own: {status, headers, body}. */
function scrape(address, pathname = "/metrics", method = "GET") {
  return new Promise((resolve, reject) => {
    const req = http.request({ host: address.host, port: address.port, path: pathname, method, agent: false }, (res) => {
      let body = "";
      res.setEncoding("utf8");
      res.on("data", (d) => { body += d; });
      res.on("end", () => resolve({ status: res.statusCode, headers: res.headers, body }));
    });
    req.on("error", reject);
    req.setTimeout(10000, () => req.destroy(new Error("the scrape timed out")));
    req.end(method === "POST" ? "x" : undefined);
  });
}

const METRIC_NAME = /^[a-zA-Z_:][a-zA-Z0-9_:]*$/;
const FLOAT = /^(?:[+-]?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][+-]?\d+)?|[+-]Inf|NaN)$/;

/** A label set's text (between the braces) as {name: value}, undoing exactly the exposition's three escapes. */
function parseLabels(text) {
  const labels = {};
  let i = 0;
  while (i < text.length) {
    const m = /^([a-zA-Z_][a-zA-Z0-9_]*)="/.exec(text.slice(i));
    assert.ok(m, `a label name at ${JSON.stringify(text.slice(i))}`);
    i += m[0].length;
    let value = "";
    for (;;) {
      const c = text[i++];
      assert.ok(c !== undefined, `an unterminated label value in ${JSON.stringify(text)}`);
      if (c === "\"") break;
      if (c === "\\") {
        const n = text[i++];
        const unescaped = { "\\": "\\", "\"": "\"", n: "\n" }[n];
        assert.ok(unescaped !== undefined, `no escape \\${n} in the exposition format (${JSON.stringify(text)})`);
        value += unescaped;
      } else {
        value += c;
      }
    }
    assert.ok(!(m[1] in labels), `label ${m[1]} twice`);
    labels[m[1]] = value;
    if (text[i] === ",") i += 1;
    else assert.equal(i, text.length, `a comma or the end after a label in ${JSON.stringify(text)}`);
  }
  return labels;
}

/**
 * The Prometheus text exposition (format 0.0.4), read strictly: every family opens with
 * # HELP then # TYPE, each sample belongs to the family above it, label values use only the
 * three escapes, and each histogram series has its buckets in increasing `le` order ending
 * at +Inf, cumulative, with _count equal to the +Inf bucket and a _sum. Returns
 * {family name: {type, help, samples: [{name, labels, value}]}}.
 */
function parseExposition(text) {
  assert.ok(text.endsWith("\n"), "the text ends with a newline");
  const families = {};
  let family = null;
  for (const line of text.slice(0, -1).split("\n")) {
    let m;
    if ((m = /^# HELP (\S+) (.*)$/.exec(line))) {
      assert.match(m[1], METRIC_NAME);
      assert.ok(!(m[1] in families), `family ${m[1]} twice`);
      family = families[m[1]] = { name: m[1], help: m[2], type: null, samples: [] };
    } else if ((m = /^# TYPE (\S+) (\S+)$/.exec(line))) {
      assert.ok(family && family.name === m[1] && family.type === null && !family.samples.length, `# TYPE ${m[1]} right after its # HELP`);
      assert.ok(["counter", "gauge", "histogram"].includes(m[2]), `type ${m[2]}`);
      family.type = m[2];
    } else {
      m = /^([^{ ]+)(?:\{(.*)\})? (\S+)$/.exec(line);
      assert.ok(m, `a sample line: ${JSON.stringify(line)}`);
      assert.match(m[1], METRIC_NAME);
      assert.match(m[3], FLOAT);
      assert.ok(family && family.type, `sample ${m[1]} after a # HELP and # TYPE`);
      const names = family.type === "histogram" ? ["_bucket", "_count", "_sum"].map((x) => family.name + x) : [family.name];
      assert.ok(names.includes(m[1]), `sample ${m[1]} in family ${family.name}`);
      family.samples.push({ name: m[1], labels: m[2] === undefined ? {} : parseLabels(m[2]), value: Number(m[3].replace("Inf", "Infinity")) });
    }
  }
  for (const f of Object.values(families)) {
    if (f.type !== "histogram") continue;
    const series = new Map();
    for (const s of f.samples) {
      const { le, ...rest } = s.labels;
      const key = JSON.stringify(rest);
      if (!series.has(key)) series.set(key, { buckets: [], count: null, sum: null });
      const one = series.get(key);
      if (s.name.endsWith("_bucket")) {
        assert.ok(le !== undefined && one.count === null && one.sum === null, `${f.name}${key}: buckets, then _count and _sum`);
        one.buckets.push([le === "+Inf" ? Infinity : Number(le), s.value]);
      } else {
        assert.equal(le, undefined);
        one[s.name.endsWith("_count") ? "count" : "sum"] = s.value;
      }
    }
    for (const [key, { buckets, count, sum }] of series) {
      assert.ok(buckets.length > 1 && buckets[buckets.length - 1][0] === Infinity, `${f.name}${key} ends with le="+Inf"`);
      for (let i = 1; i < buckets.length; i += 1) {
        assert.ok(buckets[i][0] > buckets[i - 1][0], `${f.name}${key}: le increases`);
        assert.ok(buckets[i][1] >= buckets[i - 1][1], `${f.name}${key}: buckets are cumulative`);
      }
      assert.equal(count, buckets[buckets.length - 1][1], `${f.name}${key}: _count is the +Inf bucket`);
      assert.ok(sum !== null && sum >= 0, `${f.name}${key} has a _sum`);
    }
  }
  return families;
}

/** {JSON [kind, outcome]: count} of pgfence_worker_jobs_total, zeros left out. */
function jobsTotal(families) {
  const found = {};
  for (const s of families.pgfence_worker_jobs_total.samples) {
    if (s.value) found[JSON.stringify([s.labels.kind, s.labels.outcome])] = s.value;
  }
  return found;
}

/** {kind: value} of a histogram's _count or _sum samples, zeros left out. */
function byKind(families, family, suffix) {
  const found = {};
  for (const s of families[family].samples) if (s.name === family + suffix && s.value) found[s.labels.kind] = s.value;
  return found;
}

const listenOn = (server, port) => new Promise((resolve, reject) => {
  server.once("error", reject);
  server.listen(port, "127.0.0.1", () => { server.off("error", reject); resolve(server.address().port); });
});

/** Nothing listens on 127.0.0.1:`port` (a server may listen there now). */
async function portIsFree(port) {
  const probe = net.createServer();
  try {
    await listenOn(probe, port);
    return true;
  } catch (err) {
    if (err.code === "EADDRINUSE") return false;
    throw err;
  } finally {
    await new Promise((resolve) => probe.close(() => resolve()));
  }
}

// (a kind the database accepts: no control character; the line break and the ESC below are handlers' kinds only)
const WEIRD = "we\"ird\\<script>alert(1)</script>";
const LINE_BREAK = "line\nbreak";
const ESCAPE = "\x1b[31mred";

test("worker metrics: each attempt counted by kind and by the database's answer, unknown kinds under kind=\"\", labels escaped", async () => {
  const queue = queueName("metrics");
  const handlers = {
    ok: async (job) => ({ ok: job.id }),
    boom: async () => { throw new Error("boom"); },
    // retried at once, then fails for good (max_attempts 2)
    flaky: async (job) => { if (job.attempts === 1) throw new RetryAfter(0); throw new Error("again"); },
    nap: async () => { throw new Snooze("1 hour"); },
    shy: async (job) => { if (job.attempts === 1) throw new Interrupted(); return null; }, // given back once, then done
    [WEIRD]: async () => null,
    [LINE_BREAK]: async () => null,
    [ESCAPE]: async () => null,
  };
  const jobs = new Map();
  for (const [kind, maxAttempts] of [["ok", 3], ["ok", 3], ["ok", 3], ["boom", 1], ["flaky", 2], ["nap", 3], ["shy", 3],
    [WEIRD, 3], ["__proto__", 3], ["nobody", 3]]) {
    jobs.set(await client.enqueue(kind, {}, { queue, max_attempts: maxAttempts }), kind);
  }
  const w = await startWorker(queue, handlers, { metricsPort: 0, concurrency: 4, prefetch: 4 });
  let address, families, text, headers, expected;
  try {
    address = await waitFor(() => w.worker.metricsAddress, 10000, "the metrics server");
    assert.equal(address.host, "127.0.0.1");
    assert.ok(address.port > 0, "port 0: a free port was bound");
    for (const [id, kind] of jobs) {
      if (kind === "nap") await waitFor(async () => (await client.attempts_of(id)).length === 1, 15000, "the snooze");
      else await waitFor(async () => ["done", "failed"].includes((await client.job(id)).status), 15000, `job ${id} (${kind}) to end`);
    }
    // What the counter must say, from each job's attempt history: a failed attempt is
    // "failed" when it dead-lettered the job (its last, the job failed), else "retried";
    // a kind without a handler counts under "".
    expected = {};
    for (const [id, kind] of jobs) {
      const status = (await client.job(id)).status;
      const history = await client.attempts_of(id);
      const last = Math.max(...history.map((a) => a.attempt));
      for (const a of history) {
        let outcome = a.outcome;
        if (outcome === "failed") outcome = a.attempt === last && status === "failed" ? "failed" : "retried";
        const key = JSON.stringify([Object.prototype.hasOwnProperty.call(handlers, kind) ? kind : "", outcome]);
        expected[key] = (expected[key] || 0) + 1;
      }
    }
    // (a count moves once the database's answer is back: shortly after the row changed)
    await waitFor(async () => {
      ({ body: text, headers } = await scrape(address));
      families = parseExposition(text);
      return JSON.stringify(Object.entries(jobsTotal(families)).sort()) === JSON.stringify(Object.entries(expected).sort());
    }, 10000, `pgfence_worker_jobs_total to be ${JSON.stringify(expected)}`);

    // anything but GET /metrics: a fixed text, nothing of the request echoed
    for (const p of ["/", "/<script>x</script>", "/metrics/../x", "/metricsx"]) {
      const r = await scrape(address, p);
      assert.deepEqual([r.status, r.body], [404, "not found: this worker serves its metrics at /metrics\n"]);
    }
    const post = await scrape(address, "/metrics", "POST");
    assert.deepEqual([post.status, post.body, post.headers.allow], [405, "method not allowed: use GET\n", "GET"]);
    const odd = await new Promise((resolve, reject) => {
      const sock = net.connect(address.port, address.host, () => sock.end("<script> /metrics HTTP/1.1\r\nHost: x\r\n\r\n"));
      let got = "";
      sock.on("data", (d) => { got += d; });
      sock.on("end", () => resolve(got));
      sock.on("error", reject);
    });
    assert.match(odd, /^HTTP\/1\.1 4\d\d /);
    assert.ok(!odd.includes("<script>"), odd);
  } finally {
    await w.stop();
  }
  // the test's own reading of the history, so that the comparison above compared something
  assert.deepEqual(expected, Object.fromEntries(Object.entries({
    ok_done: 3, boom_failed: 1, flaky_retried: 1, flaky_failed: 1, nap_snoozed: 1, shy_released: 1, shy_done: 1,
  }).map(([k, n]) => [JSON.stringify(k.split("_")), n]).concat([[JSON.stringify([WEIRD, "done"]), 1],
    [JSON.stringify(["", "failed"]), 2]])));
  assert.equal(w.worker.metricsAddress, null, "no address once run() ended");
  assert.ok(await portIsFree(address.port), "the port is free again once run() ended");

  assert.equal(headers["content-type"], "text/plain; version=0.0.4; charset=utf-8");
  assert.equal(headers["x-content-type-options"], "nosniff");
  assert.deepEqual(Object.entries(families).map(([name, f]) => [name, f.type]), [
    ["pgfence_worker_handler_duration_seconds", "histogram"], ["pgfence_worker_enqueue_to_start_seconds", "histogram"],
    ["pgfence_worker_claim_to_start_seconds", "histogram"], ["pgfence_worker_jobs_total", "counter"],
    ["pgfence_worker_in_flight", "gauge"]]);
  // the escapes, as the Python worker writes them: printable() (\uXXXX for controls), then
  // the exposition's backslash, double quote and newline
  const lines = text.split("\n");
  assert.ok(lines.includes("pgfence_worker_jobs_total{kind=\"we\\\"ird\\\\<script>alert(1)</script>\",outcome=\"done\"} 1.0"), text);
  assert.ok(lines.includes("pgfence_worker_jobs_total{kind=\"line\\\\u000abreak\",outcome=\"done\"} 0.0"), text);
  assert.ok(lines.includes("pgfence_worker_jobs_total{kind=\"\\\\u001b[31mred\",outcome=\"done\"} 0.0"), text);
  assert.ok(!text.includes("line\nbreak") && !text.includes("\x1b"), "no raw line break or ESC in the text");
  // every series of a handler's kind exists from the start (at 0 where nothing happened), and
  // the unknown kinds ("__proto__", "nobody") add none: kinds are the handlers' and ""
  const kinds = new Set(families.pgfence_worker_jobs_total.samples.map((s) => s.labels.kind));
  assert.deepEqual([...kinds].sort(), ["ok", "boom", "flaky", "nap", "shy", WEIRD, "line\\u000abreak", "\\u001b[31mred", ""].sort());
  assert.equal(families.pgfence_worker_jobs_total.samples.length, kinds.size * 7, "7 outcomes per kind");
  for (const f of ["pgfence_worker_handler_duration_seconds", "pgfence_worker_enqueue_to_start_seconds", "pgfence_worker_claim_to_start_seconds"]) {
    assert.deepEqual(new Set(families[f].samples.map((s) => s.labels.kind)), kinds, `${f}: the same kinds`);
    assert.equal(families[f].samples.filter((s) => s.name === `${f}_bucket`).length, kinds.size * 19, `${f}: 18 buckets and +Inf per kind`);
  }
  const le = families.pgfence_worker_handler_duration_seconds.samples.filter((s) => s.labels.kind === "ok" && s.name.endsWith("_bucket"))
    .map((s) => s.labels.le);
  assert.deepEqual(le, ["0.001", "0.0025", "0.005", "0.01", "0.025", "0.05", "0.1", "0.25", "0.5", "1.0", "2.5", "5.0", "10.0",
    "30.0", "60.0", "300.0", "900.0", "3600.0", "+Inf"]);
  // each attempt that ran is in each histogram once, and counted once
  const ran = {};
  for (const [key, n] of Object.entries(expected)) { const [kind] = JSON.parse(key); ran[kind] = (ran[kind] || 0) + n; }
  for (const f of ["pgfence_worker_handler_duration_seconds", "pgfence_worker_enqueue_to_start_seconds", "pgfence_worker_claim_to_start_seconds"]) {
    assert.deepEqual(byKind(families, f, "_count"), ran, `${f}_count by kind`);
  }
  // (enqueue-to-start = the database's waited_s + claim-to-start: never less, kind by kind)
  const queued = byKind(families, "pgfence_worker_enqueue_to_start_seconds", "_sum");
  const waited = byKind(families, "pgfence_worker_claim_to_start_seconds", "_sum");
  for (const kind of Object.keys(waited)) assert.ok(queued[kind] >= waited[kind], `${kind}: ${queued[kind]} >= ${waited[kind]}`);
  assert.deepEqual(families.pgfence_worker_in_flight.samples.map((s) => [s.labels.state, s.value]),
    [["waiting", 0], ["running", 0], ["reporting", 0]]);
});

test("worker metrics: in_flight shows the attempts running and waiting, read from the ledger when scraped", async () => {
  const queue = queueName("metrics_in_flight");
  await client.enqueue_many(["hold", "hold", "hold"], null, { queue });
  const w = await startWorker(queue, {
    hold: async (job) => {
      await new Promise((resolve) => job.signal.addEventListener("abort", resolve, { once: true }));
      throw new Interrupted();
    },
  }, { metricsPort: 0, concurrency: 1, prefetch: 2 });
  try {
    const address = await waitFor(() => w.worker.metricsAddress, 10000, "the metrics server");
    const inFlight = await waitFor(async () => {
      const f = parseExposition((await scrape(address)).body);
      const states = Object.fromEntries(f.pgfence_worker_in_flight.samples.map((s) => [s.labels.state, s.value]));
      return states.running === 1 && states.waiting === 2 ? states : null;
    }, 15000, "1 running and 2 waiting");
    assert.equal(inFlight.reporting, 0);
  } finally {
    await w.stop();
  }
});

test("worker metrics: an attempt whose lease was lost while its handler ran counts as rejected once the handler returns", async () => {
  const queue = queueName("metrics_rejected");
  const id = await client.enqueue("wait", {}, { queue });
  let started = false;
  const w = await startWorker(queue, {
    wait: async (job) => {
      started = true;
      await new Promise((resolve) => job.signal.addEventListener("abort", resolve, { once: true }));
      return { late: true }; // void: the lease is lost
    },
  }, { metricsPort: 0, lease: 600 });
  try {
    const address = await waitFor(() => w.worker.metricsAddress, 10000, "the metrics server");
    await waitFor(() => started, 10000, "the handler to start");
    await client.cancel(id);
    await waitFor(async () => JSON.stringify(jobsTotal(parseExposition((await scrape(address)).body)))
      === JSON.stringify({ [JSON.stringify(["wait", "rejected"])]: 1 }), 10000, "one rejected attempt of kind wait");
  } finally {
    await w.stop();
  }
  assert.equal((await client.job(id)).status, "cancelled");
  assert.equal(w.worker.counters.lease_lost, 1);
});

test("a metrics port in use: run() rejects with a MetricsError naming the address before claiming anything", async () => {
  const queue = queueName("metrics_port_taken");
  const id = await client.enqueue("ok", {}, { queue });
  const taken = net.createServer();
  const port = await listenOn(taken, 0);
  const wclient = await Client.connect(DSN, { max: 4 });
  let worker;
  try {
    worker = new Worker(wclient, { ok: async () => null }, { queues: [queue], handleSignals: false, pollInterval: 100, metricsPort: port });
    await assert.rejects(worker.run(), (err) => {
      assert.ok(err instanceof MetricsError, String(err));
      assert.equal(err.message, `cannot serve the worker's metrics on 127.0.0.1:${port}: the address is already in use `
        + "(another process listens on that port) (pick another metricsPort, or 0 for any free port)");
      assert.equal(err.hint, "pick another metricsPort, or 0 for any free port");
      return true;
    });
  } finally {
    await new Promise((resolve) => taken.close(() => resolve()));
    await wclient.close();
  }
  const row = await client.job(id);
  assert.deepEqual([row.status, row.attempts], ["queued", 0]);
  assert.equal(worker.counters.claimed, 0);
  assert.equal(worker.metricsAddress, null);
});

test("worker metrics are off unless metricsPort is given; a bad metricsPort or metricsBind is refused by name", async () => {
  for (const port of [-1, 65536, 1.5, true, "9100", NaN]) {
    assert.throws(() => new Worker(client, {}, { metricsPort: port }),
      (err) => err instanceof WorkerOptionError && err.option === "metricsPort" && Object.is(err.value, port)
        && /^pgfence: invalid worker option metricsPort=.*\(a TCP port, 0\.\.65535 \(0: any free port\), or null for no metrics\)$/.test(err.message));
  }
  for (const bind of ["", 127001, null]) {
    assert.throws(() => new Worker(client, {}, { metricsPort: 0, metricsBind: bind }),
      (err) => err instanceof WorkerOptionError && err.option === "metricsBind" && /an address of this host/.test(err.hint));
  }
  const queue = queueName("metrics_off");
  const w = await startWorker(queue, { ok: async () => null });
  try {
    await sleep(200);
    assert.deepEqual([w.worker.metricsPort, w.worker.metrics, w.worker.metricsAddress], [null, null, null]);
  } finally {
    await w.stop();
  }
  const noHost = await Client.connect(DSN, { max: 1 });
  try {
    const worker = new Worker(noHost, {}, { queues: [queue], handleSignals: false, metricsPort: 0, metricsBind: "192.0.2.1" });
    await assert.rejects(worker.run(), (err) => err instanceof MetricsError
      && err.message.startsWith("cannot serve the worker's metrics on 192.0.2.1:0: \"192.0.2.1\" is not an address of this host"));
  } finally {
    await noHost.close();
  }
});
