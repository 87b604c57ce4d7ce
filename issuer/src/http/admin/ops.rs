//! What each admin route does ([`run`]), through the admin commands (`crate::admin`): the
//! listings as items, pages and ETags ([`super::items`]), each change checked against the item
//! as the caller read it (`If-Match`: 428 without, 412 when stale), run one at a time, audited
//! with the caller's user, client and address, and answered with the item after it.

use super::bodies::ListQuery;
use super::bodies::{parse_body, Activate, Empty, Import, Narrow};
use super::items;
use super::table::{Op, Route};
use super::{me, refusal, AdminHttp};
use crate::admin::{self, Actor, AdminError, Command, RefusalKind, Reply, VendorImport};
use crate::app::{now, AdminCaller, ApiError, Call};
use crate::store::GrantKind;
use serde::de::DeserializeOwned;
use serde_json::{json, Value};
use warp::http::{header, StatusCode};

/// A request that passed the route's checks.
pub(super) struct Request<'a> {
    /// The route's `{id}`, decoded.
    pub id: Option<String>,
    /// The raw query string.
    pub query: &'a str,
    /// The request.
    pub call: &'a Call,
    /// Who calls.
    pub caller: &'a AdminCaller,
}

type Answer = Result<(StatusCode, Value), ApiError>;

/// Does `route` for `req`.
pub(super) async fn run(state: &AdminHttp, route: &Route, req: Request<'_>) -> Answer {
    let ok = |v: Value| Ok((StatusCode::OK, v));
    if let Some(id) = &req.id {
        check_id(route.op, id)?;
    }
    match route.op {
        Op::Me => ok(me(req.caller)),
        Op::ClientList => ok(super::lists::clients(state, &query(&req)?).await?),
        Op::ClientGet => ok(client_item(state, id(&req)?).await?),
        Op::UserList => ok(super::lists::users(state, &query(&req)?).await?),
        Op::KeyList => ok(key_list(state, &query(&req)?).await?),
        Op::Edges => ok(edges(state).await?.0),
        Op::AuditList => ok(super::audit::list(state, &query(&req)?).await?),
        Op::SessionList => ok(super::sessions::list(state, &query(&req)?).await?),
        Op::ClientImport => import(state, &req).await,
        Op::ClientActivate | Op::ClientNarrow | Op::ClientDeactivate => {
            client_change(state, route.op, &req).await
        }
        Op::UserDisable | Op::UserEnable => user_change(state, route.op, &req).await,
        Op::SessionRevoke => super::sessions::revoke(state, &req).await,
        Op::KeyRotate => rotate(state, &req).await,
    }
}

fn query(req: &Request<'_>) -> Result<ListQuery, ApiError> {
    ListQuery::parse(req.query).map_err(|e| refusal(StatusCode::BAD_REQUEST, "invalid_request", &e))
}

/// 400 `invalid_request` for a client id or a user name in the path that breaks the rules
/// every stored one meets ([`admin::input`]): it names nothing, whatever the store holds. A
/// session id is checked by its route.
fn check_id(op: Op, id: &str) -> Result<(), ApiError> {
    let checked = match op {
        Op::ClientGet | Op::ClientActivate | Op::ClientNarrow | Op::ClientDeactivate => {
            admin::input::check_client_id(id)
        }
        Op::UserDisable | Op::UserEnable => admin::input::check_user_name(id),
        _ => Ok(()),
    };
    checked.map_err(failed)
}

fn id<'r>(req: &'r Request<'_>) -> Result<&'r str, ApiError> {
    req.id
        .as_deref()
        .ok_or_else(|| refusal(StatusCode::NOT_FOUND, "not_found", "no such item"))
}

fn unexpected() -> ApiError {
    ApiError::internal(&"an admin command answered with another reply")
}

/// The status and `error` code the API answers a refusal of `kind` with: the one place they
/// are set (`docs/admin-api.md`, Errors).
pub(super) fn refusal_status(kind: RefusalKind) -> (StatusCode, &'static str) {
    match kind {
        RefusalKind::NotFound => (StatusCode::NOT_FOUND, "not_found"),
        RefusalKind::Invalid => (StatusCode::BAD_REQUEST, "invalid_request"),
        RefusalKind::Conflict => (StatusCode::CONFLICT, "conflict"),
    }
}

