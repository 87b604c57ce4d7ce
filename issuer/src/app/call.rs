//! What an endpoint receives from the HTTP layer: the request's headers, its peer and its whole
//! (bounded) body, with the readings every endpoint shares (client credentials, the client's
//! address, the form content type).

use super::error::ApiError;
use bytes::Bytes;
use shared::basic::parse_basic;
use std::net::{IpAddr, SocketAddr};
use std::sync::atomic::{AtomicBool, Ordering};
use warp::http::{header, HeaderMap, HeaderValue};

/// What a form endpoint receives: headers, peer and the whole (bounded) body.
pub struct Call {
    /// Request headers.
    pub headers: HeaderMap,
    /// Source address as seen by the server.
    pub peer: Option<SocketAddr>,
    /// The body.
    pub body: Bytes,
}

impl Call {
    /// The client address for throttling. The peer, unless the peer is one of the `trusted`
    /// proxies: then `X-Forwarded-For` is read from the right (each proxy appends the address it
    /// saw) and the first entry that is not a trusted proxy is the client. An entry that is not an
    /// address ends the walk at the last address known good, so a client can never choose its
    /// own address by sending the header itself.
    pub fn client_ip(&self, trusted: &[ipnet::IpNet]) -> Option<IpAddr> {
        if self.relayed_unheard(trusted) {
            warn_forwarding_ignored();
        }
        let is_trusted = |ip: &IpAddr| trusted.iter().any(|n| n.contains(ip));
        let mut addr = self.peer?.ip().to_canonical();
        if !is_trusted(&addr) {
            return Some(addr);
        }
        let entries: Vec<&[u8]> = self
            .headers
            .get_all("x-forwarded-for")
            .iter()
            .flat_map(|v| v.as_bytes().split(|&c| c == b','))
            .collect();
        for entry in entries.into_iter().rev() {
            let Some(ip) = std::str::from_utf8(entry)
                .ok()
                .and_then(|s| s.trim().parse::<IpAddr>().ok())
            else {
                break;
            };
            addr = ip.to_canonical();
            if !is_trusted(&addr) {
                break;
            }
        }
        Some(addr)
    }

    /// Whether the call came through a proxy on this host (a loopback peer that sent
    /// `X-Forwarded-For`, as the shipped Envoy does) to an issuer that believes no proxy
    /// (`--trust-x-forwarded-for` off): every client behind that proxy then counts, in the
    /// back-offs and the audit trail, as the proxy's one address.
    fn relayed_unheard(&self, trusted: &[ipnet::IpNet]) -> bool {
        trusted.is_empty()
            && self
                .peer
                .is_some_and(|p| p.ip().to_canonical().is_loopback())
            && self.headers.contains_key("x-forwarded-for")
    }

    /// The one `Authorization` header, if exactly one was sent.
    pub fn authorization(&self) -> Option<&HeaderValue> {
        let mut all = self.headers.get_all(header::AUTHORIZATION).iter();
        let first = all.next()?;
        all.next().is_none().then_some(first)
    }

    /// Refuses bodies that are not `application/x-www-form-urlencoded`.
    pub fn require_form(&self) -> Result<(), ApiError> {
        let ok = self
            .headers
            .get(header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.split(';').next())
            .is_some_and(|m| {
                m.trim()
                    .eq_ignore_ascii_case("application/x-www-form-urlencoded")
            });
        if ok && self.headers.get_all(header::CONTENT_TYPE).iter().count() == 1 {
            Ok(())
        } else {
            Err(ApiError::invalid_request(
                "content type must be application/x-www-form-urlencoded",
            ))
        }
    }
}

/// Says once per process that a proxy on this host relays to an issuer that ignores its
/// `X-Forwarded-For` ([`Call::relayed_unheard`]).
fn warn_forwarding_ignored() {
    static WARNED: AtomicBool = AtomicBool::new(false);
    if !WARNED.swap(true, Ordering::Relaxed) {
        tracing::warn!(
            "X-Forwarded-For from a proxy on this host ignored: every client behind it counts \
             as its one address in the sign-in back-off and the audit trail; run the issuer with \
             --trust-x-forwarded-for (docs/deploy-envoy.md)"
        );
    }
}

