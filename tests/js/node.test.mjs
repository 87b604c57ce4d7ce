// Node's test runner against the Node package. Run by the Rust test `js::node_package`, which
// sets MMS_JS_NODE (the package folder) and MMS_JS_FIXTURE (tokens from the real issuer with their
// natively computed fields).
import { test } from "node:test";
import assert from "node:assert/strict";
import { createRequire } from "node:module";
import { readFileSync, writeFileSync } from "node:fs";
import { createServer } from "node:http";
import { view, vectorView, inspectionFails, ERROR_PATTERN, proofProblems, proofRequests, jwsParts } from "./common.mjs";

const require = createRequire(import.meta.url);
const { inspectToken, DpopKey } = require(process.env.MMS_JS_NODE);
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

test("bound vectors show their binding", () => {
  const bound = fx.vectors.valid.filter((v) => v.cnf);
  assert.ok(bound.length >= 2);
  for (const v of bound) {
    const i = inspectToken(v.token);
    assert.equal(i.version, 2, v.name);
    assert.equal(i.bound, true, v.name);
    assert.match(i.jkt, /^[A-Za-z0-9_-]{43}$/, v.name);
  }
  const bearer = inspectToken(fx.fresh.token);
  assert.equal(bearer.version, 1);
  assert.equal(bearer.bound, false);
  assert.equal(bearer.jkt, null);
});

// Every proof made here, for the Rust side to check (MMS_JS_PROOFS).
const made = [];
const nowSeconds = () => Math.floor(Date.now() / 1000);

test("DPoP proofs under a non-extractable WebCrypto key", async () => {
  for (const algorithm of ["ES256", "EdDSA"]) {
    const key = await DpopKey.generate({ algorithm });
    assert.equal(key.algorithm, algorithm);
    assert.match(key.thumbprint, /^[A-Za-z0-9_-]{43}$/);
    assert.equal(key.keyPair.privateKey.extractable, false);
    await assert.rejects(crypto.subtle.exportKey("jwk", key.keyPair.privateKey), "the private key never leaves WebCrypto");
    await assert.rejects(crypto.subtle.exportKey("pkcs8", key.keyPair.privateKey));
    // Node has no IndexedDB: the caller keeps the key pair and makes the key again from it.
    const again = await DpopKey.fromKeyPair(key.keyPair);
    assert.equal(again.thumbprint, key.thumbprint);
    const jtis = new Set();
    for (const req of proofRequests(fx.dpop)) {
      const proof = await key.proof(req);
      assert.deepEqual(proofProblems(proof, req, key, nowSeconds()), [], algorithm);
      jtis.add(proof.split(".")[1]);
      made.push({ algorithm, thumbprint: key.thumbprint, proof, ...req });
    }
    assert.equal(jtis.size, 3, "a fresh jti for every proof");
  }
  writeFileSync(process.env.MMS_JS_PROOFS, JSON.stringify(made));
});

test("DPoP: bad input is refused with a clear Error", async () => {
  const key = await DpopKey.generate();
  const refused = async (req, pattern) => assert.rejects(key.proof(req), (e) => e instanceof Error && pattern.test(e.message), JSON.stringify(req));
  await refused({ method: "", url: fx.dpop.url }, /`method` must be an HTTP method/);
  await refused({ method: "GET /x", url: fx.dpop.url }, /`method` must be an HTTP method/);
  await refused({ method: "GET", url: "ftp://example.com/x" }, /not an absolute http or https URL/);
  await refused({ method: "GET", url: "/relative/without/a/page" }, /not an absolute http or https URL/);
  await refused({ method: "GET", url: 42 }, /`url` must be a string or a URL/);
  await refused({ method: "GET", url: fx.dpop.url, accessToken: 7 }, /`accessToken` must be a string/);
  await assert.rejects(DpopKey.generate({ algorithm: "HS256" }), /must be "ES256" or "EdDSA"/);
  await assert.rejects(DpopKey.open(), /no IndexedDB here/);
  const extractable = await crypto.subtle.generateKey({ name: "ECDSA", namedCurve: "P-256" }, true, ["sign", "verify"]);
  await assert.rejects(DpopKey.fromKeyPair(extractable), /extractable/);
  const rsa = await crypto.subtle.generateKey({ name: "RSASSA-PKCS1-v1_5", modulusLength: 2048, publicExponent: new Uint8Array([1, 0, 1]), hash: "SHA-256" }, false, ["sign", "verify"]);
  await assert.rejects(DpopKey.fromKeyPair(rsa), /neither ECDSA P-256 nor Ed25519/);
  await assert.rejects(DpopKey.fromKeyPair({}), /expected a CryptoKeyPair/);
});

