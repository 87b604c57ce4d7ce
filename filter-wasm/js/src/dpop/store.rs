//! The browser's keeping of proof keys: IndexedDB database `mms-dpop`, object store `keys`, one
//! `CryptoKeyPair` per name, stored as the structured clone of the key objects (a
//! non-extractable key stays non-extractable there: its bytes are never exposed to script).

use super::{call, error, get};
use js_sys::{Function, Promise};
use wasm_bindgen::prelude::*;
use wasm_bindgen_futures::JsFuture;

const DATABASE: &str = "mms-dpop";
const STORE: &str = "keys";

/// The result of an IndexedDB request, or its error.
async fn settle(request: &JsValue) -> Result<JsValue, JsValue> {
    let promise = Promise::new(&mut |resolve: Function, reject: Function| {
        let target = request.clone();
        let ok = Closure::once_into_js(move |_event: JsValue| {
            let _ = resolve.call1(&JsValue::NULL, &get(&target, "result"));
        });
        let target = request.clone();
        let failed = Closure::once_into_js(move |event: JsValue| {
            // Handled here: the error is the promise's, not an uncaught one.
            let _ = call(&event, "preventDefault", &[]);
            let _ = reject.call1(&JsValue::NULL, &get(&target, "error"));
        });
        let _ = js_sys::Reflect::set(request, &"onsuccess".into(), &ok);
        let _ = js_sys::Reflect::set(request, &"onerror".into(), &failed);
    });
    JsFuture::from(promise).await
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
    let upgrade = Closure::once_into_js(move |_event: JsValue| {
        let db = get(&target, "result");
        let _ = call(&db, "createObjectStore", &[STORE.into()]);
    });
    js_sys::Reflect::set(&request, &"onupgradeneeded".into(), &upgrade)?;
    settle(&request).await
}

/// Resolves when the transaction `tx` has committed (its `complete` event), rejects when it
/// fails or aborts: a key is only kept once it is on disk.
fn committed(tx: &JsValue) -> JsFuture {
    let promise = Promise::new(&mut |resolve: Function, reject: Function| {
        let done = Closure::once_into_js(move |_event: JsValue| {
            let _ = resolve.call0(&JsValue::NULL);
        });
        let target = tx.clone();
        let failed = Function::from(Closure::once_into_js(move |_event: JsValue| {
            let _ = reject.call1(&JsValue::NULL, &get(&target, "error"));
        }));
        let _ = js_sys::Reflect::set(tx, &"oncomplete".into(), &done);
        let _ = js_sys::Reflect::set(tx, &"onerror".into(), &failed);
        let _ = js_sys::Reflect::set(tx, &"onabort".into(), &failed);
    });
    JsFuture::from(promise)
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
