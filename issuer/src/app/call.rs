//! What an endpoint receives from the HTTP layer: the request's headers, its peer and its whole
//! (bounded) body, with the readings every endpoint shares (client credentials, the client's
//! address, the form content type).
//!
//! A peer is a TCP address or a process on this host that connected to the issuer's Unix socket
//! ([`Peer`]). The socket's peer counts as a loopback peer wherever the issuer treats loopback
//! apart: the edge feed is served to it, it is the address 127.0.0.1 to the back-offs and to
//! `--trusted-proxy` (a proxy on this host, like a loopback Envoy), and logs name it `unix` with
//! the user id the kernel gave for it.

use super::error::ApiError;
use bytes::Bytes;
use shared::basic::parse_basic;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::sync::atomic::{AtomicBool, Ordering};
use warp::http::{header, HeaderMap, HeaderValue};

/// The other end of a connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Peer {
    /// A TCP peer, by its address.
    Tcp(SocketAddr),
    /// A process on this host, connected to the issuer's Unix socket: only the users the
    /// socket's folder and mode let in can be one. `uid`: its user, as the kernel tells
    /// (`SO_PEERCRED`).
    Unix {
        /// The peer process's user id, if the kernel told it.
        uid: Option<u32>,
    },
}

impl Peer {
    /// The address the back-offs, the audit trail and `--trusted-proxy` go by: a TCP peer's (an
    /// IPv4-mapped IPv6 address as IPv4), and 127.0.0.1 for the Unix socket's, which is on this
    /// host as a loopback peer is.
    pub fn ip(&self) -> IpAddr {
        match self {
            Self::Tcp(addr) => addr.ip().to_canonical(),
            Self::Unix { .. } => IpAddr::V4(Ipv4Addr::LOCALHOST),
        }
    }

    /// Whether the peer is on this host: a loopback address, or the Unix socket.
    pub fn is_local(&self) -> bool {
        self.ip().is_loopback()
    }
}

impl std::fmt::Display for Peer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Tcp(addr) => addr.fmt(f),
            Self::Unix { uid: Some(uid) } => write!(f, "unix:uid={uid}"),
            Self::Unix { uid: None } => f.write_str("unix"),
        }
    }
}

/// What a form endpoint receives: headers, peer and the whole (bounded) body.
pub struct Call {
    /// Request headers.
    pub headers: HeaderMap,
    /// The other end of the connection, as seen by the server.
    pub peer: Option<Peer>,
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
        let mut addr = self.peer?.ip();
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

    /// Whether the call came through a proxy on this host (a loopback or Unix socket peer that
    /// sent `X-Forwarded-For`, as the shipped Envoy does) to an issuer that believes no proxy
    /// (`--trust-x-forwarded-for` off): every client behind that proxy then counts, in the
    /// back-offs and the audit trail, as the proxy's one address.
    fn relayed_unheard(&self, trusted: &[ipnet::IpNet]) -> bool {
        trusted.is_empty()
            && self.peer.is_some_and(|p| p.is_local())
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
                peer: Some(Peer::Tcp(peer.parse().unwrap())),
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
                peer: Some(Peer::Tcp(peer.parse().unwrap())),
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

    /// The Unix socket's peer is a proxy on this host, as a loopback peer is: 127.0.0.1 to the
    /// back-offs, believed as a proxy when 127.0.0.1 is trusted, noticed when not believed.
    #[test]
    fn a_unix_socket_peer_counts_as_loopback() {
        let unix = Peer::Unix { uid: Some(108) };
        assert!(unix.is_local());
        assert_eq!(unix.ip(), IpAddr::from([127, 0, 0, 1]));
        assert_eq!(unix.to_string(), "unix:uid=108");
        assert_eq!(Peer::Unix { uid: None }.to_string(), "unix");
        assert!(Peer::Tcp("[::ffff:127.0.0.1]:1".parse().unwrap()).is_local());
        assert!(!Peer::Tcp("192.0.2.1:1".parse().unwrap()).is_local());
        let mut headers = HeaderMap::new();
        headers.insert("x-forwarded-for", HeaderValue::from_static("192.0.2.1"));
        let call = Call {
            headers,
            peer: Some(unix),
            body: Bytes::new(),
        };
        let loopback: Vec<ipnet::IpNet> = vec!["127.0.0.1/32".parse().unwrap()];
        assert_eq!(
            call.client_ip(&loopback),
            Some("192.0.2.1".parse().unwrap())
        );
        assert_eq!(call.client_ip(&[]), Some("127.0.0.1".parse().unwrap()));
        assert!(call.relayed_unheard(&[]));
        let elsewhere: Vec<ipnet::IpNet> = vec!["10.0.0.0/8".parse().unwrap()];
        assert_eq!(
            call.client_ip(&elsewhere),
            Some("127.0.0.1".parse().unwrap())
        );
    }
}
