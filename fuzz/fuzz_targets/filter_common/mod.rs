//! What the two filter fuzz targets (`filter_decide`, `filter_request`) share: the filter's
//! configuration, one edge state for the whole run, and the check that a request carried a
//! token that verifies.

use filter_core::config::Config;
use filter_core::edge::EdgeState;
use std::sync::OnceLock;

/// A key ring of one key, the issuer's path exempt, and the origin proofs must name.
pub fn config() -> &'static Config {
    static CONFIG: OnceLock<Config> = OnceLock::new();
    CONFIG.get_or_init(|| {
        Config::parse(
            br#"{"keys":[{"kid":1,"secret":"BwcHBwcHBwcHBwcHBwcHBwcHBwcHBwcHBwcHBwcHBwc"}],"exempt_prefixes":["/apiv2/oauth/"],"dpop":{"public_origin":"https://media.example.com"}}"#,
        )
        .expect("valid configuration")
    })
}

thread_local! {
    /// One state for the whole run: its token cache fills with the tokens that verified, as an
    /// adapter remembers them.
    pub static STATE: EdgeState = EdgeState::new(config(), 0);
}

/// True if a comma-separated element of a header value, past its first 7 bytes (where `Bearer `
/// is), is a token that verifies at `now`.
pub fn a_token_verifies(cfg: &Config, headers: &[(&str, &[u8])], now: u64) -> bool {
    headers.iter().any(|(_, v)| {
        std::str::from_utf8(v).ok().is_some_and(|s| {
            s.split(',').any(|part| {
                let t = part.trim().get(7..).unwrap_or("").trim_start();
                shared::token::verify(&cfg.ring, t, now, cfg.clock_skew).is_ok()
            })
        })
    })
}
