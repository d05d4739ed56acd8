"use strict";
// The Client against the test database: every call is the SQL function's, fenced and mapped.
const { test, before, after } = require("node:test");
const assert = require("node:assert/strict");
const crypto = require("node:crypto");
const pg = require("pg");
const {
  Client, LeaseLost, JobNotFound, InvalidTransition, WrongIsolation, InvalidArgument, SchemaMismatch, PgfenceError,
} = require("../lib");
const { DSN, deleteQueues, ZERO_TOKEN, UNKNOWN_ID, queueName, sleep, waitFor, connect, rawConnection } = require("./helpers");

let client;
before(async () => { client = await connect(); });
after(async () => { await deleteQueues(client); await client.close(); });

/** Reclaim expired leases until `id` is back in the queue (the sweeper may be first). */
async function reclaimed(id) {
  await waitFor(async () => {
    await client.reclaim_expired({ max_jobs: 1000 });
    return (await client.job(id)).status === "queued";
  }, 5000, `job ${id} to be reclaimed`);
}

/** Claim one job of `queue` with a short lease and let the lease expire: returns the stale attempt. */
async function staleAttempt(queue) {
  const id = await client.enqueue("k", { n: 1 }, { queue });
  const [job] = await client.claim("zombie", [queue], { lease: 20 });
  assert.equal(job.id, id);
  await sleep(60);
  return job;
}

test("enqueue, claim and complete: ids are strings, payloads and results JSON", async () => {
  const queue = queueName("roundtrip");
  const id = await client.enqueue("send", { to: "a@example.com", n: [1, 2] }, { queue, priority: 5 });
  assert.equal(typeof id, "string");
  const jobs = await client.claim("w1", [queue], { lease: 30000, max_jobs: 10, request_id: crypto.randomUUID() });
  assert.equal(jobs.length, 1);
  const [job] = jobs;
  assert.deepEqual([job.id, job.queue, job.kind, job.payload, job.attempts, job.max_attempts],
    [id, queue, "send", { to: "a@example.com", n: [1, 2] }, 1, 3]);
  await client.complete(job.id, job.attempt_token, ["sent", 1]);
  const row = await client.job(id);
  assert.deepEqual([row.status, row.result, row.reserved_by], ["done", ["sent", 1], "w1"]);
  // a repeat after a lost reply is accepted and changes nothing
  await client.complete(job.id, job.attempt_token, ["sent", 1]);
});

test("claim and claim_results say how long the job waited, on the database's clock (waited_s)", async () => {
  const queue = queueName("waited");
  const id = await client.enqueue("k", {}, { queue });
  await client.query("UPDATE pgfence.jobs SET available_at = clock_timestamp() - interval '60 seconds' WHERE id = $1",
    [id]);
  const requestId = crypto.randomUUID();
  const [job] = await client.claim("w", [queue], { request_id: requestId });
  assert.equal(typeof job.waited_s, "number");
  assert.ok(job.waited_s >= 60 && job.waited_s < 90, `waited_s ${job.waited_s}`);
  const [again] = await client.claim_results("w", [requestId]);
  assert.equal(again.waited_s, job.waited_s);
  await client.release(job.id, job.attempt_token, { started: false });
});

test("job() gives a live job's run timeout and unique_for", async () => {
  const queue = queueName("jobtimeout");
  const id = await client.enqueue("k", {}, { queue, timeout: 5000, unique_for: "2 hours", idempotency_key: "t" });
  const row = await client.job(id);
  assert.equal(row.timeout.seconds, 5);
  assert.equal(row.unique_for.hours, 2);
  const plain = await client.job(await client.enqueue("k", {}, { queue }));
  assert.deepEqual([plain.timeout, plain.unique_for], [null, null]);
});

