"use strict";
// The client: one method per pgfence SQL function, each one literal query.
//
// Every decision (fencing, retry, backoff, reclaim, every limit) is made in PL/pgSQL;
// this module passes arguments by name with an explicit cast each, maps rows to plain
// objects and SQLSTATEs to errors (errors.js). The methods are generated from API, the
// table below: a SQL function is one entry (see docs/node.md, "Adding a function").

const crypto = require("node:crypto");
const pg = require("pg");
const { translate, LeaseLost, JobNotFound, SchemaMismatch, PgfenceError } = require("./errors");
const { dataError, markNotSent } = require("./retries");
const { isWellFormed } = require("./text");

/** The pgfence.schema_version() this client speaks. */
const SCHEMA_VERSION = 3;

/**
 * Whether a pooled connection that raised err may serve the next call: err is one of
 * pgfence's answers (PFxxx, or class 22: a value refused, dataError) and the connection is
 * idle (not in a failed transaction). The code, not the severity, which lc_messages translates.
 */
function keepsConnection(err, conn) {
  const pgfenceAnswer = (typeof err?.code === "string" && err.code.startsWith("PF")) || dataError(err);
  return pgfenceAnswer && typeof conn.getTransactionStatus === "function" && conn.getTransactionStatus() === "I";
}

// -- argument types: how a JavaScript value is sent, and the SQL type it is cast to --
//
// Each value travels as a text (or array) parameter with an explicit cast, so the
// database, not pg's guess, reads it: a number is never a bare interval, a JS array is
// never a PostgreSQL array literal where JSON was meant.

const isInt = (v) => typeof v === "bigint" || Number.isSafeInteger(v) || (typeof v === "string" && /^-?\d+$/.test(v));
const BIGINT_MIN = -(2n ** 63n);
const BIGINT_MAX = 2n ** 63n - 1n;

/** A bigint (job id): a decimal string, a safe integer Number, or a BigInt, within PostgreSQL's bigint. */
function sendId(v, name) {
  if (v === null) return null;
  if (!isInt(v)) throw new TypeError(`pgfence: ${name} must be an integer id (string, safe integer or BigInt), got ${describe(v)}`);
  const text = String(v);
  if (text.length > 18 && (BigInt(text) < BIGINT_MIN || BigInt(text) > BIGINT_MAX)) {
    throw new TypeError(`pgfence: ${name} is out of range for a job id (a bigint: -2^63..2^63-1), got ${text.length} digits`);
  }
  return text;
}

/**
 * Why PostgreSQL cannot hold this text as it is, or null: a NUL character (text cannot
 * hold one), or a lone surrogate (a JavaScript string can hold one; it has no UTF-8, and
 * pg would send U+FFFD in its place: two different keys would become one).
 */
function unstorable(text) {
  if (text.includes("\0")) return `a NUL character (at index ${text.indexOf("\0")}), which PostgreSQL text cannot hold`;
  if (!isWellFormed(text)) return "a lone surrogate, which has no UTF-8 encoding (it would be sent as U+FFFD)";
  return null;
}

/** A string argument as it is sent: a TypeError naming the argument when PostgreSQL cannot hold it. */
function sendString(v, name) {
  const why = unstorable(v);
  if (why !== null) throw new TypeError(`pgfence: ${name} contains ${why}; pass a string without it`);
  return v;
}

/** A value that is already JSON text: sent as it is (the database checks it). A handler may return one as its result. */
class RawJson {
  constructor(text) {
    if (typeof text !== "string") throw new TypeError("pgfence: RawJson takes JSON text");
    this.text = text;
  }
}

// The escapes jsonb refuses in JSON.stringify's text (an odd number of backslashes before
// them): \u0000, and a lone surrogate (which JSON.stringify writes as \udXXX; a pair, an
// emoji, it writes as the characters themselves). Looked for only when "\u" occurs.
const JSON_NUL = /(?<!\\)(?:\\\\)*\\u0000/;
const JSON_LONE_SURROGATE = /(?<!\\)(?:\\\\)*\\ud[89a-f]/i;

