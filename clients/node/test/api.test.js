"use strict";
// The Client mirrors the SQL API: every public function has its method, with the same
// parameters (so a function or an optional parameter added to the SQL cannot be missed
// again), and the functions added after the client was written behave as the SQL says.
const { test, before, after } = require("node:test");
const assert = require("node:assert/strict");
const { Client, API } = require("../lib/client");
const { InvalidArgument, LeaseLost } = require("../lib");
const { deleteQueues, ZERO_TOKEN, queueName, sleep, connect } = require("./helpers");

let client;
before(async () => { client = await connect(); });
after(async () => { await deleteQueues(client); await client.close(); });

/**
 * Public routines that are deliberately not Client methods: the steps the sweeper's
 * procedures commit one by one (docs/sql.md: "they run with the owner's rights; the
 * procedures only call them") and pg_cron's background procedure.
 */
const NOT_MIRRORED = {
  run_sweeper: "pg_cron's background sweeper (a procedure that runs for up to a minute); clients call sweep()",
  sweep_batch: "a step of sweep and run_sweeper",
  sweeper_begin: "a step of run_sweeper",
  sweeper_step: "a step of run_sweeper",
  note_sweeper_pass: "records run_sweeper's passes",
};

/** Every public routine of schema pgfence with its input parameter names, in order (one row per overload). */
async function publicRoutines() {
  const { rows } = await client.query(`
    SELECT p.proname AS name, p.prokind AS kind,
           coalesce((SELECT array_agg(a.n ORDER BY a.o)
                       FROM unnest(coalesce(p.proargnames, '{}'),
                                   coalesce(p.proargmodes, array_fill('i'::"char", ARRAY[p.pronargs::int])))
                            WITH ORDINALITY AS a(n, m, o)
                      WHERE a.m IN ('i', 'b', 'v')), '{}') AS inputs
      FROM pg_proc p
     WHERE p.pronamespace = 'pgfence'::regnamespace AND p.proname NOT LIKE '\\_%'
     ORDER BY p.proname`);
  return rows;
}

test("every public SQL function has a Client method with the same parameters", async () => {
  const routines = await publicRoutines();
  assert.ok(routines.some((r) => r.name === "enqueue"), "pg_proc lists pgfence's functions");
  const missing = [...new Set(routines.map((r) => r.name))]
    .filter((n) => typeof Client.prototype[n] !== "function" && !(n in NOT_MIRRORED));
  assert.deepEqual(missing, [], "public SQL functions without a Client method: add them to API in lib/client.js "
    + "and to index.d.ts (docs/node.md, \"Adding a function\")");
  for (const n of Object.keys(NOT_MIRRORED)) {
    assert.ok(routines.some((r) => r.name === n), `NOT_MIRRORED lists ${n}, which the schema no longer has`);
  }
  for (const [fn, spec] of Object.entries(API)) {
    const names = [...(spec.args || []), ...(spec.options || [])].map((s) => s.split(" ")[0]);
    const overloads = routines.filter((r) => r.name === fn).map((r) => r.inputs);
    assert.ok(overloads.length, `API has ${fn}, which the schema does not`);
    assert.ok(overloads.some((inputs) => JSON.stringify(inputs) === JSON.stringify(names)),
      `${fn}: the Client passes (${names}), the SQL function takes ${overloads.map((o) => `(${o})`).join(" or ")}`);
  }
});

test("a positional argument may be left out exactly where the SQL function has a default for it (its type ends with ?)", async () => {
  const { rows } = await client.query(`
    SELECT p.proname AS name, p.pronargs - p.pronargdefaults AS required
      FROM pg_proc p WHERE p.pronamespace = 'pgfence'::regnamespace AND p.proname NOT LIKE '\\_%'`);
  for (const [fn, spec] of Object.entries(API)) {
    const args = spec.args || [];
    const required = args.filter((a) => !a.endsWith("?")).length;
    assert.ok(args.slice(required).every((a) => a.endsWith("?")), `${fn}: an optional positional argument before a required one`);
    const overload = rows.find((r) => r.name === fn && r.required <= args.length);
    assert.ok(overload, fn);
    assert.equal(required, overload.required, `${fn}: the SQL function requires ${overload.required} of its positional arguments (${args})`);
  }
});

