"use strict";
// Errors, mapped from SQLSTATEs in one place (as python_client/pgfence/errors.py).
//
// The database raises PF001 (lease lost), PF002 (job not found), PF003 (refused
// transition), PF004 (wrong isolation level), 22023/22004 (bad argument). translate()
// turns a pg error into the matching PgfenceError subclass, keeping the server's
// sqlstate, message, detail and hint; the pg error stays as `cause`.

class PgfenceError extends Error {
  /**
   * @param {string} message
   * @param {{sqlstate?: string|null, detail?: string|null, hint?: string|null, cause?: unknown}} [info]
   */
  constructor(message, info = {}) {
    super(message, info.cause === undefined ? undefined : { cause: info.cause });
    this.name = new.target.name;
    this.sqlstate = info.sqlstate ?? null;
    this.detail = info.detail ?? null;
    this.hint = info.hint ?? null;
  }

  /** The message with its DETAIL and HINT lines, as psql prints them. */
  toString() {
    const parts = [`${this.name}: ${this.message}`];
    if (this.detail) parts.push(`DETAIL: ${this.detail}`);
    if (this.hint) parts.push(`HINT: ${this.hint}`);
    return parts.join("\n");
  }
}

/** PF001: the attempt token is no longer current; `detail` says why. Stop working on the job. */
class LeaseLost extends PgfenceError {}
/** PF002: no job has that id. */
class JobNotFound extends PgfenceError {}
/** PF003: the job's status does not allow this operation. */
class InvalidTransition extends PgfenceError {}
/** PF004: claim and the fenced calls need READ COMMITTED (run them in their own transaction). */
class WrongIsolation extends PgfenceError {}
/** 22023 / 22004: a bad or NULL argument; `message` names it, `hint` says what to pass. */
class InvalidArgument extends PgfenceError {}
/** The database has no pgfence schema, or a version this client does not speak. */
class SchemaMismatch extends PgfenceError {}

const BY_SQLSTATE = Object.freeze({
  PF001: LeaseLost,
  PF002: JobNotFound,
  PF003: InvalidTransition,
  PF004: WrongIsolation,
  22023: InvalidArgument,
  22004: InvalidArgument,
});

/**
 * The PgfenceError for a pg error, or null when it is not a pgfence condition.
 * @param {any} err
 * @returns {PgfenceError|null}
 */
function translate(err) {
  const cls = err && typeof err.code === "string" ? BY_SQLSTATE[err.code] : undefined;
  if (cls === undefined) return null;
  return new cls(err.message, { sqlstate: err.code, detail: err.detail, hint: err.hint, cause: err });
}

module.exports = {
  PgfenceError, LeaseLost, JobNotFound, InvalidTransition, WrongIsolation, InvalidArgument, SchemaMismatch,
  BY_SQLSTATE, translate,
};