/**
 * The JSON text jsonb will store for `value` (a RawJson's own text, checked by the
 * database), or a TypeError saying why there is none: JSON.stringify throws (a BigInt, a
 * cycle, a throwing toJSON or getter) or gives no text (a function, undefined, a Symbol),
 * or the text holds a NUL character or a lone surrogate. One check for the Client's jsonb
 * arguments and the worker's handler results (handlers.js).
 */
function jsonText(value) {
  if (value instanceof RawJson) {
    const why = unstorable(value.text);
    if (why !== null) throw new TypeError(`its RawJson text contains ${why}`);
    return value.text;
  }
  let text;
  try {
    text = JSON.stringify(value);
  } catch (err) {
    let why;
    try { why = err instanceof Error ? `${err.name}: ${err.message}` : "a value was thrown"; } catch (_) { why = "a value was thrown"; }
    throw new TypeError(`JSON.stringify failed (${why})`);
  }
  if (typeof text !== "string") throw new TypeError(`JSON.stringify gives nothing for ${describe(value)}`);
  if (text.includes("\\u")) {
    if (JSON_NUL.test(text)) throw new TypeError("it contains a NUL character (\\u0000), which jsonb cannot store");
    if (JSON_LONE_SURROGATE.test(text)) throw new TypeError("it contains a lone surrogate, which has no UTF-8 encoding");
  }
  return text;
}

/** jsonb: JSON.stringify(value), cast to jsonb by the server (which applies its own checks). */
function sendJson(v, name) {
  if (v === null) return null;
  try {
    return jsonText(v);
  } catch (err) {
    throw new TypeError(`pgfence: ${name} cannot be stored as JSON: ${err.message}`);
  }
}

/**
 * An interval: a Number is milliseconds ("5000 milliseconds", never 5000 seconds); a
 * string is PostgreSQL interval text ("30 seconds", "PT30S"), read by the server.
 */
function sendInterval(v, name) {
  if (v === null) return null;
  if (typeof v === "number") {
    if (!Number.isFinite(v)) throw new TypeError(`pgfence: ${name} must be a finite number of milliseconds, got ${v}`);
    // (String() writes 1e-7 and 1e+21 with an exponent, which interval input does not read;
    // below a microsecond is 0 to the server, and 1e21 ms is beyond any interval)
    if (Math.abs(v) >= 1e21) throw new TypeError(`pgfence: ${name} is out of range for an interval, got ${v} milliseconds`);
    return `${Math.abs(v) < 1e-6 ? v.toFixed(6) : v} milliseconds`;
  }
  if (typeof v === "string") return sendString(v, name);
  throw new TypeError(`pgfence: ${name} must be milliseconds (a number) or an interval string, got ${describe(v)}`);
}

function describe(v) {
  if (Array.isArray(v)) return "an array";
  return v === null ? "null" : typeof v;
}

const checked = (ok, what) => (v, name) => {
  if (v !== null && !ok(v)) throw new TypeError(`pgfence: ${name} must be ${what}, got ${describe(v)}${typeof v === "number" ? ` ${v}` : ""}`);
  return v;
};
/** A check of `checked` whose strings are then checked by sendString (NUL, lone surrogate). */
const strings = (check) => (v, name) => {
  const out = check(v, name);
  return typeof out === "string" ? sendString(out, name) : out;
};
const sendText = strings(checked((v) => typeof v === "string", "a string"));
const sendInt = checked((v) => Number.isSafeInteger(v), "an integer");
const sendBool = checked((v) => typeof v === "boolean", "a boolean");
const sendUuid = strings(checked((v) => typeof v === "string", "a UUID string"));
const sendTimestamp = strings(checked((v) => (v instanceof Date && !Number.isNaN(v.getTime())) || typeof v === "string",
  "a valid Date or timestamp text"));
const array = (send) => (v, name) => {
  if (v === null) return null;
  if (!Array.isArray(v)) throw new TypeError(`pgfence: ${name} must be an array, got ${describe(v)}`);
  return v.map((x, i) => (x === null || x === undefined ? null : send(x, `${name}[${i}]`)));
};

