// Runs in headless Chromium with the web package: opens the proof key kept in IndexedDB (made on
// the first load, found again on the next), shows that its private key cannot be exported, and
// makes proofs that the Rust test `js_dpop::browser_proofs` checks with the token crate's own
// checker. `?forget` deletes the stored key first. Results are POSTed to /report.
import init, { DpopKey } from "/pkg/mms_token.js";
import { proofProblems, proofRequests } from "/common.mjs";

const report = (results) =>
  fetch("/report", { method: "POST", headers: { "content-type": "application/json" }, body: JSON.stringify(results) });
try {
  await init();
  const dpop = await (await fetch("/dpop.json")).json();
  if (new URLSearchParams(location.search).has("forget")) await DpopKey.forget("e2e");
  const key = await DpopKey.open("e2e");
  const failures = [];
  let exportRefused = false;
  try {
    await crypto.subtle.exportKey("jwk", key.keyPair.privateKey);
  } catch (e) {
    exportRefused = e instanceof DOMException;
  }
  const proofs = [];
  const keys = [key];
  let ed25519 = null;
  try {
    keys.push(await DpopKey.generate({ algorithm: "EdDSA" }));
    ed25519 = true;
  } catch (e) {
    ed25519 = `not here: ${e && e.message}`;
  }
  for (const k of keys) {
    for (const req of proofRequests(dpop)) {
      const proof = await k.proof(req);
      failures.push(...proofProblems(proof, req, k, Math.floor(Date.now() / 1000)));
      proofs.push({ algorithm: k.algorithm, thumbprint: k.thumbprint, proof, ...req });
    }
  }
  await report({
    thumbprint: key.thumbprint,
    algorithm: key.algorithm,
    extractable: key.keyPair.privateKey.extractable,
    exportRefused,
    ed25519,
    proofs,
    failures,
    userAgent: navigator.userAgent,
  });
} catch (e) {
  await report({ failures: [`exception: ${e && e.stack || e}`] });
}
