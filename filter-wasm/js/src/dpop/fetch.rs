//! `DpopKey.fetch`: the platform's `fetch` with a fresh proof in the `DPoP` header (and the token
//! under the DPoP scheme), and RFC 9449 section 8's nonce dance done once: when the answer asks
//! for a nonce (`401` with `WWW-Authenticate: DPoP error="use_dpop_nonce"` from an API, `400`
//! with `{"error": "use_dpop_nonce"}` from a token endpoint) and carries `DPoP-Nonce`, the
//! request is sent again, with a new proof carrying that nonce. The last nonce of each origin is
//! kept and put in the next proofs to it, so a server that requires nonces is asked once, not at
//! every request.

use super::{call, error, get, htu, DpopKey};
use js_sys::{Object, Promise, Reflect};
use std::cell::RefCell;
use std::collections::BTreeMap;
use std::rc::Rc;
use wasm_bindgen::prelude::*;
use wasm_bindgen_futures::{future_to_promise, JsFuture};

/// The last nonce of each origin (`scheme://host[:port]`).
#[derive(Clone, Default)]
pub(super) struct Nonces(Rc<RefCell<BTreeMap<String, String>>>);

/// The origin part of an `htu`.
fn origin(htu: &str) -> String {
    let after_scheme = htu.find("://").map_or(0, |i| i + 3);
    let end = htu[after_scheme..]
        .find('/')
        .map_or(htu.len(), |i| after_scheme + i);
    htu[..end].to_owned()
}

fn header(response: &JsValue, name: &str) -> Option<String> {
    call(&get(response, "headers"), "get", &[name.into()])
        .ok()
        .and_then(|v| v.as_string())
}

/// Whether `response` asks for a nonce (and so for the request again, with one).
async fn asks_for_nonce(response: &JsValue) -> bool {
    match get(response, "status").as_f64().map(|s| s as u32) {
        Some(401) => {
            header(response, "WWW-Authenticate").is_some_and(|c| c.contains("use_dpop_nonce"))
        }
        Some(400) => {
            let Ok(copy) = call(response, "clone", &[]) else {
                return false;
            };
            let Ok(json) = call(&copy, "json", &[]) else {
                return false;
            };
            let body = JsFuture::from(Promise::from(json)).await;
            body.is_ok_and(|b| get(&b, "error").as_string().as_deref() == Some("use_dpop_nonce"))
        }
        _ => false,
    }
}

#[wasm_bindgen]
impl DpopKey {
    /// `fetch(url, init)` with `DPoP: <a fresh proof>` (and `Authorization: DPoP <token>` when
    /// `init.accessToken` is given), sent once more with the server's nonce when it asks for one.
    /// The body must be one `fetch` can send twice (a string, `URLSearchParams`, `FormData`, a
    /// `Blob` or a buffer; not a stream).
    #[wasm_bindgen(unchecked_return_type = "Promise<Response>")]
    pub fn fetch(
        &self,
        #[wasm_bindgen(unchecked_param_type = "string | URL")] url: JsValue,
        #[wasm_bindgen(unchecked_optional_param_type = "DpopFetchInit | null")] init: Option<
            Object,
        >,
    ) -> Promise {
        let key = self.clone();
        future_to_promise(async move { key.fetch_with_nonce(url, init.unwrap_or_default()).await })
    }
}

impl DpopKey {
    async fn fetch_with_nonce(&self, url: JsValue, init: Object) -> Result<JsValue, JsValue> {
        let origin = origin(&htu(&url)?);
        let known = self.nonces.0.borrow().get(&origin).cloned();
        let first = self.send(&url, &init, known.as_deref()).await?;
        let Some(nonce) = header(&first, "DPoP-Nonce") else {
            return Ok(first);
        };
        self.nonces.0.borrow_mut().insert(origin, nonce.clone());
        if known.as_deref() != Some(nonce.as_str()) && asks_for_nonce(&first).await {
            return self.send(&url, &init, Some(&nonce)).await;
        }
        Ok(first)
    }

    async fn send(
        &self,
        url: &JsValue,
        init: &Object,
        nonce: Option<&str>,
    ) -> Result<JsValue, JsValue> {
        let method = get(init, "method");
        let token = get(init, "accessToken");
        let request = Object::new();
        let method = if method.is_undefined() {
            "GET".into()
        } else {
            method
        };
        for (name, value) in [
            ("method", method),
            ("url", url.clone()),
            ("accessToken", token.clone()),
            ("nonce", nonce.map_or(JsValue::UNDEFINED, JsValue::from)),
        ] {
            Reflect::set(&request, &name.into(), &value)?;
        }
        let proof = self.make_proof(&request).await?;
        let global = js_sys::global();
        let headers_class: js_sys::Function = get(&global, "Headers")
            .dyn_into()
            .map_err(|_| error("DpopKey.fetch: no fetch here (Node 20 or later, or a browser)"))?;
        let given = get(init, "headers");
        let headers = Reflect::construct(&headers_class, &js_sys::Array::of1(&given))?;
        call(&headers, "set", &["DPoP".into(), proof.into()])?;
        if let Some(token) = token.as_string() {
            call(
                &headers,
                "set",
                &["Authorization".into(), format!("DPoP {token}").into()],
            )?;
        }
        let options = Object::assign(&Object::new(), init);
        Reflect::delete_property(&options, &"accessToken".into())?;
        Reflect::set(&options, &"headers".into(), &headers)?;
        let pending = call(&global, "fetch", &[url.clone(), options.into()])?;
        JsFuture::from(Promise::from(pending)).await
    }
}