const TYPES = {
  text: { cast: "text", send: sendText },
  int: { cast: "integer", send: sendInt },
  bool: { cast: "boolean", send: sendBool },
  uuid: { cast: "uuid", send: sendUuid },
  id: { cast: "bigint", send: sendId },
  jsonb: { cast: "jsonb", send: sendJson },
  // enqueue's payload: null or undefined is the SQL default ('{}'), as in the Python client
  payload: { cast: "jsonb", send: sendJson, omitNull: true },
  interval: { cast: "interval", send: sendInterval },
  timestamptz: { cast: "timestamptz", send: sendTimestamp },
  "text[]": { cast: "text[]", send: array(sendText) },
  "int[]": { cast: "integer[]", send: array(sendInt) },
  "bool[]": { cast: "boolean[]", send: array(sendBool) },
  "uuid[]": { cast: "uuid[]", send: array(sendUuid) },
  "id[]": { cast: "bigint[]", send: array(sendId) },
  // jsonb[]: each element's JSON text in a text[] (pg quotes it), cast element by element
  "jsonb[]": { cast: "text[]::jsonb[]", send: array(sendJson) },
  "payload[]": { cast: "text[]::jsonb[]", send: (v, n) => array(sendJson)(Array.isArray(v) ? v.map((p) => p ?? {}) : v, n) },
  "interval[]": { cast: "interval[]", send: array(sendInterval) },
  "timestamptz[]": { cast: "timestamptz[]", send: array(sendTimestamp) },
};

// -- what comes back -----------------------------------------------------------------

const ids = (...names) => (row) => {
  for (const n of names) if (row[n] !== null && row[n] !== undefined) row[n] = String(row[n]);
  return row;
};
const asId = (v) => (v === null ? null : String(v));
const asInt = (v) => (v === null ? null : Number(v));

// Column lists: id columns are cast to text, so ids arrive as exact decimal strings
// whatever int8 parser the application installed in pg.
const JOB_ROW = "id::text AS id, queue, kind, payload, attempts, max_attempts, attempt_token, lease_expires_at, waited_s";
const OUTCOME = "id::text AS id, accepted, status, detail";
const ACTED = "id::text AS id, acted, job_status, detail";
const FILTER = ["status text", "queue text", "kind text", "error_contains text", "updated_after timestamptz",
  "updated_before timestamptz"];

/**
 * The API: one entry per SQL function. `args`: the positional arguments ("name type",
 * in the SQL order); `options`: the arguments with a SQL default, passed in a trailing
 * object by their SQL names (left out, the SQL default applies: nothing is defaulted
 * here). `returns`: "void", "scalar" (the function's value, through `map`), or a column
 * list (rows, each through `map`); `after` turns the rows or value into the answer.
 * `fenced`: a single call refused with PF001 is reported with report_rejection.
 */
