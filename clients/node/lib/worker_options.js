"use strict";
// The Worker's options, each checked when the worker is made (the Node.js form of
// python_client/pgfence/worker_options.py, in milliseconds and camelCase).
//
// A bad option throws a WorkerOptionError naming it, with the value it got and a hint of
// what it takes, from the constructor: before the worker connects, listens or claims
// anything. So a bad value never runs: a negative or NaN pollInterval polled in a busy
// loop, queues given as a string were claimed from as its letters, a handler that is not a
// function failed each job of its kind, a misspelt option was ignored. An option given as
// undefined is the default (an optional property that is absent).
//
// The database has the last word on names and on the lease (pgfence.limits() may allow
// other bounds than the defaults below, and a name may hold no control character, no
// leading or trailing space, ...: claim refuses it, 22023): these checks are what the
// worker itself needs, and the bounds the Python worker checks by default.

const { printable, isWellFormed } = require("./text");

/** The defaults of pgfence.limits() the worker's checks use (as python_client/pgfence/limits.py's Limits()). */
const LIMITS = Object.freeze({ batch: 10000, queues: 10000, lease_min_ms: 1, lease_max_ms: 86400000, name_chars: 128 });
/** Longest pollInterval, sweepInterval, shutdownGrace and flushInterval, ms: a day (as MAX_SECONDS in worker_options.py). */
const MAX_MS = 86400000;
/**
 * Shortest pollInterval (1 ms: below it an idle worker polls in a busy loop, a claim call
 * after the other) and sweepInterval (10 ms, the shortest pass_interval of the database's
 * background sweeper), as MIN_POLL_SECONDS and MIN_SWEEP_SECONDS in worker_options.py.
 */
const MIN_POLL_MS = 1;
const MIN_SWEEP_MS = 10;

/** Warnings and errors to the console (the default logger). */
const CONSOLE = Object.freeze({ info() {}, warn: (m) => console.warn(m), error: (m) => console.error(m) });

/** Every option and its default, in the order they are checked (after the handlers). */
const DEFAULTS = Object.freeze({
  queues: null, queueSet: null, concurrency: 8, prefetch: 0, lease: 30000, pollInterval: 1000, shutdownGrace: 30000,
  runSweeper: null, sweepInterval: 1000, flushInterval: 5, flushBatch: 500, workerId: null, listen: true,
  handleSignals: true, logger: CONSOLE, metricsPort: null, metricsBind: "127.0.0.1",
});
const NAMES = Object.keys(DEFAULTS);

/**
 * A Worker option the worker cannot run with: `option` names it, `value` is what it got,
 * `hint` what it takes; the message says all three, the value written safely (strings
 * with printable(), cut at 80 characters). A TypeError, as the client's own argument
 * errors, and not a PgfenceError: no database said it.
 */
class WorkerOptionError extends TypeError {
  /**
   * @param {string} option
   * @param {unknown} value
   * @param {string} problem what is wrong with the value ("is not an integer"), kept as `problem`
   * @param {string} hint what the option takes
   */
  constructor(option, value, problem, hint) {
    super(`pgfence: invalid worker option ${printable(option)}=${shown(value)}: ${problem} (${hint})`);
    this.name = "WorkerOptionError";
    this.option = option;
    this.value = value;
    this.problem = problem;
    this.hint = hint;
  }
}

/** A string quoted, backslash and double quote escaped, then printable() (so an escape in it is never one of printable's), cut at 80 characters. */
function quoted(text) {
  let out = "\"";
  for (const c of text) { // (by code point: a cut never splits a pair or an escape)
    const piece = printable(c === "\\" || c === "\"" ? `\\${c}` : c);
    if (out.length + piece.length > 76) return `${out}..."`;
    out += piece;
  }
  return `${out}"`;
}

/** A value as an error message shows it: never its own toString() (a getter or a hostile text), strings quoted and printable. */
function shown(value) {
  switch (typeof value) {
    case "string": return quoted(value);
    case "number": return Object.is(value, -0) ? "-0" : String(value);
    case "bigint": return `${value}n`;
    case "boolean": case "undefined": return String(value);
    case "symbol": return `Symbol(${quoted(value.description ?? "").slice(1, -1)})`;
    case "function": return `[function ${quoted(typeof value.name === "string" ? value.name : "").slice(1, -1)}]`;
    default:
      if (value === null) return "null";
      if (Array.isArray(value)) return `[an array of ${value.length}]`;
      return `[${printable(Object.prototype.toString.call(value).slice(8, -1)).slice(0, 40)}]`; // ([Object], [Map], [Date], ...)
  }
}

/** Whether value is a plain object: {…} or Object.create(null), not an array, a Map or a class's instance (whose methods are not its own keys). */
function plainObject(value) {
  if (value === null || typeof value !== "object") return false;
  const proto = Object.getPrototypeOf(value);
  return proto === Object.prototype || proto === null;
}

