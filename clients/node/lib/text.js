"use strict";
// Showing the database's strings safely (as python_client/pgfence/_text.py).
//
// Queue and kind names, payloads, results, error texts and worker ids come from whoever
// could call the SQL API: they are attacker-controlled wherever they are shown. printable()
// writes control, line-separator, bidirectional and invisible characters as \uXXXX (the
// same set as pgfence._text.printable and the SQL _printable), and, JavaScript strings
// being UTF-16, a lone surrogate too (a Python str read from PostgreSQL cannot hold one;
// a handler's kind given here can).

// C0/C1 controls, DEL, soft hyphen, combining grapheme joiner, ALM, Hangul fillers,
// Khmer inherent vowels, zero-width and bidi marks, line/paragraph separators,
// embeddings/overrides, word joiner, invisible operators, isolates, deprecated format
// characters, BOM, interlinear annotation marks, shorthand and musical format controls,
// default-ignorable code points not yet assigned (the set of pgfence/_text.py); then lone
// surrogates (with the u flag a lone surrogate is a code point of its own).
const UNSAFE = new RegExp(
  "[\\x00-\\x1f\\x7f-\\x9f\\u00ad\\u034f\\u061c\\u115f\\u1160\\u17b4\\u17b5\\u200b-\\u200f\\u2028-\\u202e"
  + "\\u2060-\\u206f\\u3164\\ufeff\\uffa0\\ufff0-\\ufffb\\u{1bca0}-\\u{1bca3}\\u{1d173}-\\u{1d17a}"
  + "\\u{e0080}-\\u{e00ff}\\u{e01f0}-\\u{e0fff}\\ud800-\\udfff]", "gu");
const ANY_UNSAFE = new RegExp(UNSAFE.source, "u"); // (test() on a global regex would move its lastIndex)

/** String(value) with every unsafe or invisible character written as \uXXXX (lowercase hex; five digits beyond U+FFFF, as Python's). */
function printable(value) {
  const text = typeof value === "string" ? value : String(value);
  if (!ANY_UNSAFE.test(text)) return text;
  return text.replace(UNSAFE, (c) => `\\u${c.codePointAt(0).toString(16).padStart(4, "0")}`);
}

// A lone surrogate: a high one not followed by a low one, or a low one not after a high one
// (without the u flag, so that each surrogate is a code unit of its own).
const LONE_SURROGATE = /[\ud800-\udbff](?![\udc00-\udfff])|(?<![\ud800-\udbff])[\udc00-\udfff]/;
const LONE_SURROGATES = new RegExp(LONE_SURROGATE.source, "g");

/** Whether `text` has no lone surrogate (so it has a UTF-8 encoding): String.prototype.isWellFormed, also on Node 18. */
const isWellFormed = typeof String.prototype.isWellFormed === "function"
  ? (text) => text.isWellFormed() : (text) => !LONE_SURROGATE.test(text);

/** `text` with each lone surrogate replaced by U+FFFD: String.prototype.toWellFormed, also on Node 18. */
const toWellFormed = typeof String.prototype.toWellFormed === "function"
  ? (text) => text.toWellFormed() : (text) => text.replace(LONE_SURROGATES, "\ufffd");

/**
 * The worker's logger: every message written with printable() (a message carries the
 * database's strings: a refusal's detail, an error's message, a kind, a queue set's name),
 * as the Python worker's loggers escape their arguments (pgfence._text.EscapeArgs); and a
 * logger that throws, or returns a promise that rejects, never stops the worker (as Python's
 * logging, which reports a handler's error and goes on): the first such failure is written
 * to stderr, the rest are ignored.
 * @param {{info: (m: string) => unknown, warn: (m: string) => unknown, error: (m: string) => unknown}} logger
 */
function escapedLogger(logger) {
  let told = false;
  const broken = (level, err) => {
    if (told) return;
    told = true;
    let why;
    try { why = err instanceof Error ? `${err.name}: ${err.message}` : typeof err; } catch (_) { why = "?"; }
    try {
      process.stderr.write(`pgfence: the worker's logger.${level} failed (${printable(why)}); its messages are dropped where it fails\n`);
    } catch (_) { /* stderr closed */ }
  };
  const out = {};
  for (const level of ["info", "warn", "error"]) {
    const write = logger[level];
    out[level] = (message) => {
      try {
        const r = write(printable(message));
        if (r !== null && typeof r === "object" && typeof r.then === "function") r.then(undefined, (err) => broken(level, err));
      } catch (err) {
        broken(level, err);
      }
    };
  }
  return out;
}

module.exports = { printable, escapedLogger, isWellFormed, toWellFormed };