const API = {
  // producer
  enqueue: { args: ["kind text", "payload payload?"],
    options: ["queue text", "priority int", "run_at timestamptz", "max_attempts int", "recovery_policy text",
      "idempotency_key text", "timeout interval", "unique_for interval"], returns: "scalar", map: asId },
  enqueue_many: { args: ["kinds text[]", "payloads payload[]?"],
    options: ["queue text", "priorities int[]", "run_ats timestamptz[]", "max_attempts int", "recovery_policy text",
      "idempotency_keys text[]", "timeout interval", "unique_for interval"], returns: "ordinal, id::text AS id, created" },
  // worker
  claim: { args: ["worker_id text", "queues text[]?"],
    options: ["lease interval", "max_jobs int", "request_id uuid", "queue_set text"], returns: JOB_ROW },
  claim_results: { args: ["worker_id text", "request_ids uuid[]"], options: ["lease interval"], returns: JOB_ROW },
  claimed: { args: ["worker_id text", "request_ids uuid[]"], options: ["lease interval"], returns: JOB_ROW,
    deprecated: "claim_results" },
  heartbeat: { args: ["job_id id", "attempt_token uuid"], options: ["lease interval"], returns: "scalar", fenced: true },
  heartbeat_many: { args: ["job_ids id[]", "attempt_tokens uuid[]"], options: ["lease interval"],
    returns: `${OUTCOME}, lease_expires_at` },
  complete: { args: ["job_id id", "attempt_token uuid", "result jsonb?"], returns: "void", fenced: true },
  complete_many: { args: ["job_ids id[]", "attempt_tokens uuid[]", "results jsonb[]?"], returns: OUTCOME },
  fail: { args: ["job_id id", "attempt_token uuid", "error text"], options: ["retry_in interval", "permanent bool"],
    returns: "scalar", fenced: true },
  fail_many: { args: ["job_ids id[]", "attempt_tokens uuid[]", "errors text[]"],
    options: ["retry_ins interval[]", "permanents bool[]"], returns: OUTCOME },
  release: { args: ["job_id id", "attempt_token uuid"], options: ["started bool"], returns: "scalar", fenced: true },
  release_many: { args: ["job_ids id[]", "attempt_tokens uuid[]"], options: ["started bool"], returns: OUTCOME },
  snooze: { args: ["job_id id", "attempt_token uuid", "delay interval"], returns: "scalar", fenced: true },
  snooze_many: { args: ["job_ids id[]", "attempt_tokens uuid[]", "delays interval[]"], returns: OUTCOME },
  report_rejection: { args: ["job_id id", "attempt_token uuid", "operation text"], returns: "void" },
  wakeup_tags: { args: ["queues text[]"], returns: "queue, tag" },
  // sets of queues stored on the server (worker or operator), claimed from with claim(..., { queue_set })
  define_queue_set: { args: ["queue_set text", "queues text[]"], returns: "scalar", map: asInt },
  drop_queue_set: { args: ["queue_set text"], returns: "scalar" },
  queue_sets: { returns: "queue_set, queue_count, names, defined_at, defined_by" },
  // operator
  reclaim_expired: { options: ["max_jobs int"], returns: "id::text AS id, status, reclaim_count" },
  requeue: { args: ["job_id id"], options: ["note text"], returns: "void" },
  cancel: { args: ["job_id id"], options: ["note text"], returns: "void" },
  // the operator console: audited actions (the session's pgfence.actor is the informational user)
  mark_done: { args: ["job_id id", "note text"], options: ["result jsonb"], returns: "void" },
  requeue_many: { args: ["job_ids id[]"], options: ["note text"], returns: ACTED },
  cancel_many: { args: ["job_ids id[]"], options: ["note text"], returns: ACTED },
  mark_done_many: { args: ["job_ids id[]", "note text"], options: ["result jsonb"], returns: ACTED },
  purge_many: { args: ["job_ids id[]", "note text"], returns: ACTED },
  preview_action: { args: ["action text"], options: FILTER, returns: "jobs, max_jobs",
    map: (r) => ({ jobs: Number(r.jobs), max_jobs: r.max_jobs }), after: (rows) => rows[0] },
  act_on_filter: { args: ["action text"], options: ["note text", "result jsonb", ...FILTER, "max_jobs int"],
    returns: ACTED },
  audit_of: { args: ["job_id id"], returns: "id::text AS id, at, db_role, login, actor, action, count, note, detail" },
  set_audit_retention: { args: ["retain interval"], returns: "void" },
  purge_audit: { options: ["max_rows int"], returns: "scalar", map: asInt },
  metrics: { returns: "name, type, help, labels, value" },
  purge_finished: { options: ["max_jobs int"], returns: "scalar", map: asInt },
  set_retention: { args: ["queue text", "retain_done interval", "retain_failed interval"], returns: "void" },
  pause_queue: { args: ["queue text"], returns: "scalar" },
  resume_queue: { args: ["queue text"], returns: "scalar" },
  set_queue_limit: { args: ["queue text", "max_running int"], returns: "void" },
  set_queue_rate_limit: { args: ["queue text", "max_claims int"], options: ["per interval"], returns: "void" },
  queue_limits: { returns: "queue, paused_at, paused_by, max_running, running, limited_at, limited_by, max_claims, "
    + "claims_per, claims_available, rate_limited_at, rate_limited_by", map: (r) => ({ ...r, running: asInt(r.running) }) },
  set_queue_timeout: { args: ["queue text", "timeout interval"], returns: "void" },
  queue_timeouts: { returns: "queue, timeout, set_at, set_by" },
  // schedules
  schedule: { args: ["name text"], options: ["cron text", "kind text", "payload payload", "queue text", "priority int",
    "max_attempts int", "recovery_policy text", "time_zone text", "catch_up text", "every interval", "replace bool",
    "slot_key text"], returns: "scalar" },
  unschedule: { args: ["name text"], returns: "scalar" },
  pause_schedule: { args: ["name text"], returns: "scalar" },
  resume_schedule: { args: ["name text"], returns: "scalar" },
  schedules: { returns: "name, cron, every, kind, payload, queue, priority, max_attempts, recovery_policy, time_zone, "
    + "catch_up, slot_key, paused_at, paused_by, created_at, created_by, next_fire_at, last_fire_at, last_slot, "
    + "last_job_id::text AS last_job_id, last_error, last_error_at" },
  fire_schedules: { options: ["max_slots int"], returns: "scalar" },
  cron_next: { args: ["cron text"], options: ["after timestamptz", "time_zone text"], returns: "scalar" },
  // history
  maintain_history: { returns: "created, dropped, truncated, moved, deleted",
    map: (r) => ({ ...r, moved: asInt(r.moved), deleted: asInt(r.deleted) }), after: (rows) => rows[0] },
  set_history_partition_width: { args: ["width interval"], returns: "void" },
  pause_sweeper: { returns: "scalar" },
  resume_sweeper: { returns: "scalar" },
  sweeper_health: { returns: "state, last_pass_at, last_pass_age, paused_at, paused_by, last_error, last_error_at",
    after: (rows) => rows[0] },
  sweeper_last_pass: { returns: "scalar" },
  stats: { returns: "queue, status, jobs, oldest_runnable_age, expired_leases", map: (r) => ({ ...r, jobs: asInt(r.jobs), expired_leases: asInt(r.expired_leases) }) },
  // read
  job: { args: ["job_id id"], returns: "*", map: ids("id"), after: (rows, args) => {
    if (rows.length === 0) throw new JobNotFound(`pgfence: job ${args[0]} not found`, { sqlstate: "PF002" });
    return rows[0];
  } },
  attempts_of: { args: ["job_id id"], returns: "*" },
  rejections_of: { args: ["job_id id"], returns: "*" },
  rejections_not_stored: { args: ["job_id id"], returns: "scalar", map: asInt },
  history_summary: { options: ["since interval"], returns: "outcome, count",
    after: (rows) => Object.fromEntries(rows.map((r) => [r.outcome, Number(r.count)])) },
  limits: { returns: "name, value, description",
    after: (rows) => Object.fromEntries(rows.map((r) => [r.name, Number(r.value)])) },
  schema_version: { returns: "scalar" },
};