test("enqueue with timeout caps the claim's lease; unique_for 0 frees the key once done (numbers are ms)", async () => {
  const queue = queueName("timeout_unique");
  const id = await client.enqueue("k", {}, { queue, timeout: 1500 });
  const { rows: [row] } = await client.query("SELECT extract(epoch FROM timeout)::float8 AS s FROM pgfence.jobs WHERE id = $1", [id]);
  assert.equal(row.s, 1.5);
  const [job] = await client.claim("w", [queue], { lease: 30000 });
  const { rows: [j] } = await client.query(
    "SELECT extract(epoch FROM lease_expires_at - reserved_at)::float8 AS s FROM pgfence.jobs WHERE id = $1", [id]);
  assert.ok(j.s <= 1.5 && j.s > 1, `the lease ends at the 1.5 s deadline, not after 30 s (${j.s} s)`);
  assert.ok(job.lease_expires_at - Date.now() < 2000);
  await client.complete(job.id, job.attempt_token);

  const key = { queue, idempotency_key: "once-at-a-time" };
  const a = await client.enqueue("k", {}, { ...key, unique_for: 0 });
  assert.equal(await client.enqueue("k", {}, { ...key, unique_for: 0 }), a, "held while queued");
  const [ja] = await client.claim("w", [queue]);
  await client.complete(ja.id, ja.attempt_token);
  const b = await client.enqueue("k", {}, { ...key, unique_for: 0 });
  assert.notEqual(b, a, "unique_for 0: the done job's key is free at once");

  const hourly = { queue, idempotency_key: "hourly" };
  const [first] = await client.enqueue_many(["k"], [{}], { queue, idempotency_keys: ["hourly"], unique_for: "1 hour",
    timeout: "5 minutes" });
  assert.equal(first.created, true);
  const { rows: [h] } = await client.query("SELECT extract(epoch FROM unique_for)::int AS u, extract(epoch FROM timeout)::int AS t"
    + " FROM pgfence.jobs WHERE id = $1", [first.id]);
  assert.deepEqual(h, { u: 3600, t: 300 });
  await client.cancel(b);
  const [jh] = await client.claim("w", [queue]);
  assert.equal(jh.id, first.id);
  await client.complete(jh.id, jh.attempt_token);
  assert.equal(await client.enqueue("k", {}, { ...hourly, unique_for: "1 hour" }), first.id, "held for an hour once done");
  const { rows: [held] } = await client.query("SELECT held_until FROM pgfence.held_keys WHERE job_id = $1", [first.id]);
  assert.ok(held.held_until - Date.now() > 3500 * 1000, "held until created_at + 1 hour");
});

test("snooze: the attempt is recorded snoozed, the job queued again, the attempt not counted", async () => {
  const queue = queueName("snooze");
  const id = await client.enqueue("k", {}, { queue, max_attempts: 1 });
  const [job] = await client.claim("w", [queue]);
  assert.equal(await client.snooze(job.id, job.attempt_token, 60000), "queued");
  const after = await client.job(id);
  assert.deepEqual([after.status, after.attempts, after.max_attempts], ["queued", 1, 2]);
  assert.ok((after.available_at - Date.now()) / 1000 > 55, "60000 is 60 s");
  assert.deepEqual((await client.attempts_of(id)).map((a) => a.outcome), ["snoozed"]);
  assert.equal(await client.snooze(job.id, job.attempt_token, 60000), "queued", "a repeat by the token is accepted");
  await assert.rejects(client.snooze(job.id, ZERO_TOKEN, 1000), (e) => e instanceof LeaseLost && e.sqlstate === "PF001");

  await client.query("UPDATE pgfence.jobs SET available_at = now() WHERE id = $1", [id]);
  const other = await client.enqueue("k", {}, { queue });
  const [again] = await client.claim("w", [queue]);
  assert.equal(again.id, id);
  const out = await client.snooze_many([again.id, other], [again.attempt_token, ZERO_TOKEN], ["2 minutes", 1000]);
  assert.deepEqual(out.map((o) => [o.id, o.accepted, o.status]), [[id, true, "queued"], [other, false, "queued"]]);
  assert.equal((await client.job(id)).max_attempts, 3);
});

