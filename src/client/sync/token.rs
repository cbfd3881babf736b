//! Tokens: the app's token callback is asked before each Hello, and, when the token is a
//! JWT that expires, again shortly before its `exp`, the new token going to the relay in an
//! `Auth` message (the relay refusing one with `unauthenticated` makes the connection start
//! over instead).

use std::rc::Rc;

use js_sys::Reflect;
use wasm_bindgen::closure::Closure;
use wasm_bindgen::{JsCast, JsValue};

use super::connection::{clear_timeout, set_timeout};
use super::Sync;
use hearth_core::protocol::ClientMessage;

impl Sync {
    /// Asks the token callback (if any) for a fresh token; true when it gave one.
    pub(super) async fn refresh_token(&self) -> bool {
        let Some(p) = &self.token_provider else {
            return false;
        };
        let Ok(v) = p.call0(&JsValue::NULL) else {
            return false;
        };
        let v = match v.dyn_into::<js_sys::Promise>() {
            Ok(p) => wasm_bindgen_futures::JsFuture::from(p)
                .await
                .unwrap_or(JsValue::NULL),
            Err(v) => v,
        };
        match v.as_string() {
            Some(t) => {
                *self.token.borrow_mut() = t;
                true
            }
            None => false,
        }
    }

    /// With a token callback and a token that expires (a JWT's `exp`), refreshes it shortly
    /// before then and sends it to the relay (`Auth`), again for each new token.
    pub(super) fn schedule_token_refresh(self: &Rc<Self>) {
        if let Some((_, id)) = self.auth_timer.borrow_mut().take() {
            clear_timeout(id);
        }
        if self.token_provider.is_none() {
            return;
        }
        let Some(exp_ms) = jwt_expiry_ms(&self.token.borrow()) else {
            return;
        };
        let left = exp_ms - js_sys::Date::now();
        // 30 s ahead, or a quarter of what is left for short-lived tokens.
        let delay = if left > 120_000.0 {
            left - 30_000.0
        } else {
            (left * 0.75).max(500.0)
        };
        let w = Rc::downgrade(self);
        let f = Closure::<dyn FnMut()>::new(move || {
            let Some(s) = w.upgrade() else { return };
            wasm_bindgen_futures::spawn_local(async move {
                if s.refresh_token().await && s.open.get() {
                    let token = s.token.borrow().clone();
                    s.send(&ClientMessage::Auth { token });
                    s.schedule_token_refresh();
                }
            });
        });
        if let Some(id) = set_timeout(f.as_ref().unchecked_ref(), delay) {
            *self.auth_timer.borrow_mut() = Some((f, id));
        }
    }
}

/// When a JWT expires (its `exp`, in ms since the epoch); `None` for anything else.
fn jwt_expiry_ms(token: &str) -> Option<f64> {
    // The payload is base64url without padding: map it to the standard alphabet.
    let payload: String = token
        .split('.')
        .nth(1)?
        .chars()
        .map(|c| match c {
            '-' => '+',
            '_' => '/',
            c => c,
        })
        .collect();
    let json = String::from_utf8(crate::client::js::base64_decode(&payload)?).ok()?;
    let claims = js_sys::JSON::parse(&json).ok()?;
    Some(Reflect::get(&claims, &"exp".into()).ok()?.as_f64()? * 1000.0)
}
