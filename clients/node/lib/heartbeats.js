"use strict";
// The heartbeats: extend every held lease, and learn which were lost (a port of
// pgfence/heartbeats.py).
//
// Every lease / 3 (at least 10 ms) one heartbeat_many call (one per limits().batch
// attempts) extends the lease of every attempt the ledger holds: waiting for a handler,
// running, or waiting for its outcome to be reported. A refused heartbeat marks the
// attempt lost (its signal aborts, shouldStop() is true) and its result is never
// reported. A refusal for an attempt whose outcome is already on its way changes
// nothing: the reporter learns from the database whether that outcome counted. A
// connection failure skips the round (the next comes lease / 3 later).
//
// A run timeout (enqueue's `timeout`) caps a lease at the attempt's deadline: the
// database never extends it further and refuses the heartbeats after it. So that a
// handler's signal aborts right after the deadline, not up to lease / 3 later, a round
// also comes just after the earliest lease end the database returned (Entry.expires),
// once per such end. Only the database decides: the local clock only picks when to ask;
// a skewed clock makes that round come early (the heartbeat is accepted, the regular
// rounds go on) or late (at most the regular interval).

/** How long after a lease's end (as the database returned it) its extra round comes, ms. */
const AFTER_EXPIRY = 50;
/** How often, at most, the held leases' ends are looked at between two rounds, ms (a job
 *  claimed meanwhile may have a lease that ends before the next round). */
const RECHECK = 250;

/** Milliseconds between two regular rounds: a third of the lease, at least 10 ms. */
const interval = (lease) => Math.max(lease / 3, 10);

class Heartbeats {
  /**
   * @param {import("./client").Client} client
   * @param {import("./ledger").Ledger} ledger
   * @param {{workerId: string, lease: number, counters: Record<string, number>, limits: {batch: number}, log: any}} options
   */
  constructor(client, ledger, { workerId, lease, counters, limits, log }) {
    this.client = client;
    this.ledger = ledger;
    this.workerId = workerId;
    this.lease = lease;
    this.counters = counters;
    this.batch = limits.batch;
    this.log = log;
    this.interval = interval(lease);
    this._asked = new Map(); // the lease ends an extra round was made for, by job id (one round per end)
  }

  /**
   * Beat every `interval`, or sooner just after a lease capped by a run timeout ends,
   * until `done()`; `wait(ms)` sleeps (and returns early when done() became true).
   */
  async run(done, wait) {
    let next = Date.now() + this.interval;
    while (!done()) {
      await wait(Math.max(Math.min(next - Date.now(), this.nextWait(), RECHECK), 0));
      if (done()) return;
      if (Date.now() >= next || this.nextWait() <= 10) {
        try {
          await this.beat();
        } catch (err) { // (heartbeat_many's own failures are handled in beat: this is a bug, keep beating)
          this.log.error(`worker ${this.workerId}: a heartbeat round failed (${err && err.message})`);
        }
        next = Date.now() + this.interval;
      }
    }
  }

  /** Milliseconds until the next round: `interval`, or less when a held lease ends sooner
   *  (a run timeout's deadline) and no round was made for that end yet. */
  nextWait(now = Date.now()) {
    let w = this.interval;
    for (const e of this.ledger.held.values()) {
      if (e.expires !== null && this._asked.get(e.job.id) !== e.expires.getTime()) {
        w = Math.min(w, e.expires.getTime() - now + AFTER_EXPIRY);
      }
    }
    return Math.max(w, 10);
  }

  /** One round: renew every held lease; an attempt whose renewal was refused is lost (its signal aborts). */
  async beat() {
    if (this._beating) return;
    this._beating = true;
    try {
      const entries = this.ledger.heldEntries();
      const now = Date.now();
      this._asked = new Map(entries.filter((e) => e.expires !== null && e.expires.getTime() - now + AFTER_EXPIRY <= 10)
        .map((e) => [e.job.id, e.expires.getTime()]));
      for (let i = 0; i < entries.length; i += this.batch) {
        const chunk = entries.slice(i, i + this.batch);
        let outcomes;
        try {
          outcomes = await this.client.heartbeat_many(chunk.map((e) => e.job.id), chunk.map((e) => e.job.attempt_token), { lease: this.lease });
        } catch (err) {
          this.log.warn(`worker ${this.workerId}: heartbeat failed (${err.message}); next try in ${Math.round(this.interval)} ms`);
          return;
        }
        chunk.forEach((entry, k) => {
          const o = outcomes[k];
          if (o.accepted) {
            if (o.lease_expires_at instanceof Date) entry.expires = o.lease_expires_at;
            return;
          }
          if (!this.ledger.revoke(entry, o.detail)) return; // its outcome is on its way: the reporter learns the truth
          this.counters.lease_lost += 1;
          this.log.warn(`job ${entry.job.id} kind=${JSON.stringify(entry.job.kind)} attempt=${entry.job.attempts}: lease lost on heartbeat: ${o.detail}`);
        });
      }
    } finally {
      this._beating = false;
    }
  }
}

module.exports = { Heartbeats, interval, AFTER_EXPIRY, RECHECK };