test("a number is milliseconds, never seconds; a string is interval text", async () => {
  const queue = queueName("durations");
  await client.enqueue("k", {}, { queue });
  await client.enqueue("k", {}, { queue });
  const { rows: [{ now }] } = await client.query("SELECT clock_timestamp() AS now");
  const [a] = await client.claim("w", [queue], { lease: 5000 });
  const [b] = await client.claim("w", [queue], { lease: "2 minutes" });
  const secs = (j) => (j.lease_expires_at - now) / 1000;
  assert.ok(secs(a) > 4 && secs(a) < 6, `lease of 5000 ms lasted ${secs(a)} s`);
  assert.ok(secs(b) > 115 && secs(b) < 125, `lease '2 minutes' lasted ${secs(b)} s`);
  const until = await client.heartbeat(a.id, a.attempt_token, { lease: 1500 });
  assert.ok((until - now) / 1000 < 3);
  await assert.rejects(client.claim("w", [queue], { lease: NaN }), TypeError);
  await assert.rejects(client.claim("w", [queue], { lease: { seconds: 5 } }), TypeError);
  await client.release_many([a.id, b.id], [a.attempt_token, b.attempt_token], { started: false });
});

test("enqueue joins the caller's own pg transaction: rolled back, nothing is there", async () => {
  const queue = queueName("tx");
  const conn = await rawConnection();
  try {
    await conn.query("BEGIN");
    const id = await client.using(conn).enqueue("k", { a: 1 }, { queue });
    await conn.query("ROLLBACK");
    await assert.rejects(client.job(id), JobNotFound);
    await conn.query("BEGIN");
    const kept = await client.using(conn).enqueue("k", { a: 2 }, { queue });
    await conn.query("COMMIT");
    assert.equal((await client.job(kept)).status, "queued");
  } finally {
    await conn.end();
  }
});

test("a zombie is fenced with PF001 after reclaim, and its refusal is recorded", async () => {
  const queue = queueName("zombie_reclaim");
  const job = await staleAttempt(queue);
  await reclaimed(job.id);
  const err = await client.complete(job.id, job.attempt_token, { late: true }).catch((e) => e);
  assert.ok(err instanceof LeaseLost && err instanceof PgfenceError);
  assert.equal(err.sqlstate, "PF001");
  assert.ok(err.detail && err.hint, "detail and hint are kept");
  await assert.rejects(client.heartbeat(job.id, job.attempt_token), LeaseLost);
  const rejections = await client.rejections_of(job.id);
  assert.deepEqual(rejections.map((r) => r.operation).sort(), ["complete", "heartbeat"]);
  assert.equal((await client.job(job.id)).result, null);
});

test("a refused call keeps its pooled connection; one that could not get a connection says it never reached the database", async () => {
  const { notSent } = require("../lib/retries");
  const one = await Client.connect(DSN, { max: 1 });
  try {
    const pid = async () => (await one.query("SELECT pg_backend_pid() AS pid")).rows[0].pid;
    const before = await pid();
    const queue = queueName("refused_keeps_conn");
    const id = await one.enqueue("k", {}, { queue });
    await assert.rejects(one.complete(id, crypto.randomUUID(), {}), (err) => err instanceof PgfenceError && !notSent(err));
    await assert.rejects(one.enqueue("k", {}, { queue, max_attempts: 0 }), InvalidArgument);
    assert.equal(await pid(), before, "the same connection answers after two refusals");
    assert.equal(one.pool.totalCount, 1);
    // An error that stays with the session drops the connection, as pool.query did: a
    // prepared statement gone (26000) would otherwise fail every later call of it.
    const named = () => one.query("SELECT 41 + 1 AS v", [], "pgfence_test_named");
    assert.equal((await named()).rows[0].v, 42);
    await one.query("DEALLOCATE ALL");
    await assert.rejects(named(), (err) => err.code === "26000");
    assert.equal((await named()).rows[0].v, 42, "a new connection prepares it again");
    assert.notEqual(await pid(), before);
  } finally {
    await one.close();
  }
  const nowhere = await Client.connect({ host: "127.0.0.1", port: 1, database: "nowhere", connectionTimeoutMillis: 2000 },
    { checkSchema: false, max: 1 });
  try {
    const err = await nowhere.stats().catch((e) => e);
    assert.ok(err instanceof Error && notSent(err), `not sent: ${err}`);
  } finally {
    await nowhere.close();
  }
});

