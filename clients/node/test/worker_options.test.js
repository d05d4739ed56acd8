"use strict";
// The Worker's options (lib/worker_options.js): each is checked when the worker is made,
// before anything connects or claims, and a bad one is a WorkerOptionError naming it (as
// the Python workers' pgfence.worker_options). A seeded generator sweeps random values
// against a statement of the rules written here, independently of the code.
const { test, before, after } = require("node:test");
const assert = require("node:assert/strict");
const { Client, Worker, WorkerOptionError, PgfenceError } = require("../lib");
const { DSN, deleteQueues, queueName, sleep, connect } = require("./helpers");

let client;
before(async () => { client = await connect(); });
after(async () => { await deleteQueues(client); await client.close(); });

const noop = async () => null;
const DAY = 86400000;
const make = (options, handlers = { k: noop }) => new Worker(client, handlers, options);

/** Asserts that new Worker(client, handlers, options) throws a WorkerOptionError naming `option`, and returns it (handlers: {k: noop} unless given, undefined too). */
function refused(options, option, ...handlers) {
  let error = null;
  try {
    new Worker(client, handlers.length ? handlers[0] : { k: noop }, options);
  } catch (err) {
    error = err;
  }
  const what = `${JSON.stringify(Object.keys(options))} -> ${error && error.message}`;
  assert.ok(error instanceof WorkerOptionError, `a WorkerOptionError expected: ${what}`);
  assert.ok(error instanceof TypeError && !(error instanceof PgfenceError), what);
  assert.equal(error.name, "WorkerOptionError");
  assert.equal(error.option, option, what);
  assert.ok(error.message.startsWith(`pgfence: invalid worker option ${option}=`), what);
  assert.ok(error.message.endsWith(` (${error.hint})`) && error.hint.length > 0, what);
  return error;
}

const BAD = {
  concurrency: [0, -1, 2.5, true, "8", NaN, Infinity, null, 2 ** 53, 8n, [8]],
  prefetch: [-1, 1.5, NaN, -Infinity, false, "0", null],
  lease: [0, -1, 0.5, DAY + 1, NaN, Infinity, "30 seconds", "30000", null, true, new Date()],
  pollInterval: [0, -0, 0.001, 0.999, -1, NaN, Infinity, DAY + 1, "1000", null, true],
  shutdownGrace: [-1, -0.001, NaN, Infinity, DAY + 1, "0", null, false],
  sweepInterval: [0, 0.5, 9.999, -1, NaN, Infinity, DAY + 1, "1000", null],
  flushInterval: [-1, NaN, -Infinity, DAY + 1, "5", null],
  flushBatch: [0, -1, 1.5, 10001, NaN, "500", null, true],
  queueSet: ["", 5, "x".repeat(129), "\ud800s", true, ["s"]],
  workerId: ["", 5, "x".repeat(129), "w\udc00", true, {}],
  listen: ["yes", 1, 0, null, "false"],
  handleSignals: ["yes", 1, null],
  runSweeper: [1, 0, "auto", "true", {}],
  logger: ["console", 5, null, {}, { log() {} }, true],
  metricsPort: [-1, 65536, 1.5, true, "9100", NaN],
  metricsBind: ["", 127001, null],
};

test("every option refuses its bad values with a WorkerOptionError naming it", () => {
  for (const [option, values] of Object.entries(BAD)) {
    for (const value of values) refused({ [option]: value }, option);
  }
  // queues: a list of names (a string would be claimed from as its letters)
  for (const value of ["abc", "", [], {}, { 0: "a", length: 1 }, 5, true, () => ["a"]]) refused({ queues: value }, "queues");
  for (const [value, option] of [[[""], "queues[0]"], [[5], "queues[0]"], [["ok", null], "queues[1]"],
    [["ok", "x".repeat(129)], "queues[1]"], [["ok", "ok", "\ud800"], "queues[2]"], [new Map([["a", "b"]]), "queues[0]"]]) {
    refused({ queues: value }, option);
  }
  refused({ queues: Array(10001).fill("q") }, "queues");
  refused({ queues: (function* endless() { for (;;) yield "q"; })() }, "queues"); // (refused, not drained)
  refused({ queues: ["a"], queueSet: "s" }, "queueSet");
  // a logger's methods
  refused({ logger: { info: 5 } }, "logger.info");
  refused({ logger: { info() {}, warn: "x" } }, "logger.warn");
  refused({ logger: { error: null } }, "logger.error");
});