/// Parses the `Authorization` header of a call into client credentials.
pub fn client_credentials(call: &Call) -> Result<shared::basic::ClientCredentials, ApiError> {
    let value = call.authorization().ok_or_else(ApiError::invalid_client)?;
    parse_basic(value.as_bytes()).map_err(|_| ApiError::invalid_client())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn forwarded_addresses_are_believed_only_from_trusted_proxies() {
        let trusted: Vec<ipnet::IpNet> = vec![
            "127.0.0.1/32".parse().unwrap(),
            "10.0.0.0/8".parse().unwrap(),
        ];
        let call = |peer: &str, xff: &[&[u8]]| {
            let mut headers = HeaderMap::new();
            for v in xff {
                headers.append("x-forwarded-for", HeaderValue::from_bytes(v).unwrap());
            }
            Call {
                headers,
                peer: Some(peer.parse().unwrap()),
                body: Bytes::new(),
            }
            .client_ip(&trusted)
            .map(|ip| ip.to_string())
        };
        let ip = |s: &str| Some(s.to_owned());
        // Through one trusted proxy: the address it appended.
        assert_eq!(call("127.0.0.1:1", &[b"192.0.2.1"]), ip("192.0.2.1"));
        // A client's own entries left of it are not believed.
        assert_eq!(
            call("127.0.0.1:1", &[b"198.51.100.1, 192.0.2.1"]),
            ip("192.0.2.1")
        );
        // Through a chain of trusted proxies, from the right.
        assert_eq!(
            call("127.0.0.1:1", &[b"192.0.2.1", b"10.1.2.3"]),
            ip("192.0.2.1")
        );
        // From a peer that is not a trusted proxy the header is ignored.
        assert_eq!(call("192.0.2.9:1", &[b"198.51.100.1"]), ip("192.0.2.9"));
        // Garbage ends the walk at the last address known good.
        assert_eq!(
            call("127.0.0.1:1", &[b"\xff\xfe, 10.1.2.3"]),
            ip("10.1.2.3")
        );
        assert_eq!(call("127.0.0.1:1", &[b"unknown"]), ip("127.0.0.1"));
        assert_eq!(call("127.0.0.1:1", &[]), ip("127.0.0.1"));
        // IPv4-mapped peers count as their IPv4 address.
        assert_eq!(
            call("[::ffff:127.0.0.1]:1", &[b"192.0.2.1"]),
            ip("192.0.2.1")
        );
        assert_eq!(
            Call {
                headers: HeaderMap::new(),
                peer: None,
                body: Bytes::new()
            }
            .client_ip(&trusted),
            None
        );
    }

    /// Without `--trust-x-forwarded-for` every caller behind the shipped Envoy is the peer
    /// 127.0.0.1: that is what the issuer warns of, and only that.
    #[test]
    fn a_proxy_on_this_host_that_is_not_believed_is_noticed() {
        let call = |peer: &str, xff: Option<&str>| {
            let mut headers = HeaderMap::new();
            if let Some(v) = xff {
                headers.insert("x-forwarded-for", HeaderValue::from_str(v).unwrap());
            }
            Call {
                headers,
                peer: Some(peer.parse().unwrap()),
                body: Bytes::new(),
            }
        };
        let loopback: Vec<ipnet::IpNet> = vec!["127.0.0.1/32".parse().unwrap()];
        let relayed = call("127.0.0.1:1", Some("192.0.2.1"));
        assert!(relayed.relayed_unheard(&[]));
        assert_eq!(relayed.client_ip(&[]), Some("127.0.0.1".parse().unwrap()));
        assert!(call("[::1]:1", Some("192.0.2.1")).relayed_unheard(&[]));
        assert!(call("[::ffff:127.0.0.1]:1", Some("192.0.2.1")).relayed_unheard(&[]));
        // Believed, not a proxy, or from afar: nothing to say.
        assert!(!relayed.relayed_unheard(&loopback));
        assert!(!call("127.0.0.1:1", None).relayed_unheard(&[]));
        assert!(!call("192.0.2.9:1", Some("198.51.100.1")).relayed_unheard(&[]));
    }
}