test("a zombie is fenced after takeover: the new attempt's result stands", async () => {
  const queue = queueName("zombie_takeover");
  const old = await staleAttempt(queue);
  // A claim reclaims the expired lease first; the job is runnable from that moment, so this
  // claim or the next takes it (a reclaim within the same statement is after its now()).
  const [taken] = await waitFor(async () => {
    const jobs = await client.claim("w2", [queue], { lease: 30000 });
    return jobs.length ? jobs : null;
  }, 5000, "the reclaimed job to be claimed by w2");
  assert.equal(taken.id, old.id);
  assert.equal(taken.attempts, 2);
  await assert.rejects(client.heartbeat(old.id, old.attempt_token), (e) => e instanceof LeaseLost && e.sqlstate === "PF001");
  await client.complete(taken.id, taken.attempt_token, { by: "w2" });
  await assert.rejects(client.complete(old.id, old.attempt_token, { by: "zombie" }), LeaseLost);
  await assert.rejects(client.fail(old.id, old.attempt_token, "late"), LeaseLost);
  const row = await client.job(old.id);
  assert.deepEqual([row.status, row.result, row.reserved_by], ["done", { by: "w2" }, "w2"]);
});

test("batch outcomes with a stale token inside: only that row is refused", async () => {
  const queue = queueName("batch_stale");
  const stale = await staleAttempt(queue);
  await reclaimed(stale.id);
  await client.enqueue_many(["k", "k"], [{ i: 1 }, { i: 2 }], { queue });
  const fresh = await client.claim("w", [queue], { lease: 30000, max_jobs: 10 });
  assert.equal(fresh.length, 3); // the reclaimed job is back in the queue too
  const others = fresh.filter((j) => j.id !== stale.id);
  const again = fresh.find((j) => j.id === stale.id);
  const ids = [...others.map((j) => j.id), stale.id];
  const tokens = [...others.map((j) => j.attempt_token), stale.attempt_token];
  const outcomes = await client.complete_many(ids, tokens, [{ r: 1 }, [2], "three"]);
  assert.deepEqual(outcomes.map((o) => [o.id, o.accepted]), [[ids[0], true], [ids[1], true], [ids[2], false]]);
  assert.ok(outcomes[2].detail);
  const hb = await client.heartbeat_many([again.id, stale.id].slice(0, 1), [stale.attempt_token]);
  assert.equal(hb[0].accepted, false);
  assert.equal((await client.rejections_of(stale.id)).length >= 1, true);
  const failed = await client.fail_many([again.id], [again.attempt_token], ["boom"], { retry_ins: [60000], permanents: [false] });
  assert.deepEqual([failed[0].accepted, failed[0].status], [true, "queued"]);
  const row = await client.job(again.id);
  const delay = (row.available_at - row.updated_at) / 1000;
  assert.ok(delay > 55 && delay < 65, `retry_in 60000 ms gave ${delay} s`);
  assert.deepEqual(await Promise.all(others.map(async (j) => (await client.job(j.id)).result)), [{ r: 1 }, [2]]);
});

test("a lost claim reply is recovered with claim_results (and its deprecated alias claimed)", async () => {
  const queue = queueName("lost_reply");
  await client.enqueue_many(["k", "k"], null, { queue });
  const requestId = crypto.randomUUID();
  const jobs = await client.claim("w-lost", [queue], { lease: 2000, max_jobs: 5, request_id: requestId });
  // (the reply is "lost": the worker knows only requestId)
  const found = await client.claim_results("w-lost", [requestId], { lease: 60000 });
  assert.deepEqual(found.map((j) => [j.id, j.attempt_token]), jobs.map((j) => [j.id, j.attempt_token]));
  assert.ok(found.every((j) => j.lease_expires_at - jobs[0].lease_expires_at > 50000), "leases renewed");
  const alias = await client.claimed("w-lost", [requestId]);
  assert.equal(alias.length, 2);
  assert.deepEqual(await client.claim_results("someone-else", [requestId]), []);
  const out = await client.complete_many(found.map((j) => j.id), found.map((j) => j.attempt_token));
  assert.ok(out.every((o) => o.accepted));
});

