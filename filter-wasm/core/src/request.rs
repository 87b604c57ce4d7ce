//! One request, from the headers Envoy hands a filter to what the filter tells Envoy: the part of
//! request handling both adapters share (the Wasm filter's `envoy`, the native filter's
//! `native`). Pure, so it is tested and fuzzed natively, and the two adapters cannot drift: each
//! only copies the headers in and carries the [`Action`] out.

use crate::cache::IdentityHeaders;
use crate::config::{is_identity_header, Config};
use crate::decision::{decide, replay_refused, Decision, Outcome};
use crate::dpop::Replays;
use crate::edge::EdgeState;
use shared::VerifyError;

/// What the adapter tells Envoy to do with the request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Action {
    /// Answer here with this status, headers and body; the request goes no further.
    Answer {
        /// 400, 401 or 503.
        status: u32,
        /// `www-authenticate`, `content-type`, `cache-control`, and `retry-after` when the
        /// refusal may end at the next poll of edge sync.
        headers: Vec<(&'static str, String)>,
        /// A small JSON error.
        body: String,
    },
    /// Forward the request, without the headers of the identity namespace and the `DPoP` proof
    /// it came with (their names as the request spelled them, copied: the adapter changes the
    /// map they were read from) and with the verified identity added (none on an exempt path).
    Forward {
        /// The request's identity headers, to remove (usually none, and then no allocation).
        remove: Vec<String>,
        /// The identity headers to set: every name in the identity namespace, so none is in the
        /// request once `remove` is done (the native adapter adds them without a lookup).
        set: Option<IdentityHeaders>,
    },
}

/// An answer of the filter's own, about no token: what an adapter sends when it cannot decide.
/// Both adapters render these, so they answer alike.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Fixed {
    /// The status.
    pub status: u32,
    /// `content-type` and `cache-control`.
    pub headers: [(&'static str, &'static str); 2],
    /// A small JSON error.
    pub body: &'static str,
}

const JSON_NO_STORE: [(&str, &str); 2] = [
    ("content-type", "application/json"),
    ("cache-control", "no-store"),
];

/// 503: nothing can be verified (no configuration, no state yet, a worker Envoy did not
/// announce).
pub const UNAVAILABLE: Fixed = Fixed {
    status: 503,
    headers: JSON_NO_STORE,
    body: r#"{"error":"unavailable"}"#,
};

/// 500: the adapter failed while deciding (the native filter's hook caught a panic).
pub const SERVER_ERROR: Fixed = Fixed {
    status: 500,
    headers: JSON_NO_STORE,
    body: r#"{"error":"server_error"}"#,
};

/// What [`handle`] concluded about one request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Handled {
    /// What to tell Envoy.
    pub action: Action,
    /// The counter the request goes to.
    pub outcome: Outcome,
    /// Why a token failed verification (for a debug log).
    pub reason: Option<VerifyError>,
}

/// A header name as the adapters read it: Envoy's names are lower-case ASCII (its codecs refuse
/// any other byte in a name); a name that is not UTF-8 reads as U+FFFD, which is no header the
/// filter reads or removes.
pub fn name(raw: &[u8]) -> &str {
    std::str::from_utf8(raw).unwrap_or("\u{FFFD}")
}

