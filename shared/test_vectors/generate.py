#!/usr/bin/env python3
"""Writes tokens.json: test vectors for the mmat1 token format, bound mmat2 tokens, actor chains
and JWK thumbprints (RFC 7638).

This is a second, independent implementation of docs/token-format.md (standard library only), so
the vectors check the Rust code against the specification rather than against itself.
Run: python3 shared/test_vectors/generate.py > shared/test_vectors/tokens.json
"""
import base64, hashlib, hmac, json, os, struct, sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import ed25519  # noqa: E402  (the pure-Python signer next to this file)

KEYS = {1: bytes(range(32)), 2: bytes([0xA5] * 32)}
KIND = {"user": 1, "client": 2, "impersonation": 3}


def b64(b):
    return base64.urlsafe_b64encode(b).rstrip(b"=").decode()


def s(x):
    x = x.encode() if isinstance(x, str) else x
    return bytes([len(x)]) + x


def body(kid, jti, iat, exp, kind, client, subject, roles, claims, kind_byte=None, extra=b""):
    out = struct.pack(">I", kid) + jti + struct.pack(">QQ", iat, exp)
    out += bytes([KIND[kind] if kind_byte is None else kind_byte]) + s(client) + s(subject)
    out += bytes([len(roles)]) + b"".join(s(r) for r in roles)
    out += bytes([len(claims)]) + b"".join(s(t) + s(v) for t, v in claims)
    return out + extra


def chain(origin, actors, count=None):
    """The actor chain section: opening byte 1, the origin, the count, the actors outermost first."""
    n = len(actors) if count is None else count
    return bytes([1]) + s(origin) + bytes([n]) + b"".join(s(a) for a in actors)


def sign(raw, kid_for_key, prefix="mmat1."):
    signed = prefix + (raw if isinstance(raw, str) else b64(raw))
    tag = hmac.new(KEYS[kid_for_key], signed.encode(), hashlib.sha256).digest()
    return signed + "." + b64(tag)


valid_specs = [
    ("user with roles and claims", 1, bytes(range(16)), 1700000000, 1700003600, "user", "media-app", "alice",
     ["editor", "viewer"], [("email", "alice@example.com")]),
    ("client itself", 2, bytes([0xFF] * 16), 1700000000, 1700000300, "client", "batch-job", "", [], []),
    ("impersonation by claims", 1, bytes([1] * 16), 1700000000, 1700003600, "impersonation", "svc", "",
     [], [("upn", "carol@corp"), ("group", "ops")]),
    ("legacy impersonation with unicode", 2, bytes([2] * 16), 1, 2, "impersonation", "svc", "Zoë",
     ["admin"], []),
    ("body longer than 384 bytes", 1, bytes([3] * 16), 1700000000, 1700003600, "user", "media-app", "dave",
     ["role-%02d" % i for i in range(48)], [("email", "dave@example.com")]),
]