function parseSpec(list) {
  return (list || []).map((s) => {
    const [name, spelled] = s.split(" ");
    const type = spelled.replace(/\?$/, "");
    if (!TYPES[type]) throw new Error(`pgfence: unknown argument type ${type}`);
    return { name, type: TYPES[type], optional: spelled.endsWith("?") };
  });
}

/** The query text for a call of `fn` with these arguments (in named notation). */
function callText(fn, spec, passed) {
  const named = passed.map((a, i) => `${a.name} => $${i + 1}::${a.type.cast}`).join(", ");
  const call = `pgfence.${fn}(${named})`;
  if (spec.returns === "void" || spec.returns === "scalar") return `SELECT ${call} AS value`;
  return `SELECT ${spec.returns} FROM ${call}`;
}

/**
 * Calls the pgfence SQL API.
 *
 * Build it with `await Client.connect(dsn)` (it owns a pg.Pool; every call runs alone,
 * in autocommit, so a worker never sits idle in a transaction), or from a caller's pg
 * Client or PoolClient (`client.using(conn)`, `new Client({ connection })`): calls then
 * join whatever transaction the caller has open there.
 */
class Client {
  /**
   * @param {{pool?: import("pg").Pool, connection?: import("pg").ClientBase, prepared?: boolean}} target
   *   exactly one of `pool` / `connection`. `prepared` [true]: run each query as a named
   *   prepared statement (pg prepares it once per connection). Pass false behind
   *   pgbouncer in transaction mode (before 1.21, or max_prepared_statements = 0).
   */
  constructor({ pool, connection, prepared = true } = {}) {
    if ((pool === undefined) === (connection === undefined)) {
      throw new TypeError("pgfence: Client needs exactly one of pool or connection (or use Client.connect(dsn))");
    }
    this.pool = pool ?? null;
    this.connection = connection ?? null;
    this.prepared = prepared;
    this._ownsPool = false;
  }

