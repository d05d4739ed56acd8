"use strict";
// The reporter: who decides when to report an outcome, and what the database's answer
// means (a port of pgfence/reporter.py).
//
// Handlers leave outcomes in the ledger's `results`. The flusher takes them in batches
// (`flushBatch` waiting, or the oldest waited `flushInterval` ms, or the worker is
// stopping) and reports each batch with one complete_many, one fail_many and one
// snooze_many call (an Interrupted handler's job with a fenced release_many). A job stays held (and
// heartbeated) until the database accepted or refused its outcome. A lost attempt's
// outcome is void and never reported. Connection failures are retried (the calls are
// idempotent for a token) until a second signal says to give up; a batch refused for a
// value (class 22) is retried one outcome at a time to find the one refused.
//
// With the worker's metrics (metrics.js), each attempt that ran is counted once, by what
// the database answered for it (done, retried, failed, snoozed, released, rejected), or
// as unreported when no answer came.

const { retryable, dataError } = require("./retries");
const { storableText } = require("./handlers");
const { RawJson } = require("./client");

const MAX_REPORT_BATCH = 1000;

class GiveUp extends Error {}

const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

class Reporter {
  constructor(client, ledger, { workerId, counters, hurried, limits, log, metrics = null }) {
    this.client = client;
    this.ledger = ledger;
    this.workerId = workerId;
    this.counters = counters;
    this.hurried = hurried;
    this.maxBatch = Math.min(MAX_REPORT_BATCH, limits.batch);
    this.log = log;
    this.metrics = metrics;
  }

  /** Tell the metrics (if any) that these results' attempts ended with `outcome`. */
  _ended(results, outcome) {
    const metrics = this.metrics;
    if (metrics !== null) for (const r of results) metrics.ended(r.entry, outcome);
  }

  /** Pop the next batch: at most maxBatch, in order, one outcome per job id. */
  takeBatch() {
    const results = this.ledger.results;
    const batch = [];
    const ids = new Set();
    while (results.length && batch.length < this.maxBatch && !ids.has(results[0].entry.job.id)) {
      const r = results.shift();
      ids.add(r.entry.job.id);
      batch.push(r);
    }
    return batch;
  }

  /** Report one batch; never throws (a batch that cannot be reported is left to its leases). */
  async report(batch) {
    try {
      await this._report(batch);
    } catch (err) {
      this.log.error(`worker ${this.workerId}: reporting ${batch.length} outcomes failed (${err.message}); their `
        + "jobs are dropped from this worker and their leases will expire");
      this._ended(batch, "unreported"); // (those already answered stay counted as they were)
      this.ledger.settle(batch.map((r) => r.entry));
    }
  }

  async _report(batch) {
    const done = [], failed = [], interrupted = [], snoozed = [], voided = [];
    for (const r of batch) {
      if (r.entry.lost) voided.push(r);
      else if (r.interrupted) interrupted.push(r);
      else if (r.ok) done.push(r);
      else if (r.snooze !== null && r.snooze !== undefined) snoozed.push(r);
      else failed.push(r);
    }
    for (const r of voided) {
      const j = r.entry.job;
      if (r.entry.givenBack) this.log.info(`job ${j.id} attempt=${j.attempts}: returned after the shutdown gave it back, result discarded`);
      else this.log.warn(`job ${j.id} kind=${JSON.stringify(j.kind)} attempt=${j.attempts}: lease lost, result discarded`);
    }
    const metrics = this.metrics;
    if (metrics !== null) {
      // (an attempt the shutdown gave back while it ran is counted here, once its handler
      // has returned: released, unless the database refused the release)
      for (const r of voided) metrics.ended(r.entry, r.entry.givenBack ? "released" : "rejected");
    }
    this.ledger.settle(voided.map((r) => r.entry));
    if (interrupted.length) await this.release(interrupted.map((r) => r.entry), true, true);
    if (done.length) await this.complete(done);
    if (failed.length) await this.fail(failed);
    if (snoozed.length) await this.snooze(snoozed);
  }

  async retrying(call) {
    let backoff = 50;
    for (;;) {
      try {
        return await call();
      } catch (err) {
        if (!retryable(err)) throw err;
        if (this.hurried()) throw new GiveUp();
        this.log.warn(`worker ${this.workerId}: reporting outcomes failed (${err.message}); retrying in ${backoff} ms`);
        await sleep(backoff);
        backoff = Math.min(backoff * 2, 5000);
      }
    }
  }

  /**
   * Give attempts back with fenced release_many calls (`started`: the attempt counts), and
   * settle them. `ran`: their handlers have returned (an Interrupted), so the metrics count
   * how each ended.
   */
  async release(entries, started, ran = false) {
    const metrics = ran ? this.metrics : null;
    for (let i = 0; i < entries.length; i += this.maxBatch) {
      const chunk = entries.slice(i, i + this.maxBatch);
      let outcomes;
      try {
        outcomes = await this.retrying(() => this.client.release_many(
          chunk.map((e) => e.job.id), chunk.map((e) => e.job.attempt_token), { started }));
      } catch (err) {
        this.log.error(`worker ${this.workerId}: gave up releasing ${chunk.length} jobs (${err.message || "second signal"}); their leases will expire`);
        if (metrics !== null) for (const entry of chunk) metrics.ended(entry, "unreported");
        this.ledger.settle(chunk);
        continue;
      }
      chunk.forEach((entry, k) => {
        const o = outcomes[k];
        if (o.accepted) {
          this.counters.released += 1;
          this.log.info(`released job ${entry.job.id} attempt=${entry.job.attempts} (${started ? "started" : "not started"}) -> ${o.status}`);
        } else {
          this.log.warn(`job ${entry.job.id}: release refused: ${o.detail}`);
          entry.givenBack = false;
        }
        if (metrics !== null) metrics.ended(entry, o.accepted ? "released" : "rejected");
      });
      this.ledger.settle(chunk);
    }
  }