const id0 = () => "1";

test("bad input becomes a clear error: the database's own checks, not a bad literal", async () => {
  const queue = queueName("bad_input");
  for (const payload of [[1, 2], "a string", 42]) {
    const err = await client.enqueue("k", payload, { queue }).catch((e) => e);
    assert.ok(err instanceof InvalidArgument, `${JSON.stringify(payload)}: ${err}`);
    assert.equal(err.sqlstate, "22023");
    assert.match(err.message, /payload/);
    assert.ok(err.hint);
  }
  const empty = await client.enqueue("", {}, { queue }).catch((e) => e);
  assert.ok(empty instanceof InvalidArgument && /kind/.test(empty.message));
  const nul = await client.enqueue("k", {}, { queue, max_attempts: 0 }).catch((e) => e);
  assert.equal(nul.sqlstate, "22023");
  const nullKind = await client.enqueue(null, {}, { queue }).catch((e) => e);
  assert.equal(nullKind.sqlstate, "22004");
  await assert.rejects(client.enqueue("k", {}, { queue, no_such_option: 1 }), TypeError);
  await assert.rejects(client.enqueue("k", { n: 10n }, { queue }), TypeError);
  await assert.rejects(client.enqueue("k", () => 1, { queue }), TypeError);
  await assert.rejects(client.complete("abc", ZERO_TOKEN), TypeError);
  await assert.rejects(client.complete(1.5, ZERO_TOKEN), TypeError);
  await assert.rejects(client.claim("w", [queue], { max_jobs: 1.5 }), TypeError);
  await assert.rejects(client.claim("w", queue), TypeError); // queues is an array
  await assert.rejects(client.enqueue("k", {}, { queue, run_at: new Date(NaN) }), TypeError);
  await assert.rejects(client.release(id0(), ZERO_TOKEN, { started: "yes" }), TypeError);
  const big = await client.claim("w", [queue], { max_jobs: 5000 }).catch((e) => e); // the database's bound
  assert.ok(big instanceof InvalidArgument && /max_jobs/.test(big.message), String(big));
  await assert.rejects(client.job(UNKNOWN_ID), (e) => e instanceof JobNotFound && e.sqlstate === "PF002");
  await assert.rejects(client.cancel(UNKNOWN_ID), JobNotFound);
  const id = await client.enqueue("k", {}, { queue });
  await assert.rejects(client.requeue(id), (e) => e instanceof InvalidTransition && e.sqlstate === "PF003");
  await assert.rejects(client.complete(BigInt(id), ZERO_TOKEN), LeaseLost); // BigInt ids are accepted
  await client.cancel(id);
});

