"use strict";
// The in-flight ledger: which attempt holds which job, what runs, what waits to be
// reported (a port of pgfence/ledger.py; the event loop is its only user, so no lock).
//
// One Entry per attempt claimed, from the claim until the database accepted or refused
// its outcome (then it is settled). By stage, keyed by job id (the database may hand
// the same job to this worker again while an older attempt still runs here; the newer
// attempt is the one that counts):
//   held      every attempt claimed and not settled, the newest of each job (heartbeated)
//   ready     claimed, waiting for a handler, in claim order
//   running   handed to a handler that has not returned
//   finishing the handler returned; its outcome is not settled yet
//   results   outcomes waiting for the reporter, in order

class Entry {
  constructor(job, stopping, claimedAt = 0) {
    this.job = job;
    this.lost = false;       // this attempt's result will not be recorded
    this.givenBack = false;  // the shutdown released it while its handler ran
    // When the worker took the attempt in, on the ledger's clock (0 without one): the
    // start of its wait for a handler, for the worker's metrics (metrics.js).
    this.claimedAt = claimedAt;
    this.counted = false;    // the worker's metrics have counted how it ended (once per attempt)
    // The lease's end as the database last said it (the claim, then each accepted
    // heartbeat): earlier than asked when the job's run timeout caps it (heartbeats.js).
    // (a copy: the job is frozen, but a Date in it is not, and a handler may change it)
    this.expires = job.lease_expires_at instanceof Date ? new Date(job.lease_expires_at.getTime()) : null;
    this.controller = new AbortController();
    this._stopping = stopping;
  }

  /** Mark the attempt lost (its lease is gone): its handler's signal aborts. */
  lose(reason) {
    this.lost = true;
    if (!this.controller.signal.aborted) this.controller.abort(reason);
  }

  shouldStop() {
    return this.lost || this._stopping();
  }
}

class Ledger {
  /**
   * `stopping()`: true once the worker is shutting down. `clock`: when set (a worker with
   * metrics sets it), read once per admit() to stamp the new entries' claimedAt.
   */
  constructor(stopping = () => false) {
    this.held = new Map();
    this.running = new Map();
    this.finishing = new Set();
    this.ready = [];
    this.results = [];
    this.clock = null;
    this._stopping = stopping;
  }

  /** Take in claimed jobs; returns [entries, displaced] (older attempts of the same jobs, now lost). */
  admit(jobs) {
    const entries = [];
    const displaced = [];
    const claimedAt = this.clock === null ? 0 : this.clock();
    for (const job of jobs) {
      const entry = new Entry(job, this._stopping, claimedAt);
      job.signal = entry.controller.signal;
      job.shouldStop = () => entry.shouldStop();
      // The reporter completes, fails and snoozes with this object's id and token: a
      // handler that assigns to them (a bug, or a payload-driven merge into `job`) must not
      // make the worker report for another id or with another token. Its payload stays the
      // handler's to change.
      Object.freeze(job);
      const old = this.held.get(job.id);
      if (old !== undefined) {
        if (this.finishing.has(job.id)) this.finishing.delete(job.id);
        else {
          old.lose("claimed again");
          displaced.push([old, entry]);
        }
      }
      this.held.set(job.id, entry);
      entries.push(entry);
      this.ready.push(entry);
    }
    return [entries, displaced];
  }

  /** How many more jobs fit in `capacity` (an attempt whose handler returned does not count). */
  free(capacity) {
    return capacity - (this.held.size - this.finishing.size);
  }

  /** The next ready attempt, now running; null when none or stopping. */
  take() {
    if (this._stopping()) return null;
    while (this.ready.length) {
      const entry = this.ready.shift();
      if (this.held.get(entry.job.id) === entry) {
        this.running.set(entry.job.id, entry);
        return entry;
      }
    }
    return null;
  }

  finish(result) {
    const { entry } = result;
    const id = entry.job.id;
    if (this.running.get(id) === entry) this.running.delete(id);
    if (this.held.get(id) === entry) this.finishing.add(id);
    this.results.push(result);
  }

  heldEntries() {
    return [...this.held.values()];
  }

  /** A heartbeat of `entry` was refused: mark it lost (true), unless its outcome is on its way. */
  revoke(entry, reason) {
    const id = entry.job.id;
    if (this.held.get(id) !== entry || this.finishing.has(id)) return false;
    entry.lose(reason);
    if (this.running.get(id) !== entry) this.held.delete(id);
    return true;
  }

  settle(entries) {
    for (const entry of entries) {
      const id = entry.job.id;
      if (this.held.get(id) === entry) {
        this.held.delete(id);
        this.finishing.delete(id);
      }
    }
  }

  unstarted() {
    const entries = this.ready.filter((e) => this.held.get(e.job.id) === e);
    this.ready.length = 0;
    return entries;
  }

  giveBackRunning() {
    const entries = [...this.running.values()].filter((e) => this.held.get(e.job.id) === e);
    for (const e of entries) {
      if (!e.lost) e.givenBack = true;
      e.lose("given back at shutdown");
    }
    return entries;
  }

  unreported() {
    return this.finishing.size > 0 || this.results.length > 0;
  }
}

module.exports = { Entry, Ledger };