# RFC 7638 thumbprints: the canonical JSON of the required members, sorted, no whitespace.
def thumbprint(jwk):
    required = {"EC": ("crv", "kty", "x", "y"), "OKP": ("crv", "kty", "x")}[jwk["kty"]]
    canonical = json.dumps({k: jwk[k] for k in required}, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(canonical.encode()).digest()


# The P-256 key of RFC 7515 appendix A.3 and the Ed25519 key of RFC 8037 appendix A.2.
JWKS = [
    {"kty": "EC", "crv": "P-256", "x": "f83OJ3D2xF1Bg8vub9tLe1gHMzV76e8Tus9uPHvRVEU",
     "y": "x_FEzRu9m36HLN_tue659LNpXW6pCyStikYjKIWI5a0"},
    {"kty": "OKP", "crv": "Ed25519", "x": "11qYAYKxCrfVS_7TyWQHOg7hcvPapiMlrwIaaPcHURo"},
]
JKT = thumbprint(JWKS[0])

bound_specs = [
    ("bound client token", 1, bytes([4] * 16), 1700000000, 1700000300, "client", "spa", "", [], [], JKT),
    ("bound user token", 2, bytes([5] * 16), 1700000000, 1700003600, "user", "spa", "erin", ["viewer"], [],
     thumbprint(JWKS[1])),
]

# Tokens from token exchange: (name, kid, jti, iat, exp, kind, client, subject, roles, claims,
# (origin, actors), cnf or None).
chain_specs = [
    ("user acted for by one client", 1, bytes([6] * 16), 1700000000, 1700000300, "user", "uploader", "alice",
     ["editor"], [], ("web", ["uploader"]), None),
    ("bound user token acted for by three clients", 1, bytes([7] * 16), 1700000000, 1700000300, "user",
     "media", "alice", [], [("email", "alice@example.com")], ("web", ["media", "transcoder", "uploader"]), JKT),
    ("client acted for by two", 2, bytes([8] * 16), 1700000000, 1700000300, "client", "transcoder", "", [], [],
     ("batch-job", ["transcoder", "uploader"]), None),
]

valid = []
for name, kid, jti, iat, exp, kind, client, subject, roles, claims, *cnf in valid_specs + bound_specs:
    raw = body(kid, jti, iat, exp, kind, client, subject, roles, claims)
    cnf = cnf[0] if cnf else None
    valid.append({
        "name": name, "kid": kid, "jti": jti.hex(), "iat": iat, "exp": exp, "kind": kind,
        "client": client, "subject": subject, "roles": roles,
        "claims": [{"type": t, "value": v} for t, v in claims],
        "cnf": cnf.hex() if cnf else None,
        "verify_at": iat,
        "token": sign(raw + cnf, kid, prefix="mmat2.") if cnf else sign(raw, kid),
    })
for name, kid, jti, iat, exp, kind, client, subject, roles, claims, (origin, actors), cnf in chain_specs:
    raw = body(kid, jti, iat, exp, kind, client, subject, roles, claims) + chain(origin, actors)
    valid.append({
        "name": name, "kid": kid, "jti": jti.hex(), "iat": iat, "exp": exp, "kind": kind,
        "client": client, "subject": subject, "roles": roles,
        "claims": [{"type": t, "value": v} for t, v in claims],
        "cnf": cnf.hex() if cnf else None,
        "act": {"origin": origin, "actors": actors},
        "verify_at": iat,
        "token": sign(raw + cnf, kid, prefix="mmat2.") if cnf else sign(raw, kid),
    })

good = valid[0]["token"]
good_raw = body(*valid_specs[0][1:])
prefix_body, tag = good.rsplit(".", 1)
now = valid[0]["iat"] + 10

bound = valid[len(valid_specs)]["token"]
bound_raw = body(*bound_specs[0][1:-1]) + bound_specs[0][-1]
bound_prefix_body, bound_tag = bound.rsplit(".", 1)


def flip(ch):
    return "B" if ch != "B" else "C"

invalid = [
    ("empty", "", "malformed"),
    ("prefix only", "mmat1.", "malformed"),
    ("no tag", prefix_body, "malformed"),
    ("other family", good.replace("mmat1.", "xmat1.", 1), "malformed"),
    ("unknown version", sign(good_raw, 1, prefix="mmat3."), "unknown_version"),
    ("bound token relabelled mmat1", bound.replace("mmat2.", "mmat1.", 1), "bad_signature"),
    ("bearer token relabelled mmat2", good.replace("mmat1.", "mmat2.", 1), "bad_signature"),
    # The last base64url characters of the body encode the jkt's last bytes.
    ("bound token with the jkt altered", bound_prefix_body[:-2] + flip(bound_prefix_body[-2]) + bound_prefix_body[-1] + "." + bound_tag,
     "bad_signature"),
    ("bound body without its jkt", sign(bound_raw[:-32], 1, prefix="mmat2."), "malformed"),
    ("bound body with a truncated jkt", sign(bound_raw[:-1], 1, prefix="mmat2."), "malformed"),
    ("bound body signed as mmat1", sign(bound_raw, 1), "malformed"),
    ("bound token truncated", bound[:-5], "malformed"),
    ("tag altered", prefix_body + "." + flip(tag[0]) + tag[1:], "bad_signature"),
    ("body altered", prefix_body[:30] + flip(prefix_body[30]) + prefix_body[31:] + "." + tag, "bad_signature"),
    ("signed with another key under kid 1", sign(good_raw, 2), "bad_signature"),
    ("unknown kid", sign(body(9, bytes(16), 1700000000, 1700003600, "client", "c", "", [], []), 1), "unknown_key"),
    ("body shorter than a key id", sign(b"\x00\x00\x01", 1), "malformed"),
    ("tag too short", prefix_body + "." + tag[:-1], "malformed"),
    ("tag too long", prefix_body + "." + tag + "A", "malformed"),
    ("padded body", sign(base64.urlsafe_b64encode(good_raw + b"\x00").decode(), 1), "malformed"),
    ("standard base64 alphabet", good.replace("-", "+").replace("_", "/") if ("-" in good or "_" in good)
        else sign(base64.b64encode(b"\xfb\xff" + good_raw[2:]).decode().rstrip("="), 1), "malformed"),
    ("trailing byte after the claims", sign(good_raw + b"\x00", 1), "malformed"),
    ("truncated body", sign(good_raw[:-1], 1), "malformed"),
    ("unknown subject kind", sign(body(1, bytes(16), 1, 2, "user", "c", "u", [], [], kind_byte=4), 1), "malformed"),
    ("expiry before issue", sign(body(1, bytes(16), 10, 5, "user", "c", "u", [], []), 1), "malformed"),
    ("empty client", sign(body(1, bytes(16), 1, 2, "client", "", "", [], []), 1), "malformed"),
    ("client kind with a subject", sign(body(1, bytes(16), 1, 2, "client", "c", "u", [], []), 1), "malformed"),
    ("user kind without a subject", sign(body(1, bytes(16), 1, 2, "user", "c", "", [], []), 1), "malformed"),
    ("role with a comma", sign(body(1, bytes(16), 1, 2, "user", "c", "u", ["a,b"], []), 1), "malformed"),
    ("claim type with =", sign(body(1, bytes(16), 1, 2, "impersonation", "c", "", [], [("a=b", "v")]), 1), "malformed"),
    ("control character in subject", sign(body(1, bytes(16), 1, 2, "user", "c", "a\nb", [], []), 1), "malformed"),
    ("invalid UTF-8 in client", sign(body(1, bytes(16), 1, 2, "client", b"\xff\xfe", "", [], []), 1), "malformed"),
    ("chain of no actor", sign(good_raw + chain("web", [], count=0), 1), "malformed"),
    ("chain of nine actors", sign(body(1, bytes(16), 1, 2, "user", "a0", "u", [], [])
                                  + chain("web", ["a%d" % i for i in range(9)]), 1), "malformed"),
    ("chain count past its actors", sign(body(1, bytes(16), 1, 2, "user", "a", "u", [], [])
                                         + chain("web", ["a"], count=2), 1), "malformed"),
    ("chain whose first actor is not the client", sign(good_raw + chain("web", ["uploader"]), 1), "malformed"),
    ("chain naming an actor twice", sign(body(1, bytes(16), 1, 2, "user", "a", "u", [], [])
                                         + chain("web", ["a", "b", "a"]), 1), "malformed"),
    ("chain whose origin acts", sign(body(1, bytes(16), 1, 2, "user", "a", "u", [], [])
                                     + chain("a", ["a"]), 1), "malformed"),
    ("chain with an empty actor", sign(body(1, bytes(16), 1, 2, "user", "a", "u", [], [])
                                       + chain("web", ["a", ""]), 1), "malformed"),
    ("unknown section after the claims", sign(good_raw + bytes([2]) + chain("web", ["media-app"])[1:], 1),
     "malformed"),
    ("trailing byte after the chain", sign(good_raw + chain("web", ["media-app"]) + b"\x00", 1), "malformed"),
    ("bound token with the chain after its jkt", sign(bound_raw + chain("web", ["spa"]), 1, prefix="mmat2."),
     "malformed"),
    ("oversize", "mmat1." + "A" * 4096 + "." + tag, "malformed"),
    ("trailing newline", good + "\n", "malformed"),
    ("leading space", " " + good, "malformed"),
]

# Lifetime failures carry their own clock: the token is otherwise valid.
lifetime = [
    ("expired", good, valid[0]["exp"], 0, "expired"),
    ("expired beyond the skew", good, valid[0]["exp"] + 30, 30, "expired"),
    ("issued in the future", good, valid[0]["iat"] - 31, 30, "not_yet_valid"),
]

# DPoP proofs (RFC 9449 section 4.3), signed with the Ed25519 key of RFC 8037 appendix A.1.
ED_SECRET = base64.urlsafe_b64decode("nWGxne_9WmC6hEr0kuwsxERJxWl7MmkZcDusAxyuf2A=")
assert b64(ed25519.public_key(ED_SECRET)) == JWKS[1]["x"]
# RFC 8037 appendix A.4: the signer reproduces the RFC's own signature.
assert b64(ed25519.sign(ED_SECRET, b"eyJhbGciOiJFZERTQSJ9.RXhhbXBsZSBvZiBFZDI1NTE5IHNpZ25pbmc")) == (
    "hgyY0il_MGCjP0JzlnLWG1PPOt7-09PGcvMg3AIbQR6dWbhijcNR4ki4iylGjg5BhVsPt9g7sVvpAr_MuM0KAg")

D_NOW, D_URL, D_TOKEN = 1700000100, "https://media.example.com/apiv2/MediaService/Find", bound


def jws(header, claims, secret=ED_SECRET):
    signed = b64(json.dumps(header).encode()) + "." + b64(json.dumps(claims).encode())
    return signed + "." + b64(ed25519.sign(secret, signed.encode()))


def proof(header_extra=None, jwk_extra=None, **claims_extra):
    header = {"typ": "dpop+jwt", "alg": "EdDSA", "jwk": dict(JWKS[1], **(jwk_extra or {}))}
    header.update(header_extra or {})
    claims = {"jti": "e1j3V_bKic8-LAEB", "htm": "POST", "htu": D_URL, "iat": D_NOW,
              "ath": b64(hashlib.sha256(D_TOKEN.encode()).digest())}
    claims.update(claims_extra)
    return jws(header, {k: v for k, v in claims.items() if v is not None})


good_proof = proof()
dpop = [
    ("good EdDSA proof", good_proof, None),
    ("htu differing only in case, default port, query and fragment",
     proof(htu="HTTPS://Media.Example.COM:443/apiv2/MediaService/Find?q=1#x"), None),
    ("iat at the edge of the window", proof(iat=D_NOW - 60), None),
    ("iat past the window", proof(iat=D_NOW - 61), "Stale"),
    ("iat ahead of the window", proof(iat=D_NOW + 61), "FromTheFuture"),
    ("other method", proof(htm="GET"), "MethodMismatch"),
    ("other path", proof(htu=D_URL + "/x"), "UrlMismatch"),
    ("no ath", proof(ath=None), "MissingAth"),
    ("ath of another token", proof(ath=b64(hashlib.sha256(b"other").digest())), "AthMismatch"),
    ("empty jti", proof(jti=""), "BadJti"),
    ("typ jwt", proof(header_extra={"typ": "jwt"}), "BadType"),
    ("alg none", b64(json.dumps({"typ": "dpop+jwt", "alg": "none", "jwk": JWKS[1]}).encode()) + "."
     + good_proof.split(".")[1] + ".", "BadAlgorithm"),
    ("alg HS256", proof(header_extra={"alg": "HS256"}), "BadAlgorithm"),
    ("private key in the jwk", proof(jwk_extra={"d": b64(ED_SECRET)}), "PrivateKey"),
    ("EdDSA with a P-256 jwk", proof(header_extra={"jwk": JWKS[0]}), "BadKey"),
    ("signature altered", good_proof[:-3] + ("A" if good_proof[-3] != "A" else "B") + good_proof[-2:],
     "BadSignature"),
    ("signed by another key", jws(json.loads(base64.urlsafe_b64decode(good_proof.split(".")[0] + "==")),
                                  json.loads(base64.urlsafe_b64decode(good_proof.split(".")[1] + "==")),
                                  secret=bytes(32)), "BadSignature"),
    ("two parts", good_proof.rsplit(".", 1)[0], "Malformed"),
    ("oversize", "A" * 8193, "TooLong"),
]

# Whether a key-less reader (inspection: the browser/Node module) reads the token: every body that
# decodes under its own version prefix does, forged or expired or not. A token moved to the other
# version's prefix does not: the body's length no longer fits.
UNREADABLE = {"malformed", "unknown_version"}
RELABELLED = {"bound token relabelled mmat1", "bearer token relabelled mmat2"}


def inspects(name, reason):
    return reason not in UNREADABLE and name not in RELABELLED


out = {
    "format": "mmat1 and mmat2",
    "thumbprints": [{"jwk": j, "jkt": b64(thumbprint(j))} for j in JWKS],
    "keys": [{"kid": k, "secret": v.hex()} for k, v in sorted(KEYS.items())],
    "valid": valid,
    "dpop": {
        "now": D_NOW, "method": "POST", "url": D_URL, "access_token": D_TOKEN, "window": 60,
        "jkt": b64(thumbprint(JWKS[1])),
        "proofs": [{"name": n, "proof": pr, "error": e} for n, pr, e in dpop],
    },
    "invalid": [{"name": n, "token": t, "now": now, "skew": 0, "reason": r, "inspects": inspects(n, r)}
                for n, t, r in invalid]
             + [{"name": n, "token": t, "now": at, "skew": sk, "reason": r, "inspects": inspects(n, r)}
                for n, t, at, sk, r in lifetime],
}
print(json.dumps(out, indent=2, ensure_ascii=False))