test("a bad argument is a TypeError naming it, before anything is sent: nothing changes", async () => {
  const queue = queueName("bad_args");
  /** The TypeError `call` rejects with, checked to name `name` (and to have reached no database). */
  const refused = async (call, name, why) => {
    const err = await call.catch((e) => e);
    assert.ok(err instanceof TypeError, `${name}: ${err}`);
    assert.ok(err.message.startsWith("pgfence: ") && err.message.includes(name), err.message);
    assert.match(err.message, why);
  };
  // a lone surrogate: pg would send U+FFFD, so two different idempotency keys were one (the second enqueue
  // returned the first's job), and a kind changed on its way
  const first = await client.enqueue("k", {}, { queue, idempotency_key: "key-\ud800" }).catch((e) => e);
  const second = await client.enqueue("k", {}, { queue, idempotency_key: "key-\udc00" }).catch((e) => e);
  assert.ok(first instanceof TypeError && second instanceof TypeError, `${first} ${second}`);
  await refused(client.enqueue("k", {}, { queue, idempotency_key: "key-\ud800" }), "idempotency_key", /lone surrogate/);
  await refused(client.enqueue("k\udfff", {}, { queue }), "kind", /lone surrogate/);
  await refused(client.enqueue_many(["a", "b\ud800"], [{}, {}], { queue }), "kinds[1]", /lone surrogate/);
  // a NUL character (the server said 22021 "invalid byte sequence", naming nothing)
  await refused(client.enqueue("k\u0000", {}, { queue }), "kind", /NUL character \(at index 1\)/);
  await refused(client.claim("w", [queue, "q\u0000"]), "queues[1]", /NUL character/);
  await refused(client.heartbeat(id0(), ZERO_TOKEN, { lease: "1\u0000 second" }), "lease", /NUL character/);
  await refused(client.enqueue("k", {}, { queue, run_at: "2030-01-01\u0000" }), "run_at", /NUL character/);
  // JSON jsonb cannot store (the server said 22P05 / 22P02, naming nothing); JSON.stringify's own errors
  await refused(client.enqueue("k", { a: "x\u0000" }, { queue }), "payload", /NUL character/);
  await refused(client.enqueue("k", { a: "x\ud800" }, { queue }), "payload", /lone surrogate/);
  await refused(client.enqueue("k", { n: 10n }, { queue }), "payload", /BigInt/);
  await refused(client.enqueue_many(["a"], [{ a: "\u0000" }], { queue }), "payloads[0]", /NUL character/);
  // a required argument left out (the server said 42883 "function ... does not exist")
  await refused(client.complete(id0()), "attempt_token", /needs attempt_token \(argument 2\).*complete\(job_id, attempt_token, \[result\]\)/);
  await refused(client.heartbeat(), "job_id", /needs job_id \(argument 1\)/);
  await refused(client.set_queue_limit(queue), "max_running", /needs max_running/);
  // arguments past the options object (were ignored: the priority below was never set)
  await refused(client.enqueue("k", {}, { queue }, { priority: 5 }), "enqueue()", /got 4 arguments/);
  // payloads not an array ("v.map is not a function")
  await refused(client.enqueue_many(["a"], "x", { queue }), "payloads", /must be an array, got string/);
  await refused(client.enqueue_many(["a"], { 0: {} }, { queue }), "payloads", /must be an array, got object/);
  // a job id beyond bigint (the server said 22003, naming nothing); a number written with an exponent
  await refused(client.job("99999999999999999999999"), "job_id", /out of range for a job id/);
  await refused(client.claim("w", [queue], { lease: 1e21 }), "lease", /out of range for an interval/);
  const tiny = await client.claim("w", [queue], { lease: 1e-7 }).catch((e) => e); // ("1e-7 milliseconds": 22007)
  assert.ok(tiny instanceof InvalidArgument && /lease/.test(tiny.message), String(tiny));
  assert.equal((await client.stats()).filter((r) => r.queue === queue).length, 0, "nothing was enqueued");
  // what may be left out still may
  const id = await client.enqueue("k", undefined, { queue });
  const [job] = await client.claim("w", [queue], { queue_set: undefined, lease: 60000 });
  assert.equal(job.id, id);
  assert.deepEqual(job.payload, {});
  await client.complete(job.id, job.attempt_token, undefined);
  assert.equal((await client.job(id)).status, "done");
});

test("claim inside a REPEATABLE READ transaction is refused with PF004", async () => {
  const conn = await rawConnection();
  try {
    await conn.query("BEGIN ISOLATION LEVEL REPEATABLE READ");
    await assert.rejects(client.using(conn).claim("w", [queueName("rr")]), (e) => e instanceof WrongIsolation && e.sqlstate === "PF004");
    await conn.query("ROLLBACK");
  } finally {
    await conn.end();
  }
});

