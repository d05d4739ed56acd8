"use strict";
// A worker's own /metrics: what this process ran, how long it took, what it holds (the
// Node.js form of python_client/pgfence/worker_metrics.py: the same names, types, labels,
// buckets and label values, so one dashboard reads both).
//
// Off unless the worker is given `metricsPort`; then the Worker keeps a WorkerMetrics of
// its own (two workers in one process do not share one), served with node:http (no
// dependency) from start(), which run() calls before it claims anything, to stop(), when
// run() ends:
//
//   pgfence_worker_handler_duration_seconds{kind}  histogram: from taking an attempt to
//       its handler's outcome;
//   pgfence_worker_enqueue_to_start_seconds{kind}  histogram: from the job becoming
//       runnable (available_at) to its handler's start: claim's waited_s (the database's
//       clock, up to the claim) plus this process's monotonic clock from the claim's
//       answer to the start (no comparison of two hosts' clocks);
//   pgfence_worker_claim_to_start_seconds{kind}  histogram: from the claim's answer
//       reaching the worker to the handler's start (the wait for a free handler; prefetch);
//   pgfence_worker_jobs_total{kind, outcome}  counter: each attempt this worker ran, once,
//       when the database has answered for it (OUTCOMES);
//   pgfence_worker_in_flight{state}  gauge: the attempts it holds now, waiting for a
//       handler, running, or reporting (the handler returned, its outcome not yet
//       answered), read from the ledger when scraped.
//
// `kind` is a handler's kind as the worker was given it, written with printable()
// (text.js; as `pgfence metrics` and the Python worker write label values), then escaped
// for the exposition (backslash, double quote, newline). A job of a kind this worker has
// no handler for is counted under kind="", so that whoever can enqueue cannot add series;
// every series of the handlers' kinds exists, at 0, from the start. Kinds are looked up
// in a Map, never an object: a kind named "__proto__" or "constructor" is just unknown.
//
// The hot path: one Map look-up and an increment (a histogram: a scan of 18 bounds) per
// event; the text is only built when scraped. With metrics off the worker tests null and
// does nothing else.

const http = require("node:http");
const { performance } = require("node:perf_hooks");
const { printable } = require("./text");
const { checkPort, checkBind } = require("./worker_options");

/**
 * `outcome` of pgfence_worker_jobs_total, what became of an attempt as the database answered:
 * done (completed), retried (failed and queued again), failed (failed and dead-lettered;
 * a snooze past the snooze limit on the last attempt too), snoozed, released (given back
 * by Interrupted or the shutdown, and the database accepted it), rejected (its lease was no
 * longer current, PF001: its outcome or release refused, or a heartbeat refused / the job
 * handed out again before the outcome was reported; the result was discarded), unreported
 * (never answered: given up after a second signal, a failure refused twice for its value,
 * a report that threw; the lease expires and the reclaim rule applies).
 */
const OUTCOMES = Object.freeze(["done", "retried", "failed", "snoozed", "released", "rejected", "unreported"]);
/** States of pgfence_worker_in_flight. */
const STATES = Object.freeze(["waiting", "running", "reporting"]);
/** Histogram buckets (seconds), for handlers from a millisecond to an hour (as the Python worker's). */
const BUCKETS = Object.freeze([0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300,
  900, 3600]);
/** The exposition's content type (the text format 0.0.4, which every Prometheus reads). */
const CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8";
/** Longest a scrape's request may take to arrive (ms): a client that connects and sends nothing is let go. */
const REQUEST_TIMEOUT = 30000;

const HELP = {
  duration: "Seconds from taking an attempt to its handler's outcome, by kind.",
  queued: "Seconds from the job becoming runnable (available_at) to its handler's start, by kind.",
  wait: "Seconds from the claim's answer reaching this worker to the handler's start, by kind.",
  jobs: "Attempts this worker ran, by kind and by what the database made of their outcome.",
  inFlight: "Attempts this worker holds now: waiting for a handler, running, or reporting "
    + "(the handler returned, the database has not yet answered).",
};

/** The worker's clock (seconds, monotonic): performance.now() never goes back with the wall clock. */
const clock = () => performance.now() / 1000;

/** A number as the exposition writes it, the way prometheus_client does (1.0, 0.25, +Inf); Prometheus parses any float. */
function formatValue(v) {
  if (v === Infinity) return "+Inf";
  if (v === -Infinity) return "-Inf";
  if (Number.isNaN(v)) return "NaN";
  return Number.isInteger(v) && Math.abs(v) < 1e16 ? `${v}.0` : String(v);
}

