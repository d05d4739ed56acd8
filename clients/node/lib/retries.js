"use strict";
// Which errors a worker retries: the connection failed (the call may or may not have
// run; the fenced calls are idempotent for their token), or the server asked to try
// again. A pgfence condition (PF001..PF004, 22023, 22004) is an answer, never retried.

const { PgfenceError } = require("./errors");

function retryable(err) {
  if (!err || err instanceof PgfenceError || err instanceof TypeError) return false;
  const code = typeof err.code === "string" ? err.code : "";
  if (code === "") return true;                          // "Connection terminated unexpectedly", timeouts
  if (/^E[A-Z]/.test(code)) return true;                 // ECONNREFUSED, ECONNRESET, EPIPE ...
  return /^(08|53|57P|58)/.test(code) || ["40001", "40P01", "55P03", "55000"].includes(code);
}

const NOT_SENT = Symbol("pgfence.notSent");

/** Mark an error met while taking a connection from the pool: the call never reached the database. */
function markNotSent(err) {
  if (err !== null && typeof err === "object") err[NOT_SENT] = true;
  return err;
}

/** The call that raised err never reached the database (no connection was had): it cannot have committed. */
function notSent(err) {
  return Boolean(err) && err[NOT_SENT] === true;
}

/** The database refused a value (class 22: a result or error text it cannot store). */
function dataError(err) {
  return Boolean(err) && typeof err.code === "string" && err.code.startsWith("22")
    || (err instanceof PgfenceError && typeof err.sqlstate === "string" && err.sqlstate.startsWith("22"));
}

module.exports = { retryable, dataError, markNotSent, notSent };