/** The known option nearest to an unknown one (camelCase or snake_case, a typo or two), or null. */
function nearest(name) {
  const squash = (s) => s.toLowerCase().replace(/_/g, "");
  const wanted = squash(name);
  let best = null, bestDistance = 3;
  for (const known of NAMES) {
    const d = distance(wanted, squash(known));
    if (d < bestDistance) { best = known; bestDistance = d; }
  }
  return best;
}

/** Levenshtein distance (short strings: option names). */
function distance(a, b) {
  if (Math.abs(a.length - b.length) > 2 || a.length > 64) return Infinity;
  let row = Array.from({ length: b.length + 1 }, (_, j) => j);
  for (let i = 1; i <= a.length; i += 1) {
    const next = [i];
    for (let j = 1; j <= b.length; j += 1) {
      next.push(Math.min(row[j] + 1, next[j - 1] + 1, row[j - 1] + (a[i - 1] === b[j - 1] ? 0 : 1)));
    }
    row = next;
  }
  return row[b.length];
}

// -- one check per kind of value ---------------------------------------------------------

/**
 * A name (a job kind, a queue, a queue set, a worker id): a string of 1..128 characters
 * (code points, as PostgreSQL's char_length counts them), with no lone surrogate (which
 * pg would send as U+FFFD: another name). What else a name may not hold, claim says.
 */
function name(option, value, hint) {
  if (typeof value !== "string") throw new WorkerOptionError(option, value, "is not a name (a string)", hint);
  const length = [...value].length;
  if (length < 1 || length > LIMITS.name_chars) {
    throw new WorkerOptionError(option, value, `is a name of ${length} characters`, hint);
  }
  if (!isWellFormed(value)) throw new WorkerOptionError(option, value, "holds a lone surrogate (not Unicode text)", hint);
  return value;
}

function integer(option, value, lo, hi, hint) {
  if (typeof value !== "number" || !Number.isInteger(value)) throw new WorkerOptionError(option, value, "is not an integer", hint);
  if (!Number.isSafeInteger(value) || value < lo || (hi !== null && value > hi)) throw new WorkerOptionError(option, value, "is out of range", hint);
  return value;
}

/** A duration in milliseconds: a finite number, more than 0 (or 0 or more, zeroOk), at most `most`. */
function milliseconds(option, value, zeroOk, what, least = 0, most = MAX_MS) {
  const hint = `${what}: ${zeroOk ? least : `more than ${least}`}..${most} milliseconds`;
  if (typeof value !== "number") throw new WorkerOptionError(option, value, "is not a number of milliseconds", hint);
  if (!Number.isFinite(value) || value < least || (value === least && !zeroOk) || value > most) {
    throw new WorkerOptionError(option, value, "is out of range", hint);
  }
  return value;
}

function flag(option, value, nullOk, hint) {
  if (value === null && nullOk) return null;
  if (typeof value !== "boolean") throw new WorkerOptionError(option, value, "is not a boolean", hint);
  return value;
}

function handlerMap(handlers) {
  const hint = "pass an object {kind: async (job) => result}";
  if (!plainObject(handlers)) throw new WorkerOptionError("handlers", handlers, "is not a plain object", hint);
  const out = {};
  for (const kind of Reflect.ownKeys(handlers)) {
    if (!Object.prototype.propertyIsEnumerable.call(handlers, kind)) continue;
    if (typeof kind === "symbol") throw new WorkerOptionError("handlers", kind, "has a key that is not a job kind", hint);
    name("handlers", kind, "key each handler by its job kind, a name of 1 to 128 characters");
    const handler = handlers[kind];
    if (typeof handler !== "function") {
      throw new WorkerOptionError(`handlers[${quoted(kind)}]`, handler, "is not a function", "pass a function (or async function) taking the job");
    }
    Object.defineProperty(out, kind, { value: handler, enumerable: true, writable: true, configurable: true }); // (a kind "__proto__" too)
  }
  return out;
}

function queueList(queues, queueSet) {
  if (queues === null) return null;
  if (queueSet !== null) {
    throw new WorkerOptionError("queueSet", queueSet, "is given with queues", "pass queues (a list of names) or queueSet (a stored set), not both");
  }
  const hint = `pass an array of 1..${LIMITS.queues} queue names, e.g. ["emails"], or null to claim from every queue`;
  if (typeof queues !== "object" || typeof queues[Symbol.iterator] !== "function") {
    throw new WorkerOptionError("queues", queues, "is not a list of queue names", hint);
  }
  const names = [];
  for (const q of queues) { // (stops past the limit: an endless iterable is refused, not drained)
    if (names.length === LIMITS.queues) throw new WorkerOptionError("queues", queues, `has more than ${LIMITS.queues} names`, hint);
    names.push(name(`queues[${names.length}]`, q, "each queue name is a string of 1 to 128 characters"));
  }
  if (!names.length) throw new WorkerOptionError("queues", queues, "has no names", hint);
  return names;
}