test("handlers, the options object and option names are checked too", () => {
  class Handlers { k() {} }
  for (const handlers of [null, undefined, "abc", [noop], new Map([["k", noop]]), new Handlers(), noop]) {
    refused({}, "handlers", handlers);
  }
  refused({}, "handlers", { "": noop });
  refused({}, "handlers", { ["x".repeat(129)]: noop });
  refused({}, "handlers", { [Symbol("k")]: noop });
  assert.match(refused({}, "handlers[\"k\"]", { ok: noop, k: 5 }).message, /=5: is not a function/);
  refused({}, "handlers[\"\\u001b[2J\"]", { "\x1b[2J": "x" }); // (the kind written safely in the option too)
  for (const options of [null, "abc", [1], 5, new Map()]) {
    assert.throws(() => new Worker(client, {}, options), (err) => err instanceof WorkerOptionError && err.option === "options");
  }
  // an unknown name (a typo was silently ignored), with the nearest known one
  assert.match(refused({ concurency: 4 }, "concurency").hint, /^did you mean concurrency\?/);
  assert.match(refused({ poll_interval: 100 }, "poll_interval").hint, /^did you mean pollInterval\?/);
  assert.match(refused({ worker_id: "w" }, "worker_id").hint, /^did you mean workerId\?/);
  assert.match(refused({ zzz: 1 }, "zzz").hint, /^the options: queues, queueSet, /);
  assert.equal(refused({ [Symbol("s")]: 1 }, "Symbol(s)").value, 1);
  // the first unknown name wins over a bad value of a known one (a typo is the likelier mistake)
  refused({ concurrency: 0, concurency: 4 }, "concurency");
});

test("a hostile value is shown escaped and cut short; the error keeps it as given", () => {
  const hostile = "x\x1b[31m\n\u202e".repeat(30);
  const err = refused({ workerId: hostile }, "workerId");
  assert.equal(err.value, hostile);
  assert.ok(!/[\x00-\x1f\u202e]/.test(err.message), err.message);
  assert.ok(err.message.includes("\"x\\u001b[31m\\u000a\\u202ex"), err.message);
  assert.ok(err.message.length < 300, err.message);
  // a quote or a backslash in it cannot pass for the end of the value or for an escape
  assert.ok(refused({ listen: "a\"b\\u0041" }, "listen").message.includes("=\"a\\\"b\\\\u0041\": "));
  // an object is never asked for its own text
  const sly = { toString() { throw new Error("toString called"); }, [Symbol.toPrimitive]() { throw new Error("called"); } };
  assert.match(refused({ concurrency: sly }, "concurrency").message, /=\[Object\]: is not an integer/);
});

test("good values are taken as given; undefined is the default", () => {
  const good = {
    queues: [["a"], ["a", "b"], new Set(["a", "b"]), ["x".repeat(128)], ["é\u{1f600}".repeat(64)], Array(10000).fill("q")],
    queueSet: ["s", "x".repeat(128)],
    concurrency: [1, 8, 1000],
    prefetch: [0, 1, 500],
    lease: [1, 1.5, 30000, DAY],
    pollInterval: [1, 1.5, 1000, DAY],
    shutdownGrace: [0, 1, 30000, DAY],
    sweepInterval: [10, 10.5, 1000, DAY],
    flushInterval: [0, 5, DAY],
    flushBatch: [1, 500, 10000],
    workerId: ["w", "host:1:abc", "x".repeat(128)],
    listen: [true, false],
    handleSignals: [true, false],
    runSweeper: [null, true, false],
    metricsPort: [null, 0, 9100, 65535],
    metricsBind: ["127.0.0.1", "::1", "0.0.0.0"],
  };
  const field = { listen: "listenEnabled", prefetch: null, queues: null };
  for (const [option, values] of Object.entries(good)) {
    for (const value of values) {
      const w = make({ [option]: value });
      if (option === "prefetch") assert.equal(w.capacity - w.concurrency, value);
      else if (option === "queues") assert.deepEqual(w.queues, [...value]);
      else assert.equal(w[field[option] ?? option], value, option);
    }
  }
  const d = make(Object.fromEntries(Object.keys(good).concat("logger").map((k) => [k, undefined])));
  assert.deepEqual([d.queues, d.queueSet, d.concurrency, d.capacity, d.lease, d.pollInterval, d.shutdownGrace, d.sweepInterval,
    d.flushInterval, d.flushBatch, d.listenEnabled, d.handleSignals, d.runSweeper, d.metricsPort, d.metricsBind],
  [null, null, 8, 8, 30000, 1000, 30000, 1000, 5, 500, true, true, null, null, "127.0.0.1"]);
  assert.match(d.workerId, /^.+:\d+:[0-9a-f]{6}$/);
  assert.equal(make({}, {}).queues, null);
  assert.equal(make({}, Object.create(null)).queues, null);
  // a kind such as "__proto__" is a kind like any other
  const proto = JSON.parse("{\"__proto__\": 1}");
  proto.__proto__ = noop; // (JSON.parse made it an own key)
  assert.equal(Object.keys(make({}, proto).handlers).join(), "__proto__");
});

