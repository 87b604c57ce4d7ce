// Shared by the Node and browser suites: the plain-data view of an inspection, comparable with
// the expectations the Rust side computes natively.
export function view(info) {
  return {
    version: info.version,
    keyId: info.keyId,
    tokenId: info.tokenId,
    issuedAtMs: info.issuedAt.getTime(),
    expiresAtMs: info.expiresAt.getTime(),
    client: info.client,
    subjectKind: info.subjectKind,
    subject: info.subject,
    roles: info.roles,
    claims: info.claims,
  };
}

/** The expected view of a valid test vector of shared/test_vectors/tokens.json. */
export function vectorView(v) {
  return {
    version: 1,
    keyId: v.kid,
    tokenId: v.jti,
    issuedAtMs: v.iat * 1000,
    expiresAtMs: v.exp * 1000,
    client: v.client,
    subjectKind: v.kind,
    subject: v.subject === "" ? null : v.subject,
    roles: v.roles,
    claims: v.claims,
  };
}

/** Whether inspection (which has no key) must refuse an invalid vector; the others only fail
 * verification. The generator says so of each (`inspects`). */
export function inspectionFails(v) {
  if (typeof v.inspects !== "boolean") throw new Error(`vector ${v.name} says nothing of inspection`);
  return !v.inspects;
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