function logger(value) {
  const hint = "pass an object with info, warn and error methods (any may be left out: the default's), such as console";
  if (value === null || (typeof value !== "object" && typeof value !== "function")) {
    throw new WorkerOptionError("logger", value, "is not a logger", hint);
  }
  const out = {};
  let given = 0;
  for (const level of ["info", "warn", "error"]) {
    const method = value[level]; // (its own or its class's: a logger library's instance)
    if (method === undefined) { out[level] = CONSOLE[level]; continue; }
    if (typeof method !== "function") throw new WorkerOptionError(`logger.${level}`, method, "is not a function", hint);
    out[level] = (message) => method.call(value, message);
    given += 1;
  }
  if (!given) throw new WorkerOptionError("logger", value, "has none of info, warn and error", hint);
  return out;
}

/** metricsPort (WorkerMetrics' port): an integer in 0..65535, 0 for any free port. */
function checkPort(port) {
  return integer("metricsPort", port, 0, 65535, "a TCP port, 0..65535 (0: any free port), or null for no metrics");
}

/** metricsBind (WorkerMetrics' bind): a non-empty string, the address to serve on. */
function checkBind(bind) {
  if (typeof bind !== "string" || bind === "") {
    throw new WorkerOptionError("metricsBind", bind, "is not an address", "an address of this host as a string, such as \"127.0.0.1\"");
  }
  return bind;
}

/**
 * The Worker's handlers and options, checked: {handlers, queues, queueSet, concurrency,
 * prefetch, lease, pollInterval, shutdownGrace, runSweeper, sweepInterval, flushInterval,
 * flushBatch, workerId (null: the worker makes one), listen, handleSignals, logger ({info,
 * warn, error}, each a function), metricsPort, metricsBind}, with the defaults where an
 * option is absent or undefined. Throws a WorkerOptionError for the first bad one: an
 * unknown option name first (a typo is the likeliest mistake), then in the order above.
 * @param {unknown} handlers
 * @param {unknown} [options]
 */
function checkWorkerOptions(handlers, options = {}) {
  if (!plainObject(options)) throw new WorkerOptionError("options", options, "is not a plain object", "pass {concurrency: 8, ...} or nothing");
  for (const key of Reflect.ownKeys(options)) {
    if (typeof key === "string" && NAMES.includes(key)) continue;
    const like = typeof key === "string" ? nearest(key) : null;
    throw new WorkerOptionError(typeof key === "string" ? key : String(key), options[key], "is not an option of Worker",
      `${like ? `did you mean ${like}? ` : ""}the options: ${NAMES.join(", ")}`);
  }
  const given = (key) => (Object.prototype.hasOwnProperty.call(options, key) && options[key] !== undefined ? options[key] : DEFAULTS[key]);
  const o = {};
  o.handlers = handlerMap(handlers);
  o.queues = queueList(given("queues"), given("queueSet"));
  o.queueSet = given("queueSet") === null ? null : name("queueSet", given("queueSet"), "a set stored with define_queue_set: a name of 1 to 128 characters, or null");
  o.concurrency = integer("concurrency", given("concurrency"), 1, null, "handlers running at once: an integer, 1 or more");
  o.prefetch = integer("prefetch", given("prefetch"), 0, null, "jobs claimed ahead of free handlers: an integer, 0 or more");
  o.lease = milliseconds("lease", given("lease"), true, "the lease each claim takes, e.g. 30000", LIMITS.lease_min_ms, LIMITS.lease_max_ms);
  o.pollInterval = milliseconds("pollInterval", given("pollInterval"), true, "the longest idle wait between claims", MIN_POLL_MS);
  o.shutdownGrace = milliseconds("shutdownGrace", given("shutdownGrace"), true, "how long a stop waits for running handlers");
  o.runSweeper = flag("runSweeper", given("runSweeper"), true, "true, false, or null (while no sweeper runs)");
  o.sweepInterval = milliseconds("sweepInterval", given("sweepInterval"), true, "how often this worker sweeps when it does", MIN_SWEEP_MS);
  o.flushInterval = milliseconds("flushInterval", given("flushInterval"), true, "how long an outcome may wait to be reported");
  o.flushBatch = integer("flushBatch", given("flushBatch"), 1, LIMITS.batch, `outcomes reported in one call: an integer, 1..${LIMITS.batch}`);
  o.workerId = given("workerId") === null ? null : name("workerId", given("workerId"), "a name of 1 to 128 characters, or null for host:pid:random");
  o.listen = flag("listen", given("listen"), false, "true (wake on NOTIFY) or false (poll only)");
  o.handleSignals = flag("handleSignals", given("handleSignals"), false, "true (stop on SIGTERM/SIGINT while run() runs) or false");
  o.logger = given("logger") === CONSOLE ? CONSOLE : logger(given("logger"));
  o.metricsPort = given("metricsPort") === null ? null : checkPort(given("metricsPort"));
  o.metricsBind = checkBind(given("metricsBind"));
  return o;
}

module.exports = { WorkerOptionError, checkWorkerOptions, checkPort, checkBind, DEFAULTS, LIMITS, MAX_MS, MIN_POLL_MS, MIN_SWEEP_MS };