test("a logger's methods are called on it, its own or its class's; the ones it lacks are the default's", () => {
  class Library {
    constructor() { this.lines = []; }
    info(m) { this.lines.push(`info ${m}`); }
    error(m) { this.lines.push(`error ${m}`); }
  }
  const lib = new Library();
  const w = make({ logger: lib });
  w.log.info("a");
  w.log.error("b");
  assert.deepEqual(lib.lines, ["info a", "error b"]);
  assert.equal(typeof w.log.warn, "function");
  const warned = [];
  make({ logger: { warn: (m) => warned.push(m) } }).log.warn("c");
  assert.deepEqual(warned, ["c"]);
  assert.equal(typeof make({ logger: console }).log.info, "function");
});

// -- the sweep ----------------------------------------------------------------------------

/** A seeded generator (mulberry32): the same seed, the same values. */
function generator(seed) {
  let a = seed >>> 0;
  const next = () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
  const int = (lo, hi) => lo + Math.floor(next() * (hi - lo + 1));
  const pick = (xs) => xs[int(0, xs.length - 1)];
  const CHARS = ["a", "b", "z", "0", "-", "_", ":", ".", " ", "é", "\u{1f600}", "\n", "\x1b", "\u202e", "\u200b", "\ud800",
    "\udc00", "\"", "\\"];
  const string = () => {
    const n = pick([0, 1, 2, 5, 20, 127, 128, 129, 140, int(0, 200)]);
    let s = "";
    for (let i = 0; i < n; i += 1) s += next() < 0.8 ? pick(CHARS.slice(0, 5)) : pick(CHARS);
    return s;
  };
  const number = () => pick([
    () => pick([0, -0, 1, -1, 0.5, 0.999, 1.5, 2, 5, 8, 9.999, 10, 500, 1000, 9999, 10000, 10001, 30000, 65535, 65536, DAY, DAY + 1,
      DAY - 0.5, 2 ** 31, 2 ** 53, 2 ** 53 + 2, NaN, Infinity, -Infinity, Number.MAX_VALUE, Number.MIN_VALUE, Number.EPSILON]),
    () => int(-10, 20000),
    () => (next() - 0.1) * 100000,
    () => 10 ** (next() * 20 - 10) * (next() < 0.9 ? 1 : -1),
  ])();
  const names = () => {
    const n = pick([0, 1, 1, 2, 3, 10001]);
    return Array.from({ length: n }, () => (next() < 0.95 ? (next() < 0.8 ? `q${int(0, 9)}` : string()) : pick([5, null, undefined])));
  };
  const other = () => pick([
    () => true, () => false, () => null, () => undefined, () => 8n, () => Symbol("s"), () => [], () => ({}),
    () => noop, () => new Date(0), () => new Map(), () => [number()], () => names(), () => new Set(names()),
    () => ({ info: noop }), () => ({ warn: pick([noop, 5, undefined]), error: pick([noop, "x", undefined]) }), () => ({ log: noop }),
    () => console, () => ({ [Symbol.iterator]: null }),
  ])();
  const value = (option) => {
    if (next() < 0.3) return pick([number, string, other])();
    switch (option) {
      case "queues": return next() < 0.2 ? pick([null, new Set(names()), string()]) : names();
      case "queueSet": case "workerId": return next() < 0.2 ? null : string();
      case "listen": case "handleSignals": case "runSweeper": return pick([true, false, null, 0, 1, "true"]);
      case "logger": return other();
      case "metricsBind": return next() < 0.7 ? pick(["127.0.0.1", "::1", "localhost"]) : string();
      default: return number();
    }
  };
  return { next, int, pick, value };
}

const wellFormed = (s) => Buffer.from(s, "utf8").toString("utf8") === s; // (a lone surrogate comes back as U+FFFD)
const nameOk = (v) => typeof v === "string" && [...v].length >= 1 && [...v].length <= 128 && wellFormed(v);
const num = (v, lo, hi, loOk) => typeof v === "number" && Number.isFinite(v) && (loOk ? v >= lo : v > lo) && v <= hi;
const int = (v, lo, hi) => Number.isSafeInteger(v) && v >= lo && v <= hi;
const iterable = (v) => v !== null && typeof v === "object" && typeof v[Symbol.iterator] === "function";