test("bad input to the new functions: 22023 naming the argument", async () => {
  const queue = queueName("bad_new");
  const expect22023 = async (promise, arg) => {
    const err = await promise.catch((e) => e);
    assert.ok(err instanceof InvalidArgument, `${arg}: ${err}`);
    assert.equal(err.sqlstate, "22023", `${arg}: ${err}`);
    assert.match(err.message, new RegExp(`\\b${arg.replace(/[[\]]/g, "\\$&")}`), `${arg}: ${err.message}`);
    assert.ok(err.hint, `${arg}: a hint`);
  };
  await expect22023(client.enqueue("k", {}, { queue, timeout: 0 }), "timeout");
  await expect22023(client.enqueue("k", {}, { queue, timeout: "31 days" }), "timeout");
  await expect22023(client.enqueue("k", {}, { queue, unique_for: -1000 }), "unique_for");
  await expect22023(client.enqueue_many(["k"], null, { queue, timeout: -5 }), "timeout");
  await expect22023(client.enqueue_many(["k"], null, { queue, unique_for: "-1 hour" }), "unique_for");
  const id = await client.enqueue("k", {}, { queue });
  const [job] = await client.claim("w", [queue]);
  assert.equal(job.id, id);
  await expect22023(client.snooze(job.id, job.attempt_token, 0), "delay");
  await expect22023(client.snooze(job.id, job.attempt_token, "366 days"), "delay");
  await expect22023(client.snooze_many([job.id], [job.attempt_token], [-1]), "delays[1]");
  await expect22023(client.set_queue_rate_limit(queue, 0), "max_claims");
  await expect22023(client.set_queue_rate_limit(queue, 5, { per: "2 days" }), "per");
  await expect22023(client.set_queue_timeout(queue, 0), "timeout");
  await expect22023(client.cron_next("61 * * * *"), "cron");
  await expect22023(client.cron_next("* * * * *", { time_zone: "Mars/Olympus" }), "time_zone");
  await expect22023(client.schedule(queueName("s"), { cron: "bad", kind: "k", queue }), "cron");
  await expect22023(client.fire_schedules({ max_slots: 0 }), "max_slots");
  await expect22023(client.set_history_partition_width(1000), "width");
  const nul = await client.snooze(job.id, job.attempt_token, null).catch((e) => e);
  assert.equal(nul.sqlstate, "22004");
  await assert.rejects(client.snooze(job.id, job.attempt_token, {}), TypeError);
  await assert.rejects(client.schedule("s", { no_such_option: 1 }), TypeError);
  await client.complete(job.id, job.attempt_token);
});