/** A label value in the exposition: printable() (controls as \uXXXX), then backslash, newline and double quote escaped. */
function labelValue(value) {
  return printable(value).replace(/\\/g, "\\\\").replace(/\n/g, "\\n").replace(/"/g, "\\\"");
}

const LE = BUCKETS.map(formatValue).concat("+Inf");

class Histogram {
  constructor() {
    this.counts = new Array(BUCKETS.length + 1).fill(0); // per bucket (not cumulative); the last is +Inf
    this.sum = 0;
    this.count = 0;
  }

  observe(value) {
    let i = 0;
    while (i < BUCKETS.length && value > BUCKETS[i]) i += 1;
    this.counts[i] += 1;
    this.sum += value;
    this.count += 1;
  }
}

/** One kind's series (one label value): its three histograms and its counters by outcome. */
class KindSeries {
  constructor(label) {
    this.label = labelValue(label);
    this.duration = new Histogram();
    this.queued = new Histogram();
    this.wait = new Histogram();
    this.jobs = Object.fromEntries(OUTCOMES.map((o) => [o, 0]));
  }
}

/** The worker cannot serve /metrics: the address cannot be bound (the port is in use, say). Thrown by run() before anything is claimed; `hint`: what to do. */
class MetricsError extends Error {
  constructor(message, hint) {
    super(`${message} (${hint})`);
    this.name = "MetricsError";
    this.hint = hint;
  }
}

const NOT_FOUND = "not found: this worker serves its metrics at /metrics\n";
const NOT_ALLOWED = "method not allowed: use GET\n";

class WorkerMetrics {
  /**
   * The metrics of a worker whose attempts are in `ledger` and whose handlers are for
   * `kinds`, to be served on bind:port (0: any free port). `address` is {host, port}
   * while the server runs (the port actually bound), else null. A bad port or bind is a
   * WorkerOptionError naming metricsPort or metricsBind (worker_options.js, the one check).
   */
  constructor(ledger, kinds, { port, bind = "127.0.0.1" }) {
    this.port = checkPort(port);
    this.bind = checkBind(bind);
    this.address = null;
    this.ledger = ledger;
    ledger.clock = clock; // each claimed attempt is stamped (Entry.claimedAt): its wait begins
    // Series by label value, in the order first seen (two kinds that print alike share one).
    this._series = new Map();
    const series = (label) => {
      const key = printable(label);
      let s = this._series.get(key);
      if (s === undefined) { s = new KindSeries(label); this._series.set(key, s); }
      return s;
    };
    this._kinds = new Map();
    for (const kind of kinds) this._kinds.set(kind, series(kind));
    this._unknown = series("");
    this._server = null;
  }

  // -- the hot path ---------------------------------------------------------------------

  _of(kind) {
    return this._kinds.get(kind) ?? this._unknown;
  }

  /** A handler takes `entry` now: observe its wait; returns the start time. */
  starting(entry) {
    const now = clock();
    const s = this._of(entry.job.kind);
    const wait = Math.max(0, now - entry.claimedAt);
    s.wait.observe(wait);
    const waited = entry.job.waited_s;
    if (typeof waited === "number" && Number.isFinite(waited)) s.queued.observe(waited + wait);
    return now;
  }

  /** The handler of `entry`, started at `started`, has its outcome. */
  ran(entry, started) {
    this._of(entry.job.kind).duration.observe(Math.max(0, clock() - started));
  }

  /** The attempt of `entry` ended with `outcome` (one of OUTCOMES), as the database answered; counted once per attempt. */
  ended(entry, outcome) {
    if (entry.counted) return;
    entry.counted = true;
    this._of(entry.job.kind).jobs[outcome] += 1;
  }

  // -- the exposition -------------------------------------------------------------------

