// Runs in headless Chromium with the web package; writes what it saw into #results for the Rust
// test `js::browser_package` to compare with the native results.
import init, { inspectToken } from "/pkg/mms_token.js";
import { view, vectorView, sameData, inspectionFails, hexToBase64url, ERROR_PATTERN } from "/common.mjs";

const out = document.getElementById("results");
try {
  await init();
  const fx = await (await fetch("/fixture.json")).json();
  const failures = [];
  const check = (ok, what) => { if (!ok) failures.push(what); };
  const same = sameData;
  let checks = 0;
  for (const t of fx.tokens) {
    const i = inspectToken(t.token, new Date(t.expect.issuedAtMs));
    check(i.issuedAt instanceof Date && i.expiresAt instanceof Date, `${t.name}: dates`);
    check(same(view(i), t.expect), `${t.name}: fields ${JSON.stringify(view(i))}`);
    check(i.secondsLeft === (t.expect.expiresAtMs - t.expect.issuedAtMs) / 1000 && i.expired === false, `${t.name}: lifetime`);
    const late = inspectToken(t.token, new Date(t.expect.expiresAtMs));
    check(late.expired === true && late.secondsLeft === 0, `${t.name}: expiry`);
    checks += 4;
  }
  const expired = inspectToken(fx.expired.token);
  check(expired.expired === true && expired.secondsLeft === 0, "expired now");
  const fresh = inspectToken(fx.fresh.token);
  check(fresh.expired === false && fresh.secondsLeft > 0, "fresh now");
  checks += 2;
  for (const v of fx.vectors.valid) {
    check(same(view(inspectToken(v.token)), vectorView(v)), `vector ${v.name}`);
    checks++;
  }
  for (const v of fx.vectors.valid.filter((v) => v.cnf)) {
    const i = inspectToken(v.token);
    check(i.version === 2 && i.bound === true && i.jkt === hexToBase64url(v.cnf), `bound vector ${v.name}`);
    checks++;
  }
  const bearer = inspectToken(fx.fresh.token);
  check(bearer.version === 1 && bearer.bound === false && bearer.jkt === null, "bearer token unbound");
  checks++;
  for (const v of fx.vectors.invalid) {
    let message = null;
    try { inspectToken(v.token); } catch (e) { message = e instanceof Error ? e.message : String(e); }
    check(inspectionFails(v) ? message !== null && ERROR_PATTERN.test(message) : message === null, `vector ${v.name}: ${message}`);
    checks++;
  }
  for (const bad of fx.malformed) {
    let message = null;
    try { inspectToken(bad); } catch (e) { message = e instanceof Error ? e.message : String(e); }
    check(message !== null && ERROR_PATTERN.test(message), `malformed ${JSON.stringify(bad)}: ${message}`);
    checks++;
  }
  out.textContent = JSON.stringify({ checks, failures, userAgent: navigator.userAgent });
} catch (e) {
  out.textContent = JSON.stringify({ checks: 0, failures: [`exception: ${e && e.stack || e}`] });
}