test("rate limits, queue timeouts, schedules and cron_next map their rows", async () => {
  const queue = queueName("controls");
  try {
    await client.set_queue_rate_limit(queue, 2, { per: 60000 });
    await client.enqueue_many(["k", "k", "k"], null, { queue });
    assert.equal((await client.claim("w", [queue], { max_jobs: 3 })).length, 2, "the bucket holds 2 claims");
    const limit = (await client.queue_limits()).find((q) => q.queue === queue);
    assert.equal(limit.max_claims, 2);
    assert.equal(limit.claims_available, 0);
    assert.equal(limit.running, 2);
    assert.equal(typeof limit.running, "number");
    assert.equal(limit.claims_per.minutes, 1);
    await client.set_queue_rate_limit(queue, null);
    assert.equal((await client.queue_limits()).some((q) => q.queue === queue), false);

    await client.set_queue_timeout(queue, "10 minutes");
    const t = (await client.queue_timeouts()).find((q) => q.queue === queue);
    assert.equal(t.timeout.minutes, 10);
    assert.ok(t.set_at instanceof Date && typeof t.set_by === "string");
    const id = await client.enqueue("k", {}, { queue });
    const { rows: [row] } = await client.query("SELECT extract(epoch FROM timeout)::int AS s FROM pgfence.jobs WHERE id = $1", [id]);
    assert.equal(row.s, 600, "the queue's default is stored on the job");
    await client.set_queue_timeout(queue, null);
    assert.equal((await client.queue_timeouts()).some((q) => q.queue === queue), false);

    const after = new Date("2030-01-01T10:02:00Z");
    const next = await client.cron_next("*/5 * * * *", { after });
    assert.equal(next.toISOString(), "2030-01-01T10:05:00.000Z");
    const paris = await client.cron_next("0 3 * * *", { after, time_zone: "Europe/Paris" });
    assert.equal(paris.toISOString(), "2030-01-02T02:00:00.000Z");
    assert.ok((await client.cron_next("0 3 * * *")) > new Date(), "after: now by default");

    const name = queueName("sched");
    const first = await client.schedule(name, { every: 3600000, kind: "tick", payload: { n: 1 }, queue, catch_up: "none" });
    assert.ok(first instanceof Date);
    const s = (await client.schedules()).find((x) => x.name === name);
    assert.deepEqual([s.kind, s.payload, s.queue, s.every.hours, s.catch_up, s.cron, s.last_job_id],
      ["tick", { n: 1 }, queue, 1, "none", null, null]);
    assert.equal(s.next_fire_at.getTime(), first.getTime());
    assert.equal(await client.pause_schedule(name), true);
    assert.equal(await client.pause_schedule(name), false);
    assert.ok((await client.schedules()).find((x) => x.name === name).paused_at instanceof Date);
    assert.equal(await client.resume_schedule(name), true);
    assert.equal(typeof (await client.fire_schedules({ max_slots: 10 })), "number");
    assert.equal(await client.unschedule(name), true);
    assert.equal(await client.unschedule(name), false);

    const m = await client.maintain_history();
    assert.deepEqual(Object.keys(m), ["created", "dropped", "truncated", "moved", "deleted"]);
    assert.equal(typeof m.moved, "number");
  } finally {
    await client.set_queue_rate_limit(queue, null);
    await client.set_queue_timeout(queue, null);
  }
});

test("a set of queues stored on the server: define, claim from it by name, list, drop", async () => {
  const queue = queueName("qset");
  const other = queueName("qset_b");
  const setName = `${queue}-set`;
  const refused = async (promise) => {
    const err = await promise.catch((e) => e);
    assert.ok(err instanceof InvalidArgument, `${err}`);
    assert.equal(err.sqlstate, "22023");
    assert.match(err.message, /\bqueue_set\b/);
    assert.ok(err.hint);
  };
  assert.equal(await client.define_queue_set(setName, [queue, other, queue]), 2);
  const qs = (await client.queue_sets()).find((x) => x.queue_set === setName);
  assert.deepEqual([qs.queue_count, qs.names], [2, [queue, other].sort()]);
  assert.ok(qs.defined_at instanceof Date && typeof qs.defined_by === "string");
  const inSet = await client.enqueue("k", { s: 1 }, { queue: other });
  const fromSet = await client.claim("w", null, { queue_set: setName, max_jobs: 5 });
  assert.deepEqual(fromSet.map((j) => [j.id, j.queue]), [[inSet, other]]);
  await client.complete(inSet, fromSet[0].attempt_token);
  await refused(client.claim("w", [queue], { queue_set: setName }));
  assert.equal(await client.drop_queue_set(setName), true);
  assert.equal(await client.drop_queue_set(setName), false);
  await refused(client.claim("w", null, { queue_set: setName }));
});

test("the deadline is the database's: a complete after the run timeout is refused (PF001)", async () => {
  const queue = queueName("deadline");
  const id = await client.enqueue("k", {}, { queue, timeout: 300, max_attempts: 1 });
  const [job] = await client.claim("w", [queue], { lease: 30000 });
  await sleep(500);
  const [hb] = await client.heartbeat_many([job.id], [job.attempt_token], { lease: 30000 });
  assert.equal(hb.accepted, false);
  assert.match(hb.detail, /timed out/);
  await assert.rejects(client.complete(job.id, job.attempt_token), LeaseLost);
  assert.deepEqual((await client.attempts_of(id)).map((a) => a.outcome), ["timed_out"]);
});
