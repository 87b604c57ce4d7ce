// Shared by the Node and browser suites: the plain-data view of an inspection, comparable with
// the expectations the Rust side computes natively.
export function view(info) {
  return {
    version: info.version,
    bound: info.bound,
    jkt: info.jkt,
    keyId: info.keyId,
    tokenId: info.tokenId,
    issuedAtMs: info.issuedAt.getTime(),
    expiresAtMs: info.expiresAt.getTime(),
    client: info.client,
    subjectKind: info.subjectKind,
    subject: info.subject,
    roles: info.roles,
    claims: info.claims,
    actors: info.actors,
    actorOrigin: info.actorOrigin,
  };
}

/** The expected view of a valid test vector of shared/test_vectors/tokens.json. */
export function vectorView(v) {
  return {
    version: v.cnf ? 2 : 1,
    bound: Boolean(v.cnf),
    jkt: v.cnf ? hexToBase64url(v.cnf) : null,
    keyId: v.kid,
    tokenId: v.jti,
    issuedAtMs: v.iat * 1000,
    expiresAtMs: v.exp * 1000,
    client: v.client,
    subjectKind: v.kind,
    subject: v.subject === "" ? null : v.subject,
    roles: v.roles,
    claims: v.claims,
    actors: v.act ? v.act.actors : null,
    actorOrigin: v.act ? v.act.origin : null,
  };
}

/** Unpadded base64url of the bytes written in hex (the vectors give `cnf` in hex). */
export function hexToBase64url(hex) {
  const bytes = hex.match(/../g).map((h) => parseInt(h, 16));
  return btoa(String.fromCharCode(...bytes)).replace(/\+/g, "-").replace(/\//g, "_").replace(/=+$/, "");
}

/** The header and claims of a compact JWS, decoded (no signature check). */
export function jwsParts(jws) {
  const decode = (part) => {
    const b64 = part.replace(/-/g, "+").replace(/_/g, "/");
    const text = new TextDecoder().decode(Uint8Array.from(atob(b64), (c) => c.charCodeAt(0)));
    return JSON.parse(text);
  };
  const [header, claims, signature] = jws.split(".");
  return { header: decode(header), claims: decode(claims), signatureLength: signature.length };
}

/** What every proof the module makes must look like, whatever the platform: the problems found,
 * as strings (empty when none). `req` is what the proof was asked for; `key` the DpopKey. */
export function proofProblems(proof, req, key, nowSeconds) {
  const out = [];
  const { header, claims, signatureLength } = jwsParts(proof);
  const expect = (ok, what) => { if (!ok) out.push(`${what}: ${JSON.stringify({ header, claims })}`); };
  expect(header.typ === "dpop+jwt", "typ");
  expect(header.alg === key.algorithm, "alg");
  expect(sameData(header.jwk, key.publicJwk), "jwk is the public key");
  expect(!("d" in header.jwk), "no private member");
  expect(Object.keys(header).sort().join() === "alg,jwk,typ", "header members");
  expect(signatureLength === 86, "64-byte signature");
  expect(claims.htm === req.method.toUpperCase(), "htm");
  expect(claims.htu === String(req.url).split(/[?#]/)[0], "htu without query or fragment");
  expect(Math.abs(claims.iat - nowSeconds) <= 5, "iat is now");
  expect(typeof claims.jti === "string" && claims.jti.length === 22, "jti of 128 random bits");
  expect(req.accessToken ? typeof claims.ath === "string" && claims.ath.length === 43 : !("ath" in claims), "ath");
  expect(req.nonce ? claims.nonce === req.nonce : !("nonce" in claims), "nonce");
  return out;
}

/** Whether inspection (which has no key) must refuse an invalid vector; the others only fail
 * verification. The generator says so of each (`inspects`). */
export function inspectionFails(v) {
  if (typeof v.inspects !== "boolean") throw new Error(`vector ${v.name} says nothing of inspection`);
  return !v.inspects;
}

/** The requests the DPoP suites make proofs for (the Rust side checks every proof made). */
export function proofRequests(dpop) {
  return [
    { method: "GET", url: dpop.url, accessToken: dpop.accessToken, nonce: dpop.nonce },
    { method: "post", url: dpop.tokenUrl },
    { method: "PUT", url: `${dpop.url}?page=2#top`, accessToken: dpop.accessToken },
  ];
}

export const ERROR_PATTERN = /inspectToken: (malformed token|the token is empty|unsupported token version)/;

/** Deep equality of plain JSON data, independent of key order. */
export function sameData(a, b) {
  if (Array.isArray(a) || Array.isArray(b)) {
    return Array.isArray(a) && Array.isArray(b) && a.length === b.length && a.every((x, i) => sameData(x, b[i]));
  }
  if (a && b && typeof a === "object" && typeof b === "object") {
    const ka = Object.keys(a).sort();
    const kb = Object.keys(b).sort();
    return sameData(ka, kb) && ka.every((k) => sameData(a[k], b[k]));
  }
  return a === b;
}