test("a database without pgfence gives SchemaMismatch", async () => {
  const url = new URL(DSN);
  url.pathname = "/postgres";
  await assert.rejects(Client.connect(url.toString()), (e) => e instanceof SchemaMismatch && /sqitch deploy/.test(e.message));
});

test("prepared: false runs unnamed statements (pgbouncer in transaction mode)", async () => {
  const c = await Client.connect(DSN, { prepared: false, max: 1 });
  try {
    const queue = queueName("unprepared");
    const id = await c.enqueue("k", {}, { queue });
    const [job] = await c.claim("w", [queue]);
    assert.equal(job.id, id);
    await c.complete(job.id, job.attempt_token);
    const { rows } = await c.query("SELECT count(*)::int AS n FROM pg_prepared_statements");
    assert.equal(rows[0].n, 0);
  } finally {
    await c.close();
  }
  const { rows } = await client.query("SELECT 1"); // (and the default prepares: see the pool's sessions)
  assert.equal(rows.length, 1);
});

test("operator and read calls map their rows", async () => {
  const queue = queueName("operator");
  const id = await client.enqueue("k", {}, { queue, idempotency_key: "key-1" });
  assert.equal(await client.enqueue("k", {}, { queue, idempotency_key: "key-1" }), id);
  const stats = await client.stats();
  assert.ok(stats.some((s) => s.queue === queue && s.status === "queued" && s.jobs === 1));
  assert.equal(await client.pause_queue(queue), true);
  assert.deepEqual(await client.claim("w", [queue]), []);
  assert.equal(await client.resume_queue(queue), true);
  await client.set_queue_limit(queue, 1);
  assert.ok((await client.queue_limits()).some((q) => q.queue === queue && q.max_running === 1));
  await client.set_queue_limit(queue, null);
  const tags = await client.wakeup_tags([queue]);
  assert.equal(tags.length, 1);
  assert.equal(typeof (await client.limits()).max_jobs, "number");
  assert.equal(await client.schema_version(), 3);
  assert.ok(["running", "paused", "stopped", "never_ran"].includes((await client.sweeper_health()).state));
  assert.equal(typeof (await client.history_summary({ since: 60000 })), "object");
  await client.cancel(id);
  assert.deepEqual((await client.attempts_of(id)).map((a) => a.outcome), []);
  assert.equal(await client.rejections_not_stored(id), 0);
});

test("the operator console's actions: mark_done with a note, bulk requeue by filter, audit, metrics", async () => {
  const queue = queueName("console");
  const manual = async () => {
    const id = await client.enqueue("k", {}, { queue, recovery_policy: "manual" });
    const [job] = await client.claim("w", [queue], { lease: 60000 });
    assert.equal(job.id, id);
    assert.equal(await client.release(job.id, job.attempt_token), "manual_review");
    return id;
  };
  const done = await manual();
  await client.mark_done(done, "charged: PSP ref 991", { result: { psp: 991 } });
  const job = await client.job(done);
  assert.deepEqual([job.status, job.result], ["done", { psp: 991 }]);
  assert.deepEqual((await client.audit_of(done)).map((a) => [a.action, a.note]), [["mark_done", "charged: PSP ref 991"]]);
  await assert.rejects(client.mark_done(done, "again"), InvalidTransition);
  await assert.rejects(client.mark_done(done, null), InvalidArgument);
  const a = await manual(), b = await manual();
  assert.equal((await client.preview_action("requeue", { status: "manual_review", queue })).jobs, 2);
  const acted = await client.act_on_filter("requeue", { status: "manual_review", queue, note: "retry" });
  assert.deepEqual(acted.map((r) => [r.id, r.acted]).sort(), [[a, true], [b, true]].sort());
  assert.equal((await client.job(a)).status, "queued");
  const metrics = await client.metrics();
  const queued = metrics.find((m) => m.name === "pgfence_jobs" && m.labels.queue === queue && m.labels.status === "queued");
  assert.equal(queued && queued.value, 2);
});
