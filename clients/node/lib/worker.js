"use strict";
// The worker runtime: claim in batches, run handlers concurrently, report in batches.
// The protocol is docs/worker-protocol.md; this is the Node.js form of the Python
// Worker (pgfence/worker.py), in named parts around one in-flight ledger (ledger.js):
//
//   claimer     (claimLoop here) claims up to the free capacity with a fresh request id
//               each time; after a claim whose reply was lost, asks claim_results first
//   handlers    up to `concurrency` at once (handlers.js: what a return or throw becomes)
//   reporter    (reporter.js) reports outcomes with complete_many / fail_many / snooze_many
//   heartbeats  (heartbeats.js) heartbeat_many for every held lease every lease / 3, and
//               just after a lease capped by the job's run timeout ends
//   listener    (listen here) LISTEN pgfence_enqueue, wakes the claimer on its queues' tags
//   sweeper     (sweeper.js) CALL pgfence.sweep() while no pg_cron sweeper runs
//   stopping    stop() or SIGTERM/SIGINT: stop claiming, give unstarted jobs back,
//               wait shutdownGrace for running handlers, give the rest back; a second
//               signal hurries it
//   metrics     (metrics.js) given metricsPort, a /metrics server from run()'s start
//               (before anything is claimed) until it ends
//
// Every decision (retry or dead letter, backoff, fencing, reclaim) is the database's.

const crypto = require("node:crypto");
const os = require("node:os");
const pg = require("pg");
const { Ledger } = require("./ledger");
const { Reporter } = require("./reporter");
const { Heartbeats } = require("./heartbeats");
const { runHandler } = require("./handlers");
const { retryable, notSent } = require("./retries");
const { runSweeper } = require("./sweeper");
const { WorkerMetrics } = require("./metrics");
const { checkWorkerOptions } = require("./worker_options");
const { escapedLogger } = require("./text");

/**
 * After a claim that a wake-up prompted and that found less than it asked for, the next waits at
 * least this long (ms): a burst of wake-ups costs one claim per CLAIM_HOLDOFF (and one per poll). The
 * first wake-up after a quiet moment, or after a poll's claim that found nothing, is never held up
 * (as pgfence.claimer.holdoff in the Python worker).
 */
const CLAIM_HOLDOFF = 5;
/** Notifications within one second beyond which the listener stops listening (any role may NOTIFY), and for how long (ms). */
const NOTIFY_FLOOD = 2000;
const NOTIFY_FLOOD_PAUSE = 5000;
// The wake-up tag of a change to stored set S (pgfence._queue_set_tag) is that of the name
// SET_CHANGE + S: a control character, which no queue name may hold.
const SET_CHANGE = "\x01";
/** The shortest time (ms) between two reads of a worker's stored set after its tag arrived (anyone may send it). */
const SET_REREAD = 1000;

/** A wake-up that many may ring and one awaits, with a timeout: wait resolves true when rung, false when the time ran out. */
class Bell {
  constructor() { this._rung = false; this._resolve = null; }
  ring() {
    this._rung = true;
    if (this._resolve) { const r = this._resolve; this._resolve = null; r(); }
  }
  clear() { this._rung = false; }
  wait(ms) {
    if (this._rung) return Promise.resolve(true);
    return new Promise((resolve) => {
      const t = setTimeout(() => { this._resolve = null; resolve(false); }, ms);
      this._resolve = () => { clearTimeout(t); resolve(true); };
    });
  }
}

/** How much longer to wait before the next claim (ms), the wait after the last one having lasted waited ms (see CLAIM_HOLDOFF). */
function holdoff(drained, afterWake, waited) {
  return drained && afterWake ? Math.max(0, CLAIM_HOLDOFF - waited) : 0;
}

const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