/// A command's failure as the API answers it: a refusal by its kind ([`refusal_status`]), a
/// vendor's statement refused 400, a store failure as the token endpoint's.
pub(super) fn failed(e: AdminError) -> ApiError {
    match e {
        AdminError::Store(s) | AdminError::Unrecorded(s) => ApiError::store(&s),
        AdminError::Refused { kind, why } => {
            let (status, code) = refusal_status(kind);
            refusal(status, code, &why)
        }
        AdminError::Vendor(r) => {
            let (_, description) = admin::describe_refusal(&r);
            refusal(StatusCode::BAD_REQUEST, "invalid_request", &description)
        }
    }
}

/// Runs the listing `cmd`.
pub(super) async fn read(state: &AdminHttp, cmd: &Command) -> Result<Reply, ApiError> {
    admin::execute_as(state.app.store.as_ref(), cmd, now(), "admin-http")
        .await
        .map_err(failed)
}

/// Runs the change `cmd` for `caller`, audited with its user, client and address, and makes
/// it take effect on this issuer at once.
pub(super) async fn change(
    state: &AdminHttp,
    cmd: &Command,
    caller: &AdminCaller,
) -> Result<Reply, ApiError> {
    let actor = Actor {
        name: &caller.user,
        client: Some(&caller.client),
        address: Some(&caller.address),
    };
    let app = &state.app;
    let done = admin::execute_by(app.store.as_ref(), cmd, now(), &actor).await;
    app.clients_changed();
    app.reload_revocations().await;
    if cmd.changes_keys() {
        app.reload_keys().await?;
    }
    done.map_err(failed)
}

/// The body of a change as `T`: JSON (415 otherwise), unknown fields refused (400).
pub(super) fn body<T: DeserializeOwned>(call: &Call) -> Result<T, ApiError> {
    let json = call
        .headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.split(';').next())
        .is_some_and(|m| m.trim().eq_ignore_ascii_case("application/json"));
    if !json {
        return Err(refusal(
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            "unsupported_media_type",
            "the body must be application/json",
        ));
    }
    parse_body(&call.body).map_err(|e| refusal(StatusCode::BAD_REQUEST, "invalid_request", &e))
}

/// 428 without `If-Match`, 412 unless it names `current` (the item as it is now).
pub(super) fn precondition(call: &Call, current: &Value) -> Result<(), ApiError> {
    let Some(sent) = call
        .headers
        .get(header::IF_MATCH)
        .and_then(|v| v.to_str().ok())
    else {
        return Err(refusal(
            StatusCode::PRECONDITION_REQUIRED,
            "precondition_required",
            "a change needs If-Match with the item's etag as read",
        ));
    };
    let now = current["etag"].as_str().unwrap_or_default();
    if items::matches(sent, now) {
        return Ok(());
    }
    Err(refusal(
        StatusCode::PRECONDITION_FAILED,
        "stale",
        "the item changed since it was read: read it again",
    ))
}

/// The answer to a change: the item after it and the sentence saying what was done.
pub(super) fn done(item: Value, reply: Reply) -> Answer {
    let message = match reply {
        Reply::Text(t) => t.trim_end().to_owned(),
        _ => "done".to_owned(),
    };
    Ok((StatusCode::OK, json!({"item": item, "message": message})))
}

async fn client_item(state: &AdminHttp, id: &str) -> Result<Value, ApiError> {
    let rec = state.app.store.client(id).await?;
    rec.map(|c| items::client_item(&admin::ClientView::of(id.to_owned(), c)))
        .ok_or_else(|| refusal(StatusCode::NOT_FOUND, "not_found", "no such client"))
}

