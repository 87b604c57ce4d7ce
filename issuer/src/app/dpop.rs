//! DPoP at the token endpoint (RFC 9449 sections 4.3, 5 and 8): the proof a token request
//! carries, checked by `shared::dpop`, accepted once by every issuer of the store
//! ([`crate::store::ProofIds`]), and the client's policy. A request with a valid proof gets a
//! token bound to the proof's key (`mmat2`, `token_type` `DPoP`); the rules and their reasons
//! are in `docs/dpop.md` and `docs/issuer.md`.

use super::{now, ApiError, App, Call};
use crate::store::{ClientRecord, DpopPolicy};
use shared::dpop::{self, check_proof, Expect, NonceCheck, Proof, NONCE_SLOT_SECONDS};

/// The issuer's DPoP settings.
#[derive(Debug, Clone, Copy)]
pub struct DpopSettings {
    /// Seconds a proof's `iat` may be from now, either way; its id is kept that long after it.
    pub proof_seconds: u64,
    /// Proofs must carry a current server nonce.
    pub nonce_required: bool,
}

impl Default for DpopSettings {
    fn default() -> Self {
        Self {
            proof_seconds: 60,
            nonce_required: false,
        }
    }
}

/// The algorithms proofs may be signed with, for the metadata document.
pub const ALGORITHMS: [&str; 2] = ["ES256", "EdDSA"];

/// The `DPoP` header of a request: `None` without one. More than one header, a list, or bytes
/// that are not visible ASCII (a proof is base64url and dots) are refused.
fn proof_header(call: &Call) -> Result<Option<&str>, ApiError> {
    let mut all = call.headers.get_all("dpop").iter();
    let Some(first) = all.next() else {
        return Ok(None);
    };
    if all.next().is_some() {
        return Err(ApiError::invalid_dpop_proof("more than one DPoP header"));
    }
    let text = first
        .to_str()
        .map_err(|_| ApiError::invalid_dpop_proof("the DPoP header is not a proof"))?;
    if text.contains(',') {
        return Err(ApiError::invalid_dpop_proof("one proof per DPoP header"));
    }
    Ok(Some(text.trim()))
}

impl App {
    /// The token endpoint's URL, the `htu` every proof sent to it must name.
    pub(crate) fn token_endpoint(&self) -> String {
        format!(
            "{}/apiv2/oauth/token",
            self.settings.public_url.trim_end_matches('/')
        )
    }

    /// A server nonce for now (`DPoP-Nonce`), made with the signing key.
    pub(crate) fn dpop_nonce(&self) -> Option<String> {
        let ring = self.ring();
        let key = ring.signing_key()?;
        Some(dpop::nonce_for(key, now(), NONCE_SLOT_SECONDS))
    }

    /// The proof the token request carries, checked and recorded as used: `None` without one,
    /// which a client that requires DPoP is refused.
    pub(crate) async fn token_proof(
        &self,
        call: &Call,
        client: &ClientRecord,
    ) -> Result<Option<Proof>, ApiError> {
        let Some(text) = proof_header(call)? else {
            if client.dpop == DpopPolicy::Required {
                self.metrics.dpop_proof("required");
                return Err(ApiError::invalid_dpop_proof(
                    "this client must send a DPoP proof",
                ));
            }
            return Ok(None);
        };
        let settings = self.settings.dpop;
        let ring = self.ring();
        let url = self.token_endpoint();
        let at = now();
        let expect = Expect {
            method: "POST",
            url: &url,
            access_token: None,
            now: at,
            window_seconds: settings.proof_seconds,
            nonce_check: if settings.nonce_required {
                NonceCheck::Required {
                    ring: &ring,
                    window: NONCE_SLOT_SECONDS,
                }
            } else {
                NonceCheck::Off
            },
        };
        let proof = check_proof(text, &expect).map_err(|e| {
            self.metrics.dpop_proof(e.error_code());
            tracing::debug!(reason = ?e, "DPoP proof refused");
            match e.error_code() {
                "use_dpop_nonce" => ApiError::use_dpop_nonce(self.dpop_nonce()),
                _ => ApiError::invalid_dpop_proof(e.description()),
            }
        })?;
        // An embedded store keeps proof ids in memory ([`crate::store::ProofIds`]): a proof made
        // before this issuer started may have been used before, and is refused.
        if !self.settings.shared_store && proof.iat < self.started_at {
            self.metrics.dpop_proof("before_start");
            return Err(ApiError::invalid_dpop_proof(
                "the proof was made before the issuer started; make a new one",
            ));
        }
        let expires = proof.remember_until(settings.proof_seconds, at);
        if !self
            .store
            .first_use(&proof.replay_id(), expires, at)
            .await?
        {
            self.metrics.dpop_proof("replayed");
            return Err(ApiError::invalid_dpop_proof("the proof was used before"));
        }
        self.metrics.dpop_proof("accepted");
        Ok(Some(proof))
    }
}
