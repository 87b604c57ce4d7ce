// Node's test runner against the Node package. Run by the Rust test `js::node_package`, which
// sets MMS_JS_NODE (the package folder) and MMS_JS_FIXTURE (tokens from the real issuer with their
// natively computed fields).
import { test } from "node:test";
import assert from "node:assert/strict";
import { createRequire } from "node:module";
import { readFileSync } from "node:fs";
import { view, vectorView, inspectionFails, ERROR_PATTERN } from "./common.mjs";

const require = createRequire(import.meta.url);
const { inspectToken } = require(process.env.MMS_JS_NODE);
const fx = JSON.parse(readFileSync(process.env.MMS_JS_FIXTURE, "utf8"));

test("tokens of every grant read as the issuer minted them", () => {
  assert.ok(fx.tokens.length >= 5);
  for (const t of fx.tokens) {
    const atIssue = inspectToken(t.token, new Date(t.expect.issuedAtMs));
    assert.ok(atIssue.issuedAt instanceof Date && atIssue.expiresAt instanceof Date, t.name);
    assert.deepEqual(view(atIssue), t.expect, t.name);
    assert.equal(atIssue.secondsLeft, (t.expect.expiresAtMs - t.expect.issuedAtMs) / 1000, t.name);
    assert.equal(atIssue.expired, false, t.name);
    const atExpiry = inspectToken(t.token, new Date(t.expect.expiresAtMs));
    assert.equal(atExpiry.expired, true, t.name);
    assert.equal(atExpiry.secondsLeft, 0, t.name);
  }
});

test("against the current time", () => {
  const expired = inspectToken(fx.expired.token);
  assert.equal(expired.expired, true);
  assert.equal(expired.secondsLeft, 0);
  const fresh = inspectToken(fx.fresh.token);
  assert.equal(fresh.expired, false);
  const expected = (fresh.expiresAt.getTime() - Date.now()) / 1000;
  assert.ok(fresh.secondsLeft > 0 && Math.abs(fresh.secondsLeft - expected) <= 2, `${fresh.secondsLeft} vs ${expected}`);
});

test("shared test vectors", () => {
  for (const v of fx.vectors.valid) {
    assert.deepEqual(view(inspectToken(v.token)), vectorView(v), v.name);
  }
  let refused = 0;
  for (const v of fx.vectors.invalid) {
    if (inspectionFails(v)) {
      assert.throws(() => inspectToken(v.token), ERROR_PATTERN, v.name);
      refused++;
    } else {
      // A forged or expired token still reads: inspection proves nothing.
      assert.equal(typeof inspectToken(v.token).client, "string", v.name);
    }
  }
  assert.ok(refused >= 20, `${refused} must-fail vectors refused`);
});

test("malformed input throws a clear Error", () => {
  for (const bad of fx.malformed) {
    assert.throws(() => inspectToken(bad), (e) => e instanceof Error && ERROR_PATTERN.test(e.message), JSON.stringify(bad));
  }
  assert.throws(() => inspectToken(fx.fresh.token, new Date(NaN)), /invalid Date/);
});