class Worker {
  /**
   * @param {import("./client").Client} client a Client with its own pool (Client.connect)
   * @param {Record<string, (job: any) => any>} handlers {kind: async (job) => JSON-able result}
   * @param {object} [options] see docs/node.md (durations in milliseconds):
   *   queues [all] or queueSet [null: a set stored with define_queue_set], concurrency [8], prefetch [0], lease [30000], pollInterval [1000],
   *   shutdownGrace [30000], flushInterval [5], flushBatch [500], workerId [host:pid:random],
   *   listen [true], runSweeper [null: while sweeper_health() says none runs], sweepInterval [1000],
   *   handleSignals [true], logger [warnings and errors to the console],
   *   metricsPort [null: no metrics; 0: any free port] and metricsBind ["127.0.0.1"]: serve this
   *   worker's own Prometheus metrics (metrics.js) at http://metricsBind:metricsPort/metrics
   *   while run() runs (a port in use: run() rejects with a MetricsError before claiming anything).
   *   Every option is checked here, first (worker_options.js): a WorkerOptionError names a bad
   *   one, or an unknown name, before anything connects or claims.
   */
  constructor(client, handlers, options = {}) {
    const o = checkWorkerOptions(handlers, options); // (WorkerOptionError: nothing connected or claimed)
    if (!client || !client.pool) throw new TypeError("pgfence: Worker needs a Client with its own pool: await Client.connect(dsn)");
    this.client = client;
    this.handlers = o.handlers;
    this.queues = o.queues;
    this.queueSet = o.queueSet;
    this.concurrency = o.concurrency;
    this.capacity = o.concurrency + o.prefetch;
    this.lease = o.lease;
    this.pollInterval = o.pollInterval;
    this.shutdownGrace = o.shutdownGrace;
    this.flushInterval = o.flushInterval;
    this.flushBatch = o.flushBatch;
    this.listenEnabled = o.listen;
    this.runSweeper = o.runSweeper;
    this.sweepInterval = o.sweepInterval;
    this.handleSignals = o.handleSignals;
    this.log = escapedLogger(o.logger); // (the database's strings in its messages written safely; a throwing logger ignored)
    this.workerId = o.workerId ?? `${os.hostname()}:${process.pid}:${crypto.randomBytes(3).toString("hex")}`;
    this.counters = { claimed: 0, completed: 0, failed: 0, lease_lost: 0, released: 0, snoozed: 0 };
    this.stopping = false;
    this.hurry = false;
    this.done = false;
    this.signals = 0;
    this.ledger = new Ledger(() => this.stopping);
    this.metricsPort = o.metricsPort;
    this.metricsBind = o.metricsBind;
    /** The worker's metrics (metrics.js), or null when off (metricsPort not given): the only test made when off. */
    this.metrics = this.metricsPort === null ? null
      : new WorkerMetrics(this.ledger, Object.keys(this.handlers), { port: this.metricsPort, bind: this.metricsBind });
    this._wake = new Bell();     // the claimer: a slot freed, a NOTIFY, a stop
    this._stopped = new Bell();  // a stop only: the claimer's backoff after an error (a NOTIFY flood must not cut it short)
    this._outcome = new Bell();  // the flusher: an outcome is waiting
    this._handlerRuns = new Set();
    this.unanswered = null;      // request id of a claim whose reply was lost
    this.unansweredUntil = 0;
  }

  /** Begin a graceful shutdown (what SIGTERM/SIGINT do). */
  stop() {
    if (!this.stopping) {
      this.stopping = true;
      for (const e of this.ledger.held.values()) if (!e.controller.signal.aborted) e.controller.abort("shutting down");
    }
    this._wake.ring();
    this._stopped.ring();
  }

  /** {host, port} of the metrics server while run() serves it (the port bound, when metricsPort is 0), else null. */
  get metricsAddress() {
    return this.metrics === null || this.metrics.address === null ? null : { ...this.metrics.address };
  }

  /**
   * Run until stop() (or SIGTERM/SIGINT); resolves when every outcome is reported and every job given back.
   * With metricsPort, serves /metrics from before the first claim (a MetricsError, and nothing claimed, when
   * the port is in use) until it ends.
   */
  async run() {
    const metrics = this.metrics;
    if (metrics === null) return this._run();
    await metrics.start(); // before anything is claimed: a port in use fails here, with nothing to undo
    const { host, port } = metrics.address;
    this.log.info(`worker ${this.workerId}: serving its metrics at http://${host.includes(":") ? `[${host}]` : host}:${port}/metrics`);
    try {
      return await this._run();
    } finally {
      await metrics.stop();
    }
  }

