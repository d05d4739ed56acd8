"use strict";
// What a handler's return or throw becomes (lib/handlers.js), without a database: whatever a
// handler throws or returns, runHandler resolves to an outcome the reporter can send (a
// rejection here left the attempt held, and heartbeated, for ever).
const { test } = require("node:test");
const assert = require("node:assert/strict");
const { runHandler, storableText, Snooze, RetryAfter, MAX_ERROR_CHARS } = require("../lib/handlers");
const { Entry } = require("../lib/ledger");
const { RawJson } = require("../lib");

const LIMITS = { snooze_max_s: 365 * 86400, retry_in_max_s: 365 * 86400 };

/** The outcome of running `handler` as the handler of one attempt of kind "k". */
function run(handler) {
  const entry = new Entry({ id: "1", kind: "k", attempts: 1, attempt_token: "t" }, () => false);
  return runHandler(entry, { k: handler }, "w1", LIMITS);
}

test("whatever a handler throws, runHandler resolves to a failure with a text that says what it was", async () => {
  const hostile = {
    "a string": ["boom", /^thrown value: boom$/],
    null: [null, /^thrown value: null$/],
    undefined: [undefined, /^thrown value: undefined$/],
    "a Symbol": [Symbol("sym"), /^thrown value: Symbol\(sym\)$/],
    "a BigInt": [10n, /^thrown value: 10n$/],
    "an object": [{ code: 7 }, /^thrown value: \{"code":7\}$/],
    "an object with a throwing getter": [{ get x() { throw new Error("getter"); } }, /^thrown value: object \(Object\) \(it could not be formatted: Error\)$/],
    "an object with a throwing toString and toJSON": [{ toString() { throw new Error("t"); }, toJSON() { throw new Error("j"); } },
      /^thrown value: object \(Object\) \(it could not be formatted: Error\)$/],
    "a Proxy whose every trap throws": [new Proxy({}, { getPrototypeOf() { throw new Error("p"); }, get() { throw new Error("g"); } }),
      /^thrown value: object \(it could not be formatted: Error\)$/],
    "an Error whose stack getter throws": [(() => { const e = new Error("x"); Object.defineProperty(e, "stack", { get() { throw new Error("s"); } }); return e; })(),
      /^thrown value: object \(Error\) \(it could not be formatted: Error\)$/],
    "a Snooze whose delay has no toString": [(() => { const s = new Snooze(1000); s.delay = Object.create(null); return s; })(),
      /^Snooze with delay \(object \(Object\)\) outside \(0, 31536000000\] ms, failed with the default backoff instead\nSnooze: snooze for 1000 ms/],
    "a Snooze whose delay getter throws": [(() => { const s = new Snooze(1000); Object.defineProperty(s, "delay", { get() { throw new Error("d"); } }); return s; })(),
      /^Snooze: snooze for 1000 ms\n/],
    "a RetryAfter whose delay has no toString": [(() => { const r = new RetryAfter(1000); r.delay = Object.create(null); return r; })(),
      /^RetryAfter with delay \(object \(Object\)\) outside 0\.\.31536000000 ms/],
  };
  for (const [what, [thrown, text]] of Object.entries(hostile)) {
    const r = await run(async () => { throw thrown; });
    assert.equal(r.ok, false, what);
    assert.equal(r.permanent, false, `${what}: retried by the database's rule`);
    assert.equal(r.snooze, null, what);
    assert.equal(r.interrupted, false, what);
    assert.match(r.value, text, what);
  }
  // a thenable whose then getter throws, and a handler that throws synchronously
  assert.match((await run(() => ({ get then() { throw new Error("then"); } }))).value, /^Error: then\n/);
  assert.match((await run(() => { throw "sync"; })).value, /^thrown value: sync$/);
  // a lone surrogate in an error text becomes U+FFFD (the client refuses it in a text argument), a NUL \x00
  assert.equal(storableText("a\ud800b\udc00\u0000"), "a\ufffdb\ufffd\\x00");
  assert.match((await run(async () => { throw "lone \udc00"; })).value, /^thrown value: lone \ufffd$/);
  // a huge thrown string is cut, its end kept
  const huge = await run(async () => { throw `${"x".repeat(MAX_ERROR_CHARS * 2)}END`; });
  assert.ok(huge.value.length <= MAX_ERROR_CHARS + 20 && huge.value.endsWith("END"));
});

test("a handler's result: a RawJson is stored as its text; one jsonb cannot store fails permanently at once", async () => {
  const raw = await run(async () => new RawJson('{"a": [1, 2]}'));
  assert.equal(raw.ok, true);
  assert.equal(raw.value, '{"a": [1, 2]}', "the RawJson's own text, not {\"text\": ...}");
  assert.equal((await run(async () => ({ ok: "\ud83d\ude00" }))).value, '{"ok":"\ud83d\ude00"}', "a surrogate pair is fine");
  assert.equal((await run(async () => ({ ok: "a\\u0000b" }))).value, '{"ok":"a\\\\u0000b"}', "a backslash before u0000 is text");
  const refused = {
    "a NUL character": [{ text: "a\u0000b" }, /NUL character/],
    "a lone surrogate": [{ text: "a\ud800b" }, /lone surrogate/],
    "a RawJson with a lone surrogate": [new RawJson('"a\udc00"'), /RawJson text contains a lone surrogate/],
    "a BigInt": [{ n: 1n }, /JSON\.stringify failed \(TypeError: Do not know how to serialize a BigInt\)/],
    "a function": [() => 1, /JSON\.stringify gives nothing for function/],
    "a cycle": [(() => { const o = {}; o.o = o; return o; })(), /JSON\.stringify failed \(TypeError: Converting circular/],
    "a toJSON that throws a non-Error": [{ toJSON() { throw { get name() { throw new Error("n"); } }; } }, /JSON\.stringify failed \(a value was thrown\)/],
  };
  for (const [what, [value, why]] of Object.entries(refused)) {
    const r = await run(async () => value);
    assert.equal(r.ok, false, what);
    assert.equal(r.permanent, true, what);
    assert.match(r.value, /^ResultNotJSON: handler for "k" returned a value that cannot be stored as JSON: /, what);
    assert.match(r.value, why, what);
  }
});
