"use strict";
// Running one handler: what its return or its throw becomes (as pgfence/handlers.py).
//
// runHandler() calls the handler of a claimed attempt and always resolves to its
// outcome; whether a failure is retried or dead-lettered, and when, is decided by the
// database (fail / fail_many), never here.

const { jsonText } = require("./client");
const { toWellFormed } = require("./text");

/** Throw from a handler to dead-letter the job now (no retry). */
class PermanentFailure extends Error {
  constructor(message) { super(message); this.name = "PermanentFailure"; }
}

/**
 * Throw from a handler that stops early because `job.signal` aborted (or
 * `job.shouldStop()` became true): shutdown, or a lost lease. The worker gives the job
 * back with a fenced release (the reclaim rule: an auto job returns to the queue, a
 * manual one goes to manual_review) instead of completing it.
 */
class Interrupted extends Error {
  constructor(message = "interrupted") { super(message); this.name = "Interrupted"; }
}

/**
 * Throw from a handler to retry after `delay` (milliseconds, or an interval string)
 * instead of the default backoff; the database still dead-letters the job when its
 * attempts are exhausted.
 */
class RetryAfter extends Error {
  constructor(delay, message = undefined) {
    super(message ?? `retry after ${typeof delay === "number" ? `${delay} ms` : delay}`);
    this.name = "RetryAfter";
    this.delay = delay;
  }
}

/**
 * Throw from a handler to run the job again after `delay` (milliseconds, or an interval
 * string; more than 0, at most limits().snooze_max_s, 365 days) without counting the
 * attempt as a failure: the worker reports a fenced snooze (snooze_many), the attempt
 * history records it as `snoozed`. A job may be snoozed limits().snoozes_per_job (100)
 * times; past that the database fails the attempt instead (retried after `delay` while
 * attempts remain).
 */
class Snooze extends Error {
  constructor(delay, message = undefined) {
    super(message ?? `snooze for ${typeof delay === "number" ? `${delay} ms` : delay}`);
    this.name = "Snooze";
    this.delay = delay;
  }
}

/** Error texts are cut to this many characters (the end kept), well under the database's 100,000. */
const MAX_ERROR_CHARS = 50000;

/** An error text PostgreSQL can store: NUL characters escaped, lone surrogates replaced, cut to MAX_ERROR_CHARS. */
function storableText(text) {
  let t = String(text);
  if (t.includes("\0")) t = t.replace(/\0/g, "\\x00");
  t = toWellFormed(t); // (the client refuses a lone surrogate in a text argument: it would become U+FFFD)
  if (t.length > MAX_ERROR_CHARS) t = `...[truncated]\n${t.slice(-MAX_ERROR_CHARS)}`;
  return t;
}

/** A name for a thrown value that never runs its code (no toString, no getter): "a string", "an object (Map)". */
function kindOf(value) {
  if (value === null) return "null";
  const type = typeof value;
  if (type !== "object" && type !== "function") return type;
  try {
    return `${type} (${Object.prototype.toString.call(value).slice(8, -1)})`;
  } catch (_) { // (a Proxy whose traps throw)
    return type;
  }
}

/**
 * The error text of whatever a handler threw: an Error's stack (or name and message); a
 * primitive as it is ("thrown value: boom", "thrown value: Symbol(x)", "thrown value: 10n");
 * any other value as JSON. Never throws: a value whose formatting throws (a getter, a
 * toString or a toJSON that throws, a Proxy) is named by its type, with what the
 * formatting threw (as the Python worker's error_text).
 */
function errorText(err) {
  try {
    if (err instanceof Error) return storableText(err.stack && err.stack.includes(err.message) ? err.stack : `${err.name}: ${err.message}\n${err.stack || ""}`);
    if (typeof err === "string") return storableText(`thrown value: ${err}`);
    if (err === null || (typeof err !== "object" && typeof err !== "function")) {
      return storableText(`thrown value: ${typeof err === "bigint" ? `${err}n` : String(err)}`);
    }
    const json = JSON.stringify(err);
    return storableText(`thrown value: ${typeof json === "string" ? json : kindOf(err)}`);
  } catch (broken) {
    let why;
    try { why = broken instanceof Error ? String(broken.name) : kindOf(broken); } catch (_) { why = kindOf(broken); }
    return storableText(`thrown value: ${kindOf(err)} (it could not be formatted: ${why})`);
  }
}

