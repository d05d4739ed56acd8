"use strict";
// The worker's stand-in sweeper: CALL pgfence.sweep() when pg_cron does not (a port of
// pgfence/sweeper.py). runSweeper true: sweep every sweepInterval ms. null (the
// default): sweep while pgfence.sweeper_health() says no background sweeper runs
// (stopped, never ran, or unknown; not while an operator paused it), looked at every
// SWEEPER_LOOK_INTERVAL ms. A role that may not sweep (42501) stops it for good (claim's
// own recovery and pg_cron remain). The reclaim rule itself is pgfence.sweep()'s.

const SWEEPER_LOOK_INTERVAL = 60000;

/** Sweep until done() is true; `wait(ms)` resolves early when the worker finishes. */
async function runSweeper(client, runSweeper, { sweepInterval, workerId, done, wait, log }) {
  const auto = runSweeper === null || runSweeper === undefined;
  let sweeping = !auto;
  let nextLook = Date.now();
  if (!auto) log.info(`worker ${workerId} runs the reclaim sweep every ${sweepInterval} ms`);
  for (;;) {
    if (auto && Date.now() >= nextLook) {
      nextLook = Date.now() + SWEEPER_LOOK_INTERVAL;
      let state;
      try {
        state = (await client.sweeper_health()).state;
      } catch (_) {
        state = "unknown";
      }
      const wanted = ["stopped", "never_ran", "unknown"].includes(state);
      if (sweeping !== wanted) {
        sweeping = wanted;
        log.info(`worker ${workerId} ${sweeping ? "runs" : "stops"} the reclaim sweep (background sweeper: ${state})`);
      }
    }
    await wait(sweepInterval);
    if (done()) return;
    if (!sweeping) continue;
    try {
      const n = await client.sweep();
      if (n) log.info(`worker ${workerId}: sweep reclaimed ${n} expired leases`);
    } catch (err) {
      if (err && err.code === "42501") {
        log.warn(`worker ${workerId}: cannot sweep (${err.message}); grant pgfence_operator to this role or rely on `
          + "claim's on-claim recovery and pg_cron");
        return;
      }
      log.warn(`worker ${workerId}: sweep failed (${err.message})`);
    }
  }
}

module.exports = { runSweeper, SWEEPER_LOOK_INTERVAL };