  async _run() {
    this.limits = await this.client.limits();
    this.reporter = new Reporter(this.client, this.ledger, { workerId: this.workerId, counters: this.counters,
      hurried: () => this.hurry, limits: this.limits, log: this.log, metrics: this.metrics });
    this.heartbeats = new Heartbeats(this.client, this.ledger, { workerId: this.workerId, lease: this.lease,
      counters: this.counters, limits: this.limits, log: this.log });
    const onSignal = (sig) => this._onSignal(sig);
    if (this.handleSignals) { process.on("SIGTERM", onSignal); process.on("SIGINT", onSignal); }
    let beaten = false; // the heartbeats go on until every outcome is reported
    const beatStop = new Bell();
    const heartbeat = this.heartbeats.run(() => beaten, (ms) => beatStop.wait(ms)).catch((err) => {
      this.log.error(`worker ${this.workerId}: the heartbeats stopped (${err && err.message})`);
    });
    const flusher = this._flushLoop();
    const listener = this.listenEnabled ? this._listen() : Promise.resolve();
    const finished = new Bell();
    this._finished = finished;
    const sweeper = this.runSweeper === false ? Promise.resolve() : runSweeper(this.client, this.runSweeper, {
      sweepInterval: this.sweepInterval, workerId: this.workerId, done: () => this.done,
      wait: (ms) => finished.wait(ms), log: this.log }).catch(() => {});
    this.log.info(`worker ${this.workerId} started: queues=${this.queues ? this.queues.join(",") : this.queueSet !== null ? `set ${this.queueSet}` : "all"} concurrency=${this.concurrency} lease=${this.lease}ms`);
    let failure = null;
    try {
      await this._claimLoop();
    } catch (err) {
      failure = err;
      this.log.error(`worker ${this.workerId}: claiming failed (${err.message}); shutting down`);
      this.stop();
    }
    try {
      await this._shutdown();
    } finally {
      this.done = true;
      this._outcome.ring();
      await flusher;
      beaten = true;
      beatStop.ring();
      await heartbeat;
      if (this._listenClient) this._listenClient.end().catch(() => {});
      await listener;
      finished.ring();
      await sweeper;
      if (this.handleSignals) { process.off("SIGTERM", onSignal); process.off("SIGINT", onSignal); }
      this.log.info(`worker ${this.workerId} stopped: ${JSON.stringify(this.counters)}`);
    }
    if (failure) throw failure;
  }

  // -- the claimer --------------------------------------------------------------------

  async _claimLoop() {
    let backoff = 100;
    const threshold = Math.max(1, Math.floor(this.capacity / 2));
    let afterWake = false; // the next claim follows a wake-up (see holdoff)
    while (!this.stopping) {
      this._wake.clear();
      if (this.unanswered !== null && Date.now() > this.unansweredUntil) {
        this.log.warn(`worker ${this.workerId}: gave up looking up the claim whose reply was lost (request ${this.unanswered}); its jobs, if any, are reclaimed as their leases expire`);
        this.unanswered = null;
      }
      if (this.unanswered !== null) {
        try {
          await this.recoverUnanswered();
          backoff = 100;
        } catch (err) {
          if (!retryable(err)) throw err;
          this.log.warn(`worker ${this.workerId}: looking up a claim whose reply was lost failed (${err.message}); retrying in ${backoff} ms`);
          await this._stopped.wait(backoff);
          backoff = Math.min(backoff * 2, 5000);
        }
        continue;
      }
      const free = this.ledger.free(this.capacity);
      let drained = false;
      if (free > 0 && (free >= threshold || this.ledger.ready.length === 0)) {
        const requestId = crypto.randomUUID();
        const want = Math.min(free, this.limits.max_jobs);
        let jobs;
        try {
          const how = { lease: this.lease, max_jobs: want, request_id: requestId };
          if (this.queueSet !== null) how.queue_set = this.queueSet;
          jobs = await this.client.claim(this.workerId, this.queues, how);
          backoff = 100;
        } catch (err) {
          if (!retryable(err)) throw err;
          // It may have committed without its reply: ask claim_results before claiming again
          // (not when no connection was had: the claim never reached the database).
          if (!notSent(err)) {
            this.unanswered = requestId;
            this.unansweredUntil = Date.now() + this.lease;
          }
          this.log.warn(`worker ${this.workerId}: claim failed (${err.message}); retrying in ${backoff} ms`);
          await this._stopped.wait(backoff);
          backoff = Math.min(backoff * 2, 5000);
          continue;
        }
        this.dispatch(jobs);
        if (jobs.length === want) continue;
        drained = true;
      }
      const from = Date.now();
      const woken = await this._wake.wait(drained || free <= 0 ? this.pollInterval * (0.5 + Math.random() / 2) : 50);
      const rest = holdoff(drained, afterWake, Date.now() - from);
      if (rest > 0 && !this.stopping) await sleep(rest);
      afterWake = woken;
    }
  }