/** The rules, written once more from docs/node.md: true when `value` is a good `option`. */
const RULES = {
  queues: (v) => v === null || (iterable(v) && [...v].length >= 1 && [...v].length <= 10000 && [...v].every(nameOk)),
  queueSet: (v) => v === null || nameOk(v),
  concurrency: (v) => int(v, 1, Infinity),
  prefetch: (v) => int(v, 0, Infinity),
  lease: (v) => num(v, 1, DAY, true),
  pollInterval: (v) => num(v, 1, DAY, true),
  shutdownGrace: (v) => num(v, 0, DAY, true),
  runSweeper: (v) => v === null || typeof v === "boolean",
  sweepInterval: (v) => num(v, 10, DAY, true),
  flushInterval: (v) => num(v, 0, DAY, true),
  flushBatch: (v) => int(v, 1, 10000),
  workerId: (v) => v === null || nameOk(v),
  listen: (v) => typeof v === "boolean",
  handleSignals: (v) => typeof v === "boolean",
  logger: (v) => v !== null && (typeof v === "object" || typeof v === "function")
    && ["info", "warn", "error"].every((m) => v[m] === undefined || typeof v[m] === "function")
    && ["info", "warn", "error"].some((m) => typeof v[m] === "function"),
  metricsPort: (v) => v === null || int(v, 0, 65535),
  metricsBind: (v) => typeof v === "string" && v !== "",
};

test("a sweep of generated values: no bad value gets past the constructor, and nothing but a WorkerOptionError is thrown", () => {
  const seed = Number(process.env.PGFENCE_TEST_SEED ?? 20240611);
  const g = generator(seed);
  const options = Object.keys(RULES);
  let made = 0, refusedCount = 0;
  for (let i = 0; i < 4000; i += 1) {
    const given = {};
    for (let k = g.int(1, 4); k > 0; k -= 1) {
      const option = g.next() < 0.03 ? g.pick(["concurency", "poll_interval", "Lease", "queue"]) : g.pick(options);
      given[option] = g.value(option);
    }
    const bad = Object.keys(given).filter((o) => !(o in RULES) || (given[o] !== undefined && !RULES[o](given[o])));
    if (given.queues != null && given.queueSet != null) bad.push("queueSet");
    const where = `seed ${seed}, case ${i}: ${Object.keys(given).join(", ")}`;
    let worker = null, error = null;
    try {
      worker = make(given);
    } catch (err) {
      error = err;
    }
    if (error !== null) {
      assert.ok(error instanceof WorkerOptionError, `${where}: threw ${error && error.stack}`);
      const option = error.option.replace(/[[.].*$/, "");
      assert.ok(bad.includes(option), `${where}: refused ${error.option} (${error.message}), bad: ${bad}`);
      refusedCount += 1;
    } else {
      assert.deepEqual(bad, [], `${where}: made a worker with ${bad}`);
      for (const [option, value] of Object.entries(given)) {
        if (value === undefined || option === "logger") continue;
        const got = option === "listen" ? worker.listenEnabled : option === "prefetch" ? worker.capacity - worker.concurrency
          : option === "workerId" && value === null ? null : worker[option];
        if (option === "queues") assert.deepEqual(got, value === null ? null : [...value], where);
        else assert.ok(got === value, `${where}: ${option} ${String(got)} is not ${String(value)}`); // (=== : a prefetch of -0 is 0)
      }
      made += 1;
    }
  }
  assert.ok(made > 300 && refusedCount > 300, `both kinds of case were generated: ${made} made, ${refusedCount} refused`);
});

// -- nothing claimed ------------------------------------------------------------------------

test("a worker refused at construction made no query and claimed nothing", async () => {
  const queue = queueName("refused");
  const job = await client.enqueue("k", {}, { queue });
  const wclient = await Client.connect(DSN, { max: 2 });
  let queries = 0;
  const query = wclient.query.bind(wclient);
  wclient.query = (...args) => { queries += 1; return query(...args); };
  const cases = [["pollInterval", -1], ["flushBatch", 0], ["queues", queue], ["lease", 0], ["concurrency", true],
    ["shutdownGrace", NaN], ["workerId", ""], ["prefetch", NaN], ["listen", "no"], ["concurency", 4]];
  try {
    for (const [option, value] of cases) {
      let worker = null;
      try {
        worker = new Worker(wclient, { k: noop }, { queues: [queue], handleSignals: false, [option]: value });
      } catch (err) {
        assert.ok(err instanceof WorkerOptionError && err.option === option, String(err));
      }
      if (worker !== null) { // (were a bad worker made, it would run, and claim)
        const running = worker.run();
        await sleep(300);
        worker.stop();
        await running;
        assert.fail(`a worker was made with ${option}=${String(value)}`);
      }
    }
    assert.equal(queries, 0);
  } finally {
    await wclient.close();
  }
  const row = await client.job(job);
  assert.deepEqual([row.status, row.attempts], ["queued", 0]);
});
