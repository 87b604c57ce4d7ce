// The console's one door to the issuer: sign-in with the password grant of the public client
// `admin-console`, and every admin API call with a fresh DPoP proof by a non-extractable
// WebCrypto key made for this page. The key and the access token live in this module's memory
// only: nothing is written to storage, and closing or reloading the page forgets both.
import init, { DpopKey } from "./pkg/mms_token.js";

/** The reserved client id of the console (the admin listener alone accepts it). */
export const CLIENT_ID = "admin-console";

let key = null;
let token = null;
const listeners = new Set();

/** A refusal or failure, with a sentence for the page and what kind it is. */
export class ApiError extends Error {
  constructor(kind, message, status = 0, code = "") {
    super(message);
    this.kind = kind;
    this.status = status;
    this.code = code;
  }
}

/** Loads the wasm module and makes this page's key (non-extractable, in memory). */
export async function start() {
  await init({ module_or_path: new URL("./pkg/mms_token_bg.wasm", import.meta.url) });
  key = await DpopKey.generate();
}

/** Whether a token is held. */
export const signedIn = () => token !== null;

/** Calls `f(reason)` when the session ends (401 from the API, or sign-out). */
export const onSessionEnd = (f) => listeners.add(f);

/** Forgets the token (sign-out, or the API said it is no longer valid). */
export function endSession(reason) {
  token = null;
  for (const f of listeners) f(reason);
}

const NETWORK =
  "The issuer cannot be reached: the network is down or the issuer is not answering. Nothing was changed by this attempt if it never arrived; check the connection and try again.";

async function send(url, init) {
  try {
    return await key.fetch(url, init);
  } catch (e) {
    if (e instanceof TypeError) throw new ApiError("network", NETWORK);
    throw e;
  }
}

async function errorOf(r) {
  let body = {};
  try {
    body = await r.json();
  } catch {
    // not JSON: the status says enough
  }
  const why = body.error_description || body.error || `HTTP ${r.status}`;
  return { code: body.error || "", why };
}

/** The password grant of the console's client at this origin's token endpoint. */
export async function signIn(username, password) {
  const url = new URL("/apiv2/oauth/token", location.href);
  const r = await send(url, {
    method: "POST",
    headers: { "content-type": "application/x-www-form-urlencoded" },
    body: new URLSearchParams({ grant_type: "password", client_id: CLIENT_ID, username, password }),
  });
  if (!r.ok) {
    const { code, why } = await errorOf(r);
    const message = code === "invalid_grant" ? `Sign-in refused: ${why}` : `Sign-in failed: ${why}`;
    throw new ApiError("signin", message, r.status, code);
  }
  const answer = await r.json();
  if (answer.token_type !== "DPoP" || !answer.access_token) {
    throw new ApiError("signin", "Sign-in failed: the issuer did not answer with a bound token", r.status);
  }
  token = answer.access_token;
  return answer;
}

/**
 * One admin API call: `path` under this origin, `body` sent as JSON, `etag` as If-Match. Returns
 * the parsed answer; throws an ApiError whose message says why, and ends the session on 401.
 */
export async function api(method, path, { body, etag } = {}) {
  if (token === null) throw new ApiError("expired", "You are signed out: sign in again.", 401);
  const headers = { accept: "application/json" };
  if (body !== undefined) headers["content-type"] = "application/json";
  if (etag !== undefined) headers["if-match"] = etag;
  const url = new URL(path, location.href);
  const r = await send(url, {
    method,
    headers,
    accessToken: token,
    body: body === undefined ? undefined : JSON.stringify(body),
  });
  if (r.ok) return r.json();
  const { code, why } = await errorOf(r);
  if (r.status === 401) {
    const message = `Your session has ended (${why}). Sign in again.`;
    endSession(message);
    throw new ApiError("expired", message, 401, code);
  }
  if (r.status === 412) {
    throw new ApiError("stale", "Changed by someone else since this page read it: reload and try again.", 412, code);
  }
  if (r.status === 403) throw new ApiError("forbidden", `Not allowed: ${why}`, 403, code);
  throw new ApiError("refused", `Refused: ${why}`, r.status, code);
}