  /** The jobs a claim whose reply was lost took (claim_results renews their leases): run them. */
  async recoverUnanswered() {
    const requestId = this.unanswered;
    const jobs = await this.client.claim_results(this.workerId, [requestId], { lease: this.lease });
    this.unanswered = null;
    if (jobs.length) this.log.warn(`worker ${this.workerId}: the claim whose reply was lost had taken ${jobs.length} jobs (${jobs.map((j) => j.id).slice(0, 20)})`);
    this.dispatch(jobs);
  }

  /** Enter claimed jobs in the ledger and start handlers. */
  dispatch(jobs) {
    if (!jobs.length) return;
    const [, displaced] = this.ledger.admit(jobs);
    for (const [old, neu] of displaced) {
      this.counters.lease_lost += 1;
      this.log.warn(`job ${old.job.id} attempt=${old.job.attempts}: lease lost (claimed again as attempt ${neu.job.attempts})`);
    }
    this.counters.claimed += jobs.length;
    for (const j of jobs) this.log.info(`claimed job ${j.id} kind=${JSON.stringify(j.kind)} attempt=${j.attempts}/${j.max_attempts}`);
    this._pump();
  }

  // -- the handlers -------------------------------------------------------------------

  _pump() {
    const metrics = this.metrics;
    while (this.ledger.running.size < this.concurrency) {
      const entry = this.ledger.take();
      if (entry === null) return;
      const run = (async () => {
        let result;
        if (metrics === null) {
          result = await runHandler(entry, this.handlers, this.workerId, this.limits);
        } else {
          const started = metrics.starting(entry);
          result = await runHandler(entry, this.handlers, this.workerId, this.limits);
          metrics.ran(entry, started);
        }
        this.ledger.finish(result);
        this._outcome.ring();
        this._wake.ring();
      })().catch((err) => {
        this.log.error(`job ${entry.job.id}: the worker failed around its handler (${err && err.message}); its lease will expire`);
      }).finally(() => { this._handlerRuns.delete(run); this._pump(); });
      this._handlerRuns.add(run);
    }
  }

  // -- the reporter's loop ------------------------------------------------------------

  async _flushLoop() {
    const results = this.ledger.results;
    for (;;) {
      if (!results.length) {
        if (this.done) return;
        this._outcome.clear();
        await this._outcome.wait(200);
        continue;
      }
      if (results.length < this.flushBatch && !this.stopping) await sleep(this.flushInterval);
      while (results.length) await this.reporter.report(this.reporter.takeBatch());
    }
  }

  // -- the heartbeats (heartbeats.js) --------------------------------------------------

  /** One heartbeat round now (renew every held lease). */
  async beat() {
    await this.heartbeats.beat();
  }

  // -- the listener -------------------------------------------------------------------

