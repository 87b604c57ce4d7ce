//! `issuer keys ...`: rotating and retiring signing keys, and the Envoy filter's configuration
//! with the current key ring (the listing is the store's [`crate::store::KeyInfo`]s).

use super::{conflict, not_found, AdminError};
use crate::store::{RetireOutcome, Store};
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine as _;

/// The Envoy filter's plugin configuration for `ring` and the access token lifetime, with the
/// filter's defaults spelled out. `docs/filter.md` documents every field; `keys` is the ring of
/// verifying keys. Nothing is exempt: the shipped Envoy configurations keep the filter off the
/// issuer's route in the route table. Without `dpop.public_origin`, which only the operator knows
/// and the filter requires: `issuer keys filter-config --public-origin` adds it.
pub fn filter_config(ring: &shared::KeyRing, access_ttl: u64) -> serde_json::Value {
    let keys: Vec<_> = ring
        .keys()
        .iter()
        .map(|k| serde_json::json!({"kid": k.id(), "secret": URL_SAFE_NO_PAD.encode(k.secret())}))
        .collect();
    serde_json::json!({
        "keys": keys,
        "alternative_header": "ServiceAuthorization",
        "clock_skew_seconds": 30,
        "max_token_lifetime_seconds": access_ttl,
        "realm": "media",
    })
}

/// `keys filter-config`: [`filter_config`] for the store's ring at `now`.
pub(super) async fn store_filter_config(
    store: &dyn Store,
    now: u64,
) -> Result<serde_json::Value, AdminError> {
    Ok(filter_config(
        &store.key_ring(now).await?,
        store.access_ttl().await?,
    ))
}

/// `keys rotate`: a new key, published now, that signs from `delay` seconds on.
pub(super) async fn rotate(store: &dyn Store, delay: u64, now: u64) -> Result<String, AdminError> {
    let Some(r) = store.rotate_key(now, delay).await? else {
        return conflict(
            "a rotation is pending already (see `issuer keys list`); \
             `keys rotate --delay 0` replaces it at once"
                .into(),
        );
    };
    let mut out = if delay == 0 {
        format!(
            "key {} now signs; older keys verify until they retire (see `issuer keys list`)\n",
            r.kid
        )
    } else {
        format!(
            "key {} is published now and signs from {} ({delay} s from now): edges with edge \
             sync learn it before; update static filter configurations before then\n",
            r.kid,
            now + delay
        )
    };
    for kid in &r.dropped {
        out += &format!("pending key {kid} is retired: it never signed and verifies nothing\n");
    }
    Ok(out)
}

/// `keys retire`: key `kid` verifies nothing from now on, unless it still signs or is pending.
pub(super) async fn retire(store: &dyn Store, kid: u32, now: u64) -> Result<String, AdminError> {
    match store.retire_key(kid, now).await? {
        RetireOutcome::Retired => Ok(format!(
            "key {kid} is retired: it verifies nothing from now on (edges with edge sync drop it \
             within a poll; remove it from static filter configurations)\n"
        )),
        RetireOutcome::AlreadyRetired => Ok(format!("key {kid} was retired already\n")),
        RetireOutcome::Unknown => not_found(format!("no key {kid}")),
        RetireOutcome::InUse(state) => conflict(format!(
            "key {kid} is {state}: `issuer keys rotate --delay 0` first (a new key signs at \
             once), then retire it (see `issuer keys list`)"
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn filter_config_is_accepted_by_the_filter() {
        let ring = shared::KeyRing::new(
            vec![shared::Key::new(1, [1; 32]), shared::Key::new(2, [2; 32])],
            Some(2),
        )
        .unwrap();
        let mut config = filter_config(&ring, 900);
        let without_origin = serde_json::to_vec(&config).unwrap();
        let e = filter_core::config::Config::parse(&without_origin).unwrap_err();
        assert!(e.0.contains("dpop.public_origin"), "{e}");
        config["dpop"] = serde_json::json!({"public_origin": "https://media.example.com"});
        let json = serde_json::to_vec(&config).unwrap();
        let cfg = filter_core::config::Config::parse(&json).unwrap();
        assert_eq!(cfg.ring.get(1).unwrap().secret(), &[1; 32]);
        assert_eq!(cfg.ring.get(2).unwrap().secret(), &[2; 32]);
        assert_eq!(cfg.alternative_header, "serviceauthorization");
        assert_eq!(cfg.max_lifetime, 900);
        assert!(cfg.exempt_prefixes.is_empty());
        assert_eq!(cfg.dpop.public_origin, "https://media.example.com");
    }
}
