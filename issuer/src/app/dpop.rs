//! DPoP at the token endpoint (RFC 9449 sections 4.3, 5 and 8): the proof a token request
//! carries, checked by `shared::dpop`, accepted once by every issuer of the store
//! ([`crate::store::ProofIds`]), and the client's policy. A request with a valid proof gets a
//! token bound to the proof's key (`mmat2`, `token_type` `DPoP`); the rules and their reasons
//! are in `docs/dpop.md` and `docs/issuer.md`.

use super::{now, ApiError, App, Call};
use crate::store::{ClientRecord, DpopPolicy};
use shared::dpop::replay::{predates, Replay};
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
pub(super) fn proof_header(call: &Call) -> Result<Option<&str>, ApiError> {
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

    /// The answer to a proof the memory of used proofs refused, counted.
    fn replay_refused(&self, replay: Replay) -> ApiError {
        let (reason, error) = match replay {
            Replay::Replayed => (
                "replayed",
                ApiError::invalid_dpop_proof("the proof was used before"),
            ),
            Replay::TooOld => (
                "too_old",
                ApiError::invalid_dpop_proof(
                    "the proof is older than this issuer can vouch for; make a new one",
                ),
            ),
            Replay::KeyBusy => (
                "key_busy",
                ApiError::slow_down(1, "too many live DPoP proofs of this key; retry shortly"),
            ),
            Replay::Busy => (
                "busy",
                ApiError::slow_down(1, "too many DPoP proofs at the moment"),
            ),
        };
        self.metrics.dpop_proof(reason);
        error
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
        let url = self.token_endpoint();
        self.accept_proof(text, "POST", &url, None).await.map(Some)
    }

    /// The proof `text` of a request by `method` to `url` (with `access_token`, whose hash it
    /// must carry, at a resource), checked and recorded as used by every issuer of the store.
    pub(crate) async fn accept_proof(
        &self,
        text: &str,
        method: &str,
        url: &str,
        access_token: Option<&str>,
    ) -> Result<Proof, ApiError> {
        let settings = self.settings.dpop;
        let ring = self.ring();
        let at = now();
        let expect = Expect {
            method,
            url,
            access_token,
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
        // An embedded store keeps proof ids in memory ([`crate::store::ProofIds`]): a proof that
        // may have been accepted before this issuer started is refused.
        let accepted = proof.accepted(settings.proof_seconds, at);
        if !self.settings.shared_store && predates(&accepted, self.started_at) {
            self.metrics.dpop_proof("before_start");
            return Err(ApiError::invalid_dpop_proof(
                "the proof was made before the issuer started; make a new one",
            ));
        }
        if let Err(replay) = self.store.first_use(&accepted, at).await? {
            return Err(self.replay_refused(replay));
        }
        self.metrics.dpop_proof("accepted");
        Ok(proof)
    }
}