  /** The metrics as Prometheus text (format 0.0.4). */
  text() {
    const lines = [];
    const histogram = (name, help, pick) => {
      lines.push(`# HELP ${name} ${help}`, `# TYPE ${name} histogram`);
      for (const s of this._series.values()) {
        const h = pick(s);
        let cumulative = 0;
        for (let i = 0; i < LE.length; i += 1) {
          cumulative += h.counts[i];
          lines.push(`${name}_bucket{kind="${s.label}",le="${LE[i]}"} ${formatValue(cumulative)}`);
        }
        lines.push(`${name}_count{kind="${s.label}"} ${formatValue(h.count)}`,
          `${name}_sum{kind="${s.label}"} ${formatValue(h.sum)}`);
      }
    };
    histogram("pgfence_worker_handler_duration_seconds", HELP.duration, (s) => s.duration);
    histogram("pgfence_worker_enqueue_to_start_seconds", HELP.queued, (s) => s.queued);
    histogram("pgfence_worker_claim_to_start_seconds", HELP.wait, (s) => s.wait);
    lines.push(`# HELP pgfence_worker_jobs_total ${HELP.jobs}`, "# TYPE pgfence_worker_jobs_total counter");
    for (const s of this._series.values()) {
      for (const o of OUTCOMES) lines.push(`pgfence_worker_jobs_total{kind="${s.label}",outcome="${o}"} ${formatValue(s.jobs[o])}`);
    }
    const { held, running, finishing } = this.ledger;
    const waiting = Math.max(0, held.size - running.size - finishing.size);
    const states = { waiting, running: running.size, reporting: finishing.size };
    lines.push(`# HELP pgfence_worker_in_flight ${HELP.inFlight}`, "# TYPE pgfence_worker_in_flight gauge");
    for (const st of STATES) lines.push(`pgfence_worker_in_flight{state="${st}"} ${formatValue(states[st])}`);
    return `${lines.join("\n")}\n`;
  }

  // -- the server -----------------------------------------------------------------------

  /** Serve GET /metrics on bind:port; rejects with a MetricsError naming the address when it cannot be bound. */
  async start() {
    if (this._server !== null) return;
    const where = this.bind.includes(":") ? `[${this.bind}]:${this.port}` : `${this.bind}:${this.port}`;
    const server = http.createServer((req, res) => this._serve(req, res));
    server.requestTimeout = REQUEST_TIMEOUT;
    server.headersTimeout = REQUEST_TIMEOUT;
    try {
      await new Promise((resolve, reject) => {
        server.once("error", reject);
        server.listen({ port: this.port, host: this.bind }, () => { server.off("error", reject); resolve(); });
      });
    } catch (err) {
      server.close();
      throw bindError(err, where, this.bind);
    }
    server.on("error", () => {}); // (after listening: a failed connection is the client's affair)
    const a = server.address();
    this.address = { host: a.address, port: a.port };
    this._server = server;
  }

  /** Stop serving and close the socket and its connections (the port is free again); nothing when not serving. */
  async stop() {
    const server = this._server;
    if (server === null) return;
    this._server = null;
    this.address = null;
    await new Promise((resolve) => {
      server.close(() => resolve());
      server.closeAllConnections(); // (idle keep-alive connections would hold close() open)
    });
  }

  _serve(req, res) {
    const path = (req.url || "").split("?", 1)[0];
    let status, body;
    const headers = { "Content-Type": "text/plain; charset=utf-8", "X-Content-Type-Options": "nosniff" };
    if (path !== "/metrics") {
      [status, body] = [404, NOT_FOUND];
    } else if (req.method !== "GET") {
      [status, body] = [405, NOT_ALLOWED];
      headers.Allow = "GET";
    } else {
      try {
        [status, body] = [200, this.text()];
        headers["Content-Type"] = CONTENT_TYPE;
      } catch (_) {
        [status, body] = [500, "the metrics could not be written\n"];
      }
    }
    const bytes = Buffer.from(body, "utf8");
    headers["Content-Length"] = String(bytes.length);
    res.writeHead(status, headers);
    res.end(bytes);
    req.resume(); // (a body sent with the request is read and dropped)
  }
}

/** The MetricsError for a failed listen(). */
function bindError(err, where, host) {
  const code = err && err.code;
  if (code === "EADDRINUSE") {
    return new MetricsError(`cannot serve the worker's metrics on ${where}: the address is already in use `
      + "(another process listens on that port)", "pick another metricsPort, or 0 for any free port");
  }
  if (code === "EADDRNOTAVAIL" || code === "ENOTFOUND" || code === "EAI_AGAIN" || code === "EAI_FAIL") {
    return new MetricsError(`cannot serve the worker's metrics on ${where}: ${JSON.stringify(host)} is not an address of `
      + `this host (${code})`, "pass metricsBind an IP address of this host, e.g. 127.0.0.1");
  }
  return new MetricsError(`cannot serve the worker's metrics on ${where}: ${(err && err.message) || String(err)}`,
    "check metricsBind and metricsPort");
}

module.exports = { WorkerMetrics, MetricsError, OUTCOMES, STATES, BUCKETS, CONTENT_TYPE, labelValue,
  formatValue };
