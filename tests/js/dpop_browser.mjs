// Served through Envoy (same origin as the API) to headless Chromium by the Rust test
// `dpop_browser::page_through_envoy`: gets a bound token from the token endpoint with a proof by
// the page's non-extractable key, makes protected calls with fresh proofs, and POSTs what it saw
// (the token included) to ./report, for the test to try that token from outside the page.
import init, { DpopKey, inspectToken } from "./pkg/mms_token.js";

const report = (results) =>
  fetch("./report", { method: "POST", headers: { "content-type": "application/json" }, body: JSON.stringify(results) });
try {
  await init();
  const cfg = await (await fetch("./config.json")).json();
  const key = await DpopKey.open("through-envoy");
  let exportRefused = false;
  try {
    await crypto.subtle.exportKey("jwk", key.keyPair.privateKey);
  } catch (e) {
    exportRefused = e instanceof DOMException;
  }
  const tokenUrl = new URL("/apiv2/oauth/token", location.href);
  const granted = await fetch(tokenUrl, {
    method: "POST",
    headers: {
      Authorization: `Basic ${btoa(`${cfg.client}:${cfg.secret}`)}`,
      DPoP: await key.proof({ method: "POST", url: tokenUrl }),
    },
    body: new URLSearchParams({ grant_type: "password", username: cfg.username, password: cfg.password }),
  });
  const answer = await granted.json();
  const token = answer.access_token;
  const calls = [];
  for (let i = 0; i < 3; i++) {
    const url = new URL(`/apiv2/MediaService/Find?page=${i}`, location.href);
    // Two calls with the headers made by hand, the last one by the module's fetch.
    const r = i < 2
      ? await fetch(url, {
        method: "POST",
        headers: {
          Authorization: `DPoP ${token}`,
          DPoP: await key.proof({ method: "POST", url, accessToken: token }),
          "content-type": "application/json",
        },
        body: "{}",
      })
      : await key.fetch(url, { method: "POST", accessToken: token, headers: { "content-type": "application/json" }, body: "{}" });
    const text = await r.text();
    let body = null;
    try { body = JSON.parse(text); } catch { body = text; }
    calls.push({ status: r.status, body, wwwAuthenticate: r.headers.get("www-authenticate") });
  }
  await report({
    grantStatus: granted.status,
    answer,
    inspected: token ? (({ version, bound, jkt }) => ({ version, bound, jkt }))(inspectToken(token)) : null,
    thumbprint: key.thumbprint,
    extractable: key.keyPair.privateKey.extractable,
    exportRefused,
    calls,
    secureContext: isSecureContext,
    failures: [],
  });
} catch (e) {
  await report({ failures: [`exception: ${e && e.stack || e}`] });
}
