//! `POST /apiv2/oauth/register` (RFC 7591): a client registers itself with its vendor's software
//! statement (`docs/clients.md`). Off unless `registration = true`, where it answers 404 as any
//! unknown path. The statement is checked against the trusted vendors and imported as
//! `issuer client import` does (a pending client, the same one again, or a newer statement), by
//! the admin command of that, so the audit trail holds every registration and every refusal.
//! Each address gets [`PER_MINUTE`] registrations a minute, refused or not.

use super::super::{now, ApiError, App, Call};
use crate::admin::{describe_refusal, execute_as, AdminError, Command, VendorImport};
use crate::vendor::{statement, Refusal};
use serde_json::{json, Value};
use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::Mutex;
use warp::http::StatusCode;

/// Registrations one address may make a minute.
pub const PER_MINUTE: u32 = 10;
/// Addresses remembered; the memory is emptied when full.
const MAX_ADDRESSES: usize = 10_000;

/// Registrations per address in the current minute.
#[derive(Default)]
pub(in crate::app) struct Budget(Mutex<HashMap<Option<IpAddr>, (u64, u32)>>);

impl Budget {
    /// Takes one registration of `ip` at `now`; the seconds to wait when none is left.
    fn take(&self, ip: Option<IpAddr>, now: u64) -> Result<(), u64> {
        let mut book = self.0.lock().unwrap_or_else(|p| p.into_inner());
        if book.len() >= MAX_ADDRESSES && !book.contains_key(&ip) {
            book.clear();
        }
        let minute = now / 60;
        let (at, used) = book.entry(ip).or_insert((minute, 0));
        if *at != minute {
            (*at, *used) = (minute, 0);
        }
        if *used >= PER_MINUTE {
            return Err(60 - now % 60);
        }
        *used += 1;
        Ok(())
    }
}

/// An RFC 7591 error answer (400).
fn refusal(code: &'static str, description: impl Into<String>) -> ApiError {
    ApiError::new(StatusCode::BAD_REQUEST, code, description.into())
}

impl App {
    /// Registers the client of the statement the request carries: 201 with its metadata (the
    /// HTTP layer sets the status), or an RFC 7591 error.
    pub async fn register(&self, call: &Call) -> Result<Value, ApiError> {
        if !self
            .vendor
            .registration
            .load(std::sync::atomic::Ordering::Relaxed)
        {
            return Err(ApiError::new(
                StatusCode::NOT_FOUND,
                "not_found",
                "no such endpoint",
            ));
        }
        let ip = call.client_ip(&self.settings.trusted_proxies);
        self.vendor
            .registrations
            .take(ip, now())
            .map_err(ApiError::throttled)?;
        let jws = statement_of(call)?;
        let actor = format!(
            "registration from {}",
            ip.map_or("?".into(), |i| i.to_string())
        );
        let verified = match statement::verify(&jws, &self.trust(), now()) {
            Ok(v) => v,
            Err(r) => return Err(self.refused(&r, &actor).await),
        };
        let import = VendorImport::of(verified, &jws);
        let cmd = Command::ClientImport(import.clone());
        match execute_as(self.store.as_ref(), &cmd, now(), &actor).await {
            Ok(_) => {}
            Err(AdminError::Vendor(r)) => {
                let (code, description) = describe_refusal(&r);
                return Err(refusal(code, description));
            }
            Err(AdminError::Store(e)) => return Err(ApiError::store(&e)),
            Err(e) => return Err(ApiError::internal(&e)),
        }
        self.clients_changed();
        let s = import.statement;
        Ok(json!({
            "client_id": s.client_id,
            "client_name": s.client_name,
            "software_id": s.software_id,
            "grant_types": s.grant_types,
            "token_endpoint_auth_method": "client_secret_basic",
            "software_statement": jws,
            "client_secret_expires_at": s.exp,
            "status": "pending",
        }))
    }

    /// Audits the refusal `r` of a statement registered by `actor`; its answer.
    async fn refused(&self, r: &Refusal, actor: &str) -> ApiError {
        let (code, description) = describe_refusal(r);
        let cmd = Command::VendorRefused {
            target: "registration".into(),
            error: code.into(),
            description: description.clone(),
        };
        if let Err(e) = execute_as(self.store.as_ref(), &cmd, now(), actor).await {
            tracing::warn!(
                error = e.to_string(),
                "a refused registration was not audited"
            );
        }
        tracing::info!(error = code, "registration refused");
        refusal(code, description)
    }
}

/// The statement of an RFC 7591 registration request: a JSON object whose `software_statement`
/// is a string (its other metadata are the statement's to say, and are ignored).
fn statement_of(call: &Call) -> Result<String, ApiError> {
    let json_type = call
        .headers
        .get("content-type")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.split(';').next())
        .is_some_and(|t| t.trim().eq_ignore_ascii_case("application/json"));
    if !json_type {
        return Err(ApiError::invalid_request(
            "a registration is a JSON object (Content-Type: application/json)",
        ));
    }
    let body: Value = serde_json::from_slice(&call.body)
        .map_err(|_| refusal("invalid_client_metadata", "the body is not a JSON object"))?;
    body.get("software_statement")
        .and_then(Value::as_str)
        .map(str::to_owned)
        .ok_or_else(|| {
            refusal(
                "invalid_software_statement",
                "a registration carries its vendor's `software_statement`",
            )
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_address_gets_its_budget_a_minute() {
        let budget = Budget::default();
        let ip = Some("192.0.2.1".parse().unwrap());
        for _ in 0..PER_MINUTE {
            budget.take(ip, 600).unwrap();
        }
        assert_eq!(budget.take(ip, 610), Err(50));
        budget
            .take(Some("192.0.2.2".parse().unwrap()), 610)
            .unwrap();
        budget.take(ip, 660).unwrap();
    }
}