test("DpopKey.fetch: the DPoP headers, and one retry with the server's nonce", async () => {
  // An API that wants the nonce "n1" (401, as an edge answers) and a token endpoint that wants
  // "n2" (400, as the issuer answers); each answers with what it got.
  const seen = [];
  const server = createServer((req, res) => {
    let body = "";
    req.on("data", (c) => { body += c; });
    req.on("end", () => {
      const proof = jwsParts(req.headers.dpop);
      seen.push({ path: req.url, method: req.method, authorization: req.headers.authorization ?? null, claims: proof.claims, body, custom: req.headers["x-custom"] ?? null });
      const want = req.url.startsWith("/token") ? "n2" : "n1";
      if (req.url.startsWith("/stubborn") || proof.claims.nonce !== want) {
        if (req.url.startsWith("/token")) {
          res.writeHead(400, { "content-type": "application/json", "DPoP-Nonce": want });
          res.end(JSON.stringify({ error: "use_dpop_nonce", error_description: "a nonce is required" }));
        } else {
          res.writeHead(401, { "WWW-Authenticate": 'DPoP realm="media", error="use_dpop_nonce", algs="ES256 EdDSA"', "DPoP-Nonce": want });
          res.end();
        }
        return;
      }
      res.writeHead(200, { "content-type": "application/json" });
      res.end(JSON.stringify({ ok: true }));
    });
  });
  await new Promise((resolve) => server.listen(0, "127.0.0.1", resolve));
  const base = `http://127.0.0.1:${server.address().port}`;
  try {
    const key = await DpopKey.generate();
    const api = `${base}/apiv2/x?page=1`;
    const r = await key.fetch(api, { method: "post", accessToken: "mmat2.t", body: "{\"a\":1}", headers: { "x-custom": "kept" } });
    assert.equal(r.status, 200);
    assert.equal(seen.length, 2, "asked once, then sent again with the nonce");
    for (const s of seen) {
      assert.equal(s.method, "POST");
      assert.equal(s.authorization, "DPoP mmat2.t");
      assert.equal(s.claims.htu, `${base}/apiv2/x`);
      assert.equal(s.claims.htm, "POST");
      assert.equal(typeof s.claims.ath, "string");
      assert.equal(s.body, '{"a":1}', "the body is sent again");
      assert.equal(s.custom, "kept", "the caller's headers are kept");
    }
    assert.equal(seen[0].claims.nonce, undefined);
    assert.equal(seen[1].claims.nonce, "n1");
    assert.notEqual(seen[0].claims.jti, seen[1].claims.jti);
    // The origin's nonce is remembered: the next call sends it at once.
    assert.equal((await key.fetch(`${base}/apiv2/y`, { accessToken: "mmat2.t" })).status, 200);
    assert.equal(seen.length, 3);
    assert.equal(seen[2].claims.nonce, "n1");
    assert.equal(seen[2].method, "GET");
    // The token endpoint's 400 use_dpop_nonce: no token, the caller's Authorization kept.
    const form = new URLSearchParams({ grant_type: "client_credentials" });
    const t = await key.fetch(`${base}/token`, { method: "POST", body: form, headers: { Authorization: "Basic Yzpz" } });
    assert.equal(t.status, 200);
    assert.equal(seen.length, 5);
    assert.deepEqual(seen.slice(3).map((s) => [s.authorization, s.claims.nonce ?? null, "ath" in s.claims, s.body]), [
      ["Basic Yzpz", "n1", false, "grant_type=client_credentials"],
      ["Basic Yzpz", "n2", false, "grant_type=client_credentials"],
    ]);
    // A server that keeps refusing the nonce it sent gets it once, not again and again.
    assert.equal((await key.fetch(`${base}/stubborn`, { accessToken: "mmat2.t" })).status, 401);
    assert.equal(seen.length, 7);
    assert.deepEqual(seen.slice(5).map((s) => s.claims.nonce), ["n2", "n1"]);
    assert.equal((await key.fetch(`${base}/stubborn`, { accessToken: "mmat2.t" })).status, 401);
    assert.equal(seen.length, 8, "its own nonce already sent: no retry");
  } finally {
    server.close();
  }
});