async fn client_change(state: &AdminHttp, op: Op, req: &Request<'_>) -> Answer {
    let id = id(req)?.to_owned();
    let cmd = match op {
        Op::ClientActivate => {
            let b: Activate<GrantKind> = body(req.call)?;
            Command::ClientActivate {
                id: id.clone(),
                grants: b.grants,
                no_impersonation: b.no_impersonation,
            }
        }
        Op::ClientNarrow => {
            let b: Narrow<GrantKind> = body(req.call)?;
            narrowed(state, &id, b).await?
        }
        _ => {
            let _: Empty = body(req.call)?;
            Command::ClientDeactivate { id: id.clone() }
        }
    };
    let _one = state.changes.lock().await;
    let before = client_item(state, &id).await?;
    precondition(req.call, &before)?;
    if op == Op::ClientActivate && before["state"] == "active" {
        return Err(refusal(
            StatusCode::CONFLICT,
            "conflict",
            "the client is active already",
        ));
    }
    let reply = change(state, &cmd, req.caller).await?;
    done(client_item(state, &id).await?, reply)
}

/// `narrow`: the update that keeps an active vendor client's settings but its grants and
/// impersonation (never wider than its statement: the command refuses that).
async fn narrowed(state: &AdminHttp, id: &str, b: Narrow<GrantKind>) -> Result<Command, ApiError> {
    let rec = state.app.store.client(id).await?;
    let Some(rec) = rec else {
        return Err(refusal(
            StatusCode::NOT_FOUND,
            "not_found",
            "no such client",
        ));
    };
    if rec.vendor.is_none() || !rec.active {
        return Err(refusal(
            StatusCode::CONFLICT,
            "conflict",
            "only an active vendor's client is narrowed",
        ));
    }
    Ok(Command::ClientUpdate {
        id: id.to_owned(),
        grants: b.grants,
        impersonate: rec.impersonate && !b.no_impersonation,
        claim_types: rec.impersonate_claim_types,
        dpop: rec.dpop,
        exchange: rec.exchange,
    })
}

async fn import(state: &AdminHttp, req: &Request<'_>) -> Answer {
    let b: Import = body(req.call)?;
    let text = b.statement.trim();
    let trust = state.app.trust();
    let at = now();
    let _one = state.changes.lock().await;
    if crate::vendor::revocations::looks_like_revocations(text) {
        let v = crate::vendor::revocations::verify(text, &trust, at).map_err(vendor_refused)?;
        let cmd = Command::ClientVendorRevoke {
            vendor: v.vendor,
            ids: v.list.revoked_client_ids,
        };
        let reply = change(state, &cmd, req.caller).await?;
        return Ok((
            StatusCode::OK,
            json!({"item": null, "message": message(reply)}),
        ));
    }
    let v = crate::vendor::statement::verify(text, &trust, at).map_err(vendor_refused)?;
    let import = VendorImport::of(v, text);
    let id = import.statement.client_id.clone();
    let reply = change(state, &Command::ClientImport(import), req.caller).await?;
    let item = client_item(state, &id).await?;
    Ok((
        StatusCode::CREATED,
        json!({"item": item, "message": message(reply)}),
    ))
}

fn message(reply: Reply) -> String {
    match reply {
        Reply::Text(t) => t.trim_end().to_owned(),
        _ => "done".to_owned(),
    }
}

fn vendor_refused(r: crate::vendor::Refusal) -> ApiError {
    let (_, description) = admin::describe_refusal(&r);
    refusal(
        StatusCode::BAD_REQUEST,
        "invalid_request",
        &format!("refused: {description}; nothing was imported"),
    )
}

async fn user_item(state: &AdminHttp, name: &str) -> Result<Value, ApiError> {
    let rec = state.app.store.user(name).await?;
    rec.map(|u| items::user_item(&admin::UserView::of(name.to_owned(), u)))
        .ok_or_else(|| refusal(StatusCode::NOT_FOUND, "not_found", "no such user"))
}

async fn user_change(state: &AdminHttp, op: Op, req: &Request<'_>) -> Answer {
    let name = id(req)?.to_owned();
    let _: Empty = body(req.call)?;
    let cmd = if op == Op::UserDisable {
        Command::UserDisable { name: name.clone() }
    } else {
        Command::UserEnable { name: name.clone() }
    };
    let _one = state.changes.lock().await;
    let before = user_item(state, &name).await?;
    precondition(req.call, &before)?;
    let reply = change(state, &cmd, req.caller).await?;
    done(user_item(state, &name).await?, reply)
}