  async complete(done) {
    const outcomes = await this._send(done, (rs) => this.complete(rs), (r, err) => this._resultRefused(r, err),
      () => this.client.complete_many(done.map((r) => r.entry.job.id), done.map((r) => r.entry.job.attempt_token),
        done.every((r) => r.value === null) ? undefined : done.map((r) => (r.value === null ? null : new RawJson(r.value)))));
    if (outcomes) this._answers(done, outcomes, "completed");
  }

  async fail(failed) {
    const outcomes = await this._send(failed, (rs) => this.fail(rs), (r, err) => this._failureRefused(r, err),
      () => this.client.fail_many(failed.map((r) => r.entry.job.id), failed.map((r) => r.entry.job.attempt_token),
        failed.map((r) => r.value || ""), {
          retry_ins: failed.some((r) => r.retryIn !== null) ? failed.map((r) => r.retryIn) : undefined,
          permanents: failed.map((r) => r.permanent),
        }));
    if (outcomes) this._answers(failed, outcomes, "failed");
  }

  async snooze(snoozed) {
    const outcomes = await this._send(snoozed, (rs) => this.snooze(rs), (r, err) => this._snoozeRefused(r, err),
      () => this.client.snooze_many(snoozed.map((r) => r.entry.job.id), snoozed.map((r) => r.entry.job.attempt_token),
        snoozed.map((r) => r.snooze)));
    if (outcomes) this._answers(snoozed, outcomes, "snoozed");
  }

  async _send(results, each, refusedOne, call) {
    try {
      return await this.retrying(call);
    } catch (err) {
      if (err instanceof GiveUp) {
        this.log.error(`worker ${this.workerId}: gave up reporting ${results.length} outcomes after a second signal; their leases will expire`);
        this._ended(results, "unreported");
        this.ledger.settle(results.map((r) => r.entry));
        return null;
      }
      if (!dataError(err)) throw err;
      if (results.length > 1) for (const r of results) await each([r]);
      else await refusedOne(results[0], err);
      return null;
    }
  }

  async _resultRefused(r, err) {
    const j = r.entry.job;
    this.log.error(`job ${j.id} attempt=${j.attempts}: the database refused its result (${err.message}); failing the attempt`);
    await this.fail([{ ...r, ok: false, permanent: true, retryIn: null,
      value: storableText(`ResultNotStorable: the database refused the handler's result: ${err.name}: ${err.message}`) }]);
  }

  async _failureRefused(r, err) {
    if (r.value && r.value.startsWith("FailureNotStorable:")) {
      this.log.error(`job ${r.entry.job.id}: the database refused its failure (${err.message}); its lease will expire`);
      this._ended([r], "unreported");
      this.ledger.settle([r.entry]);
      return;
    }
    await this.fail([{ ...r, retryIn: null,
      value: storableText(`FailureNotStorable: the database refused this failure (${err.name}: ${err.message})`) }]);
  }

  /** The database refused a snooze for its value (not its token): fail the attempt instead, with the default backoff. */
  async _snoozeRefused(r, err) {
    const j = r.entry.job;
    this.log.error(`job ${j.id} attempt=${j.attempts}: the database refused its snooze (${err.message}); failing the attempt`);
    await this.fail([{ ...r, ok: false, snooze: null, permanent: false, retryIn: null,
      value: storableText(`SnoozeNotStorable: the database refused this snooze (${err.name}: ${err.message})`) }]);
  }

  _answers(results, outcomes, verb) {
    const byId = new Map(outcomes.map((o) => [o.id, o]));
    const metrics = this.metrics;
    for (const r of results) {
      const j = r.entry.job;
      const o = byId.get(j.id);
      if (o === undefined || o.accepted) {
        this.counters[verb] += 1;
        if (metrics !== null) metrics.ended(r.entry, outcomeOf(verb, o));
        this.log.info(`${verb} job ${j.id} kind=${JSON.stringify(j.kind)} attempt=${j.attempts}`
          + `${verb === "snoozed" ? ` for ${typeof r.snooze === "number" ? `${r.snooze} ms` : r.snooze}` : ""}`
          + `${o ? ` -> ${o.status}${o.detail ? ` (${o.detail})` : ""}` : ""}`);
      } else {
        r.entry.lose("refused");
        this.counters.lease_lost += 1;
        if (metrics !== null) metrics.ended(r.entry, "rejected");
        this.log.warn(`job ${j.id} kind=${JSON.stringify(j.kind)} attempt=${j.attempts}: lease lost, `
          + `${{ completed: "complete", snoozed: "snooze" }[verb] ?? "fail"} refused: ${o.detail}`);
      }
    }
    this.ledger.settle(results.map((r) => r.entry));
  }
}

/**
 * The metrics' outcome of an accepted `verb` (completed, failed, snoozed) whose answer is
 * `o` (undefined: accepted without a row): as the database's status says.
 */
function outcomeOf(verb, o) {
  if (verb === "completed") return "done";
  if (o !== undefined && o.status === "failed") return "failed"; // dead-lettered (a snooze past the limit on the last attempt too)
  return verb === "failed" ? "retried" : "snoozed";
}

module.exports = { Reporter, GiveUp, MAX_REPORT_BATCH, outcomeOf };