  async _listen() {
    let backoff = 500;
    while (!this.done && !this.stopping) {
      const conn = new pg.Client(this.client.pool.options);
      conn.on("error", () => {});
      this._listenClient = conn;
      try {
        await conn.connect();
        // The tags to wake on; a worker on a stored set reads them again when the set's own
        // tag arrives (define_queue_set, drop_queue_set: the tag of SET_CHANGE + the set's name).
        const readTags = async (warn) => {
          let names = this.queues;
          if (this.queueSet !== null) {
            const set = (await this.client.queue_sets()).find((s) => s.queue_set === this.queueSet);
            if (set) names = set.names;
            else if (warn) this.log.warn(`worker ${this.workerId}: queue set ${JSON.stringify(this.queueSet)} is not defined; every notification wakes it`);
          }
          return names ? new Set((await this.client.wakeup_tags(names)).map((r) => r.tag)) : null;
        };
        // LISTEN first, so that a set defined again while its tags are read is heard (read
        // once more below: what arrives before the handler is set is only noted).
        let early = false;
        const noteEarly = () => { early = true; };
        conn.on("notification", noteEarly);
        await conn.query("LISTEN pgfence_enqueue");
        let tags = await readTags(true);
        const setTag = this.queueSet === null ? null
          : (await this.client.wakeup_tags([SET_CHANGE + this.queueSet]))[0]?.tag ?? null;
        // The set read again after its tag arrived: one read at a time, at most one per
        // SET_REREAD ms; the tags that arrive meanwhile make one more read.
        let reading = false, again = false, nextRead = 0;
        const reread = () => {
          if (reading) { again = true; return; }
          reading = true;
          const run = async () => {
            do {
              again = false;
              const wait = nextRead - Date.now();
              if (wait > 0) await sleep(wait);
              if (this.done || this.stopping) break;
              try {
                const now = await readTags(tags !== null);
                if (now === null ? tags !== null : tags === null || now.size !== tags.size || [...now].some((t) => !tags.has(t))) {
                  this.log.info(`worker ${this.workerId}: queue set ${JSON.stringify(this.queueSet)} changed; waking on ${now === null ? "every notification" : `the tags of ${now.size} queues`}`);
                }
                tags = now;
              } catch (err) {
                this.log.warn(`worker ${this.workerId}: reading queue set ${JSON.stringify(this.queueSet)} again failed (${err.message}); waking on every notification until it is read`);
                tags = null;
              }
              nextRead = Date.now() + SET_REREAD;
              this._wake.ring();
            } while (again);
            reading = false;
          };
          run();
        };
        let second = 0, count = 0, paused = false;
        conn.on("notification", (n) => {
          const now = Math.floor(Date.now() / 1000);
          if (now !== second) { second = now; count = 0; }
          count += 1;
          if (count > NOTIFY_FLOOD && !paused) {
            // A flood (anyone may NOTIFY this channel): stop listening for a while and poll.
            paused = true;
            this.log.warn(`worker ${this.workerId}: more than ${NOTIFY_FLOOD} notifications in a second; not listening for ${NOTIFY_FLOOD_PAUSE} ms`);
            conn.query("UNLISTEN pgfence_enqueue").catch(() => {});
            setTimeout(() => {
              paused = false;
              // (a change to the set during the pause was not heard: read it again)
              if (!this.stopping) conn.query("LISTEN pgfence_enqueue").then(() => (setTag !== null ? reread() : this._wake.ring()), () => {});
            }, NOTIFY_FLOOD_PAUSE).unref();
          }
          if (paused) return;
          if (setTag !== null && n.payload === setTag) reread();
          else if (tags === null || tags.has(n.payload)) this._wake.ring();
        });
        conn.removeListener("notification", noteEarly);
        if (early && setTag !== null) reread();
        this._wake.ring(); // whatever was enqueued while nobody listened
        backoff = 500;
        await new Promise((resolve) => { conn.once("end", resolve); conn.once("error", resolve); });
      } catch (err) {
        if (this.done || this.stopping) return;
        this.log.warn(`worker ${this.workerId}: listener failed (${err.message}); polling meanwhile`);
      } finally {
        conn.end().catch(() => {});
      }
      if (!this.done && !this.stopping) await sleep(backoff);
      backoff = Math.min(backoff * 2, 10000);
    }
  }

  // -- stopping -----------------------------------------------------------------------

  _onSignal(sig) {
    this.signals += 1;
    if (this.signals > 1) {
      this.log.warn(`worker ${this.workerId}: second signal, giving running jobs back now`);
      this.hurry = true;
      this.shutdownGrace = 0;
    } else {
      this.log.info(`worker ${this.workerId}: ${sig} received, shutting down`);
    }
    this.stop();
    if (this._graceWake) this._graceWake();
  }

  async _shutdown() {
    this.log.info(`worker ${this.workerId} stopping: releasing unstarted jobs, waiting up to ${this.shutdownGrace} ms for running handlers`);
    // 1. Jobs claimed but never started go back uncounted, with those of a lost claim reply.
    if (this.unanswered !== null && !this.hurry) {
      try { await this.recoverUnanswered(); } catch (err) {
        this.log.warn(`worker ${this.workerId}: could not look up a claim whose reply was lost (${err.message})`);
      }
    }
    this.unanswered = null;
    await this.reporter.release(this.ledger.unstarted(), false);
    // 2. Let running handlers finish within the grace period.
    const until = Date.now() + this.shutdownGrace;
    while (this.ledger.running.size && Date.now() < until) {
      await new Promise((resolve) => {
        const t = setTimeout(resolve, Math.min(20, Math.max(0, until - Date.now())));
        this._graceWake = () => { clearTimeout(t); resolve(); };
      });
    }
    // 3. Give back what still runs; its late result is void.
    await this.reporter.release(this.ledger.giveBackRunning(), true);
    // 4. Report every outcome already produced before leaving.
    while (this.ledger.unreported()) {
      this._outcome.ring();
      await sleep(10);
      if (this.hurry && !this.ledger.results.length) break;
    }
  }
}

module.exports = { Worker, Bell, holdoff, CLAIM_HOLDOFF };