/// Decides a request from its headers (names as [`name`] reads them, values as raw bytes;
/// `:path` among them), the state and the time; remembers a token that verified in the state's
/// token cache ([`EdgeState::remember`]), and a DPoP proof that passed in `replays`, which
/// refuses one used before.
pub fn handle(
    cfg: &Config,
    state: &EdgeState,
    replays: &dyn Replays,
    headers: &[(&str, &[u8])],
    now: u64,
) -> Handled {
    let path = headers
        .iter()
        .find(|(n, _)| *n == ":path")
        .map_or(&[][..], |(_, v)| *v);
    let mut verdict = decide(cfg, state, path, headers.iter().copied(), now);
    if let Some(proof) = verdict.proof {
        if let Err(replay) = replays.first_use(&proof, now) {
            verdict = replay_refused(cfg, replay);
        }
    }
    if let Some(verified) = verdict.remember {
        state.remember(verified);
    }
    // The proof is the client's business with this Envoy: it never reaches the upstream.
    let forward = |set| Action::Forward {
        remove: headers
            .iter()
            .filter(|(n, _)| is_identity_header(n) || n.eq_ignore_ascii_case("dpop"))
            .map(|(n, _)| (*n).to_owned())
            .collect(),
        set,
    };
    let action = match verdict.decision {
        Decision::Deny(d) => {
            let mut headers = vec![
                ("www-authenticate", d.www_authenticate),
                ("content-type", "application/json".to_owned()),
                ("cache-control", "no-store".to_owned()),
            ];
            if let Some(s) = d.retry_after {
                headers.push(("retry-after", s.to_string()));
            }
            if let Some(nonce) = d.dpop_nonce {
                headers.push(("dpop-nonce", nonce));
            }
            Action::Answer {
                status: d.status,
                headers,
                body: d.body,
            }
        }
        Decision::Exempt => forward(None),
        Decision::Allow(set) => forward(Some(set)),
    };
    Handled {
        action,
        outcome: verdict.outcome,
        reason: verdict.reason,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use shared::token::{self, Identity, SubjectKind, TokenBody};
    use shared::Key;

    const SECRET: [u8; 32] = [7; 32];

    fn replays() -> crate::dpop::ShardedReplays {
        crate::dpop::ShardedReplays::new(1_000, 0)
    }

    fn cfg() -> Config {
        use base64::Engine as _;
        let s = base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(SECRET);
        let json = format!(
            r#"{{"keys":[{{"kid":3,"secret":"{s}"}}],"exempt_prefixes":["/apiv2/oauth/"],{}}}"#,
            crate::config::TEST_DPOP
        );
        Config::parse(json.as_bytes()).unwrap()
    }

    fn bearer(subject: &str, now: u64) -> String {
        let body = TokenBody {
            kid: 3,
            jti: [0xab; 16],
            iat: now,
            exp: now + 60,
            client: "app".into(),
            identity: Identity {
                kind: SubjectKind::User,
                subject: subject.into(),
                roles: vec![],
                claims: vec![],
            },
            cnf: None,
            act: None,
        };
        let t = token::mint(&Key::new(3, SECRET), &body).unwrap();
        format!("Bearer {t}")
    }

    fn request<'a>(path: &'a str, extra: &[(&'a str, &'a str)]) -> Vec<(&'a str, &'a [u8])> {
        let mut h = vec![(":path", path.as_bytes())];
        h.extend(extra.iter().map(|(n, v)| (*n, v.as_bytes())));
        h
    }

    #[test]
    fn a_refusal_is_answered_here_with_its_headers() {
        let (cfg, now) = (cfg(), 1_000);
        let state = EdgeState::new(&cfg, now);
        let headers = request("/apiv2/MediaService/Find", &[("x-auth-subject", "admin")]);
        let handled = handle(&cfg, &state, &replays(), &headers, now);
        assert_eq!(handled.outcome, Outcome::Missing);
        let Action::Answer {
            status,
            headers,
            body,
        } = handled.action
        else {
            panic!("{handled:?}");
        };
        assert_eq!(status, 401);
        let names: Vec<_> = headers.iter().map(|(n, _)| *n).collect();
        assert_eq!(names, ["www-authenticate", "content-type", "cache-control"]);
        assert!(headers[0].1.starts_with("Bearer"), "{headers:?}");
        assert!(body.starts_with('{'), "{body}");
    }

    #[test]
    fn a_forwarded_request_loses_the_identity_it_came_with() {
        let (cfg, now) = (cfg(), 1_000);
        let state = EdgeState::new(&cfg, now);
        // An exempt path: nothing set, the planted identity removed as spelled.
        let planted = [
            ("X-Auth_Subject", "admin"),
            ("x-auth-actors", "media"),
            ("X_AUTH_ACTORS", "media"),
            ("x-auth-actor-origin", "app"),
        ];
        let headers = request("/apiv2/oauth/token", &planted);
        let handled = handle(&cfg, &state, &replays(), &headers, now);
        let expected = Action::Forward {
            remove: planted.iter().map(|(n, _)| (*n).to_owned()).collect(),
            set: None,
        };
        assert_eq!(handled.action, expected);
        // A valid token: its identity set, the planted one removed, and remembered.
        let t = bearer("alice", now);
        let headers = request(
            "/apiv2/MediaService/Find",
            &[("authorization", &t), ("x-auth-subject", "admin")],
        );
        let handled = handle(&cfg, &state, &replays(), &headers, now);
        assert_eq!(handled.outcome, Outcome::Allowed);
        let Action::Forward { remove, set } = &handled.action else {
            panic!("{handled:?}");
        };
        assert_eq!(remove, &["x-auth-subject"]);
        let set = set.as_ref().unwrap();
        assert!(
            set.contains(&("x-auth-subject", "alice".to_owned())),
            "{set:?}"
        );
        // The native adapter adds them without looking: none may be outside what `remove` clears.
        assert!(set.iter().all(|(n, _)| is_identity_header(n)), "{set:?}");
        assert_eq!(state.cache.borrow().len(), 1, "remembered");
        assert_eq!(
            handle(&cfg, &state, &replays(), &headers, now),
            handled,
            "from the cache"
        );
    }

    #[test]
    fn the_fixed_answers_are_json_that_is_never_stored() {
        for a in [UNAVAILABLE, SERVER_ERROR] {
            assert_eq!(a.headers, JSON_NO_STORE);
            assert!(serde_json::from_str::<serde_json::Value>(a.body).is_ok());
        }
        assert_eq!((UNAVAILABLE.status, SERVER_ERROR.status), (503, 500));
    }
}