async fn key_list(state: &AdminHttp, q: &ListQuery) -> Result<Value, ApiError> {
    let Reply::Keys(keys) = read(state, &Command::KeysList).await? else {
        return Err(unexpected());
    };
    let entries = keys
        .iter()
        .map(|k| {
            let item = json!({
                "kid": k.kid,
                "state": k.state,
                "created": k.created_at,
                "signs_from": k.signs_from,
                "superseded_at": k.superseded_at,
                "retires_at": k.retires_at,
            });
            (format!("{:010}", k.kid), k.kid.to_string(), item)
        })
        .collect();
    Ok(items::page(entries, q))
}

/// The edges' report as JSON with `ready_to_rotate` and its `etag`, and whether it is ready.
async fn edges(state: &AdminHttp) -> Result<(Value, bool), ApiError> {
    let Reply::Edges(report) = read(state, &Command::Edges).await? else {
        return Err(unexpected());
    };
    let ready = report.ready_to_promote(admin::RECENT_EDGE_SECONDS);
    let mut v = serde_json::to_value(&report).map_err(|e| ApiError::internal(&e))?;
    v["ready_to_rotate"] = json!(ready);
    Ok((v, ready))
}

/// `keys/rotate`: with no key held, publish one (held until the edges have it); with one held
/// and every recent edge holding it, promote it; else 409.
async fn rotate(state: &AdminHttp, req: &Request<'_>) -> Answer {
    let _: Empty = body(req.call)?;
    let _one = state.changes.lock().await;
    let (report, ready) = edges(state).await?;
    let held = report["held"].as_bool().unwrap_or(false);
    let cmd = match (held, report["next"].as_u64(), ready) {
        (false, None, _) => Command::KeysPublish,
        (true, Some(kid), true) => Command::KeysPromote {
            kid: u32::try_from(kid).map_err(|e| ApiError::internal(&e))?,
        },
        _ => {
            return Err(refusal(
                StatusCode::CONFLICT,
                "conflict",
                "the edges are not ready: some recent edge lacks the next key",
            ))
        }
    };
    let reply = change(state, &cmd, req.caller).await?;
    let message = match reply {
        Reply::Published(kid) => {
            format!("key {kid} published and held; rotate again once every edge holds it")
        }
        other => message(other),
    };
    let (after, _) = edges(state).await?;
    Ok((StatusCode::OK, json!({"item": after, "message": message})))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::StoreError;

    fn refused(kind: RefusalKind) -> AdminError {
        AdminError::Refused {
            kind,
            why: "why it was refused".into(),
        }
    }

    #[test]
    fn each_kind_of_refusal_has_its_status_and_code() {
        for (kind, status, code) in [
            (RefusalKind::NotFound, 404, "not_found"),
            (RefusalKind::Invalid, 400, "invalid_request"),
            (RefusalKind::Conflict, 409, "conflict"),
        ] {
            let e = failed(refused(kind));
            assert_eq!((e.status.as_u16(), e.code), (status, code), "{kind:?}");
            assert_eq!(e.description, "why it was refused", "{kind:?}");
        }
    }

    #[test]
    fn the_wording_of_a_refusal_does_not_choose_its_status() {
        for (kind, why) in [
            (
                RefusalKind::Conflict,
                "no rotation is pending, invalid state",
            ),
            (RefusalKind::Invalid, "no such thing is malformed"),
            (RefusalKind::NotFound, "invalid or malformed"),
        ] {
            let e = failed(AdminError::Refused {
                kind,
                why: why.into(),
            });
            assert_eq!(e.status, refusal_status(kind).0, "{why}");
        }
    }

    #[test]
    fn a_vendors_refusal_is_400_and_the_stores_failure_is_not_a_refusal() {
        let e = failed(AdminError::Vendor(crate::vendor::Refusal::Claim(
            "client_id",
        )));
        assert_eq!((e.status.as_u16(), e.code), (400, "invalid_request"));
        let e = failed(AdminError::Store(StoreError::Corrupt("clients")));
        assert!(e.status.is_server_error(), "{:?}", e.status);
    }
}
