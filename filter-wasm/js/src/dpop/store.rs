//! The browser's keeping of proof keys: IndexedDB database `mms-dpop`, object store `keys`, one
//! `CryptoKeyPair` per name, stored as the structured clone of the key objects (a
//! non-extractable key stays non-extractable there: its bytes are never exposed to script).

use super::{call, error, get};
use js_sys::{Function, Promise, Reflect};
use wasm_bindgen::prelude::*;
use wasm_bindgen_futures::JsFuture;

const DATABASE: &str = "mms-dpop";
const STORE: &str = "keys";

/// What an event does to the promise [`first_event`] returns.
#[derive(Clone, Copy)]
enum Outcome {
    /// Resolves it with the target's `result` (a request's `success`).
    Result,
    /// Resolves it (a transaction's `complete`).
    Done,
    /// Rejects it with the target's `error`, the event handled (`error`, `abort`).
    Error,
}

/// Event handlers set on a target; removed (and their closures freed) when this drops, so that
/// no event can reach a freed closure, whether the future that holds them ran or not.
struct Handlers {
    target: JsValue,
    events: &'static [(&'static str, Outcome)],
    _closures: Vec<Closure<dyn FnMut(JsValue)>>,
}

impl Drop for Handlers {
    fn drop(&mut self) {
        for (name, _) in self.events {
            let _ = Reflect::set(&self.target, &(*name).into(), &JsValue::NULL);
        }
    }
}

/// The first of `events` (handler property and outcome) on `target`. The handlers are set now,
/// before anything can fire, and removed when the returned future completes or drops.
fn first_event(
    target: &JsValue,
    events: &'static [(&'static str, Outcome)],
) -> impl std::future::Future<Output = Result<JsValue, JsValue>> {
    let mut closures = Vec::new();
    let promise = Promise::new(&mut |resolve: Function, reject: Function| {
        for &(name, outcome) in events {
            let (t, resolve, reject) = (target.clone(), resolve.clone(), reject.clone());
            let handler = Closure::<dyn FnMut(JsValue)>::new(move |event: JsValue| {
                let _ = match outcome {
                    Outcome::Result => resolve.call1(&JsValue::NULL, &get(&t, "result")),
                    Outcome::Done => resolve.call0(&JsValue::NULL),
                    Outcome::Error => {
                        // Handled here: the error is the promise's, not an uncaught one.
                        let _ = call(&event, "preventDefault", &[]);
                        reject.call1(&JsValue::NULL, &get(&t, "error"))
                    }
                };
            });
            let _ = Reflect::set(target, &name.into(), handler.as_ref());
            closures.push(handler);
        }
    });
    let handlers = Handlers {
        target: target.clone(),
        events,
        _closures: closures,
    };
    async move {
        let _handlers = handlers;
        JsFuture::from(promise).await
    }
}

/// The result of an IndexedDB request, or its error.
fn settle(request: &JsValue) -> impl std::future::Future<Output = Result<JsValue, JsValue>> {
    first_event(
        request,
        &[("onsuccess", Outcome::Result), ("onerror", Outcome::Error)],
    )
}

/// Resolves when the transaction `tx` has committed (its `complete` event), rejects when it
/// fails or aborts: a key is only kept once it is on disk.
fn committed(tx: &JsValue) -> impl std::future::Future<Output = Result<JsValue, JsValue>> {
    first_event(
        tx,
        &[
            ("oncomplete", Outcome::Done),
            ("onerror", Outcome::Error),
            ("onabort", Outcome::Error),
        ],
    )
}

/// The database, created on first use.
async fn database() -> Result<JsValue, JsValue> {
    let idb = get(&js_sys::global(), "indexedDB");
    if !idb.is_object() {
        return Err(error(
            "DpopKey.open: no IndexedDB here (in Node, use DpopKey.generate() and keep the key)",
        ));
    }
    let request = call(&idb, "open", &[DATABASE.into(), 1.into()])?;
    let target = request.clone();
    let upgrade = Closure::<dyn FnMut(JsValue)>::new(move |_event: JsValue| {
        let db = get(&target, "result");
        let _ = call(&db, "createObjectStore", &[STORE.into()]);
    });
    Reflect::set(&request, &"onupgradeneeded".into(), upgrade.as_ref())?;
    let _upgrade = Handlers {
        target: request.clone(),
        events: &[("onupgradeneeded", Outcome::Done)],
        _closures: vec![upgrade],
    };
    settle(&request).await
}

/// Runs `op` with `args` on the object store in a transaction of `mode` and waits for it to
/// commit, then closes the database.
async fn with_store(mode: &str, op: &str, args: &[JsValue]) -> Result<JsValue, JsValue> {
    let db = database().await?;
    let result = async {
        let tx = call(&db, "transaction", &[STORE.into(), mode.into()])?;
        let done = committed(&tx);
        let store = call(&tx, "objectStore", &[STORE.into()])?;
        let value = settle(&call(&store, op, args)?).await?;
        done.await?;
        Ok(value)
    }
    .await;
    let _ = call(&db, "close", &[]);
    result
}

/// The key pair stored under `name`, if any.
pub(super) async fn load(name: &str) -> Result<Option<JsValue>, JsValue> {
    let found = with_store("readonly", "get", &[name.into()]).await?;
    Ok((!found.is_undefined() && !found.is_null()).then_some(found))
}

/// Stores `pair` under `name` unless a key is already there; whether it was stored.
pub(super) async fn add(name: &str, pair: &JsValue) -> Result<bool, JsValue> {
    match with_store("readwrite", "add", &[pair.clone(), name.into()]).await {
        Ok(_) => Ok(true),
        Err(e) if get(&e, "name").as_string().as_deref() == Some("ConstraintError") => Ok(false),
        Err(e) => Err(e),
    }
}

/// Deletes the key stored under `name` (nothing if there is none).
pub(super) async fn remove(name: &str) -> Result<(), JsValue> {
    with_store("readwrite", "delete", &[name.into()])
        .await
        .map(drop)
}