  /**
   * A client with its own pool of connections (a pg.Pool config, or a connection
   * string; an empty one uses the PG* environment variables), its schema checked.
   * @param {string|import("pg").PoolConfig} [config]
   * @param {{prepared?: boolean, max?: number, checkSchema?: boolean}} [options]
   */
  static async connect(config = {}, { prepared = true, max = 8, checkSchema = true } = {}) {
    const poolConfig = typeof config === "string" ? { connectionString: config } : { ...config };
    poolConfig.max ??= max;
    poolConfig.application_name ??= "pgfence-node";
    const pool = new pg.Pool(poolConfig);
    pool.on("error", () => {}); // an idle connection that died: the next call gets another
    const client = new Client({ pool, prepared });
    client._ownsPool = true;
    try {
      if (checkSchema) await client.checkSchema();
    } catch (err) {
      await pool.end();
      throw err;
    }
    return client;
  }

  /** The same client on a caller's connection (pg Client or PoolClient): its calls join the caller's transaction. */
  using(connection) {
    return new Client({ connection, prepared: this.prepared });
  }

  /** Close the pool this client owns (a caller's pool or connection is left alone). */
  async close() {
    if (this._ownsPool && this.pool) {
      this._ownsPool = false;
      await this.pool.end();
    }
  }

  /**
   * Run one query on the client's connection or pool; a pgfence SQLSTATE becomes its PgfenceError.
   * On the pool, the connection is taken and given back here, not by pool.query: that one
   * closes the connection after any error, so every refused call (PF001, 22023) cost a new
   * connection and its prepared statements. Here a connection is kept after pgfence's
   * answers only (SQLSTATE PFxxx, or class 22: a refused value), and only when it says it is
   * idle again; after anything else it is dropped as before, since some errors stay with the
   * session (0A000 a cached plan whose result type changed, 26000 a prepared statement gone,
   * 25P02 an aborted transaction) and only a new connection clears them. An error met while
   * taking a connection is marked (notSent in ./retries): the call never reached the database.
   */
  async query(text, values = [], name = undefined) {
    const config = this.prepared && name ? { name, text, values } : { text, values };
    if (this.connection) {
      try {
        return await this.connection.query(config);
      } catch (err) {
        throw translate(err) ?? err;
      }
    }
    let conn;
    try {
      conn = await this.pool.connect();
    } catch (err) {
      throw markNotSent(err);
    }
    let failed;
    const onError = (err) => { failed ??= err; }; // (the connection died while it was ours)
    conn.on("error", onError);
    try {
      return await conn.query(config);
    } catch (err) {
      if (!keepsConnection(err, conn)) failed ??= err;
      throw translate(err) ?? err;
    } finally {
      conn.removeListener("error", onError);
      conn.release(failed);
    }
  }

  /**
   * Check that pgfence.schema_version() is the one this client speaks; returns it.
   * Throws SchemaMismatch (run `sqitch deploy`) otherwise.
   */
  async checkSchema() {
    let row;
    try {
      ({ rows: [row] } = await this.query(
        "SELECT pgfence.schema_version() AS version,"
        + " to_regprocedure('pgfence.claim_results(text, uuid[], interval)') IS NOT NULL AS additions"));
    } catch (err) {
      if (err && (err.code === "42883" || err.code === "3F000")) {
        throw new SchemaMismatch("pgfence is not deployed in this database: run `sqitch deploy` "
          + "(or `make deploy` in the pgfence repository)", { cause: err });
      }
      throw err;
    }
    if (row.version !== SCHEMA_VERSION) {
      throw new SchemaMismatch(`the database has pgfence schema version ${row.version}, this client speaks `
        + `${SCHEMA_VERSION}: run \`sqitch deploy\` with the matching pgfence release`);
    }
    if (!row.additions) {
      throw new SchemaMismatch(`the database has pgfence schema version ${row.version} as of @v0.4.0, without the `
        + "functions added since (claim_results, job, limits, ...) that this client calls: run `sqitch deploy`");
    }
    return row.version;
  }