/**
 * The outcome of a handler that threw `err`: Interrupted gives the job back, PermanentFailure
 * dead-letters it, Snooze snoozes it, RetryAfter fails it to be retried after its delay (a
 * number of milliseconds outside what snooze or fail accept fails it with the default
 * backoff instead; a string delay is the database's to check); anything else fails it.
 */
function raised(result, err, limits) {
  if (err instanceof Interrupted) return result(false, null, { interrupted: true });
  if (err instanceof PermanentFailure) return result(false, errorText(err), { permanent: true });
  if (err instanceof Snooze) {
    const d = err.delay;
    const maxMs = limits.snooze_max_s * 1000;
    if (typeof d === "string" || (typeof d === "number" && Number.isFinite(d) && d > 0 && d <= maxMs)) {
      return result(false, null, { snooze: d });
    }
    return result(false, storableText(`Snooze with delay ${shownDelay(d)} outside (0, ${maxMs}] ms, failed with the `
      + `default backoff instead\n${errorText(err)}`));
  }
  if (err instanceof RetryAfter) {
    const d = err.delay;
    const maxMs = limits.retry_in_max_s * 1000;
    if (typeof d === "string" || (typeof d === "number" && Number.isFinite(d) && d >= 0 && d <= maxMs)) {
      return result(false, errorText(err), { retryIn: d });
    }
    return result(false, storableText(`RetryAfter with delay ${shownDelay(d)} outside 0..${maxMs} ms, failed with the `
      + `default backoff instead\n${errorText(err)}`));
  }
  return result(false, errorText(err));
}

/** A delay that is neither a string nor a number in range, as an error text shows it (never its own toString). */
function shownDelay(d) {
  return typeof d === "number" || typeof d === "bigint" || typeof d === "boolean" || d === undefined || d === null
    ? String(d) : `(${kindOf(d)})`;
}

/**
 * Run the handler of `entry`'s job; always resolves (never rejects, whatever the handler
 * does) to a Result:
 * {entry, ok, value (JSON text | error text | null), retryIn, permanent, interrupted, snooze}.
 * An unknown kind, and a result jsonb cannot store (see jsonText in client.js: JSON.stringify
 * throws or gives nothing, a NUL character, a lone surrogate), fail permanently; a RawJson
 * result is stored as its text. A throw is what raised() says; a throw whose own
 * classification throws (a Proxy, a getter on Snooze's delay) fails the attempt with what
 * errorText() can say of it.
 */
async function runHandler(entry, handlers, workerId, limits) {
  const job = entry.job;
  const result = (ok, value, extra = {}) => ({ entry, ok, value, retryIn: null, permanent: false, interrupted: false,
    snooze: null, ...extra });
  const handler = Object.prototype.hasOwnProperty.call(handlers, job.kind) ? handlers[job.kind] : undefined;
  if (typeof handler !== "function") {
    return result(false, storableText(`UnknownKind: no handler for kind ${JSON.stringify(job.kind)} in worker `
      + `${workerId} (known: ${JSON.stringify(Object.keys(handlers).sort())})`), { permanent: true });
  }
  let value;
  try {
    value = await handler(job);
  } catch (err) {
    try {
      return raised(result, err, limits);
    } catch (_) {
      return result(false, errorText(err));
    }
  }
  if (value === undefined || value === null) return result(true, null);
  let text;
  try {
    text = jsonText(value);
  } catch (err) {
    return result(false, storableText(`ResultNotJSON: handler for ${JSON.stringify(job.kind)} returned a value `
      + `that cannot be stored as JSON: ${err.message}`), { permanent: true });
  }
  return result(true, text);
}

module.exports = { PermanentFailure, Interrupted, RetryAfter, Snooze, runHandler, storableText, errorText, MAX_ERROR_CHARS };