  /**
   * `CALL pgfence.sweep()`: reclaim every expired lease, a committed batch at a time
   * (needs autocommit: the pool, or a caller's connection outside a transaction).
   */
  async sweep({ batch_size } = {}) {
    const { rows } = batch_size === undefined
      ? await this.query("CALL pgfence.sweep()")
      : await this.query("CALL pgfence.sweep(batch_size => $1::integer)", [batch_size]);
    return Number(rows[0].reclaimed);
  }
}

/** Add one method per API entry to Client.prototype. */
function define(fn, spec) {
  const args = parseSpec(spec.args);
  const options = parseSpec(spec.options);
  const texts = new Map(); // which arguments are passed -> [statement name, text]
  const usage = `${fn}(${args.map((a) => (a.optional ? `[${a.name}]` : a.name)).join(", ")}`
    + `${options.length ? `${args.length ? ", " : ""}{ ${options.map((o) => o.name).join(", ")} }` : ""})`;
  const method = async function (...given) {
    if (given.length > args.length + 1) {
      throw new TypeError(`pgfence: ${fn}() takes ${args.length} arguments and an options object, got ${given.length} arguments: ${usage}`);
    }
    const opts = given.length > args.length ? given[args.length] ?? {} : {};
    if (typeof opts !== "object" || Array.isArray(opts)) {
      throw new TypeError(`pgfence: ${fn}() takes ${args.length} arguments and an options object: ${usage}`);
    }
    args.forEach((a, i) => {
      if (given[i] === undefined && !a.optional) {
        throw new TypeError(`pgfence: ${fn}() needs ${a.name} (argument ${i + 1}), got undefined: ${usage}`);
      }
    });
    for (const key of Object.keys(opts)) {
      if (!options.some((o) => o.name === key)) {
        throw new TypeError(`pgfence: ${fn}() has no option ${key} (options: ${options.map((o) => o.name).join(", ") || "none"})`);
      }
    }
    const passed = [];
    const values = [];
    let mask = "";
    const add = (a, v) => {
      const omit = v === undefined || (v === null && a.type.omitNull);
      mask += omit ? "0" : "1";
      if (omit) return;
      passed.push(a);
      values.push(a.type.send(v, a.name));
    };
    args.forEach((a, i) => add(a, given[i]));
    options.forEach((o) => add(o, opts[o.name]));
    let entry = texts.get(mask);
    if (entry === undefined) {
      const text = callText(fn, spec, passed);
      const hash = crypto.createHash("sha1").update(text).digest("hex").slice(0, 12);
      entry = [`pgfence_${fn}_${hash}`, text];
      texts.set(mask, entry);
    }
    let res;
    try {
      res = await this.query(entry[1], values, entry[0]);
    } catch (err) {
      if (spec.fenced && err instanceof LeaseLost && this.connection === null) {
        // The refused call's transaction rolled back its rejection row: record it again.
        try {
          await this.report_rejection(given[0], given[1], fn);
        } catch (_) { /* never hide the LeaseLost (PF002/22023 here are not the caller's problem) */ }
      }
      throw err;
    }
    let out;
    if (spec.returns === "void") return undefined;
    if (spec.returns === "scalar") {
      const v = res.rows.length ? res.rows[0].value : null;
      out = spec.map ? spec.map(v) : v;
    } else {
      out = spec.map ? res.rows.map(spec.map) : res.rows;
    }
    return spec.after ? spec.after(out, given) : out;
  };
  Object.defineProperty(method, "name", { value: fn });
  Client.prototype[fn] = method;
}

for (const [fn, spec] of Object.entries(API)) define(fn, spec);

module.exports = { Client, RawJson, SCHEMA_VERSION, API, TYPES, PgfenceError, jsonText };
